/* GPU lowerings of the CNN training ops (passes/grad_rules_nn.c):
 * MaxPoolGrad, AveragePoolGrad, BatchNormGrad, and BatchNormalization in
 * training mode (called from lower_norm.c). Semantics follow
 * runtime/ref/ref_train_nn.c and ref_norm.c; windows come from
 * nn_pool_window, the function the reference and shape inference use.
 *
 * Deterministic by construction: no atomics. Pool gradients gather: each
 * dX element visits the windows that contain it, in the reference's
 * (row-major output) order. BatchNormalization statistics and the
 * BatchNormGrad sums are one block per channel, accumulated in double
 * (the reference's f64; dX = g/M (M dY - sum dY - xhat sum dY xhat) cancels
 * badly in float), reduced in a fixed order. */
#include "lower_util.h"
#include "infer_nn.h"
#include <stdio.h>
#include <string.h>

#define LL(v) ((long long)(v))
#define MAX_GRID (65535u * 32)
enum { BLOCK = 256 };

static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}
static bool has_out(const LowerCtx *c, int k) {
  return k < c->nout && c->out[k] && c->tout[k] != UINT32_MAX;
}

/* ---- pool gradients ------------------------------------------------------ */

/* Opens loops over the output positions o0..o{nsp-1} whose window holds
 * the input position p0..p{nsp-1} (declared by the caller): per dim, taps
 * t from last to first give o = (p + pad_b - t*dil) / stride ascending, so
 * the windows come in the reference's row-major order. With avg set, the
 * AveragePool divisor of the window is kept in cnt<d> (the per-dim counts
 * of taps in range multiply: the conditions are independent per dim).
 * Closed by close_windows. */
static void open_windows(StrBuf *b, const NnWindow *w, bool avg, bool include_pad) {
  for (int d = 0; d < w->nsp; d++) {
    sb_printf(b, "%*s    for (i64 t%d = %lldLL; t%d >= 0; t%d--) {\n", 2 * d, "", d, LL(w->k[d] - 1), d, d);
    sb_printf(b, "%*s      i64 q%d = p%d + %lldLL - t%d * %lldLL;\n", 2 * d, "", d, d, LL(w->pad_b[d]), d,
              LL(w->dil[d]));
    sb_printf(b, "%*s      if (q%d < 0 || q%d %% %lldLL) continue;\n", 2 * d, "", d, d, LL(w->stride[d]));
    sb_printf(b, "%*s      i64 o%d = q%d / %lldLL;\n", 2 * d, "", d, d, LL(w->stride[d]));
    sb_printf(b, "%*s      if (o%d >= %lldLL) continue;\n", 2 * d, "", d, LL(w->out[d]));
    if (!avg) continue;
    int64_t lo = include_pad ? -w->pad_b[d] : 0, hi = include_pad ? w->in[d] + w->pad_e[d] : w->in[d];
    if (d) sb_printf(b, "%*s      i64 cnt%d = cnt%d;\n", 2 * d, "", d, d - 1);
    else sb_printf(b, "      i64 cnt0 = 1;\n");
    sb_printf(b, "%*s      { i64 n_ = 0; for (i64 u = 0; u < %lldLL; u++) { i64 r_ = o%d * %lldLL - %lldLL + u * %lldLL; n_ += r_ >= %lldLL && r_ < %lldLL; } cnt%d *= n_; }\n",
              2 * d, "", LL(w->k[d]), d, LL(w->stride[d]), LL(w->pad_b[d]), LL(w->dil[d]), LL(lo), LL(hi), d);
  }
}

static void close_windows(StrBuf *b, int nsp) {
  for (int d = nsp - 1; d >= 0; d--) sb_printf(b, "%*s    }\n", 2 * d, "");
}

/* MaxPoolGrad(X, dY) -> dX: dY of each window goes to the first maximum
 * of its taps in X (tap order, padding skipped, "best < 0 || v > acc" as
 * the forward MaxPool and the reference). Kernel 1: the argmax of every
 * window (plane offset, -1 for a window with no tap in X) into an i64
 * scratch. Kernel 2: one thread per dX element sums dY over the windows
 * that contain it and chose it.
 * AveragePoolGrad(X, dY) -> dX: one kernel, dX = sum over the windows that
 * contain the element of dY / divisor (taps in X, or in X and its padding
 * with count_include_pad), the forward's divisor. */
static int pool_grad(LowerCtx *c, bool is_max) {
  const Tensor *x = c->in[0], *dy = c->in[1], *dx = c->out[0];
  if (!is_flt(x->dt) || !is_flt(dy->dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(x->dt));
  NnWindow w;
  LowerCtx sub = *c;
  sub.nin = 1;
  if (nn_pool_window(LOWER_OPCTX(&sub), &w)) return -1;
  int nsp = w.nsp;
  int64_t HWin = prod(w.in, nsp), HWout = prod(w.out, nsp), planes = w.n * w.c_in;
  int64_t total = planes * HWin;
  if (gpuc_numel(dy) != planes * HWout) return lower_fail(c, "dY does not match the window");
  if (total == 0) return 0;
  const char *ct = x->dt == GPUC_DT_F64 ? "double" : "float";
  bool include_pad = gpuc_attr_i(c->n, "count_include_pad", 0) == 1;
  int64_t rs[NN_MAX_SP], os[NN_MAX_SP], s = 1;
  for (int d = nsp - 1; d >= 0; d--) { rs[d] = s; s *= w.in[d]; }
  s = 1;
  for (int d = nsp - 1; d >= 0; d--) { os[d] = s; s *= w.out[d]; }
  StrBuf *b = cg_src(c);
  char name[128];
  uint32_t am = UINT32_MAX;
  if (is_max && HWout > 0) { /* kernel 1: argmax per window */
    int64_t adims[1] = {planes * HWout};
    am = cg_scratch(c, GPUC_DT_I64, 1, adims);
    snprintf(name, sizeof name, "%s", cg_kernel_name(c));
    sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, long long* __restrict__ am) {\n"
                 "  GRID_STRIDE(i, %lldLL) {\n    i64 r = i;\n",
              name, cg_ctype(x->dt), LL(planes * HWout));
    for (int d = nsp - 1; d >= 0; d--)
      sb_printf(b, "    i64 o%d = r %% %lldLL; r /= %lldLL;\n", d, LL(w.out[d]), LL(w.out[d]));
    sb_printf(b, "    const %s* xp = x + r * %lldLL;\n    %s acc = 0;\n    i64 best = -1;\n",
              cg_ctype(x->dt), LL(HWin), ct);
    int ind = cg_window_taps(b, &w, rs, 1);
    sb_printf(b, "%*s%s v = ", ind, "", ct);
    cg_load(b, ct, x->dt, "xp", "off");
    sb_printf(b, ";\n%*sif (best < 0 || v > acc) { acc = v; best = off; }\n", ind, "");
    close_windows(b, nsp);
    sb_printf(b, "    am[i] = best;\n  }\n}\n");
    uint32_t args[2] = {c->tin[0], am};
    if (cg_launch_items(c, name, (uint64_t)(planes * HWout), 2, args)) return -1;
  }
  /* kernel 2 (or the only one): gather over the windows holding the element */
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ dy, %s* __restrict__ dx%s) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    i64 r = i;\n",
            name, cg_ctype(dy->dt), cg_ctype(dx->dt), is_max && am != UINT32_MAX ? ", const long long* __restrict__ am" : "",
            LL(total));
  for (int d = nsp - 1; d >= 0; d--)
    sb_printf(b, "    i64 p%d = r %% %lldLL; r /= %lldLL;\n", d, LL(w.in[d]), LL(w.in[d]));
  sb_printf(b, "    const i64 pos = i - r * %lldLL, ybase = r * %lldLL;\n    %s acc = 0;\n    (void)pos;\n",
            LL(HWin), LL(HWout), ct);
  if (HWout > 0) {
    open_windows(b, &w, !is_max, include_pad);
    int ind = 2 * nsp + 6;
    sb_printf(b, "%*si64 oo = ybase", ind, "");
    for (int d = 0; d < nsp; d++) sb_printf(b, " + o%d * %lldLL", d, LL(os[d]));
    sb_printf(b, ";\n");
    if (is_max) {
      sb_printf(b, "%*sif (am[oo] == pos) acc += ", ind, "");
      cg_load(b, ct, dy->dt, "dy", "oo");
      sb_printf(b, ";\n");
    } else {
      sb_printf(b, "%*sif (cnt%d) acc += ", ind, "", nsp - 1);
      cg_load(b, ct, dy->dt, "dy", "oo");
      sb_printf(b, " / (%s)cnt%d;\n", ct, nsp - 1);
    }
    close_windows(b, nsp);
  }
  sb_printf(b, "    ");
  cg_store(b, dx->dt, "dx", "i", ct, "acc");
  sb_printf(b, "  }\n}\n");
  uint32_t args[3] = {c->tin[1], c->tout[0], am};
  return cg_launch_items(c, name, (uint64_t)total, am != UINT32_MAX ? 3 : 2, args);
}

int lower_MaxPoolGrad(LowerCtx *c) { return pool_grad(c, true); }
int lower_AveragePoolGrad(LowerCtx *c) { return pool_grad(c, false); }

/* ---- per-channel statistics ---------------------------------------------- */

/* Sum double `var` over the BLOCK threads of a block in a fixed order
 * (warp butterflies, then the warps' partials in order): every thread
 * gets the same value. */
static void block_sum(StrBuf *b, const char *var) {
  sb_printf(b, "    for (int s_ = 16; s_ > 0; s_ >>= 1) %s += __shfl_xor_sync(0xffffffffu, %s, s_);\n"
               "    { __shared__ double sh_[%d];\n"
               "      if ((threadIdx.x & 31) == 0) sh_[threadIdx.x >> 5] = %s;\n"
               "      __syncthreads();\n"
               "      %s = sh_[0];\n"
               "      for (int w_ = 1; w_ < %d; w_++) %s += sh_[w_];\n"
               "      __syncthreads(); }\n",
            var, var, BLOCK / 32, var, var, BLOCK / 32, var);
}

/* The element loop over one channel's M = N*S values: declares off. */
static void chan_for(StrBuf *b, int64_t C, int64_t S, int64_t M) {
  sb_printf(b, "    for (i64 j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n"
               "      const i64 off = (j / %lldLL * %lldLL + ch) * %lldLL + j %% %lldLL;\n",
            LL(M), LL(S), LL(C), LL(S), LL(S));
}

/* Two-pass batch mean and biased variance of channel ch of x, in double:
 * declares mu and var (0 when M is 0, as the reference). */
static void emit_batch_stats(StrBuf *b, GpucDType dt, int64_t C, int64_t S, int64_t M) {
  sb_printf(b, "    double mu = 0, var = 0;\n");
  chan_for(b, C, S, M);
  sb_printf(b, "      mu += ");
  cg_load(b, "double", dt, "x", "off");
  sb_printf(b, ";\n    }\n");
  block_sum(b, "mu");
  if (M) sb_printf(b, "    mu = mu / (double)%lldLL;\n", LL(M));
  chan_for(b, C, S, M);
  sb_printf(b, "      const double d_ = ");
  cg_load(b, "double", dt, "x", "off");
  sb_printf(b, " - mu;\n      var += d_ * d_;\n    }\n");
  block_sum(b, "var");
  if (M) sb_printf(b, "    var = var / (double)%lldLL;\n", LL(M));
}

static int chan_launch(LowerCtx *c, const char *name, int64_t C, int nargs, const uint32_t *args) {
  uint64_t g = C < 1 ? 1 : (uint64_t)C;
  if (g > MAX_GRID) g = MAX_GRID;
  unsigned grid[3] = {(unsigned)g, 1, 1}, blk[3] = {BLOCK, 1, 1};
  return cg_launch_grid(c, name, grid, blk, 0, nargs, args);
}

/* BatchNormGrad(X, scale, dY, mean?, var?) -> dX, dscale, dB, per channel
 * over M = N * S values: inv = 1/sqrt(var + eps), xhat = (x - mean) * inv,
 * dB = sum dy, dscale = sum dy * xhat;
 *   batch statistics (no mean/var): dx = scale*inv/M * (M dy - dB - xhat dscale)
 *   given statistics:               dx = scale*inv * dy.
 * Kernel 1: one block per channel, statistics and sums in double into a
 * [4, C] double scratch (mean, inv, dB, dscale) and the dscale/dB outputs.
 * Kernel 2: one thread per element. */
int lower_BatchNormGrad(LowerCtx *c) {
  const Tensor *x = c->in[0], *sc = c->in[1], *dy = c->in[2], *dx = c->out[0];
  bool given = c->nin > 4 && c->in[3] && c->in[4];
  for (int i = 0; i < (given ? 5 : 3); i++)
    if (!is_flt(c->in[i]->dt)) return lower_unsupported(c, "input %d of dtype %s", i, gpuc_dtype_name(c->in[i]->dt));
  if (x->rank < 2) return lower_fail(c, "X must have rank >= 2");
  int64_t N = x->dims[0], C = x->dims[1], S = prod(x->dims + 2, x->rank - 2), M = N * S;
  if (gpuc_numel(sc) != C || gpuc_numel(dy) != gpuc_numel(x))
    return lower_fail(c, "scale or dY does not match X");
  if (C == 0) return 0;
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  bool want_ds = has_out(c, 1), want_db = has_out(c, 2);
  int64_t sdims[2] = {4, C};
  uint32_t stt = cg_scratch(c, GPUC_DT_F64, 2, sdims);
  StrBuf *b = cg_src(c);
  char name[128], e[256];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  uint32_t args[8];
  int na = 0;
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ dy, "
               "double* __restrict__ st", name, cg_ctype(x->dt), cg_ctype(dy->dt));
  args[na++] = c->tin[0];
  args[na++] = c->tin[2];
  args[na++] = stt;
  if (given) {
    sb_printf(b, ", const %s* __restrict__ mean, const %s* __restrict__ vr", cg_ctype(c->in[3]->dt),
              cg_ctype(c->in[4]->dt));
    args[na++] = c->tin[3];
    args[na++] = c->tin[4];
  }
  if (want_ds) { sb_printf(b, ", %s* __restrict__ dscale", cg_ctype(c->out[1]->dt)); args[na++] = c->tout[1]; }
  if (want_db) { sb_printf(b, ", %s* __restrict__ dbias", cg_ctype(c->out[2]->dt)); args[na++] = c->tout[2]; }
  sb_printf(b, ") {\n  for (i64 ch = blockIdx.x; ch < %lldLL; ch += gridDim.x) {\n", LL(C));
  if (given) {
    sb_printf(b, "    const double mu = ");
    cg_load(b, "double", c->in[3]->dt, "mean", "ch");
    sb_printf(b, ", var = ");
    cg_load(b, "double", c->in[4]->dt, "vr", "ch");
    sb_printf(b, ";\n");
  } else {
    emit_batch_stats(b, x->dt, C, S, M);
  }
  cg_float_lit(e, sizeof e, eps, "double");
  sb_printf(b, "    const double inv = 1.0 / sqrt(var + %s);\n    double sb = 0, ss = 0;\n", e);
  chan_for(b, C, S, M);
  sb_printf(b, "      const double g_ = ");
  cg_load(b, "double", dy->dt, "dy", "off");
  sb_printf(b, ";\n      sb += g_;\n      ss += g_ * (");
  cg_load(b, "double", x->dt, "x", "off");
  sb_printf(b, " - mu) * inv;\n    }\n");
  block_sum(b, "sb");
  block_sum(b, "ss");
  sb_printf(b, "    if (threadIdx.x == 0) {\n"
               "      st[ch] = mu; st[%lldLL + ch] = inv; st[%lldLL + ch] = sb; st[%lldLL + ch] = ss;\n",
            LL(C), LL(2 * C), LL(3 * C));
  if (want_ds) { sb_printf(b, "      "); cg_store(b, c->out[1]->dt, "dscale", "ch", "double", "ss"); }
  if (want_db) { sb_printf(b, "      "); cg_store(b, c->out[2]->dt, "dbias", "ch", "double", "sb"); }
  sb_printf(b, "    }\n  }\n}\n");
  if (chan_launch(c, name, C, na, args)) return -1;
  int64_t total = gpuc_numel(x);
  if (total == 0) return 0;
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ scale, "
               "const %s* __restrict__ dy, const double* __restrict__ st, %s* __restrict__ dx) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    const i64 ch = i / %lldLL %% %lldLL;\n"
               "    const double inv = st[%lldLL + ch], g = ",
            name, cg_ctype(x->dt), cg_ctype(sc->dt), cg_ctype(dy->dt), cg_ctype(dx->dt), LL(total), LL(S),
            LL(C), LL(C));
  cg_load(b, "double", sc->dt, "scale", "ch");
  sb_printf(b, " * inv;\n    const double d = ");
  cg_load(b, "double", dy->dt, "dy", "i");
  sb_printf(b, ";\n    ");
  if (given) {
    cg_store(b, dx->dt, "dx", "i", "double", "g * d");
  } else {
    sb_printf(b, "const double xh = (");
    cg_load(b, "double", x->dt, "x", "i");
    sb_printf(b, " - st[ch]) * inv;\n    ");
    snprintf(e, sizeof e, "g / %.1f * (%.1f * d - st[%lldLL + ch] - xh * st[%lldLL + ch])", (double)M,
             (double)M, LL(2 * C), LL(3 * C));
    cg_store(b, dx->dt, "dx", "i", "double", e);
  }
  sb_printf(b, "  }\n}\n");
  uint32_t eargs[5] = {c->tin[0], c->tin[1], c->tin[2], stt, c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 5, eargs);
}

/* ---- BatchNormalization, training mode ----------------------------------- */

/* Y with the batch statistics, running statistics updated (ref_norm.c):
 *   mean, var = batch mean and biased variance over N*S per channel
 *   y = x * a + b,  a = scale / sqrt(var + eps),  b = B - mean * a
 *   running_mean = input_mean * momentum + mean * (1 - momentum)
 *   running_var  = input_var  * momentum + var  * (1 - momentum)
 * Kernel 1: one block per channel, statistics in double, a and b into a
 * [2, C] scratch (float, as the reference's f32 path rounds them; double
 * for f64) and the running statistics. Kernel 2: one thread per element.
 * Per-activation statistics (spatial=0, opsets < 9) are not lowered. */
int lower_bn_training(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  if (c->g->opset < 9 && gpuc_attr_i(c->n, "spatial", 1) == 0)
    return lower_unsupported(c, "BatchNormalization in training mode with spatial=0 (per-activation statistics)");
  if (x->rank < 2) return lower_fail(c, "X must have rank >= 2");
  int64_t N = x->dims[0], C = x->dims[1], S = prod(x->dims + 2, x->rank - 2), M = N * S;
  for (int i = 1; i < 5; i++)
    if (gpuc_numel(c->in[i]) != C)
      return lower_fail(c, "parameter %d has %lld values, expected %lld", i, LL(gpuc_numel(c->in[i])), LL(C));
  if (C == 0) return 0;
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f), mom = gpuc_attr_f(c->n, "momentum", 0.9f);
  bool rm = has_out(c, 1), rv = has_out(c, 2);
  GpucDType pdt = x->dt == GPUC_DT_F64 ? GPUC_DT_F64 : GPUC_DT_F32;
  const char *pt = pdt == GPUC_DT_F64 ? "double" : "float";
  int64_t sdims[2] = {2, C};
  uint32_t ab = cg_scratch(c, pdt, 2, sdims);
  StrBuf *b = cg_src(c);
  char name[128], e[256], m1[64], m2[64];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  uint32_t args[9];
  int na = 0;
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ scale, "
               "const %s* __restrict__ bias, %s* __restrict__ ab",
            name, cg_ctype(x->dt), cg_ctype(c->in[1]->dt), cg_ctype(c->in[2]->dt), pt);
  args[na++] = c->tin[0];
  args[na++] = c->tin[1];
  args[na++] = c->tin[2];
  args[na++] = ab;
  if (rm) {
    sb_printf(b, ", const %s* __restrict__ rm_in, %s* __restrict__ rm_out", cg_ctype(c->in[3]->dt),
              cg_ctype(c->out[1]->dt));
    args[na++] = c->tin[3];
    args[na++] = c->tout[1];
  }
  if (rv) {
    sb_printf(b, ", const %s* __restrict__ rv_in, %s* __restrict__ rv_out", cg_ctype(c->in[4]->dt),
              cg_ctype(c->out[2]->dt));
    args[na++] = c->tin[4];
    args[na++] = c->tout[2];
  }
  sb_printf(b, ") {\n  for (i64 ch = blockIdx.x; ch < %lldLL; ch += gridDim.x) {\n", LL(C));
  emit_batch_stats(b, x->dt, C, S, M);
  cg_float_lit(e, sizeof e, eps, "double");
  cg_float_lit(m1, sizeof m1, mom, "double");
  cg_float_lit(m2, sizeof m2, 1.0 - mom, "double");
  sb_printf(b, "    if (threadIdx.x == 0) {\n      const double a = ");
  cg_load(b, "double", c->in[1]->dt, "scale", "ch");
  sb_printf(b, " / sqrt(var + %s);\n      ab[ch] = (%s)a;\n      ab[%lldLL + ch] = (%s)(", e, pt, LL(C), pt);
  cg_load(b, "double", c->in[2]->dt, "bias", "ch");
  sb_printf(b, " - mu * a);\n");
  if (rm) {
    sb_printf(b, "      { const double r_ = ");
    cg_load(b, "double", c->in[3]->dt, "rm_in", "ch");
    sb_printf(b, " * %s + mu * %s; ", m1, m2);
    cg_store(b, c->out[1]->dt, "rm_out", "ch", "double", "r_");
    sb_printf(b, "      }\n");
  }
  if (rv) {
    sb_printf(b, "      { const double r_ = ");
    cg_load(b, "double", c->in[4]->dt, "rv_in", "ch");
    sb_printf(b, " * %s + var * %s; ", m1, m2);
    cg_store(b, c->out[2]->dt, "rv_out", "ch", "double", "r_");
    sb_printf(b, "      }\n");
  }
  sb_printf(b, "    }\n  }\n}\n");
  if (chan_launch(c, name, C, na, args)) return -1;
  int64_t total = gpuc_numel(x);
  if (total == 0) return 0;
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ ab, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    const i64 p = i / %lldLL %% %lldLL;\n    const %s v = ",
            name, cg_ctype(x->dt), pt, cg_ctype(y->dt), LL(total), LL(S), LL(C), pt);
  cg_load(b, pt, x->dt, "x", "i");
  sb_printf(b, ";\n    ");
  snprintf(e, sizeof e, "v * ab[p] + ab[%lldLL + p]", LL(C));
  cg_store(b, y->dt, "y", "i", pt, e);
  sb_printf(b, "  }\n}\n");
  uint32_t eargs[3] = {c->tin[0], ab, c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 3, eargs);
}
