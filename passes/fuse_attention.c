/* Multi-head attention -> one Attention node (ir/ops.def), which the GPU
 * runs as one kernel that never writes the [B,H,Sq,Sk] scores.
 *
 * Matched, walking up from the second MatMul (all tensors 4-D):
 *   Y = MatMul(P', V)
 *   P' = Where(IsNaN(P), 0, P)          optional: nan_to_zero
 *   P = Softmax(X) over the last axis
 *   X = Add(S, mask) or Add(mask, S)    optional mask
 *   S = scalings(MatMul(scalings(Q), scalings(Kt)))
 *   Kt = Transpose(scalings(K), perm [0,1,3,2])
 *        or Transpose(K', perm [0,2,3,1]) (K' = K stored [B,S,H,D])
 *        or Reshape(Transpose(Reshape(scalings(K), [B*H,S,D]), [0,2,1]),
 *           [B,H,D,S]) (the dynamo exporter's SDPA: the same bytes)
 *        or any other 4-D value (K stored transposed, [B,H,D,S], as timm's
 *           2-D attention of CoAtNet/MaxViT slices it): the scores' MatMul
 *           node becomes Transpose(Kt, perm [0,1,3,2]) -> K, a copy of
 *           B*H*S*D elements where the [B,H,Sq,Sk] scores went twice
 * where scalings() is any chain of Mul/Div by constant scalars (either
 * operand of a Mul): the TorchScript SDPA export scales Q and Kt by
 * sqrt(scale) each, eager exports divide S by sqrt(D). Their product is the
 * node's scale attribute. Then the head splits: Q, K or V made by
 * Transpose(x, perm [0,2,1,3]) is read as x, stored [B,S,H,D], by strides;
 * and Y read only by such a Transpose (the head merge) is written in that
 * Transpose's layout (attribute bshd, one flag per Q, K, V, Y).
 * Conditions: S, every value between it and Y, and the Q/K/V-side values
 * that get removed are read only inside the pattern and are not graph
 * outputs (a Q or K scaling read elsewhere stays, and the match stops
 * there); gpuc_attention_lowerable (ir/infer_linalg.h) accepts the shapes
 * and dtypes, so codegen never meets an Attention it cannot run.
 * A constant mask of zeros only is dropped (the Add is still absorbed).
 * Swin's shifted windows: X = Reshape(Add(Reshape(X1, [B,P,H,Sq,Sk]), W),
 * [B*P,H,Sq,Sk]) with W a constant per window ([P,1,Sq,Sk], the same for
 * every image) and X1 the scores (+ a constant [1,H,Sq,Sk] bias): the
 * mask becomes one constant bias + W [P,H,Sq,Sk] and attribute
 * mask_period P (merged batch b reads mask batch b mod P).
 * Swin V2's cosine attention: S = Mul(MatMul(Q, Kt), c) with c a constant
 * per head ([H,1,1]): the Mul node stays, rewritten to Mul(Q, c), which
 * the Attention reads as Q.
 * Not matched: a Softmax kept in fp32 between Casts (an autocast export),
 * masks made inside the pattern by Where on a bool mask (the Where stays,
 * its output is the mask), scalings applied before the head split.
 * Runs before the fp16 pass: Attention then computes in fp32 registers
 * on half storage like the nodes it replaces. */
#include "passes.h"
#include "infer_linalg.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
  Graph *g;
  const int *readers;
  int chain[32];       /* nodes to remove, in the order found */
  int nchain;
  int head_mul;        /* node of S = Mul(MatMul, c[H,1,1]), kept and turned into Mul(Q, c); or -1 */
  int head_c;          /* that c */
  int mm1;             /* the scores' MatMul node */
  bool k_raw;          /* Kt made by no Transpose: the MatMul node becomes Transpose(Kt) -> K */
  bool kt_copy;        /* that is allowed (GPUC_NO_ATTENTION_KT=1: not, a GPU A/B) */
} Match;

static Node *producer(Match *m, int v, GpucOp op) {
  if (v < 0) return NULL;
  int p = m->g->values[v].producer;
  return p >= 0 && m->g->nodes[p].op == op ? &m->g->nodes[p] : NULL;
}

/* v is read once (by the pattern) and is not a graph output */
static bool private_value(const Match *m, int v) {
  return v >= 0 && m->readers[v] == 1 && !m->g->values[v].is_output;
}

static void take(Match *m, int v) {
  if (m->nchain < 32) m->chain[m->nchain++] = m->g->values[v].producer;
}

/* a one-element float constant: its value in *x */
static bool const_scalar(const Graph *g, int v, double *x) {
  const Value *val = &g->values[v];
  if (!val->is_const || !val->t.data || !gpuc_dtype_is_float(val->t.dt) || gpuc_numel(&val->t) != 1)
    return false;
  *x = gpuc_get_f64(&val->t, 0);
  return true;
}

/* Strip Mul/Div-by-constant-scalar nodes off v (multiplying *scale), as
 * far as each value is private; returns the innermost value. `removable`
 * says whether v itself may be removed (false: v stays for other readers,
 * so nothing above it may be removed either and stripping stops). */
static int strip_scalings(Match *m, int v, double *scale, bool removable) {
  for (int guard = 0; guard < 8 && removable && private_value(m, v); guard++) {
    int p = m->g->values[v].producer;
    if (p < 0) break;
    const Node *n = &m->g->nodes[p];
    double c;
    if (n->op == GPUC_OP_MUL && const_scalar(m->g, n->in[1], &c)) { take(m, v); *scale *= c; v = n->in[0]; }
    else if (n->op == GPUC_OP_MUL && const_scalar(m->g, n->in[0], &c)) { take(m, v); *scale *= c; v = n->in[1]; }
    else if (n->op == GPUC_OP_DIV && const_scalar(m->g, n->in[1], &c) && c != 0) { take(m, v); *scale /= c; v = n->in[0]; }
    else break;
  }
  return v;
}

/* a constant mask of zeros only (the dynamo exporter's Hugging Face ViT:
 * Where(Expand(all-true), 0, -inf) folded to [B,1,S,S]): adding it
 * changes nothing, so the Attention reads no mask */
static bool zero_mask(const Graph *g, int v) {
  const Value *val = &g->values[v];
  if (!val->is_const || !val->t.data || !gpuc_dtype_is_float(val->t.dt)) return false;
  int64_t n = gpuc_numel(&val->t);
  for (int64_t i = 0; i < n; i++)
    if (gpuc_get_f64(&val->t, i) != 0) return false;
  return true;
}

static bool perm_is(const Node *t, int a, int b, int c, int d) {
  const int64_t *p;
  return t && gpuc_attr_ints(t, "perm", &p) == 4 && p[0] == a && p[1] == b && p[2] == c && p[3] == d;
}

/* a static shape equal to dims[0..rank) */
static bool dims_are(const Tensor *t, int rank, const int64_t *dims) {
  if (t->rank != rank || !gpuc_shape_known(t)) return false;
  for (int d = 0; d < rank; d++)
    if (t->dims[d] != dims[d]) return false;
  return true;
}

/* Kt = Reshape(Transpose(Reshape(K', [B*H,S,D]), perm [0,2,1]), [B,H,D,S])
 * (the dynamo exporter's K transpose, written on 3-D batches): the same
 * bytes as Transpose(K', perm [0,1,3,2]), with K' 4-D [B,H,S,D]. All three
 * values private (removed with the pattern): K', or -1. */
static int batched_last2_transpose(Match *m, int kt) {
  Node *r2 = private_value(m, kt) ? producer(m, kt, GPUC_OP_RESHAPE) : NULL;
  int tv = r2 ? r2->in[0] : -1;
  Node *t = private_value(m, tv) ? producer(m, tv, GPUC_OP_TRANSPOSE) : NULL;
  const int64_t *p;
  if (!t || gpuc_attr_ints(t, "perm", &p) != 3 || p[0] != 0 || p[1] != 2 || p[2] != 1) return -1;
  int rv = t->in[0];
  Node *r1 = private_value(m, rv) ? producer(m, rv, GPUC_OP_RESHAPE) : NULL;
  if (!r1) return -1;
  const Tensor *k = &m->g->values[r1->in[0]].t;
  if (k->rank != 4 || !gpuc_shape_known(k)) return -1;
  int64_t B = k->dims[0], H = k->dims[1], S = k->dims[2], D = k->dims[3];
  const int64_t merged[3] = {B * H, S, D}, back[4] = {B, H, D, S};
  if (!dims_are(&m->g->values[rv].t, 3, merged) || !dims_are(&m->g->values[kt].t, 4, back)) return -1;
  take(m, kt);
  take(m, tv);
  take(m, rv);
  return r1->in[0];
}

/* Kt = Transpose(K', perm [0,1,3,2]) (or its batched 3-D form above) with
 * K' scalings of K: K, or -1.
 * Kt = Transpose(K, perm [0,2,3,1]) (the head split and the K transpose
 * merged into one): K stored [B,S,H,D], *bshd set. *kept: the
 * Transpose stays (read elsewhere), so K keeps a reader outside. */
static int untranspose(Match *m, int kt, double *scale, bool *bshd, bool *kept) {
  Node *t = producer(m, kt, GPUC_OP_TRANSPOSE);
  *bshd = perm_is(t, 0, 2, 3, 1);
  *kept = false;
  if (!t) {
    int k = batched_last2_transpose(m, kt);
    if (k >= 0) return strip_scalings(m, k, scale, true);
    /* K given transposed ([B,H,D,S]: timm's 2-D attention slices q, k, v
     * out of [B,H,3D,S]): the pattern's first MatMul node turns into
     * Transpose(Kt) -> K [B,H,S,D], a copy of K a small fraction of the
     * [B,H,Sq,Sk] scores it saves */
    if (!m->kt_copy || m->g->values[kt].t.rank != 4) return -1;
    m->k_raw = true;
    *kept = true; /* Kt stays: the Transpose reads it */
    return kt;
  }
  if (!perm_is(t, 0, 1, 3, 2) && !*bshd) return -1;
  /* a Transpose read elsewhere too stays, and so does what feeds it */
  bool removable = private_value(m, kt);
  if (removable) take(m, kt);
  *kept = !removable;
  return strip_scalings(m, t->in[0], scale, removable);
}

/* v = Transpose(x, perm [0,2,1,3]) (the head split) read only here: x,
 * which holds v stored [B,S,H,D] (*bshd set); else v */
static int unsplit_heads(Match *m, int v, bool *bshd) {
  Node *t = private_value(m, v) ? producer(m, v, GPUC_OP_TRANSPOSE) : NULL;
  if (!perm_is(t, 0, 2, 1, 3)) return v;
  take(m, v);
  *bshd = true;
  return t->in[0];
}

/* S = scalings(MatMul(scalings(Q), scalings(Kt))): sets Q and K (and
 * whether K is stored [B,S,H,D], and whether K is read elsewhere too) */
/* c, a float constant of one value per head: dims 1 but H at S's head
 * axis (rank <= 4 against 4-D S: [H,1,1], [1,H,1,1]) */
static bool per_head(const Graph *g, int c, int s) {
  const Value *cv = &g->values[c];
  const Tensor *st = &g->values[s].t;
  if (!cv->is_const || !cv->t.data || !gpuc_dtype_is_float(cv->t.dt) || cv->t.rank < 3 || cv->t.rank > 4 ||
      st->rank != 4)
    return false;
  for (int d = 0; d < cv->t.rank; d++) {
    int sd = 4 - cv->t.rank + d;
    if (cv->t.dims[d] != 1 && (sd != 1 || cv->t.dims[d] != st->dims[1])) return false;
  }
  return true;
}

static bool scores(Match *m, int s, double *scale, int *q, int *k, bool *k_bshd, bool *k_kept) {
  int mmv = strip_scalings(m, s, scale, true);
  m->head_mul = -1;
  /* Swin V2's cosine attention: S = MatMul(Q, Kt) * c[H,1,1] (its logit
   * scale per head) = MatMul(Q * c, Kt): the Mul node stays, on Q */
  Node *hm = private_value(m, mmv) ? producer(m, mmv, GPUC_OP_MUL) : NULL;
  for (int side = 0; hm && side < 2; side++) {
    if (!per_head(m->g, hm->in[1 - side], mmv) || !producer(m, hm->in[side], GPUC_OP_MATMUL)) continue;
    m->head_mul = m->g->values[mmv].producer;
    m->head_c = hm->in[1 - side];
    mmv = strip_scalings(m, hm->in[side], scale, true);
    break;
  }
  Node *mm = private_value(m, mmv) ? producer(m, mmv, GPUC_OP_MATMUL) : NULL;
  if (!mm) return false;
  m->mm1 = m->g->values[mmv].producer;
  m->k_raw = false;
  take(m, mmv);
  *q = strip_scalings(m, mm->in[0], scale, true);
  int kt = strip_scalings(m, mm->in[1], scale, true);
  *k = untranspose(m, kt, scale, k_bshd, k_kept);
  return *k >= 0;
}

/* Swin's shifted windows: the scores of B*P windows (window fastest) get
 * a per-window mask W between two Reshapes:
 *   x = Reshape(Add(Reshape(X1, [B,P,H,Sq,Sk]), W), [B*P,H,Sq,Sk])
 * (or Add(W, .)), W a constant broadcasting to [1,P,H,Sq,Sk]. Takes the
 * three nodes; X1 (the scores, plus any bias), or -1 when x is not so
 * made. *w: W's value. */
static int window_mask(Match *m, int x, int *w) {
  *w = -1;
  Node *r2 = private_value(m, x) ? producer(m, x, GPUC_OP_RESHAPE) : NULL;
  int x2 = r2 ? r2->in[0] : -1;
  Node *add = private_value(m, x2) ? producer(m, x2, GPUC_OP_ADD) : NULL;
  if (!add || add->in[0] == add->in[1]) return -1;
  for (int side = 0; side < 2; side++) {
    int r1v = add->in[side], wi = add->in[1 - side];
    Node *r1 = private_value(m, r1v) ? producer(m, r1v, GPUC_OP_RESHAPE) : NULL;
    const Value *wv = &m->g->values[wi];
    if (!r1 || !wv->is_const || !wv->t.data || wv->t.rank > 5 || !gpuc_shape_known(&wv->t)) continue;
    const Tensor *x1 = &m->g->values[r1->in[0]].t, *t5 = &m->g->values[r1v].t;
    if (x1->rank != 4 || !gpuc_shape_known(x1) || t5->rank != 5 || !gpuc_shape_known(t5)) continue;
    const int64_t merged[5] = {t5->dims[0] * t5->dims[1], t5->dims[2], t5->dims[3], t5->dims[4]};
    /* X1 [B*P,H,Sq,Sk] viewed [B,P,H,Sq,Sk]; the sum keeps that shape; back */
    if (!dims_are(x1, 4, merged) || !dims_are(&m->g->values[x2].t, 5, t5->dims) || !dims_are(&m->g->values[x].t, 4, x1->dims))
      continue;
    bool fits = true; /* W: 1 over B, 1 or the size elsewhere */
    for (int d = 0; d < wv->t.rank; d++) {
      int64_t wd = wv->t.dims[d], td = t5->dims[5 - wv->t.rank + d];
      fits &= wd == 1 || (wd == td && 5 - wv->t.rank + d > 0);
    }
    if (!fits) continue;
    take(m, x);
    take(m, x2);
    take(m, r1v);
    *w = wi;
    return r1->in[0];
  }
  return -1;
}

/* The mask of an Attention whose batch is B*P windows (window fastest):
 * bias (-1, or a constant broadcasting to [1,H,Sq,Sk]) plus window mask w
 * (broadcasting to [1,P,H,Sq,Sk]) as one [P',H',Sq',Sk'] constant, each
 * dim the larger of the two (P' is P or 1). The shape goes in dims, the
 * sum in a new value only when make (after the fusion is decided): the
 * value, 0 (shape only), or -1 (error, or -2: they do not combine). */
static int window_bias(Graph *g, int bias, int w, const char *name, bool make, int64_t dims[4], GpucErr *e) {
  const Tensor *wt = &g->values[w].t, *bt = bias >= 0 ? &g->values[bias].t : NULL;
  if (bt && (!g->values[bias].is_const || !bt->data || bt->rank > 4 || !gpuc_shape_known(bt) || bt->dt != wt->dt))
    return -2;
  if (!gpuc_dtype_is_float(wt->dt)) return -2;
  int64_t wd[4] = {1, 1, 1, 1}, bd[4] = {1, 1, 1, 1};
  for (int d = 0; d < wt->rank && d < 4; d++) wd[4 - 1 - d] = wt->dims[wt->rank - 1 - d];
  for (int d = 0; bt && d < bt->rank; d++) bd[4 - 1 - d] = bt->dims[bt->rank - 1 - d];
  if (bd[0] != 1) return -2; /* a bias per merged batch is not periodic */
  for (int d = 0; d < 4; d++) dims[d] = wd[d] > bd[d] ? wd[d] : bd[d];
  if (!make) return 0;
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) { gpuc_err_set(e, "%s: out of memory", g->path); return -1; }
  wt = &g->values[w].t; /* the values may have moved */
  bt = bias >= 0 ? &g->values[bias].t : NULL;
  Tensor *t = &g->values[v].t;
  gpuc_set_shape(t, wt->dt, 4, dims);
  if (gpuc_tensor_alloc(t, e)) return -1;
  g->values[v].is_const = true;
  int64_t ws[4], bs[4] = {0, 0, 0, 0}, idx[4];
  gpuc_attention_mask_strides(wt, ws); /* rank <= 4 here, or 5 with a leading 1 */
  if (wt->rank == 5) {
    Tensor w4 = *wt;
    w4.rank = 4;
    for (int d = 0; d < 4; d++) w4.dims[d] = wt->dims[d + 1];
    gpuc_attention_mask_strides(&w4, ws);
  }
  if (bt) gpuc_attention_mask_strides(bt, bs);
  int64_t n = gpuc_numel(t);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i;
    for (int d = 3; d >= 0; d--) { idx[d] = r % dims[d]; r /= dims[d]; }
    int64_t wi = 0, bi = 0;
    for (int d = 0; d < 4; d++) { wi += idx[d] * ws[d]; bi += idx[d] * bs[d]; }
    /* in the mask's dtype, as the two Adds of the graph rounded */
    double sum = gpuc_get_f64(wt, wi) + (bt ? gpuc_get_f64(bt, bi) : 0);
    gpuc_set_f64(t, i, sum);
  }
  return v;
}

static bool softmax_last_axis(const Graph *g, const Node *sm) {
  int64_t axis = gpuc_attr_i(sm, "axis", g->opset >= 13 ? -1 : 1);
  return axis == -1 || axis == 3; /* on 4-D: the same before and after opset 13 */
}

/* Match the attention ending at MatMul node i; on success rewrite node i
 * into Attention and mark the absorbed nodes in drop. */
static int match(Graph *g, int i, const int *readers, const int *last, bool *drop, bool windows, bool kt_copy,
                 GpucErr *e) {
  Match m = {.g = g, .readers = readers, .kt_copy = kt_copy};
  Node *mm2 = &g->nodes[i];
  int pv = mm2->in[0], v = mm2->in[1];
  bool nan0 = false;
  Node *w = private_value(&m, pv) ? producer(&m, pv, GPUC_OP_WHERE) : NULL;
  if (w) { /* Where(IsNaN(P), 0, P) */
    double zero;
    Node *isnan = producer(&m, w->in[0], GPUC_OP_ISNAN);
    if (!isnan || isnan->in[0] != w->in[2] || !private_value(&m, w->in[0]) || !const_scalar(g, w->in[1], &zero) ||
        zero != 0 || readers[w->in[2]] != 2 || g->values[w->in[2]].is_output)
      return 0;
    take(&m, pv);
    take(&m, w->in[0]);
    pv = w->in[2];
    nan0 = true;
  } else if (!private_value(&m, pv)) return 0;
  Node *sm = producer(&m, pv, GPUC_OP_SOFTMAX);
  if (!sm || !softmax_last_axis(g, sm)) return 0;
  take(&m, pv);
  int x = sm->in[0], q = -1, k = -1, mask = -1, wmask = -1;
  int x1 = windows ? window_mask(&m, x, &wmask) : -1;
  if (x1 >= 0) x = x1;
  bool bshd[4] = {false, false, false, false}; /* Q, K, V, Y stored [B,S,H,D] */
  bool k_kept = false;
  double scale = 1;
  Node *add = private_value(&m, x) ? producer(&m, x, GPUC_OP_ADD) : NULL;
  int base = m.nchain;
  bool found = false;
  for (int side = 0; add && side < 2 && !found; side++) { /* the mask on either side */
    if (add->in[0] == add->in[1]) break;
    m.nchain = base;
    take(&m, x);
    scale = 1;
    found = scores(&m, add->in[side], &scale, &q, &k, &bshd[1], &k_kept);
    mask = add->in[1 - side];
  }
  if (!found) { /* no mask: X is the scores */
    m.nchain = base;
    scale = 1;
    mask = -1;
    found = scores(&m, x, &scale, &q, &k, &bshd[1], &k_kept);
  }
  if (!found) return 0;
  if (mask >= 0 && zero_mask(g, mask)) mask = -1; /* the Add is absorbed all the same */
  int64_t wdims[4], period = 0;
  Tensor wtmp; /* the summed window mask's shape, for the checks below */
  if (wmask >= 0) {
    if (window_bias(g, mask, wmask, NULL, false, wdims, e) < 0) return 0;
    wtmp = g->values[wmask].t;
    wtmp.data = NULL;
    gpuc_set_shape(&wtmp, wtmp.dt, 4, wdims);
    period = wdims[0] > 1 ? wdims[0] : 0;
  }
  /* the head splits (and the merge after) as strides of the kernel */
  if (m.head_mul < 0) q = unsplit_heads(&m, q, &bshd[0]); /* else the Mul reads Q as it is */
  if (!bshd[1] && !k_kept) k = unsplit_heads(&m, k, &bshd[1]);
  v = unsplit_heads(&m, v, &bshd[2]);
  int y = mm2->out[0];
  Node *merge = private_value(&m, y) && last[y] >= 0 ? &g->nodes[last[y]] : NULL;
  if (merge && merge->op == GPUC_OP_TRANSPOSE && perm_is(merge, 0, 2, 1, 3)) {
    take(&m, merge->out[0]);
    bshd[3] = true;
    y = merge->out[0];
  }
  if (m.nchain >= 32) return 0; /* a chain this long was cut short */
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr) * 4);
  int64_t *flags = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * 4);
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
  if (!in || !at || !flags) return gpuc_err_set(e, "%s: out of memory", g->path);
  for (int i = 0; i < 4; i++) flags[i] = bshd[i];
  at[0] = (Attr){.name = "scale", .kind = GPUC_ATTR_FLOAT, .f = (float)scale};
  at[1] = (Attr){.name = "nan_to_zero", .kind = GPUC_ATTR_INT, .i = nan0};
  at[2] = (Attr){.name = "bshd", .kind = GPUC_ATTR_INTS, .n = 4, .ints = flags};
  at[3] = (Attr){.name = "mask_period", .kind = GPUC_ATTR_INT, .i = period};
  int nattr = period ? 4 : 3;
  Node probe = {.op = GPUC_OP_ATTENTION, .name = mm2->name, .nattr = nattr, .attrs = at};
  Tensor ktr; /* K as the Transpose will make it */
  if (m.k_raw) {
    ktr = g->values[k].t;
    ktr.data = NULL;
    int64_t kd[4] = {ktr.dims[0], ktr.dims[1], ktr.dims[3], ktr.dims[2]};
    gpuc_set_shape(&ktr, ktr.dt, 4, kd);
  }
  const Tensor *qt = &g->values[q].t, *kt = m.k_raw ? &ktr : &g->values[k].t, *vt = &g->values[v].t;
  const Tensor *mt = wmask >= 0 ? &wtmp : mask >= 0 ? &g->values[mask].t : NULL;
  GpucAttnGeom geo;
  if (gpuc_attention_geom(&probe, qt, kt, vt, &geo) || !gpuc_attention_lowerable(&geo, qt, kt, vt, mt))
    return 0;
  /* the result has the shape the pattern's result had */
  const Tensor *yt = &g->values[y].t;
  int64_t want[4] = {geo.B, bshd[3] ? geo.Sq : geo.H, bshd[3] ? geo.H : geo.Sq, geo.Dv};
  if (yt->rank != 4 || yt->dt != qt->dt)
    return 0;
  for (int d = 0; d < 4; d++)
    if (yt->dims[d] != want[d]) return 0;
  if (m.head_mul >= 0) { /* Mul(S, c) -> Mul(Q, c): its output value now Q's shape */
    Node *hn = &g->nodes[m.head_mul];
    int *hin = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
    if (!hin) return gpuc_err_set(e, "%s: out of memory", g->path);
    hin[0] = q;
    hin[1] = m.head_c;
    hn->in = hin;
    hn->nin = 2;
    Tensor *qs = &g->values[hn->out[0]].t;
    gpuc_set_shape(qs, g->values[q].t.dt, 4, g->values[q].t.dims);
    q = hn->out[0];
  }
  if (wmask >= 0) { /* bias + window mask, one constant [P,H,Sq,Sk] */
    char name[512];
    snprintf(name, sizeof name, "%s/window_mask", mm2->name ? mm2->name : "attention");
    mask = window_bias(g, mask, wmask, name, true, wdims, e);
    if (mask < 0) return -1;
    mm2 = &g->nodes[i];
  }
  /* the MatMul becomes the Attention, in its place: Q, K, V and the mask
   * are all computed before it; it writes the merge Transpose's output
   * when that is absorbed (the Transpose's readers all come after it) */
  if (m.k_raw) { /* the scores' MatMul -> Transpose(Kt, perm [0,1,3,2]), its output K */
    static const int swap_last[4] = {0, 1, 3, 2};
    if (pass_set_perm(g, m.mm1, swap_last, 4)) return gpuc_err_set(e, "%s: out of memory", g->path);
    Node *t = &g->nodes[m.mm1];
    t->op = GPUC_OP_TRANSPOSE;
    t->in[0] = k;
    t->nin = 1;
    t->fuse_group = 0;
    Tensor *kv = &g->values[t->out[0]].t;
    gpuc_set_shape(kv, ktr.dt, 4, ktr.dims);
    k = t->out[0];
  }
  in[0] = q; in[1] = k; in[2] = v; in[3] = mask;
  mm2->op = GPUC_OP_ATTENTION;
  mm2->in = in;
  mm2->nin = mask >= 0 ? 4 : 3;
  mm2->attrs = at;
  mm2->nattr = nattr;
  mm2->out[0] = y;
  for (int c = 0; c < m.nchain; c++) drop[m.chain[c]] = true;
  if (m.k_raw) drop[m.mm1] = false;
  return 1;
}

int pass_fuse_attention(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  int *readers = ps.readers, *last = ps.last;
  bool *drop = ps.drop;
  /* GPUC_NO_ATTENTION_WINDOW=1: Swin's window masks stay unfused (the GPU
   * A/B of tests/gpu/swinattn_check.sh) */
  bool windows = !pass_env_on("GPUC_NO_ATTENTION_WINDOW");
  bool kt_copy = !pass_env_on("GPUC_NO_ATTENTION_KT");
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_MATMUL || drop[i]) continue;
    int r = match(g, i, readers, last, drop, windows, kt_copy, e);
    if (r < 0) { pass_scratch_free(&ps); return -1; }
    changes += r;
  }
  gpuc_graph_remove_nodes(g, drop);
  pass_scratch_free(&ps);
  return changes;
}
