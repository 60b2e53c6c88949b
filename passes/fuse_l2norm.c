/* F.normalize(x, dim=-1) written out -> one L2NormRows node (internal,
 * ir/ops.def; one row kernel, codegen/lower_l2norm.c), reading x through
 * the data-movement ops in front of it.
 *
 * The form both PyTorch exporters write (Swin V2's cosine attention,
 * normalize(q) and normalize(k); the Expand of expand_as is gone by now,
 * passes/dce.c):
 *   n   = ReduceL2(x) over x's last axis, keepdims 1
 *   c   = Clip(n, eps) (min only) | Max(n, eps)     eps a float constant >= 0
 *   y   = Div(x, c)
 *   out = Mul(y, s)   optional, either order: s a float constant with one
 *                     value a row (last dim 1) broadcasting to x: Swin V2's
 *                     per-head logit scale, exp(clamp(...)) folded
 * becomes out = L2NormRows(x, s?) {epsilon eps}: x / max(||x||, eps) * s,
 * computed in float from x's values (ir/ops.def).
 * Then x's view is walked up (passes/view_walk.h) through the Gather,
 * Transpose and Reshapes that carve q and k out of the QKV GEMM's output,
 * while its last axis stays contiguous: the node reads that output in
 * place (attributes view, dims), and the Transpose and Gather copies die
 * (passes/dce.c) when nothing else reads them.
 *
 * Conditions: n and c are read only by the pattern (y too, when the Mul
 * is taken) and are no graph outputs; x float with a known shape. Runs at
 * -O2 after attention_views, before fp16 (not in training); GPUC_NO_FUSE_L2NORM=1 turns it off
 * (GPU A/B). */
#include "passes.h"
#include "view_walk.h"
#include <math.h>

/* Clip(n, eps) with no upper bound, or Max(n, eps) / Max(eps, n): the
 * norm's value in *nv and eps in *eps */
static bool eps_floor(Graph *g, const Node *c, int *nv, double *eps) {
  if (c->op == GPUC_OP_CLIP) {
    double hi = INFINITY;
    if (c->nin < 2 || !pass_const_scalar(g, c->in[1], eps)) return false;
    if (c->nin > 2 && c->in[2] >= 0 && !pass_const_scalar(g, c->in[2], &hi)) return false;
    *nv = c->in[0];
    return hi == INFINITY && *eps >= 0;
  }
  if (c->op != GPUC_OP_MAX || c->nin != 2) return false;
  for (int k = 0; k < 2; k++)
    if (pass_const_scalar(g, c->in[k], eps) && *eps >= 0) { *nv = c->in[1 - k]; return true; }
  return false;
}

/* Div node d = x / floor(ReduceL2(x)): x in *x and eps in *eps, the norm
 * and floor nodes set in drop */
static bool match_div(Graph *g, const Node *d, const int *readers, bool *drop, int *x, double *eps) {
  if (d->op != GPUC_OP_DIV || d->nin != 2 || d->in[0] < 0 || d->in[1] < 0) return false;
  const Value *cv = &g->values[d->in[1]];
  if (cv->is_output || readers[d->in[1]] != 1 || cv->producer < 0) return false;
  Node *c = &g->nodes[cv->producer];
  int nv;
  if (c->nout != 1 || !eps_floor(g, c, &nv, eps)) return false;
  Node *r = pass_sole_producer(g, nv, GPUC_OP_REDUCEL2, readers);
  if (!r || r->in[0] != d->in[0]) return false;
  const Tensor *xt = &g->values[d->in[0]].t, *yt = &g->values[d->out[0]].t;
  if (!gpuc_dtype_is_float(xt->dt) || !gpuc_shape_known(xt) || yt->dt != xt->dt || yt->rank != xt->rank ||
      !pass_reduces_last_axis(g, r, xt))
    return false;
  for (int k = 0; k < xt->rank; k++)
    if (yt->dims[k] != xt->dims[k]) return false;
  drop[c - g->nodes] = drop[r - g->nodes] = true;
  *x = d->in[0];
  return true;
}

/* s a float constant of x's dtype with last dim 1, broadcasting to x */
static bool row_scale(const Graph *g, int s, const Tensor *x) {
  const Value *v = &g->values[s];
  if (!v->is_const || !v->t.data || v->t.dt != x->dt || v->t.rank > x->rank) return false;
  if (v->t.rank && v->t.dims[v->t.rank - 1] != 1) return false;
  for (int k = 0; k < v->t.rank; k++) {
    int64_t sd = v->t.dims[k];
    if (sd != 1 && sd != x->dims[x->rank - v->t.rank + k]) return false;
  }
  return true;
}

/* Node w as the pattern's end: a Mul by a row scale of a matched Div read
 * only by it, or (take_div) a matched Div */
static bool match(Graph *g, Node *w, const int *readers, bool *drop, bool take_div, int *x, int *scale,
                  double *eps) {
  *scale = -1;
  if (take_div) return match_div(g, w, readers, drop, x, eps);
  if (w->op != GPUC_OP_MUL || w->nin != 2 || w->nout != 1) return false;
  for (int side = 0; side < 2; side++) {
    int s = w->in[side];
    Node *d = pass_sole_producer(g, w->in[1 - side], GPUC_OP_DIV, readers);
    if (s < 0 || !d || d->in[0] < 0 || !row_scale(g, s, &g->values[d->in[0]].t)) continue;
    if (!match_div(g, d, readers, drop, x, eps)) continue;
    drop[d - g->nodes] = true;
    *scale = s;
    return true;
  }
  return false;
}

/* x's row-major view walked up through data-movement producers while its
 * last axis stays contiguous: the base value, *v its view */
static int walk_up(const Graph *g, int x, GpucView *v) {
  gpuc_view_row_major(v, &g->values[x].t);
  int base = x;
  for (int guard = 0; guard < 64; guard++) {
    GpucView w = *v;
    int z = gpuc_view_step(g, base, &w, false);
    if (z < 0 || w.rank != v->rank || (w.n[w.rank - 1] > 1 && w.st[w.rank - 1] != 1)) break;
    base = z;
    *v = w;
  }
  return base;
}

static int rewrite(Graph *g, Node *w, int x, int scale, double eps, GpucErr *e) {
  GpucView v;
  int base = walk_up(g, x, &v);
  int nat = base != x ? 3 : 1;
  int *in = gpuc_arena_alloc(&g->arena, 2 * sizeof(int));
  Attr *at = gpuc_arena_alloc(&g->arena, 3 * sizeof(Attr));
  int64_t *view = gpuc_arena_alloc(&g->arena, (size_t)(v.rank + 1) * sizeof(int64_t));
  int64_t *dims = gpuc_arena_alloc(&g->arena, (size_t)v.rank * sizeof(int64_t));
  if (!in || !at || !view || !dims) return gpuc_err_set(e, "%s: out of memory", g->path);
  view[0] = v.off;
  for (int k = 0; k < v.rank; k++) view[k + 1] = v.st[k], dims[k] = v.n[k];
  in[0] = base;
  in[1] = scale;
  at[0] = (Attr){.name = "epsilon", .kind = GPUC_ATTR_FLOAT, .f = (float)eps};
  at[1] = (Attr){.name = "view", .kind = GPUC_ATTR_INTS, .n = v.rank + 1, .ints = view};
  at[2] = (Attr){.name = "dims", .kind = GPUC_ATTR_INTS, .n = v.rank, .ints = dims};
  /* the pattern's last node becomes the norm, in its place: x (or its
   * base) and the scale come before it */
  w->op = GPUC_OP_L2NORMROWS;
  w->in = in;
  w->nin = scale >= 0 ? 2 : 1;
  w->attrs = at;
  w->nattr = nat;
  return 0;
}

int pass_fuse_l2norm(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training || pass_env_on("GPUC_NO_FUSE_L2NORM")) return 0;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  /* the scaled form first, so a Div a scale Mul reads goes with the Mul */
  for (int take_div = 0; take_div < 2; take_div++)
    for (int i = 0; i < nn; i++) {
      Node *w = &g->nodes[i];
      int x, scale;
      double eps;
      if (ps.drop[i] || w->op == GPUC_OP_L2NORMROWS || !match(g, w, ps.readers, ps.drop, take_div, &x, &scale, &eps))
        continue;
      if (rewrite(g, w, x, scale, eps, e)) { pass_scratch_free(&ps); return -1; }
      changes++;
    }
  gpuc_graph_remove_nodes(g, ps.drop);
  pass_scratch_free(&ps);
  if (changes && pass_dead_code(g, o, e) < 0) return -1; /* the Gather/Transpose copies nothing reads now */
  return changes;
}
