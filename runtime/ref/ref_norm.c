/* Reference normalizations: BatchNormalization (inference and training
 * mode), InstanceNormalization, LayerNormalization, LRN and
 * MeanVarianceNormalization. Statistics are accumulated in f64, two-pass
 * (mean, then squared deviations); f16/bf16 round on store. */
#include "ref_util.h"
#include "infer_nn.h"
#include <math.h>
#include <stdlib.h>

static Tensor *opt_out(OpCtx *c, int k) { return k < c->nout ? c->out[k] : NULL; }

/* ---- BatchNormalization ------------------------------------------------- */

/* X [N, C, S...] viewed as [N, P-groups]: parameter index of (channel ch,
 * spatial position s) is ch, or ch * S + s with spatial=0 (per activation). */
int ref_BatchNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0], *rmean = opt_out(c, 1), *rvar = opt_out(c, 2);
  int64_t opset = c->g->opset;
  bool per_act = opset < 9 && gpuc_attr_i(c->n, "spatial", 1) == 0;
  bool training;
  if (opset >= 14) training = gpuc_attr_i(c->n, "training_mode", 0) == 1;
  else training = (rmean || rvar) && !(opset < 7 && gpuc_attr_i(c->n, "is_test", 0) == 1);
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  double momentum = gpuc_attr_f(c->n, "momentum", 0.9f);
  int64_t N = x->dims[0], C = x->dims[1], S = ref_prod(x->dims + 2, x->rank - 2);
  int64_t P = per_act ? C * S : C;
  double *mean = malloc(sizeof(double) * (size_t)(2 * P + 1)), *var = mean + P;
  double *a = malloc(sizeof(double) * (size_t)(2 * P + 1)), *b = a + P;
  if (!mean || !a) { free(mean); free(a); return gpuc_op_fail(c, "out of host memory"); }
#define BN_PARAM(ch, s) (per_act ? (ch) * S + (s) : (ch))
  if (training) { /* batch statistics over N and (spatial mode) S */
    double cnt = (double)(per_act ? N : N * S);
    for (int64_t p = 0; p < P; p++) mean[p] = var[p] = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t ch = 0; ch < C; ch++)
        for (int64_t s = 0; s < S; s++) mean[BN_PARAM(ch, s)] += ref_ld(x, (n * C + ch) * S + s);
    for (int64_t p = 0; p < P; p++) mean[p] = cnt > 0 ? mean[p] / cnt : 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t ch = 0; ch < C; ch++)
        for (int64_t s = 0; s < S; s++) {
          double d = ref_ld(x, (n * C + ch) * S + s) - mean[BN_PARAM(ch, s)];
          var[BN_PARAM(ch, s)] += d * d;
        }
    for (int64_t p = 0; p < P; p++) var[p] = cnt > 0 ? var[p] / cnt : 0;
  } else {
    for (int64_t p = 0; p < P; p++) {
      mean[p] = gpuc_get_f64(c->in[3], p);
      var[p] = gpuc_get_f64(c->in[4], p);
    }
  }
  /* y = x * a + b with a = scale / sqrt(var + eps), b = B - mean * a */
  for (int64_t p = 0; p < P; p++) {
    a[p] = gpuc_get_f64(c->in[1], p) / sqrt(var[p] + eps);
    b[p] = gpuc_get_f64(c->in[2], p) - mean[p] * a[p];
  }
  if (x->dt == GPUC_DT_F32 && !per_act) {
    const float *xf = x->data;
    float *yf = y->data;
    for (int64_t n = 0; n < N; n++)
      for (int64_t ch = 0; ch < C; ch++) {
        float fa = (float)a[ch], fb = (float)b[ch];
        const float *xs = xf + (n * C + ch) * S;
        float *ys = yf + (n * C + ch) * S;
        for (int64_t s = 0; s < S; s++) ys[s] = xs[s] * fa + fb;
      }
  } else {
    for (int64_t n = 0; n < N; n++)
      for (int64_t ch = 0; ch < C; ch++)
        for (int64_t s = 0; s < S; s++) {
          int64_t i = (n * C + ch) * S + s, p = BN_PARAM(ch, s);
          ref_st(y, i, ref_ld(x, i) * a[p] + b[p]);
        }
  }
#undef BN_PARAM
  /* running statistics: input * momentum + batch * (1 - momentum) */
  for (int64_t p = 0; p < P; p++) {
    if (rmean)
      gpuc_set_f64(rmean, p, training ? gpuc_get_f64(c->in[3], p) * momentum + mean[p] * (1 - momentum)
                                      : mean[p]);
    if (rvar)
      gpuc_set_f64(rvar, p, training ? gpuc_get_f64(c->in[4], p) * momentum + var[p] * (1 - momentum)
                                     : var[p]);
  }
  free(mean);
  free(a);
  return 0;
}

/* ---- InstanceNormalization --------------------------------------------- */

int ref_InstanceNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  int64_t N = x->dims[0], C = x->dims[1], S = ref_prod(x->dims + 2, x->rank - 2);
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < C; ch++) {
      int64_t base = (n * C + ch) * S;
      double mean = 0, var = 0;
      for (int64_t s = 0; s < S; s++) mean += ref_ld(x, base + s);
      mean = S ? mean / (double)S : 0;
      for (int64_t s = 0; s < S; s++) {
        double d = ref_ld(x, base + s) - mean;
        var += d * d;
      }
      var = S ? var / (double)S : 0;
      double a = gpuc_get_f64(c->in[1], ch) / sqrt(var + eps);
      double b = gpuc_get_f64(c->in[2], ch) - mean * a;
      for (int64_t s = 0; s < S; s++) ref_st(y, base + s, ref_ld(x, base + s) * a + b);
    }
  return 0;
}

/* ---- LayerNormalization ------------------------------------------------ */

/* X viewed as [outer, inner] with inner = ref_prod(dims[axis:]) (the node's
 * axis); norm: the inner (normalized) shape, which Scale and B broadcast
 * over; eps: the node's epsilon. LayerNormalization and RMSNormalization. */
static int norm_rows(OpCtx *c, const Tensor *x, int64_t *outer, int64_t *inner, Tensor *norm, double *eps) {
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", -1), x->rank, &axis)) return -1;
  *eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  *outer = ref_prod(x->dims, axis);
  *inner = ref_prod(x->dims + axis, x->rank - axis);
  *norm = (Tensor){.dt = x->dt, .rank = x->rank - axis};
  for (int d = axis; d < x->rank; d++) norm->dims[d - axis] = x->dims[d];
  return 0;
}

/* X viewed as [outer, inner] with inner = ref_prod(dims[axis:]); Scale and B
 * broadcast over the inner (normalized) shape. */
int ref_LayerNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  const Tensor *scale = c->in[1], *bias = gpuc_has_in(c, 2) ? c->in[2] : NULL;
  Tensor *y = c->out[0], *mout = opt_out(c, 1), *iout = opt_out(c, 2);
  int64_t outer, inner;
  double eps;
  Tensor norm;
  if (norm_rows(c, x, &outer, &inner, &norm, &eps)) return -1;
  int64_t *smap = ref_bcast_map(scale, &norm);
  int64_t *bmap = bias ? ref_bcast_map(bias, &norm) : NULL;
  if (!smap || (bias && !bmap)) {
    free(smap); free(bmap);
    return gpuc_op_fail(c, "out of host memory");
  }
  for (int64_t o = 0; o < outer; o++) {
    int64_t base = o * inner;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < inner; j++) mean += ref_ld(x, base + j);
    mean = inner ? mean / (double)inner : 0;
    for (int64_t j = 0; j < inner; j++) {
      double d = ref_ld(x, base + j) - mean;
      var += d * d;
    }
    var = inner ? var / (double)inner : 0;
    double inv = 1 / sqrt(var + eps);
    for (int64_t j = 0; j < inner; j++) {
      double v = (ref_ld(x, base + j) - mean) * inv * gpuc_get_f64(scale, smap[j]);
      if (bias) v += gpuc_get_f64(bias, bmap[j]);
      ref_st(y, base + j, v);
    }
    if (mout) gpuc_set_f64(mout, o, mean);
    if (iout) gpuc_set_f64(iout, o, inv);
  }
  free(smap);
  free(bmap);
  return 0;
}

/* RMSNormalization: X as [outer, inner], y = x / sqrt(mean(x^2) + eps) *
 * scale (broadcast over the inner shape). */
int ref_RMSNormalization(OpCtx *c) {
  const Tensor *x = c->in[0], *scale = c->in[1];
  Tensor *y = c->out[0];
  int64_t outer, inner;
  double eps;
  Tensor norm;
  if (norm_rows(c, x, &outer, &inner, &norm, &eps)) return -1;
  int64_t *smap = ref_bcast_map(scale, &norm);
  if (!smap) return gpuc_op_fail(c, "out of host memory");
  for (int64_t o = 0; o < outer; o++) {
    int64_t base = o * inner;
    double sq = 0;
    for (int64_t j = 0; j < inner; j++) sq += ref_ld(x, base + j) * ref_ld(x, base + j);
    double inv = 1 / sqrt((inner ? sq / (double)inner : 0) + eps);
    for (int64_t j = 0; j < inner; j++) ref_st(y, base + j, ref_ld(x, base + j) * inv * gpuc_get_f64(scale, smap[j]));
  }
  free(smap);
  return 0;
}

/* GroupNormalization: per (n, group) of C/G channels x S positions, the
 * mean and variance; then scale and bias per channel (opset 21) or per
 * group (18). */
int ref_GroupNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int64_t G;
  if (gpuc_group_norm_groups(c, &G)) return -1;
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  bool per_channel = c->g->opset >= 21;
  if (gpuc_numel(x) == 0) return 0;
  int64_t N = x->dims[0], C = x->dims[1], S = ref_prod(x->dims + 2, x->rank - 2), L = C / G * S;
  for (int64_t row = 0; row < N * G; row++) {
    int64_t base = row * L, g = row % G;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < L; j++) mean += ref_ld(x, base + j);
    mean = L ? mean / (double)L : 0;
    for (int64_t j = 0; j < L; j++) {
      double d = ref_ld(x, base + j) - mean;
      var += d * d;
    }
    double inv = 1 / sqrt((L ? var / (double)L : 0) + eps);
    for (int64_t j = 0; j < L; j++) {
      int64_t p = per_channel ? g * (C / G) + j / S : g;
      ref_st(y, base + j, (ref_ld(x, base + j) - mean) * inv * gpuc_get_f64(c->in[1], p) + gpuc_get_f64(c->in[2], p));
    }
  }
  return 0;
}

/* AddLayerNormalization: A + B (B repeated when it is one row) into a temporary of A's dtype (rounded as
 * the unfused Add's output would be), then ref_LayerNormalization on it. */
int ref_AddLayerNormalization(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[1];
  Tensor *s = gpuc_tensor_new(a->dt, a->rank, a->dims, c->err);
  if (!s) return -1;
  int64_t n = gpuc_numel(a), nb = gpuc_numel(b); /* B: A's shape or one row */
  for (int64_t i = 0; i < n && nb > 0; i++) ref_st(s, i, ref_ld(a, i) + ref_ld(b, i % nb));
  const Tensor *ins[3] = {s, c->in[2], gpuc_has_in(c, 3) ? c->in[3] : NULL};
  OpCtx ln = *c;
  ln.in = ins;
  ln.nin = c->nin - 1;
  int rc = ref_LayerNormalization(&ln);
  gpuc_tensor_free(s);
  return rc;
}

/* ---- LRN ------------------------------------------------------------- */

/* y = x / (bias + alpha / size * sum of x^2 over the channel window
 * [c - floor((size-1)/2), c + ceil((size-1)/2)]) ^ beta */
int ref_LRN(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int64_t size = gpuc_attr_i(c->n, "size", 1);
  double alpha = gpuc_attr_f(c->n, "alpha", 1e-4f), beta = gpuc_attr_f(c->n, "beta", 0.75f);
  double bias = gpuc_attr_f(c->n, "bias", 1.0f);
  int64_t N = x->dims[0], C = x->dims[1], S = ref_prod(x->dims + 2, x->rank - 2);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  double work = (double)gpuc_numel(x) * (double)(size < C ? size : C);
  if (work > NN_MAX_WORK)
    return gpuc_op_fail(c, "needs %.3g multiply-adds, over the reference limit of %.3g", work,
                        NN_MAX_WORK);
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < C; ch++)
      for (int64_t s = 0; s < S; s++) {
        int64_t c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi >= C ? C - 1 : ch + hi;
        double sq = 0;
        for (int64_t k = c0; k <= c1; k++) {
          double v = ref_ld(x, (n * C + k) * S + s);
          sq += v * v;
        }
        int64_t i = (n * C + ch) * S + s;
        ref_st(y, i, ref_ld(x, i) / pow(bias + alpha / (double)size * sq, beta));
      }
  return 0;
}

/* ---- MeanVarianceNormalization ---------------------------------------- */

/* Index of element i's group: its multi-index with the reduced axes
 * dropped, flattened. */
static int64_t mvn_key(int64_t i, const Tensor *x, const bool *red, const int64_t *xs,
                       const int64_t *ks) {
  int64_t key = 0;
  for (int d = 0; d < x->rank; d++)
    if (!red[d]) key += (i / xs[d]) % x->dims[d] * ks[d];
  return key;
}

/* y = (x - mean) / (sqrt(var) + 1e-9), statistics over `axes` (the ONNX
 * function definition). */
int ref_MeanVarianceNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  bool red[GPUC_MAX_RANK] = {false};
  const int64_t *axes;
  static const int64_t dflt[] = {0, 2, 3};
  int na = gpuc_attr_ints(c->n, "axes", &axes);
  if (na < 0) { axes = dflt; na = 3; }
  for (int i = 0; i < na; i++) {
    int a;
    if (gpuc_norm_axis(c, axes[i], x->rank, &a)) return -1;
    red[a] = true;
  }
  int64_t xs[GPUC_MAX_RANK], ks[GPUC_MAX_RANK], keys = 1, n = gpuc_numel(x);
  gpuc_strides(x, xs);
  for (int d = x->rank - 1; d >= 0; d--) {
    ks[d] = red[d] ? 0 : keys;
    if (!red[d]) keys *= x->dims[d];
  }
  if (keys > GPUC_MAX_TENSOR_BYTES / (2 * (int64_t)sizeof(double)))
    return gpuc_op_fail(c, "too many groups (%lld) for the reference kernel", (long long)keys);
  double *mean = calloc((size_t)(2 * keys + 1), sizeof(double)), *var = mean + keys;
  if (!mean) return gpuc_op_fail(c, "out of host memory");
  double cnt = keys ? (double)n / (double)keys : 0;
  for (int64_t i = 0; i < n; i++) mean[mvn_key(i, x, red, xs, ks)] += ref_ld(x, i);
  for (int64_t k = 0; k < keys; k++) mean[k] = cnt > 0 ? mean[k] / cnt : 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t k = mvn_key(i, x, red, xs, ks);
    double d = ref_ld(x, i) - mean[k];
    var[k] += d * d;
  }
  for (int64_t k = 0; k < keys; k++) var[k] = cnt > 0 ? var[k] / cnt : 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t k = mvn_key(i, x, red, xs, ks);
    ref_st(y, i, (ref_ld(x, i) - mean[k]) / (sqrt(var[k]) + 1e-9));
  }
  free(mean);
  return 0;
}
