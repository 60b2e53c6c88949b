/* torch.roll as one Gather (-O2).
 *
 * Both exporters write torch.roll(x, s, dim) as
 *   Y = Concat(Slice(x, [a], [n], [axis]), Slice(x, [0], [a], [axis]), axis)
 * (a = n - s mod n, n = x's size on axis): two copies and a Concat of two
 * more (Swin's cyclic shift: two such pairs before and two after every
 * shifted block). Y is Gather(x, idx, axis) with the constant
 * idx[i] = (a + i) mod n: one kernel reading x once. Conditions: x of
 * static shape, the Slices step 1 with constant one-axis bounds on the
 * Concat's axis, each read only by the Concat and not a graph output.
 * The Concat node becomes the Gather; the Slices are removed. */
#include "passes.h"
#include <stdlib.h>

/* v = Slice(x, [s], [e], [axis], [1]) with constant bounds, read only by
 * the Concat: sets x and the clamped [s, e) on x's axis `axis`; else false */
static bool slice_on(const Graph *g, const int *readers, int v, int axis, int *x, int64_t *s, int64_t *e) {
  if (v < 0 || readers[v] != 1 || g->values[v].is_output) return false;
  int p = g->values[v].producer;
  if (p < 0 || g->nodes[p].op != GPUC_OP_SLICE || g->opset < 10) return false;
  const Node *n = &g->nodes[p];
  if (n->nin < 4 || n->in[1] < 0 || n->in[2] < 0 || n->in[3] < 0) return false;
  *x = n->in[0];
  const Tensor *xt = &g->values[*x].t;
  if (!gpuc_shape_known(xt) || axis >= xt->rank) return false;
  int64_t b[4];
  for (int i = 1; i < 5; i++) {
    if (i == 4 && (n->nin < 5 || n->in[4] < 0)) { b[3] = 1; break; }
    const Value *c = &g->values[n->in[i]];
    if (!c->is_const || !c->t.data || gpuc_numel(&c->t) != 1 || (c->t.dt != GPUC_DT_I64 && c->t.dt != GPUC_DT_I32))
      return false;
    b[i - 1] = gpuc_get_i64(&c->t, 0);
  }
  int64_t dim = xt->dims[axis], ax = b[2] < 0 ? b[2] + xt->rank : b[2];
  if (ax != axis || b[3] != 1) return false;
  for (int i = 0; i < 2; i++) {
    if (b[i] < 0) b[i] += dim;
    b[i] = b[i] < 0 ? 0 : b[i] > dim ? dim : b[i];
  }
  *s = b[0];
  *e = b[1];
  return true;
}

static int rewrite(Graph *g, int i, const int *readers, bool *drop, GpucErr *e) {
  Node *n = &g->nodes[i];
  if (n->nin != 2 || n->in[0] < 0 || n->in[1] < 0 || n->in[0] == n->in[1]) return 0;
  const Tensor *yt = &g->values[n->out[0]].t;
  if (!gpuc_shape_known(yt)) return 0;
  int64_t axis = gpuc_attr_i(n, "axis", 0);
  if (axis < 0) axis += yt->rank;
  if (axis < 0 || axis >= yt->rank) return 0;
  int x0, x1;
  int64_t s0, e0, s1, e1;
  if (!slice_on(g, readers, n->in[0], (int)axis, &x0, &s0, &e0) ||
      !slice_on(g, readers, n->in[1], (int)axis, &x1, &s1, &e1) || x0 != x1)
    return 0;
  const Tensor *xt = &g->values[x0].t;
  int64_t dim = xt->dims[axis], a = s0;
  /* [a, n) then [0, a), 0 < a < n: the roll; Y has x's shape */
  if (!(e0 == dim && s1 == 0 && e1 == a && a > 0 && a < dim) || xt->rank != yt->rank || xt->dt != yt->dt) return 0;
  for (int d = 0; d < xt->rank; d++)
    if (xt->dims[d] != yt->dims[d]) return 0;
  char name[512];
  snprintf(name, sizeof name, "%s.roll_index", n->name ? n->name : "concat");
  int iv = gpuc_graph_add_value(g, name);
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  if (iv < 0 || !in || !at) return gpuc_err_set(e, "%s: out of memory", g->path);
  Tensor *it = &g->values[iv].t;
  gpuc_set_shape(it, GPUC_DT_I64, 1, &dim);
  if (gpuc_tensor_alloc(it, e)) return -1;
  g->values[iv].is_const = true;
  for (int64_t k = 0; k < dim; k++) gpuc_set_i64(it, k, (a + k) % dim);
  drop[g->values[g->nodes[i].in[0]].producer] = true;
  drop[g->values[g->nodes[i].in[1]].producer] = true;
  n = &g->nodes[i];
  in[0] = x0;
  in[1] = iv;
  *at = (Attr){.name = "axis", .kind = GPUC_ATTR_INT, .i = axis};
  n->op = GPUC_OP_GATHER;
  n->in = in;
  n->nin = 2;
  n->attrs = at;
  n->nattr = 1;
  return 1;
}

int pass_roll_gather(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  int *readers = ps.readers;
  bool *drop = ps.drop;
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_CONCAT) continue;
    int r = rewrite(g, i, readers, drop, e);
    if (r < 0) { pass_scratch_free(&ps); return -1; }
    changes += r;
  }
  gpuc_graph_remove_nodes(g, drop);
  pass_scratch_free(&ps);
  return changes;
}
