/* GPU lowerings of QuantizeLinear DequantizeLinear DynamicQuantizeLinear
 * (semantics: runtime/ref/ref_quant.c) and of the losses
 * SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss (runtime/ref/ref_loss.c).
 *
 * Quantization mirrors the reference's precision: x / scale in f32 for
 * f32/f16/bf16 inputs, in f64 for f64 and int32 inputs or an f64 scale;
 * rounding half to even (rint), then the zero point, then saturation; NaN
 * maps to the zero point. Per-axis parameters are indexed by
 * (i / inner) % channels with baked constants.
 *
 * DynamicQuantizeLinear: blocks find partial min/max (NaN left out), one
 * block their range, scale and zero point exactly as the reference (f32),
 * a third kernel quantizes. The reference fails on an infinite input; so
 * does the run here (gpuc_fault_report, runtime/device_fault.h).
 *
 * Losses compute in f64 like the reference: SoftmaxCrossEntropyLoss first
 * finds shift[n, d] = max + log(sum exp(x - max)) over the classes (one warp
 * per (n, d)), then the shared NLL step. A label outside [0, C) that is not
 * ignore_index (an error in the reference) is reported (the run fails with
 * the reference's message) and meanwhile counts as ignored: loss 0, no
 * weight. sum/mean reductions run in one block. */
#include "lower_util.h"
#include <stdio.h>
#include <string.h>

typedef long long ll;

static bool is_half(GpucDType dt) { return dt == GPUC_DT_F16 || dt == GPUC_DT_BF16; }

/* Expression loading element `idx` of float tensor `arg` as double. */
static void ld_double(char *buf, size_t n, GpucDType dt, const char *arg, const char *idx) {
  if (is_half(dt)) snprintf(buf, n, "((double)ldf(%s[%s]))", arg, idx);
  else snprintf(buf, n, "((double)%s[%s])", arg, idx);
}

/* Statement storing double expression `v` into dst[idx] of float dtype dt
 * the way gpuc_set_f64 does (through float for f16/bf16). */
static void st_double(StrBuf *b, GpucDType dt, const char *dst, const char *idx, const char *v) {
  if (is_half(dt)) sb_printf(b, "%s[%s] = stf<%s>((float)(%s));", dst, idx, cg_ctype(dt), v);
  else sb_printf(b, "%s[%s] = (%s)(%s);", dst, idx, cg_ctype(dt), v);
}

/* ---- quantization ---------------------------------------------------------- */

typedef struct QLayout { int64_t nch, inner; } QLayout;

static int q_layout(LowerCtx *c, QLayout *q) {
  const Tensor *x = c->in[0], *s = c->in[1];
  int64_t sn = gpuc_numel(s);
  q->nch = 1;
  q->inner = 1;
  if (gpuc_attr_i(c->n, "block_size", 0) != 0)
    return lower_unsupported(c, "blocked quantization (block_size)");
  if (s->rank > 1 || sn < 1) return lower_fail(c, "scale must be a scalar or 1-D");
  if (c->nin > 2 && c->in[2] && gpuc_numel(c->in[2]) != sn)
    return lower_fail(c, "zero point and scale differ in size");
  if (sn == 1) return 0;
  int axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 1), x->rank, &axis)) return -1;
  if (x->dims[axis] != sn)
    return lower_fail(c, "scale has %lld elements, input dim %d (axis) is %lld", (ll)sn, axis,
                      (ll)x->dims[axis]);
  q->nch = sn;
  for (int d = axis + 1; d < x->rank; d++) q->inner *= x->dims[d];
  return 0;
}

static void q_range(GpucDType dt, ll *lo, ll *hi) {
  switch (dt) {
  case GPUC_DT_I8: *lo = -128; *hi = 127; break;
  case GPUC_DT_U16: *lo = 0; *hi = 65535; break;
  case GPUC_DT_I16: *lo = -32768; *hi = 32767; break;
  case GPUC_DT_I32: *lo = -2147483648LL; *hi = 2147483647LL; break;
  default: *lo = 0; *hi = 255; break; /* u8 */
  }
}

int lower_QuantizeLinear(LowerCtx *c) {
  const Tensor *x = c->in[0], *s = c->in[1], *y = c->out[0];
  const Tensor *z = c->nin > 2 ? c->in[2] : NULL;
  QLayout q;
  if (q_layout(c, &q)) return -1;
  if (!gpuc_dtype_is_float(s->dt)) return lower_fail(c, "scale must be a float tensor");
  if (gpuc_dtype_is_float(y->dt) || y->dt == GPUC_DT_BOOL)
    return lower_unsupported(c, "QuantizeLinear to %s", gpuc_dtype_name(y->dt));
  ll lo, hi;
  q_range(y->dt, &lo, &hi);
  bool wide = x->dt == GPUC_DT_F64 || x->dt == GPUC_DT_I32 || s->dt == GPUC_DT_F64;
  int64_t n = gpuc_numel(x);
  if (n == 0) return 0;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ sc, ",
            name, cg_ctype(x->dt), cg_ctype(s->dt));
  if (z) sb_printf(b, "const %s* __restrict__ zp, ", cg_ctype(z->dt));
  sb_printf(b, "%s* __restrict__ y) {\n  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 ch = (i / %lldLL) %% %lldLL;\n    (void)ch;\n",
            cg_ctype(y->dt), (ll)n, (ll)q.inner, (ll)q.nch);
  char xv[96], sv[96];
  ld_double(xv, sizeof xv, x->dt, "x", "i");
  ld_double(sv, sizeof sv, s->dt, "sc", "ch");
  if (wide) sb_printf(b, "    double q = %s / %s;\n", xv, sv);
  else sb_printf(b, "    double q = (double)((float)%s / (float)%s);\n", xv, sv);
  sb_printf(b, "    i64 z = %s;\n", z ? "(i64)zp[ch]" : "0");
  sb_printf(b, "    double v = q != q ? (double)z : rint(q) + (double)z;\n"
               "    v = v < %lld.0 ? %lld.0 : (v > %lld.0 ? %lld.0 : v);\n"
               "    y[i] = (%s)(i64)v;\n  }\n}\n",
            lo, lo, hi, hi, cg_ctype(y->dt));
  uint32_t args[4] = {c->tin[0], c->tin[1], z ? c->tin[2] : c->tout[0], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)n, z ? 4 : 3, args);
}

int lower_DequantizeLinear(LowerCtx *c) {
  const Tensor *x = c->in[0], *s = c->in[1], *y = c->out[0];
  const Tensor *z = c->nin > 2 ? c->in[2] : NULL;
  QLayout q;
  if (q_layout(c, &q)) return -1;
  if (!gpuc_dtype_is_float(s->dt) || !gpuc_dtype_is_float(y->dt))
    return lower_fail(c, "scale must be a float tensor");
  if (!gpuc_dtype_is_int(x->dt) || x->dt == GPUC_DT_U64 || x->dt == GPUC_DT_I64)
    return lower_unsupported(c, "DequantizeLinear of %s", gpuc_dtype_name(x->dt));
  bool wide = s->dt == GPUC_DT_F64;
  int64_t n = gpuc_numel(x);
  if (n == 0) return 0;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ sc, ",
            name, cg_ctype(x->dt), cg_ctype(s->dt));
  if (z) sb_printf(b, "const %s* __restrict__ zp, ", cg_ctype(z->dt));
  sb_printf(b, "%s* __restrict__ y) {\n  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 ch = (i / %lldLL) %% %lldLL;\n    (void)ch;\n"
               "    i64 diff = (i64)x[i] - %s;\n",
            cg_ctype(y->dt), (ll)n, (ll)q.inner, (ll)q.nch, z ? "(i64)zp[ch]" : "0");
  char sv[96];
  ld_double(sv, sizeof sv, s->dt, "sc", "ch");
  if (wide) sb_printf(b, "    double v = (double)diff * %s;\n    ", sv);
  else sb_printf(b, "    double v = (double)((float)diff * (float)%s);\n    ", sv);
  st_double(b, y->dt, "y", "i", "v");
  sb_printf(b, "\n  }\n}\n");
  uint32_t args[4] = {c->tin[0], c->tin[1], z ? c->tin[2] : c->tout[0], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)n, z ? 4 : 3, args);
}

/* x (f32) -> y (u8), y_scale (f32 scalar), y_zero_point (u8 scalar), in
 * three kernels at bandwidth (an ORT quantize_dynamic BERT has one of these
 * per Linear input, up to 4096 x 3072 floats at batch 32):
 *   1. each of G blocks (256 threads, 16-byte loads where n allows) the
 *      range of its grid-stride share, [min, max] including 0 as the
 *      reference's, NaN left out by the same comparisons, into part[2G];
 *   2. one block: the range over the G partials (min and max are exact in
 *      any order), then scale and zero point exactly as the reference (f32);
 *   3. y = saturate(round(x / scale) + zero point), 4 elements a thread. */
int lower_DynamicQuantizeLinear(LowerCtx *c) {
  const Tensor *x = c->in[0];
  if (x->dt != GPUC_DT_F32) return lower_unsupported(c, "DynamicQuantizeLinear of %s", gpuc_dtype_name(x->dt));
  bool has_s = c->nout > 1 && c->out[1], has_z = c->nout > 2 && c->out[2];
  int64_t n = gpuc_numel(x), two = 2;
  int vec = n % 4 == 0 ? 4 : 1;
  int64_t items = n / vec;
  int64_t g = (items + 1023) / 1024; /* at least 4 vectors a thread of a block */
  if (g < 1) g = 1;
  if (g > 1024) g = 1024;
  int64_t g2 = 2 * g;
  uint32_t qp = cg_scratch(c, GPUC_DT_F32, 1, &two), part = cg_scratch(c, GPUC_DT_F32, 1, &g2);
  unsigned fstep = cg_fault_step(c);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  /* 1: partial ranges */
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(256) %s(const float* __restrict__ x, float* __restrict__ part) {\n"
               "  float mn = 0, mx = 0;\n"
               "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < %lldLL; i += (i64)gridDim.x * blockDim.x) {\n",
            name, (ll)items);
  if (vec == 4)
    sb_printf(b, "    const float4 q = ((const float4*)x)[i];\n"
                 "    const float e[4] = {q.x, q.y, q.z, q.w};\n"
                 "#pragma unroll\n    for (int u = 0; u < 4; u++) { const float v = e[u]; if (v < mn) mn = v; if (v > mx) mx = v; }\n");
  else
    sb_printf(b, "    const float v = x[i]; if (v < mn) mn = v; if (v > mx) mx = v;\n");
  sb_printf(b, "  }\n"
               "  for (int o = 16; o > 0; o >>= 1) { mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o)); mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o)); }\n"
               "  __shared__ float smn[8], smx[8];\n"
               "  if ((threadIdx.x & 31) == 0) { smn[threadIdx.x >> 5] = mn; smx[threadIdx.x >> 5] = mx; }\n"
               "  __syncthreads();\n"
               "  if (threadIdx.x == 0) {\n"
               "    for (int w = 1; w < (int)(blockDim.x >> 5); w++) { mn = fminf(mn, smn[w]); mx = fmaxf(mx, smx[w]); }\n"
               "    part[2 * blockIdx.x] = mn; part[2 * blockIdx.x + 1] = mx;\n  }\n}\n");
  uint32_t args1[2] = {c->tin[0], part};
  unsigned grid1[3] = {(unsigned)g, 1, 1}, block1[3] = {256, 1, 1};
  if (cg_launch_grid(c, name, grid1, block1, 0, 2, args1)) return -1;
  /* 2: range, scale, zero point (one block of 1024 threads) */
  name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(1024) %s(const float* __restrict__ part, float* __restrict__ qp%s%s) {\n"
               "  float mn = 0, mx = 0;\n"
               "  for (int k = threadIdx.x; k < %d; k += blockDim.x) { mn = fminf(mn, part[2 * k]); mx = fmaxf(mx, part[2 * k + 1]); }\n"
               "  for (int o = 16; o > 0; o >>= 1) { mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o)); mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o)); }\n"
               "  __shared__ float smn[32], smx[32];\n"
               "  if ((threadIdx.x & 31) == 0) { smn[threadIdx.x >> 5] = mn; smx[threadIdx.x >> 5] = mx; }\n"
               "  __syncthreads();\n"
               "  if (threadIdx.x == 0) {\n"
               "    for (int w = 1; w < (int)(blockDim.x >> 5); w++) { mn = fminf(mn, smn[w]); mx = fmaxf(mx, smx[w]); }\n"
               "    if (isinf(mn) || isinf(mx)) gpuc_fault_report(%uu, %d, 0, 0, 0, -1);\n"
               "    float scale = (mx - mn) / 255.0f;\n"
               "    if (isinf(scale)) scale = (float)(((double)mx - (double)mn) / 255.0);\n"
               "    if (scale == 0) scale = 1;\n"
               "    float zpf = rintf((0 - mn) / scale);\n"
               "    zpf = zpf < 0 ? 0 : (zpf > 255 ? 255 : zpf);\n"
               "    qp[0] = scale; qp[1] = zpf;\n",
            name, has_s ? ", float* __restrict__ ys" : "", has_z ? ", unsigned char* __restrict__ yz" : "",
            (int)g, fstep, GPUC_FAULT_INF);
  if (has_s) sb_printf(b, "    ys[0] = scale;\n");
  if (has_z) sb_printf(b, "    yz[0] = (unsigned char)(int)zpf;\n");
  sb_printf(b, "  }\n}\n");
  uint32_t args[4] = {part, qp};
  int na = 2;
  if (has_s) args[na++] = c->tout[1];
  if (has_z) args[na++] = c->tout[2];
  unsigned grid[3] = {1, 1, 1}, block[3] = {1024, 1, 1};
  if (cg_launch_grid(c, name, grid, block, 0, na, args)) return -1;
  if (n == 0 || !c->out[0]) return 0;
  /* 3: y = saturate(round(x / scale) + zero point) */
  name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const float* __restrict__ x, const float* __restrict__ qp, unsigned char* __restrict__ y) {\n"
               "  const float scale = qp[0];\n  const double z = (double)qp[1];\n"
               "  GRID_STRIDE(i, %lldLL) {\n",
            name, (ll)items);
  if (vec == 4)
    sb_printf(b, "    const float4 a = ((const float4*)x)[i];\n"
                 "    const float e[4] = {a.x, a.y, a.z, a.w};\n"
                 "    union { unsigned int w; unsigned char c[4]; } o;\n"
                 "#pragma unroll\n    for (int u = 0; u < 4; u++) {\n"
                 "      float q = e[u] / scale;\n"
                 "      double v = q != q ? z : rint((double)q) + z;\n"
                 "      v = v < 0.0 ? 0.0 : (v > 255.0 ? 255.0 : v);\n"
                 "      o.c[u] = (unsigned char)(int)v;\n    }\n"
                 "    ((unsigned int*)y)[i] = o.w;\n  }\n}\n");
  else
    sb_printf(b, "    float q = x[i] / scale;\n"
                 "    double v = q != q ? z : rint((double)q) + z;\n"
                 "    v = v < 0.0 ? 0.0 : (v > 255.0 ? 255.0 : v);\n"
                 "    y[i] = (unsigned char)(int)v;\n  }\n}\n");
  uint32_t args2[3] = {c->tin[0], qp, c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)items, 3, args2);
}

/* ---- losses ------------------------------------------------------------------ */

static int lower_loss(LowerCtx *c, bool sce) {
  const Tensor *x = c->in[0], *t = c->in[1], *y = c->out[0];
  const Tensor *w = c->nin > 2 ? c->in[2] : NULL;
  const Tensor *lp = sce && c->nout > 1 ? c->out[1] : NULL;
  if (!gpuc_dtype_is_float(x->dt)) return lower_unsupported(c, "loss of %s", gpuc_dtype_name(x->dt));
  if (x->rank < 2) return lower_fail(c, "input must have rank >= 2");
  int64_t N = x->dims[0], C = x->dims[1], D = gpuc_shape_numel(x->rank - 2, x->dims + 2);
  int64_t ND = N * D;
  if (gpuc_numel(t) != ND) return lower_fail(c, "labels do not match the input");
  if (w && (gpuc_numel(w) != C || w->dt != x->dt)) return lower_fail(c, "weights do not have C = %lld elements", (ll)C);
  const char *red = gpuc_attr_s(c->n, "reduction", "mean");
  bool none = !strcmp(red, "none"), mean = !strcmp(red, "mean");
  if (!none && !mean && strcmp(red, "sum")) return lower_fail(c, "unknown reduction '%s'", red);
  const Attr *ii = gpuc_attr(c->n, "ignore_index");
  bool has_ii = ii && ii->kind == GPUC_ATTR_INT;
  ll ignore = has_ii ? ii->i : 0;
  const char *XT = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  char xv[96];
  uint32_t shift = UINT32_MAX;
  if (sce && ND > 0) {
    /* shift[row] over the C classes of row = (n, d), one warp per row */
    int64_t nd1 = ND;
    shift = cg_scratch(c, GPUC_DT_F64, 1, &nd1);
    const char *name = cg_kernel_name(c);
    ld_double(xv, sizeof xv, x->dt, "x", "base + k * D_");
    sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, double* __restrict__ shift) {\n"
                 "  const i64 D_ = %lldLL, C_ = %lldLL;\n"
                 "  int lane = threadIdx.x & 31;\n"
                 "  for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < %lldLL;\n"
                 "       row += ((i64)gridDim.x * blockDim.x) >> 5) {\n"
                 "    i64 base = (row / D_) * C_ * D_ + row %% D_;\n"
                 "    double mx = __longlong_as_double(0xfff0000000000000LL);\n"
                 "    int nan = 0;\n"
                 "    for (i64 k = lane; k < C_; k += 32) { double v = %s; if (v != v) nan = 1; else if (v > mx) mx = v; }\n"
                 "    for (int o = 16; o > 0; o >>= 1) { double m = __shfl_xor_sync(0xffffffffu, mx, o); mx = m > mx ? m : mx; nan |= __shfl_xor_sync(0xffffffffu, nan, o); }\n"
                 "    if (nan) mx = __longlong_as_double(0x7ff8000000000000LL);\n"
                 "    if (isinf(mx)) mx = 0;\n"
                 "    double acc = 0;\n"
                 "    for (i64 k = lane; k < C_; k += 32) acc += exp(%s - mx);\n"
                 "    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);\n"
                 "    if (lane == 0) shift[row] = mx + log(acc);\n"
                 "  }\n}\n",
              name, XT, (ll)D, (ll)C, (ll)ND, xv, xv);
    uint32_t args[2] = {c->tin[0], shift};
    if (cg_launch(c, name, (uint64_t)ND * 32, 256, 0, 2, args)) return -1;
    if (lp && gpuc_numel(lp) > 0) {
      /* log_prob = x - shift[n, d] */
      int64_t total = gpuc_numel(lp);
      name = cg_kernel_name(c);
      ld_double(xv, sizeof xv, x->dt, "x", "i");
      sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const double* __restrict__ shift, %s* __restrict__ lp) {\n"
                   "  GRID_STRIDE(i, %lldLL) {\n"
                   "    i64 row = (i / %lldLL) * %lldLL + i %% %lldLL;\n    ",
                name, XT, cg_ctype(lp->dt), (ll)total, (ll)(C * D), (ll)D, (ll)D);
      char v[160];
      snprintf(v, sizeof v, "%s - shift[row]", xv);
      st_double(b, lp->dt, "lp", "i", v);
      sb_printf(b, "\n  }\n}\n");
      uint32_t a2[3] = {c->tin[0], shift, c->tout[1]};
      if (cg_launch(c, name, (uint64_t)total, 256, 0, 3, a2)) return -1;
    }
  } else if (lp && gpuc_numel(lp) > 0) {
    return lower_fail(c, "internal: log_prob without rows");
  }
  /* the NLL step: per (n, d) loss = -(x[n, label, d] - shift) * w[label] */
  unsigned fstep = cg_fault_step(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ lab, ",
            name, XT, cg_ctype(t->dt));
  if (w) sb_printf(b, "const %s* __restrict__ w, ", XT);
  if (shift != UINT32_MAX) sb_printf(b, "const double* __restrict__ shift, ");
  sb_printf(b, "%s* __restrict__ out) {\n", cg_ctype(y->dt));
  char wv[96], body[1024];
  ld_double(wv, sizeof wv, x->dt, "w", "label");
  ld_double(xv, sizeof xv, x->dt, "x", "((j / D_) * C_ + label) * D_ + j % D_");
  snprintf(body, sizeof body,
           "      i64 label = (i64)lab[j];\n"
           "      double loss = 0, wv = 0;\n"
           "      if (!(%s && label == %lldLL) && label >= 0 && label < C_) {\n"
           "        wv = %s;\n"
           "        double logp = %s - %s;\n"
           "        loss = -logp * wv;\n"
           "      } else if (!(%s && label == %lldLL)) {\n"
           "        gpuc_fault_report(%uu, %d, label, j, C_, -1);\n"
           "      }\n",
           has_ii ? "true" : "false", ignore, w ? wv : "1.0", xv,
           shift != UINT32_MAX ? "shift[j]" : "0.0", has_ii ? "true" : "false", ignore, fstep, GPUC_FAULT_LABEL);
  sb_printf(b, "  const i64 D_ = %lldLL, C_ = %lldLL;\n  (void)D_; (void)C_;\n", (ll)D, (ll)C);
  uint32_t args[5];
  int na = 0;
  args[na++] = c->tin[0];
  args[na++] = c->tin[1];
  if (w) args[na++] = c->tin[2];
  if (shift != UINT32_MAX) args[na++] = shift;
  args[na++] = c->tout[0];
  if (none) {
    sb_printf(b, "  GRID_STRIDE(j, %lldLL) {\n%s      (void)wv;\n      ", (ll)ND, body);
    st_double(b, y->dt, "out", "j", "loss");
    sb_printf(b, "\n  }\n}\n");
    return cg_launch(c, name, (uint64_t)ND, 256, 0, na, args);
  }
  sb_printf(b, "  double sum = 0, wsum = 0;\n"
               "  for (i64 j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n%s"
               "      sum += loss; wsum += wv;\n  }\n"
               "  for (int o = 16; o > 0; o >>= 1) { sum += __shfl_xor_sync(0xffffffffu, sum, o); wsum += __shfl_xor_sync(0xffffffffu, wsum, o); }\n"
               "  __shared__ double ss[32], sw[32];\n"
               "  if ((threadIdx.x & 31) == 0) { ss[threadIdx.x >> 5] = sum; sw[threadIdx.x >> 5] = wsum; }\n"
               "  __syncthreads();\n"
               "  if (threadIdx.x == 0) {\n"
               "    for (int k = 1; k < (int)(blockDim.x >> 5); k++) { sum += ss[k]; wsum += sw[k]; }\n"
               "    double r = %s;\n    ",
            (ll)ND, body, mean ? "sum / wsum" : "sum");
  st_double(b, y->dt, "out", "0", "r");
  sb_printf(b, "\n  }\n}\n");
  unsigned grid[3] = {1, 1, 1}, block[3] = {1024, 1, 1};
  return cg_launch_grid(c, name, grid, block, 0, na, args);
}

int lower_SoftmaxCrossEntropyLoss(LowerCtx *c) { return lower_loss(c, true); }
int lower_NegativeLogLikelihoodLoss(LowerCtx *c) { return lower_loss(c, false); }
