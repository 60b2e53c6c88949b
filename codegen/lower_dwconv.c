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
 * Two kernels. The tiled one is made where the input activation is SiLU,
 * GELU or Mish (and C a multiple of one 16-byte vector: 8 half channels,
 * 4 f32); the row kernel everywhere else. On the H200 at batch 32, -O2
 * --fp16 (tests/gpu/dwconv_ab.sh, 2026-12-03): efficientnet_b0 (SiLU)
 * 1.608 -> 1.357 ms, its 17 depthwise steps 0.931 -> 0.681 ms (448 -> 611
 * GB/s); coatnet_0_rw_224 (SiLU) b1 0.746 -> 0.701 ms, b32 3.417 ms with
 * its [32,56,56,384] step at 0.129 ms (1.2 TB/s); but mobilenet_v2 (Clip)
 * 0.600 -> 0.617 ms, its 3x3 s1 steps 1.83 -> 1.64 TB/s. Neither is near
 * the DRAM floor (bytes / ~4 TB/s): the tiled kernel holds about 20 KB of
 * loads in flight an SM (a CTA's 8 vectors a thread, 2-3 CTAs an SM,
 * load phase then compute phase), where ~60 KB would keep 4 TB/s busy;
 * staging the whole halo by cp.async (GPUC_DWCONV_ASYNC=1: written and
 * host-tested, not yet timed), or two tiles a CTA double-buffered, is the
 * next step.
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
 * stride up to 4, dilation 1, any (also asymmetric) zero padding. Others
 * return 1 and go to cuDNN (codegen/lower_conv.c). tests/dwconv_host_test.py
 * runs both kernels' text on the host against numpy. */
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

typedef struct { /* one depthwise step: shapes, strides, pads (top, left) */
  int64_t N, H, W, C, OH, OW, R, S, sh, sw, ph, pw;
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

/* ---- the row kernel (GPUC_DWCONV_V1=1, or C not a multiple of the vector) ---- */
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
  return cg_launch_items(c, name, (uint64_t)items, nargs, args);
}

/* ---- the tiled kernel ---- */
enum { TILE_SMEM = 48 * 1024, TILE_THREADS = 256, GPU_SMS = 132, SM_SMEM = 227 * 1024, SM_REGS = 65536 };

/* GPU A/B knobs (tests/gpu/dwconv_ab.sh), their defaults the tuned values:
 * GPUC_DWCONV_MAXP (most pixels a thread, 8), GPUC_DWCONV_FILL (threads
 * per SM below which P shrinks, 512), GPUC_DWCONV_SMEM (KB a CTA, 48),
 * GPUC_DWCONV_THREADS (most threads a CTA, 256), GPUC_DWCONV_ASYNC (1: the
 * halo staged by cp.async, 0) */
static int knob(const char *name, int dflt, int lo, int hi) {
  const char *v = getenv(name);
  int k = v && *v ? atoi(v) : dflt;
  return k < lo ? lo : k > hi ? hi : k;
}

typedef struct {
  int V, CL, P, PW, TH;                  /* vector, lanes, pixels/thread, threads along W, rows */
  int64_t chunks, tiles_w, tiles_h, HH, HW; /* grid; halo rows and columns */
} DwTile;

/* Channel vectors per CTA: all of C up to 8 vectors, else a divisor of
 * C/V in 8..4, else 8 with the last chunk's lanes past C idle. */
static int channel_lanes(int64_t cv) {
  if (cv <= 8) return (int)cv;
  for (int l = 8; l >= 4; l--)
    if (cv % l == 0) return l;
  return 8;
}

static bool plan_tile(const DwShape *d, int esize, DwTile *k) {
  k->V = 16 / esize;
  if (d->C % k->V) return false;
  int64_t CV = d->C / k->V;
  k->CL = channel_lanes(CV);
  k->chunks = cdiv(CV, k->CL);
  int most = knob("GPUC_DWCONV_MAXP", MAX_TW, 1, MAX_TW), fill = knob("GPUC_DWCONV_FILL", 512, 0, 2048);
  int64_t smem_cap = 1024 * (int64_t)knob("GPUC_DWCONV_SMEM", TILE_SMEM / 1024, 4, 48);
  int64_t max_threads = knob("GPUC_DWCONV_THREADS", TILE_THREADS, 32, 1024);
  k->P = pixels_per_thread(d->OW, most);
  while (k->P > 1 && d->N * d->OH * cdiv(d->OW, k->P) * CV < (int64_t)GPU_SMS * fill)
    k->P = pixels_per_thread(d->OW, most /= 2);
  /* registers a thread, about (ptxas, sm_90: P = 8 -> 130-150, 2 -> 66) */
  int64_t owb = cdiv(d->OW, k->P), vec_bytes = 16, regs = 48 + 11 * (int64_t)k->P * k->V / 8;
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
      int64_t by_smem = SM_SMEM / (smem + 1024), by_regs = SM_REGS / (T * regs);
      int64_t ctas = by_smem < by_regs ? by_smem : by_regs;
      double waste = (double)(cdiv(d->OH, th) * th * cdiv(d->OW, tw) * tw) / (double)(d->OH * d->OW);
      double halo = (double)(HH * HW) / (double)(th * d->sh * tw * d->sw);
      double cost = waste + 0.3 * (halo - 1) + (T < 128 ? 0.25 * (double)(128 - T) / 128 : 0) +
                    (ctas < 3 ? 0.15 * (double)(3 - ctas) : 0);
      if (cost < best) { best = cost; k->PW = (int)pw; k->TH = (int)th; }
    }
  if (!k->TH) return false;
  k->tiles_w = cdiv(d->OW, (int64_t)k->PW * k->P);
  k->tiles_h = cdiv(d->OH, k->TH);
  k->HH = (k->TH - 1) * d->sh + d->R;
  k->HW = ((int64_t)k->PW * k->P - 1) * d->sw + d->S;
  return k->chunks * k->tiles_w <= INT32_MAX && k->tiles_h <= 65535 && d->N <= 65535;
}

static int emit_tiled(LowerCtx *c, const DwShape *d, const DwTile *k, const char *act, const char *in_act, bool z,
                      int nargs, const uint32_t *args) {
  const char *t = cg_ctype(c->in[0]->dt), *name = cg_kernel_name(c);
  const char *as_bits = c->in[0]->dt == GPUC_DT_F32   ? "__float_as_uint"
                        : c->in[0]->dt == GPUC_DT_F16 ? "__half_as_ushort"
                                                      : "__bfloat16_as_ushort";
  int V = k->V, CL = k->CL, P = k->P;
  int64_t T = (int64_t)CL * k->PW * k->TH, CV = d->C / V, span = (P - 1) * d->sw + d->S, halo = k->HH * k->HW * CL;
  char lg[48] = "", sg[48] = ""; /* the last chunk's lanes past C idle */
  if (k->chunks * CL != CV) {
    snprintf(lg, sizeof lg, " && cv < %lld", (long long)CV);
    snprintf(sg, sizeof sg, " || cv >= %lld", (long long)CV);
  }
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
            "  const int l = threadIdx.x %% %d, pq = threadIdx.x / %d, px = pq %% %d, ty = pq / %d;\n"
            "  const int cv = chunk * %d + l, oh = oh0 + ty, ow1 = ow0 + px * %d;\n"
            "  if (oh >= %lld || ow1 >= %lld%s) return;\n"
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
            CL, CL, k->PW, k->PW, CL, P, (long long)d->OH, (long long)d->OW, sg, V, P, V, V / 4, P);
  sb_printf(b,
            "#pragma unroll\n"
            "  for (int r = 0; r < %lld; r++) {\n"
            "    const Vec<%s, %d>* xr = tile + ((ty * %lld + r) * %lld + px * %lld) * %d + l;\n"
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
            (long long)d->R, t, V, (long long)d->sh, (long long)k->HW, (long long)(P * d->sw), CL, (long long)d->S, V,
            (long long)d->S, V / 4, (long long)d->S, (long long)d->C, (long long)span, t, V, CL, V, V, P,
            (long long)d->sw, (long long)d->S, V, P, (long long)d->OW, (long long)d->OH, (long long)d->OW,
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
  sb_printf(b, "  }\n}\n");
  unsigned grid[3] = {(unsigned)(k->chunks * k->tiles_w), (unsigned)k->tiles_h, (unsigned)d->N};
  unsigned block[3] = {(unsigned)T, 1, 1};
  return cg_launch_grid(c, name, grid, block, 0, nargs, args);
}

int cg_dwconv_nhwc(LowerCtx *c, const int64_t *pb, const int64_t *st, const int64_t *dil) {
  const Tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  const Tensor *bias = c->nin > 2 ? c->in[2] : NULL, *z = c->nin > 3 ? c->in[3] : NULL;
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16) return 1;
  if (!depthwise_nhwc(c) || y->dt != x->dt || (z && z->dt != x->dt)) return 1;
  if (bias && (!bias->data || bias->rank != 1 || bias->dims[0] != x->dims[3])) return 1;
  DwShape d = {.N = x->dims[0], .H = x->dims[1], .W = x->dims[2], .C = x->dims[3], .OH = y->dims[1],
               .OW = y->dims[2], .R = w->dims[1], .S = w->dims[2], .sh = st[0], .sw = st[1], .ph = pb[0], .pw = pb[1]};
  int64_t C = d.C, R = d.R, S = d.S;
  if (R < 1 || S < 1 || R > MAX_TAP || S > MAX_TAP || dil[0] != 1 || dil[1] != 1) return 1;
  if (st[0] < 1 || st[1] < 1 || st[0] > MAX_STRIDE || st[1] > MAX_STRIDE) return 1;
  if (gpuc_numel(y) == 0 || gpuc_numel(x) > INT32_MAX || gpuc_numel(y) > INT32_MAX) return 1;
  if (d.N * d.OH * d.OW * d.C > INT32_MAX) return 1; /* the row kernel's items */
  char act[256], in_act[256];
  if (cg_conv_act_expr(act, sizeof act, c->n, false, "v") || cg_conv_act_expr(in_act, sizeof in_act, c->n, true, "v"))
    return 1;
  /* Which kernel: the tiled one where the input activation costs a
   * transcendental per element (SiLU, GELU, Mish), which it computes once
   * per element rather than once per read. Elsewhere the row kernel: on
   * the H200 (tests/gpu/dwconv_ab.sh, 2026-12-03) the tiled kernel holds
   * about 20 KB of loads in flight an SM and ran mobilenet_v2's 3x3 s1
   * steps (Clip) at 1.6 TB/s where the row kernel ran 1.8.
   * GPUC_DWCONV_V1=1: the row kernel everywhere; GPUC_DWCONV_TILED=1: the
   * tiled kernel wherever it applies (GPU A/B runs). */
  int in_code = (int)gpuc_attr_i(c->n, "in_activation", 0);
  bool costly_in = in_code == GPUC_FCONV_ACT_SILU || in_code == GPUC_FCONV_ACT_GELU || in_code == GPUC_FCONV_ACT_MISH;
  bool want = knob("GPUC_DWCONV_TILED", 0, 0, 1) || costly_in;
  if (knob("GPUC_DWCONV_V1", 0, 0, 1)) want = false;
  DwTile k = {0};
  bool tiled = want && plan_tile(&d, (int)gpuc_dtype_size(x->dt), &k);
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

  uint32_t args[5] = {c->tin[0], tw, tb}, nargs = 3;
  if (z) args[nargs++] = c->tin[3];
  args[nargs++] = c->tout[0];
  int rc = tiled ? emit_tiled(c, &d, &k, act, in_act, z, (int)nargs, args)
                 : emit_rows(c, &d, act, in_act, z, (int)nargs, args);
  if (rc) return -1;
  /* each output element is written after its own Z element is read, by the
   * same thread: y may take a dying residual's bytes */
  if (z) cg_in_place(c, c->tin[3], c->tout[0]);
  return 0;
}
