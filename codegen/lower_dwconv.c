/* Depthwise 2-D convolution over NHWC data (FusedConv layout 1 with one
 * input and one output channel per group) as one generated kernel, with
 * the bias, the residual Z and the activations (ir/conv_act.h: the input
 * activation applied to X as it is loaded, the output one before the
 * store) fused.
 *
 * Why: cuDNN's NHWC depthwise kernels took 1.2 ms for ConvNeXt-tiny's
 * 7x7 over [32,56,56,96] fp16 on the H200, a step that moves 38.5 MB
 * (about 10 us at the H200's DRAM bandwidth). The convolution does R*S
 * multiply-adds per output element and reads each input element about
 * R*S times: it is bound by memory traffic, not math, when each input
 * vector comes from DRAM/L2 once and from on-chip memory after that.
 *
 * Three kernels (C a multiple of one 16-byte vector, 8 half channels or
 * 4 f32, for the tiled and stream ones; the row kernel otherwise), chosen
 * by the H200's in-model step times (tests/gpu/dwconv_ab.sh, b32 -O2
 * --fp16, 2026-12-03; floor = bytes / ~4 TB/s; old = the choice before
 * the stream kernel, GPUC_DWCONV_PREV=1):
 *   - tiled, where the input activation is SiLU, GELU or Mish: coatnet_0's
 *     [32,56,56,384] 3x3 step (154.2 MB, floor 0.039 ms) 0.130 ms tiled
 *     (1.19 TB/s), 0.150 stream; efficientnet_b0's 17 steps 0.683 ms
 *     tiled, 0.778 stream (it won 5x5 [32,14,14,672], 0.047 -> 0.037 ms,
 *     and lost [32,112,112,96] s2, 0.128 -> 0.173);
 *   - stream, at batch >= 8, where the input activation is HardSwish or
 *     the stride is 2 into a map of 56x56 or more: mobilenet_v3_large's
 *     HardSwish steps 14-29% faster than the row kernel (which divides by
 *     6 at every read), its 7x7 ones even ([32,14,14,200] 0.0161 -> 0.0115
 *     ms); mobilenet_v2's [32,112,112,96] s2 step (96.3 MB, floor 0.024)
 *     0.070 -> 0.063 ms (1.38 -> 1.53 TB/s), mobilenet_v3's 0.033 ->
 *     0.028 (1.93 -> 2.29 TB/s); dw steps of mobilenet_v3_large 0.304 ->
 *     0.270 ms, of mobilenet_v2 0.296 -> 0.288 ms;
 *   - rows elsewhere: mobilenet_v2's stride-1 Clip steps ([32,56,56,144],
 *     57.8 MB, floor 0.014: 0.032 ms rows at 1.8 TB/s, 0.040 stream; 14x14
 *     and 7x7 maps 25-35% slower in the stream kernel) and
 *     convnextv2_atto's 7x7 steps (rows 0.186 ms for 12, stream 0.320).
 * None is near the DRAM floor, and the stream kernel showed why: it
 * plans 50-110 KB of loads in flight an SM (two halo buffers a CTA,
 * cp.async) yet ran no faster where the tiled kernel has ~20 KB, so the
 * steps are bound by instructions, not by load latency: SiLU in and out
 * is two precise f32 divisions and two MUFU ops an element (coatnet's
 * step: 154 M MUFU ops, ~37 us of the SFUs alone), the 7x7 49 f32 FMAs
 * and the half -> float conversions an output; and fewer warps an SM
 * (the stream kernel's registers: 2-4 CTAs of 48-224 threads) lose.
 * Next: fewer instructions (__fdividef / a reciprocal for SiLU and the
 * 1/6 of HardSwish within the half rounding the reference allows,
 * packed half2 conversions), more warps an SM (P = 4 was the best
 * variant on coatnet's step alone).
 *
 * The tiled kernel: a CTA owns CL channel vectors x TH output rows x PW*P
 * output columns of one image (grid: channel chunks x column tiles, row tiles,
 * N). It first stages the input halo those outputs need,
 * ((TH-1)*sh+R) x ((PW*P-1)*sw+S) pixels x CL vectors, in shared memory:
 * consecutive threads load consecutive 16-byte vectors (runs of CL*16
 * bytes along C, whole rows of the tile), the input activation applied
 * once per element and rounded to X's type as the reference rounds it,
 * zeros for the padding. Then a thread owns one channel vector of P
 * consecutive output pixels of one row: for each kernel row it reads the
 * (P-1)*sw+S halo pixels that row needs once, each feeding up to S
 * accumulators (a sliding window in registers, unrolled: every index is a
 * constant), f32 sums (as the reference's), weights re-laid-out at compile
 * time to f32 [R,S,C] (a plan weight of their own; a tap's vector is one
 * or two 16-byte loads, from L1), the bias f32 [C]. The tile (PW, TH) is
 * the one of least waste (tiles past the edges), halo re-reads (weighed
 * at 0.3: they come from L2) and few threads, within 256 threads and
 * 48 KB of shared memory; P shrinks (8, 4, 2, 1) while the grid would
 * have fewer than 132 x 512 threads, so small maps (7x7 at C=960) still
 * fill the H200's SMs.
 *
 * The stream kernel (GPUC_DWCONV_STREAM=1 makes it wherever it applies):
 * the tiled kernel's tile and thread layout, but a grid of 132 x (CTAs
 * an SM holds) CTAs each looping over tiles (channel chunks fastest, then
 * columns, rows, images, so the CTAs at work share halo rows in L2)
 * through 2 (GPUC_DWCONV_BUFS: up to 4) halo buffers in dynamic shared
 * memory: while a tile's outputs are computed, the next tile's halo is in
 * flight by cp.async (zero-filled for the padding); each thread applies
 * the input activation to the vectors it loaded, then a barrier. The tile
 * is chosen as the tiled kernel's, within GPUC_DWCONV_STAGE KB (32) a
 * buffer, for ~GPUC_DWCONV_FLIGHT KB (64) in flight an SM, with a
 * register estimate its __launch_bounds__ holds ptxas to (no spills on
 * the zoo's shapes at sm_90); kernel rows past 5 in a loop (7x7 unrolled
 * spilled).
 *
 * The row kernel (the one before the tiled one; GPUC_DWCONV_V1=1 makes it
 * everywhere, GPUC_DWCONV_TILED=1 the tiled one wherever it applies: GPU
 * A/B runs): a thread owns V
 * channels (an 8-byte half or 16-byte f32 vector) of TW output pixels of
 * one row and reads its inputs straight from global memory (L1/L2 for
 * the re-reads), the input activation applied per read (about
 * R*(1 + (S-1)/TW) times an element, the likely cost of SiLU models' steps
 * in it); one GRID_STRIDE loop, block-size free for -O3.
 *
 * Applies to f32/f16/bf16, any kernel size up to MAX_TAP per dim, any
 * stride up to 4, any (also asymmetric) zero padding; dilation up to 8 in
 * the row kernel only (the tiled and stream kernels stage dense halos; a
 * dilated step went to cuDNN before, where LR-ASPP's two 5x5 dilation-2
 * steps at [32,10,10,960] took 2.6-2.8 ms each on the H200). Others
 * return 1 and go to cuDNN (codegen/lower_conv.c). tests/dwconv_host_test.py
 * runs the three kernels' text on the host against numpy. */
#include "lower_util.h"
#include "conv_act.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MAX_DIL: the row kernel's span of (TW-1)*sw + (S-1)*dil + 1 unrolled
 * pixels stays within 8*4 + 8*8 + 1 = 97 (ASPP rates of 12-36 stay on cuDNN) */
enum { MAX_TAP = 9, MAX_STRIDE = 4, MAX_TW = 8, MAX_DIL = 8 };

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

typedef struct { /* one depthwise step: shapes, strides, pads (top, left), dilations */
  int64_t N, H, W, C, OH, OW, R, S, sh, sw, ph, pw, dh, dw;
} DwShape;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Depthwise: groups == C == K and W [K,R,S,1]. */
static bool depthwise_nhwc(const LowerCtx *c) {
  const Tensor *x = c->in[0], *w = c->in[1];
  int64_t groups = gpuc_attr_i(c->n, "group", 1);
  return x->rank == 4 && w->rank == 4 && groups > 1 && groups == x->dims[3] && w->dims[0] == groups &&
         w->dims[3] == 1 && c->in[1]->data;
}

/* Output pixels per thread: near `most`, dividing OW evenly where it can
 * (56 -> 8, 28 -> 7, 14 -> 7, 7 -> 7), so few lanes idle at a row's end. */
static int pixels_per_thread(int64_t ow, int most) {
  int64_t blocks = cdiv(ow, most);
  return (int)cdiv(ow, blocks);
}

/* " dilation AxB" in a kernel's comment, "" without one */
static const char *dilation_note(const DwShape *d) {
  static _Thread_local char buf[48];
  buf[0] = 0;
  if (d->dh > 1 || d->dw > 1) snprintf(buf, sizeof buf, " dilation %lldx%lld", (long long)d->dh, (long long)d->dw);
  return buf;
}

/* ---- the row kernel (GPUC_DWCONV_V1=1, C not a multiple of the vector, or dilated) ---- */
static int emit_rows(LowerCtx *c, const DwShape *d, const char *act, const char *in_act, bool z, int nargs,
                     const uint32_t *args) {
  const Tensor *x = c->in[0];
  int64_t N = d->N, H = d->H, W = d->W, C = d->C, R = d->R, S = d->S, OH = d->OH, OW = d->OW;
  const int64_t st[2] = {d->sh, d->sw}, pb[2] = {d->ph, d->pw};
  /* channels per thread: one 8-byte (half) or 16-byte (f32) vector */
  int V = C % 4 == 0 ? 4 : C % 2 == 0 ? 2 : 1;
  int TW = pixels_per_thread(OW, MAX_TW);
  int64_t CV = C / V, OWB = cdiv(OW, TW), items = N * OH * OWB * CV;
  if (items > INT32_MAX) return lower_fail(c, "internal: depthwise items past int32");
  const char *t = cg_ctype(x->dt), *name = cg_kernel_name(c);
  /* input pixels one kernel row needs: output t's tap s reads pixel
   * j = t*sw + s*dw of the row's span (dilation: LR-ASPP's and DeepLab's
   * atrous MobileNetV3 stages) */
  int64_t span = (TW - 1) * st[1] + (S - 1) * d->dw + 1;
  bool dilated = d->dh > 1 || d->dw > 1;
  /* the tap of output t at span pixel j, as the kernel text tests it */
  char tap[160];
  if (dilated)
    snprintf(tap, sizeof tap, "const int q = j - t * %lld, s = q / %lld;\n          if (q >= 0 && q %% %lld == 0 && s < %lld) {",
             (long long)st[1], (long long)d->dw, (long long)d->dw, (long long)S);
  else
    snprintf(tap, sizeof tap, "const int s = j - t * %lld;\n          if (s >= 0 && s < %lld) {", (long long)st[1],
             (long long)S);
  StrBuf *b = cg_src(c);
  sb_printf(b,
            "/* depthwise %lldx%lld stride %lldx%lld%s NHWC: x [%lld,%lld,%lld,%lld] -> y [%lld,%lld,%lld,%lld];\n"
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
            "      const int ih = oh * %lld - %lld + r * %lld;\n"
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
            "          %s\n"
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
            (long long)R, (long long)S, (long long)st[0], (long long)st[1], dilation_note(d), (long long)N,
            (long long)H, (long long)W, (long long)C, (long long)N, (long long)OH, (long long)OW, (long long)C, V, TW,
            name, t,
            z ? "const " : "", z ? t : "", z ? "* z," : "", t, z ? "" : "__restrict__ ", (long long)items, (long long)CV, V,
            (long long)CV, (long long)OWB, TW, (long long)OWB, (long long)OH, (long long)OH, TW, V, V, V, TW, V,
            (long long)R, (long long)st[0], (long long)pb[0], (long long)d->dh, (long long)H, t, (long long)H,
            (long long)W,
            (long long)C, (long long)S, V, (long long)S, V, V, (long long)S, (long long)C, V, (long long)span,
            (long long)st[1], (long long)pb[1], V, (long long)W, t, V, t, V, (long long)C, V, in_act, V, TW, tap, V,
            TW, (long long)OW, (long long)OH, (long long)OW, (long long)C);
  cg_conv_rows_store(b, t, V, z, act);
  return cg_launch_items(c, name, (uint64_t)items, nargs, args);
}

void cg_conv_rows_store(StrBuf *b, const char *t, int V, bool z, const char *act) {
  if (z) sb_printf(b, "      const Vec<%s, %d> zv = *(const Vec<%s, %d>*)(z + o);\n", t, V, t, V);
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
}

int cg_conv_weights(LowerCtx *c, Tensor *wt, const char *wname, Tensor *bt, const char *bname, uint32_t *tw,
                    uint32_t *tb) {
  char name[2][192];
  snprintf(name[0], sizeof name[0], "%s.%s", c->n->name, wname);
  snprintf(name[1], sizeof name[1], "%s.%s", c->n->name, bname);
  *tw = cg_weights(c, name[0], wt);
  *tb = cg_weights(c, name[1], bt);
  free(wt->data);
  free(bt->data);
  wt->data = bt->data = NULL;
  return *tw == UINT32_MAX || *tb == UINT32_MAX ? lower_fail(c, "out of memory") : 0;
}

int cg_conv_args(const LowerCtx *c, uint32_t tw, uint32_t tb, bool z, uint32_t args[5]) {
  int n = 0;
  args[n++] = c->tin[0];
  args[n++] = tw;
  args[n++] = tb;
  if (z) args[n++] = c->tin[3];
  args[n++] = c->tout[0];
  return n;
}

/* ---- the tiled kernel ---- */
enum { TILE_SMEM = 48 * 1024, TILE_THREADS = 256, GPU_SMS = 132, SM_SMEM = 227 * 1024, SM_REGS = 65536 };
enum { STREAM_STAGE = 32 * 1024, STREAM_FLIGHT = 64 * 1024, STREAM_BUFS = 2 };

/* GPU A/B knobs (tests/gpu/dwconv_ab.sh), their defaults the tuned values:
 * GPUC_DWCONV_MAXP (most pixels a thread, 8), GPUC_DWCONV_FILL (threads
 * per SM below which P shrinks, 512), GPUC_DWCONV_SMEM (KB a CTA, 48),
 * GPUC_DWCONV_THREADS (most threads a CTA, 256), GPUC_DWCONV_ASYNC (1: the
 * tiled kernel's halo staged by cp.async, 0; not yet timed);
 * the stream kernel's: GPUC_DWCONV_STAGE (KB a halo buffer, 32; 16 was
 * 8-13% faster on coatnet's 56x56 and convnext's 7x7 steps alone, 11-16%
 * slower on mobilenet_v2's 112x112 and efficientnet's 14x14),
 * GPUC_DWCONV_FLIGHT (KB in flight an SM aimed at, 64),
 * GPUC_DWCONV_BUFS (halo buffers, 2; 3 was 3% faster on one step alone,
 * up to 36% slower on others),
 * GPUC_DWCONV_CTAS (most CTAs in the grid, none; the host test's way to
 * make each CTA loop) */
static int knob(const char *name, int dflt, int lo, int hi) {
  const char *v = getenv(name);
  int k = v && *v ? atoi(v) : dflt;
  return k < lo ? lo : k > hi ? hi : k;
}

typedef struct {
  int V, CL, P, PW, TH;                  /* vector, lanes, pixels/thread, threads along W, rows */
  int64_t chunks, tiles_w, tiles_h, HH, HW; /* grid; halo rows and columns */
  int ctas, bufs;                           /* the stream kernel: CTAs an SM holds, halo buffers a CTA */
} DwTile;

/* Channel vectors per CTA: all of C up to 8 vectors, else a divisor of
 * C/V in 8..4, else 8 with the last chunk's lanes past C idle. */
static int channel_lanes(int64_t cv) {
  if (cv <= 8) return (int)cv;
  for (int l = 8; l >= 4; l--)
    if (cv % l == 0) return l;
  return 8;
}

static bool plan_tile(const DwShape *d, int esize, bool stream, DwTile *k) {
  k->V = 16 / esize;
  if (d->C % k->V) return false;
  int64_t CV = d->C / k->V;
  k->CL = channel_lanes(CV);
  k->chunks = cdiv(CV, k->CL);
  int most = knob("GPUC_DWCONV_MAXP", MAX_TW, 1, MAX_TW), fill = knob("GPUC_DWCONV_FILL", 512, 0, 2048);
  int64_t smem_cap = 1024 * (int64_t)knob("GPUC_DWCONV_SMEM", TILE_SMEM / 1024, 4, 48);
  /* the stream kernel: a halo buffer's cap (two a CTA), the bytes in
   * flight an SM it aims at */
  if (stream) smem_cap = 1024 * (int64_t)knob("GPUC_DWCONV_STAGE", STREAM_STAGE / 1024, 4, 100);
  int64_t want_flight = 1024 * (int64_t)knob("GPUC_DWCONV_FLIGHT", STREAM_FLIGHT / 1024, 0, 200);
  k->bufs = knob("GPUC_DWCONV_BUFS", STREAM_BUFS, 2, 4);
  int64_t max_threads = knob("GPUC_DWCONV_THREADS", TILE_THREADS, 32, 1024);
  k->P = pixels_per_thread(d->OW, most);
  while (k->P > 1 && d->N * d->OH * cdiv(d->OW, k->P) * CV < (int64_t)GPU_SMS * fill)
    k->P = pixels_per_thread(d->OW, most /= 2);
  /* registers a thread, about (ptxas, sm_90: P = 8 -> 130-150, 2 -> 66);
   * the stream kernel's (its __launch_bounds__ holds ptxas to them): the
   * accumulators, a kernel row's weights and an input vector, f32 each,
   * and ~64 more (ptxas, sm_90, fp16, unbounded: 3x3 P = 8 -> 164, P = 4
   * -> 126, 5x5 P = 7 -> 165), rounded up to ptxas' 8, its CTA's threads
   * to whole warps */
  int64_t owb = cdiv(d->OW, k->P), vec_bytes = 16, regs = 48 + 11 * (int64_t)k->P * k->V / 8;
  if (stream) regs = (64 + (int64_t)k->V * (k->P + d->S + 1) + 7) / 8 * 8;
  double best = 1e30;
  k->TH = 0;
  for (int64_t pw = 1; pw <= owb; pw++)
    for (int64_t th = 1; th <= d->OH; th++) {
      int64_t T = k->CL * pw * th, tw = pw * k->P;
      if (T > max_threads) break;
      int64_t HH = (th - 1) * d->sh + d->R, HW = (tw - 1) * d->sw + d->S, smem = HH * HW * k->CL * vec_bytes;
      if (smem > smem_cap) continue;
      /* CTAs an SM holds: fewer than 3 leave its load and compute phases
       * little to overlap with */
      int64_t by_smem = SM_SMEM / (smem + 1024), by_regs = SM_REGS / ((stream ? cdiv(T, 32) * 32 : T) * regs);
      int64_t ctas = by_smem < by_regs ? by_smem : by_regs;
      double waste = (double)(cdiv(d->OH, th) * th * cdiv(d->OW, tw) * tw) / (double)(d->OH * d->OW);
      double halo = (double)(HH * HW) / (double)(th * d->sh * tw * d->sw);
      double cost = waste + 0.3 * (halo - 1) + (T < 128 ? 0.25 * (double)(128 - T) / 128 : 0);
      if (stream) {
        /* a CTA computes one buffer while the others load: bytes in
         * flight an SM about its CTAs x (buffers - 1) */
        by_smem = SM_SMEM / (k->bufs * smem + 1024);
        int64_t by_thr = 2048 / T;
        ctas = by_smem < by_regs ? by_smem : by_regs;
        ctas = ctas < by_thr ? ctas : by_thr;
        if (ctas < 1) continue;
        int64_t flight = ctas * (k->bufs - 1) * smem;
        if (flight < want_flight) cost += 0.5 * (double)(want_flight - flight) / (double)want_flight;
      } else if (ctas < 3) {
        cost += 0.15 * (double)(3 - ctas);
      }
      if (cost < best) { best = cost; k->PW = (int)pw; k->TH = (int)th; k->ctas = (int)ctas; }
    }
  if (!k->TH) return false;
  k->tiles_w = cdiv(d->OW, (int64_t)k->PW * k->P);
  k->tiles_h = cdiv(d->OH, k->TH);
  k->HH = (k->TH - 1) * d->sh + d->R;
  k->HW = ((int64_t)k->PW * k->P - 1) * d->sw + d->S;
  return k->chunks * k->tiles_w <= INT32_MAX && k->tiles_h <= 65535 && d->N <= 65535;
}

/* A tiled CTA's outputs from its halo in shared memory `sm` (a Vec per
 * lane and pixel): thread (l, px, ty) of the tile at (chunk, n, oh0, ow0)
 * owns channel vector l of P consecutive output pixels of row ty: for
 * each kernel row it reads the (P-1)*sw+S halo pixels that row needs
 * once, each feeding up to S accumulators (a sliding window in registers,
 * unrolled: every index is a constant), f32 sums; bias, residual,
 * activation; one 16-byte store a pixel. `lg`: the last chunk's lanes
 * past C ("" when none). */
static void emit_tile_outputs(StrBuf *b, const DwShape *d, const DwTile *k, const char *t, const char *as_bits,
                              const char *act, bool z, const char *sm, const char *lg, bool roll_rows) {
  int V = k->V, CL = k->CL, P = k->P;
  int64_t span = (P - 1) * d->sw + d->S;
  sb_printf(b,
            "  {\n"
            "  const int cv = chunk * %d + l, oh = oh0 + ty, ow1 = ow0 + px * %d;\n"
            "  if (oh < %lld && ow1 < %lld%s) {\n"
            "  const int c0 = cv * %d;\n"
            "  float acc[%d][%d];\n"
            "#pragma unroll\n"
            "  for (int h = 0; h < %d; h++) {\n"
            "    const Vec<float, 4> bv = *(const Vec<float, 4>*)(bias + c0 + h * 4);\n"
            "#pragma unroll\n"
            "    for (int t = 0; t < %d; t++)\n"
            "#pragma unroll\n"
            "      for (int v = 0; v < 4; v++) acc[t][h * 4 + v] = bv.v[v];\n"
            "  }\n",
            CL, P, (long long)d->OH, (long long)d->OW, lg, V, P, V, V / 4, P);
  sb_printf(b,
            "#pragma unroll%s\n"
            "  for (int r = 0; r < %lld; r++) {\n"
            "    const Vec<%s, %d>* xr = %s + ((ty * %lld + r) * %lld + px * %lld) * %d + l;\n"
            "    float wr[%lld][%d];\n"
            "#pragma unroll\n"
            "    for (int s = 0; s < %lld; s++)\n"
            "#pragma unroll\n"
            "      for (int h = 0; h < %d; h++) {\n"
            "        const Vec<float, 4> wv = *(const Vec<float, 4>*)(w + (r * %lld + s) * %lld + c0 + h * 4);\n"
            "#pragma unroll\n"
            "        for (int v = 0; v < 4; v++) wr[s][h * 4 + v] = wv.v[v];\n"
            "      }\n"
            "#pragma unroll\n"
            "    for (int j = 0; j < %lld; j++) {\n"
            "      const Vec<%s, %d> q = xr[j * %d];\n"
            "      float xv[%d];\n"
            "#pragma unroll\n"
            "      for (int u = 0; u < %d; u++) xv[u] = ldf(q.v[u]);\n"
            "#pragma unroll\n"
            "      for (int t = 0; t < %d; t++) {\n"
            "        const int s = j - t * %lld;\n"
            "        if (s >= 0 && s < %lld) {\n"
            "#pragma unroll\n"
            "          for (int v = 0; v < %d; v++) acc[t][v] = fmaf(wr[s][v], xv[v], acc[t][v]);\n"
            "        }\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "#pragma unroll\n"
            "  for (int t = 0; t < %d; t++) {\n"
            "    const int ow = ow1 + t;\n"
            "    if (ow >= %lld) break;\n"
            "    const int o = ((n * %lld + oh) * %lld + ow) * %lld + c0; /* int: numel(y) <= INT32_MAX */\n",
            roll_rows ? " 1" : "", (long long)d->R, t, V, sm, (long long)d->sh, (long long)k->HW,
            (long long)(P * d->sw), CL,
            (long long)d->S, V, (long long)d->S, V / 4, (long long)d->S, (long long)d->C, (long long)span, t, V, CL,
            V, V, P, (long long)d->sw, (long long)d->S, V, P, (long long)d->OW, (long long)d->OH, (long long)d->OW,
            (long long)d->C);
  if (z) sb_printf(b, "    const Vec<%s, %d> zv = *(const Vec<%s, %d>*)(z + o);\n", t, V, t, V);
  sb_printf(b,
            "    unsigned bits[%d];\n"
            "#pragma unroll\n"
            "    for (int k = 0; k < %d; k++) {\n"
            "      const float v = acc[t][k]%s;\n"
            "      bits[k] = %s(stf<%s>(%s));\n"
            "    }\n",
            V, V, z ? " + ldf(zv.v[k])" : "", as_bits, t, act);
  /* one 16-byte store (PTX st.global.v4.u32): with an i64 offset nvcc
   * stored a Vec<half, 8> 2 bytes at a time and a uint4 4 bytes at a time;
   * a uint4 at an int offset is one store */
  if (V == 8)
    sb_printf(b, "    *(uint4*)(y + o) = make_uint4(bits[0] | bits[1] << 16, bits[2] | bits[3] << 16,\n"
                 "                                  bits[4] | bits[5] << 16, bits[6] | bits[7] << 16);\n");
  else
    sb_printf(b, "    *(uint4*)(y + o) = make_uint4(bits[0], bits[1], bits[2], bits[3]);\n");
  sb_printf(b, "  }\n  }\n  }\n");
}

static int emit_tiled(LowerCtx *c, const DwShape *d, const DwTile *k, const char *act, const char *in_act, bool z,
                      int nargs, const uint32_t *args) {
  const char *t = cg_ctype(c->in[0]->dt), *name = cg_kernel_name(c);
  const char *as_bits = c->in[0]->dt == GPUC_DT_F32   ? "__float_as_uint"
                        : c->in[0]->dt == GPUC_DT_F16 ? "__half_as_ushort"
                                                      : "__bfloat16_as_ushort";
  int V = k->V, CL = k->CL, P = k->P;
  int64_t T = (int64_t)CL * k->PW * k->TH, CV = d->C / V, halo = k->HH * k->HW * CL;
  char lg[48] = ""; /* the last chunk's lanes past C idle */
  if (k->chunks * CL != CV) snprintf(lg, sizeof lg, " && cv < %lld", (long long)CV);
  /* halo vectors a thread loads before it stores any: up to 8 in flight;
   * GPUC_DWCONV_ASYNC=1: all of them by cp.async (sm_80+; not yet timed) */
  int G = (int)(cdiv(halo, T) < 8 ? cdiv(halo, T) : 8);
  bool async = knob("GPUC_DWCONV_ASYNC", 0, 0, 1);
  StrBuf *b = cg_src(c);
  sb_printf(b,
            "/* depthwise %lldx%lld stride %lldx%lld NHWC: x [%lld,%lld,%lld,%lld] -> y [%lld,%lld,%lld,%lld];\n"
            " * a CTA: %d channels x %dx%d output pixels, its input halo %lldx%lld in shared memory;\n"
            " * a thread: %d channels x %d output pixels of one row; grid [%lld,%lld,%lld] block %lld */\n",
            (long long)d->R, (long long)d->S, (long long)d->sh, (long long)d->sw, (long long)d->N, (long long)d->H,
            (long long)d->W, (long long)d->C, (long long)d->N, (long long)d->OH, (long long)d->OW, (long long)d->C,
            CL * V, k->TH, k->PW * P, (long long)k->HH, (long long)k->HW, V, P, (long long)(k->chunks * k->tiles_w),
            (long long)k->tiles_h, (long long)d->N, (long long)T);
  if (async)
    sb_printf(b, "#ifndef DW_CP16 /* cp.async: a 16-byte global -> shared copy; wait for this thread's */\n"
                 "#define DW_CP16(dst, src) asm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16;\\n\" :: \\\n"
                 "    \"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(src) : \"memory\")\n"
                 "#define DW_CP_WAIT() asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\")\n"
                 "#endif\n");
  sb_printf(b,
            "extern \"C\" __global__ void __launch_bounds__(%lld) %s(const %s* __restrict__ x,\n"
            "    const float* __restrict__ w, const float* __restrict__ bias, %s%s%s %s* %sy) {\n"
            "  __shared__ Vec<%s, %d> tile[%lld];\n"
            "  const int chunk = blockIdx.x %% %lldu, n = blockIdx.z;\n"
            "  const int oh0 = blockIdx.y * %d, ow0 = (blockIdx.x / %lldu) * %d;\n"
            "  const int ih0 = oh0 * %lld - %lld, iw0 = ow0 * %lld - %lld;\n",
            (long long)T, name, t, z ? "const " : "", z ? t : "", z ? "* z," : "", t, z ? "" : "__restrict__ ", t, V,
            (long long)halo, (long long)k->chunks, k->TH, (long long)k->chunks, k->PW * P, (long long)d->sh,
            (long long)d->ph, (long long)d->sw, (long long)d->pw);
  /* a halo vector k: lane l, pixel (hh, ww) of the tile; in the image? */
  char where[512];
  snprintf(where, sizeof where,
           "    const int l = k %% %d, p = k / %d, hh = p / %lld, ww = p %% %lld;\n"
           "    const int ih = ih0 + hh, iw = iw0 + ww, cv = chunk * %d + l;\n"
           "    const bool in = ih >= 0 && ih < %lld && iw >= 0 && iw < %lld%s;\n"
           "    (void)cv;\n",
           CL, CL, (long long)k->HW, (long long)k->HW, CL, (long long)d->H, (long long)d->W, lg);
  if (async) {
    /* every halo vector in flight at once, no registers held: cp.async */
    sb_printf(b,
              "  for (int k = threadIdx.x; k < %lld; k += %lld) {\n%s"
              "    if (in) {\n"
              "      DW_CP16(&tile[k], x + ((i64)(n * %lld + ih) * %lld + iw) * %lld + cv * %d);\n"
              "    } else {\n"
              "      *(uint4*)&tile[k] = make_uint4(0u, 0u, 0u, 0u); /* +0 in every type */\n"
              "    }\n"
              "  }\n"
              "  DW_CP_WAIT();\n",
              (long long)halo, (long long)T, where, (long long)d->H, (long long)d->W, (long long)d->C, V);
    /* the input activation on this thread's own vectors (rounded to X's
     * type as the reference rounds it; the padding stays zero) */
    if (strcmp(in_act, "v") != 0)
      sb_printf(b,
                "  for (int k = threadIdx.x; k < %lld; k += %lld) {\n%s"
                "    if (in) {\n"
                "      Vec<%s, %d> q = tile[k];\n"
                "#pragma unroll\n"
                "      for (int u = 0; u < %d; u++) { const float v = ldf(q.v[u]); q.v[u] = stf<%s>(%s); }\n"
                "      tile[k] = q;\n"
                "    }\n"
                "  }\n",
                (long long)halo, (long long)T, where, t, V, V, t, in_act);
  } else {
    sb_printf(b,
              "  for (int k0 = 0; k0 < %lld; k0 += %lld) {\n"
              "    Vec<%s, %d> q[%d];\n"
              "    bool ok[%d];\n"
              "#pragma unroll\n"
              "    for (int g = 0; g < %d; g++) {\n"
              "      const int k = k0 + g * %lld + threadIdx.x;\n"
              "      const int l = k %% %d, p = k / %d, hh = p / %lld, ww = p %% %lld;\n"
              "      const int ih = ih0 + hh, iw = iw0 + ww, cv = chunk * %d + l;\n"
              "      ok[g] = k < %lld && ih >= 0 && ih < %lld && iw >= 0 && iw < %lld%s;\n"
              "      if (ok[g]) {\n"
              "        q[g] = *(const Vec<%s, %d>*)(x + ((i64)(n * %lld + ih) * %lld + iw) * %lld + cv * %d);\n"
              "      } else {\n"
              "#pragma unroll\n"
              "        for (int u = 0; u < %d; u++) q[g].v[u] = stf<%s>(0.f);\n"
              "      }\n"
              "    }\n"
              "#pragma unroll\n"
              "    for (int g = 0; g < %d; g++) {\n"
              "      const int k = k0 + g * %lld + threadIdx.x;\n"
              "      if (k >= %lld) break;\n",
              (long long)halo, (long long)(T * G), t, V, G, G, G, (long long)T, CL, CL, (long long)k->HW,
              (long long)k->HW, CL, (long long)halo, (long long)d->H, (long long)d->W, lg, t, V, (long long)d->H,
              (long long)d->W, (long long)d->C, V, V, t, G, (long long)T, (long long)halo);
    /* the input activation on what was read (padding stays zero, as the
     * reference pads in_act(X)), rounded to X's type as the reference does */
    if (strcmp(in_act, "v") != 0)
      sb_printf(b,
                "      if (ok[g]) {\n"
                "#pragma unroll\n"
                "        for (int u = 0; u < %d; u++) { const float v = ldf(q[g].v[u]); q[g].v[u] = stf<%s>(%s); }\n"
                "      }\n",
                V, t, in_act);
    sb_printf(b,
              "      tile[k] = q[g];\n"
              "    }\n"
              "  }\n");
  }
  sb_printf(b,
            "  __syncthreads();\n"
            "  const int l = threadIdx.x %% %d, pq = threadIdx.x / %d, px = pq %% %d, ty = pq / %d;\n",
            CL, CL, k->PW, k->PW);
  emit_tile_outputs(b, d, k, t, as_bits, act, z, "tile", lg, false);
  sb_printf(b, "}\n");
  unsigned grid[3] = {(unsigned)(k->chunks * k->tiles_w), (unsigned)k->tiles_h, (unsigned)d->N};
  unsigned block[3] = {(unsigned)T, 1, 1};
  return cg_launch_grid(c, name, grid, block, 0, nargs, args);
}

/* ---- the stream kernel: a looping CTA, two (or more) halo buffers ---- */
static int emit_stream(LowerCtx *c, const DwShape *d, const DwTile *k, const char *act, const char *in_act, bool z,
                       int nargs, const uint32_t *args) {
  const char *t = cg_ctype(c->in[0]->dt), *name = cg_kernel_name(c);
  const char *as_bits = c->in[0]->dt == GPUC_DT_F32   ? "__float_as_uint"
                        : c->in[0]->dt == GPUC_DT_F16 ? "__half_as_ushort"
                                                      : "__bfloat16_as_ushort";
  int V = k->V, CL = k->CL, P = k->P;
  int64_t T = (int64_t)CL * k->PW * k->TH, CV = d->C / V, halo = k->HH * k->HW * CL;
  int64_t ntiles = k->chunks * k->tiles_w * k->tiles_h * d->N, smem = k->bufs * halo * 16;
  int64_t G = (int64_t)GPU_SMS * k->ctas, cap = knob("GPUC_DWCONV_CTAS", 0, 0, 1 << 20);
  if (cap && G > cap) G = cap;
  if (G > ntiles) G = ntiles;
  if (ntiles > INT32_MAX) return lower_fail(c, "internal: depthwise tiles past int32");
  char lg[48] = ""; /* the last chunk's lanes past C idle */
  if (k->chunks * CL != CV) snprintf(lg, sizeof lg, " && cv < %lld", (long long)CV);
  StrBuf *b = cg_src(c);
  sb_printf(b,
            "/* depthwise %lldx%lld stride %lldx%lld NHWC: x [%lld,%lld,%lld,%lld] -> y [%lld,%lld,%lld,%lld];\n"
            " * a CTA: %d channels x %dx%d output pixels a tile, %lld tiles in turn, %d halo buffers\n"
            " * of %lldx%lld pixels (the next tiles' loads by cp.async while this one's outputs are computed);\n"
            " * a thread: %d channels x %d output pixels of one row; grid [%lld,1,1] block %lld */\n"
            "#ifndef DW_CP16Z /* cp.async, 16 bytes, zeros where !ok; groups; the dynamic shared memory */\n"
            "#define DW_CP16Z(dst, src, ok) \\\n"
            "    asm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16, %%2;\\n\" :: \\\n"
            "    \"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(src), \"r\"((ok) ? 16 : 0) : \"memory\")\n"
            "#define DW_CP_COMMIT() asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\")\n"
            "#define DW_CP_WAITN(n) asm volatile(\"cp.async.wait_group \" #n \";\\n\" ::: \"memory\")\n"
            "#define DW_SMEM(name, bytes) extern __shared__ __align__(16) unsigned char name[]\n"
            "#endif\n",
            (long long)d->R, (long long)d->S, (long long)d->sh, (long long)d->sw, (long long)d->N, (long long)d->H,
            (long long)d->W, (long long)d->C, (long long)d->N, (long long)d->OH, (long long)d->OW, (long long)d->C,
            CL * V, k->TH, k->PW * P, (long long)ntiles, k->bufs, (long long)k->HH, (long long)k->HW, V, P,
            (long long)G,
            (long long)T);
  /* tile -> (chunk, n, oh0, ow0): channel chunks fastest, then columns,
   * rows, images, so the CTAs at work at once share halo rows in L2 */
  char decode[512], where[512];
  snprintf(decode, sizeof decode,
           "  const int chunk = tile %% %lld; int rest_ = tile / %lld;\n"
           "  const int ow0 = (rest_ %% %lld) * %d; rest_ /= %lld;\n"
           "  const int oh0 = (rest_ %% %lld) * %d, n = rest_ / %lld;\n",
           (long long)k->chunks, (long long)k->chunks, (long long)k->tiles_w, k->PW * P, (long long)k->tiles_w,
           (long long)k->tiles_h, k->TH, (long long)k->tiles_h);
  snprintf(where, sizeof where,
           "    const int l = k %% %d, p = k / %d, hh = p / %lld, ww = p %% %lld;\n"
           "    const int ih = oh0 * %lld - %lld + hh, iw = ow0 * %lld - %lld + ww, cv = chunk * %d + l;\n"
           "    const bool in = ih >= 0 && ih < %lld && iw >= 0 && iw < %lld%s;\n",
           CL, CL, (long long)k->HW, (long long)k->HW, (long long)d->sh, (long long)d->ph, (long long)d->sw,
           (long long)d->pw, CL, (long long)d->H, (long long)d->W, lg);
  /* the loads of a tile's halo: consecutive threads, consecutive 16-byte
   * vectors (runs of CL*16 bytes along C), zeros for the padding */
  sb_printf(b,
            "static __device__ __forceinline__ void %s_fetch(Vec<%s, %d>* sm, const %s* __restrict__ x, int tile) {\n"
            "%s"
            "  for (int k = threadIdx.x; k < %lld; k += %lld) {\n%s"
            "    DW_CP16Z(&sm[k], in ? x + ((i64)(n * %lld + ih) * %lld + iw) * %lld + cv * %d : x, in);\n"
            "  }\n"
            "}\n",
            name, t, V, t, decode, (long long)halo, (long long)T, where, (long long)d->H, (long long)d->W,
            (long long)d->C, V);
  /* the input activation once per element, on the vectors this thread
   * loaded (its own cp.async are complete), rounded to X's type as the
   * reference rounds it; the padding stays zero */
  bool has_in = strcmp(in_act, "v") != 0;
  if (has_in)
    sb_printf(b,
              "static __device__ __forceinline__ void %s_in_act(Vec<%s, %d>* sm, int tile) {\n"
              "%s"
              "  for (int k = threadIdx.x; k < %lld; k += %lld) {\n%s"
              "    if (in) {\n"
              "      Vec<%s, %d> q = sm[k];\n"
              "#pragma unroll\n"
              "      for (int u = 0; u < %d; u++) { const float v = ldf(q.v[u]); q.v[u] = stf<%s>(%s); }\n"
              "      sm[k] = q;\n"
              "    }\n"
              "  }\n"
              "}\n",
              name, t, V, decode, (long long)halo, (long long)T, where, t, V, V, t, in_act);
  sb_printf(b,
            "extern \"C\" __global__ void __launch_bounds__(%lld, %d) %s(const %s* __restrict__ x,\n"
            "    const float* __restrict__ w, const float* __restrict__ bias, %s%s%s %s* %sy) {\n"
            "  DW_SMEM(dw_smem_, %lld);\n"
            "  Vec<%s, %d>* const buf = (Vec<%s, %d>*)dw_smem_;\n"
            "  const int l = threadIdx.x %% %d, pq = threadIdx.x / %d, px = pq %% %d, ty = pq / %d;\n"
            "  constexpr int NB = %d, HALO = %lld, NT = %lld;\n"
            "  int tile = blockIdx.x;\n"
            "  for (int f = 0; f < NB - 1; f++) { /* the first tiles' loads */\n"
            "    if (tile + f * (int)gridDim.x < NT) %s_fetch(buf + f * HALO, x, tile + f * gridDim.x);\n"
            "    DW_CP_COMMIT();\n"
            "  }\n"
            "  for (int it = 0; tile < NT; it++, tile += gridDim.x) {\n"
            "    Vec<%s, %d>* const cur = buf + (it %% NB) * HALO;\n"
            "    const int ahead = tile + (NB - 1) * gridDim.x; /* into the buffer the last tile freed */\n"
            "    if (ahead < NT) %s_fetch(buf + ((it + NB - 1) %% NB) * HALO, x, ahead);\n"
            "    DW_CP_COMMIT(); /* maybe empty */\n"
            "    DW_CP_WAITN(%d); /* this thread's loads of this tile are done */\n",
            (long long)T, k->ctas, name, t, z ? "const " : "", z ? t : "", z ? "* z," : "", t,
            z ? "" : "__restrict__ ", (long long)smem, t, V, t, V, CL, CL, k->PW, k->PW, k->bufs, (long long)halo,
            (long long)ntiles, name, t, V, name, k->bufs - 1);
  if (has_in) sb_printf(b, "    %s_in_act(cur, tile);\n", name);
  sb_printf(b, "    __syncthreads();\n%s", decode);
  /* kernel rows in a loop past 5: unrolled, ptxas held 7x7 (P = 4) in
   * 255 registers and spilled; in a loop, 128 and none */
  emit_tile_outputs(b, d, k, t, as_bits, act, z, "cur", lg, d->R > 5);
  sb_printf(b,
            "    __syncthreads(); /* cur takes a later tile's loads next */\n"
            "  }\n"
            "}\n");
  unsigned grid[3] = {(unsigned)G, 1, 1}, block[3] = {(unsigned)T, 1, 1};
  return cg_launch_grid(c, name, grid, block, (unsigned)smem, nargs, args);
}

int cg_dwconv_nhwc(LowerCtx *c, const int64_t *pb, const int64_t *st, const int64_t *dil) {
  const Tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  const Tensor *bias = c->nin > 2 ? c->in[2] : NULL, *z = c->nin > 3 ? c->in[3] : NULL;
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16) return 1;
  if (!depthwise_nhwc(c) || y->dt != x->dt || (z && z->dt != x->dt)) return 1;
  if (bias && (!bias->data || bias->rank != 1 || bias->dims[0] != x->dims[3])) return 1;
  DwShape d = {.N = x->dims[0], .H = x->dims[1], .W = x->dims[2], .C = x->dims[3], .OH = y->dims[1],
               .OW = y->dims[2], .R = w->dims[1], .S = w->dims[2], .sh = st[0], .sw = st[1], .ph = pb[0], .pw = pb[1],
               .dh = dil[0], .dw = dil[1]};
  int64_t C = d.C, R = d.R, S = d.S;
  if (R < 1 || S < 1 || R > MAX_TAP || S > MAX_TAP || dil[0] < 1 || dil[1] < 1 || dil[0] > MAX_DIL ||
      dil[1] > MAX_DIL)
    return 1;
  if (st[0] < 1 || st[1] < 1 || st[0] > MAX_STRIDE || st[1] > MAX_STRIDE) return 1;
  if (gpuc_numel(y) == 0 || gpuc_numel(x) > INT32_MAX || gpuc_numel(y) > INT32_MAX) return 1;
  if (d.N * d.OH * d.OW * d.C > INT32_MAX) return 1; /* the row kernel's items */
  char act[256], in_act[256];
  if (cg_conv_act_expr(act, sizeof act, c->n, false, "v") || cg_conv_act_expr(in_act, sizeof in_act, c->n, true, "v"))
    return 1;
  /* Which kernel, by the H200's in-model step times (tests/gpu/dwconv_ab.sh,
   * b32 -O2 --fp16, 2026-12-03; the header has the numbers): the tiled
   * one where the input activation is SiLU/GELU/Mish (the stream kernel
   * lost to it on most of efficientnet_b0's and all of coatnet's steps);
   * the stream one where it is HardSwish (the row kernel divides by 6 at
   * every read: mobilenet_v3_large's steps 14-29% faster, 7x7 even) or
   * the step has stride 2 into a map of 56x56 or more (10-15% faster);
   * both at batch 8 or more (measured at 32); the row kernel elsewhere
   * (it beat the stream kernel on mobilenet_v2's stride-1 Clip steps and
   * all of convnextv2_atto's 7x7 ones). A/B switches: GPUC_DWCONV_V1=1
   * the row kernel everywhere; GPUC_DWCONV_TILED=1 / GPUC_DWCONV_STREAM=1
   * the tiled / stream kernel wherever it applies; GPUC_DWCONV_PREV=1 the
   * choice before the stream kernel (tiled for SiLU/GELU/Mish, else rows). */
  int in_code = (int)gpuc_attr_i(c->n, "in_activation", 0);
  bool costly_in = in_code == GPUC_FCONV_ACT_SILU || in_code == GPUC_FCONV_ACT_GELU || in_code == GPUC_FCONV_ACT_MISH;
  bool s2_big = (d.sh > 1 || d.sw > 1) && d.OH * d.OW >= 56 * 56;
  bool streams = d.N >= 8 && (in_code == GPUC_FCONV_ACT_HARDSWISH || s2_big);
  int kind = costly_in ? 1 : streams ? 2 : 0; /* 0 rows, 1 tiled, 2 stream */
  if (knob("GPUC_DWCONV_PREV", 0, 0, 1)) kind = costly_in ? 1 : 0;
  if (knob("GPUC_DWCONV_STREAM", 0, 0, 1)) kind = 2;
  if (knob("GPUC_DWCONV_TILED", 0, 0, 1)) kind = 1;
  if (knob("GPUC_DWCONV_V1", 0, 0, 1)) kind = 0;
  if (kind == 2 && c->opt->sm < 80) kind = 1; /* cp.async: sm_80 on */
  if (d.dh > 1 || d.dw > 1) kind = 0;          /* the tiled and stream kernels' halos are dense */
  DwTile k = {0};
  if (kind && !plan_tile(&d, (int)gpuc_dtype_size(x->dt), kind == 2, &k)) kind = 0;
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
  uint32_t tw, tb;
  if (cg_conv_weights(c, &wt, "dw_rsc", &bt, "dw_bias", &tw, &tb)) return -1;

  uint32_t args[5];
  int nargs = cg_conv_args(c, tw, tb, z, args);
  int rc = kind == 2   ? emit_stream(c, &d, &k, act, in_act, z, nargs, args)
           : kind == 1 ? emit_tiled(c, &d, &k, act, in_act, z, nargs, args)
                       : emit_rows(c, &d, act, in_act, z, nargs, args);
  if (rc) return -1;
  /* each output element is written after its own Z element is read, by the
   * same thread: y may take a dying residual's bytes */
  if (z) cg_in_place(c, c->tin[3], c->tout[0]);
  return 0;
}
