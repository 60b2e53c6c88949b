/* Grouped 2-D convolution over NHWC data with few channels a group
 * (FusedConv layout 1: X, Z, Y [N,H,W,C|K], W [K,R,S,Cg], G groups of Cg
 * input and Kg output channels) as one generated kernel, with the bias,
 * the residual Z and the activations fused as in the depthwise kernels
 * (codegen/lower_dwconv.c; the same activation expressions).
 *
 * Why: cuDNN's NHWC grouped convolutions with groups of 24 channels ran
 * RegNetX-1.6GF's 3x3 steps at 5-12 TFLOP/s on the H200 at batch 32
 * (block1-0's stride-2 step, [32,112,112,72] -> [32,56,56,72], 3 groups:
 * 3.1 GFLOP in 0.63 ms), the top steps of the one zoo model left slower
 * than torch.compile at batch 32. Per output the step does Cg*R*S
 * multiply-adds (216 here), too few for tensor cores to pay off through
 * cuDNN's grouped kernels, enough to keep CUDA cores busy when each
 * loaded value feeds several of them.
 *
 * The kernel: a thread owns V consecutive output channels (one group's)
 * of TW consecutive output pixels of one row; threads of consecutive
 * channel vectors share a pixel, so their loads of the group's inputs are
 * L1 broadcasts. For each kernel row and each XV-channel slice of the
 * group (one 16-byte vector) it loads the slice at every input pixel the
 * row's TW outputs need (the span (TW-1)*sw + (S-1)*dw + 1) into
 * registers, once; then each weight vector (f32 [R,S,Cg,K], V output
 * channels, re-laid-out at compile time) feeds TW outputs: per multiply-
 * add 1/TW weight loads and 1/V input values. f32 sums as the reference's;
 * bias, residual, activation, one store of V channels a pixel. Every
 * index is a compile-time constant after unrolling.
 *
 * Applies to f32/f16/bf16, 2 <= Cg <= 32 with Cg a multiple of the
 * 16-byte vector (8 half, 4 f32), kernels up to 7x7, strides and
 * dilations up to 2, any zero padding, int32 offsets. Others return 1 and
 * stay on cuDNN. GPUC_NO_GROUPED_ROWS=1 keeps every grouped step on
 * cuDNN (A/B). tests/dwconv_host_test.py runs the kernel's text on the
 * host against numpy. */
#include "lower_util.h"
#include "conv_act.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GC_MAX_CG = 32, GC_MAX_TAP = 7, GC_MAX_STEP = 2, GC_MAX_TW = 4 };

#define LL(x) ((long long)(x))

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int cg_gconv_nhwc(LowerCtx *c, const int64_t *pb, const int64_t *st, const int64_t *dil) {
  const Tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  const Tensor *bias = c->nin > 2 ? c->in[2] : NULL, *z = c->nin > 3 ? c->in[3] : NULL;
  const char *off = getenv("GPUC_NO_GROUPED_ROWS");
  if (off && *off && strcmp(off, "0")) return 1;
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16) return 1;
  if (x->rank != 4 || w->rank != 4 || y->rank != 4 || !w->data || y->dt != x->dt || (z && z->dt != x->dt)) return 1;
  int64_t G = gpuc_attr_i(c->n, "group", 1), C = x->dims[3], K = y->dims[3];
  if (G < 2 || C % G || K % G || w->dims[0] != K) return 1;
  int64_t Cg = C / G, Kg = K / G, R = w->dims[1], S = w->dims[2];
  int XV = 16 / (int)gpuc_dtype_size(x->dt); /* input channels a 16-byte vector */
  if (w->dims[3] != Cg || Cg < 2 || Cg > GC_MAX_CG || Cg % XV) return 1;
  if (bias && (!bias->data || bias->rank != 1 || bias->dims[0] != K)) return 1;
  if (R < 1 || S < 1 || R > GC_MAX_TAP || S > GC_MAX_TAP) return 1;
  for (int i = 0; i < 2; i++)
    if (st[i] < 1 || st[i] > GC_MAX_STEP || dil[i] < 1 || dil[i] > GC_MAX_STEP) return 1;
  if (gpuc_numel(y) == 0 || gpuc_numel(x) > INT32_MAX || gpuc_numel(y) > INT32_MAX) return 1;
  char act[256], in_act[256], in_round[320];
  if (cg_conv_act_expr(act, sizeof act, c->n, false, "v") || cg_conv_act_expr(in_act, sizeof in_act, c->n, true, "v"))
    return 1;
  const char *t = cg_ctype(x->dt);
  /* the input activation rounded to X's type, as the reference rounds it */
  if (strcmp(in_act, "v")) snprintf(in_round, sizeof in_round, "ldf(stf<%s>(%s))", t, in_act);
  else snprintf(in_round, sizeof in_round, "v");
  int64_t N = x->dims[0], H = x->dims[1], W = x->dims[2], OH = y->dims[1], OW = y->dims[2];
  int V = Kg % 4 == 0 ? 4 : Kg % 2 == 0 ? 2 : 1; /* output channels a thread */
  int64_t owb0 = cdiv(OW, GC_MAX_TW);
  int TW = (int)cdiv(OW, owb0); /* pixels a thread, dividing OW evenly where it can */
  int64_t span = (TW - 1) * st[1] + (S - 1) * dil[1] + 1, KV = K / V, OWB = cdiv(OW, TW);
  int64_t items = N * OH * OWB * KV;
  if (items > INT32_MAX) return 1;

  /* weights [K,R,S,Cg] -> f32 [R,S,Cg,K]; bias -> f32 [K] (zeros without one) */
  Tensor wt = {.dt = GPUC_DT_F32, .rank = 4, .dims = {R, S, Cg, K}};
  Tensor bt = {.dt = GPUC_DT_F32, .rank = 1, .dims = {K}};
  wt.data = malloc(gpuc_tensor_bytes(&wt));
  bt.data = calloc((size_t)K, sizeof(float));
  if (!wt.data || !bt.data) { free(wt.data); free(bt.data); return lower_fail(c, "out of memory"); }
  float *wf = wt.data, *bf = bt.data;
  for (int64_t k = 0; k < K; k++) {
    for (int64_t r = 0; r < R; r++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t e = 0; e < Cg; e++)
          wf[((r * S + s) * Cg + e) * K + k] = (float)gpuc_get_f64(w, ((k * R + r) * S + s) * Cg + e);
    if (bias) bf[k] = (float)gpuc_get_f64(bias, k);
  }
  uint32_t tw, tb;
  if (cg_conv_weights(c, &wt, "gc_rsck", &bt, "gc_bias", &tw, &tb)) return -1;

  const char *name = cg_kernel_name(c);
  StrBuf *b = cg_src(c);
  sb_printf(b,
            "/* grouped %lldx%lld stride %lldx%lld dilation %lldx%lld NHWC: x [%lld,%lld,%lld,%lld] -> y "
            "[%lld,%lld,%lld,%lld],\n"
            " * %lld groups of %lld -> %lld channels; a thread: %d output channels x %d output pixels of one row */\n"
            "extern \"C\" __global__ void %s(const %s* __restrict__ x, const float* __restrict__ w,\n"
            "    const float* __restrict__ bias, %s%s%s %s* %sy) {\n"
            "  GRID_STRIDE(i, %lldLL) {\n"
            "    unsigned u = (unsigned)i;\n"
            "    const int k0 = (int)(u %% %lldu) * %d; u /= %lldu;\n"
            "    const int ow0 = (int)(u %% %lldu) * %d; u /= %lldu;\n"
            "    const int oh = (int)(u %% %lldu), n = (int)(u / %lldu);\n"
            "    const int cin0 = (k0 / %lld) * %lld; /* the group's first input channel */\n"
            "    float acc[%d][%d];\n"
            "    { const Vec<float, %d> bv = *(const Vec<float, %d>*)(bias + k0);\n"
            "#pragma unroll\n"
            "      for (int t = 0; t < %d; t++)\n"
            "#pragma unroll\n"
            "        for (int v = 0; v < %d; v++) acc[t][v] = bv.v[v]; }\n"
            "#pragma unroll\n"
            "    for (int r = 0; r < %lld; r++) {\n"
            "      const int ih = oh * %lld - %lld + r * %lld;\n"
            "      if (ih < 0 || ih >= %lld) continue;\n"
            "      const %s* xr = x + ((n * %lld + ih) * %lld) * %lld + cin0;\n"
            "#pragma unroll\n"
            "      for (int cc = 0; cc < %lld; cc += %d) {\n"
            "        float xv[%lld][%d]; /* the slice at every input pixel of the span */\n"
            "#pragma unroll\n"
            "        for (int j = 0; j < %lld; j++) {\n"
            "          const int iw = ow0 * %lld - %lld + j;\n"
            "          if (iw >= 0 && iw < %lld) {\n"
            "            const Vec<%s, %d> q = *(const Vec<%s, %d>*)(xr + iw * %lld + cc);\n"
            "#pragma unroll\n"
            "            for (int e = 0; e < %d; e++) { const float v = ldf(q.v[e]); xv[j][e] = %s; }\n"
            "          } else {\n"
            "#pragma unroll\n"
            "            for (int e = 0; e < %d; e++) xv[j][e] = 0.f;\n"
            "          }\n"
            "        }\n"
            "#pragma unroll\n"
            "        for (int s = 0; s < %lld; s++)\n"
            "#pragma unroll\n"
            "          for (int e = 0; e < %d; e++) {\n"
            "            const Vec<float, %d> wv = *(const Vec<float, %d>*)(w + ((r * %lld + s) * %lld + cc + e) * %lld + k0);\n"
            "#pragma unroll\n"
            "            for (int t = 0; t < %d; t++)\n"
            "#pragma unroll\n"
            "              for (int v = 0; v < %d; v++) acc[t][v] = fmaf(wv.v[v], xv[t * %lld + s * %lld][e], acc[t][v]);\n"
            "          }\n"
            "      }\n"
            "    }\n"
            "#pragma unroll\n"
            "    for (int t = 0; t < %d; t++) {\n"
            "      const int ow = ow0 + t;\n"
            "      if (ow >= %lld) break;\n"
            "      const int o = ((n * %lld + oh) * %lld + ow) * %lld + k0;\n",
            LL(R), LL(S), LL(st[0]), LL(st[1]), LL(dil[0]), LL(dil[1]), LL(N), LL(H), LL(W), LL(C), LL(N), LL(OH),
            LL(OW), LL(K), LL(G), LL(Cg), LL(Kg), V, TW, name, t, z ? "const " : "", z ? t : "", z ? "* z," : "", t,
            z ? "" : "__restrict__ ", LL(items), LL(KV), V, LL(KV), LL(OWB), TW, LL(OWB), LL(OH), LL(OH), LL(Kg), LL(Cg),
            TW, V, V, V, TW, V, LL(R), LL(st[0]), LL(pb[0]), LL(dil[0]), LL(H), t, LL(H), LL(W), LL(C), LL(Cg), XV,
            LL(span), XV, LL(span), LL(st[1]), LL(pb[1]), LL(W), t, XV, t, XV, LL(C), XV, in_round, XV, LL(S), XV, V,
            V, LL(S), LL(Cg), LL(K), TW, V, LL(st[1]), LL(dil[1]), TW, LL(OW), LL(OH), LL(OW), LL(K));
  cg_conv_rows_store(b, t, V, z, act);
  uint32_t args[5];
  int nargs = cg_conv_args(c, tw, tb, z, args);
  if (cg_launch_items(c, name, (uint64_t)items, nargs, args)) return -1;
  /* each output element is written after its own Z element is read, by the
   * same thread: y may take a dying residual's bytes */
  if (z) cg_in_place(c, c->tin[3], c->tout[0]);
  return 0;
}
