/* Attention(Q, K, V, mask?) streamed over K/V blocks (flash-style), for
 * what codegen/lower_attention.c's kernels do not take: grouped-query
 * heads (K/V with H / G heads: head h reads K/V head h / G), causal
 * masking (attribute causal: key j > query i is -inf, or q.k +
 * causal_fill for a finite fill: the rows kernel), and, in half on
 * sm_80+, any sequence whose K and V do not fit shared memory whole (the
 * K/V-resident kernel's limit). Shapes, strides and the mask's broadcast
 * are GpucAttnGeom's (ir/infer_linalg.h), baked in as constants.
 *
 * attention_flash (f16/bf16, sm_80+, D % 16 == 0, Dv % 8 == 0, both <=
 * 128): grid (B*H, ceil(Sq/64)), 4 warps of 16 query rows. Q's rows are
 * loaded once into registers as mma A fragments (m16n8k16 layouts as
 * written in lower_attention.c). K and V go through shared memory in
 * blocks of 64 keys by cp.async, double-buffered when two blocks of each
 * fit the 48 KB of static shared memory (D = Dv = 64: 37 KB), so block
 * c + 1 arrives while block c is computed; single-buffered otherwise
 * (D = 128: 35 KB). Fragments by ldmatrix (K as stored for Q K^T, V with
 * .trans for P V, addressing as in attention_mma_kv). Online softmax in
 * base 2 (x = s * scale*log2(e) + bias, p = 2^(x - max)), as the other
 * kernels; a row whose scores are all -inf keeps max 0 so p stays 0, and
 * ends 0/0 = NaN like the unfused Softmax (0 with nan_to_zero).
 *   - a mask that does not vary along the query axis (ms[2] == 0: padding
 *     masks [B,1,1,Sk]) is staged per block beside K/V as a bias row, with
 *     -inf past Sk (no key guard in the loop); one that varies (T5's
 *     relative-position bias [1 or B,H,Sq,Sk]) is read per score;
 *   - causal: a block of query rows [q0, q0+64) stops after key q0+63, so
 *     about half the blocks are skipped; query blocks run last-first (the
 *     longest first) to balance the tail;
 *   - ragged ends (ViT's 197 tokens: 3 blocks of 64 and 5 rows/keys over):
 *     a warp whose 16 rows all lie past Sq only helps load, and in a K/V
 *     block a warp computes only the 16-key groups holding a key below
 *     kend (causal: also at or before its last row); the groups left out
 *     score -inf anyway (bias -inf past Sk, or key > row) from s = 0, so
 *     their p is 0 and their P V terms are skipped. At Sq = Sk = 197 that
 *     is 13 of 16 warps and 208 of 256 keys: 0.66 of the mma work
 *     (GPUC_ATTENTION_FULL_TILES=1: every warp and group, for an A/B).
 *
 * attention_flash2 (the same dtypes, archs and shapes, taken in place of
 * attention_flash unless GPUC_ATTN_FLASH_V1=1 or its shared memory is over
 * the arch's opt-in limit): FlashAttention-2's shape. 128 query rows a CTA
 * (4 warps of two m16 tiles: each K/V fragment read from shared memory
 * serves 32 rows, and each K/V block loaded serves twice the rows of
 * attention_flash), K/V blocks of 128 keys (64 for D or Dv > 64), two
 * stages in dynamic shared memory (D = Dv = 64: 72 KB of K/V + 18 KB of Q;
 * the runtime opts in above 48 KB), one __syncthreads a block: block c + 1
 * is loaded into block c - 1's buffer right after the barrier that block c
 * waits at. Q sits in shared memory and its A fragments are read again by
 * ldmatrix for every block, so S (32 x 128 floats a warp) and O stay in
 * 255 registers without spills. The grid is 1-D, the query blocks of one
 * (batch, head) side by side, so the CTAs in flight share their K/V in L2
 * (grid (B*H, query blocks) had the CTAs in flight read every head's K/V
 * at once). Without a mask, p = 2^(s * scale*log2(e) - max) is one FMA and
 * one ex2.approx (the row max taken of the raw scores). Padding rows,
 * per-score biases, causal skipping and ragged ends as attention_flash,
 * per warp of 32 rows; a block where the warp computes every 16-key group
 * and masks no key (none past SK, none after its rows) runs a copy of the
 * loops without those guards (FULL). GPUC_ATTN_FLASH_CFG=NW,WM,BN,NBUF[,QSMEM] picks
 * another shape (warps, m16 tiles a warp, keys a block, stages, Q in
 * shared memory) for GPU timing.
 *   H200, fp16, medians (tests/gpu/flash2_ab.sh, 2026-12-03), attention_flash
 *   -> attention_flash2, PyTorch SDPA beside: [32,8,1500,64] (Whisper-base
 *   b32) 0.851 -> 0.555 ms (173 -> 266 TFLOP/s; SDPA 0.414), with a padding
 *   row 0.856 -> 0.633 (SDPA 0.674); [4,8,4096,64] 0.731 -> 0.461 (298
 *   TFLOP/s; SDPA 0.338); [2,8,1500,128] 0.126 -> 0.092 (SDPA 0.064);
 *   [1,8,1500,64] 0.050 -> 0.035 (SDPA 0.037); causal [4,8,1500,64] 0.072 ->
 *   0.065 (SDPA 0.063); ViT's [32,12,197,64] 0.040 -> 0.037 (SDPA 0.052); a
 *   per-score [1,H,S,S] bias 0.229 -> 0.219 (SDPA 0.094: the bias, read a
 *   half at a time after the Q K^T mma, is what is slow). Other shapes at
 *   [32,8,1500,64]: 3 stages 0.776, 64-key blocks 0.639, 8 warps x 1 tile
 *   (128-key) 0.794, (64-key, Q in registers) 0.841, 4 warps x 1 tile 0.674.
 *   Inside Whisper's plan (Q/K/V strided views of the QKV GEMM) the step
 *   takes 0.654 ms (attention_flash 0.939).
 *
 * attention_rows (any float dtype, any arch: the fp32 path of grouped or
 * causal attention): one warp per query row, keys in steps of 32 (lane j
 * scores key k0+j against the row, held in shared memory as float), the
 * same online softmax, and lane d accumulates output columns d + 32c from
 * V rows read coalesced. Causal: keys 0..row; with a finite causal_fill
 * (PyTorch's float-min masks in fp32) a row whose keys 0..row are all
 * masked then takes the rest at q.k + fill, as the full mask did (its
 * softmax is uniform over every key, not only 0..row). Plain and slower
 * than the tiled FMA kernel;
 * lower_Attention sends fp32 here only for what that kernel cannot do. */
#include "lower_util.h"
#include "infer_linalg.h"
#include "lower_attention_stream.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define LL(v) ((long long)(v))

/* lower_attention.c's mma.sync / ldmatrix / cp.async helpers and its
 * template substitution */
void emit_subst(StrBuf *b, const char *body, int n, const char *const *keys, const char *const *vals);

static const char *flash_body =
  "  __shared__ __align__(16) T ks[NBUF * 64 * KP];\n"
  "  __shared__ __align__(16) T vs[NBUF * 64 * VP];\n"
  "  __shared__ __align__(16) float bias[NBUF * 64];\n"
  "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;\n"
  "  const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: this lane addresses row lr of matrix lm */\n"
  "  const i64 bh = blockIdx.x, b = bh / H, h = bh % H, hk = h / G;\n"
  "  const int qblk = CAUSAL ? (int)(gridDim.y - 1 - blockIdx.y) : (int)blockIdx.y;\n"
  "  const int q0 = qblk * 64, r0 = q0 + warp * 16 + g; /* this lane's rows: r0, r0 + 8 */\n"
  "  const bool live = !TRIM || q0 + warp * 16 < SQ; /* else the warp only helps load */\n"
  "  const T* qb = q + QO + b * QS0 + h * QS1;\n"
  "  const T* kb = k + KO + b * KS0 + hk * KS1;\n"
  "  const T* vb = v + VO + b * VS0 + hk * VS1;\n"
  "  /* K and V block cc (keys 64cc..) into buffer bf; keys past SK are zeros\n"
  "   * (0 * a finite V stays 0) with bias -inf */\n"
  "  auto load = [&](int cc, int bf) {\n"
  "    const int k0 = cc * 64;\n"
  "    for (int i = tid; i < 64 * (D / 8); i += 128) {\n"
  "      const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;\n"
  "      T* dst = &ks[(bf * 64 + r) * KP + c];\n"
  "      if (k0 + r < SK) cp_async16(dst, kb + (i64)(k0 + r) * KS2 + c);\n"
  "      else *(uint4*)dst = make_uint4(0u, 0u, 0u, 0u);\n"
  "    }\n"
  "    for (int i = tid; i < 64 * (DV / 8); i += 128) {\n"
  "      const int r = i / (DV / 8), c = (i - r * (DV / 8)) * 8;\n"
  "      T* dst = &vs[(bf * 64 + r) * VP + c];\n"
  "      if (k0 + r < SK) cp_async16(dst, vb + (i64)(k0 + r) * VS2 + c);\n"
  "      else *(uint4*)dst = make_uint4(0u, 0u, 0u, 0u);\n"
  "    }\n"
  "    if (tid < 64) { const int j = k0 + tid; bias[bf * 64 + tid] = j < SK ? BIAS_ROW : NEG_INF; }\n"
  "  };\n"
  "  unsigned qf[KD][4]; /* Q as A fragments; rows past SQ are 0 */\n"
  "#pragma unroll\n"
  "  for (int kk = 0; kk < KD; kk++)\n"
  "#pragma unroll\n"
  "    for (int i = 0; i < 4; i++) {\n"
  "      const int row = r0 + (i & 1) * 8, col = kk * 16 + 2 * t + (i >> 1) * 8;\n"
  "      qf[kk][i] = row < SQ ? *(const unsigned*)(qb + (i64)row * QS2 + col) : 0u;\n"
  "    }\n"
  "  const int kend = CAUSAL ? (SK < q0 + 64 ? SK : q0 + 64) : SK, nch = (kend + 63) / 64;\n"
  "  float o[NV][4], mrow[2] = {NEG_INF, NEG_INF}, lsum[2] = {0.f, 0.f};\n"
  "#pragma unroll\n"
  "  for (int nv = 0; nv < NV; nv++) o[nv][0] = o[nv][1] = o[nv][2] = o[nv][3] = 0.f;\n"
  "  load(0, 0);\n"
  "  cp_async_commit();\n"
  "  for (int cb = 0; cb < nch; cb++) {\n"
  "    const int kc = cb * 64, buf = NBUF == 2 ? (cb & 1) : 0;\n"
  "    if (NBUF == 2 && cb + 1 < nch) {\n"
  "      load(cb + 1, (cb + 1) & 1); /* its buffer's readers passed the last barrier */\n"
  "      cp_async_commit();\n"
  "      cp_async_wait<1>(); /* this thread's moves of block cb are done */\n"
  "    } else {\n"
  "      cp_async_wait<0>();\n"
  "    }\n"
  "    __syncthreads();\n"
  "    const T* kt = ks + buf * 64 * KP;\n"
  "    const T* vt = vs + buf * 64 * VP;\n"
  "    const float* bt = bias + buf * 64;\n"
  "    if (live) {\n"
  "    /* the 16-key groups this warp computes: those holding a key below\n"
  "     * kend and, causal, one at or before the warp's last row; the others\n"
  "     * keep s = 0 and score -inf all the same (bias -inf past SK, or\n"
  "     * col > row), so their p is 0 and their P V terms are skipped */\n"
  "    int nk = TRIM ? (kend - 1 - kc) / 16 + 1 : 4;\n"
  "    if (nk > 4) nk = 4;\n"
  "    if (TRIM && CAUSAL && (q0 - kc) / 16 + warp + 1 < nk) nk = (q0 - kc) / 16 + warp + 1;\n"
  "    float s[8][4]; /* keys kc + 8nt .. kc + 8nt + 7 */\n"
  "#pragma unroll\n"
  "    for (int nt = 0; nt < 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;\n"
  "    const T* ka = kt + ((lm >> 1) * 8 + lr) * KP + (lm & 1) * 8;\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < KD; kk++)\n"
  "#pragma unroll\n"
  "      for (int p = 0; p < 4; p++) {\n"
  "        if (p >= nk) continue;\n"
  "        unsigned bk[4];\n"
  "        ldsm_x4(bk, ka + p * 16 * KP + kk * 16);\n"
  "        mma16816(s[2 * p], qf[kk], bk[0], bk[1]);\n"
  "        mma16816(s[2 * p + 1], qf[kk], bk[2], bk[3]);\n"
  "      }\n"
  "#pragma unroll\n"
  "    for (int hr = 0; hr < 2; hr++) {\n"
  "      const int row = r0 + hr * 8;\n"
  "      float mx = NEG_INF;\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < 8; nt++) {\n"
  "        const float2 bb = *(const float2*)&bt[nt * 8 + 2 * t];\n"
  "#pragma unroll\n"
  "        for (int e = 0; e < 2; e++) {\n"
  "          const int col = kc + nt * 8 + 2 * t + e;\n"
  "          float x = fmaf(s[nt][hr * 2 + e], SCALE2, e ? bb.y : bb.x);\n"
  "          MASK_ADD\n"
  "          if (CAUSAL && col > row) x = NEG_INF;\n"
  "          (void)col;\n"
  "          s[nt][hr * 2 + e] = x;\n"
  "          mx = fmaxf(mx, x);\n"
  "        }\n"
  "      }\n"
  "      (void)row;\n"
  "      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));\n"
  "      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));\n"
  "      const float mn = fmaxf(mrow[hr], mx), mu = mn == NEG_INF ? 0.f : mn;\n"
  "      const float alpha = exp2f(mrow[hr] - mu);\n"
  "      mrow[hr] = mn;\n"
  "      float sum = 0.f;\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < 8; nt++)\n"
  "#pragma unroll\n"
  "        for (int e = 0; e < 2; e++) {\n"
  "          const float p = exp2f(s[nt][hr * 2 + e] - mu);\n"
  "          s[nt][hr * 2 + e] = p;\n"
  "          sum += p;\n"
  "        }\n"
  "      lsum[hr] = lsum[hr] * alpha + sum;\n"
  "#pragma unroll\n"
  "      for (int nv = 0; nv < NV; nv++) { o[nv][hr * 2] *= alpha; o[nv][hr * 2 + 1] *= alpha; }\n"
  "    }\n"
  "    const T* va = vt + ((lm & 1) * 8 + lr) * VP + (lm >> 1) * 8;\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < 4; kk++) {\n"
  "      if (kk >= nk) continue; /* p is 0 there */\n"
  "      const unsigned a[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),\n"
  "                             pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};\n"
  "      const T* vk = va + kk * 16 * VP;\n"
  "#pragma unroll\n"
  "      for (int p = 0; p < NV / 2; p++) {\n"
  "        unsigned bv[4];\n"
  "        ldsm_x4_trans(bv, vk + p * 16);\n"
  "        mma16816(o[2 * p], a, bv[0], bv[1]);\n"
  "        mma16816(o[2 * p + 1], a, bv[2], bv[3]);\n"
  "      }\n"
  "      if (NV & 1) {\n"
  "        unsigned bv[2];\n"
  "        ldsm_x2_trans(bv, vk + (NV - 1) * 8);\n"
  "        mma16816(o[NV - 1], a, bv[0], bv[1]);\n"
  "      }\n"
  "    }\n"
  "    } /* live */\n"
  "    __syncthreads(); /* every warp is done with this buffer */\n"
  "    if (NBUF == 1 && cb + 1 < nch) {\n"
  "      load(cb + 1, 0);\n"
  "      cp_async_commit();\n"
  "    }\n"
  "  }\n"
  "#pragma unroll\n"
  "  for (int hr = 0; hr < 2; hr++) {\n"
  "    float l = lsum[hr];\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 1);\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 2);\n"
  "    const int row = r0 + hr * 8;\n"
  "    if (row >= SQ) continue;\n"
  "    const float inv = 1.f / l;\n"
  "    T* yr = y + b * YS0 + h * YS1 + (i64)row * YS2;\n"
  "#pragma unroll\n"
  "    for (int nv = 0; nv < NV; nv++) {\n"
  "      float f0 = o[nv][hr * 2] * inv, f1 = o[nv][hr * 2 + 1] * inv;\n"
  "      NAN_TO_ZERO\n"
  "      *(unsigned*)(yr + nv * 8 + 2 * t) = pack2(f0, f1);\n"
  "    }\n"
  "  }\n"
  "}\n";

static const char *flash2_body =
  "  extern __shared__ __align__(16) unsigned char attn_smem_[];\n"
  "  T* ks = (T*)attn_smem_;                         /* NBUF blocks of BN keys x KP */\n"
  "  T* vs = ks + NBUF * BN * KP;                    /* NBUF blocks of BN keys x VP */\n"
  "  float* bias = (float*)(vs + NBUF * BN * VP);    /* NBUF x BN (ROWBIAS only) */\n"
  "  T* qsm = (T*)(bias + (ROWBIAS ? NBUF * BN : 0)); /* BM rows x KP (QSMEM only) */\n"
  "  (void)qsm;\n"
  "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;\n"
  "  const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: this lane addresses row lr of matrix lm */\n"
  "  constexpr int NQ = (SQ + BM - 1) / BM;\n"
  "  /* query blocks of one head side by side in the grid: they share K/V in L2 */\n"
  "  const int qx = (int)(blockIdx.x % NQ);\n"
  "  const i64 bh = blockIdx.x / NQ, b = bh / H, h = bh % H, hk = h / G;\n"
  "  const int qblk = CAUSAL ? NQ - 1 - qx : qx; /* causal: the longest first */\n"
  "  const int q0 = qblk * BM, w0 = q0 + warp * 16 * WM; /* this warp's rows: w0 .. w0 + 16WM - 1 */\n"
  "  const bool live = !TRIM || w0 < SQ; /* else the warp only helps load */\n"
  "  const T* qb = q + QO + b * QS0 + h * QS1;\n"
  "  const T* kb = k + KO + b * KS0 + hk * KS1;\n"
  "  const T* vb = v + VO + b * VS0 + hk * VS1;\n"
  "  /* K and V block cc (keys BN cc ..) into buffer bf; keys past SK are zeros\n"
  "   * (0 * a finite V stays 0), scored -inf */\n"
  "  auto load = [&](int cc, int bf) {\n"
  "    const int k0 = cc * BN;\n"
  "#pragma unroll\n"
  "    for (int i = tid; i < BN * (D / 8); i += NT) {\n"
  "      const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;\n"
  "      T* dst = &ks[(bf * BN + r) * KP + c];\n"
  "      if (k0 + r < SK) cp_async16(dst, kb + (i64)(k0 + r) * KS2 + c);\n"
  "      else *(uint4*)dst = make_uint4(0u, 0u, 0u, 0u);\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int i = tid; i < BN * (DV / 8); i += NT) {\n"
  "      const int r = i / (DV / 8), c = (i - r * (DV / 8)) * 8;\n"
  "      T* dst = &vs[(bf * BN + r) * VP + c];\n"
  "      if (k0 + r < SK) cp_async16(dst, vb + (i64)(k0 + r) * VS2 + c);\n"
  "      else *(uint4*)dst = make_uint4(0u, 0u, 0u, 0u);\n"
  "    }\n"
  "    if (ROWBIAS)\n"
  "      for (int i = tid; i < BN; i += NT) { const int j = k0 + i; bias[bf * BN + i] = j < SK ? BIAS_ROW : NEG_INF; }\n"
  "  };\n"
  "  /* Q as A fragments, rows past SQ 0: in registers, or (QSMEM) in shared\n"
  "   * memory, its fragments read again for every block (registers for S) */\n"
  "  unsigned qf[QSMEM ? 1 : WM][QSMEM ? 1 : KD][4];\n"
  "  if (QSMEM) {\n"
  "    for (int i = tid; i < BM * (D / 8); i += NT) {\n"
  "      const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;\n"
  "      if (q0 + r < SQ) cp_async16(&qsm[r * KP + c], qb + (i64)(q0 + r) * QS2 + c);\n"
  "      else *(uint4*)&qsm[r * KP + c] = make_uint4(0u, 0u, 0u, 0u);\n"
  "    }\n"
  "  } else\n"
  "#pragma unroll\n"
  "  for (int mt = 0; mt < WM; mt++)\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < KD; kk++)\n"
  "#pragma unroll\n"
  "      for (int i = 0; i < 4; i++) {\n"
  "        const int row = w0 + mt * 16 + g + (i & 1) * 8, col = kk * 16 + 2 * t + (i >> 1) * 8;\n"
  "        qf[QSMEM ? 0 : mt][QSMEM ? 0 : kk][i] = row < SQ ? *(const unsigned*)(qb + (i64)row * QS2 + col) : 0u;\n"
  "      }\n"
  "  const int kend = CAUSAL ? (SK < q0 + BM ? SK : q0 + BM) : SK, nch = (kend + BN - 1) / BN;\n"
  "  float o[WM][NV][4], mrow[WM][2], lsum[WM][2];\n"
  "#pragma unroll\n"
  "  for (int mt = 0; mt < WM; mt++) {\n"
  "    mrow[mt][0] = mrow[mt][1] = NEG_INF;\n"
  "    lsum[mt][0] = lsum[mt][1] = 0.f;\n"
  "#pragma unroll\n"
  "    for (int nv = 0; nv < NV; nv++) o[mt][nv][0] = o[mt][nv][1] = o[mt][nv][2] = o[mt][nv][3] = 0.f;\n"
  "  }\n"
  "  /* NBUF - 1 blocks in flight ahead of the one computed; one commit group\n"
  "   * per block (empty past the last), so wait<NBUF - 2> means block cb is here */\n"
  "#pragma unroll\n"
  "  for (int st = 0; st < NBUF - 1; st++) {\n"
  "    if (st < nch) load(st, st);\n"
  "    cp_async_commit();\n"
  "  }\n"
  "  for (int cb = 0; cb < nch; cb++) {\n"
  "    cp_async_wait<NBUF - 2>(); /* this thread's moves of block cb are done */\n"
  "    __syncthreads(); /* everyone's are; and every warp is done with block cb - 1 */\n"
  "    if (cb + NBUF - 1 < nch) load(cb + NBUF - 1, (cb + NBUF - 1) % NBUF); /* into block cb - 1's buffer */\n"
  "    cp_async_commit();\n"
  "    const int kc = cb * BN, buf = cb % NBUF;\n"
  "    const T* kt = ks + buf * BN * KP;\n"
  "    const T* vt = vs + buf * BN * VP;\n"
  "    const float* bt = bias + buf * BN;\n"
  "    (void)bt;\n"
  "    /* the 16-key groups this warp computes: those holding a key below\n"
  "     * kend and, causal, one at or before the warp's last row; the others\n"
  "     * would score -inf (past SK, or col > row): p 0, no P V term */\n"
  "    int nk = BN / 16;\n"
  "    if (TRIM && (kend - 1 - kc) / 16 + 1 < nk) nk = (kend - 1 - kc) / 16 + 1;\n"
  "    if (TRIM && CAUSAL && w0 + 16 * WM - 1 - kc < 16 * nk) nk = w0 + 16 * WM - 1 - kc < 0 ? 0 : (w0 + 16 * WM - 1 - kc) / 16 + 1;\n"
  "    if (!live || nk == 0) continue; /* every p would be 0: nothing changes */\n"
  "    const bool tail = kc + BN > SK; /* keys past SK in this block */\n"
  "    (void)tail;\n"
  "    /* FULL: every group computed, no key to mask (past SK, or causal\n"
  "     * after a row of this warp): the unrolled loops without guards */\n"
  "    auto compute = [&](auto fullc) {\n"
  "    constexpr bool FULL = decltype(fullc)::value;\n"
  "    float s[WM][NS][4]; /* keys kc + 8nt .. kc + 8nt + 7 */\n"
  "#pragma unroll\n"
  "    for (int mt = 0; mt < WM; mt++)\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < NS; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;\n"
  "    const T* ka = kt + ((lm >> 1) * 8 + lr) * KP + (lm & 1) * 8;\n"
  "    const T* qa = qsm + (warp * 16 * WM + (lm & 1) * 8 + lr) * KP + (lm >> 1) * 8;\n"
  "    (void)qa;\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < KD; kk++) {\n"
  "      unsigned qk[WM][4];\n"
  "#pragma unroll\n"
  "      for (int mt = 0; mt < WM; mt++)\n"
  "        if (QSMEM) ldsm_x4(qk[mt], qa + mt * 16 * KP + kk * 16);\n"
  "        else for (int i = 0; i < 4; i++) qk[mt][i] = qf[QSMEM ? 0 : mt][QSMEM ? 0 : kk][i];\n"
  "#pragma unroll\n"
  "      for (int p = 0; p < BN / 16; p++) {\n"
  "        if (!FULL && p >= nk) continue;\n"
  "        unsigned bk[4];\n"
  "        ldsm_x4(bk, ka + p * 16 * KP + kk * 16);\n"
  "#pragma unroll\n"
  "        for (int mt = 0; mt < WM; mt++) {\n"
  "          mma16816(s[mt][2 * p], qk[mt], bk[0], bk[1]);\n"
  "          mma16816(s[mt][2 * p + 1], qk[mt], bk[2], bk[3]);\n"
  "        }\n"
  "      }\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int mt = 0; mt < WM; mt++)\n"
  "#pragma unroll\n"
  "    for (int hr = 0; hr < 2; hr++) {\n"
  "      const int row = w0 + mt * 16 + g + hr * 8;\n"
  "      float mx = NEG_INF;\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < NS; nt++) {\n"
  "#pragma unroll\n"
  "        for (int e = 0; e < 2; e++) {\n"
  "          const int col = kc + nt * 8 + 2 * t + e;\n"
  "          float x = s[mt][nt][hr * 2 + e];\n"
  "          if (!FOLD) {\n"
  "            x = fmaf(x, SCALE2, ROWBIAS ? bt[nt * 8 + 2 * t + e] : 0.f);\n"
  "            MASK_ADD\n"
  "          }\n"
  "          if (!FULL && !ROWBIAS && tail && col >= SK) x = NEG_INF;\n"
  "          if (!FULL && CAUSAL && col > row) x = NEG_INF;\n"
  "          (void)col;\n"
  "          s[mt][nt][hr * 2 + e] = x;\n"
  "          mx = fmaxf(mx, x);\n"
  "        }\n"
  "      }\n"
  "      (void)row;\n"
  "      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));\n"
  "      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));\n"
  "      if (FOLD) mx *= SCALE2; /* SCALE2 > 0: the max of the scaled scores */\n"
  "      const float mn = fmaxf(mrow[mt][hr], mx), mu = mn == NEG_INF ? 0.f : mn;\n"
  "      const float alpha = ex2_approx(mrow[mt][hr] - mu);\n"
  "      mrow[mt][hr] = mn;\n"
  "      float sum = 0.f;\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < NS; nt++)\n"
  "#pragma unroll\n"
  "        for (int e = 0; e < 2; e++) {\n"
  "          const float x = s[mt][nt][hr * 2 + e];\n"
  "          const float p = ex2_approx(FOLD ? fmaf(x, SCALE2, -mu) : x - mu);\n"
  "          s[mt][nt][hr * 2 + e] = p;\n"
  "          sum += p;\n"
  "        }\n"
  "      lsum[mt][hr] = lsum[mt][hr] * alpha + sum;\n"
  "#pragma unroll\n"
  "      for (int nv = 0; nv < NV; nv++) { o[mt][nv][hr * 2] *= alpha; o[mt][nv][hr * 2 + 1] *= alpha; }\n"
  "    }\n"
  "    /* P V: the scores' C fragments are P's A fragments, no shared round trip */\n"
  "    const T* va = vt + ((lm & 1) * 8 + lr) * VP + (lm >> 1) * 8;\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < BN / 16; kk++) {\n"
  "      if (!FULL && kk >= nk) continue; /* p is 0 there */\n"
  "      unsigned a[WM][4];\n"
  "#pragma unroll\n"
  "      for (int mt = 0; mt < WM; mt++) {\n"
  "        a[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);\n"
  "        a[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);\n"
  "        a[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);\n"
  "        a[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);\n"
  "      }\n"
  "      const T* vk = va + kk * 16 * VP;\n"
  "#pragma unroll\n"
  "      for (int p = 0; p < NV / 2; p++) {\n"
  "        unsigned bv[4];\n"
  "        ldsm_x4_trans(bv, vk + p * 16);\n"
  "#pragma unroll\n"
  "        for (int mt = 0; mt < WM; mt++) {\n"
  "          mma16816(o[mt][2 * p], a[mt], bv[0], bv[1]);\n"
  "          mma16816(o[mt][2 * p + 1], a[mt], bv[2], bv[3]);\n"
  "        }\n"
  "      }\n"
  "      if (NV & 1) {\n"
  "        unsigned bv[2];\n"
  "        ldsm_x2_trans(bv, vk + (NV - 1) * 8);\n"
  "#pragma unroll\n"
  "        for (int mt = 0; mt < WM; mt++) mma16816(o[mt][NV - 1], a[mt], bv[0], bv[1]);\n"
  "      }\n"
  "    }\n"
  "    };\n"
  "    if (nk == BN / 16 && !(!ROWBIAS && tail) && !(CAUSAL && kc + BN - 1 > w0)) compute(BoolC<true>());\n"
  "    else compute(BoolC<false>());\n"
  "  }\n"
  "  cp_async_wait<0>(); /* no copy left in flight at exit */\n"
  "#pragma unroll\n"
  "  for (int mt = 0; mt < WM; mt++)\n"
  "#pragma unroll\n"
  "  for (int hr = 0; hr < 2; hr++) {\n"
  "    float l = lsum[mt][hr];\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 1);\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 2);\n"
  "    const int row = w0 + mt * 16 + g + hr * 8;\n"
  "    if (row >= SQ) continue;\n"
  "    const float inv = 1.f / l;\n"
  "    T* yr = y + b * YS0 + h * YS1 + (i64)row * YS2;\n"
  "#pragma unroll\n"
  "    for (int nv = 0; nv < NV; nv++) {\n"
  "      float f0 = o[mt][nv][hr * 2] * inv, f1 = o[mt][nv][hr * 2 + 1] * inv;\n"
  "      NAN_TO_ZERO\n"
  "      *(unsigned*)(yr + nv * 8 + 2 * t) = pack2(f0, f1);\n"
  "    }\n"
  "  }\n"
  "}\n";

static const char *rows_body =
  "  __shared__ float qs[4][D];\n"
  "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
  "  const i64 bh = blockIdx.x, b = bh / H, h = bh % H, hk = h / G;\n"
  "  const T* kb = k + KO + b * KS0 + hk * KS1;\n"
  "  const T* vb = v + VO + b * VS0 + hk * VS1;\n"
  "  /* no block barrier below: each warp works alone, rows strided by the grid */\n"
  "  for (int row = blockIdx.y * 4 + warp; row < SQ; row += gridDim.y * 4) {\n"
  "  const T* qr = q + QO + b * QS0 + h * QS1 + (i64)row * QS2;\n"
  "  __syncwarp(); /* the last row's readers of qs are done */\n"
  "  for (int d = lane; d < D; d += 32) qs[warp][d] = ldf(qr[d]);\n"
  "  __syncwarp();\n"
  "  int kbeg = 0, kend = CAUSAL ? (SK < row + 1 ? SK : row + 1) : SK;\n"
  "  float m = NEG_INF, l = 0.f, acc[DC];\n"
  "#pragma unroll\n"
  "  for (int c = 0; c < DC; c++) acc[c] = 0.f;\n"
  "  for (;;) { /* keys [kbeg, kend): up to the diagonal, then (FILL) maybe the rest */\n"
  "  for (int k0 = kbeg; k0 < kend; k0 += 32) {\n"
  "    const int j = k0 + lane;\n"
  "    float x = NEG_INF;\n"
  "    if (j < kend) {\n"
  "      const T* kr = kb + (i64)j * KS2;\n"
  "      float dot = 0.f;\n"
  "      for (int d = 0; d < D; d++) dot = fmaf(qs[warp][d], ldf(kr[d]), dot);\n"
  "      x = dot * SCALE;\n"
  "      if (FILL && j > row) x += CFILL;\n"
  "      else { MASK_ADD }\n"
  "    }\n"
  "    float mt = x;\n"
  "#pragma unroll\n"
  "    for (int s = 16; s > 0; s >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, s));\n"
  "    const float mn = fmaxf(m, mt), mu = mn == NEG_INF ? 0.f : mn;\n"
  "    const float alpha = expf(m - mu), p = expf(x - mu);\n"
  "    float ps = p;\n"
  "#pragma unroll\n"
  "    for (int s = 16; s > 0; s >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, s);\n"
  "    l = l * alpha + ps;\n"
  "    m = mn;\n"
  "#pragma unroll\n"
  "    for (int c = 0; c < DC; c++) acc[c] *= alpha;\n"
  "    const int nk = kend - k0 < 32 ? kend - k0 : 32;\n"
  "    for (int jj = 0; jj < nk; jj++) {\n"
  "      const float pj = __shfl_sync(0xffffffffu, p, jj);\n"
  "      const T* vr = vb + (i64)(k0 + jj) * VS2;\n"
  "#pragma unroll\n"
  "      for (int c = 0; c < DC; c++)\n"
  "        if (lane + 32 * c < DV) acc[c] = fmaf(pj, ldf(vr[lane + 32 * c]), acc[c]);\n"
  "    }\n"
  "  }\n"
  "  /* finite causal_fill: a row whose keys 0..row were all masked (max <= fill / 2)\n"
  "   * scores the keys above the diagonal too, at q.k + fill, as the float-min mask did\n"
  "   * (uniform over every key); any other row's max is > fill / 2, where those keys'\n"
  "   * exp(x - max) is 0 anyway (m is the same in every lane of the warp) */\n"
  "  if (!FILL || kend == SK || !(m <= 0.5f * CFILL)) break;\n"
  "  kbeg = kend;\n"
  "  kend = SK;\n"
  "  }\n"
  "  const float inv = 1.f / l;\n"
  "  T* yr = y + b * YS0 + h * YS1 + (i64)row * YS2;\n"
  "#pragma unroll\n"
  "  for (int c = 0; c < DC; c++) {\n"
  "    const int d = lane + 32 * c;\n"
  "    if (d >= DV) continue;\n"
  "    float val = acc[c] * inv;\n"
  "    NAN_TO_ZERO\n"
  "    yr[d] = stf<T>(val);\n"
  "  }\n"
  "  }\n"
  "}\n";

static void signature(StrBuf *b, const char *name, const char *T, const Tensor *mask, int threads) {
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const %s* __restrict__ q, "
               "const %s* __restrict__ k, const %s* __restrict__ v, ", threads, name, T, T, T);
  if (mask) sb_printf(b, "const %s* __restrict__ mask, ", cg_ctype(mask->dt));
  sb_printf(b, "%s* __restrict__ y) {\n", T);
}

/* grid (B*H, ceil(Sq/rows)), y capped at 65535 (the rows kernel strides
 * over the rest; gpuc_attention_lowerable keeps the flash kernel's y
 * within it) */
static int launch(LowerCtx *c, const char *name, const GpucAttnGeom *a, int rows, bool tensor) {
  int64_t gy = (a->Sq + rows - 1) / rows;
  if (gy > 65535 && tensor) return lower_fail(c, "internal: %lld query blocks, over the grid's 65535", LL(gy));
  unsigned grid[3] = {(unsigned)(a->B * a->H), (unsigned)(gy > 65535 ? 65535 : gy), 1};
  unsigned blk[3] = {128, 1, 1};
  uint32_t args[5] = {c->tin[0], c->tin[1], c->tin[2]};
  int nargs = 3;
  if (c->nin > 3) args[nargs++] = c->tin[3];
  args[nargs++] = c->tout[0];
  if (cg_launch_grid(c, name, grid, blk, 0, nargs, args)) return -1;
  if (tensor) cg_mark_tensor_math(c);
  return 0;
}

/* shared memory of attention_flash with nbuf buffers, in bytes */
static int64_t flash_smem(const GpucAttnGeom *a, int nbuf) {
  return nbuf * (2 * 64 * ((a->D + 8) + (a->Dv + 8)) + 4 * 64);
}

bool attention_flash_fits(const GpucAttnGeom *a, GpucDType dt, int sm) {
  return (dt == GPUC_DT_F16 || dt == GPUC_DT_BF16) && sm >= 80 && a->D % 16 == 0 && a->Dv % 8 == 0 &&
         a->D <= 128 && a->Dv <= 128 && flash_smem(a, 1) <= 48 * 1024;
}

static int attention_flash(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4]) {
  char mb[48];
  attention_mask_batch(a, mb, sizeof mb);
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  const char *T = cg_ctype(c->in[0]->dt);
  int nbuf = flash_smem(a, 2) <= 48 * 1024 ? 2 : 1;
  bool causal = gpuc_attr_i(c->n, "causal", 0) != 0;
  char scale2[64], bias[256], madd[320];
  cg_float_lit(scale2, sizeof scale2, (float)(gpuc_attr_f(c->n, "scale", 1.0f) * 1.4426950408889634), "float");
  attention_mask_terms(mask != NULL, mask && ms[2] == 0, mb, ms, bias, madd);
  const char *nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) ? "if (!(l > 0.f)) f0 = f1 = 0.f; /* 0 or NaN */" : "";
  StrBuf *b = cg_src(c);
  mma_helpers(b);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "/* attention streamed over K/V (tensor cores): Q [%lld,%lld,%lld,%lld], K/V %lld heads, %lld keys, "
               "DV %lld%s, %d buffers, %lld bytes of shared memory */\n",
            LL(a->B), LL(a->H), LL(a->Sq), LL(a->D), LL(a->Hk), LL(a->Sk), LL(a->Dv), causal ? ", causal" : "", nbuf,
            LL(flash_smem(a, nbuf)));
  signature(b, name, T, mask, 128);
  sb_printf(b, "  typedef %s T;\n"
               "  constexpr int D = %lld, DV = %lld, SQ = %lld, SK = %lld, H = %lld, G = %lld, NBUF = %d;\n"
               "  constexpr bool CAUSAL = %s, TRIM = %s;\n"
               "  constexpr int KD = D / 16, NV = DV / 8, KP = D + 8, VP = DV + 8;\n"
               "  const float SCALE2 = %s, LOG2E = 1.44269504f, NEG_INF = -__int_as_float(0x7f800000);\n"
               "  (void)LOG2E;\n",
            T, LL(a->D), LL(a->Dv), LL(a->Sq), LL(a->Sk), LL(a->H), LL(a->H / a->Hk), nbuf, causal ? "true" : "false",
            attention_trim_tiles() ? "true" : "false", scale2);
  attention_emit_strides(b, a);
  const char *keys[] = {"BIAS_ROW", "MASK_ADD", "NAN_TO_ZERO", "mma16816(", "pack2("};
  const char *vals[] = {bias, madd, nan0, "mma16816<T>(", "pack2<T>("};
  emit_subst(b, flash_body, 5, keys, vals);
  return launch(c, name, a, 64, true);
}

/* attention_flash2's shape: NW warps of WM m16 tiles (BM = 16 NW WM query
 * rows a CTA), K/V blocks of BN keys, NBUF shared-memory stages */
typedef struct { int nw, wm, bn, nbuf, qsmem; } Flash2Cfg;

static int64_t flash2_smem(const GpucAttnGeom *a, Flash2Cfg f, bool rowbias) {
  return (int64_t)f.nbuf * f.bn * (2 * ((a->D + 8) + (a->Dv + 8)) + (rowbias ? 4 : 0)) +
         (f.qsmem ? 2LL * 16 * f.nw * f.wm * (a->D + 8) : 0);
}

/* the opt-in shared memory a CTA may have (cuFuncSetAttribute, set by the
 * runtime for a step over 48 KB): sm_80/87 163 KB, sm_90/100 227 KB, the
 * others 99 KB */
static int64_t smem_optin(int sm) {
  if (sm == 80 || sm == 87) return 163 * 1024;
  if (sm == 90 || sm == 100) return 227 * 1024;
  return 99 * 1024;
}

/* GPUC_ATTN_FLASH_CFG=NW,WM,BN,NBUF picks the shape (a GPU lab switch);
 * else 4 warps of 2 tiles (128 rows), 128-key blocks, 2 stages: the shape
 * FlashAttention-2 takes at head dim 64 (D > 64: 64-key blocks, so S and
 * the output accumulators stay in registers) */
static Flash2Cfg flash2_cfg(const GpucAttnGeom *a) {
  Flash2Cfg f = {4, 2, a->D > 64 || a->Dv > 64 ? 64 : 128, 2, 1};
  const char *e = getenv("GPUC_ATTN_FLASH_CFG");
  Flash2Cfg g;
  g.qsmem = 0;
  if (e && sscanf(e, "%d,%d,%d,%d,%d", &g.nw, &g.wm, &g.bn, &g.nbuf, &g.qsmem) >= 4 && g.nw >= 1 && g.nw <= 16 &&
      (g.wm == 1 || g.wm == 2) && (g.bn == 64 || g.bn == 128) && g.nbuf >= 2 && g.nbuf <= 4)
    f = g;
  return f;
}

static bool env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0");
}

static int attention_flash2(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4], Flash2Cfg f) {
  char mb[48];
  attention_mask_batch(a, mb, sizeof mb);
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  const char *T = cg_ctype(c->in[0]->dt);
  bool causal = gpuc_attr_i(c->n, "causal", 0) != 0, rowbias = mask && ms[2] == 0;
  float scale2f = (float)(gpuc_attr_f(c->n, "scale", 1.0f) * 1.4426950408889634);
  /* no mask and a positive scale: the row max is taken of the raw scores
   * and p = 2^(s * scale2 - max) is one FMA and one ex2 */
  bool fold = !mask && scale2f > 0.f;
  char scale2[64], bias[256], madd[320];
  cg_float_lit(scale2, sizeof scale2, scale2f, "float");
  attention_mask_terms(mask != NULL, rowbias, mb, ms, bias, madd);
  const char *nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) ? "if (!(l > 0.f)) f0 = f1 = 0.f; /* 0 or NaN */" : "";
  int64_t smem = flash2_smem(a, f, rowbias), bm = 16 * f.nw * f.wm, nq = (a->Sq + bm - 1) / bm;
  StrBuf *b = cg_src(c);
  mma_helpers(b);
  static const char *marker = "/* gpuc attention ex2 helper */";
  if (!b->s || !strstr(b->s, marker))
    sb_printf(b, "%s\n__device__ __forceinline__ float ex2_approx(float x) {\n"
                 "  float y;\n  asm(\"ex2.approx.ftz.f32 %%0, %%1;\" : \"=f\"(y) : \"f\"(x));\n  return y;\n}\n"
                 "template <bool B> struct BoolC { static constexpr bool value = B; };\n", marker);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "/* attention streamed over K/V (tensor cores), %d warps x %d row tiles, %d-key blocks: "
               "Q [%lld,%lld,%lld,%lld], K/V %lld heads, %lld keys, DV %lld%s, %d stages, %lld bytes of shared memory */\n",
            f.nw, f.wm, f.bn, LL(a->B), LL(a->H), LL(a->Sq), LL(a->D), LL(a->Hk), LL(a->Sk), LL(a->Dv),
            causal ? ", causal" : "", f.nbuf, LL(smem));
  signature(b, name, T, mask, 32 * f.nw);
  sb_printf(b, "  typedef %s T;\n"
               "  constexpr int D = %lld, DV = %lld, SQ = %lld, SK = %lld, H = %lld, G = %lld;\n"
               "  constexpr int NW = %d, WM = %d, BN = %d, NBUF = %d, NT = 32 * NW, BM = 16 * NW * WM;\n"
               "  constexpr bool CAUSAL = %s, TRIM = %s, ROWBIAS = %s, FOLD = %s, QSMEM = %s;\n"
               "  constexpr int KD = D / 16, NV = DV / 8, NS = BN / 8, KP = D + 8, VP = DV + 8;\n"
               "  const float SCALE2 = %s, LOG2E = 1.44269504f, NEG_INF = -__int_as_float(0x7f800000);\n"
               "  (void)LOG2E;\n",
            T, LL(a->D), LL(a->Dv), LL(a->Sq), LL(a->Sk), LL(a->H), LL(a->H / a->Hk), f.nw, f.wm, f.bn, f.nbuf,
            causal ? "true" : "false", attention_trim_tiles() ? "true" : "false", rowbias ? "true" : "false",
            fold ? "true" : "false", f.qsmem ? "true" : "false", scale2);
  attention_emit_strides(b, a);
  const char *keys[] = {"BIAS_ROW", "MASK_ADD", "NAN_TO_ZERO", "mma16816(", "pack2("};
  const char *vals[] = {bias, madd, nan0, "mma16816<T>(", "pack2<T>("};
  emit_subst(b, flash2_body, 5, keys, vals);
  unsigned grid[3] = {(unsigned)(nq * a->B * a->H), 1, 1};
  unsigned blk[3] = {(unsigned)(32 * f.nw), 1, 1};
  uint32_t args[5] = {c->tin[0], c->tin[1], c->tin[2]};
  int nargs = 3;
  if (c->nin > 3) args[nargs++] = c->tin[3];
  args[nargs++] = c->tout[0];
  if (cg_launch_grid(c, name, grid, blk, (unsigned)smem, nargs, args)) return -1;
  cg_mark_tensor_math(c);
  return 0;
}

static int attention_rows(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4]) {
  char mb[48];
  attention_mask_batch(a, mb, sizeof mb);
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  const char *T = cg_ctype(c->in[0]->dt);
  bool causal = gpuc_attr_i(c->n, "causal", 0) != 0;
  float cfill = gpuc_attr_f(c->n, "causal_fill", -INFINITY);
  bool fill = causal && isfinite(cfill);
  char scale[64], fill_lit[64], madd[320];
  cg_float_lit(scale, sizeof scale, gpuc_attr_f(c->n, "scale", 1.0f), "float");
  cg_float_lit(fill_lit, sizeof fill_lit, fill ? cfill : 0.f, "float");
  madd[0] = 0;
  if (mask)
    snprintf(madd, sizeof madd, "x += ldf(mask[%s * %lldLL + h * %lldLL + (i64)row * %lldLL + (i64)j * %lldLL]);",
             mb, LL(ms[0]), LL(ms[1]), LL(ms[2]), LL(ms[3]));
  const char *nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) ? "if (!(l > 0.f)) val = 0.f; /* 0 or NaN */" : "";
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "/* attention, a warp per query row: Q [%lld,%lld,%lld,%lld], K/V %lld heads, %lld keys, "
               "DV %lld%s%s */\n",
            LL(a->B), LL(a->H), LL(a->Sq), LL(a->D), LL(a->Hk), LL(a->Sk), LL(a->Dv), causal ? ", causal" : "",
            fill ? ", finite causal fill" : "");
  signature(b, name, T, mask, 128);
  sb_printf(b, "  typedef %s T;\n"
               "  constexpr int D = %lld, DV = %lld, SQ = %lld, SK = %lld, H = %lld, G = %lld, DC = (DV + 31) / 32;\n"
               "  constexpr bool CAUSAL = %s, FILL = %s;\n"
               "  const float SCALE = %s, CFILL = %s, NEG_INF = -__int_as_float(0x7f800000);\n"
               "  (void)CFILL;\n",
            T, LL(a->D), LL(a->Dv), LL(a->Sq), LL(a->Sk), LL(a->H), LL(a->H / a->Hk), causal ? "true" : "false",
            fill ? "true" : "false", scale, fill_lit);
  attention_emit_strides(b, a);
  const char *keys[] = {"MASK_ADD", "NAN_TO_ZERO"};
  const char *vals[] = {madd, nan0};
  emit_subst(b, rows_body, 2, keys, vals);
  return launch(c, name, a, 4, false);
}

int lower_attention_stream(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4], bool tensor_cores) {
  if (a->Hk < 1 || a->H % a->Hk) return lower_fail(c, "internal: K/V heads %lld do not divide %lld", LL(a->Hk), LL(a->H));
  /* a finite causal_fill (fp32 storage: half rounds PyTorch's float min to
   * -inf) takes the rows kernel's second pass over the keys above the diagonal */
  bool fill = gpuc_attr_i(c->n, "causal", 0) && isfinite(gpuc_attr_f(c->n, "causal_fill", -INFINITY));
  if (tensor_cores && !fill && attention_flash_fits(a, c->in[0]->dt, c->opt->sm)) {
    /* attention_flash2 unless GPUC_ATTN_FLASH_V1=1 (the first kernel, for
     * A/B runs) or its shared memory is over the arch's opt-in limit */
    Flash2Cfg f = flash2_cfg(a);
    bool rowbias = c->nin > 3 && ms[2] == 0;
    if (!env_on("GPUC_ATTN_FLASH_V1") && flash2_smem(a, f, rowbias) <= smem_optin(c->opt->sm) &&
        (a->Sq + 16 * f.nw * f.wm - 1) / (16 * f.nw * f.wm) * a->B * a->H <= 0x7fffffff)
      return attention_flash2(c, a, ms, f);
    return attention_flash(c, a, ms);
  }
  return attention_rows(c, a, ms);
}
