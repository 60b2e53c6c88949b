/* Shape inference of the internal training ops of the CNN family (made by
 * passes/grad_rules_nn.c): ConvGradInput, ConvGradWeight, MaxPoolGrad,
 * AveragePoolGrad, BatchNormGrad. The window geometry is the forward op's,
 * through the shared helpers of infer_nn.h, read from the same attributes. */
#include "infer_nn.h"
#include <string.h>

static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};

/* dY (input dyi) must be [N, C_out, out...] of the window and X's dtype. */
static int check_dy(OpCtx *c, const NnWindow *w, int dyi) {
  const Tensor *dy = c->in[dyi];
  if (gpuc_check_dtype(c, dyi, ft)) return -1;
  if (dy->dt != c->in[0]->dt) return gpuc_op_fail(c, "dY must have X's dtype");
  if (dy->rank != w->nsp + 2)
    return gpuc_op_fail(c, "dY has rank %d, expected %d", dy->rank, w->nsp + 2);
  int64_t want[GPUC_MAX_RANK];
  want[0] = w->n;
  want[1] = w->c_out;
  for (int i = 0; i < w->nsp; i++) want[2 + i] = w->out[i];
  for (int d = 0; d < dy->rank; d++)
    if (want[d] >= 0 && dy->dims[d] >= 0 && want[d] != dy->dims[d])
      return gpuc_op_fail(c, "dY dim %d is %lld, the forward output has %lld", d,
                          (long long)dy->dims[d], (long long)want[d]);
  return 0;
}

/* Conv window of (X, W, dY): X and W as the forward Conv's, no bias. */
int nn_conv_grad_window(OpCtx *c, NnWindow *w) {
  if (gpuc_check_dtype(c, 0, ft) || gpuc_check_dtype(c, 1, ft)) return -1;
  if (c->in[1]->dt != c->in[0]->dt) return gpuc_op_fail(c, "W must have X's dtype");
  OpCtx sub = *c;
  sub.nin = 2;
  if (nn_conv_window(&sub, w)) return -1;
  return check_dy(c, w, 2);
}

/* ConvGradInput(X, W, dY) -> dX, X's shape (X is read for its shape only). */
int infer_ConvGradInput(OpCtx *c) {
  NnWindow w;
  if (nn_conv_grad_window(c, &w)) return -1;
  return gpuc_infer_same(c, 0, 0);
}

/* ConvGradWeight(X, W, dY) -> dW, W's shape (W is read for its shape only). */
int infer_ConvGradWeight(OpCtx *c) {
  NnWindow w;
  if (nn_conv_grad_window(c, &w)) return -1;
  return gpuc_infer_same(c, 0, 1);
}

/* MaxPoolGrad / AveragePoolGrad (X, dY) -> dX, X's shape. */
static int infer_pool_grad(OpCtx *c) {
  NnWindow w;
  if (gpuc_check_dtype(c, 0, ft)) return -1;
  OpCtx sub = *c;
  sub.nin = 1;
  if (nn_pool_window(&sub, &w) || check_dy(c, &w, 1)) return -1;
  return gpuc_infer_same(c, 0, 0);
}
int infer_MaxPoolGrad(OpCtx *c) { return infer_pool_grad(c); }
int infer_AveragePoolGrad(OpCtx *c) { return infer_pool_grad(c); }

/* BatchNormGrad(X [N, C, S..], scale [C], dY, mean [C]?, var [C]?) ->
 * dX, dscale, dB. Without mean/var: batch statistics (training mode). */
int infer_BatchNormGrad(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (gpuc_check_dtype(c, 0, ft) || gpuc_check_dtype(c, 1, ft) || gpuc_check_dtype(c, 2, ft))
    return -1;
  if (x->rank < 2) return gpuc_op_fail(c, "X must have rank >= 2 ([N, C, ...]), got %d", x->rank);
  const Tensor *dy = c->in[2];
  if (dy->dt != x->dt || dy->rank != x->rank) return gpuc_op_fail(c, "dY must have X's dtype and rank");
  for (int d = 0; d < x->rank; d++)
    if (x->dims[d] >= 0 && dy->dims[d] >= 0 && x->dims[d] != dy->dims[d])
      return gpuc_op_fail(c, "dY dim %d is %lld, X has %lld", d, (long long)dy->dims[d],
                          (long long)x->dims[d]);
  bool has_m = gpuc_has_in(c, 3), has_v = gpuc_has_in(c, 4);
  if (has_m != has_v) return gpuc_op_fail(c, "mean and var must be given together");
  for (int i = 1; i < 5; i++) {
    if (i == 2 || !gpuc_has_in(c, i)) continue;
    const Tensor *t = c->in[i];
    if (i > 2 && gpuc_check_dtype(c, i, ft)) return -1;
    if (t->rank != 1 || (t->dims[0] >= 0 && x->dims[1] >= 0 && t->dims[0] != x->dims[1]))
      return gpuc_op_fail(c, "input %d must be [C]", i);
  }
  if (gpuc_infer_same(c, 0, 0)) return -1;
  for (int k = 1; k < 3 && k < c->nout; k++)
    if (c->out[k] && gpuc_infer_same(c, k, 1)) return -1;
  return 0;
}
