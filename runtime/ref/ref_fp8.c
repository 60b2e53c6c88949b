/* Reference kernels of the --fp8 ops: the e4m3 values the GPU's quantize
 * kernel makes (gpuc_f32_to_f8e4m3 rounds as cvt.rn.satfinite), so the
 * GEMM inputs are the same bits; the GEMM's f32 sums may differ from
 * cuBLASLt's in order only (every e4m3 product is exact in f32). */
#include "ref.h"
#include <math.h>

/* X [rows, K] -> Xq [rows, K] e4m3, Scale [rows] = absmax / 448. */
int ref_QuantizeRowsF8(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t k = x->dims[x->rank - 1], n = gpuc_numel(x), rows = k ? n / k : 0;
  uint8_t *q = c->out[0]->data;
  float *s = c->out[1]->data;
  for (int64_t r = 0; r < rows; r++) {
    float m = 0.0f;
    for (int64_t j = 0; j < k; j++) m = fmaxf(m, fabsf((float)gpuc_get_f64(x, r * k + j)));
    float inv = m > 0.0f ? 448.0f / m : 0.0f;
    s[r] = m > 0.0f ? m / 448.0f : 1.0f;
    for (int64_t j = 0; j < k; j++) {
      volatile float t = (float)gpuc_get_f64(x, r * k + j) * inv;
      q[r * k + j] = gpuc_f32_to_f8e4m3(t);
    }
  }
  return 0;
}

/* Y[r, o] = (sum_j Xq[r, j] Wq[o, j]) * XScale[r] * WScale[o] + Bias[o]. */
int ref_MatMulF8(OpCtx *c) {
  const Tensor *x = c->in[0], *w = c->in[1], *bias = c->nin > 4 ? c->in[4] : NULL;
  int64_t k = w->dims[1], n = w->dims[0], rows = n ? gpuc_numel(c->out[0]) / n : 0;
  const uint8_t *xq = x->data, *wq = w->data;
  const float *xs = c->in[2]->data, *ws = c->in[3]->data;
  float lut[256];
  for (int i = 0; i < 256; i++) lut[i] = gpuc_f8e4m3_to_f32((uint8_t)i);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < n; o++) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; j++) sum += lut[xq[r * k + j]] * lut[wq[o * k + j]];
      volatile float t = sum * xs[r];
      t = t * ws[o];
      if (bias) t = t + (float)gpuc_get_f64(bias, o);
      gpuc_set_f64(c->out[0], r * n + o, (double)t);
    }
  return 0;
}
