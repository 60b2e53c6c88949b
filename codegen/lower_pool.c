/* GPU lowerings of the pools: MaxPool (with Indices), AveragePool,
 * GlobalAveragePool, GlobalMaxPool. Semantics follow
 * runtime/ref/ref_pool.c; the window geometry comes from nn_pool_window
 * (ir/infer_nn.c), the same function shape inference and the reference
 * use, so pads/auto_pad/strides/dilations/ceil_mode agree by construction.
 *
 * Windowed pools: one thread per output element walking the kernel taps
 * with baked extents, in the reference's (row-major) tap order (an NHWC
 * MaxPool or AveragePool, passes/layout_nhwc.c: the same walk, channel
 * innermost). Global
 * pools: one block (or thread, for small planes) per [N, C] plane. */
#include "lower_util.h"
#include "infer_nn.h"
#include <stdio.h>
#include <string.h>

#define MAX_GRID (65535u * 32)
#define LL(v) ((long long)(v))

/* compute type: float (double for f64) for floats; integers exactly */
static const char *val_t(GpucDType dt) {
  if (dt == GPUC_DT_F64) return "double";
  if (is_flt(dt)) return "float";
  return dt == GPUC_DT_U64 ? "unsigned long long" : "long long";
}
static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

/* ---- MaxPool / AveragePool ------------------------------------------------ */

/* For each output position walk the K taps: taps outside X are skipped
 * (MaxPool) or, with count_include_pad, counted when inside the padding
 * (AveragePool). A window with no value gives 0 (and index -1). MaxPool
 * keeps the first maximum in tap order (later NaNs never replace it, a
 * leading NaN stays), like the reference's "best < 0 || v > acc". */
/* The taps of output window (o0, o1, ...) of w inside X: one loop per
 * spatial dim (t<d>, input position p<d>, padding skipped), then
 * "i64 off = sum p<d> * rs[d] * mul;" (mul: the channel count for NHWC,
 * else 1). Returns the indentation of the innermost body; the caller closes
 * the nsp loops. MaxPool, AveragePool and MaxPoolGrad's argmax share it. */
int cg_window_taps(StrBuf *b, const struct NnWindow *w, const int64_t *rs, int64_t mul) {
  for (int d = 0; d < w->nsp; d++) {
    sb_printf(b, "%*s    for (i64 t%d = 0; t%d < %lldLL; t%d++) {\n", 2 * d, "", d, d, LL(w->k[d]), d);
    sb_printf(b, "%*s      i64 p%d = o%d * %lldLL - %lldLL + t%d * %lldLL;\n", 2 * d, "", d, d,
              LL(w->stride[d]), LL(w->pad_b[d]), d, LL(w->dil[d]));
    sb_printf(b, "%*s      if (p%d < 0 || p%d >= %lldLL) continue;\n", 2 * d, "", d, d, LL(w->in[d]));
  }
  int ind = 2 * w->nsp + 6;
  sb_printf(b, "%*si64 off = 0", ind, "");
  for (int d = 0; d < w->nsp; d++) sb_printf(b, " + p%d * %lldLL", d, LL(rs[d] * mul));
  sb_printf(b, ";\n");
  return ind;
}

static int pool_lower(LowerCtx *c, bool is_max) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (dt == GPUC_DT_UNDEF || dt == GPUC_DT_BOOL || (!is_max && !is_flt(dt)))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  NnWindow w;
  if (nn_pool_window(LOWER_OPCTX(c), &w)) return -1;
  bool include_pad = !is_max && gpuc_attr_i(c->n, "count_include_pad", 0) == 1;
  bool col_major = is_max && gpuc_attr_i(c->n, "storage_order", 0) == 1;
  bool want_idx = is_max && c->nout > 1 && c->out[1] && c->tout[1] != UINT32_MAX;
  /* NHWC MaxPool (no Indices) / AveragePool, 2-D: y[n, o0, o1, ch], taps C apart */
  bool nhwc = nn_pool_nhwc(LOWER_OPCTX(c));
  if (nhwc && (want_idx || w.nsp != 2)) return lower_fail(c, "an NHWC pool must be 2-D without Indices");
  int64_t C = nhwc ? w.c_in : 1;
  int nsp = w.nsp;
  int64_t HWin = prod(w.in, nsp), HWout = prod(w.out, nsp);
  int64_t total = w.n * w.c_in * HWout;
  if (total != gpuc_numel(y)) return lower_fail(c, "internal: pool output size mismatch");
  if (total == 0) return 0;
  int64_t rs[NN_MAX_SP], cs[NN_MAX_SP], s = 1;
  for (int d = nsp - 1; d >= 0; d--) { rs[d] = s; s *= w.in[d]; }
  s = 1;
  for (int d = 0; d < nsp; d++) { cs[d] = s; s *= w.in[d]; }
  const char *ct = val_t(dt);
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y%s) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    i64 r = i;\n",
            name, cg_ctype(dt), cg_ctype(y->dt), want_idx ? ", long long* __restrict__ idx" : "", LL(total));
  if (nhwc) sb_printf(b, "    i64 ch = r %% %lldLL; r /= %lldLL;\n", LL(C), LL(C));
  for (int d = nsp - 1; d >= 0; d--)
    sb_printf(b, "    i64 o%d = r %% %lldLL; r /= %lldLL;\n", d, LL(w.out[d]), LL(w.out[d]));
  if (nhwc) /* r is the image: its [H,W,C] block, channel ch */
    sb_printf(b, "    const %s* xp = x + r * %lldLL + ch;\n", cg_ctype(dt), LL(HWin * C));
  else
    sb_printf(b, "    const %s* xp = x + r * %lldLL;\n", cg_ctype(dt), LL(HWin));
  if (is_max) {
    sb_printf(b, "    %s acc = 0;\n    i64 best = -1;\n", ct);
  } else {
    sb_printf(b, "    %s acc = 0;\n    i64 cnt = 1;\n", ct);
    /* divisor: taps inside X, or inside X and its padding; per-dim
     * conditions are independent, so the counts multiply */
    for (int d = 0; d < nsp; d++) {
      int64_t lo = include_pad ? -w.pad_b[d] : 0, hi = include_pad ? w.in[d] + w.pad_e[d] : w.in[d];
      sb_printf(b, "    { i64 n_ = 0; for (i64 t = 0; t < %lldLL; t++) { i64 p = o%d * %lldLL - %lldLL + t * %lldLL; n_ += p >= %lldLL && p < %lldLL; } cnt *= n_; }\n",
                LL(w.k[d]), d, LL(w.stride[d]), LL(w.pad_b[d]), LL(w.dil[d]), LL(lo), LL(hi));
    }
  }
  int ind = cg_window_taps(b, &w, rs, C);
  sb_printf(b, "%*s%s v = ", ind, "", ct);
  cg_load(b, ct, dt, "xp", "off");
  sb_printf(b, ";\n");
  if (is_max) {
    sb_printf(b, "%*sif (best < 0 || v > acc) { acc = v; best = ", ind, "");
    if (col_major) {
      sb_printf(b, "0");
      for (int d = 0; d < nsp; d++) sb_printf(b, " + p%d * %lldLL", d, LL(cs[d]));
    } else {
      sb_printf(b, "off");
    }
    sb_printf(b, "; }\n");
  } else {
    sb_printf(b, "%*sacc += v;\n", ind, "");
  }
  for (int d = nsp - 1; d >= 0; d--) sb_printf(b, "%*s    }\n", 2 * d, "");
  sb_printf(b, "    ");
  if (is_max) {
    cg_store(b, y->dt, "y", "i", ct, "best >= 0 ? acc : 0");
    if (want_idx) sb_printf(b, "    idx[i] = best < 0 ? -1 : r * %lldLL + best;\n", LL(HWin));
  } else {
    char e[96];
    snprintf(e, sizeof e, "cnt ? acc / (%s)cnt : (%s)0", ct, ct);
    cg_store(b, y->dt, "y", "i", ct, e);
  }
  sb_printf(b, "  }\n}\n");
  uint32_t args[3] = {c->tin[0], c->tout[0], want_idx ? c->tout[1] : 0};
  return cg_launch_items(c, name, (uint64_t)total, want_idx ? 3 : 2, args);
}

int lower_MaxPool(LowerCtx *c) { return pool_lower(c, true); }
int lower_AveragePool(LowerCtx *c) { return pool_lower(c, false); }

/* ---- GlobalAveragePool / GlobalMaxPool ------------------------------------- */

/* One row per [N, C] plane of hw elements: one block per plane (warp
 * shuffles + shared memory), or one thread per plane for small planes.
 * Max keeps the reference's "i == 0 || v > acc": NaN-ignoring max, except
 * that a leading NaN wins. */
static int global_pool(LowerCtx *c, bool is_max) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (dt == GPUC_DT_UNDEF || dt == GPUC_DT_BOOL || (!is_max && !is_flt(dt)))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  if (x->rank < 2) return lower_fail(c, "X must have rank >= 2");
  int64_t planes = x->dims[0] * x->dims[1], hw = prod(x->dims + 2, x->rank - 2);
  if (planes == 0) return 0;
  const char *ct = val_t(dt);
  bool block = hw > 16;
  unsigned threads = 32;
  while (block && threads < 256 && (int64_t)threads < hw) threads *= 2;
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n",
            name, cg_ctype(dt), cg_ctype(y->dt));
  if (block) sb_printf(b, "  for (i64 row = blockIdx.x; row < %lldLL; row += gridDim.x) {\n", LL(planes));
  else sb_printf(b, "  GRID_STRIDE(row, %lldLL) {\n", LL(planes));
  sb_printf(b, "    i64 base = row * %lldLL;\n", LL(hw));
  if (hw == 0) {
    sb_printf(b, "    ");
    cg_store(b, y->dt, "y", "row", ct, "0");
    sb_printf(b, "  }\n}\n");
  } else {
    const char *comb = is_max ? "((t_ > acc || acc != acc) ? t_ : acc)" : "acc + t_";
    sb_printf(b, "    %s x0 = ", ct);
    cg_load(b, ct, dt, "x", "base");
    sb_printf(b, ";\n    %s acc = %s;\n", ct, is_max ? "x0" : "0");
    if (block) sb_printf(b, "    for (i64 j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n", LL(hw));
    else sb_printf(b, "    for (i64 j = 0; j < %lldLL; j++) {\n", LL(hw));
    sb_printf(b, "      %s t_ = ", ct);
    cg_load(b, ct, dt, "x", "base + j");
    sb_printf(b, ";\n      acc = %s;\n    }\n", comb);
    if (block) {
      sb_printf(b, "    for (int s_ = 16; s_ > 0; s_ >>= 1) { %s t_ = __shfl_xor_sync(0xffffffffu, acc, s_); acc = %s; }\n",
                ct, comb);
      if (threads > 32)
        sb_printf(b, "    { __shared__ %s sh_[32];\n"
                     "      if ((threadIdx.x & 31) == 0) sh_[threadIdx.x >> 5] = acc;\n"
                     "      __syncthreads();\n"
                     "      acc = sh_[0];\n"
                     "      for (int w_ = 1; w_ < %u; w_++) { %s t_ = sh_[w_]; acc = %s; }\n"
                     "      __syncthreads(); }\n",
                  ct, threads / 32, ct, comb);
    }
    char e[96];
    if (is_max) snprintf(e, sizeof e, "x0 != x0 ? x0 : acc");
    else snprintf(e, sizeof e, "acc / (%s)%lld", ct, LL(hw));
    sb_printf(b, "    if (%s) ", block ? "threadIdx.x == 0" : "true");
    cg_store(b, y->dt, "y", "row", ct, e);
    sb_printf(b, "  }\n}\n");
  }
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  if (!block) return cg_launch_items(c, name, (uint64_t)planes, 2, args);
  uint64_t g = (uint64_t)planes > MAX_GRID ? MAX_GRID : (uint64_t)planes;
  unsigned grid[3] = {(unsigned)g, 1, 1}, blk[3] = {threads, 1, 1};
  return cg_launch_grid(c, name, grid, blk, 0, 2, args);
}

int lower_GlobalAveragePool(LowerCtx *c) {
  if (gpuc_attr_i(c->n, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC) return cg_gap_nhwc(c); /* codegen/lower_se.c */
  return global_pool(c, false);
}
int lower_GlobalMaxPool(LowerCtx *c) { return global_pool(c, true); }
