/* Gradient rules of the CNN ops: Conv, MaxPool, AveragePool,
 * GlobalAveragePool, BatchNormalization (rows of the same table as
 * grad_rules.c; see autodiff.h). Window gradients go through internal ops
 * (ConvGradInput, ConvGradWeight, MaxPoolGrad, AveragePoolGrad,
 * BatchNormGrad: ir/infer_train_nn.c, runtime/ref/ref_train_nn.c) that take
 * the forward node's attributes, so the geometry is the forward's. */
#include "autodiff.h"
#include <string.h>

#define TRY(x) do { if ((x) < 0) return -1; } while (0)
#define GC_MAX_ATTR 8 /* as autodiff.c allocates per emitted node */

/* Copy every attribute of the forward node onto the last node emitted
 * (same graph: names and arrays stay in its arena). */
static int copy_attrs(GradCtx *c) {
  const Node *f = gc_node(c);
  if (f->nattr > GC_MAX_ATTR) return gc_fail(c, "more than %d attributes", GC_MAX_ATTR);
  Node *n = &c->g->nodes[c->last];
  for (int i = 0; i < f->nattr; i++) n->attrs[n->nattr++] = f->attrs[i];
  return 0;
}

/* Give the last node emitted `total` outputs (new values after the first). */
static int add_outputs(GradCtx *c, int total, int *vals) {
  Graph *g = c->g;
  int ni = c->last;
  int *outs = gpuc_arena_alloc(&g->arena, sizeof(int) * (size_t)total);
  if (!outs) return gpuc_err_set(c->e, "%s: autodiff: out of memory", g->path);
  outs[0] = vals[0] = g->nodes[ni].out[0];
  for (int k = 1; k < total; k++) {
    char name[600];
    snprintf(name, sizeof name, "%s/grad%d", gc_node(c)->name, g->nvalues);
    int v = gpuc_graph_add_value(g, name);
    if (v < 0) return gpuc_err_set(c->e, "%s: autodiff: out of memory", g->path);
    g->values[v].producer = ni;
    outs[k] = vals[k] = v;
  }
  g->nodes[ni].out = outs;
  g->nodes[ni].nout = total;
  return 0;
}

/* ---- Conv ---------------------------------------------------------------- */

/* dX = ConvGradInput(X, W, dY), dW = ConvGradWeight(X, W, dY),
 * dB = ReduceSum(dY, [0, 2, ...]) */
int grad_Conv(GradCtx *c) {
  int X = gc_in(c, 0), W = gc_in(c, 1), B = gc_in(c, 2), dy = c->dy[0];
  if (c->need[0]) {
    TRY(c->dx[0] = gc_emit3(c, GPUC_OP_CONVGRADINPUT, X, W, dy));
    TRY(copy_attrs(c));
  }
  if (c->need[1]) {
    TRY(c->dx[1] = gc_emit3(c, GPUC_OP_CONVGRADWEIGHT, X, W, dy));
    TRY(copy_attrs(c));
  }
  if (B >= 0 && c->need[2]) {
    int rank = gc_t(c, dy)->rank;
    if (rank < 3) return gc_fail(c, "output rank unknown");
    int64_t axes[GPUC_MAX_RANK];
    int na = 0;
    for (int d = 0; d < rank; d++)
      if (d != 1) axes[na++] = d;
    TRY(c->dx[2] = gc_reduce_sum(c, dy, na, axes, false));
  }
  return 0;
}

/* ---- pools ----------------------------------------------------------------- */

/* dX = MaxPoolGrad(X, dY): dY to the first maximum of each window
 * (Indices, if the forward has them, carry no gradient). */
int grad_MaxPool(GradCtx *c) {
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MAXPOOLGRAD, gc_in(c, 0), c->dy[0]));
  return copy_attrs(c);
}

/* dX = AveragePoolGrad(X, dY): dY / divisor to each tap of the window. */
int grad_AveragePool(GradCtx *c) {
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_AVERAGEPOOLGRAD, gc_in(c, 0), c->dy[0]));
  return copy_attrs(c);
}

/* dX = Expand(dY, Shape(X)) / (D1 * ... * Dn) */
int grad_GlobalAveragePool(GradCtx *c) {
  int X = gc_in(c, 0);
  const Tensor *xt = gc_t(c, X);
  if (xt->rank < 2) return gc_fail(c, "input rank unknown");
  double hw = 1;
  for (int d = 2; d < xt->rank; d++) {
    if (xt->dims[d] < 0) return gc_fail(c, "spatial dims unknown");
    hw *= (double)xt->dims[d];
  }
  GpucDType dt = xt->dt;
  int s = gc_shape_of(c, X);
  TRY(s);
  int e = gc_emit2(c, GPUC_OP_EXPAND, c->dy[0], s);
  TRY(e);
  int k = gc_scalar(c, dt, hw > 0 ? 1.0 / hw : 0.0);
  TRY(k);
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, e, k));
  return 0;
}

/* ---- BatchNormalization ------------------------------------------------------- */

/* (dX, dscale, dB) = BatchNormGrad(X, scale, dY[, mean, var]): batch
 * statistics in training mode (as ref_BatchNormalization decides it),
 * the given running statistics otherwise. The running-statistics outputs
 * and inputs are not differentiated. */
int grad_BatchNormalization(GradCtx *c) {
  const Node *n = gc_node(c);
  int64_t opset = c->g->opset;
  if (opset < 9 && gpuc_attr_i(n, "spatial", 1) == 0)
    return gc_fail(c, "spatial=0 (per-activation statistics) has no gradient rule");
  bool has_stats_out = (n->nout > 1 && n->out[1] >= 0) || (n->nout > 2 && n->out[2] >= 0);
  bool training;
  if (opset >= 14) training = gpuc_attr_i(n, "training_mode", 0) == 1;
  else training = has_stats_out && !(opset < 7 && gpuc_attr_i(n, "is_test", 0) == 1);
  for (int k = 1; k < 3; k++)
    if (k < n->nout && c->dy[k] >= 0)
      return gc_fail(c, "the running statistics outputs carry no gradient");
  float eps = gpuc_attr_f(n, "epsilon", 1e-5f);
  int ins[5] = {gc_in(c, 0), gc_in(c, 1), c->dy[0], gc_in(c, 3), gc_in(c, 4)};
  int outs[3];
  TRY(gc_emit(c, GPUC_OP_BATCHNORMGRAD, training ? 3 : 5, ins));
  TRY(add_outputs(c, 3, outs));
  TRY(gc_attr_f(c, "epsilon", eps));
  for (int k = 0; k < 3; k++)
    if (c->need[k]) c->dx[k] = outs[k];
  return 0;
}
