/* Reference kernels of the internal training ops (passes/autodiff.c). */
#include "ref_util.h"
#include <math.h>
#include <string.h>

/* dx[n,k,d] = s(n,d) * w[label] * (exp(log_prob[n,k,d]) - [k == label]),
 * s = dloss (sum), dloss / sum of weights of the entries not ignored (mean),
 * dloss[n,d] (none); ignored entries get 0. Computed in f64. */
int ref_SoftmaxCrossEntropyLossGrad(OpCtx *c) {
  const Tensor *dl = c->in[0], *lp = c->in[1], *t = c->in[2];
  const Tensor *w = gpuc_has_in(c, 3) ? c->in[3] : NULL;
  Tensor *dx = c->out[0];
  int64_t N = lp->dims[0], C = lp->dims[1], D = gpuc_shape_numel(lp->rank - 2, lp->dims + 2);
  if (D < 0 || gpuc_numel(t) != N * D) return gpuc_op_fail(c, "labels do not match log_prob");
  if (w && gpuc_numel(w) != C) return gpuc_op_fail(c, "weights do not have C elements");
  const char *red = gpuc_attr_s(c->n, "reduction", "mean");
  bool none = !strcmp(red, "none"), mean = !strcmp(red, "mean");
  if (none ? gpuc_numel(dl) != N * D : gpuc_numel(dl) != 1)
    return gpuc_op_fail(c, "dloss has the wrong number of elements");
  const Attr *ii = gpuc_attr(c->n, "ignore_index");
  bool has_ii = ii && ii->kind == GPUC_ATTR_INT;
  int64_t ignore = has_ii ? ii->i : 0;
  double wsum = 0;
  for (int64_t j = 0; j < N * D; j++) {
    int64_t label = gpuc_get_i64(t, j);
    if (has_ii && label == ignore) continue;
    if (label < 0 || label >= C)
      return gpuc_op_fail(c, "label %lld at position %lld is outside [0, %lld)", (long long)label,
                          (long long)j, (long long)C);
    wsum += w ? gpuc_get_f64(w, label) : 1.0;
  }
  double g0 = none ? 0 : gpuc_get_f64(dl, 0);
  if (mean) g0 = g0 / wsum; /* 0/0 -> NaN as the forward mean */
  bool f32 = lp->dt == GPUC_DT_F32 && dx->dt == GPUC_DT_F32;
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) {
      int64_t j = n * D + d, label = gpuc_get_i64(t, j);
      bool ign = has_ii && label == ignore;
      double s = ign ? 0 : (none ? gpuc_get_f64(dl, j) : g0) * (w ? gpuc_get_f64(w, label) : 1.0);
      for (int64_t k = 0; k < C; k++) {
        int64_t i = (n * C + k) * D + d;
        if (f32) {
          float p = expf(((const float *)lp->data)[i]);
          ((float *)dx->data)[i] = ign ? 0.0f : (float)(s * ((double)p - (k == label)));
        } else {
          double v = ign ? 0 : s * (exp(gpuc_get_f64(lp, i)) - (k == label));
          gpuc_set_f64(dx, i, v);
        }
      }
    }
  return 0;
}
