/* Reference kernels of the --int8 ops with the rule of ir/quant_int8.h:
 * the same integers and the same f32 roundings as the generated kernels
 * (codegen/lower_int8.c), so a GPU run can be compared bit for bit where
 * nothing else intervenes. */
#include "ref.h"
#include "quant_int8.h"

/* X [rows, K] -> Xq [rows, K], Scale [rows]. */
int ref_QuantizeRows(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t k = x->dims[x->rank - 1], n = gpuc_numel(x), rows = k ? n / k : 0;
  int8_t *q = c->out[0]->data;
  float *s = c->out[1]->data;
  for (int64_t r = 0; r < rows; r++) {
    float m = 0.0f;
    for (int64_t j = 0; j < k; j++) m = fmaxf(m, fabsf((float)gpuc_get_f64(x, r * k + j)));
    float inv = gpuc_q8_inv(m);
    s[r] = gpuc_q8_scale(m);
    for (int64_t j = 0; j < k; j++) q[r * k + j] = gpuc_q8((float)gpuc_get_f64(x, r * k + j), inv);
  }
  return 0;
}

/* Acc[r, n] = sum_k Xq[r, k] * Wq[n, k], exactly (int32: K * 127^2 fits). */
int ref_MatMulInt8(OpCtx *c) {
  const Tensor *x = c->in[0], *w = c->in[1];
  int64_t k = w->dims[1], n = w->dims[0], rows = k ? gpuc_numel(x) / k : gpuc_numel(c->out[0]) / (n ? n : 1);
  const int8_t *xq = x->data, *wq = w->data;
  int32_t *acc = c->out[0]->data;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < n; o++) {
      int32_t sum = 0;
      for (int64_t j = 0; j < k; j++) sum += (int32_t)xq[r * k + j] * (int32_t)wq[o * k + j];
      acc[r * n + o] = sum;
    }
  return 0;
}

/* Y = ((float)Acc * XScale) * WScale + Bias, each product and the sum
 * rounded to f32 on its own (volatile: no FMA contraction), then stored as
 * Y's dtype (round to nearest even, as the GPU's stores). */
int ref_DequantizeRows(OpCtx *c) {
  const Tensor *acc = c->in[0], *bias = c->nin > 3 ? c->in[3] : NULL;
  const int32_t *a = acc->data;
  const float *xs = c->in[1]->data, *ws = c->in[2]->data;
  int64_t n = acc->dims[acc->rank - 1], total = gpuc_numel(acc);
  bool xs1 = gpuc_numel(c->in[1]) == 1, ws1 = gpuc_numel(c->in[2]) == 1; /* one value for all */
  for (int64_t i = 0; i < total; i++) {
    int64_t r = xs1 ? 0 : i / n, o = i % n;
    volatile float t = (float)a[i] * xs[r];
    t = t * ws[ws1 ? 0 : o];
    if (bias) t = t + (float)gpuc_get_f64(bias, o);
    gpuc_set_f64(c->out[0], i, (double)t);
  }
  return 0;
}
