/* Two rewrites of Attention nodes (ir/ops.def) that pass_fuse_attention
 * made, so the kernel reads less:
 *
 * Grouped-query heads. LLaMA-style decoders repeat each K/V head G times
 * before attention (transformers' repeat_kv; both PyTorch exporters write
 * it the same way):
 *   K = Reshape(Expand(Unsqueeze(Kh, axis 2), [B,Hk,G,S,D]), [B,Hk*G,S,D])
 * K then becomes Kh [B,Hk,S,D] itself (query head h reads K/V head h / G:
 * head h of the Reshape is row h of [Hk*G], i.e. Kh's head h / G). K and V
 * are rewritten together or not at all (one Hk for both). Kh made by the
 * head split Transpose(x, perm [0,2,1,3]) read only there is read as x,
 * stored [B,S,Hk,D] (the bshd flag), as fuse_attention does for H heads.
 *
 * Causal masks. The mask input, when it is
 *   (a) a constant whose last two axes are [Sq,Sk] (the others 1) holding
 *       0 where key j <= query i and -inf (or <= -1e30) elsewhere, or
 *   (b) Where(C, 0, -inf) (C possibly through an Expand) with
 *       C = And(causal, P) or And(P, causal), `causal` a constant bool
 *       [1..,Sq,Sk] true exactly where j <= i (the exporters' form of
 *       transformers' causal + padding mask),
 * becomes attribute causal = 1 and, in (b), the mask Where(P, 0, -inf):
 * the padding row [B,1,1,Sk] instead of [B,1,Sq,Sk], and the kernel skips
 * the key blocks above the diagonal. (a) is exact for any fill <= -1e30:
 * key 0 is always unmasked, so exp() of a masked score is 0 either way.
 * (b) needs the fill -inf: a row whose keys are all padding is then all
 * -inf (NaN, or 0 with nan_to_zero) either way.
 * Runs after fuse_attention; dead Expand/Reshape chains go with DCE. */
#include "passes.h"
#include "infer_linalg.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Node *producer(const Graph *g, int v, GpucOp op) {
  if (v < 0) return NULL;
  int p = g->values[v].producer;
  return p >= 0 && g->nodes[p].op == op ? &g->nodes[p] : NULL;
}

static bool dims_eq(const Tensor *t, int rank, const int64_t *d) {
  if (t->rank != rank || !gpuc_shape_known(t)) return false;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != d[i]) return false;
  return true;
}

/* kv = Reshape(Expand(Unsqueeze(x, 2), [B,Hk,G,S,D]), [B,Hk*G,S,D]): x
 * (4-D [B,Hk,S,D]) and *G; else -1 */
static int repeated_kv(const Graph *g, int kv, int64_t *G) {
  const Node *r = producer(g, kv, GPUC_OP_RESHAPE);
  const Node *ex = r ? producer(g, r->in[0], GPUC_OP_EXPAND) : NULL;
  const Node *un = ex ? producer(g, ex->in[0], GPUC_OP_UNSQUEEZE) : NULL;
  if (!un) return -1;
  const Tensor *x = &g->values[un->in[0]].t, *e = &g->values[ex->out[0]].t;
  if (x->rank != 4 || !gpuc_shape_known(x) || e->rank != 5 || !gpuc_shape_known(e)) return -1;
  const int64_t *xd = x->dims;
  int64_t ud[5] = {xd[0], xd[1], 1, xd[2], xd[3]}, ed[5] = {xd[0], xd[1], e->dims[2], xd[2], xd[3]};
  int64_t rd[4] = {xd[0], xd[1] * e->dims[2], xd[2], xd[3]};
  if (!dims_eq(&g->values[un->out[0]].t, 5, ud) || !dims_eq(e, 5, ed) || !dims_eq(&g->values[kv].t, 4, rd))
    return -1;
  *G = e->dims[2];
  return un->in[0];
}

/* x = Transpose(y, perm [0,2,1,3]) read only by one node and not an
 * output: y; else -1 */
static int head_split(const Graph *g, const int *readers, int x) {
  const Node *t = producer(g, x, GPUC_OP_TRANSPOSE);
  const int64_t *p;
  if (!t || readers[x] != 1 || g->values[x].is_output || gpuc_attr_ints(t, "perm", &p) != 4 || p[0] != 0 ||
      p[1] != 2 || p[2] != 1 || p[3] != 3)
    return -1;
  return t->in[0];
}

static int64_t attr_index(const Node *n, const char *name) {
  for (int i = 0; i < n->nattr; i++)
    if (!strcmp(n->attrs[i].name, name)) return i;
  return -1;
}

static int gqa(Graph *g, int i, const int *readers) {
  Node *n = &g->nodes[i];
  const int64_t *flags;
  if (gpuc_attr_ints(n, "bshd", &flags) != 4 || flags[1] || flags[2]) return 0;
  int64_t gk = 0, gv = 0;
  int k = repeated_kv(g, n->in[1], &gk), v = repeated_kv(g, n->in[2], &gv);
  if (k < 0 || v < 0 || gk != gv || gk < 1) return 0;
  /* the Unsqueeze reads Kh: a head split feeding only it becomes strides */
  int64_t *fl = g->nodes[i].attrs[attr_index(n, "bshd")].ints;
  int ks = head_split(g, readers, k), vs = head_split(g, readers, v);
  n->in[1] = ks >= 0 ? ks : k;
  n->in[2] = vs >= 0 ? vs : v;
  fl[1] = ks >= 0;
  fl[2] = vs >= 0;
  return 1;
}

static bool neg_fill(double x) { return x <= -1e30; }

/* a constant of rank >= 2, leading dims 1, last two [Sq,Sk]: pred(j <= i,
 * value) holds for every element */
static bool causal_const(const Graph *g, int v, int64_t Sq, int64_t Sk, bool boolean) {
  const Value *val = &g->values[v];
  const Tensor *t = &val->t;
  if (!val->is_const || !t->data || t->rank < 2 || t->dims[t->rank - 2] != Sq || t->dims[t->rank - 1] != Sk)
    return false;
  for (int d = 0; d < t->rank - 2; d++)
    if (t->dims[d] != 1) return false;
  if (boolean != (t->dt == GPUC_DT_BOOL)) return false;
  if (!boolean && !gpuc_dtype_is_float(t->dt)) return false;
  for (int64_t i = 0; i < Sq; i++)
    for (int64_t j = 0; j < Sk; j++) {
      double x = gpuc_get_f64(t, i * Sk + j);
      bool ok = boolean ? (x != 0) == (j <= i) : j <= i ? x == 0 : neg_fill(x);
      if (!ok) return false;
    }
  return true;
}

static bool const_scalar(const Graph *g, int v, double *x) {
  const Value *val = &g->values[v];
  if (!val->is_const || !val->t.data || !gpuc_dtype_is_float(val->t.dt) || gpuc_numel(&val->t) != 1) return false;
  *x = gpuc_get_f64(&val->t, 0);
  return true;
}

/* the padding mask P of form (b), or -1; *where: the Where node */
static int causal_and_padding(const Graph *g, int m, int64_t Sq, int64_t Sk, int *where) {
  const Node *w = producer(g, m, GPUC_OP_WHERE);
  double zero, fill;
  if (!w || !const_scalar(g, w->in[1], &zero) || zero != 0 || !const_scalar(g, w->in[2], &fill) ||
      !(isinf(fill) && fill < 0))
    return -1;
  int c = w->in[0];
  const Node *ex = producer(g, c, GPUC_OP_EXPAND);
  if (ex) c = ex->in[0];
  const Node *a = producer(g, c, GPUC_OP_AND);
  if (!a) return -1;
  for (int side = 0; side < 2; side++)
    if (causal_const(g, a->in[side], Sq, Sk, true)) {
      *where = g->values[m].producer;
      return a->in[1 - side];
    }
  return -1;
}

/* attribute causal = 1 on node i (a copy of its attributes, one more) */
static int set_causal(Graph *g, int i, GpucErr *e) {
  Node *n = &g->nodes[i];
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr) * (size_t)(n->nattr + 1));
  if (!at) return gpuc_err_set(e, "%s: out of memory", g->path);
  memcpy(at, n->attrs, sizeof(Attr) * (size_t)n->nattr);
  at[n->nattr] = (Attr){.name = "causal", .kind = GPUC_ATTR_INT, .i = 1};
  n->attrs = at;
  n->nattr++;
  return 0;
}

/* mask dims broadcast to [B,H,Sq,Sk] (what infer_Attention accepts) */
static bool mask_fits(const Tensor *m, const int64_t full[4]) {
  if (m->rank > 4 || !gpuc_shape_known(m)) return false;
  for (int d = 0; d < m->rank; d++)
    if (m->dims[d] != 1 && m->dims[d] != full[4 - m->rank + d]) return false;
  return true;
}

/* returns 1 when node i became causal, 0 if not, -1 on error; memo maps
 * a Where mask already split to its padding Where (pairs) */
static int causal(Graph *g, int i, int *memo, int *nmemo, GpucErr *e) {
  Node *n = &g->nodes[i];
  if (n->nin < 4 || n->in[3] < 0 || gpuc_attr_i(n, "causal", 0)) return 0;
  GpucAttnGeom a;
  if (gpuc_attention_geom(n, &g->values[n->in[0]].t, &g->values[n->in[1]].t, &g->values[n->in[2]].t, &a))
    return 0;
  int m = n->in[3];
  if (causal_const(g, m, a.Sq, a.Sk, false)) {
    if (set_causal(g, i, e)) return -1;
    n = &g->nodes[i];
    n->in[3] = -1;
    n->nin = 3;
    return 1;
  }
  int where = -1, pad = causal_and_padding(g, m, a.Sq, a.Sk, &where);
  int64_t full[4] = {a.B, a.H, a.Sq, a.Sk};
  if (pad < 0 || !mask_fits(&g->values[pad].t, full)) return 0;
  int nm = -1;
  for (int k = 0; k < *nmemo; k++)
    if (memo[2 * k] == m) nm = memo[2 * k + 1];
  if (nm < 0) {
    char name[512];
    snprintf(name, sizeof name, "%s/padding", g->nodes[where].name);
    int zero = g->nodes[where].in[1], fill = g->nodes[where].in[2];
    int w = gpuc_graph_add_node(g, GPUC_OP_WHERE, name, 3, 1);
    snprintf(name, sizeof name, "%s/padding_output", g->values[m].name);
    nm = w < 0 ? -1 : gpuc_graph_add_value(g, name);
    if (nm < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
    Node *wn = &g->nodes[w];
    wn->in[0] = pad; wn->in[1] = zero; wn->in[2] = fill;
    wn->out[0] = nm;
    g->values[nm].producer = w;
    memo[2 * *nmemo] = m;
    memo[2 * *nmemo + 1] = nm;
    (*nmemo)++;
  }
  if (set_causal(g, i, e)) return -1;
  g->nodes[i].in[3] = nm;
  return 1;
}

int pass_attention_gqa_causal(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0, nmemo = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *last = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  int *memo = malloc(sizeof(int) * 2 * ((size_t)nn + 1));
  if (!readers || !last || !memo) {
    free(readers); free(last); free(memo);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, readers, last);
  int rc = 0;
  for (int i = 0; i < nn && rc >= 0; i++) {
    if (g->nodes[i].op != GPUC_OP_ATTENTION) continue;
    changes += gqa(g, i, readers);
    rc = causal(g, i, memo, &nmemo, e);
    if (rc > 0) changes += rc;
  }
  free(readers); free(last); free(memo);
  if (rc < 0) return -1;
  if (changes && (gpuc_graph_toposort(g, e) || pass_dead_code(g, o, e) < 0 || gpuc_graph_infer(g, e))) return -1;
  return changes;
}
