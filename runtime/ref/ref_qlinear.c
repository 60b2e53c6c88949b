/* Reference kernels for QLinearMatMul, QLinearConv and ConvInteger, with
 * onnxruntime's arithmetic (its CPU kernels, which the ONNX conformance
 * data agree with):
 *
 *   acc = sum (x - x_zp) (w - w_zp)  (+ B)             exact, in int32
 *   y   = saturate(rint((float)acc * M) + y_zp)        round half to even
 *   M   = (x_scale * w_scale[c]) / y_scale             in f32, per output
 *                                                      channel/column c
 *
 * The integer sums come from the MatMulInteger reference (int64, wrapped
 * to int32) and the f64 Conv reference on the zero-point-shifted values
 * (integers: every partial sum is exact in f64, padding is 0 after the
 * shift as ONNX pads). Data dtypes, shapes and parameter sizes were
 * checked by ir/infer_qlinear.c; the kernels check again what they index. */
#include "ref.h"
#include "ref_util.h"
#include <math.h>
#include <stdlib.h>

/* Value k of a scale/zero point of 1 or more values (k taken mod its size,
 * so a per-tensor one is read at 0). */
static double param(const Tensor *t, int64_t k) {
  int64_t n = gpuc_numel(t);
  return n <= 1 ? gpuc_get_f64(t, 0) : gpuc_get_f64(t, k % n);
}
static int64_t zero_point(const OpCtx *c, int i, int64_t k) {
  return gpuc_has_in(c, i) ? (int64_t)param(c->in[i], k) : 0;
}

static void q_range(GpucDType dt, double *lo, double *hi) {
  *lo = dt == GPUC_DT_I8 ? -128 : 0;
  *hi = dt == GPUC_DT_I8 ? 127 : 255;
}

/* saturate(rint(acc * m) + zp); NaN (a NaN scale) goes to the zero point. */
static int64_t requantize(int32_t acc, float m, int64_t zp, double lo, double hi) {
  float v = (float)acc * m;
  if (isnan(v)) return zp;
  double q = nearbyint((double)v) + (double)zp;
  return (int64_t)(q < lo ? lo : q > hi ? hi : q);
}

/* A parameter of 1 or n values, as inference promised (checked again so
 * the kernels never index past it). */
static int sized(OpCtx *c, int i, int64_t n, const char *what) {
  if (!gpuc_has_in(c, i)) return 0;
  int64_t k = gpuc_numel(c->in[i]);
  if (k != 1 && k != n) return gpuc_op_fail(c, "%s has %lld values, expected 1 or %lld", what, (long long)k, (long long)n);
  return 0;
}

int ref_QLinearMatMul(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[3];
  Tensor *y = c->out[0];
  if (a->rank < 2 || b->rank < 2) return gpuc_op_unsupported(c, "1-D inputs");
  int64_t M = y->dims[y->rank - 2], N = y->dims[y->rank - 1], total = gpuc_numel(y);
  if (sized(c, 1, M, "a_scale") || sized(c, 2, M, "a_zero_point") || sized(c, 4, N, "b_scale") ||
      sized(c, 5, N, "b_zero_point") || sized(c, 6, M, "y_scale") || sized(c, 7, M, "y_zero_point"))
    return -1;
  Tensor *acc = gpuc_tensor_new(GPUC_DT_I32, y->rank, y->dims, c->err);
  if (!acc) return -1;
  /* MatMulInteger(a, b, a_zp, b_zp): the int32 sums */
  const Tensor *in[4] = {a, b, gpuc_has_in(c, 2) ? c->in[2] : NULL, gpuc_has_in(c, 5) ? c->in[5] : NULL};
  Tensor *out[1] = {acc};
  OpCtx mm = *c;
  mm.in = in;
  mm.nin = 4;
  mm.out = out;
  mm.nout = 1;
  int rc = ref_MatMulInteger(&mm);
  double lo, hi;
  q_range(y->dt, &lo, &hi);
  const int32_t *s = acc->data;
  for (int64_t i = 0; !rc && i < total; i++) {
    int64_t n = i % N, m = (i / N) % M;
    float mult = (float)param(c->in[1], m) * (float)param(c->in[4], n) / (float)param(c->in[6], m);
    gpuc_set_i64(y, i, requantize(s[i], mult, zero_point(c, 7, m), lo, hi));
  }
  gpuc_tensor_free(acc);
  return rc;
}

/* Y64 = Conv(x - x_zp, w - w_zp) in f64 (y's shape); NULL on failure. */
static Tensor *shifted_conv(OpCtx *c, int xi, int xzi, int wi, int wzi) {
  const Tensor *x = c->in[xi], *w = c->in[wi];
  Tensor *y = c->out[0];
  int64_t M = w->dims[0], per = M > 0 ? gpuc_numel(w) / M : 0;
  if (sized(c, xzi, 1, "x_zero_point") || sized(c, wzi, M, "w_zero_point")) return NULL;
  Tensor *xs = gpuc_tensor_new(GPUC_DT_F64, x->rank, x->dims, c->err);
  Tensor *ws = xs ? gpuc_tensor_new(GPUC_DT_F64, w->rank, w->dims, c->err) : NULL;
  Tensor *ys = ws ? gpuc_tensor_new(GPUC_DT_F64, y->rank, y->dims, c->err) : NULL;
  if (!ys) { if (xs) gpuc_tensor_free(xs); if (ws) gpuc_tensor_free(ws); return NULL; }
  double *xv = xs->data, *wv = ws->data;
  int64_t zx = zero_point(c, xzi, 0);
  for (int64_t i = 0; i < gpuc_numel(x); i++) xv[i] = (double)(gpuc_get_i64(x, i) - zx);
  for (int64_t i = 0; i < gpuc_numel(w); i++) wv[i] = (double)(gpuc_get_i64(w, i) - zero_point(c, wzi, i / per));
  const Tensor *in[2] = {xs, ws};
  Tensor *out[1] = {ys};
  OpCtx cv = *c;
  cv.in = in;
  cv.nin = 2;
  cv.out = out;
  cv.nout = 1;
  int rc = ref_Conv(&cv);
  gpuc_tensor_free(xs);
  gpuc_tensor_free(ws);
  if (rc) { gpuc_tensor_free(ys); return NULL; }
  return ys;
}

/* int32 of an exact integer sum, wrapping as int32 accumulation does. */
static int32_t wrap32(double v) { return (int32_t)(uint32_t)(uint64_t)(int64_t)v; }

int ref_ConvInteger(OpCtx *c) {
  Tensor *acc = shifted_conv(c, 0, 2, 1, 3);
  if (!acc) return -1;
  Tensor *y = c->out[0];
  const double *v = acc->data;
  for (int64_t i = 0; i < gpuc_numel(y); i++) ((int32_t *)y->data)[i] = wrap32(v[i]);
  gpuc_tensor_free(acc);
  return 0;
}

int ref_QLinearConv(OpCtx *c) {
  Tensor *y = c->out[0];
  int64_t M = y->dims[1], plane = M > 0 ? gpuc_numel(y) / (y->dims[0] * M) : 0;
  if (y->dims[0] == 0 || M == 0) return 0;
  if (sized(c, 4, M, "w_scale") || sized(c, 1, 1, "x_scale") || sized(c, 6, 1, "y_scale") ||
      sized(c, 8, M, "B") || sized(c, 7, 1, "y_zero_point"))
    return -1;
  Tensor *acc = shifted_conv(c, 0, 2, 3, 5);
  if (!acc) return -1;
  double lo, hi;
  q_range(y->dt, &lo, &hi);
  const double *v = acc->data;
  int64_t zy = zero_point(c, 7, 0);
  float xs = (float)gpuc_get_f64(c->in[1], 0), ys = (float)gpuc_get_f64(c->in[6], 0);
  for (int64_t i = 0; i < gpuc_numel(y); i++) {
    int64_t oc = (i / plane) % M;
    int32_t s = wrap32(v[i]);
    if (gpuc_has_in(c, 8)) s = (int32_t)((uint32_t)s + (uint32_t)gpuc_get_i64(c->in[8], oc));
    gpuc_set_i64(y, i, requantize(s, xs * (float)param(c->in[4], oc) / ys, zy, lo, hi));
  }
  gpuc_tensor_free(acc);
  return 0;
}
