/* GPU lowerings of the normalizations: BatchNormalization (inference;
 * training mode in lower_train_nn.c),
 * InstanceNormalization, LayerNormalization (and AddLayerNormalization, the
 * residual Add fused in), LRN and
 * MeanVarianceNormalization. Semantics follow runtime/ref/ref_norm.c.
 *
 * Statistics are two-pass (mean, then squared deviations) like the
 * reference, accumulated in float (double for f64 inputs), one block per
 * normalized row (or one thread per row for short rows) with warp-shuffle
 * and shared-memory reductions. Shapes and attributes are baked in. */
#include "lower_rows.h"
#include "infer_nn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GRID (65535u * 32)
#define LL(v) ((long long)(v))

static const char *facc(GpucDType dt) { return dt == GPUC_DT_F64 ? "double" : "float"; }
static bool has_out(const LowerCtx *c, int k) {
  return k < c->nout && c->out[k] && c->tout[k] != UINT32_MAX;
}
static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

/* ---- rows: one per thread or one per block (as in lower_reduce.c) -------- */





static const char *rows_first(const Rows *r) { return r->block ? "threadIdx.x == 0" : "true"; }

/* Sum `var` (type t) across the block; every thread gets the same result. */
static void rows_sum(StrBuf *b, Rows *r, const char *var, const char *t) {
  if (!r->block) return;
  sb_printf(b, "    for (int s_ = 16; s_ > 0; s_ >>= 1) %s += __shfl_xor_sync(0xffffffffu, %s, s_);\n", var, var);
  if (r->threads <= 32) return;
  int id = r->uid++;
  sb_printf(b, "    { __shared__ %s sh%d_[32];\n"
               "      if ((threadIdx.x & 31) == 0) sh%d_[threadIdx.x >> 5] = %s;\n"
               "      __syncthreads();\n"
               "      %s = sh%d_[0];\n"
               "      for (int w_ = 1; w_ < %u; w_++) %s += sh%d_[w_];\n"
               "      __syncthreads(); }\n",
            t, id, id, var, var, id, r->threads / 32, var, id);
}



/* Two-pass mean and variance of the row's n elements at x[base + OFF]
 * (OFF an expression in j; x + x2 when dt2 is not GPUC_DT_UNDEF, see
 * rows_load_x): declares mean and var (type ct). rms: mean is 0 and var
 * the mean square (RMSNormalization). */
static void emit_stats(StrBuf *b, Rows *r, GpucDType dt, GpucDType dt2, const char *ct, int64_t n,
                       const char *off_decl, const char *idx, const char *idx2, bool rms) {
  if (rms) {
    sb_printf(b, "    const %s mean = 0;\n", ct);
    goto squares;
  }
  sb_printf(b, "    %s sum = 0;\n", ct);
  rows_for(b, r, "j", n);
  sb_printf(b, " {\n%s      sum += ", off_decl);
  rows_load_x(b, ct, dt, dt2, idx, idx2);
  sb_printf(b, ";\n    }\n");
  rows_sum(b, r, "sum", ct);
  if (n) sb_printf(b, "    %s mean = sum / (%s)%lld;\n", ct, ct, LL(n));
  else sb_printf(b, "    %s mean = 0;\n", ct);
squares:
  sb_printf(b, "    %s sq = 0;\n", ct);
  rows_for(b, r, "j", n);
  sb_printf(b, " {\n%s      %s d = ", off_decl, ct);
  rows_load_x(b, ct, dt, dt2, idx, idx2);
  sb_printf(b, " - mean;\n      sq += d * d;\n    }\n");
  rows_sum(b, r, "sq", ct);
  if (n) sb_printf(b, "    %s var = sq / (%s)%lld;\n", ct, ct, LL(n));
  else sb_printf(b, "    %s var = 0;\n", ct);
}

/* ---- BatchNormalization ---------------------------------------------------- */

/* Inference: y = x * a + b per parameter p with a = scale / sqrt(var + eps),
 * b = B - mean * a. A first kernel computes a and b (in double, like the
 * reference) into a scratch [2, P]; p is the channel, or channel * S +
 * spatial position with spatial=0 (before opset 9). Training mode (batch
 * statistics, running statistics updated) is lower_bn_training's. */
int lower_BatchNormalization(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (!is_flt(dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  for (int i = 1; i < 5; i++)
    if (!c->in[i] || !is_flt(c->in[i]->dt)) return lower_unsupported(c, "parameter %d is not a float tensor", i);
  int64_t opset = c->g->opset;
  bool rmean = has_out(c, 1), rvar = has_out(c, 2);
  bool training;
  if (opset >= 14) training = gpuc_attr_i(c->n, "training_mode", 0) == 1;
  else training = (rmean || rvar) && !(opset < 7 && gpuc_attr_i(c->n, "is_test", 0) == 1);
  if (training) return lower_bn_training(c); /* codegen/lower_train_nn.c */
  if (x->rank < 2) return lower_fail(c, "X must have rank >= 2");
  bool per_act = opset < 9 && gpuc_attr_i(c->n, "spatial", 1) == 0;
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  int64_t C = x->dims[1], S = prod(x->dims + 2, x->rank - 2), P = per_act ? C * S : C;
  int64_t total = gpuc_numel(x);
  for (int i = 1; i < 5; i++)
    if (gpuc_numel(c->in[i]) != P) return lower_fail(c, "parameter %d has %lld values, expected %lld", i,
                                                     LL(gpuc_numel(c->in[i])), LL(P));
  /* running mean / var outputs in inference mode: the inputs, unchanged */
  for (int k = 1; k <= 2; k++)
    if (has_out(c, k) && cg_copy(c, c->tin[k + 2], c->tout[k], gpuc_tensor_bytes(c->in[k + 2]))) return -1;
  if (total == 0 || P == 0) return 0;
  GpucDType pdt = dt == GPUC_DT_F64 ? GPUC_DT_F64 : GPUC_DT_F32;
  const char *ct = facc(dt);
  int64_t sdims[2] = {2, P};
  uint32_t ab = cg_scratch(c, pdt, 2, sdims);
  StrBuf *b = cg_src(c);
  char name[128], e[64];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ scale, const %s* __restrict__ bias, "
               "const %s* __restrict__ mean, const %s* __restrict__ var, %s* __restrict__ ab) {\n"
               "  GRID_STRIDE(p, %lldLL) {\n    double a = ",
            name, cg_ctype(c->in[1]->dt), cg_ctype(c->in[2]->dt), cg_ctype(c->in[3]->dt),
            cg_ctype(c->in[4]->dt), ct, LL(P));
  cg_load(b, "double", c->in[1]->dt, "scale", "p");
  sb_printf(b, " / sqrt(");
  cg_load(b, "double", c->in[4]->dt, "var", "p");
  cg_float_lit(e, sizeof e, eps, "double");
  sb_printf(b, " + %s);\n    ab[p] = (%s)a;\n    ab[%lldLL + p] = (%s)(", e, ct, LL(P), ct);
  cg_load(b, "double", c->in[2]->dt, "bias", "p");
  sb_printf(b, " - ");
  cg_load(b, "double", c->in[3]->dt, "mean", "p");
  sb_printf(b, " * a);\n  }\n}\n");
  uint32_t pargs[5] = {c->tin[1], c->tin[2], c->tin[3], c->tin[4], ab};
  if (cg_launch_items(c, name, (uint64_t)P, 5, pargs)) return -1;
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ ab, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n",
            name, cg_ctype(dt), ct, cg_ctype(y->dt), LL(total));
  if (per_act) sb_printf(b, "    i64 p = i %% %lldLL;\n", LL(C * S));
  else sb_printf(b, "    i64 p = (i / %lldLL) %% %lldLL;\n", LL(S), LL(C));
  sb_printf(b, "    %s v = ", ct);
  cg_load(b, ct, dt, "x", "i");
  sb_printf(b, ";\n    ");
  snprintf(e, sizeof e, "v * ab[p] + ab[%lldLL + p]", LL(P));
  cg_store(b, y->dt, "y", "i", ct, e);
  sb_printf(b, "  }\n}\n");
  uint32_t args[3] = {c->tin[0], ab, c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 3, args);
}

/* ---- InstanceNormalization --------------------------------------------------- */

/* Few, long planes (PoolFormer's GroupNorm(1) is an InstanceNormalization
 * of one [C*H*W] plane a sample: at batch 1 one block read 0.8 MB, 0.115
 * ms on the H200) are split over P blocks each, in three kernels:
 *   1. block (plane, part): the part's count, mean and squared deviations
 *      from that mean (two passes over the part, the second from L2), in
 *      double, into part[3 * block];
 *   2. a warp a plane: the parts merged (Chan et al.'s pairwise rule, in
 *      double; each lane every 32nd part, then across lanes by shuffles),
 *      then a = scale / sqrt(var + eps) and b = B - mean * a;
 *   3. y = x * a + b over every element.
 * Fewer than SPLIT_MAX_ROWS planes of at least SPLIT_MIN_LEN elements;
 * about SPLIT_BLOCKS blocks in all, parts of at least SPLIT_MIN_PART.
 * GPUC_NO_SPLIT_NORM=1 at compile time keeps one block a plane (the A/B).
 * tests/row_kernel_host_test.py runs the three kernels' text on the host. */
enum { SPLIT_MAX_ROWS = 128, SPLIT_MIN_LEN = 16384, SPLIT_BLOCKS = 512, SPLIT_MIN_PART = 1024 };

/* Kernels 1 and 2: a and b into one f32 scratch ab [2 * rows] (a at r, b
 * at rows + r; *tab), or, with split_ab, into two scratches a [rows] and b
 * [rows] (*tab, *tb: what an elementwise program reads as two broadcast
 * inputs, cg_instance_norm_stats). */
static int instance_norm_stats(LowerCtx *c, int64_t rows, int64_t C, int64_t S, double eps, bool split_ab,
                               uint32_t *tab, uint32_t *tb) {
  const Tensor *x = c->in[0];
  GpucDType dt = x->dt;
  int64_t P = (SPLIT_BLOCKS + rows - 1) / rows;
  if (P > S / SPLIT_MIN_PART) P = S / SPLIT_MIN_PART;
  if (P < 2) P = 2;
  int64_t L = (S + P - 1) / P, np = 3 * rows * P, nab = split_ab ? rows : 2 * rows;
  uint32_t part = cg_scratch(c, GPUC_DT_F64, 1, &np), ab = cg_scratch(c, GPUC_DT_F32, 1, &nab);
  uint32_t bb = split_ab ? cg_scratch(c, GPUC_DT_F32, 1, &nab) : UINT32_MAX;
  *tab = ab;
  if (tb) *tb = bb;
  StrBuf *b = cg_src(c);
  char name[128], e[64];
  /* 1: each part's count, mean and squared deviations */
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(256) %s(const %s* __restrict__ x, double* __restrict__ part) {\n"
               "  const i64 row = blockIdx.x / %lldLL, lo = (i64)(blockIdx.x %% %lldLL) * %lldLL;\n"
               "  const i64 hi = lo + %lldLL < %lldLL ? lo + %lldLL : %lldLL, base = row * %lldLL;\n"
               "  __shared__ double sh[2][8];\n"
               "  double s = 0;\n"
               "  for (i64 j = lo + threadIdx.x; j < hi; j += blockDim.x) s += (double)",
            name, cg_ctype(dt), LL(P), LL(P), LL(L), LL(L), LL(S), LL(L), LL(S), LL(S));
  cg_load(b, "float", dt, "x", "base + j");
  sb_printf(b, ";\n"
               "  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
               "  if ((threadIdx.x & 31) == 0) sh[0][threadIdx.x >> 5] = s;\n"
               "  __syncthreads();\n"
               "  s = 0;\n"
               "  for (int w = 0; w < (int)(blockDim.x >> 5); w++) s += sh[0][w];\n"
               "  const double m = s / (double)(hi - lo);\n"
               "  double q = 0;\n"
               "  for (i64 j = lo + threadIdx.x; j < hi; j += blockDim.x) { const double d = (double)");
  cg_load(b, "float", dt, "x", "base + j");
  sb_printf(b, " - m; q += d * d; }\n"
               "  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);\n"
               "  if ((threadIdx.x & 31) == 0) sh[1][threadIdx.x >> 5] = q;\n"
               "  __syncthreads();\n"
               "  if (threadIdx.x == 0) {\n"
               "    q = 0;\n"
               "    for (int w = 0; w < (int)(blockDim.x >> 5); w++) q += sh[1][w];\n"
               "    part[3 * blockIdx.x] = (double)(hi - lo); part[3 * blockIdx.x + 1] = m; part[3 * blockIdx.x + 2] = q;\n"
               "  }\n}\n");
  uint32_t args1[2] = {c->tin[0], part};
  unsigned grid1[3] = {(unsigned)(rows * P), 1, 1}, block1[3] = {256, 1, 1};
  if (cg_launch_grid(c, name, grid1, block1, 0, 2, args1)) return -1;
  /* 2: a plane's statistics from its parts, then its a and b: a warp a
   * plane, each lane merging every 32nd part, then the lanes' merged by
   * shuffles (a thread merging 196 parts in a row, each step two dependent
   * double divisions, took 0.051 ms of PoolFormer's 0.95 at batch 1) */
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const double* __restrict__ part, const %s* __restrict__ scale, "
               "const %s* __restrict__ bias, float* __restrict__ ab%s) {\n"
               "  const int lane = threadIdx.x & 31;\n"
               "  /* Chan et al.'s merge of (n, mean, m2) with (nb, mb, qb); empty parts change nothing */\n"
               "  auto chan_merge = [](double& n, double& mean, double& m2, double nb, double mb, double qb) {\n"
               "    if (nb == 0) return;\n"
               "    const double nn = n + nb, d = mb - mean, f = nb / nn;\n"
               "    mean += d * f; m2 += qb + d * d * n * f; n = nn;\n"
               "  };\n"
               "  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;\n"
               "  for (i64 r = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < %lldLL; r += warps) {\n"
               "    double n = 0, mean = 0, m2 = 0;\n"
               "    for (i64 p = r * %lldLL + lane; p < (r + 1) * %lldLL; p += 32)\n"
               "      chan_merge(n, mean, m2, part[3 * p], part[3 * p + 1], part[3 * p + 2]);\n"
               "    for (int o = 16; o > 0; o >>= 1) {\n"
               "      const double nb = __shfl_xor_sync(0xffffffffu, n, o), mb = __shfl_xor_sync(0xffffffffu, mean, o),\n"
               "                   qb = __shfl_xor_sync(0xffffffffu, m2, o);\n"
               "      chan_merge(n, mean, m2, nb, mb, qb);\n"
               "    }\n"
               "    if (lane) continue;\n"
               "    const i64 ch = r %% %lldLL;\n"
               "    const double a = (double)",
            name, cg_ctype(c->in[1]->dt), cg_ctype(c->in[2]->dt), split_ab ? ", float* __restrict__ bb" : "",
            LL(rows), LL(P), LL(P), LL(C));
  cg_load(b, "float", c->in[1]->dt, "scale", "ch");
  cg_float_lit(e, sizeof e, eps, "double");
  if (split_ab) sb_printf(b, " / sqrt(m2 / n + %s);\n    ab[r] = (float)a;\n    bb[r] = (float)((double)", e);
  else sb_printf(b, " / sqrt(m2 / n + %s);\n    ab[r] = (float)a;\n    ab[%lldLL + r] = (float)((double)", e, LL(rows));
  cg_load(b, "float", c->in[2]->dt, "bias", "ch");
  sb_printf(b, " - mean * a);\n  }\n}\n");
  uint32_t args2[5] = {part, c->tin[1], c->tin[2], ab, bb};
  return cg_launch(c, name, (uint64_t)rows * 32, 128, 0, split_ab ? 5 : 4, args2);
}

/* Whether X [N, C, S..] takes the split path (fewer than SPLIT_MAX_ROWS
 * planes of at least SPLIT_MIN_LEN elements; GPUC_NO_SPLIT_NORM unset) */
static bool split_path(GpucDType dt, int64_t rows, int64_t S) {
  return rows > 0 && rows < SPLIT_MAX_ROWS && S >= SPLIT_MIN_LEN && dt != GPUC_DT_F64 && !getenv("GPUC_NO_SPLIT_NORM");
}

int cg_instance_norm_stats(LowerCtx *c, int64_t *rows_out, uint32_t *ta, uint32_t *tb) {
  const Tensor *x = c->in[0];
  if (x->rank < 3 || !is_flt(x->dt) || !is_flt(c->in[1]->dt) || !is_flt(c->in[2]->dt)) return 1;
  int64_t rows = x->dims[0] * x->dims[1], S = prod(x->dims + 2, x->rank - 2);
  if (!split_path(x->dt, rows, S)) return 1;
  *rows_out = rows;
  return instance_norm_stats(c, rows, x->dims[1], S, gpuc_attr_f(c->n, "epsilon", 1e-5f), true, ta, tb) ? -1 : 0;
}

static int instance_norm_split(LowerCtx *c, int64_t rows, int64_t C, int64_t S, double eps) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  const char *ct = facc(dt);
  uint32_t ab;
  if (instance_norm_stats(c, rows, C, S, eps, false, &ab, NULL)) return -1;
  StrBuf *b = cg_src(c);
  char name[128], e[64];
  /* 3: normalize */
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const float* __restrict__ ab, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    const i64 r = i / %lldLL;\n"
               "    const %s v = ",
            name, cg_ctype(dt), cg_ctype(y->dt), LL(rows * S), LL(S), ct);
  cg_load(b, ct, dt, "x", "i");
  sb_printf(b, ";\n    ");
  snprintf(e, sizeof e, "v * (%s)ab[r] + (%s)ab[%lldLL + r]", ct, ct, LL(rows));
  cg_store(b, y->dt, "y", "i", ct, e);
  sb_printf(b, "  }\n}\n");
  uint32_t args3[3] = {c->tin[0], ab, c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)(rows * S), 3, args3);
}

/* Per (n, c) plane of S elements: y = x * a + b with a = scale[c] /
 * sqrt(var + eps), b = B[c] - mean * a. */
int lower_InstanceNormalization(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (!is_flt(dt) || !is_flt(c->in[1]->dt) || !is_flt(c->in[2]->dt))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  if (x->rank < 2) return lower_fail(c, "X must have rank >= 2");
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  int64_t N = x->dims[0], C = x->dims[1], S = prod(x->dims + 2, x->rank - 2), rows = N * C;
  if (rows == 0 || S == 0) return 0;
  if (split_path(dt, rows, S)) return instance_norm_split(c, rows, C, S, eps);
  const char *ct = facc(dt);
  Rows r = rows_pick(rows, S, true);
  StrBuf *b = cg_src(c);
  char name[128], e[64];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ scale, "
               "const %s* __restrict__ bias, %s* __restrict__ y) {\n",
            name, cg_ctype(dt), cg_ctype(c->in[1]->dt), cg_ctype(c->in[2]->dt), cg_ctype(y->dt));
  rows_open(b, &r, rows);
  sb_printf(b, "    i64 base = row * %lldLL, ch = row %% %lldLL;\n", LL(S), LL(C));
  emit_stats(b, &r, dt, GPUC_DT_UNDEF, ct, S, "", "base + j", NULL, false);
  cg_float_lit(e, sizeof e, eps, ct);
  sb_printf(b, "    %s a = ", ct);
  cg_load(b, ct, c->in[1]->dt, "scale", "ch");
  sb_printf(b, " / sqrt(var + %s);\n    %s bb = ", e, ct);
  cg_load(b, ct, c->in[2]->dt, "bias", "ch");
  sb_printf(b, " - mean * a;\n");
  rows_for(b, &r, "j", S);
  sb_printf(b, " {\n      %s v = ", ct);
  cg_load(b, ct, dt, "x", "base + j");
  sb_printf(b, ";\n      ");
  cg_store(b, y->dt, "y", "base + j", ct, "v * a + bb");
  sb_printf(b, "    }\n  }\n}\n");
  uint32_t args[4] = {c->tin[0], c->tin[1], c->tin[2], c->tout[0]};
  return rows_launch(c, &r, name, rows, 4, args);
}

/* ---- LayerNormalization ------------------------------------------------------- */

/* Index expression of parameter p (broadcast to the normalized dims
 * nd[0..nr)) at normalized position j; declares `var` when needed. */
static void param_index(StrBuf *b, const Tensor *p, int nr, const int64_t *nd, const char *var,
                        char *expr, size_t n) {
  if (gpuc_numel(p) == 1) { snprintf(expr, n, "0"); return; }
  int off = nr - p->rank;
  bool same = true;
  for (int d = 0; d < nr; d++) {
    int64_t pd = d >= off ? p->dims[d - off] : 1;
    if (pd != nd[d]) same = false;
  }
  if (same) { snprintf(expr, n, "j"); return; }
  int64_t dims[GPUC_MAX_RANK], str[GPUC_MAX_RANK], s = 1;
  for (int d = nr - 1; d >= 0; d--) {
    int64_t pd = d >= off ? p->dims[d - off] : 1;
    dims[d] = nd[d];
    str[d] = pd == 1 ? 0 : s;
    s *= pd;
  }
  emit_offset(b, var, "j", nr, dims, str);
  snprintf(expr, n, "%s", var);
}

/* The inputs of a LayerNormalization (add false) or AddLayerNormalization
 * (add true: X = A + B, A and B of one shape): X, or A and B, then Scale
 * and the optional bias. */
typedef struct {
  const Tensor *x, *x2, *scale, *bias; /* x2 NULL: plain LayerNormalization */
  uint32_t tx, tx2, tscale, tbias;
} LnIn;

static LnIn ln_inputs(const LowerCtx *c, bool add) {
  int k = add ? 1 : 0;
  LnIn in = {.x = c->in[0], .tx = c->tin[0], .scale = c->in[k + 1], .tscale = c->tin[k + 1]};
  if (add) { in.x2 = c->in[1]; in.tx2 = c->tin[1]; }
  if (c->nin > k + 2 && c->in[k + 2]) { in.bias = c->in[k + 2]; in.tbias = c->tin[k + 2]; }
  return in;
}

static GpucDType x2_dt(const LnIn *in) { return in->x2 ? in->x2->dt : GPUC_DT_UNDEF; }

/* "const T* __restrict__ x, [x2,] scale, [bias,]" and the matching args */
static void ln_params(StrBuf *b, const LnIn *in) {
  sb_printf(b, "const %s* __restrict__ x, ", cg_ctype(in->x->dt));
  if (in->x2) sb_printf(b, "const %s* __restrict__ x2, ", cg_ctype(in->x2->dt));
  sb_printf(b, "const %s* __restrict__ scale, ", cg_ctype(in->scale->dt));
  if (in->bias) sb_printf(b, "const %s* __restrict__ bias, ", cg_ctype(in->bias->dt));
}

static int ln_args(const LnIn *in, uint32_t *args) {
  int na = 0;
  args[na++] = in->tx;
  if (in->x2) args[na++] = in->tx2;
  args[na++] = in->tscale;
  if (in->bias) args[na++] = in->tbias;
  return na;
}

/* "scale[j] (+ bias[j])" as float, after a "(x - mean) * inv * ": the
 * affine tail of the row kernels' normalized element j (one-element Scale
 * or B read at 0) */
static void ln_affine(StrBuf *b, const Tensor *scale, const Tensor *bias) {
  cg_load(b, "float", scale->dt, "scale", gpuc_numel(scale) == 1 ? "0" : "j");
  if (bias) {
    sb_printf(b, " + ");
    cg_load(b, "float", bias->dt, "bias", gpuc_numel(bias) == 1 ? "0" : "j");
  }
}

/* warp_rows_open for X = DequantizeRows(acc, xs, ws, db) of dtype xdt
 * (LowerCtx.row): each element ((float)acc * xs[row]) * ws[j] + db[j],
 * each step rounded (as ref_DequantizeRows and lower_DequantizeRows), then
 * rounded to xdt as the unfused graph stores it, then + x2 as
 * AddLayerNormalization loads it. acc is int32, vec of them a load. */
static void warp_rows_open_dequant(StrBuf *b, int64_t nrows, int64_t n, int vec, GpucDType xdt, GpucDType dt2,
                                   bool x2_row, bool xs1, bool ws1, bool db) {
  int lanes = warp_rows_lanes(n, vec), groups = (int)((n + lanes * vec - 1) / (lanes * vec));
  warp_rows_begin(b, nrows, n, vec);
  sb_printf(b, "    const float rs = live_ ? dq_xs[%s] : 0.0f;\n"
               "    float v[%d];\n"
               "#pragma unroll\n"
               "    for (int g = 0; g < %d; g++) {\n"
               "      const int j0 = (lane + %d * g) * %d;\n"
               "      if (live_ && j0 < %lld) {\n"
               "        const Vec<int, %d> a = *(const Vec<int, %d>*)(x + base + j0);\n",
            xs1 ? "0" : "row", groups * vec, groups, lanes, vec, LL(n), vec, vec);
  if (dt2 != GPUC_DT_UNDEF)
    sb_printf(b, "        const Vec<%s, %d> a2 = *(const Vec<%s, %d>*)(x2 + %sj0);\n", cg_ctype(dt2), vec,
              cg_ctype(dt2), vec, x2_row ? "" : "base + ");
  sb_printf(b, "#pragma unroll\n        for (int u = 0; u < %d; u++) {\n"
               "          float t = __fmul_rn(__fmul_rn((float)a.v[u], rs), dq_ws[%s]);\n",
            vec, ws1 ? "0" : "j0 + u");
  if (db) sb_printf(b, "          t = __fadd_rn(t, ldf(dq_b[j0 + u]));\n");
  sb_printf(b, "          v[g * %d + u] = ldf(stf<%s>(t))", vec, cg_ctype(xdt));
  if (dt2 != GPUC_DT_UNDEF) sb_printf(b, " + ldf(a2.v[u])");
  sb_printf(b, ";\n        }\n      } else {\n#pragma unroll\n        for (int u = 0; u < %d; u++) v[g * %d + u] = 0.0f;\n"
               "      }\n    }\n", vec, vec);
}

/* After the row's Y is stored with v[k] = Y's values as stored: QuantizeRows'
 * rule (ir/quant_int8.h) or QuantizeRowsF8's (absmax / 448, e4m3 by
 * cvt.rn.satfinite) over v, into q (16-byte-aligned runs of vec bytes) and
 * s[row]. */
static void warp_rows_quantize(StrBuf *b, int64_t n, int vec, bool f8) {
  int lanes = warp_rows_lanes(n, vec), groups = (int)((n + lanes * vec - 1) / (lanes * vec));
  sb_printf(b, "    float m = 0.0f;\n");
  warp_rows_for(b, n, vec);
  sb_printf(b, "      m = fmaxf(m, fabsf(v[k]));\n    }\n");
  warp_rows_allreduce(b, n, vec, "m", "float", "fmaxf(a, b)");
  sb_printf(b, "    const float qinv = m > 0.0f ? %s / m : 0.0f;\n"
               "    if (lane == 0 && live_) qs[row] = m > 0.0f ? m / %s : 1.0f;\n",
            f8 ? "448.0f" : "127.0f", f8 ? "448.0f" : "127.0f");
  const char *wt = vec == 8 ? "uint2" : vec == 4 ? "unsigned int" : vec == 2 ? "unsigned short" : "unsigned char";
  sb_printf(b, "#pragma unroll\n    for (int g = 0; g < %d; g++) {\n"
               "      const int j0 = (lane + %d * g) * %d;\n      if (!live_ || j0 >= %lld) continue;\n"
               "      union { %s w; unsigned char c[%d]; } o;\n",
            groups, lanes, vec, LL(n), wt, vec);
  if (!f8) {
    sb_printf(b, "#pragma unroll\n      for (int u = 0; u < %d; u++)\n"
                 "        o.c[u] = (unsigned char)(signed char)fminf(fmaxf(rintf(__fmul_rn(v[g * %d + u], qinv)), "
                 "-127.0f), 127.0f);\n",
              vec, vec);
  } else if (vec % 2 == 0) {
    /* cvt.rn.satfinite.e4m3x2.f32 d, a, b: a to the high byte, b to the low */
    sb_printf(b, "#pragma unroll\n      for (int u = 0; u < %d; u += 2) {\n"
                 "        unsigned short d;\n"
                 "        asm(\"cvt.rn.satfinite.e4m3x2.f32 %%0, %%1, %%2;\" : \"=h\"(d)\n"
                 "            : \"f\"(__fmul_rn(v[g * %d + u + 1], qinv)), \"f\"(__fmul_rn(v[g * %d + u], qinv)));\n"
                 "        o.c[u] = (unsigned char)(d & 0xff);\n        o.c[u + 1] = (unsigned char)(d >> 8);\n"
                 "      }\n",
              vec, vec, vec);
  } else {
    sb_printf(b, "      {\n        unsigned short d;\n"
                 "        asm(\"cvt.rn.satfinite.e4m3x2.f32 %%0, %%1, %%2;\" : \"=h\"(d) : \"f\"(0.0f), "
                 "\"f\"(__fmul_rn(v[g], qinv)));\n"
                 "        o.c[0] = (unsigned char)(d & 0xff);\n      }\n");
  }
  sb_printf(b, "      *(%s*)(qo + base + j0) = o.w;\n    }\n", wt);
}

/* LayerNorm over contiguous rows of 17..1024 elements in float (BERT's
 * 768): one warp per row held in registers (with x2, x + x2 summed as the
 * row is loaded); mean, then the variance about it (two passes over
 * registers, as the general kernel does over memory). Scale and bias have
 * the row's shape or one element. With c->row (passes/fuse_quantize_rows.c)
 * X is dequantized from int32 as it is loaded and/or Y is also quantized
 * per row (Y's stored values, kept in v[]). */
static int layernorm_warp(LowerCtx *c, const LnIn *in, int64_t rows, int64_t n, double eps, bool rms) {
  const Tensor *y = c->out[0], *scale = in->scale, *bias = in->bias;
  const RowFuse *rf = c->row;
  bool dq = rf && rf->dq >= 0, qz = rf && rf->q >= 0;
  bool f8 = qz && c->g->nodes[rf->q].op == GPUC_OP_QUANTIZEROWSF8;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  char e[64];
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  if (dq) sb_printf(b, "const int* __restrict__ x, ");
  else sb_printf(b, "const %s* __restrict__ x, ", cg_ctype(in->x->dt));
  if (in->x2) sb_printf(b, "const %s* __restrict__ x2, ", cg_ctype(in->x2->dt));
  sb_printf(b, "const %s* __restrict__ scale, ", cg_ctype(in->scale->dt));
  if (in->bias) sb_printf(b, "const %s* __restrict__ bias, ", cg_ctype(in->bias->dt));
  const Tensor *db = NULL;
  bool xs1 = false, ws1 = false;
  if (dq) {
    const Node *d = &c->g->nodes[rf->dq];
    db = d->nin > 3 && d->in[3] >= 0 ? &c->g->values[d->in[3]].t : NULL;
    xs1 = gpuc_numel(&c->g->values[d->in[1]].t) == 1;
    ws1 = gpuc_numel(&c->g->values[d->in[2]].t) == 1;
    sb_printf(b, "const float* __restrict__ dq_xs, const float* __restrict__ dq_ws, ");
    if (db) sb_printf(b, "const %s* __restrict__ dq_b, ", cg_ctype(db->dt));
  }
  bool ky = !(rf && rf->drop_y); /* Y stored: something besides the quantize reads it */
  if (qz) sb_printf(b, "float* __restrict__ qs, unsigned char* __restrict__ qo%s", ky ? ", " : "");
  if (ky) sb_printf(b, "%s* __restrict__ y", cg_ctype(y->dt));
  sb_printf(b, ") {\n");
  /* X's dtype decides the lanes' elements even when X is dequantized from
   * int32 (32-byte int loads for 8 halves): the sums run in the same order
   * as the unfused kernel's, so the fused kernel's bits are its bits */
  int vec = warp_rows_vec(n, in->x->dt, x2_dt(in), y->dt);
  bool x2_row = in->x2 && gpuc_numel(in->x2) == n;
  if (dq) warp_rows_open_dequant(b, rows, n, vec, in->x->dt, x2_dt(in), x2_row, xs1, ws1, db != NULL);
  else warp_rows_open(b, rows, n, vec, "float", in->x->dt, x2_dt(in), x2_row, "0.0f");
  if (rms) {
    sb_printf(b, "    const float mean = 0;\n");
  } else {
    sb_printf(b, "    float sum = 0;\n");
    warp_rows_for(b, n, vec);
    sb_printf(b, "      sum += v[k];\n    }\n");
    warp_rows_allreduce(b, n, vec, "sum", "float", "a + b");
    sb_printf(b, "    const float mean = sum / (float)%lld;\n", LL(n));
  }
  sb_printf(b, "    float sq = 0;\n");
  warp_rows_for(b, n, vec);
  sb_printf(b, "      const float d = v[k] - mean;\n      sq += d * d;\n    }\n");
  warp_rows_allreduce(b, n, vec, "sq", "float", "a + b");
  cg_float_lit(e, sizeof e, eps, "float");
  sb_printf(b, "    const float inv = 1.0f / sqrt(sq / (float)%lld + %s);\n", LL(n), e);
  warp_rows_store_begin(b, n, vec, y->dt);
  sb_printf(b, "      const float o = (v[k] - mean) * inv * ");
  ln_affine(b, scale, bias);
  sb_printf(b, ";\n      ");
  cg_store(b, y->dt, "r.v", "u", "float", "o");
  if (qz) sb_printf(b, "      v[k] = ldf(r.v[u]); /* the value as stored: what QuantizeRows would read */\n");
  if (ky) warp_rows_store_end(b, vec, y->dt);
  else sb_printf(b, "      }\n    }\n");
  if (qz) warp_rows_quantize(b, n, vec, f8);
  sb_printf(b, "  }\n}\n");
  uint32_t args[12];
  int na = 0;
  args[na++] = dq ? rf->tacc : in->tx;
  if (in->x2) args[na++] = in->tx2;
  args[na++] = in->tscale;
  if (in->bias) args[na++] = in->tbias;
  if (dq) {
    args[na++] = rf->txs;
    args[na++] = rf->tws;
    if (db) args[na++] = rf->tbias;
  }
  if (qz) {
    args[na++] = rf->ts;
    args[na++] = rf->tq;
  }
  if (ky) args[na++] = c->tout[0];
  return warp_rows_launch(c, name, rows, n, vec, na, args);
}

/* LayerNorm / RMSNorm over contiguous rows of WARP_ROW_MAX+1 ..
 * ROW_LAYOUT_MAX_N elements in float (LLaMA-1B's 2048, 7B's 4096): the
 * multi-row layout of lower_rows.h, 2 to 8 warps a row holding it in
 * registers (w_), read once; mean, then the variance about it, as
 * layernorm_warp does (with x2, x + x2 summed as the row is loaded).
 * With c->row a quantize only (passes/fuse_quantize_rows.c): Y per row
 * by QuantizeRows' rule on Y's stored values. A dequantized X stays with
 * rows a warp holds (cg_norm_row_fusable). */
static int layernorm_rows(LowerCtx *c, const LnIn *in, int64_t rows, int64_t n, double eps, bool rms) {
  const Tensor *y = c->out[0], *scale = in->scale, *bias = in->bias;
  const RowFuse *rf = c->row;
  if (rf && rf->dq >= 0) return lower_fail(c, "internal: a dequantized X on rows of %lld", LL(n));
  bool qz = rf && rf->q >= 0, ky = !(rf && rf->drop_y); /* Y stored: something besides the quantize reads it */
  bool f8 = qz && c->g->nodes[rf->q].op == GPUC_OP_QUANTIZEROWSF8;
  RowLayout L;
  if (row_layout_pick(&L, rows, n, warp_rows_vec(n, in->x->dt, x2_dt(in), y->dt)))
    return lower_fail(c, "internal: rows of %lld past the row layout", LL(n));
  const int V = L.vec;
  bool x2_row = in->x2 && gpuc_numel(in->x2) == n;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  const char *xt = cg_ctype(in->x->dt), *yt = cg_ctype(y->dt);
  char e[64];
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", ROW_LAYOUT_BLOCK, name);
  ln_params(b, in);
  if (qz) sb_printf(b, "float* __restrict__ qs, unsigned char* __restrict__ qo%s", ky ? ", " : "");
  if (ky) sb_printf(b, "%s* __restrict__ y", yt);
  sb_printf(b, ") {\n");
  row_layout_open(b, &L);
  /* the row (x [+ x2]) as float: w_[g * V + u] is element j0_ + u of vector g; 0 past the row */
  sb_printf(b, "    float w_[%d];\n", L.groups * V);
  row_layout_for_vec(b, &L);
  sb_printf(b, "        const Vec<%s, %d> a = *(const Vec<%s, %d>*)(x + base_ + j0_);\n", xt, V, xt, V);
  if (in->x2)
    sb_printf(b, "        const Vec<%s, %d> a2 = *(const Vec<%s, %d>*)(x2 + %sj0_);\n", cg_ctype(in->x2->dt), V,
              cg_ctype(in->x2->dt), V, x2_row ? "" : "base_ + ");
  sb_printf(b, "#pragma unroll\n        for (int u = 0; u < %d; u++) w_[g * %d + u] = ldf(a.v[u])%s;\n"
               "      } else {\n#pragma unroll\n        for (int u = 0; u < %d; u++) w_[g * %d + u] = 0.0f;\n"
               "      }\n    }\n",
            V, V, in->x2 ? " + ldf(a2.v[u])" : "", V, V);
  if (rms) {
    sb_printf(b, "    const float mean = 0;\n");
  } else {
    sb_printf(b, "    float sum = 0;\n#pragma unroll\n    for (int t_ = 0; t_ < %d; t_++) sum += w_[t_];\n",
              L.groups * V);
    row_layout_reduce(b, &L, "sum", "a + b");
    sb_printf(b, "    const float mean = sum / (float)%lld;\n", LL(n));
  }
  sb_printf(b, "    float sq = 0;\n");
  row_layout_for_vec(b, &L);
  sb_printf(b, "#pragma unroll\n        for (int u = 0; u < %d; u++) { const float d = w_[g * %d + u] - mean; sq += d * d; }\n"
               "      }\n    }\n",
            V, V);
  row_layout_reduce(b, &L, "sq", "a + b");
  cg_float_lit(e, sizeof e, eps, "float");
  sb_printf(b, "    const float inv = 1.0f / sqrt(sq / (float)%lld + %s);\n", LL(n), e);
  row_layout_for_vec(b, &L);
  sb_printf(b, "        Vec<%s, %d> r;\n#pragma unroll\n        for (int u = 0; u < %d; u++) {\n"
               "          const int j = j0_ + u;\n          const float o = (w_[g * %d + u] - mean) * inv * ",
            yt, V, V, V);
  ln_affine(b, scale, bias);
  sb_printf(b, ";\n          ");
  cg_store(b, y->dt, "r.v", "u", "float", "o");
  if (qz) sb_printf(b, "          w_[g * %d + u] = ldf(r.v[u]); /* the value as stored: what QuantizeRows would read */\n", V);
  sb_printf(b, "        }\n");
  if (ky) sb_printf(b, "        *(Vec<%s, %d>*)(y + base_ + j0_) = r;\n", yt, V);
  sb_printf(b, "      }\n    }\n");
  if (qz) row_layout_quantize(b, &L, f8);
  sb_printf(b, "  }\n}\n");
  uint32_t args[8];
  int na = ln_args(in, args);
  if (qz) {
    args[na++] = rf->ts;
    args[na++] = rf->tq;
  }
  if (ky) args[na++] = c->tout[0];
  return row_layout_launch(c, &L, name, na, args);
}

/* The norm node's lowering takes LowerCtx.row: a LayerNormalization,
 * AddLayerNormalization or RMSNormalization (LLaMA's) over the last axis that the warp-per-row kernel
 * runs (float statistics, rows of 17..WARP_ROW_MAX, Scale and B per
 * element or one; B of an Add one row or X's shape), with Y only; without
 * a dequantized X (dq), rows up to ROW_LAYOUT_MAX_N too (layernorm_rows). */
bool cg_norm_row_fusable(const Graph *g, const Node *n, bool dq) {
  if ((n->op != GPUC_OP_LAYERNORMALIZATION && n->op != GPUC_OP_ADDLAYERNORMALIZATION &&
       n->op != GPUC_OP_RMSNORMALIZATION) || n->out[0] < 0)
    return false;
  for (int k = 1; k < n->nout; k++)
    if (n->out[k] >= 0) return false;
  bool add = n->op == GPUC_OP_ADDLAYERNORMALIZATION;
  int k = add ? 1 : 0;
  if (n->nin < k + 2 || n->in[0] < 0 || n->in[k + 1] < 0) return false;
  const Tensor *x = &g->values[n->in[0]].t, *sc = &g->values[n->in[k + 1]].t;
  const Tensor *bi = n->nin > k + 2 && n->in[k + 2] >= 0 ? &g->values[n->in[k + 2]].t : NULL;
  if (x->rank < 1 || !is_flt(x->dt) || x->dt == GPUC_DT_F64 || gpuc_attr_i(n, "stash_type", 1) == 11 ||
      !is_flt(sc->dt) || (bi && !is_flt(bi->dt)))
    return false;
  int64_t axis = gpuc_attr_i(n, "axis", -1), inner = x->dims[x->rank - 1];
  if (axis != -1 && axis != x->rank - 1) return false;
  if (add) {
    const Tensor *x2 = &g->values[n->in[1]].t;
    if (!is_flt(x2->dt) || x2->dt == GPUC_DT_F64 || (gpuc_numel(x2) != gpuc_numel(x) && gpuc_numel(x2) != inner))
      return false;
  }
  return inner > 16 && inner <= (dq ? WARP_ROW_MAX : ROW_LAYOUT_MAX_N) && (gpuc_numel(sc) == inner || gpuc_numel(sc) == 1) &&
         (!bi || gpuc_numel(bi) == inner || gpuc_numel(bi) == 1);
}

/* X as [outer, inner] with inner = prod(dims[axis:]); y = (x - mean) * inv
 * * Scale (+ B), inv = 1 / sqrt(var + eps); optional Mean and InvStdDev
 * outputs (stash dtype; stash_type double computes in double). With add,
 * X = A + B, formed wherever X is read (AddLayerNormalization has Y only).
 * With rms (RMSNormalization: X, Scale; Y only), mean is 0 and var the
 * mean square. */
static int layernorm(LowerCtx *c, bool add, bool rms) {
  LnIn in = ln_inputs(c, add);
  const Tensor *x = in.x, *y = c->out[0], *scale = in.scale, *bias = in.bias;
  GpucDType dt = x->dt, dt2 = x2_dt(&in);
  if (!is_flt(dt) || (add && !is_flt(dt2)) || !is_flt(scale->dt) || (bias && !is_flt(bias->dt)))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  int axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", -1), x->rank, &axis)) return -1;
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  int64_t outer = prod(x->dims, axis), inner = prod(x->dims + axis, x->rank - axis);
  if (add && gpuc_numel(in.x2) != gpuc_numel(x) && gpuc_numel(in.x2) != inner)
    return lower_fail(c, "internal: B is neither A's shape nor one row");
  const char *x2i = add && gpuc_numel(in.x2) != gpuc_numel(x) ? "j" : "base + j"; /* B one row: x2[j] */
  if (outer == 0) return 0;
  bool mo = has_out(c, 1), io = has_out(c, 2);
  /* statistics in float, or double for f64 inputs or an f64 stash_type */
  const char *ct = dt == GPUC_DT_F64 || gpuc_attr_i(c->n, "stash_type", 1) == 11 ? "double" : "float";
  bool row_params = (gpuc_numel(scale) == inner || gpuc_numel(scale) == 1) &&
                    (!bias || gpuc_numel(bias) == inner || gpuc_numel(bias) == 1);
  /* Y only, float statistics: a kernel holding the row in registers */
  bool in_regs = !mo && !io && !strcmp(ct, "float") && inner > 16 && row_params;
  if (in_regs && inner <= WARP_ROW_MAX) return layernorm_warp(c, &in, outer, inner, eps, rms);
  if (in_regs && inner <= ROW_LAYOUT_MAX_N) return layernorm_rows(c, &in, outer, inner, eps, rms);
  if (c->row) return lower_fail(c, "internal: a fused dequantize/quantize on a norm the warp kernel does not run");
  Rows r = rows_pick(outer, inner, true);
  StrBuf *b = cg_src(c);
  char name[128], e[64], sidx[32], bidx[32];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  ln_params(b, &in);
  sb_printf(b, "%s* __restrict__ y", cg_ctype(y->dt));
  if (mo) sb_printf(b, ", %s* __restrict__ mout", cg_ctype(c->out[1]->dt));
  if (io) sb_printf(b, ", %s* __restrict__ iout", cg_ctype(c->out[2]->dt));
  sb_printf(b, ") {\n");
  rows_open(b, &r, outer);
  sb_printf(b, "    i64 base = row * %lldLL;\n", LL(inner));
  emit_stats(b, &r, dt, dt2, ct, inner, "", "base + j", x2i, rms);
  cg_float_lit(e, sizeof e, eps, ct);
  sb_printf(b, "    %s inv = (%s)1 / sqrt(var + %s);\n", ct, ct, e);
  rows_for(b, &r, "j", inner);
  sb_printf(b, " {\n");
  int nr = x->rank - axis;
  param_index(b, scale, nr, x->dims + axis, "si", sidx, sizeof sidx);
  if (bias) param_index(b, bias, nr, x->dims + axis, "bi", bidx, sizeof bidx);
  sb_printf(b, "      %s v = (", ct);
  rows_load_x(b, ct, dt, dt2, "base + j", x2i);
  sb_printf(b, " - mean) * inv * ");
  cg_load(b, ct, scale->dt, "scale", sidx);
  if (bias) {
    sb_printf(b, " + ");
    cg_load(b, ct, bias->dt, "bias", bidx);
  }
  sb_printf(b, ";\n      ");
  cg_store(b, y->dt, "y", "base + j", ct, "v");
  sb_printf(b, "    }\n");
  if (mo || io) {
    sb_printf(b, "    if (%s) {\n", rows_first(&r));
    if (mo) { sb_printf(b, "      "); cg_store(b, c->out[1]->dt, "mout", "row", ct, "mean"); }
    if (io) { sb_printf(b, "      "); cg_store(b, c->out[2]->dt, "iout", "row", ct, "inv"); }
    sb_printf(b, "    }\n");
  }
  sb_printf(b, "  }\n}\n");
  uint32_t args[7];
  int na = ln_args(&in, args);
  args[na++] = c->tout[0];
  if (mo) args[na++] = c->tout[1];
  if (io) args[na++] = c->tout[2];
  return rows_launch(c, &r, name, outer, na, args);
}

int lower_LayerNormalization(LowerCtx *c) { return layernorm(c, false, false); }

int lower_RMSNormalization(LowerCtx *c) { return layernorm(c, false, true); }

/* LayerNormalization(A + B): the sum is formed as each element is loaded
 * (once per element in the warp-per-row kernel, where the row stays in
 * registers), never written. */
int lower_AddLayerNormalization(LowerCtx *c) { return layernorm(c, true, false); }

/* GroupNormalization: one row per (n, group) of L = C/G * S elements
 * (contiguous in NCHW); scale and bias per channel g * C/G + j / S
 * (opset 21) or per group (18). */
int lower_GroupNormalization(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (!is_flt(dt) || !is_flt(c->in[1]->dt) || !is_flt(c->in[2]->dt))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  int64_t G;
  if (gpuc_group_norm_groups(LOWER_OPCTX(c), &G)) return -1;
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  int64_t N = x->dims[0], C = x->dims[1], S = prod(x->dims + 2, x->rank - 2), rows = N * G, L = C / G * S;
  if (rows == 0 || L == 0) return 0;
  const char *ct = facc(dt);
  Rows r = rows_pick(rows, L, true);
  StrBuf *b = cg_src(c);
  char name[128], e[64], p[96];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ scale, "
               "const %s* __restrict__ bias, %s* __restrict__ y) {\n",
            name, cg_ctype(dt), cg_ctype(c->in[1]->dt), cg_ctype(c->in[2]->dt), cg_ctype(y->dt));
  rows_open(b, &r, rows);
  sb_printf(b, "    i64 base = row * %lldLL, g = row %% %lldLL;\n", LL(L), LL(G));
  emit_stats(b, &r, dt, GPUC_DT_UNDEF, ct, L, "", "base + j", NULL, false);
  cg_float_lit(e, sizeof e, eps, ct);
  sb_printf(b, "    %s inv = (%s)1 / sqrt(var + %s);\n", ct, ct, e);
  rows_for(b, &r, "j", L);
  if (c->g->opset >= 21) snprintf(p, sizeof p, "g * %lldLL + j / %lldLL", LL(C / G), LL(S));
  else snprintf(p, sizeof p, "g");
  sb_printf(b, " {\n      i64 p = %s;\n      %s v = (", p, ct);
  cg_load(b, ct, dt, "x", "base + j");
  sb_printf(b, " - mean) * inv * ");
  cg_load(b, ct, c->in[1]->dt, "scale", "p");
  sb_printf(b, " + ");
  cg_load(b, ct, c->in[2]->dt, "bias", "p");
  sb_printf(b, ";\n      ");
  cg_store(b, y->dt, "y", "base + j", ct, "v");
  sb_printf(b, "    }\n  }\n}\n");
  uint32_t args[4] = {c->tin[0], c->tin[1], c->tin[2], c->tout[0]};
  return rows_launch(c, &r, name, rows, 4, args);
}

/* ---- LRN ------------------------------------------------------------------------- */

/* y = x / (bias + alpha / size * sum of x^2 over the channel window
 * [c - floor((size-1)/2), c + ceil((size-1)/2)]) ^ beta; one thread per
 * element. */
int lower_LRN(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (!is_flt(dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  if (x->rank < 2) return lower_fail(c, "X must have rank >= 2");
  int64_t size = gpuc_attr_i(c->n, "size", 1);
  if (size < 1) return lower_fail(c, "size must be >= 1");
  double alpha = gpuc_attr_f(c->n, "alpha", 1e-4f), beta = gpuc_attr_f(c->n, "beta", 0.75f);
  double bias = gpuc_attr_f(c->n, "bias", 1.0f);
  int64_t C = x->dims[1], S = prod(x->dims + 2, x->rank - 2), total = gpuc_numel(x);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  if (total == 0) return 0;
  const char *ct = facc(dt);
  StrBuf *b = cg_src(c);
  char name[128], la[64], lb[64], lbias[64];
  cg_float_lit(la, sizeof la, alpha / (double)size, ct);
  cg_float_lit(lb, sizeof lb, beta, ct);
  cg_float_lit(lbias, sizeof lbias, bias, ct);
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 s = i %% %lldLL, ch = (i / %lldLL) %% %lldLL, nb = i / %lldLL;\n"
               "    i64 c0 = ch - %lldLL < 0 ? 0 : ch - %lldLL, c1 = ch + %lldLL >= %lldLL ? %lldLL : ch + %lldLL;\n"
               "    %s sq = 0;\n"
               "    for (i64 k = c0; k <= c1; k++) {\n      %s v = ",
            name, cg_ctype(dt), cg_ctype(y->dt), LL(total), LL(S), LL(S), LL(C), LL(C * S), LL(lo),
            LL(lo), LL(hi), LL(C), LL(C - 1), LL(hi), ct, ct);
  char idx[96];
  snprintf(idx, sizeof idx, "(nb * %lldLL + k) * %lldLL + s", LL(C), LL(S));
  cg_load(b, ct, dt, "x", idx);
  sb_printf(b, ";\n      sq += v * v;\n    }\n    %s v = ", ct);
  cg_load(b, ct, dt, "x", "i");
  sb_printf(b, ";\n    ");
  char e[256];
  snprintf(e, sizeof e, "v / pow(%s + %s * sq, %s)", lbias, la, lb);
  cg_store(b, y->dt, "y", "i", ct, e);
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 2, args);
}

/* ---- MeanVarianceNormalization ---------------------------------------------- */


/* y = (x - mean) / (sqrt(var) + 1e-9), statistics over `axes` (default
 * [0, 2, 3]); one row per group of the kept axes. */
int lower_MeanVarianceNormalization(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (!is_flt(dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  bool red[GPUC_MAX_RANK] = {false};
  const int64_t *axes;
  static const int64_t dflt[] = {0, 2, 3};
  int na = gpuc_attr_ints(c->n, "axes", &axes);
  if (na < 0) { axes = dflt; na = 3; }
  for (int i = 0; i < na; i++) {
    int a;
    if (gpuc_norm_axis(LOWER_OPCTX(c), axes[i], x->rank, &a)) return -1;
    red[a] = true;
  }
  int nk = 0, nr = 0;
  int64_t kdim[GPUC_MAX_RANK], kstr[GPUC_MAX_RANK], rdim[GPUC_MAX_RANK], rstr[GPUC_MAX_RANK];
  int64_t str[GPUC_MAX_RANK], keys = 1, cnt = 1;
  gpuc_strides(x, str);
  for (int d = 0; d < x->rank; d++) {
    if (red[d]) cnt *= x->dims[d];
    else keys *= x->dims[d];
    if (x->dims[d] == 1) continue;
    if (red[d]) push_axis(rdim, rstr, &nr, x->dims[d], str[d]);
    else push_axis(kdim, kstr, &nk, x->dims[d], str[d]);
  }
  if (keys == 0 || cnt == 0) return 0;
  const char *ct = facc(dt);
  Rows r = rows_pick(keys, cnt, nr == 0 || (nr == 1 && rstr[0] == 1));
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n", name,
            cg_ctype(dt), cg_ctype(y->dt));
  rows_open(b, &r, keys);
  emit_offset(b, "base", "row", nk, kdim, kstr);
  StrBuf off = {0};
  emit_offset(&off, "off", "j", nr, rdim, rstr);
  if (off.oom) return lower_fail(c, "out of memory");
  emit_stats(b, &r, dt, GPUC_DT_UNDEF, ct, cnt, off.s, "base + off", NULL, false);
  sb_printf(b, "    %s den = sqrt(var) + (%s)1e-9;\n", ct, ct);
  rows_for(b, &r, "j", cnt);
  sb_printf(b, " {\n%s      %s v = ", off.s, ct);
  cg_load(b, ct, dt, "x", "base + off");
  sb_printf(b, ";\n      ");
  cg_store(b, y->dt, "y", "base + off", ct, "(v - mean) / den");
  sb_printf(b, "    }\n  }\n}\n");
  free(off.s);
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return rows_launch(c, &r, name, keys, 2, args);
}
