/* Resize's per-axis taps (input indices and weights of each output index),
 * computed on the host. Shared by the reference kernel and the GPU lowering
 * (which bakes the tables into its kernel), so both interpolate the same. */
#include "infer_nn.h"
#include <math.h>
#include <stdlib.h>


/* Input coordinate of output index x along axis d. */
static double src_coord(const NnResize *p, int d, int64_t in, int64_t x) {
  double s = p->scale[d], len = p->length[d], xr = (double)x, fin = (double)in;
  switch (p->coord) {
  case NN_CT_HALF_PIXEL: return (xr + 0.5) / s - 0.5;
  case NN_CT_HALF_PIXEL_SYMMETRIC: {
    double adj = (double)p->out[d] / len, offset = fin / 2 * (1 - adj);
    return offset + (xr + 0.5) / s - 0.5;
  }
  case NN_CT_PYTORCH_HALF_PIXEL: return len > 1 ? (xr + 0.5) / s - 0.5 : 0;
  case NN_CT_ALIGN_CORNERS: return len == 1 ? 0 : xr * (fin - 1) / (len - 1);
  case NN_CT_ASYMMETRIC: return xr / s;
  case NN_CT_TF_HALF_PIXEL_FOR_NN: return (xr + 0.5) / s;
  case NN_CT_TF_CROP_AND_RESIZE: {
    double a = p->roi_start[d], b = p->roi_end[d];
    return len > 1 ? a * (fin - 1) + xr * (b - a) * (fin - 1) / (len - 1)
                   : 0.5 * (a + b) * (fin - 1);
  }
  }
  return 0;
}

static int64_t nearest_index(const NnResize *p, int d, double xo) {
  double f = floor(xo);
  switch (p->nearest) {
  case NN_NR_ROUND_PREFER_FLOOR: return (int64_t)(xo == f + 0.5 ? f : round(xo));
  case NN_NR_ROUND_PREFER_CEIL: return (int64_t)(xo == f + 0.5 ? f + 1 : round(xo));
  case NN_NR_FLOOR: return (int64_t)f;
  case NN_NR_CEIL: return (int64_t)ceil(xo);
  case NN_NR_SIMPLE: return (int64_t)(p->scale[d] < 1 ? ceil(xo) : trunc(xo));
  }
  return (int64_t)f;
}

/* Cubic convolution kernel with parameter A at distance t. */
static double cubic_w(double A, double t) {
  t = fabs(t);
  if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
  if (t < 2) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
  return 0;
}

static int64_t clamp_i(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

void nn_free_taps(NnAxisTaps *t) {
  free(t->first); free(t->idx); free(t->w); free(t->outside);
}

int nn_resize_taps(OpCtx *c, const NnResize *p, int d, int64_t in, int64_t max_taps, NnAxisTaps *t) {
  int64_t out = p->out[d], lo = 0, hi = 1;
  double sa = p->antialias && p->scale[d] < 1 ? p->scale[d] : 1;
  if (p->mode == NN_RS_LINEAR) { lo = (int64_t)floor(-1 / sa) + 1; hi = 2 - lo; }
  if (p->mode == NN_RS_CUBIC) { lo = (int64_t)floor(-2 / sa) + 1; hi = 2 - lo; }
  int64_t T = hi - lo;
  if (T > max_taps / (out + 1))
    return gpuc_op_fail(c, "axis %d needs %lld taps per output, too many (at most %lld in all)",
                        d, (long long)T, (long long)max_taps);
  t->first = malloc(sizeof(int64_t) * (size_t)(out + 1));
  t->idx = malloc(sizeof(int64_t) * (size_t)(out * T + 1));
  t->w = malloc(sizeof(double) * (size_t)(out * T + 1));
  t->outside = malloc((size_t)out + 1);
  if (!t->first || !t->idx || !t->w || !t->outside) return gpuc_op_fail(c, "out of host memory");
  double margin = (double)T + 2;
  int64_t n = 0;
  for (int64_t o = 0; o < out; o++) {
    double xo = src_coord(p, d, in, o);
    t->first[o] = n;
    t->outside[o] = p->coord == NN_CT_TF_CROP_AND_RESIZE && (xo < 0 || xo > (double)(in - 1));
    /* far-off coordinates only ever reach the edge: keep them castable */
    xo = fmin(fmax(xo, -margin), (double)in + margin);
    if (p->mode == NN_RS_NEAREST) {
      t->idx[n] = clamp_i(nearest_index(p, d, xo), in - 1);
      t->w[n++] = 1;
      continue;
    }
    double f = floor(xo), r = xo - f, sum = 0;
    int64_t n0 = n;
    for (int64_t i = lo; i < hi; i++) {
      int64_t pos = (int64_t)f + i;
      double arg = ((double)i - r) * sa;
      double w = p->mode == NN_RS_LINEAR ? fmax(0, 1 - fabs(arg)) : cubic_w(p->cubic_a, arg);
      if (p->exclude_outside && (pos < 0 || pos >= in)) w = 0;
      sum += w;
      if (w == 0) continue; /* identity axes keep a single tap */
      t->idx[n] = clamp_i(pos, in - 1);
      t->w[n++] = w;
    }
    if ((p->antialias || p->exclude_outside) && sum != 0)
      for (int64_t k = n0; k < n; k++) t->w[k] /= sum;
  }
  t->first[out] = n;
  return 0;
}
