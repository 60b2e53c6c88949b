/* Reference kernels for QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear.
 *
 * Rounding is to nearest, ties to even (nearbyint in the default rounding
 * mode), as ONNX specifies. The arithmetic follows the precision the ONNX
 * reference uses: x / scale in f32 for f32/f16/bf16 inputs (the rounding of
 * a quotient near .5 depends on it), in f64 for f64 and int32 inputs. */
#include "ref_util.h"
#include <math.h>

/* Element i of x uses parameter (i / inner) % nch of the scale and zero
 * point: per-tensor has nch = 1; per-axis has nch = x.dims[axis] and inner =
 * the product of the dims after the axis. */
typedef struct QLayout {
  int64_t nch, inner;
} QLayout;

/* Inference has checked these already; they are repeated so the kernel
 * never reads a parameter out of bounds whatever it is given. */
static int q_layout(OpCtx *c, QLayout *q) {
  const Tensor *x = c->in[0], *s = c->in[1];
  int64_t sn = gpuc_numel(s);
  q->nch = 1;
  q->inner = 1;
  if (s->rank > 1 || sn < 0) return gpuc_op_fail(c, "scale must be a scalar or 1-D");
  if (gpuc_has_in(c, 2) && gpuc_numel(c->in[2]) != sn)
    return gpuc_op_fail(c, "zero point and scale differ in size");
  if (sn == 1) return 0;
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 1), x->rank, &axis)) return -1;
  if (x->dims[axis] != sn)
    return gpuc_op_fail(c, "scale has %lld elements, input dim %d (axis) is %lld",
                        (long long)sn, axis, (long long)x->dims[axis]);
  q->nch = sn;
  for (int d = axis + 1; d < x->rank; d++) q->inner *= x->dims[d];
  return 0;
}

static int64_t q_channel(const QLayout *q, int64_t i) { return (i / q->inner) % q->nch; }

/* Representable range of a quantized integer dtype. */
static void q_range(GpucDType dt, double *lo, double *hi) {
  switch (dt) {
  case GPUC_DT_I8: *lo = -128; *hi = 127; break;
  case GPUC_DT_U16: *lo = 0; *hi = 65535; break;
  case GPUC_DT_I16: *lo = -32768; *hi = 32767; break;
  case GPUC_DT_I32: *lo = -2147483648.0; *hi = 2147483647.0; break;
  default: *lo = 0; *hi = 255; break; /* u8 */
  }
}

/* round-half-even(q) + zp, saturated to [lo, hi]. NaN has no quantized
 * value; it maps to the zero point (the code for 0). */
static int64_t q_saturate(double q, int64_t zp, double lo, double hi) {
  if (isnan(q)) return zp;
  double v = nearbyint(q) + (double)zp;
  if (v < lo) v = lo;
  if (v > hi) v = hi;
  return (int64_t)v;
}

int ref_QuantizeLinear(OpCtx *c) {
  const Tensor *x = c->in[0], *s = c->in[1];
  const Tensor *z = gpuc_has_in(c, 2) ? c->in[2] : NULL;
  Tensor *y = c->out[0];
  QLayout q;
  if (q_layout(c, &q)) return -1;
  double lo, hi;
  q_range(y->dt, &lo, &hi);
  /* f32 division unless x or the scale needs more precision */
  bool wide = x->dt == GPUC_DT_F64 || x->dt == GPUC_DT_I32 || s->dt == GPUC_DT_F64;
  int64_t n = gpuc_numel(x);
  for (int64_t i = 0; i < n; i++) {
    int64_t ch = q_channel(&q, i);
    double xv = gpuc_get_f64(x, i), sv = gpuc_get_f64(s, ch);
    double quot = wide ? xv / sv : (double)((float)xv / (float)sv);
    int64_t zp = z ? gpuc_get_i64(z, ch) : 0;
    gpuc_set_i64(y, i, q_saturate(quot, zp, lo, hi));
  }
  return 0;
}

int ref_DequantizeLinear(OpCtx *c) {
  const Tensor *x = c->in[0], *s = c->in[1];
  const Tensor *z = gpuc_has_in(c, 2) ? c->in[2] : NULL;
  Tensor *y = c->out[0];
  QLayout q;
  if (q_layout(c, &q)) return -1;
  bool wide = s->dt == GPUC_DT_F64;
  int64_t n = gpuc_numel(x);
  for (int64_t i = 0; i < n; i++) {
    int64_t ch = q_channel(&q, i);
    /* x and zp are at most 32-bit, so the difference is exact in int64 */
    int64_t diff = gpuc_get_i64(x, i) - (z ? gpuc_get_i64(z, ch) : 0);
    double sv = gpuc_get_f64(s, ch);
    double v = wide ? (double)diff * sv : (double)((float)diff * (float)sv);
    gpuc_set_f64(y, i, v);
  }
  return 0;
}

/* ONNX DynamicQuantizeLinear, all in f32 as the spec writes it:
 *   x_min = min(0, min(x)), x_max = max(0, max(x))   (the range holds 0)
 *   y_scale = (x_max - x_min) / 255
 *   y_zero_point = saturate(round((0 - x_min) / y_scale))
 *   y = saturate(round(x / y_scale) + y_zero_point)
 * An all-zero (or empty) x has an empty range; like onnxruntime it gets
 * scale 1 and zero point 0 instead of dividing by zero. NaNs are left out
 * of the range; an infinite value has no finite scale and is an error. */
int ref_DynamicQuantizeLinear(OpCtx *c) {
  const Tensor *x = c->in[0];
  const float *xv = x->data;
  int64_t n = gpuc_numel(x);
  float mn = 0, mx = 0;
  for (int64_t i = 0; i < n; i++) {
    if (xv[i] < mn) mn = xv[i];
    if (xv[i] > mx) mx = xv[i];
  }
  if (isinf(mn) || isinf(mx))
    return gpuc_op_fail(c, "input holds an infinite value; no finite scale covers it");
  float scale = (mx - mn) / 255.0f;
  if (isinf(scale)) /* x_max - x_min overflowed f32 though each is finite */
    scale = (float)(((double)mx - (double)mn) / 255.0);
  if (scale == 0) scale = 1;
  float zpf = nearbyintf((0 - mn) / scale);
  int64_t zp = zpf < 0 ? 0 : zpf > 255 ? 255 : (int64_t)zpf;
  for (int64_t i = 0; i < n; i++)
    gpuc_set_i64(c->out[0], i, q_saturate((double)(xv[i] / scale), zp, 0, 255));
  if (c->nout > 1 && c->out[1]) gpuc_set_f64(c->out[1], 0, scale);
  if (c->nout > 2 && c->out[2]) gpuc_set_i64(c->out[2], 0, zp);
  return 0;
}
