/* Shape inference of the internal training ops (made by passes/autodiff.c). */
#include "infer_util.h"
#include <string.h>

/* SoftmaxCrossEntropyLossGrad(dloss, log_prob [N,C,d..], labels [N,d..],
 * weights [C]?) -> d scores, log_prob's shape. dloss is a scalar for the
 * mean/sum reductions, labels-shaped for none. */
int infer_SoftmaxCrossEntropyLossGrad(OpCtx *c) {
  static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64,
                                 GPUC_DT_UNDEF};
  static const GpucDType it[] = {GPUC_DT_I32, GPUC_DT_I64, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, ft) || gpuc_check_dtype(c, 1, ft) || gpuc_check_dtype(c, 2, it))
    return -1;
  const Tensor *dl = c->in[0], *lp = c->in[1], *t = c->in[2];
  const char *red = gpuc_attr_s(c->n, "reduction", "mean");
  bool none = !strcmp(red, "none");
  if (!none && strcmp(red, "sum") && strcmp(red, "mean"))
    return gpuc_op_fail(c, "reduction '%s' is not one of none, sum, mean", red);
  if (lp->rank < 2) return gpuc_op_fail(c, "log_prob must have rank >= 2, got %d", lp->rank);
  if (t->rank != lp->rank - 1)
    return gpuc_op_fail(c, "labels must have rank %d, got %d", lp->rank - 1, t->rank);
  for (int d = 0; d < t->rank; d++) {
    int xd = d == 0 ? 0 : d + 1;
    if (t->dims[d] >= 0 && lp->dims[xd] >= 0 && t->dims[d] != lp->dims[xd])
      return gpuc_op_fail(c, "labels dim %d is %lld, log_prob dim %d is %lld", d,
                          (long long)t->dims[d], xd, (long long)lp->dims[xd]);
  }
  if (!none && dl->rank > 0) {
    int64_t n = gpuc_numel(dl);
    if (n >= 0 && n != 1) return gpuc_op_fail(c, "dloss must be a scalar for reduction %s", red);
  }
  if (none && dl->rank != t->rank) return gpuc_op_fail(c, "dloss must have the labels' shape");
  if (gpuc_has_in(c, 3)) {
    const Tensor *w = c->in[3];
    if (w->dt != lp->dt || w->rank != 1 || (w->dims[0] >= 0 && lp->dims[1] >= 0 && w->dims[0] != lp->dims[1]))
      return gpuc_op_fail(c, "weights must be 1-D [C] of log_prob's dtype");
  }
  return gpuc_infer_same(c, 0, 1);
}
