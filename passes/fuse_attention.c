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
 * where scalings() is any chain of Mul/Div by constant scalars (either
 * operand of a Mul): the TorchScript SDPA export scales Q and Kt by
 * sqrt(scale) each, eager exports divide S by sqrt(D). Their product is the
 * node's scale attribute.
 * Conditions: S, every value between it and Y, and the Kt/Q-side values
 * that get removed are read only inside the pattern and are not graph
 * outputs (a Q or K scaling read elsewhere stays, and the match stops
 * there); gpuc_attention_lowerable (ir/infer_linalg.h) accepts the shapes
 * and dtypes, so codegen never meets an Attention it cannot run.
 * Runs before the fp16 pass: Attention then computes in fp32 registers
 * on half storage like the ops it replaces. */
#include "passes.h"
#include "infer_linalg.h"
#include <stdlib.h>

typedef struct {
  Graph *g;
  const int *readers;
  int chain[16];       /* nodes to remove, in the order found */
  int nchain;
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
  if (m->nchain < 16) m->chain[m->nchain++] = m->g->values[v].producer;
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

/* Kt = Transpose(K', perm [0,1,3,2]) with K' scalings of K: K, or -1 */
static int untranspose(Match *m, int kt, double *scale) {
  Node *t = producer(m, kt, GPUC_OP_TRANSPOSE);
  const int64_t *perm;
  if (!t || gpuc_attr_ints(t, "perm", &perm) != 4 || perm[0] != 0 || perm[1] != 1 || perm[2] != 3 ||
      perm[3] != 2)
    return -1;
  /* a Transpose read elsewhere too stays, and so does what feeds it */
  bool removable = private_value(m, kt);
  if (removable) take(m, kt);
  return strip_scalings(m, t->in[0], scale, removable);
}

/* S = scalings(MatMul(scalings(Q), scalings(Kt))): sets Q and K */
static bool scores(Match *m, int s, double *scale, int *q, int *k) {
  int mmv = strip_scalings(m, s, scale, true);
  Node *mm = private_value(m, mmv) ? producer(m, mmv, GPUC_OP_MATMUL) : NULL;
  if (!mm) return false;
  take(m, mmv);
  *q = strip_scalings(m, mm->in[0], scale, true);
  int kt = strip_scalings(m, mm->in[1], scale, true);
  *k = untranspose(m, kt, scale);
  return *k >= 0;
}

static bool softmax_last_axis(const Graph *g, const Node *sm) {
  int64_t axis = gpuc_attr_i(sm, "axis", g->opset >= 13 ? -1 : 1);
  return axis == -1 || axis == 3; /* on 4-D: the same before and after opset 13 */
}

/* Match the attention ending at MatMul node i; on success rewrite node i
 * into Attention and mark the absorbed nodes in drop. */
static int match(Graph *g, int i, const int *readers, bool *drop, GpucErr *e) {
  Match m = {.g = g, .readers = readers};
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
  int x = sm->in[0], q = -1, k = -1, mask = -1;
  double scale = 1;
  Node *add = private_value(&m, x) ? producer(&m, x, GPUC_OP_ADD) : NULL;
  int base = m.nchain;
  bool found = false;
  for (int side = 0; add && side < 2 && !found; side++) { /* the mask on either side */
    if (add->in[0] == add->in[1]) break;
    m.nchain = base;
    take(&m, x);
    scale = 1;
    found = scores(&m, add->in[side], &scale, &q, &k);
    mask = add->in[1 - side];
  }
  if (!found) { /* no mask: X is the scores */
    m.nchain = base;
    scale = 1;
    mask = -1;
    found = scores(&m, x, &scale, &q, &k);
  }
  if (!found || m.nchain >= 16) return 0;
  const Tensor *mt = mask >= 0 ? &g->values[mask].t : NULL;
  if (!gpuc_attention_lowerable(&g->values[q].t, &g->values[k].t, &g->values[v].t, mt)) return 0;
  const Tensor *y = &g->values[mm2->out[0]].t, *qt = &g->values[q].t, *vt = &g->values[v].t;
  if (y->rank != 4 || y->dims[2] != qt->dims[2] || y->dims[3] != vt->dims[3] || y->dims[0] != qt->dims[0] ||
      y->dims[1] != qt->dims[1])
    return 0;
  /* the MatMul becomes the Attention, in its place: Q, K, V and the mask
   * are all computed before it */
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr) * 2);
  if (!in || !at) return gpuc_err_set(e, "%s: out of memory", g->path);
  in[0] = q; in[1] = k; in[2] = v; in[3] = mask;
  at[0] = (Attr){.name = "scale", .kind = GPUC_ATTR_FLOAT, .f = (float)scale};
  at[1] = (Attr){.name = "nan_to_zero", .kind = GPUC_ATTR_INT, .i = nan0};
  mm2->op = GPUC_OP_ATTENTION;
  mm2->in = in;
  mm2->nin = mask >= 0 ? 4 : 3;
  mm2->attrs = at;
  mm2->nattr = 2;
  for (int c = 0; c < m.nchain; c++) drop[m.chain[c]] = true;
  return 1;
}

int pass_fuse_attention(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!readers || !drop) { free(readers); free(drop); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, NULL);
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_MATMUL || drop[i]) continue;
    int r = match(g, i, readers, drop, e);
    if (r < 0) { free(readers); free(drop); return -1; }
    changes += r;
  }
  gpuc_graph_remove_nodes(g, drop);
  free(readers); free(drop);
  return changes;
}
