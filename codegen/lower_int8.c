/* The --int8 ops on the GPU (rule: ir/quant_int8.h, the same bits as the
 * reference kernels of runtime/ref/ref_int8.c):
 *   QuantizeRows    one warp per row: absmax by warp shuffles, then the row
 *                   as int8 (16-byte loads where the row allows; rows of
 *                   up to 16 loads a lane held in registers, read once)
 *   MatMulInt8      cuBLASLt int8 x int8 -> int32 (IMMA), in the "TN" order
 *                   it needs (plan.h, PlanGemm); gpuc's own int8 tensor-core
 *                   GEMM (lower_int8_gemm.c) where it was measured faster:
 *                   wide GEMMs with their DequantizeRows group as epilogue
 *   DequantizeRows  an elementwise expression: alone one kernel, else a
 *                   member of the fusion group of what follows (bias add,
 *                   GELU, residual) */
#include "int8_gemm.h"
#include "quant_int8.h"
#include <stdio.h>

#define LL(x) ((long long)(x))

/* the warp's absmax m of its row, then the row's scale s[row] and the
 * multiplier inv (QuantizeRows' rule, ir/quant_int8.h) */
static const char ROW_SCALE[] = "    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));\n"
                                "    const float inv = m > 0.0f ? 127.0f / m : 0.0f;\n"
                                "    if (lane == 0) s[row] = m > 0.0f ? m / 127.0f : 1.0f;\n";

/* opens a loop over this lane's vectors of the row, each as const T* e at
 * element j: from the registers v[] (regs) or loaded from xr; the caller
 * closes it */
static void qrow_vectors(StrBuf *b, bool regs, int64_t per_lane, int vec, int64_t k, const char *t) {
  if (regs)
    sb_printf(b,
              "#pragma unroll\n"
              "    for (int r = 0; r < %lld; r++) {\n"
              "      const int j = (r * 32 + lane) * %d;\n"
              "      if (j >= %lld) break;\n"
              "      const %s* e = reinterpret_cast<const %s*>(&v[r]);\n",
              LL(per_lane), vec, LL(k), t, t);
  else
    sb_printf(b,
              "    for (int j = lane * %d; j < %lld; j += %d) {\n"
              "      const uint4 v = *reinterpret_cast<const uint4*>(xr + j);\n"
              "      const %s* e = reinterpret_cast<const %s*>(&v);\n",
              vec, LL(k), 32 * vec, t, t);
}

int lower_QuantizeRows(LowerCtx *c) {
  const Tensor *x = c->in[0];
  int64_t k = x->dims[x->rank - 1], n = gpuc_numel(x);
  if (n == 0) return 0;
  if (k <= 0 || k > INT32_MAX) return lower_unsupported(c, "rows of %lld elements", LL(k));
  int64_t rows = n / k;
  const char *t = cg_ctype(x->dt);
  /* 16 bytes of X a load when rows start on 16-byte boundaries */
  int vec = (int)(16 / gpuc_dtype_size(x->dt));
  if (k % vec) vec = 1;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b,
            "extern \"C\" __global__ void %s(const %s* __restrict__ x, float* __restrict__ s, "
            "signed char* __restrict__ q) {\n"
            "  const int lane = threadIdx.x & 31;\n"
            "  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;\n"
            "  for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < %lldLL; row += warps) {\n"
            "    const %s* xr = x + row * %lldLL;\n"
            "    signed char* qr = q + row * %lldLL;\n"
            "    float m = 0.0f;\n",
            name, t, LL(rows), t, LL(k), LL(k));
  /* rows of at most 16 loads a lane (BERT's 3072 halves: 12) stay in
   * registers: X read once, not again for the quantize */
  int64_t per_lane = vec > 1 ? (k + 32 * vec - 1) / (32 * vec) : 0;
  bool regs = vec > 1 && per_lane <= 16;
  if (vec > 1) {
    if (regs)
      sb_printf(b,
                "    uint4 v[%lld];\n"
                "#pragma unroll\n"
                "    for (int r = 0; r < %lld; r++) {\n"
                "      const int j = (r * 32 + lane) * %d;\n"
                "      v[r] = j < %lld ? *reinterpret_cast<const uint4*>(xr + j) : make_uint4(0u, 0u, 0u, 0u);\n"
                "    }\n",
                LL(per_lane), LL(per_lane), vec, LL(k));
    qrow_vectors(b, regs, per_lane, vec, k, t);
    sb_printf(b, "      for (int u = 0; u < %d; u++) m = fmaxf(m, fabsf(ldf(e[u])));\n    }\n", vec);
    sb_printf(b, "%s", ROW_SCALE);
    qrow_vectors(b, regs, per_lane, vec, k, t);
    const char *qv = vec == 8 ? "uint2" : vec == 4 ? "unsigned int" : "unsigned short";
    sb_printf(b,
              "      union { %s w; signed char c[%d]; } o;\n"
              "      for (int u = 0; u < %d; u++)\n"
              "        o.c[u] = (signed char)fminf(fmaxf(rintf(__fmul_rn(ldf(e[u]), inv)), -127.0f), 127.0f);\n"
              "      *reinterpret_cast<%s*>(qr + j) = o.w;\n"
              "    }\n",
              qv, vec, vec, qv);
  } else {
    sb_printf(b, "    for (i64 j = lane; j < %lldLL; j += 32) m = fmaxf(m, fabsf(ldf(xr[j])));\n", LL(k));
    sb_printf(b, "%s", ROW_SCALE);
    sb_printf(b,
              "    for (i64 j = lane; j < %lldLL; j += 32)\n"
              "      qr[j] = (signed char)fminf(fmaxf(rintf(__fmul_rn(ldf(xr[j]), inv)), -127.0f), 127.0f);\n",
              LL(k));
  }
  sb_printf(b, "  }\n}\n");
  /* q last: a kernel's last argument is its main output (gpuc inspect) */
  uint32_t args[3] = {c->tin[0], c->tout[1], c->tout[0]};
  return cg_launch(c, name, (uint64_t)rows * 32, 256, 0, 3, args);
}

/* Acc [rows, N] = Xq [rows, K] Wq[N, K]^T: cuBLASLt's IMMA kernels take
 * only this order (its A = our Wq transposed, its B = our Xq), with K and
 * N multiples of 4 (the pass keeps other layers in float). */
int lower_MatMulInt8(LowerCtx *c) {
  const Tensor *x = c->in[0], *w = c->in[1];
  int64_t n = w->dims[0], k = w->dims[1], rows = k ? gpuc_numel(x) / k : 0;
  if (gpuc_numel(c->out[0]) == 0) return 0;
  if (k == 0) return lower_unsupported(c, "an int8 GEMM with K = 0");
  if (cg_int8_gemm_own(c->opt, rows, n, k, false)) {
    snprintf(c->kname, sizeof c->kname, "k%d_int8_gemm", c->node_index); /* inspect names it int8 */
    return cg_int8_gemm(c, c->tin[0], c->tin[1], rows, n, k, NULL, c->tout[0]);
  }
  if (k % 4 || n % 4)
    return lower_fail(c, "internal: int8 GEMM with K %lld and N %lld, not multiples of 4", LL(k), LL(n));
  PlanGemm g = {.a = c->tin[0], .b = c->tin[1], .c = UINT32_MAX, .y = c->tout[0], .trans_a = 0, .trans_b = 1,
                .m = rows, .n = n, .k = k, .batch = 1, .lda = k, .ldb = k, .ldy = n, .alpha = 1, .beta = 0,
                .dt = GPUC_DT_I8, .a_dt = GPUC_DT_I8, .b_dt = GPUC_DT_I8, .y_dt = GPUC_DT_I32,
                .compute = PLAN_GEMM_COMPUTE_I32};
  return cg_gemm(c, &g);
}

/* Each step rounded on its own (__fmul_rn/__fadd_rn are never contracted
 * into an FMA), as ref_DequantizeRows does. */
int lower_DequantizeRows(LowerCtx *c) {
  const int which[4] = {0, 1, 2, 3};
  bool bias = c->nin > 3 && c->in[3];
  return cg_elementwise(c, which, bias ? 4 : 3, "float", NULL,
                        bias ? "__fadd_rn(__fmul_rn(__fmul_rn(x0, x1), x2), x3)" : "__fmul_rn(__fmul_rn(x0, x1), x2)");
}
