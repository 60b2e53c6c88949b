/* The --fp8 ops on the GPU (sm_89 and newer: FP8 tensor cores):
 *   QuantizeRowsF8  one warp per row: absmax by warp shuffles, then the
 *                   row again as e4m3 by cvt.rn.satfinite (the rounding of
 *                   gpuc_f32_to_f8e4m3), two values a convert
 *   MatMulF8        one cuBLASLt FP8 GEMM: e4m3 x e4m3, f32 sums, the
 *                   per-row and per-channel scales applied by the GEMM
 *                   (outer-vector scale mode), bias in its epilogue, Y
 *                   written in its own dtype (plan.h, PLAN_GEMM_COMPUTE_F8) */
#include "lower_util.h"

#define LL(x) ((long long)(x))

static int need_fp8_arch(LowerCtx *c) {
  if (c->opt->sm >= 89) return 0;
  return lower_fail(c, "--fp8 needs FP8 tensor cores (sm_89 or newer); the target is sm_%d: compile "
                       "without --fp8, or with --int8", c->opt->sm);
}

int lower_QuantizeRowsF8(LowerCtx *c) {
  if (need_fp8_arch(c)) return -1;
  const Tensor *x = c->in[0];
  int64_t k = x->dims[x->rank - 1], n = gpuc_numel(x);
  if (n == 0) return 0;
  if (k <= 0 || k > INT32_MAX) return lower_unsupported(c, "rows of %lld elements", LL(k));
  int64_t rows = n / k;
  const char *t = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  /* cvt.rn.satfinite.e4m3x2.f32 d, a, b: a to the high byte, b to the low */
  sb_printf(b,
            "extern \"C\" __global__ void %s(const %s* __restrict__ x, float* __restrict__ s, "
            "unsigned char* __restrict__ q) {\n"
            "  const int lane = threadIdx.x & 31;\n"
            "  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;\n"
            "  for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < %lldLL; row += warps) {\n"
            "    const %s* xr = x + row * %lldLL;\n"
            "    unsigned char* qr = q + row * %lldLL;\n"
            "    float m = 0.0f;\n"
            "    for (i64 j = lane; j < %lldLL; j += 32) m = fmaxf(m, fabsf(ldf(xr[j])));\n"
            "    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));\n"
            "    const float inv = m > 0.0f ? 448.0f / m : 0.0f;\n"
            "    if (lane == 0) s[row] = m > 0.0f ? m / 448.0f : 1.0f;\n",
            name, t, LL(rows), t, LL(k), LL(k), LL(k));
  if (k % 2 == 0)
    sb_printf(b,
              "    for (i64 j = 2 * lane; j < %lldLL; j += 64) {\n"
              "      unsigned short d;\n"
              "      asm(\"cvt.rn.satfinite.e4m3x2.f32 %%0, %%1, %%2;\" : \"=h\"(d)\n"
              "          : \"f\"(__fmul_rn(ldf(xr[j + 1]), inv)), \"f\"(__fmul_rn(ldf(xr[j]), inv)));\n"
              "      *reinterpret_cast<unsigned short*>(qr + j) = d;\n"
              "    }\n",
              LL(k));
  else
    sb_printf(b,
              "    for (i64 j = lane; j < %lldLL; j += 32) {\n"
              "      unsigned short d;\n"
              "      asm(\"cvt.rn.satfinite.e4m3x2.f32 %%0, %%1, %%2;\" : \"=h\"(d) : \"f\"(0.0f), "
              "\"f\"(__fmul_rn(ldf(xr[j]), inv)));\n"
              "      qr[j] = (unsigned char)(d & 0xff);\n"
              "    }\n",
              LL(k));
  sb_printf(b, "  }\n}\n");
  /* q last: a kernel's last argument is its main output (gpuc inspect) */
  uint32_t args[3] = {c->tin[0], c->tout[1], c->tout[0]};
  return cg_launch(c, name, (uint64_t)rows * 32, 256, 0, 3, args);
}

/* Y [rows, N] = Xq [rows, K] Wq [N, K]^T, scaled and biased in the GEMM:
 * cuBLASLt's FP8 kernels take only this "TN" order, with K and N multiples
 * of 16 (the pass keeps other layers in float). The scale vectors ride in
 * stride_a / stride_b (plan.h). */
int lower_MatMulF8(LowerCtx *c) {
  if (need_fp8_arch(c)) return -1;
  const Tensor *x = c->in[0], *w = c->in[1];
  int64_t n = w->dims[0], k = w->dims[1], rows = k ? gpuc_numel(x) / k : 0;
  if (gpuc_numel(c->out[0]) == 0) return 0;
  if (k == 0) return lower_unsupported(c, "an FP8 GEMM with K = 0");
  if (k % 16 || n % 16)
    return lower_fail(c, "internal: FP8 GEMM with K %lld and N %lld, not multiples of 16", LL(k), LL(n));
  bool bias = c->nin > 4 && c->in[4];
  GpucDType ydt = c->out[0]->dt;
  PlanGemm g = {.a = c->tin[0], .b = c->tin[1], .c = bias ? c->tin[4] : UINT32_MAX, .y = c->tout[0],
                .trans_a = 0, .trans_b = 1, .m = rows, .n = n, .k = k, .batch = 1, .lda = k, .ldb = k,
                .ldc = 0, .ldy = n, .stride_a = c->tin[2], .stride_b = c->tin[3], .alpha = 1,
                .beta = bias ? 1 : 0, .dt = GPUC_DT_F8E4M3, .a_dt = GPUC_DT_F8E4M3, .b_dt = GPUC_DT_F8E4M3,
                .y_dt = ydt, .compute = PLAN_GEMM_COMPUTE_F8};
  return cg_gemm(c, &g);
}
