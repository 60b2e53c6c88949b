/* Depthwise 2-D convolution over NHWC data (FusedConv layout 1 with one
 * input and one output channel per group) as one generated kernel, with
 * the bias, the residual Z and the activation (ir/conv_act.h) applied
 * before the store.
 *
 * Why: cuDNN's NHWC depthwise kernels took 1.2 ms for ConvNeXt-tiny's
 * 7x7 over [32,56,56,96] fp16 on the H200, a step that moves 38.5 MB
 * (about 10 us at the H200's DRAM bandwidth), and 0.25-0.49 ms for
 * MobileNetV3's. The convolution does R*S multiply-adds per output element
 * and reads each input element about R*S times, almost all from L1/L2:
 * it is bound by memory traffic, not math, when written so that
 *   - a thread owns V consecutive channels (one 8-byte (half) or 16-byte
 *     (f32) vector access) of TW consecutive output pixels of one row:
 *     consecutive threads take consecutive channel vectors, so a warp's
 *     accesses are coalesced runs along C;
 *   - for each of the R kernel rows it reads the (TW-1)*stride + S input
 *     pixels that row needs once, each feeding up to S accumulators (a
 *     sliding window in registers, unrolled: every index is a constant);
 *   - weights are re-laid-out at compile time to f32 [R,S,C] (a plan
 *     weight of their own), so a tap's V weights are one vector load; the
 *     bias becomes f32 [C]; sums are f32 (as the reference's).
 * Each item (n, oh, pixel block, channel vector) is independent: the kernel
 * is one GRID_STRIDE loop, block-size free for -O3.
 *
 * Applies to f32/f16/bf16, any kernel size up to MAX_TAP per dim, any
 * stride up to 4, dilation 1, any (also asymmetric) zero padding. Others
 * return 1 and go to cuDNN (codegen/lower_conv.c). */
#include "lower_util.h"
#include "conv_act.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TAP = 9, MAX_STRIDE = 4, MAX_TW = 8 };

/* The activation of FusedConv node n applied to float variable `v`, as a
 * float expression (the formulas of ir/conv_act.h). */
int cg_conv_act_expr(char *buf, size_t cap, const Node *n, bool input, const char *v) {
  int act = (int)gpuc_attr_i(n, input ? "in_activation" : "activation", 0);
  char lo[64], hi[64];
  cg_float_lit(lo, sizeof lo, gpuc_attr_f(n, input ? "in_act_min" : "act_min", -INFINITY), "float");
  cg_float_lit(hi, sizeof hi, gpuc_attr_f(n, input ? "in_act_max" : "act_max", INFINITY), "float");
  int w;
  switch (act) {
  case GPUC_FCONV_ACT_NONE: w = snprintf(buf, cap, "%s", v); break;
  case GPUC_FCONV_ACT_RELU: w = snprintf(buf, cap, "(%s < 0.f ? 0.f : %s)", v, v); break;
  case GPUC_FCONV_ACT_CLIP: w = snprintf(buf, cap, "(%s < %s ? %s : (%s > %s ? %s : %s))", v, lo, lo, v, hi, hi, v); break;
  case GPUC_FCONV_ACT_HARDSWISH: w = snprintf(buf, cap, "(%s * fmaxf(0.f, fminf(1.f, %s / 6.f + 0.5f)))", v, v); break;
  case GPUC_FCONV_ACT_SILU: w = snprintf(buf, cap, "(%s / (1.f + __expf(-%s)))", v, v); break;
  case GPUC_FCONV_ACT_GELU: w = snprintf(buf, cap, "(0.5f * %s * (1.f + erff(%s * 0.7071067811865476f)))", v, v); break;
  case GPUC_FCONV_ACT_MISH:
    w = snprintf(buf, cap, "(%s * tanhf(%s > 0.f ? %s + log1pf(__expf(-%s)) : log1pf(__expf(%s))))", v, v, v, v, v);
    break;
  default: return -1;
  }
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

/* Depthwise: groups == C == K and W [K,R,S,1]. */
static bool depthwise_nhwc(const LowerCtx *c) {
  const Tensor *x = c->in[0], *w = c->in[1];
  int64_t groups = gpuc_attr_i(c->n, "group", 1);
  return x->rank == 4 && w->rank == 4 && groups > 1 && groups == x->dims[3] && w->dims[0] == groups &&
         w->dims[3] == 1 && c->in[1]->data;
}

/* Output pixels per thread: near MAX_TW, dividing OW evenly where it can
 * (56 -> 8, 28 -> 7, 14 -> 7, 7 -> 7), so few lanes idle at a row's end. */
static int pixels_per_thread(int64_t ow) {
  int64_t blocks = (ow + MAX_TW - 1) / MAX_TW;
  return (int)((ow + blocks - 1) / blocks);
}

int cg_dwconv_nhwc(LowerCtx *c, const int64_t *pb, const int64_t *st, const int64_t *dil) {
  const Tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  const Tensor *bias = c->nin > 2 ? c->in[2] : NULL, *z = c->nin > 3 ? c->in[3] : NULL;
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16) return 1;
  if (!depthwise_nhwc(c) || y->dt != x->dt || (z && z->dt != x->dt)) return 1;
  if (bias && (!bias->data || bias->rank != 1 || bias->dims[0] != x->dims[3])) return 1;
  int64_t N = x->dims[0], H = x->dims[1], W = x->dims[2], C = x->dims[3], R = w->dims[1], S = w->dims[2];
  int64_t OH = y->dims[1], OW = y->dims[2];
  if (R < 1 || S < 1 || R > MAX_TAP || S > MAX_TAP || dil[0] != 1 || dil[1] != 1) return 1;
  if (st[0] < 1 || st[1] < 1 || st[0] > MAX_STRIDE || st[1] > MAX_STRIDE) return 1;
  if (gpuc_numel(y) == 0) return 1;
  char act[256], in_act[256];
  if (cg_conv_act_expr(act, sizeof act, c->n, false, "v") || cg_conv_act_expr(in_act, sizeof in_act, c->n, true, "v"))
    return 1;
  /* channels per thread: one 8-byte (half) or 16-byte (f32) vector */
  int V = C % 4 == 0 ? 4 : C % 2 == 0 ? 2 : 1;
  int TW = pixels_per_thread(OW);
  int64_t CV = C / V, OWB = (OW + TW - 1) / TW, items = N * OH * OWB * CV;
  if (items > INT32_MAX || gpuc_numel(x) > INT32_MAX || gpuc_numel(y) > INT32_MAX) return 1;
  /* weights [C,R,S,1] -> f32 [R,S,C]; bias -> f32 [C] (zeros without one) */
  Tensor wt = {.dt = GPUC_DT_F32, .rank = 3, .dims = {R, S, C}};
  Tensor bt = {.dt = GPUC_DT_F32, .rank = 1, .dims = {C}};
  wt.data = malloc(gpuc_tensor_bytes(&wt));
  bt.data = calloc((size_t)C, sizeof(float));
  if (!wt.data || !bt.data) { free(wt.data); free(bt.data); return lower_fail(c, "out of memory"); }
  float *wf = wt.data, *bf = bt.data;
  for (int64_t k = 0; k < C; k++) {
    for (int64_t r = 0; r < R; r++)
      for (int64_t s = 0; s < S; s++) wf[(r * S + s) * C + k] = (float)gpuc_get_f64(w, (k * R + r) * S + s);
    if (bias) bf[k] = (float)gpuc_get_f64(bias, k);
  }
  char wname[160], bname[160];
  snprintf(wname, sizeof wname, "%s.dw_rsc", c->n->name);
  snprintf(bname, sizeof bname, "%s.dw_bias", c->n->name);
  uint32_t tw = cg_weights(c, wname, &wt), tb = cg_weights(c, bname, &bt);
  free(wt.data);
  free(bt.data);
  if (tw == UINT32_MAX || tb == UINT32_MAX) return lower_fail(c, "out of memory");

  const char *t = cg_ctype(x->dt), *name = cg_kernel_name(c);
  int64_t span = (TW - 1) * st[1] + S; /* input pixels one kernel row needs */
  StrBuf *b = cg_src(c);
  sb_printf(b,
            "/* depthwise %lldx%lld stride %lldx%lld NHWC: x [%lld,%lld,%lld,%lld] -> y [%lld,%lld,%lld,%lld];\n"
            " * a thread: %d channels x %d output pixels of one row */\n"
            "extern \"C\" __global__ void %s(const %s* __restrict__ x, const float* __restrict__ w,\n"
            "    const float* __restrict__ bias, %s%s%s %s* %sy) {\n"
            "  GRID_STRIDE(i, %lldLL) {\n"
            "    unsigned u = (unsigned)i;\n"
            "    const int c0 = (int)(u %% %lldu) * %d; u /= %lldu;\n"
            "    const int ow0 = (int)(u %% %lldu) * %d; u /= %lldu;\n"
            "    const int oh = (int)(u %% %lldu), n = (int)(u / %lldu);\n"
            "    float acc[%d][%d];\n"
            "    { const Vec<float, %d> bv = *(const Vec<float, %d>*)(bias + c0);\n"
            "#pragma unroll\n"
            "      for (int t = 0; t < %d; t++)\n"
            "#pragma unroll\n"
            "        for (int v = 0; v < %d; v++) acc[t][v] = bv.v[v]; }\n"
            "#pragma unroll\n"
            "    for (int r = 0; r < %lld; r++) {\n"
            "      const int ih = oh * %lld - %lld + r;\n"
            "      if (ih < 0 || ih >= %lld) continue;\n"
            "      const %s* xr = x + ((n * %lld + ih) * %lld) * %lld + c0;\n"
            "      float wr[%lld][%d];\n"
            "#pragma unroll\n"
            "      for (int s = 0; s < %lld; s++) {\n"
            "        const Vec<float, %d> wv = *(const Vec<float, %d>*)(w + (r * %lld + s) * %lld + c0);\n"
            "#pragma unroll\n"
            "        for (int v = 0; v < %d; v++) wr[s][v] = wv.v[v];\n"
            "      }\n"
            "#pragma unroll\n"
            "      for (int j = 0; j < %lld; j++) {\n"
            "        const int iw = ow0 * %lld - %lld + j;\n"
            "        float xv[%d];\n"
            "        if (iw >= 0 && iw < %lld) {\n"
            "          const Vec<%s, %d> q = *(const Vec<%s, %d>*)(xr + iw * %lld);\n"
            "#pragma unroll\n"
            "          for (int u = 0; u < %d; u++) { const float v = ldf(q.v[u]); xv[u] = %s; }\n"
            "        } else {\n"
            "#pragma unroll\n"
            "          for (int v = 0; v < %d; v++) xv[v] = 0.f;\n"
            "        }\n"
            "#pragma unroll\n"
            "        for (int t = 0; t < %d; t++) {\n"
            "          const int s = j - t * %lld;\n"
            "          if (s >= 0 && s < %lld) {\n"
            "#pragma unroll\n"
            "            for (int v = 0; v < %d; v++) acc[t][v] = fmaf(wr[s][v], xv[v], acc[t][v]);\n"
            "          }\n"
            "        }\n"
            "      }\n"
            "    }\n"
            "#pragma unroll\n"
            "    for (int t = 0; t < %d; t++) {\n"
            "      const int ow = ow0 + t;\n"
            "      if (ow >= %lld) break;\n"
            "      const i64 o = ((i64)(n * %lld + oh) * %lld + ow) * %lld + c0;\n",
            (long long)R, (long long)S, (long long)st[0], (long long)st[1], (long long)N, (long long)H,
            (long long)W, (long long)C, (long long)N, (long long)OH, (long long)OW, (long long)C, V, TW, name, t,
            z ? "const " : "", z ? t : "", z ? "* z," : "", t, z ? "" : "__restrict__ ", (long long)items, (long long)CV, V,
            (long long)CV, (long long)OWB, TW, (long long)OWB, (long long)OH, (long long)OH, TW, V, V, V, TW, V,
            (long long)R, (long long)st[0], (long long)pb[0], (long long)H, t, (long long)H, (long long)W,
            (long long)C, (long long)S, V, (long long)S, V, V, (long long)S, (long long)C, V, (long long)span,
            (long long)st[1], (long long)pb[1], V, (long long)W, t, V, t, V, (long long)C, V, in_act, V, TW,
            (long long)st[1], (long long)S, V, TW, (long long)OW, (long long)OH, (long long)OW, (long long)C);
  if (z)
    sb_printf(b, "      const Vec<%s, %d> zv = *(const Vec<%s, %d>*)(z + o);\n", t, V, t, V);
  sb_printf(b,
            "      Vec<%s, %d> out;\n"
            "#pragma unroll\n"
            "      for (int k = 0; k < %d; k++) {\n"
            "        const float v = acc[t][k]%s;\n"
            "        out.v[k] = stf<%s>(%s);\n"
            "      }\n"
            "      *(Vec<%s, %d>*)(y + o) = out;\n"
            "    }\n"
            "  }\n"
            "}\n",
            t, V, V, z ? " + ldf(zv.v[k])" : "", t, act, t, V);
  uint32_t args[5] = {c->tin[0], tw, tb}, nargs = 3;
  if (z) args[nargs++] = c->tin[3];
  args[nargs++] = c->tout[0];
  if (cg_launch_items(c, name, (uint64_t)items, (int)nargs, args)) return -1;
  /* each output element is written after its own Z element is read, by the
   * same thread: y may take a dying residual's bytes */
  if (z) cg_in_place(c, c->tin[3], c->tout[0]);
  return 0;
}
