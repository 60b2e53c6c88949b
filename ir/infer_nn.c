/* Shape inference for the NN family: Conv, ConvTranspose, pools, the
 * normalizations, DepthToSpace/SpaceToDepth, Resize and Upsample.
 * The window/resize geometry functions are also what the reference kernels
 * call (infer_nn.h), so shapes and kernels cannot disagree. */
#include "infer_nn.h"
#include "conv_act.h"
#include <math.h>
#include <string.h>

/* ---- small helpers ----------------------------------------------------- */

static bool is_float_dt(GpucDType dt) {
  return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16 || dt == GPUC_DT_F64;
}

static void set_out(OpCtx *c, int k, GpucDType dt, int rank, const int64_t *dims) {
  if (k < c->nout && c->out[k]) gpuc_set_shape(c->out[k], dt, rank, dims);
}

/* dst = t's shape with dims permuted (dst[i] = t[perm[i]]), rank 4, no data */
static void permuted_shape(const Tensor *t, const int perm[4], Tensor *dst) {
  *dst = *t;
  dst->data = NULL;
  for (int i = 0; i < 4; i++) dst->dims[i] = t->dims[perm[i]];
}

/* Input i must be a float tensor. */
static int need_float(OpCtx *c, int i, const char *what) {
  if (!gpuc_has_in(c, i)) return 0;
  if (!is_float_dt(c->in[i]->dt))
    return gpuc_op_unsupported(c, "%s has dtype %s; only float types are supported", what,
                               gpuc_dtype_name(c->in[i]->dt));
  return 0;
}

/* Input i must have the same dtype as input 0. */
static int same_dt(OpCtx *c, int i, const char *what) {
  if (!gpuc_has_in(c, i) || c->in[i]->dt == c->in[0]->dt) return 0;
  return gpuc_op_fail(c, "%s has dtype %s, X has %s; they must match", what,
                      gpuc_dtype_name(c->in[i]->dt), gpuc_dtype_name(c->in[0]->dt));
}

/* Optional input i must be 1-D of length n (n < 0: unknown, not checked). */
static int need_vec(OpCtx *c, int i, int64_t n, const char *what) {
  if (!gpuc_has_in(c, i)) return 0;
  const Tensor *t = c->in[i];
  if (t->rank != 1) return gpuc_op_fail(c, "%s must be 1-D, got rank %d", what, t->rank);
  if (n >= 0 && t->dims[0] >= 0 && t->dims[0] != n)
    return gpuc_op_fail(c, "%s has %lld elements, expected %lld", what, (long long)t->dims[0],
                        (long long)n);
  return 0;
}

/* INTS attribute `name` with exactly n values in [lo, NN_DIM_LIMIT], or
 * absent (dst filled with dflt). *given (if not NULL) tells which. */
static int ints_attr(OpCtx *c, const char *name, int n, int64_t dflt, int64_t lo,
                     int64_t *dst, bool *given) {
  const int64_t *v;
  int cnt = gpuc_attr_ints(c->n, name, &v);
  if (given) *given = cnt >= 0;
  if (cnt < 0) {
    if (gpuc_attr(c->n, name)) return gpuc_op_fail(c, "attribute %s must be a list of ints", name);
    for (int i = 0; i < n; i++) dst[i] = dflt;
    return 0;
  }
  if (cnt != n)
    return gpuc_op_fail(c, "attribute %s has %d values, expected %d", name, cnt, n);
  for (int i = 0; i < n; i++) {
    if (v[i] < lo || v[i] > NN_DIM_LIMIT)
      return gpuc_op_fail(c, "attribute %s[%d] = %lld is out of range [%lld, %lld]", name, i,
                          (long long)v[i], (long long)lo, (long long)NN_DIM_LIMIT);
    dst[i] = v[i];
  }
  return 0;
}

enum { AP_NOTSET, AP_VALID, AP_SAME_UPPER, AP_SAME_LOWER };

static int auto_pad_attr(OpCtx *c, int *mode) {
  const char *s = gpuc_attr_s(c->n, "auto_pad", "NOTSET");
  if (!strcmp(s, "NOTSET") || !*s) *mode = AP_NOTSET;
  else if (!strcmp(s, "VALID")) *mode = AP_VALID;
  else if (!strcmp(s, "SAME_UPPER")) *mode = AP_SAME_UPPER;
  else if (!strcmp(s, "SAME_LOWER")) *mode = AP_SAME_LOWER;
  else return gpuc_op_fail(c, "auto_pad '%s' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER", s);
  return 0;
}

/* Spatial dims of X (must be >= 1 when known and below NN_DIM_LIMIT). */
static int spatial_in(OpCtx *c, const Tensor *x, NnWindow *w) {
  if (x->rank < 3)
    return gpuc_op_fail(c, "X must have rank >= 3 ([N, C, D1, ...]), got %d", x->rank);
  w->nsp = x->rank - 2;
  w->n = x->dims[0];
  for (int i = 0; i < w->nsp; i++) {
    int64_t d = x->dims[2 + i];
    if (d == 0 || d > NN_DIM_LIMIT)
      return gpuc_op_fail(c, "X spatial dim %d is %lld; it must be in [1, %lld]", i,
                          (long long)d, (long long)NN_DIM_LIMIT);
    w->in[i] = d;
  }
  return 0;
}

/* Kernel extent from the kernel_shape attribute and/or W's spatial dims. */
static int kernel_dims(OpCtx *c, const Tensor *wt, NnWindow *w) {
  bool given;
  int64_t ks[NN_MAX_SP];
  if (ints_attr(c, "kernel_shape", w->nsp, -1, 1, ks, &given)) return -1;
  for (int i = 0; i < w->nsp; i++) {
    int64_t wd = wt ? wt->dims[2 + i] : -1;
    if (wd == 0 || wd > NN_DIM_LIMIT)
      return gpuc_op_fail(c, "W spatial dim %d is %lld; it must be in [1, %lld]", i, (long long)wd,
                          (long long)NN_DIM_LIMIT);
    if (given && wd >= 0 && wd != ks[i])
      return gpuc_op_fail(c, "kernel_shape[%d] = %lld but W has %lld there", i, (long long)ks[i],
                          (long long)wd);
    w->k[i] = given ? ks[i] : wd;
  }
  return 0;
}

/* (k - 1) * dil + 1, or -1 when k is unknown; fails past NN_DIM_LIMIT. */
static int dilated(OpCtx *c, const NnWindow *w, int i, int64_t *eff) {
  *eff = -1;
  if (w->k[i] < 0) return 0;
  if (w->k[i] - 1 > NN_DIM_LIMIT / w->dil[i])
    return gpuc_op_fail(c, "dilated kernel in spatial dim %d is too large (%lld taps, dilation %lld)",
                        i, (long long)w->k[i], (long long)w->dil[i]);
  *eff = (w->k[i] - 1) * w->dil[i] + 1;
  return 0;
}

/* Strides, dilations, pads, auto_pad and the output size of a Conv or pool
 * window (not ConvTranspose). */
static int window_out(OpCtx *c, NnWindow *w, bool pool) {
  int nsp = w->nsp, ap;
  int64_t pads[2 * NN_MAX_SP];
  bool pads_given;
  if (ints_attr(c, "strides", nsp, 1, 1, w->stride, NULL) ||
      ints_attr(c, "dilations", nsp, 1, 1, w->dil, NULL) ||
      ints_attr(c, "pads", 2 * nsp, 0, 0, pads, &pads_given) || auto_pad_attr(c, &ap))
    return -1;
  for (int i = 0; i < nsp; i++) {
    int64_t eff, in = w->in[i], s = w->stride[i];
    if (dilated(c, w, i, &eff)) return -1;
    if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
      /* out = ceil(in / stride); the padding makes the last window fit */
      w->out[i] = in < 0 ? -1 : (in + s - 1) / s;
      w->pad_b[i] = w->pad_e[i] = -1;
      if (in >= 0 && eff >= 0) {
        int64_t total = (w->out[i] - 1) * s + eff - in;
        if (total < 0) total = 0;
        int64_t small = total / 2;
        w->pad_b[i] = ap == AP_SAME_UPPER ? small : total - small;
        w->pad_e[i] = total - w->pad_b[i];
      }
      continue;
    }
    w->pad_b[i] = ap == AP_VALID ? 0 : pads[i];
    w->pad_e[i] = ap == AP_VALID ? 0 : pads[nsp + i];
    if (pool && eff >= 0 && (w->pad_b[i] >= eff || w->pad_e[i] >= eff))
      return gpuc_op_fail(c, "pads (%lld, %lld) in spatial dim %d must be smaller than the kernel extent %lld",
                          (long long)w->pad_b[i], (long long)w->pad_e[i], i, (long long)eff);
    if (in < 0 || eff < 0) { w->out[i] = -1; continue; }
    int64_t span = in + w->pad_b[i] + w->pad_e[i];
    if (span < eff)
      return gpuc_op_fail(c, "kernel extent %lld is larger than the padded input %lld in spatial dim %d",
                          (long long)eff, (long long)span, i);
    if (pool && w->ceil_mode) {
      int64_t o = (span - eff + s - 1) / s + 1;
      /* the last window must start inside the input or its begin padding */
      if ((o - 1) * s >= in + w->pad_b[i]) o--;
      w->out[i] = o;
    } else {
      w->out[i] = (span - eff) / s + 1;
    }
  }
  return 0;
}

/* ---- window geometry (shared with the kernels) -------------------------- */

/* What Conv and ConvTranspose check alike: X's spatial dims, W's rank,
 * group, and C from X. */
static int conv_common(OpCtx *c, NnWindow *w) {
  const Tensor *x = c->in[0], *wt = c->in[1];
  memset(w, 0, sizeof *w);
  if (spatial_in(c, x, w)) return -1;
  if (wt->rank != x->rank)
    return gpuc_op_fail(c, "W has rank %d, X has rank %d; they must match", wt->rank, x->rank);
  w->group = gpuc_attr_i(c->n, "group", 1);
  if (w->group < 1 || w->group > NN_DIM_LIMIT)
    return gpuc_op_fail(c, "group %lld must be >= 1", (long long)w->group);
  w->c_in = x->dims[1];
  return 0;
}

int nn_conv_window(OpCtx *c, NnWindow *w) {
  const Tensor *wt = c->in[1];
  if (conv_common(c, w)) return -1;
  w->c_out = wt->dims[0];
  int64_t wc = wt->dims[1];
  /* C == W dims[1] * group, checked without multiplying untrusted dims */
  if (w->c_in >= 0 && wc >= 0 && (w->c_in % w->group || w->c_in / w->group != wc))
    return gpuc_op_fail(c, "X has %lld channels, which is not W dims[1] (%lld) times group (%lld)",
                        (long long)w->c_in, (long long)wc, (long long)w->group);
  if (w->c_out >= 0 && w->c_out % w->group)
    return gpuc_op_fail(c, "W has %lld output channels, not a multiple of group %lld",
                        (long long)w->c_out, (long long)w->group);
  if (need_vec(c, 2, w->c_out, "B")) return -1;
  if (kernel_dims(c, wt, w)) return -1;
  return window_out(c, w, false);
}

int nn_convt_window(OpCtx *c, NnWindow *w) {
  const Tensor *wt = c->in[1];
  if (conv_common(c, w)) return -1;
  if (w->c_in >= 0 && wt->dims[0] >= 0 && w->c_in != wt->dims[0])
    return gpuc_op_fail(c, "X has %lld channels, W has %lld input channels (dims[0])",
                        (long long)w->c_in, (long long)wt->dims[0]);
  int64_t cin = w->c_in >= 0 ? w->c_in : wt->dims[0];
  if (cin >= 0 && cin % w->group)
    return gpuc_op_fail(c, "%lld input channels are not a multiple of group %lld", (long long)cin,
                        (long long)w->group);
  w->c_out = -1;
  if (wt->dims[1] >= 0) {
    if (wt->dims[1] > NN_DIM_LIMIT / w->group)
      return gpuc_op_fail(c, "output channel count overflows");
    w->c_out = wt->dims[1] * w->group;
  }
  if (need_vec(c, 2, w->c_out, "B")) return -1;
  if (kernel_dims(c, wt, w)) return -1;

  int nsp = w->nsp, ap;
  int64_t pads[2 * NN_MAX_SP], opad[NN_MAX_SP];
  bool pads_given;
  if (ints_attr(c, "strides", nsp, 1, 1, w->stride, NULL) ||
      ints_attr(c, "dilations", nsp, 1, 1, w->dil, NULL) ||
      ints_attr(c, "pads", 2 * nsp, 0, 0, pads, &pads_given) ||
      ints_attr(c, "output_padding", nsp, 0, 0, opad, NULL) || auto_pad_attr(c, &ap))
    return -1;
  /* output_shape: the spatial dims, or (as some exporters write) N, C too */
  const int64_t *os;
  int nos = gpuc_attr_ints(c->n, "output_shape", &os);
  if (nos >= 0 && nos != nsp && nos != nsp + 2)
    return gpuc_op_fail(c, "output_shape has %d values, expected %d", nos, nsp);
  for (int i = 0; i < nsp; i++) {
    int64_t eff, in = w->in[i], s = w->stride[i];
    if (dilated(c, w, i, &eff)) return -1;
    if (opad[i] >= s && opad[i] >= w->dil[i])
      return gpuc_op_fail(c, "output_padding[%d] = %lld must be smaller than the stride or the dilation",
                          i, (long long)opad[i]);
    if (in > 0 && in - 1 > NN_DIM_LIMIT / s)
      return gpuc_op_fail(c, "output of spatial dim %d would be too large (input %lld, stride %lld)",
                          i, (long long)in, (long long)s);
    /* full (unpadded) extent: stride * (in - 1) + output_padding + eff */
    int64_t full = in < 0 || eff < 0 ? -1 : s * (in - 1) + opad[i] + eff;
    int64_t out;
    if (nos >= 0 || ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
      if (nos >= 0) {
        out = os[nos - nsp + i];
        if (out < 1 || out > NN_DIM_LIMIT)
          return gpuc_op_fail(c, "output_shape[%d] = %lld is out of range", i, (long long)out);
      } else {
        out = in < 0 ? -1 : in * s;
      }
      w->out[i] = out;
      w->pad_b[i] = w->pad_e[i] = -1;
      if (full >= 0 && out >= 0) {
        int64_t total = full - out;
        if (total < 0) { /* output extends past the last tap: zeros (+bias) */
          w->pad_b[i] = 0;
          w->pad_e[i] = total;
        } else {
          int64_t small = total / 2;
          w->pad_b[i] = ap == AP_SAME_UPPER ? small : total - small;
          w->pad_e[i] = total - w->pad_b[i];
        }
      }
      continue;
    }
    w->pad_b[i] = ap == AP_VALID ? 0 : pads[i];
    w->pad_e[i] = ap == AP_VALID ? 0 : pads[nsp + i];
    if (full < 0) { w->out[i] = -1; continue; }
    out = full - w->pad_b[i] - w->pad_e[i];
    if (out < 1)
      return gpuc_op_fail(c, "pads (%lld, %lld) leave no output in spatial dim %d (unpadded size %lld)",
                          (long long)w->pad_b[i], (long long)w->pad_e[i], i, (long long)full);
    w->out[i] = out;
  }
  return 0;
}

bool nn_pool_nhwc(const OpCtx *c) {
  return (c->n->op == GPUC_OP_MAXPOOL || c->n->op == GPUC_OP_AVERAGEPOOL) &&
         gpuc_attr_i(c->n, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC;
}

int nn_pool_window(OpCtx *c, NnWindow *w) {
  const Tensor *x = c->in[0];
  Tensor view;
  memset(w, 0, sizeof *w);
  if (nn_pool_nhwc(c)) { /* the window of the NCHW view */
    if (x->rank != 4) return gpuc_op_fail(c, "an NHWC pool must be 2-D");
    static const int to_nchw[4] = GPUC_NHWC_TO_NCHW;
    permuted_shape(x, to_nchw, &view);
    x = &view;
  }
  if (spatial_in(c, x, w)) return -1;
  w->group = 1;
  w->c_in = w->c_out = x->dims[1];
  bool given;
  if (ints_attr(c, "kernel_shape", w->nsp, -1, 1, w->k, &given)) return -1;
  if (!given) return gpuc_op_fail(c, "attribute kernel_shape is required");
  int64_t cm = gpuc_attr_i(c->n, "ceil_mode", 0);
  if (cm != 0 && cm != 1) return gpuc_op_fail(c, "ceil_mode must be 0 or 1, got %lld", (long long)cm);
  w->ceil_mode = cm == 1;
  return window_out(c, w, true);
}

/* [N, C_out, out...] (NHWC MaxPool / AveragePool: [N, out..., C]) */
static void set_window_out(OpCtx *c, const NnWindow *w, GpucDType dt, int k) {
  int64_t dims[GPUC_MAX_RANK];
  bool nhwc = nn_pool_nhwc(c);
  dims[0] = w->n;
  dims[nhwc ? w->nsp + 1 : 1] = w->c_out;
  for (int i = 0; i < w->nsp; i++) dims[(nhwc ? 1 : 2) + i] = w->out[i];
  set_out(c, k, dt, w->nsp + 2, dims);
}

/* ---- conv and pools ---------------------------------------------------- */

int infer_Conv(OpCtx *c) {
  NnWindow w;
  if (need_float(c, 0, "X") || same_dt(c, 1, "W") || same_dt(c, 2, "B")) return -1;
  if (nn_conv_window(c, &w)) return -1;
  set_window_out(c, &w, c->in[0]->dt, 0);
  return 0;
}

int infer_ConvTranspose(OpCtx *c) {
  NnWindow w;
  if (need_float(c, 0, "X") || same_dt(c, 1, "W") || same_dt(c, 2, "B")) return -1;
  if (nn_convt_window(c, &w)) return -1;
  set_window_out(c, &w, c->in[0]->dt, 0);
  return 0;
}

int infer_AveragePool(OpCtx *c) {
  NnWindow w;
  if (need_float(c, 0, "X")) return -1;
  int64_t cip = gpuc_attr_i(c->n, "count_include_pad", 0);
  if (cip != 0 && cip != 1)
    return gpuc_op_fail(c, "count_include_pad must be 0 or 1, got %lld", (long long)cip);
  if (nn_pool_window(c, &w)) return -1;
  set_window_out(c, &w, c->in[0]->dt, 0);
  return 0;
}

int infer_MaxPool(OpCtx *c) {
  NnWindow w;
  GpucDType dt = c->in[0]->dt;
  if (dt == GPUC_DT_BOOL)
    return gpuc_op_unsupported(c, "X has dtype bool, which MaxPool does not support");
  int64_t so = gpuc_attr_i(c->n, "storage_order", 0);
  if (so != 0 && so != 1)
    return gpuc_op_fail(c, "storage_order must be 0 or 1, got %lld", (long long)so);
  if (nn_pool_window(c, &w)) return -1;
  if (nn_pool_nhwc(c) && c->nout > 1 && c->out[1])
    return gpuc_op_fail(c, "an NHWC MaxPool has no Indices output");
  set_window_out(c, &w, dt, 0);
  set_window_out(c, &w, GPUC_DT_I64, 1); /* Indices */
  return 0;
}

/* [N, C, 1, ..., 1] */
static int infer_global_pool(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (x->rank < 2) return gpuc_op_fail(c, "X must have rank >= 2 ([N, C, ...]), got %d", x->rank);
  int64_t dims[GPUC_MAX_RANK];
  int64_t layout = gpuc_attr_i(c->n, "layout", GPUC_LAYOUT_NCHW);
  if (layout == GPUC_LAYOUT_NHWC) { /* gpuc's own (passes/layout_nhwc.c): X [N,H,W,C] -> [N,1,1,C] */
    if (c->n->op != GPUC_OP_GLOBALAVERAGEPOOL || x->rank != 4)
      return gpuc_op_fail(c, "an NHWC global pool must be a 2-D GlobalAveragePool");
    int64_t d4[4] = {x->dims[0], 1, 1, x->dims[3]};
    set_out(c, 0, x->dt, 4, d4);
    return 0;
  }
  if (layout != GPUC_LAYOUT_NCHW) return gpuc_op_fail(c, "layout %lld is not 0 (NCHW) or 1 (NHWC)", (long long)layout);
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  set_out(c, 0, x->dt, x->rank, dims);
  return 0;
}

int infer_GlobalAveragePool(OpCtx *c) {
  if (need_float(c, 0, "X")) return -1;
  return infer_global_pool(c);
}

int infer_GlobalMaxPool(OpCtx *c) {
  if (c->in[0]->dt == GPUC_DT_BOOL)
    return gpuc_op_unsupported(c, "X has dtype bool, which GlobalMaxPool does not support");
  return infer_global_pool(c);
}

/* ---- normalizations ---------------------------------------------------- */

/* Per-channel parameter input i: [C], or for BatchNormalization with
 * spatial=0 (opset < 9) X's shape without N. */
static int channel_param(OpCtx *c, int i, const char *what, bool per_activation) {
  const Tensor *x = c->in[0], *t = c->in[i];
  if (need_float(c, i, what)) return -1;
  if (!per_activation) return need_vec(c, i, x->dims[1], what);
  if (t->rank != x->rank - 1)
    return gpuc_op_fail(c, "%s must have rank %d (spatial=0), got %d", what, x->rank - 1, t->rank);
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] >= 0 && x->dims[d + 1] >= 0 && t->dims[d] != x->dims[d + 1])
      return gpuc_op_fail(c, "%s dim %d is %lld, X has %lld", what, d, (long long)t->dims[d],
                          (long long)x->dims[d + 1]);
  return 0;
}

int infer_BatchNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (need_float(c, 0, "X")) return -1;
  if (x->rank < 2) return gpuc_op_fail(c, "X must have rank >= 2 ([N, C, ...]), got %d", x->rank);
  bool per_act = c->g->opset < 9 && gpuc_attr_i(c->n, "spatial", 1) == 0;
  static const char *names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; i++)
    if (channel_param(c, i, names[i], per_act)) return -1;
  set_out(c, 0, x->dt, x->rank, x->dims);
  /* running mean / var (training mode): shaped like the parameters */
  set_out(c, 1, c->in[3]->dt, c->in[3]->rank, c->in[3]->dims);
  set_out(c, 2, c->in[4]->dt, c->in[4]->rank, c->in[4]->dims);
  return 0;
}

int infer_InstanceNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (need_float(c, 0, "X") || same_dt(c, 1, "scale") || same_dt(c, 2, "B")) return -1;
  if (x->rank < 2) return gpuc_op_fail(c, "X must have rank >= 2 ([N, C, ...]), got %d", x->rank);
  if (need_vec(c, 1, x->dims[1], "scale") || need_vec(c, 2, x->dims[1], "B")) return -1;
  set_out(c, 0, x->dt, x->rank, x->dims);
  return 0;
}

/* stash_type is a TensorProto dtype code */
static int stash_dtype(OpCtx *c, GpucDType *dt) {
  int64_t st = gpuc_attr_i(c->n, "stash_type", 1);
  *dt = GPUC_DT_F32;
  switch (st) {
  case 1: *dt = GPUC_DT_F32; return 0;
  case 10: *dt = GPUC_DT_F16; return 0;
  case 11: *dt = GPUC_DT_F64; return 0;
  case 16: *dt = GPUC_DT_BF16; return 0;
  default: return gpuc_op_fail(c, "stash_type %lld is not a float type", (long long)st);
  }
}

/* Scale/B (input i) must broadcast (numpy, one way) to X's dims [axis:]. */
static int norm_param(OpCtx *c, int i, int axis, const char *what) {
  if (!gpuc_has_in(c, i)) return 0;
  const Tensor *x = c->in[0], *t = c->in[i];
  if (need_float(c, i, what)) return -1;
  int nr = x->rank - axis;
  if (t->rank > nr)
    return gpuc_op_fail(c, "%s has rank %d, more than the %d normalized dims", what, t->rank, nr);
  for (int d = 0; d < t->rank; d++) {
    int64_t a = t->dims[d], b = x->dims[x->rank - t->rank + d];
    if (a >= 0 && b >= 0 && a != 1 && a != b)
      return gpuc_op_fail(c, "%s dim %d is %lld, which does not broadcast to X's %lld", what, d,
                          (long long)a, (long long)b);
  }
  return 0;
}

/* What LayerNormalization and RMSNormalization check alike: X float of
 * rank >= 1, the stash dtype st, the axis, and the scale input (named
 * scale_name) broadcasting over X's dims from axis. */
static int norm_x_scale(OpCtx *c, const char *scale_name, GpucDType *st, int *axis) {
  const Tensor *x = c->in[0];
  if (need_float(c, 0, "X") || stash_dtype(c, st)) return -1;
  if (x->rank < 1) return gpuc_op_fail(c, "X must have rank >= 1");
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", -1), x->rank, axis)) return -1;
  return norm_param(c, 1, *axis, scale_name);
}

int infer_LayerNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  GpucDType st;
  int axis;
  if (norm_x_scale(c, "Scale", &st, &axis) || norm_param(c, 2, axis, "B")) return -1;
  set_out(c, 0, x->dt, x->rank, x->dims);
  int64_t dims[GPUC_MAX_RANK];
  for (int d = 0; d < x->rank; d++) dims[d] = d < axis ? x->dims[d] : 1;
  set_out(c, 1, st, x->rank, dims); /* Mean */
  set_out(c, 2, st, x->rank, dims); /* InvStdDev */
  return 0;
}

/* RMSNormalization-23(X, Scale): LayerNormalization without centering or
 * bias; Y only. */
int infer_RMSNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  GpucDType st;
  int axis;
  if (norm_x_scale(c, "scale", &st, &axis)) return -1;
  set_out(c, 0, x->dt, x->rank, x->dims);
  return 0;
}

/* GroupNormalization(X [N, C, ...], scale, bias): statistics per (n,
 * group) over C / num_groups channels and the spatial dims; scale and bias
 * are per group (opset 18) or per channel (opset 21). */
int gpuc_group_norm_groups(OpCtx *c, int64_t *groups) {
  const Tensor *x = c->in[0];
  int64_t g = gpuc_attr_i(c->n, "num_groups", -1);
  if (g < 1 || g > NN_DIM_LIMIT)
    return gpuc_op_fail(c, "attribute num_groups must be given and >= 1, got %lld", (long long)g);
  if (x->rank < 2) return gpuc_op_fail(c, "X must have rank >= 2 ([N, C, ...]), got %d", x->rank);
  if (x->dims[1] >= 0 && x->dims[1] % g)
    return gpuc_op_fail(c, "%lld channels do not divide into %lld groups", (long long)x->dims[1], (long long)g);
  *groups = g;
  return 0;
}

int infer_GroupNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  GpucDType st;
  int64_t g;
  if (need_float(c, 0, "X") || need_float(c, 1, "scale") || need_float(c, 2, "bias") ||
      stash_dtype(c, &st) || gpuc_group_norm_groups(c, &g))
    return -1;
  int64_t n = c->g->opset >= 21 ? x->dims[1] : g;
  if (need_vec(c, 1, n, "scale") || need_vec(c, 2, n, "bias")) return -1;
  set_out(c, 0, x->dt, x->rank, x->dims);
  return 0;
}

/* AddLayerNormalization(A, B, Scale, Bias?): LayerNormalization of A + B, A
 * and B of one dtype, B of A's shape or A's normalized dims (a row added to
 * every row); Y only (no Mean/InvStdDev). */
int infer_AddLayerNormalization(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[1];
  if (a->dt != b->dt)
    return gpuc_op_fail(c, "A has dtype %s, B has %s; they must match", gpuc_dtype_name(a->dt),
                        gpuc_dtype_name(b->dt));
  /* B of A's shape, or one row broadcast over the rows: B's dims are A's
   * normalized dims (axis..) */
  int64_t axis = gpuc_attr_i(c->n, "axis", -1);
  if (axis < 0) axis += a->rank;
  int lead = a->rank - b->rank;
  if (lead != 0 && lead != axis)
    return gpuc_op_fail(c, "B has rank %d; it must be A's (%d) or A's normalized dims' (%d)", b->rank, a->rank,
                        (int)(a->rank - axis));
  for (int d = 0; d < b->rank; d++)
    if (a->dims[d + lead] >= 0 && b->dims[d] >= 0 && a->dims[d + lead] != b->dims[d])
      return gpuc_op_fail(c, "A dim %d is %lld, B's dim %d %lld; they must match", d + lead,
                          (long long)a->dims[d + lead], d, (long long)b->dims[d]);
  /* the LayerNormalization of X = A (A + B has A's shape) */
  const Tensor *ins[3] = {a, c->in[2], gpuc_has_in(c, 3) ? c->in[3] : NULL};
  OpCtx ln = *c;
  ln.in = ins;
  ln.nin = c->nin - 1;
  return infer_LayerNormalization(&ln);
}

int infer_LRN(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (need_float(c, 0, "X")) return -1;
  if (x->rank < 2) return gpuc_op_fail(c, "X must have rank >= 2 ([N, C, ...]), got %d", x->rank);
  int64_t size = gpuc_attr_i(c->n, "size", -1);
  if (size < 1 || size > NN_DIM_LIMIT)
    return gpuc_op_fail(c, "attribute size must be given and >= 1, got %lld", (long long)size);
  set_out(c, 0, x->dt, x->rank, x->dims);
  return 0;
}

int infer_MeanVarianceNormalization(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (need_float(c, 0, "X")) return -1;
  const int64_t *axes;
  int n = gpuc_attr_ints(c->n, "axes", &axes);
  if (n < 0 && x->rank != 4)
    return gpuc_op_fail(c, "default axes [0, 2, 3] need a 4-D X, got rank %d", x->rank);
  for (int i = 0; i < n; i++) {
    int a;
    if (gpuc_norm_axis(c, axes[i], x->rank, &a)) return -1;
  }
  set_out(c, 0, x->dt, x->rank, x->dims);
  return 0;
}

/* ---- DepthToSpace / SpaceToDepth -------------------------------------- */

static int block_attr(OpCtx *c, int64_t *b) {
  *b = gpuc_attr_i(c->n, "blocksize", -1);
  if (*b < 1 || *b > 65536)
    return gpuc_op_fail(c, "attribute blocksize must be given and in [1, 65536], got %lld",
                        (long long)*b);
  if (c->in[0]->rank != 4)
    return gpuc_op_fail(c, "X must be 4-D [N, C, H, W], got rank %d", c->in[0]->rank);
  return 0;
}

int infer_DepthToSpace(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t b;
  if (block_attr(c, &b)) return -1;
  const char *mode = gpuc_attr_s(c->n, "mode", "DCR");
  if (strcmp(mode, "DCR") && strcmp(mode, "CRD"))
    return gpuc_op_fail(c, "mode '%s' is not DCR or CRD", mode);
  if (x->dims[1] >= 0 && x->dims[1] % (b * b))
    return gpuc_op_fail(c, "%lld channels are not a multiple of blocksize^2 = %lld",
                        (long long)x->dims[1], (long long)(b * b));
  int64_t dims[4] = {x->dims[0], x->dims[1] < 0 ? -1 : x->dims[1] / (b * b), -1, -1};
  for (int i = 2; i < 4; i++) {
    if (x->dims[i] > NN_DIM_LIMIT) return gpuc_op_fail(c, "X dim %d is too large", i);
    dims[i] = x->dims[i] < 0 ? -1 : x->dims[i] * b;
  }
  set_out(c, 0, x->dt, 4, dims);
  return 0;
}

int infer_SpaceToDepth(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t b;
  if (block_attr(c, &b)) return -1;
  int64_t dims[4] = {x->dims[0], -1, -1, -1};
  if (x->dims[1] > NN_DIM_LIMIT / (b * b)) return gpuc_op_fail(c, "X has too many channels");
  dims[1] = x->dims[1] < 0 ? -1 : x->dims[1] * b * b;
  for (int i = 2; i < 4; i++) {
    if (x->dims[i] >= 0 && x->dims[i] % b)
      return gpuc_op_fail(c, "X dim %d (%lld) is not a multiple of blocksize %lld", i,
                          (long long)x->dims[i], (long long)b);
    dims[i] = x->dims[i] < 0 ? -1 : x->dims[i] / b;
  }
  set_out(c, 0, x->dt, 4, dims);
  return 0;
}

/* ---- Resize / Upsample ------------------------------------------------- */

static int parse_modes(OpCtx *c, NnResize *p, bool legacy) {
  const char *m = gpuc_attr_s(c->n, "mode", "nearest");
  if (!strcmp(m, "nearest")) p->mode = NN_RS_NEAREST;
  else if (!strcmp(m, "linear") || !strcmp(m, "bilinear")) p->mode = NN_RS_LINEAR;
  else if (!strcmp(m, "cubic") && !legacy) p->mode = NN_RS_CUBIC;
  else return gpuc_op_fail(c, "mode '%s' is not supported", m);
  p->cubic_a = -0.75;
  p->extrapolation = 0;
  if (legacy) { /* Upsample, Resize-10: asymmetric, truncating nearest */
    p->coord = NN_CT_ASYMMETRIC;
    p->nearest = NN_NR_SIMPLE;
    return 0;
  }
  static const struct { const char *s; NnCoordMode m; } ct[] = {
    {"half_pixel", NN_CT_HALF_PIXEL}, {"half_pixel_symmetric", NN_CT_HALF_PIXEL_SYMMETRIC},
    {"pytorch_half_pixel", NN_CT_PYTORCH_HALF_PIXEL}, {"align_corners", NN_CT_ALIGN_CORNERS},
    {"asymmetric", NN_CT_ASYMMETRIC}, {"tf_half_pixel_for_nn", NN_CT_TF_HALF_PIXEL_FOR_NN},
    {"tf_crop_and_resize", NN_CT_TF_CROP_AND_RESIZE}};
  static const struct { const char *s; NnNearestMode m; } nr[] = {
    {"round_prefer_floor", NN_NR_ROUND_PREFER_FLOOR}, {"round_prefer_ceil", NN_NR_ROUND_PREFER_CEIL},
    {"floor", NN_NR_FLOOR}, {"ceil", NN_NR_CEIL}};
  const char *s = gpuc_attr_s(c->n, "coordinate_transformation_mode", "half_pixel");
  size_t i;
  for (i = 0; i < sizeof ct / sizeof ct[0] && strcmp(s, ct[i].s); i++) {}
  if (i == sizeof ct / sizeof ct[0])
    return gpuc_op_fail(c, "coordinate_transformation_mode '%s' is not supported", s);
  p->coord = ct[i].m;
  s = gpuc_attr_s(c->n, "nearest_mode", "round_prefer_floor");
  for (i = 0; i < sizeof nr / sizeof nr[0] && strcmp(s, nr[i].s); i++) {}
  if (i == sizeof nr / sizeof nr[0]) return gpuc_op_fail(c, "nearest_mode '%s' is not supported", s);
  p->nearest = nr[i].m;
  p->cubic_a = gpuc_attr_f(c->n, "cubic_coeff_a", -0.75f);
  p->extrapolation = gpuc_attr_f(c->n, "extrapolation_value", 0.0f);
  int64_t eo = gpuc_attr_i(c->n, "exclude_outside", 0), aa = gpuc_attr_i(c->n, "antialias", 0);
  if ((eo != 0 && eo != 1) || (aa != 0 && aa != 1))
    return gpuc_op_fail(c, "exclude_outside and antialias must be 0 or 1");
  if (!isfinite(p->cubic_a)) return gpuc_op_fail(c, "cubic_coeff_a must be finite");
  p->exclude_outside = eo == 1;
  p->antialias = aa == 1 && p->mode != NN_RS_NEAREST;
  return 0;
}

/* True when input t is absent or known to have no elements. -1: its
 * element count is not known yet. */
static int empty_input(const Tensor *t) {
  if (!t) return 1;
  int64_t n = gpuc_numel(t);
  if (n < 0) return -1;
  return n == 0;
}

/* Read float scales (n values) from input t into s[]. */
static int read_scales(OpCtx *c, const Tensor *t, int n, double *s) {
  if (!gpuc_dtype_is_float(t->dt))
    return gpuc_op_fail(c, "scales must be a float tensor, got %s", gpuc_dtype_name(t->dt));
  if (t->rank != 1 || t->dims[0] != n)
    return gpuc_op_fail(c, "scales must be 1-D with %d values", n);
  for (int i = 0; i < n; i++) {
    s[i] = gpuc_get_f64(t, i);
    if (!(s[i] > 0) || !isfinite(s[i]))
      return gpuc_op_fail(c, "scales[%d] = %g must be positive and finite", i, s[i]);
  }
  return 0;
}

int nn_resize_params(OpCtx *c, NnResize *p) {
  const Tensor *x = c->in[0];
  bool upsample = c->n->op == GPUC_OP_UPSAMPLE;
  int64_t opset = c->g->opset;
  bool legacy = upsample || opset < 11;
  int r = x->rank;
  memset(p, 0, sizeof *p);
  p->rank = r;
  if (r < 1) return gpuc_op_fail(c, "X must have rank >= 1");
  if (parse_modes(c, p, legacy)) return -1;
  for (int d = 0; d < r; d++) {
    if (x->dims[d] > NN_DIM_LIMIT) return gpuc_op_fail(c, "X dim %d is too large", d);
    p->out[d] = x->dims[d];
    p->scale[d] = 1;
    p->length[d] = (double)x->dims[d];
    p->roi_start[d] = 0;
    p->roi_end[d] = 1;
  }

  /* axes the scales/sizes refer to (opset 18), all by default */
  int axes[GPUC_MAX_RANK], na = r;
  for (int d = 0; d < r; d++) axes[d] = d;
  const int64_t *av;
  int nav = legacy ? -1 : gpuc_attr_ints(c->n, "axes", &av);
  if (nav >= 0) {
    if (nav < 1 || nav > r) return gpuc_op_fail(c, "axes has %d values for rank %d", nav, r);
    bool seen[GPUC_MAX_RANK] = {false};
    for (int i = 0; i < nav; i++) {
      if (gpuc_norm_axis(c, av[i], r, &axes[i])) return -1;
      if (seen[axes[i]]) return gpuc_op_fail(c, "axis %lld repeats in axes", (long long)av[i]);
      seen[axes[i]] = true;
    }
    na = nav;
  }

  const Tensor *scales = NULL, *sizes = NULL, *roi = NULL;
  double s[GPUC_MAX_RANK] = {0};
  if (upsample && opset < 9) {
    const float *f;
    int nf = gpuc_attr_floats(c->n, "scales", &f);
    if (nf != r) return gpuc_op_fail(c, "attribute scales must have %d values", r);
    for (int i = 0; i < r; i++) {
      s[i] = f[i];
      if (!(s[i] > 0) || !isfinite(s[i]))
        return gpuc_op_fail(c, "scales[%d] = %g must be positive and finite", i, s[i]);
    }
  } else if (legacy) {
    if (!gpuc_has_in(c, 1)) return gpuc_op_fail(c, "input scales is required");
    scales = c->in[1];
  } else {
    roi = gpuc_has_in(c, 1) ? c->in[1] : NULL;
    scales = gpuc_has_in(c, 2) ? c->in[2] : NULL;
    sizes = gpuc_has_in(c, 3) ? c->in[3] : NULL;
    int es = empty_input(scales), ez = empty_input(sizes);
    if (es < 0 || ez < 0) goto unknown; /* which one is given is not known yet */
    if (!es && !ez) return gpuc_op_fail(c, "only one of scales and sizes may be given");
    if (es && ez) return gpuc_op_fail(c, "one of scales or sizes must be given");
    if (es) scales = NULL;
    else sizes = NULL;
  }

  /* region of interest, only used by tf_crop_and_resize */
  if (p->coord == NN_CT_TF_CROP_AND_RESIZE && roi && gpuc_numel(roi) != 0) {
    if (!roi->data) {
      if (c->runtime) return gpuc_op_fail(c, "roi is not known");
    } else {
      if (!gpuc_dtype_is_float(roi->dt) || roi->rank != 1 || roi->dims[0] != 2 * na)
        return gpuc_op_fail(c, "roi must be a 1-D float tensor of %d values", 2 * na);
      for (int i = 0; i < na; i++) {
        p->roi_start[axes[i]] = gpuc_get_f64(roi, i);
        p->roi_end[axes[i]] = gpuc_get_f64(roi, na + i);
        if (!isfinite(p->roi_start[axes[i]]) || !isfinite(p->roi_end[axes[i]]))
          return gpuc_op_fail(c, "roi values must be finite");
      }
    }
  }

  if (sizes) {
    if (!gpuc_dtype_is_int(sizes->dt) || sizes->rank != 1 || sizes->dims[0] != na)
      return gpuc_op_fail(c, "sizes must be a 1-D integer tensor of %d values", na);
    if (!sizes->data) goto unknown;
    int64_t sz[GPUC_MAX_RANK];
    for (int i = 0; i < na; i++) {
      sz[i] = gpuc_get_i64(sizes, i);
      if (sz[i] < 0 || sz[i] > NN_DIM_LIMIT)
        return gpuc_op_fail(c, "sizes[%d] = %lld is out of range", i, (long long)sz[i]);
    }
    const char *pol = gpuc_attr_s(c->n, "keep_aspect_ratio_policy", "stretch");
    if (strcmp(pol, "stretch")) {
      bool larger = !strcmp(pol, "not_smaller");
      if (!larger && strcmp(pol, "not_larger"))
        return gpuc_op_fail(c, "keep_aspect_ratio_policy '%s' is not supported", pol);
      double best = larger ? 0 : INFINITY;
      for (int i = 0; i < na; i++) {
        int64_t in = x->dims[axes[i]];
        if (in < 0) goto unknown;
        if (in == 0) return gpuc_op_fail(c, "cannot keep the aspect ratio of an empty axis");
        double q = (double)sz[i] / (double)in;
        best = larger ? fmax(best, q) : fmin(best, q);
      }
      for (int i = 0; i < na; i++) {
        p->out[axes[i]] = (int64_t)floor(best * (double)x->dims[axes[i]] + 0.5);
        p->scale[axes[i]] = best;
        p->length[axes[i]] = best * (double)x->dims[axes[i]];
        if (p->out[axes[i]] > NN_DIM_LIMIT) return gpuc_op_fail(c, "output size is too large");
      }
      return 0;
    }
    for (int i = 0; i < na; i++) {
      int a = axes[i];
      int64_t in = x->dims[a];
      p->out[a] = sz[i];
      if (in == 0 && sz[i] > 0)
        return gpuc_op_fail(c, "cannot resize empty axis %d to %lld", a, (long long)sz[i]);
      p->scale[a] = in > 0 ? (double)sz[i] / (double)in : 1;
      p->length[a] = (double)sz[i];
    }
    return 0;
  }

  if (scales) {
    int want = legacy ? r : na;
    if (!gpuc_dtype_is_float(scales->dt) || scales->rank != 1 ||
        (scales->dims[0] >= 0 && scales->dims[0] != want))
      return gpuc_op_fail(c, "scales must be a 1-D float tensor of %d values", want);
    if (!scales->data) goto unknown;
    if (read_scales(c, scales, want, s)) return -1;
  }
  /* out = floor(in * scale), computed in double like the ONNX reference */
  for (int i = 0; i < na; i++) {
    int a = axes[i];
    p->scale[a] = s[i];
    if (x->dims[a] < 0) { p->out[a] = -1; continue; }
    p->length[a] = (double)x->dims[a] * s[i];
    double o = floor(p->length[a]);
    if (o > (double)NN_DIM_LIMIT)
      return gpuc_op_fail(c, "output dim %d would be %g, too large", a, o);
    p->out[a] = (int64_t)o;
  }
  return 0;
unknown:
  if (c->runtime) return gpuc_op_fail(c, "scales/sizes are not known");
  for (int i = 0; i < na; i++) p->out[axes[i]] = -1;
  return 1;
}

static int infer_resize_like(OpCtx *c) {
  NnResize p;
  int rc = nn_resize_params(c, &p);
  if (rc < 0) return -1;
  set_out(c, 0, c->in[0]->dt, p.rank, p.out);
  return 0;
}

int infer_Resize(OpCtx *c) { return infer_resize_like(c); }
int infer_Upsample(OpCtx *c) {
  if (c->g->opset < 7)
    return gpuc_op_unsupported(c, "Upsample before opset 7 is not supported");
  return infer_resize_like(c);
}

/* FusedConv(X, W, B?, Z?): Conv's shape; Z, when present, must have it too.
 * NHWC: Conv's inference on NCHW views of X and W, Y permuted back. */
int infer_FusedConv(OpCtx *c) {
  int64_t layout = gpuc_attr_i(c->n, "layout", GPUC_LAYOUT_NCHW);
  if (layout != GPUC_LAYOUT_NCHW && layout != GPUC_LAYOUT_NHWC)
    return gpuc_op_fail(c, "layout %lld is not 0 (NCHW) or 1 (NHWC)", (long long)layout);
  OpCtx conv = *c;
  conv.nin = 3;
  if (layout == GPUC_LAYOUT_NHWC) {
    const Tensor *x = c->in[0], *w = c->in[1];
    if (x->rank < 0 || w->rank < 0) return gpuc_infer_unknown(c, 0, x->dt);
    if (x->rank != 4 || w->rank != 4) return gpuc_op_fail(c, "an NHWC convolution must be 2-D");
    static const int to_nchw[4] = GPUC_NHWC_TO_NCHW, to_nhwc[4] = GPUC_NCHW_TO_NHWC;
    Tensor xn, wn, yn = {0};
    permuted_shape(x, to_nchw, &xn);
    permuted_shape(w, to_nchw, &wn);
    const Tensor *ins[3] = {&xn, &wn, c->nin > 2 ? c->in[2] : NULL};
    Tensor *outs[1] = {&yn};
    conv.in = ins;
    conv.out = outs;
    if (infer_Conv(&conv)) return -1;
    if (yn.rank != 4) return gpuc_infer_unknown(c, 0, x->dt);
    Tensor y;
    permuted_shape(&yn, to_nhwc, &y);
    gpuc_set_shape(c->out[0], yn.dt, 4, y.dims);
  } else if (infer_Conv(&conv)) {
    return -1;
  }
  if (c->nin > 3 && c->in[3]) {
    const Tensor *z = c->in[3], *y = c->out[0];
    bool same = z->dt == y->dt && z->rank == y->rank;
    for (int i = 0; same && i < y->rank; i++) same = z->dims[i] == y->dims[i] || z->dims[i] < 0 || y->dims[i] < 0;
    if (!same) return gpuc_op_fail(c, "the residual input must have the convolution's shape and dtype");
  }
  int64_t act = gpuc_attr_i(c->n, "activation", 0);
  if (act < 0 || act >= GPUC_FCONV_ACT_COUNT)
    return gpuc_op_fail(c, "activation %lld is not 0..%d (ir/conv_act.h)", (long long)act, GPUC_FCONV_ACT_COUNT - 1);
  int64_t in_act = gpuc_attr_i(c->n, "in_activation", 0);
  if (in_act < 0 || in_act >= GPUC_FCONV_ACT_COUNT)
    return gpuc_op_fail(c, "in_activation %lld is not 0..%d (ir/conv_act.h)", (long long)in_act, GPUC_FCONV_ACT_COUNT - 1);
  return 0;
}

/* GatedUnit(X) {activation} (internal, ir/ops.def): Y is X with its last
 * dim halved; X float, that dim even; activation "silu" */
int infer_GatedUnit(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (!x || !gpuc_dtype_is_float(x->dt) || x->rank < 1) return gpuc_op_fail(c, "X must be a float tensor of rank >= 1");
  if (strcmp(gpuc_attr_s(c->n, "activation", ""), "silu"))
    return gpuc_op_fail(c, "activation '%s' (only silu)", gpuc_attr_s(c->n, "activation", ""));
  int64_t dims[GPUC_MAX_RANK];
  memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
  int64_t d = dims[x->rank - 1];
  if (d >= 0 && d % 2) return gpuc_op_fail(c, "X's last dim %lld is odd: no gate and up halves", (long long)d);
  if (d >= 0) dims[x->rank - 1] = d / 2;
  if (c->out[0]) gpuc_set_shape(c->out[0], x->dt, x->rank, dims);
  return 0;
}
