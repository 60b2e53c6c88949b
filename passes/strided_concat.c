/* A space-to-depth written as strided Slices and a Concat -> Reshape,
 * Transpose, Reshape (-O2): one copy instead of a copy per Slice and
 * per Concat input.
 *
 * Swin's PatchMerging (both exporters):
 *   x0 = x[:, 0::2, 0::2, :], x1 = x[:, 1::2, 0::2, :],
 *   x2 = x[:, 0::2, 1::2, :], x3 = x[:, 1::2, 1::2, :]
 *   Y = Concat(x0, x1, x2, x3, axis -1)          x [B,H,W,C] -> [B,H/2,W/2,4C]
 * each xi a chain of one-axis Slices (step s, start o < s, to the end;
 * chains may share their first Slice). With the sliced axes' offsets of
 * input i the digits of i (some order of the axes, major first), Y is
 *   Reshape(Transpose(Reshape(x, [.., H/2, 2, W/2, 2, C]), perm), Y's dims)
 * perm putting the quotient axes first, then the offset axes in that
 * order, then the last axis. Conditions: x of static shape, every sliced
 * dim a multiple of its step, one step per axis for all inputs, the last
 * axis (the Concat's) not sliced, the Slices read only inside the pattern
 * and not graph outputs. The first two Slices (node order) become the
 * Reshape and the Transpose, the Concat the last Reshape. */
#include "passes.h"
#include <stdlib.h>

#define SC_MAX_IN 16
#define SC_MAX_RANK 6

typedef struct {
  int x;                     /* the value sliced */
  int64_t step[SC_MAX_RANK]; /* per axis of x: 1 (not sliced) or the step */
  int64_t off[SC_MAX_RANK];
  int nodes[SC_MAX_RANK];    /* the Slice nodes of the chain */
  int nnodes;
} Chain;

/* one-axis Slice with constant start o, end past the dim, step s: sets
 * the axis, o and s */
static bool strided_slice(const Graph *g, const Node *n, int *axis, int64_t *o, int64_t *s) {
  if (n->op != GPUC_OP_SLICE || g->opset < 10 || n->nin < 5) return false;
  int64_t b[4];
  for (int i = 1; i < 5; i++) {
    if (n->in[i] < 0) return false;
    const Value *c = &g->values[n->in[i]];
    if (!c->is_const || !c->t.data || gpuc_numel(&c->t) != 1 || (c->t.dt != GPUC_DT_I64 && c->t.dt != GPUC_DT_I32))
      return false;
    b[i - 1] = gpuc_get_i64(&c->t, 0);
  }
  const Tensor *x = &g->values[n->in[0]].t;
  if (!gpuc_shape_known(x)) return false;
  int64_t ax = b[2] < 0 ? b[2] + x->rank : b[2];
  if (ax < 0 || ax >= x->rank) return false;
  int64_t dim = x->dims[ax];
  if (b[3] < 2 || b[0] < 0 || b[0] >= b[3] || b[1] < dim || dim % b[3]) return false;
  *axis = (int)ax;
  *o = b[0];
  *s = b[3];
  return true;
}

/* walk v up its Slices to the value they slice */
static bool chain_of(const Graph *g, int v, Chain *c) {
  c->nnodes = 0;
  for (int d = 0; d < SC_MAX_RANK; d++) { c->step[d] = 1; c->off[d] = 0; }
  while (v >= 0 && g->values[v].producer >= 0 && g->nodes[g->values[v].producer].op == GPUC_OP_SLICE) {
    const Node *n = &g->nodes[g->values[v].producer];
    int axis;
    int64_t o, s;
    if (!strided_slice(g, n, &axis, &o, &s)) break; /* another Slice: part of x */
    if (c->nnodes == SC_MAX_RANK || g->values[v].is_output || axis >= SC_MAX_RANK || c->step[axis] != 1)
      return false;
    c->step[axis] = s;
    c->off[axis] = o;
    c->nodes[c->nnodes++] = g->values[v].producer;
    v = n->in[0];
  }
  c->x = v;
  return c->nnodes > 0;
}

static int new_shape(Graph *g, const char *base, const char *what, int rank, const int64_t *dims, GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", base, what);
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  int64_t n = rank;
  Tensor *t = &g->values[v].t;
  gpuc_set_shape(t, GPUC_DT_I64, 1, &n);
  if (gpuc_tensor_alloc(t, e)) return -1;
  g->values[v].is_const = true;
  for (int i = 0; i < rank; i++) gpuc_set_i64(t, i, dims[i]);
  return v;
}

static int rewrite(Graph *g, int ci, const int *readers, bool *drop, GpucErr *e) {
  const Node *cn = &g->nodes[ci];
  int k = cn->nin;
  if (k < 2 || k > SC_MAX_IN) return 0;
  Chain ch[SC_MAX_IN];
  for (int i = 0; i < k; i++)
    if (!chain_of(g, cn->in[i], &ch[i]) || ch[i].x != ch[0].x) return 0;
  const Tensor *xt = &g->values[ch[0].x].t, *yt = &g->values[cn->out[0]].t;
  int r = xt->rank;
  if (!gpuc_shape_known(xt) || !gpuc_shape_known(yt) || r > SC_MAX_RANK || yt->rank != r || yt->dt != xt->dt) return 0;
  int64_t axis = gpuc_attr_i(cn, "axis", 0);
  if (axis < 0) axis += r;
  if (axis != r - 1) return 0;
  /* the sliced axes (same steps for all), the last not among them */
  int sl[SC_MAX_RANK], m = 0;
  int64_t prod = 1;
  for (int d = 0; d < r; d++) {
    for (int i = 1; i < k; i++)
      if (ch[i].step[d] != ch[0].step[d]) return 0;
    if (ch[0].step[d] > 1) { sl[m++] = d; prod *= ch[0].step[d]; }
  }
  if (m == 0 || m > 3 || ch[0].step[r - 1] != 1 || prod != k) return 0;
  /* an order of the sliced axes (major first) in which input i's offsets
   * are the digits of i: try every permutation of m <= 3 axes */
  static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  int order[3] = {-1, -1, -1};
  for (int p = 0; p < 6 && order[0] < 0; p++) {
    bool ok = true;
    for (int j = 0; j < m && ok; j++) ok = perms[p][j] < m;
    for (int i = 0; i < k && ok; i++) {
      int64_t rest = i;
      for (int j = m - 1; j >= 0; j--) { /* minor digit last */
        int d = sl[perms[p][j]];
        ok &= ch[i].off[d] == rest % ch[0].step[d];
        rest /= ch[0].step[d];
      }
    }
    if (ok)
      for (int j = 0; j < m; j++) order[j] = sl[perms[p][j]];
  }
  if (order[0] < 0) return 0;
  /* every Slice in the chains read only by Slices of the chains or the Concat */
  int nodes[SC_MAX_IN * SC_MAX_RANK], nn = 0;
  for (int i = 0; i < k; i++)
    for (int j = 0; j < ch[i].nnodes; j++) {
      int q = 0;
      while (q < nn && nodes[q] != ch[i].nodes[j]) q++;
      if (q == nn) nodes[nn++] = ch[i].nodes[j];
    }
  for (int q = 0; q < nn; q++) {
    int v = g->nodes[nodes[q]].out[0], inside = 0;
    if (g->values[v].is_output) return 0;
    for (int q2 = 0; q2 < nn; q2++) inside += g->nodes[nodes[q2]].in[0] == v;
    for (int i = 0; i < k; i++) inside += cn->in[i] == v;
    if (readers[v] != inside) return 0;
  }
  if (nn < 2) return 0;
  /* [.., d/s, s, ..] and the permutation: quotients and unsliced axes but
   * the last in order, then the offset axes in `order`, then the last */
  int64_t split[2 * SC_MAX_RANK], tdims[2 * SC_MAX_RANK], perm[2 * SC_MAX_RANK];
  int pos[SC_MAX_RANK], np = 0, ns = 0;
  for (int d = 0; d < r; d++) {
    pos[d] = ns;
    if (ch[0].step[d] > 1) { split[ns++] = xt->dims[d] / ch[0].step[d]; split[ns++] = ch[0].step[d]; }
    else split[ns++] = xt->dims[d];
  }
  for (int d = 0; d < r - 1; d++) perm[np++] = pos[d];
  for (int j = 0; j < m; j++) perm[np++] = pos[order[j]] + 1;
  perm[np++] = pos[r - 1];
  for (int i = 0; i < np; i++) tdims[i] = split[perm[i]];
  /* the first two Slices in node order hold the Reshape and Transpose */
  int a = -1, b = -1;
  for (int q = 0; q < nn; q++) {
    if (a < 0 || nodes[q] < a) { b = a; a = nodes[q]; }
    else if (b < 0 || nodes[q] < b) b = nodes[q];
  }
  int x = ch[0].x, yv = cn->out[0];
  const char *nm = cn->name ? cn->name : "concat";
  int s1 = new_shape(g, nm, "split_shape", ns, split, e);
  int64_t ydims[SC_MAX_RANK];
  for (int d = 0; d < r; d++) ydims[d] = g->values[yv].t.dims[d];
  int s2 = s1 < 0 ? -1 : new_shape(g, nm, "merge_shape", r, ydims, e);
  int *in1 = gpuc_arena_alloc(&g->arena, sizeof(int) * 2), *in2 = gpuc_arena_alloc(&g->arena, sizeof(int));
  int *in3 = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  int64_t *pv = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)np);
  if (s2 < 0) return -1;
  if (!in1 || !in2 || !in3 || !at || !pv) return gpuc_err_set(e, "%s: out of memory", g->path);
  GpucDType dt = g->values[x].t.dt;
  Node *na = &g->nodes[a], *nb = &g->nodes[b], *nc = &g->nodes[ci];
  in1[0] = x; in1[1] = s1;
  na->op = GPUC_OP_RESHAPE; na->in = in1; na->nin = 2; na->nattr = 0;
  gpuc_set_shape(&g->values[na->out[0]].t, dt, ns, split);
  for (int i = 0; i < np; i++) pv[i] = perm[i];
  *at = (Attr){.name = "perm", .kind = GPUC_ATTR_INTS, .n = np, .ints = pv};
  in2[0] = na->out[0];
  nb->op = GPUC_OP_TRANSPOSE; nb->in = in2; nb->nin = 1; nb->attrs = at; nb->nattr = 1;
  gpuc_set_shape(&g->values[nb->out[0]].t, dt, np, tdims);
  in3[0] = nb->out[0]; in3[1] = s2;
  nc->op = GPUC_OP_RESHAPE; nc->in = in3; nc->nin = 2; nc->nattr = 0;
  for (int q = 0; q < nn; q++)
    if (nodes[q] != a && nodes[q] != b) drop[nodes[q]] = true;
  return 1;
}

int pass_strided_concat(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  int *readers = ps.readers;
  bool *drop = ps.drop;
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_CONCAT || drop[i]) continue;
    int r = rewrite(g, i, readers, drop, e);
    if (r < 0) { pass_scratch_free(&ps); return -1; }
    changes += r;
  }
  gpuc_graph_remove_nodes(g, drop);
  pass_scratch_free(&ps);
  return changes;
}
