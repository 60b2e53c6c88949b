/* Squeeze-and-excitation in NHWC, and 1x1 NHWC convolutions as GEMMs.
 *
 * GlobalAveragePool with layout 1 (passes/layout_nhwc.c): X [N,H,W,C] ->
 * Y [N,1,1,C] without a Transpose. Two items kernels: the first sums
 * slices of the H*W pixels, each item one channel vector (V channels, one
 * 8-byte half or 16-byte f32 access; consecutive items take consecutive
 * vectors, so a warp reads runs along C) of one slice, into an f32 scratch
 * [N, S, C]; the second sums the S partials of each (n, c) in a fixed order
 * and divides by H*W. S is chosen so the first kernel has enough items to
 * fill the GPU while each still sums at least a few pixels: the NCHW pool's
 * one block per plane had N*C planes of H*W contiguous values; here the
 * H*W values of a channel are C apart.
 *
 * A 1x1 convolution (stride 1, no pads, one group) over NHWC data is the
 * GEMM Y [N*H*W, K] = X [N*H*W, C] W^T, W [K,1,1,C] read as [K, C]: one
 * cuBLASLt call with the bias row (and Relu or GELU) in its epilogue instead of a
 * cuDNN convolution. cuDNN took 0.26 ms on the H200 for MobileNetV3's SE
 * fully connected layers on [32,1,1,C] and for 1x1 convolutions of 40 ->
 * 120 channels at 28x28 (8 MB moved); the GEMM is at the memory bound.
 * A residual Z without an activation (passes/fuse_conv.c pw_residual:
 * MBConv's projection + shortcut) is cuBLASLt's C, added with the bias row
 * in the same epilogue (PLAN_GEMM_F_BIAS_C). Other activations
 * (ir/conv_act.h) follow in one elementwise kernel. */
#include "lower_util.h"
#include "conv_act.h"
#include <stdio.h>
#include <string.h>

#define LL(v) ((long long)(v))

int cg_gap_nhwc(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  if (x->rank != 4 || y->rank != 4 || (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16))
    return lower_unsupported(c, "an NHWC GlobalAveragePool of %s rank %d on the GPU", gpuc_dtype_name(x->dt), x->rank);
  int64_t N = x->dims[0], HW = x->dims[1] * x->dims[2], C = x->dims[3];
  if (N * C == 0) return 0;
  int V = C % 4 == 0 ? 4 : C % 2 == 0 ? 2 : 1;
  int64_t CV = C / V;
  /* slices: about 64K items in the first kernel, each at least 8 pixels */
  int64_t S = (65536 + N * CV - 1) / (N * CV);
  if (S > HW / 8) S = HW / 8;
  if (S < 1) S = 1;
  int64_t per = (HW + S - 1) / S; /* pixels of one slice (the last may have fewer) */
  S = (HW + per - 1) / per;
  int64_t pdims[3] = {N, S, C};
  uint32_t part = cg_scratch(c, GPUC_DT_F32, 3, pdims);
  const char *t = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  char k1[128];
  snprintf(k1, sizeof k1, "%s", cg_kernel_name(c));
  /* item (n, s, cv): pixels s*per .. min(HW, (s+1)*per) of channels cv*V.. */
  sb_printf(b,
            "/* NHWC GlobalAveragePool, partial sums: x [%lld,%lld,%lld] (N, H*W, C) -> part [%lld,%lld,%lld] f32 */\n"
            "extern \"C\" __global__ void %s(const %s* __restrict__ x, float* __restrict__ part) {\n"
            "  GRID_STRIDE(i, %lldLL) {\n"
            "    const i64 cv = i %% %lldLL, s = (i / %lldLL) %% %lldLL, n = i / (%lldLL * %lldLL);\n"
            "    const i64 p1 = (s + 1) * %lldLL < %lldLL ? (s + 1) * %lldLL : %lldLL;\n"
            "    float acc[%d];\n"
            "    for (int v = 0; v < %d; v++) acc[v] = 0.f;\n"
            "    for (i64 p = s * %lldLL; p < p1; p++) {\n"
            "      const Vec<%s, %d> q = *(const Vec<%s, %d>*)(x + (n * %lldLL + p) * %lldLL + cv * %d);\n"
            "      for (int v = 0; v < %d; v++) acc[v] += ldf(q.v[v]);\n"
            "    }\n"
            "    Vec<float, %d> o;\n"
            "    for (int v = 0; v < %d; v++) o.v[v] = acc[v];\n"
            "    *(Vec<float, %d>*)(part + (n * %lldLL + s) * %lldLL + cv * %d) = o;\n"
            "  }\n"
            "}\n",
            LL(N), LL(HW), LL(C), LL(N), LL(S), LL(C), k1, t, LL(N * S * CV), LL(CV), LL(CV), LL(S), LL(CV),
            LL(S), LL(per), LL(HW), LL(per), LL(HW), V, V, LL(per), t, V, t, V, LL(HW), LL(C), V, V, V, V, V,
            LL(S), LL(C), V);
  uint32_t a1[2] = {c->tin[0], part};
  if (cg_launch_items(c, k1, (uint64_t)(N * S * CV), 2, a1)) return -1;
  char k2[128], inv[64];
  snprintf(k2, sizeof k2, "%s", cg_kernel_name(c));
  cg_float_lit(inv, sizeof inv, 1.0 / (double)HW, "float");
  sb_printf(b,
            "/* NHWC GlobalAveragePool, the partials of each (n, c) summed in order, / H*W -> y [%lld,1,1,%lld] */\n"
            "extern \"C\" __global__ void %s(const float* __restrict__ part, %s* __restrict__ y) {\n"
            "  GRID_STRIDE(i, %lldLL) {\n"
            "    const i64 k = i %% %lldLL, n = i / %lldLL;\n"
            "    float acc = 0.f;\n"
            "    for (i64 s = 0; s < %lldLL; s++) acc += part[(n * %lldLL + s) * %lldLL + k];\n"
            "    y[i] = stf<%s>(acc * %s);\n"
            "  }\n"
            "}\n",
            LL(N), LL(C), k2, cg_ctype(y->dt), LL(N * C), LL(C), LL(C), LL(S), LL(S), LL(C), cg_ctype(y->dt), inv);
  uint32_t a2[2] = {part, c->tout[0]};
  return cg_launch_items(c, k2, (uint64_t)(N * C), 2, a2);
}

int cg_conv1x1_nhwc_gemm(LowerCtx *c, const int64_t *pb, const int64_t *pe, const int64_t *st, const int64_t *dil) {
  const Tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  const Tensor *bias = c->nin > 2 ? c->in[2] : NULL, *z = c->nin > 3 ? c->in[3] : NULL;
  if (x->rank != 4 || w->rank != 4 || w->dims[1] != 1 || w->dims[2] != 1 || gpuc_attr_i(c->n, "group", 1) != 1)
    return 1;
  /* a residual Z (passes/fuse_conv.c pw_residual) only without an
   * activation: cuBLASLt adds C (and the bias row) in its epilogue */
  if (z && (gpuc_attr_i(c->n, "activation", 0) != GPUC_FCONV_ACT_NONE || z->dt != x->dt || z->rank != 4 ||
            memcmp(z->dims, c->out[0]->dims, sizeof(int64_t) * 4)))
    return 1;
  if (x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16) return 1; /* f32 convs stay cuDNN's (NCHW, FMA math) */
  for (int i = 0; i < 2; i++)
    if (pb[i] || pe[i] || st[i] != 1 || dil[i] != 1) return 1;
  if (w->dt != x->dt || y->dt != x->dt || (bias && bias->dt != x->dt) || w->dims[3] != x->dims[3]) return 1;
  int64_t M = x->dims[0] * x->dims[1] * x->dims[2], K = x->dims[3], Nn = w->dims[0];
  if (M == 0 || Nn == 0) return 1;
  int64_t act = gpuc_attr_i(c->n, "activation", 0);
  /* cuBLASLt's Relu and GELU epilogues need the bias row; without a bias
   * they go to the kernel below. GELU_BIAS is the tanh form, within
   * half's rounding of the erf GELU (the rule of lower_MatMulBias) */
  uint32_t epi = !bias ? GPUC_GEMM_EPI_NONE
                 : act == GPUC_FCONV_ACT_RELU ? GPUC_GEMM_EPI_RELU
                 : act == GPUC_FCONV_ACT_GELU ? GPUC_GEMM_EPI_GELU
                                              : GPUC_GEMM_EPI_NONE;
  PlanGemm g = {.a = c->tin[0], .b = c->tin[1], .c = UINT32_MAX, .y = c->tout[0], .trans_b = 1, .m = M, .n = Nn,
                .k = K, .batch = 1, .lda = K, .ldb = K, .ldy = Nn, .alpha = 1, .dt = x->dt};
  if (z) { /* Y = X W^T + Z (+ bias row): MBConv's projection and its residual */
    g.c = c->tin[3];
    g.ldc = Nn;
    g.beta = 1;
    if (bias) g.reserved = c->tin[2];
    if (bias ? cg_gemm_flagged(c, &g, PLAN_GEMM_F_BIAS_C) : cg_gemm(c, &g)) return -1;
    cg_in_place(c, c->tin[3], g.y);
    return 0;
  }
  if (bias) { g.c = c->tin[2]; g.ldc = 0; g.trans_a = GPUC_GEMM_TRANS_A_PACK(0, epi); }
  if (cg_gemm(c, &g)) return -1;
  if (act == GPUC_FCONV_ACT_NONE || epi != GPUC_GEMM_EPI_NONE) return 0;
  char expr[256];
  if (cg_conv_act_expr(expr, sizeof expr, c->n, false, "v")) return lower_fail(c, "internal: activation %lld", LL(act));
  const Tensor *ins[1] = {y};
  uint32_t tins[1] = {c->tout[0]};
  LowerCtx e = *c;
  e.in = ins;
  e.tin = tins;
  e.nin = 1;
  static const int which[1] = {0};
  int rc = cg_elementwise(&e, which, 1, "float", "const float v = x0;", expr);
  c->nkernels_emitted = e.nkernels_emitted;
  return rc;
}
