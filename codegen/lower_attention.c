/* Attention(Q, K, V, mask?) as one kernel that never writes the scores.
 *
 * Shapes (static, baked in): Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,DV],
 * mask broadcast to [B,H,Sq,Sk] by strides (0 on broadcast dims), Y
 * [B,H,Sq,DV]; each tensor may instead be stored [B,S,H,D] (attribute
 * bshd), Q, K and V may be strided views at an offset of the tensor read
 * (attributes view/dims: one QKV GEMM output [B,S,3,H,D] read three
 * times), Y's axes permuted (y_perm): rows are addressed by the offsets
 * and strides of GpucAttnGeom, the last axis contiguous. The tensor-core
 * kernels move rows 16 bytes at a time, so they need every offset and
 * stride a multiple of 8 halves (rows_aligned); else the FMA kernel runs.
 * Limits: gpuc_attention_lowerable.
 *
 * Three kernels: f16/bf16 with D % 16 == 0 and DV % 8 == 0 on sm_80+ use
 * tensor cores: attention_mma_kv when the block's Q tile and all of K and
 * V fit in shared memory (BERT's S 128, D 64), else the tiled
 * attention_mma (both below); everything else the fp32-FMA kernel
 * (attention_fma), described here.
 *
 * Grid (B*H, ceil(Sq/BQ)); a block of ATT_WARPS warps owns BQ = ATT_WARPS *
 * ATT_ROWS query rows of one (b,h): each warp ATT_ROWS rows. The block
 * walks the keys in tiles of BK = 32, staged through shared memory as
 * float (K rows padded so lane j reading key j's row hits distinct banks):
 *   1. lane j computes the scores of key k0+j against the warp's rows
 *      (Q tile in shared memory, read as broadcasts), times scale, plus
 *      the mask element; keys past Sk score -inf.
 *   2. online softmax per row, in fp32: running max m and sum l; a new
 *      max rescales l and the accumulator by exp(m_old - m_new). A row
 *      whose scores are all -inf so far uses 0 as its max, so exp() stays
 *      0 instead of NaN (the unfused Softmax gives NaN for a row that is
 *      -inf throughout: here l stays 0 and 0/0 gives the same NaN).
 *   3. P (this warp's rows x 32 keys) goes to shared memory; each lane
 *      accumulates output columns d = lane + 32c of every row.
 * Finally y = acc / l, written once in Y's dtype; with nan_to_zero a row
 * whose l is 0 or NaN (the unfused Where(IsNaN(P), 0, P) zeroes every
 * probability of such a row) writes 0. */
#include "lower_util.h"
#include "infer_linalg.h"
#include "lower_attention_stream.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LL(v) ((long long)(v))
enum { ATT_WARPS = 4, ATT_ROWS = 4, ATT_BQ = ATT_WARPS * ATT_ROWS, ATT_BK = 32 };

/* ---- f16/bf16 on sm_80+: tensor cores (mma.sync m16n8k16, fp32 accumulate)
 *
 * Needs D % 16 == 0 and DV % 8 == 0. Grid (B*H, ceil(Sq/64)); 4 warps, each
 * owns 16 query rows; key tiles of BK = 64. Fragment layouts (PTX ISA,
 * m16n8k16, g = lane / 4, t = lane % 4; a register holds two halves, the
 * lower index in the low half):
 *   A 16x16 (row-major): reg0 (row g, cols 2t,2t+1), reg1 (row g+8, same),
 *                        reg2 (row g, cols 2t+8,2t+9), reg3 (row g+8, same)
 *   B 16x8 (k x n):      reg0 (k 2t,2t+1, col g), reg1 (k 2t+8,2t+9, col g)
 *   C 16x8 f32:          c0,c1 (row g, cols 2t,2t+1), c2,c3 (row g+8, same)
 * S = Q K^T: A = Q rows (held in registers for the whole kernel), B(k=d,
 * n=key) = K[key][d]: two consecutive d of one K row in shared memory.
 * O += P V: the S accumulators of n-tiles 2kk and 2kk+1, rounded to
 * half, are exactly the A fragment of k-step kk (keys 16kk..16kk+15); B(k=
 * key, n=d) = V[key][d] is read from V stored transposed (vt[d][key]).
 * Shared rows are padded by 8 halves so a fragment load (8 rows g x 4
 * words t) hits 32 distinct banks. Softmax as the fp32 kernel, per row
 * over the 4 lanes of a quad: the max is reduced every tile, the sum stays
 * per lane (rescaled by the same alpha) and is reduced once at the end. */
static const char *mma_body =
  "  __shared__ __align__(16) T ks[BK * KP];\n"
  "  __shared__ __align__(16) T vt[DV * VP];\n"
  "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;\n"
  "  const i64 bh = blockIdx.x, b = bh / H, h = bh % H;\n"
  "  const int r0 = blockIdx.y * 64 + warp * 16 + g; /* this lane's rows: r0, r0 + 8 */\n"
  "  const T* qb = q + QO + b * QS0 + h * QS1;\n"
  "  const T* kb = k + KO + b * KS0 + h * KS1;\n"
  "  const T* vb = v + VO + b * VS0 + h * VS1;\n"
  "  unsigned qf[KD][4]; /* Q as A fragments; rows past SQ are 0 */\n"
  "#pragma unroll\n"
  "  for (int kk = 0; kk < KD; kk++)\n"
  "#pragma unroll\n"
  "    for (int i = 0; i < 4; i++) {\n"
  "      const int row = r0 + (i & 1) * 8, col = kk * 16 + 2 * t + (i >> 1) * 8;\n"
  "      qf[kk][i] = row < SQ ? *(const unsigned*)(qb + (i64)row * QS2 + col) : 0u;\n"
  "    }\n"
  "  float o[NV][4], mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.f, 0.f};\n"
  "#pragma unroll\n"
  "  for (int nv = 0; nv < NV; nv++) o[nv][0] = o[nv][1] = o[nv][2] = o[nv][3] = 0.f;\n"
  "  for (int k0 = 0; k0 < SK; k0 += BK) {\n"
  "    __syncthreads(); /* the last tile's readers are done */\n"
  "    /* K tile, row-major, 16 bytes a move; keys past SK are 0 */\n"
  "    for (int i = tid; i < BK * (D / 8); i += 128) {\n"
  "      const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;\n"
  "      uint4 w = make_uint4(0u, 0u, 0u, 0u);\n"
  "      if (k0 + r < SK) w = *(const uint4*)(kb + (i64)(k0 + r) * KS2 + c);\n"
  "      *(uint4*)&ks[r * KP + c] = w;\n"
  "    }\n"
  "    /* V tile transposed; a warp's lanes take 32 consecutive keys, so the\n"
  "     * 2-byte stores of one d land in distinct banks */\n"
  "    for (int i = tid; i < BK * (DV / 8); i += 128) {\n"
  "      const int r = i % BK, c = (i / BK) * 8;\n"
  "      uint4 w = make_uint4(0u, 0u, 0u, 0u);\n"
  "      if (k0 + r < SK) w = *(const uint4*)(vb + (i64)(k0 + r) * VS2 + c);\n"
  "      const T* e = (const T*)&w;\n"
  "#pragma unroll\n"
  "      for (int j = 0; j < 8; j++) vt[(c + j) * VP + r] = e[j];\n"
  "    }\n"
  "    __syncthreads();\n"
  "    float s[NT][4];\n"
  "#pragma unroll\n"
  "    for (int nt = 0; nt < NT; nt++) {\n"
  "      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;\n"
  "      const T* kr = ks + (nt * 8 + g) * KP + 2 * t;\n"
  "#pragma unroll\n"
  "      for (int kk = 0; kk < KD; kk++)\n"
  "        mma16816(s[nt], qf[kk], *(const unsigned*)(kr + kk * 16), *(const unsigned*)(kr + kk * 16 + 8));\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int hr = 0; hr < 2; hr++) {\n"
  "      const int row = r0 + hr * 8;\n"
  "      float mx = NEG_INF;\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < NT; nt++)\n"
  "#pragma unroll\n"
  "        for (int e = 0; e < 2; e++) {\n"
  "          const int col = k0 + nt * 8 + 2 * t + e;\n"
  "          float x = s[nt][hr * 2 + e] * SCALE;\n"
  "          MASK_ADD\n"
  "          if (col >= SK) x = NEG_INF;\n"
  "          s[nt][hr * 2 + e] = x;\n"
  "          mx = fmaxf(mx, x);\n"
  "        }\n"
  "      (void)row;\n"
  "      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));\n"
  "      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));\n"
  "      const float mn = fmaxf(mrow[hr], mx), mu = mn == NEG_INF ? 0.f : mn;\n"
  "      const float alpha = expf(mrow[hr] - mu);\n"
  "      mrow[hr] = mn;\n"
  "      float sum = 0.f;\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < NT; nt++)\n"
  "#pragma unroll\n"
  "        for (int e = 0; e < 2; e++) {\n"
  "          const float p = expf(s[nt][hr * 2 + e] - mu);\n"
  "          s[nt][hr * 2 + e] = p;\n"
  "          sum += p;\n"
  "        }\n"
  "      lrow[hr] = lrow[hr] * alpha + sum;\n"
  "#pragma unroll\n"
  "      for (int nv = 0; nv < NV; nv++) { o[nv][hr * 2] *= alpha; o[nv][hr * 2 + 1] *= alpha; }\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < BK / 16; kk++) {\n"
  "      const unsigned a[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),\n"
  "                             pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};\n"
  "#pragma unroll\n"
  "      for (int nv = 0; nv < NV; nv++) {\n"
  "        const T* vr = vt + (nv * 8 + g) * VP + kk * 16 + 2 * t;\n"
  "        mma16816(o[nv], a, *(const unsigned*)vr, *(const unsigned*)(vr + 8));\n"
  "      }\n"
  "    }\n"
  "  }\n"
  "#pragma unroll\n"
  "  for (int hr = 0; hr < 2; hr++) {\n"
  "    float l = lrow[hr];\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 1);\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 2);\n"
  "    const int row = r0 + hr * 8;\n"
  "    if (row >= SQ) continue;\n"
  "    const float inv = 1.f / l;\n"
  "    T* yr = y + b * YS0 + h * YS1 + (i64)row * YS2;\n"
  "#pragma unroll\n"
  "    for (int nv = 0; nv < NV; nv++)\n"
  "#pragma unroll\n"
  "      for (int e = 0; e < 2; e++) {\n"
  "        float val = o[nv][hr * 2 + e] * inv;\n"
  "        NAN_TO_ZERO\n"
  "        yr[nv * 8 + 2 * t + e] = stf<T>(val);\n"
  "      }\n"
  "  }\n"
  "}\n";

/* ---- f16/bf16 on sm_80+, whole K and V of one (b,h) in shared memory
 *
 * The tiled kernel above, on BERT-base b32 (B 32, H 12, S 128, D 64, fp16)
 * on an H200, took 37 us for 1.6 GFLOP and ~26 MB: neither bound. ptxas
 * gives it 168 registers (3 blocks of 4 warps an SM, 396 of the 768
 * blocks at once: two waves); each 64-key tile is a synchronous load, two
 * barriers, V transposed by 2-byte stores, the mask read from global
 * memory per score, Q fragments by 4-byte loads. When Q's 64-row tile, all
 * of K and all of V (keys rounded up to 64) and one float per key fit the
 * 48 KB of static shared memory (D = Dv = 64: Sk <= 128, 46.6 KB), this
 * kernel is used instead:
 *   - one load of everything by cp.async (16 bytes a move, no registers
 *     in between): group 0 = Q tile + K, group 1 = V, so the scores of the
 *     first 64 keys are computed while V is still arriving; two barriers in
 *     all;
 *   - fragments by ldmatrix from row-major tiles (no transposing stores);
 *     Q's A fragments are loaded again each 64-key chunk instead of held,
 *     so __launch_bounds__(128, 4) caps the registers at 128 without
 *     spilling (4 blocks an SM, 4 x 47.6 KB of shared memory with the
 *     1 KB an SM reserves per block: 528 of the 768 blocks at once on
 *     the H200's 132 SMs of 228 KB; an sm_80 SM holds 3, sm_89 and
 *     sm_120 SMs 2);
 *   - scores in the log2 domain: x = s * scale*log2(e) + bias, p =
 *     exp2f(x - max) (exp(a) = 2^(a log2 e); one FMA per score, exp2f is
 *     the hardware's ex2);
 *   - bias[key] in shared memory, staged once per block: the mask row
 *     times log2(e) when the mask does not vary along the query axis
 *     (ms[2] == 0: BERT's [B,1,1,Sk], a rank-1 [Sk]), else 0; keys past Sk
 *     are -inf there, so the chunk loop has no key guard; a mask that
 *     varies by row is still read per score from global memory;
 *   - the output tile goes through the warp's own Q rows in shared memory
 *     (Q's row pitch is max(D, Dv) + 8 for that) and leaves in 16-byte
 *     stores, whole rows at a time.
 * Grid (B*H, ceil(Sq/64)), 4 warps, each 16 query rows; the keys are
 * walked in chunks of 64 with the same online softmax as the tiled kernel
 * (in base 2: alpha = 2^(m_old - m_new)). A warp whose rows all lie past
 * Sq only loads; the last chunk computes only its 16-key groups holding a
 * key below Sk (the rest score -inf by the bias row from s = 0: p = 0, no
 * P V terms), as the streaming kernel does (GPUC_ATTENTION_FULL_TILES=1:
 * every warp and group).
 *
 * ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 (PTX ISA): lane L gives
 * the address of row L % 8 of 8x8 matrix L / 8 (8 contiguous halves, 16-
 * byte aligned); register i of every lane receives from matrix i the pair
 * (row g, cols 2t, 2t+1), or with .trans the pair (rows 2t, 2t+1, col g)
 * of the matrix as stored, lower index in the low half. (.x2: lanes 0..15
 * give the addresses, registers 0 and 1.) So, with the m16n8k16 layouts
 * written above the tiled kernel, lm = L / 8 and lr = L % 8:
 *   A of Q (rows w16.., cols 16kk..): matrix i = rows 8(i&1).., cols
 *     8(i>>1)..: lane L points at qs[w16 + 8(lm&1) + lr][16kk + 8(lm>>1)];
 *   B of K^T for n-tiles 2p, 2p+1 (keys 16p..16p+15), k-step kk: reg0 =
 *     (k 2t,2t+1; n g) = K[16p + g][16kk + 2t..] = matrix (keys 16p..,
 *     d 16kk..) without .trans; reg1 the same at d 16kk + 8; regs 2, 3
 *     the same at keys 16p + 8: lane L points at ks[16p + 8(lm>>1) + lr]
 *     [16kk + 8(lm&1)];
 *   B of V for k-step kk (keys 16kk..), n-tiles 2p, 2p+1 (d 16p..): reg0
 *     = (k 2t,2t+1; n g) = V[16kk + 2t..][16p + g] = the .trans pair of
 *     matrix (keys 16kk.., d 16p..); reg1 at keys 16kk + 8; regs 2, 3 at
 *     d 16p + 8: lane L points at vs[16kk + 8(lm&1) + lr][16p + 8(lm>>1)];
 *     an odd Dv / 8 takes its last n-tile with .x2 (lanes 0..15: lm < 2).
 * Row pitches are D + 8 (K), Dv + 8 (V), max(D, Dv) + 8 (Q) halves: 16-
 * byte rows, and for D = Dv = 64 (36 words) the 8 rows of a matrix fall in
 * 8 distinct 4-bank groups. */
static const char *mma_kv_body =
  "  __shared__ __align__(16) T qs[64 * QP];\n"
  "  __shared__ __align__(16) T ks[SKP * KP];\n"
  "  __shared__ __align__(16) T vs[SKP * VP];\n"
  "  __shared__ __align__(16) float bias[SKP];\n"
  "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;\n"
  "  const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: this lane addresses row lr of matrix lm */\n"
  "  const i64 bh = blockIdx.x, b = bh / H, h = bh % H;\n"
  "  const int q0 = blockIdx.y * 64, r0 = q0 + warp * 16 + g; /* this lane's rows: r0, r0 + 8 */\n"
  "  const bool live = !TRIM || q0 + warp * 16 < SQ; /* else the warp only helps load */\n"
  "  const T* qb = q + QO + b * QS0 + h * QS1;\n"
  "  const T* kb = k + KO + b * KS0 + h * KS1;\n"
  "  const T* vb = v + VO + b * VS0 + h * VS1;\n"
  "  /* rows past SQ / SK are stored as zeros (0 * a finite V stays 0) */\n"
  "  for (int i = tid; i < 64 * (D / 8); i += 128) {\n"
  "    const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;\n"
  "    if (q0 + r < SQ) cp_async16(&qs[r * QP + c], qb + (i64)(q0 + r) * QS2 + c);\n"
  "    else *(uint4*)&qs[r * QP + c] = make_uint4(0u, 0u, 0u, 0u);\n"
  "  }\n"
  "  for (int i = tid; i < SKP * (D / 8); i += 128) {\n"
  "    const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;\n"
  "    if (r < SK) cp_async16(&ks[r * KP + c], kb + (i64)r * KS2 + c);\n"
  "    else *(uint4*)&ks[r * KP + c] = make_uint4(0u, 0u, 0u, 0u);\n"
  "  }\n"
  "  cp_async_commit();\n"
  "  for (int i = tid; i < SKP * (DV / 8); i += 128) {\n"
  "    const int r = i / (DV / 8), c = (i - r * (DV / 8)) * 8;\n"
  "    if (r < SK) cp_async16(&vs[r * VP + c], vb + (i64)r * VS2 + c);\n"
  "    else *(uint4*)&vs[r * VP + c] = make_uint4(0u, 0u, 0u, 0u);\n"
  "  }\n"
  "  cp_async_commit();\n"
  "  for (int j = tid; j < SKP; j += 128) bias[j] = j < SK ? BIAS_ROW : NEG_INF;\n"
  "  cp_async_wait<1>(); /* this thread's Q and K moves are done */\n"
  "  __syncthreads();\n"
  "  const T* qa = qs + (warp * 16 + (lm & 1) * 8 + lr) * QP + (lm >> 1) * 8;\n"
  "  const T* ka = ks + ((lm >> 1) * 8 + lr) * KP + (lm & 1) * 8;\n"
  "  const T* va = vs + ((lm & 1) * 8 + lr) * VP + (lm >> 1) * 8;\n"
  "  float o[NV][4], mrow[2] = {NEG_INF, NEG_INF}, lsum[2] = {0.f, 0.f};\n"
  "#pragma unroll\n"
  "  for (int nv = 0; nv < NV; nv++) o[nv][0] = o[nv][1] = o[nv][2] = o[nv][3] = 0.f;\n"
  "  for (int kc = 0; kc < SKP; kc += 64) {\n"
  "    /* the 16-key groups holding a key below SK; the others keep s = 0,\n"
  "     * score -inf by the bias row, get p = 0, and add no P V terms */\n"
  "    const int nk = !TRIM || SK - kc >= 64 ? 4 : (SK - 1 - kc) / 16 + 1;\n"
  "    float s[8][4]; /* keys kc + 8nt .. kc + 8nt + 7 */\n"
  "#pragma unroll\n"
  "    for (int nt = 0; nt < 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;\n"
  "    if (live) {\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < D / 16; kk++) {\n"
  "      unsigned a[4];\n"
  "      ldsm_x4(a, qa + kk * 16);\n"
  "#pragma unroll\n"
  "      for (int p = 0; p < 4; p++) {\n"
  "        if (p >= nk) continue;\n"
  "        unsigned bk[4];\n"
  "        ldsm_x4(bk, ka + (kc + p * 16) * KP + kk * 16);\n"
  "        mma16816(s[2 * p], a, bk[0], bk[1]);\n"
  "        mma16816(s[2 * p + 1], a, bk[2], bk[3]);\n"
  "      }\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int hr = 0; hr < 2; hr++) {\n"
  "      const int row = r0 + hr * 8;\n"
  "      float mx = NEG_INF;\n"
  "#pragma unroll\n"
  "      for (int nt = 0; nt < 8; nt++) {\n"
  "        const float2 bb = *(const float2*)&bias[kc + nt * 8 + 2 * t];\n"
  "#pragma unroll\n"
  "        for (int e = 0; e < 2; e++) {\n"
  "          const int col = kc + nt * 8 + 2 * t + e;\n"
  "          float x = fmaf(s[nt][hr * 2 + e], SCALE2, e ? bb.y : bb.x);\n"
  "          MASK_ADD\n"
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
  "    } /* live */\n"
  "    if (kc == 0) {\n"
  "      cp_async_wait<0>(); /* this thread's V moves are done */\n"
  "      __syncthreads();\n"
  "    }\n"
  "    if (!live) continue; /* a warp whose rows all lie past SQ */\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < 4; kk++) {\n"
  "      if (kk >= nk) continue; /* p is 0 there */\n"
  "      const unsigned a[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),\n"
  "                             pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};\n"
  "      const T* vk = va + (kc + kk * 16) * VP;\n"
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
  "  }\n"
  "  /* y = o / l into this warp's Q rows (only this warp read them), then\n"
  "   * 16-byte stores of whole rows */\n"
  "  __syncwarp();\n"
  "  T* ot = qs + warp * 16 * QP;\n"
  "#pragma unroll\n"
  "  for (int hr = 0; hr < 2; hr++) {\n"
  "    float l = lsum[hr];\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 1);\n"
  "    l += __shfl_xor_sync(0xffffffffu, l, 2);\n"
  "    const float inv = 1.f / l;\n"
  "#pragma unroll\n"
  "    for (int nv = 0; nv < NV; nv++) {\n"
  "      float f0 = o[nv][hr * 2] * inv, f1 = o[nv][hr * 2 + 1] * inv;\n"
  "      NAN_TO_ZERO\n"
  "      *(unsigned*)&ot[(g + hr * 8) * QP + nv * 8 + 2 * t] = pack2(f0, f1);\n"
  "    }\n"
  "  }\n"
  "  __syncwarp();\n"
  "  for (int i = lane; i < 16 * (DV / 8); i += 32) {\n"
  "    const int r = i / (DV / 8), c = (i - r * (DV / 8)) * 8, row = q0 + warp * 16 + r;\n"
  "    if (row < SQ) *(uint4*)(y + b * YS0 + h * YS1 + (i64)row * YS2 + c) = *(const uint4*)&ot[r * QP + c];\n"
  "  }\n"
  "}\n";

/* mma16816<T>(c, a, b0, b1): c += A B for one m16n8k16 tile; pack2<T>(lo,
 * hi): two floats rounded into one register. Emitted once per module (the
 * marker comment is looked for in the module source). */
void mma_helpers(StrBuf *b) { /* also used by lower_attention_stream.c */
  static const char *marker = "/* gpuc attention mma helpers */";
  if (b->s && strstr(b->s, marker)) return;
  sb_printf(b, "%s\n"
               "template <class T> __device__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1);\n"
               "template <class T> __device__ unsigned pack2(float lo, float hi);\n", marker);
  static const char *types[2][4] = {{"__half", "f16", "__half2", "__floats2half2_rn"},
                                    {"__nv_bfloat16", "bf16", "__nv_bfloat162", "__floats2bfloat162_rn"}};
  for (int i = 0; i < 2; i++)
    sb_printf(b, "template <> __device__ __forceinline__ void mma16816<%s>(float* c, const unsigned* a, unsigned b0, unsigned b1) {\n"
                 "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%%0,%%1,%%2,%%3}, \"\n"
                 "               \"{%%4,%%5,%%6,%%7}, {%%8,%%9}, {%%10,%%11,%%12,%%13};\\n\"\n"
                 "               : \"=f\"(c[0]), \"=f\"(c[1]), \"=f\"(c[2]), \"=f\"(c[3])\n"
                 "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1),\n"
                 "                 \"f\"(c[0]), \"f\"(c[1]), \"f\"(c[2]), \"f\"(c[3]));\n}\n"
                 "template <> __device__ __forceinline__ unsigned pack2<%s>(float lo, float hi) {\n"
                 "  %s v = %s(lo, hi);\n  return *(unsigned*)&v;\n}\n",
              types[i][0], types[i][1], types[i][1], types[i][0], types[i][2], types[i][3]);
  /* ldmatrix (sm_75+) and cp.async (sm_80+) for attention_mma_kv; the
   * wait has a memory clobber so no shared load is moved above it */
  sb_printf(b, "__device__ __forceinline__ void ldsm_x4(unsigned* r, const void* p) {\n"
               "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%%0,%%1,%%2,%%3}, [%%4];\\n\"\n"
               "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"((unsigned)__cvta_generic_to_shared(p)));\n}\n"
               "__device__ __forceinline__ void ldsm_x4_trans(unsigned* r, const void* p) {\n"
               "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%%0,%%1,%%2,%%3}, [%%4];\\n\"\n"
               "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"((unsigned)__cvta_generic_to_shared(p)));\n}\n"
               "__device__ __forceinline__ void ldsm_x2_trans(unsigned* r, const void* p) {\n"
               "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%%0,%%1}, [%%2];\\n\"\n"
               "               : \"=r\"(r[0]), \"=r\"(r[1]) : \"r\"((unsigned)__cvta_generic_to_shared(p)));\n}\n"
               "__device__ __forceinline__ void cp_async16(void* dst, const void* src) {\n"
               "  asm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16;\\n\"\n"
               "               :: \"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(src));\n}\n"
               "__device__ __forceinline__ void cp_async_commit() { asm volatile(\"cp.async.commit_group;\\n\" ::); }\n"
               "template <int N> __device__ __forceinline__ void cp_async_wait() {\n"
               "  asm volatile(\"cp.async.wait_group %%0;\\n\" :: \"n\"(N) : \"memory\");\n}\n");
}

/* body with each key replaced by its value */
void emit_subst(StrBuf *b, const char *body, int n, const char *const *keys, const char *const *vals) {
  for (;;) {
    const char *next = NULL;
    int hit = -1;
    for (int i = 0; i < n; i++) {
      const char *f = strstr(body, keys[i]);
      if (f && (!next || f < next)) { next = f; hit = i; }
    }
    if (!next) { sb_printf(b, "%s", body); return; }
    sb_printf(b, "%.*s%s", (int)(next - body), body, vals[hit]);
    body = next + strlen(keys[hit]);
  }
}

static bool env_set(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0");
}

/* the tensor-core kernels skip the warps whose rows lie past Sq and the
 * 16-key groups past the last key (lower_attention_stream.c); false with
 * GPUC_ATTENTION_FULL_TILES=1 (every warp, every group: a GPU A/B) */
bool attention_trim_tiles(void) { return !env_set("GPUC_ATTENTION_FULL_TILES"); }

/* The mask's batch index as kernel text: b, or (b % P) for a mask of
 * period P (attribute mask_period: Swin's windows, merged batch b reads
 * mask batch b mod P) */
void attention_mask_batch(const GpucAttnGeom *a, char *buf, size_t n) {
  if (a->mask_period > 0) snprintf(buf, n, "(b %% %lldLL)", LL(a->mask_period));
  else snprintf(buf, n, "b");
}

/* "constexpr i64 QS0 = .., QS1 = .., QS2 = ..;" for Q, K, V and Y, and
 * the element offsets QO, KO, VO of Q, K and V in the tensors read (views
 * of one QKV GEMM output: attribute view) */
void attention_emit_strides(StrBuf *b, const GpucAttnGeom *a) {
  static const char *nm[4] = {"QS", "KS", "VS", "YS"};
  for (int i = 0; i < 4; i++)
    sb_printf(b, "  constexpr i64 %s0 = %lldLL, %s1 = %lldLL, %s2 = %lldLL;\n", nm[i], LL(a->st[i][0]), nm[i],
              LL(a->st[i][1]), nm[i], LL(a->st[i][2]));
  sb_printf(b, "  constexpr i64 QO = %lldLL, KO = %lldLL, VO = %lldLL;\n", LL(a->off[0]), LL(a->off[1]), LL(a->off[2]));
}

/* the tensor-core kernels move Q, K and V rows 16 bytes at a time: every
 * row start (offset and strides) a multiple of 8 halves */
static bool rows_aligned(const GpucAttnGeom *a) {
  for (int i = 0; i < 4; i++) {
    if (a->off[i] % 8) return false;
    for (int j = 0; j < 3; j++)
      if (a->st[i][j] % 8) return false;
  }
  return true;
}

/* "extern "C" __global__ void <bounds> name(q, k, v, mask?, y) {" */
static void emit_signature(StrBuf *b, const char *bounds, const char *name, const char *T, const Tensor *mask) {
  sb_printf(b, "extern \"C\" __global__ void %s %s(const %s* __restrict__ q, const %s* __restrict__ k, "
               "const %s* __restrict__ v, ", bounds, name, T, T, T);
  if (mask) sb_printf(b, "const %s* __restrict__ mask, ", cg_ctype(mask->dt));
  sb_printf(b, "%s* __restrict__ y) {\n", T);
}

/* grid (B*H, ceil(Sq/rows)) of ATT_WARPS warps; arguments q, k, v, mask?, y */
/* tensor: the kernel's math is mma.sync (reports use the tensor peak) */
static int launch_attention(LowerCtx *c, const char *name, const GpucAttnGeom *a, int rows, bool tensor) {
  unsigned grid[3] = {(unsigned)(a->B * a->H), (unsigned)((a->Sq + rows - 1) / rows), 1};
  unsigned blk[3] = {ATT_WARPS * 32, 1, 1};
  uint32_t args[5] = {c->tin[0], c->tin[1], c->tin[2]};
  int nargs = 3;
  if (c->nin > 3) args[nargs++] = c->tin[3];
  args[nargs++] = c->tout[0];
  if (cg_launch_grid(c, name, grid, blk, 0, nargs, args)) return -1;
  if (tensor) cg_mark_tensor_math(c);
  return 0;
}

static int attention_mma(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4]) {
  char mb[48];
  attention_mask_batch(a, mb, sizeof mb);
  const Tensor *q = c->in[0];
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  int64_t B = a->B, H = a->H, Sq = a->Sq, D = a->D, Sk = a->Sk, DV = a->Dv;
  const char *T = cg_ctype(q->dt);
  char scale[64], madd[320];
  cg_float_lit(scale, sizeof scale, gpuc_attr_f(c->n, "scale", 1.0f), "float");
  madd[0] = 0;
  if (mask)
    snprintf(madd, sizeof madd, "if (col < SK && row < SQ) x += ldf(mask[%s * %lldLL + h * %lldLL + (i64)row * %lldLL + (i64)col * %lldLL]);",
             mb, LL(ms[0]), LL(ms[1]), LL(ms[2]), LL(ms[3]));
  const char *nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) ? "if (!(l > 0.f)) val = 0.f; /* 0 or NaN */" : "";
  StrBuf *b = cg_src(c);
  mma_helpers(b);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "/* attention (tensor cores): Q [%lld,%lld,%lld,%lld], K/V %lld keys, DV %lld */\n", LL(B), LL(H),
            LL(Sq), LL(D), LL(Sk), LL(DV));
  emit_signature(b, "__launch_bounds__(128)", name, T, mask);
  sb_printf(b, "  typedef %s T;\n"
               "  constexpr int D = %lld, DV = %lld, SQ = %lld, SK = %lld, H = %lld;\n"
               "  constexpr int BK = 64, NT = BK / 8, KD = D / 16, NV = DV / 8, KP = D + 8, VP = BK + 8;\n"
               "  const float SCALE = %s, NEG_INF = -__int_as_float(0x7f800000);\n",
            T, LL(D), LL(DV), LL(Sq), LL(Sk), LL(H), scale);
  attention_emit_strides(b, a);
  const char *keys[] = {"MASK_ADD", "NAN_TO_ZERO", "mma16816(", "pack2("};
  const char *vals[] = {madd, nan0, "mma16816<T>(", "pack2<T>("};
  emit_subst(b, mma_body, 4, keys, vals);
  return launch_attention(c, name, a, 64, true);
}

/* Shared memory of attention_mma_kv in bytes (Q tile, K, V, bias row);
 * it is used when this is within the 48 KB of static shared memory */
static int64_t mma_kv_smem(const GpucAttnGeom *a) {
  int64_t skp = (a->Sk + 63) / 64 * 64, qp = (a->D > a->Dv ? a->D : a->Dv) + 8;
  return 2 * (64 * qp + skp * (a->D + 8) + skp * (a->Dv + 8)) + 4 * skp;
}

void attention_mask_terms(bool mask, bool rowbias, const char *mb, const int64_t ms[4], char bias[256],
                          char madd[320]) {
  snprintf(bias, 256, "0.f");
  madd[0] = 0;
  if (rowbias)
    snprintf(bias, 256, "ldf(mask[%s * %lldLL + h * %lldLL + (i64)j * %lldLL]) * LOG2E", mb, (long long)ms[0],
             (long long)ms[1], (long long)ms[3]);
  else if (mask)
    snprintf(madd, 320,
             "if (col < SK && row < SQ) x = fmaf(ldf(mask[%s * %lldLL + h * %lldLL + (i64)row * %lldLL + (i64)col * "
             "%lldLL]), LOG2E, x);",
             mb, (long long)ms[0], (long long)ms[1], (long long)ms[2], (long long)ms[3]);
}

static int attention_mma_kv(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4]) {
  char mb[48];
  attention_mask_batch(a, mb, sizeof mb);
  const Tensor *q = c->in[0];
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  int64_t B = a->B, H = a->H, Sq = a->Sq, D = a->D, Sk = a->Sk, DV = a->Dv;
  const char *T = cg_ctype(q->dt);
  /* scores in base 2: scale * log2(e) folded into one constant */
  char scale2[64], bias[256], madd[320];
  cg_float_lit(scale2, sizeof scale2, (float)(gpuc_attr_f(c->n, "scale", 1.0f) * 1.4426950408889634), "float");
  attention_mask_terms(mask != NULL, mask && ms[2] == 0, mb, ms, bias, madd);
  const char *nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) ? "if (!(l > 0.f)) f0 = f1 = 0.f; /* 0 or NaN */" : "";
  StrBuf *b = cg_src(c);
  mma_helpers(b);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "/* attention (tensor cores, K and V resident): Q [%lld,%lld,%lld,%lld], K/V %lld keys, DV %lld, "
               "%lld bytes of shared memory */\n",
            LL(B), LL(H), LL(Sq), LL(D), LL(Sk), LL(DV), LL(mma_kv_smem(a)));
  emit_signature(b, "__launch_bounds__(128, 4)", name, T, mask);
  sb_printf(b, "  typedef %s T;\n"
               "  constexpr int D = %lld, DV = %lld, SQ = %lld, SK = %lld, H = %lld;\n"
               "  constexpr int SKP = (SK + 63) / 64 * 64, NV = DV / 8, KP = D + 8, VP = DV + 8, QP = (D > DV ? D : DV) + 8;\n"
               "  constexpr bool TRIM = %s;\n"
               "  const float SCALE2 = %s, LOG2E = 1.44269504f, NEG_INF = -__int_as_float(0x7f800000);\n"
               "  (void)LOG2E;\n",
            T, LL(D), LL(DV), LL(Sq), LL(Sk), LL(H), attention_trim_tiles() ? "true" : "false", scale2);
  attention_emit_strides(b, a);
  const char *keys[] = {"BIAS_ROW", "MASK_ADD", "NAN_TO_ZERO", "mma16816(", "pack2("};
  const char *vals[] = {bias, madd, nan0, "mma16816<T>(", "pack2<T>("};
  emit_subst(b, mma_kv_body, 5, keys, vals);
  return launch_attention(c, name, a, 64, true);
}

/* ---- any float dtype, any arch: fp32 FMA ---- */
static int attention_fma(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4]) {
  char mb[48];
  attention_mask_batch(a, mb, sizeof mb);
  const Tensor *q = c->in[0], *y = c->out[0];
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  int64_t B = a->B, H = a->H, Sq = a->Sq, D = a->D, Sk = a->Sk, DV = a->Dv;
  bool vec = D % 4 == 0;
  int64_t KS = vec ? D + 4 : (D % 2 ? D : D + 1); /* K row stride in floats: banks, 16-byte rows */
  int64_t smem = 4 * (ATT_BQ * D + ATT_BK * KS + ATT_BK * DV + ATT_WARPS * ATT_ROWS * ATT_BK);
  if (smem > 48 * 1024) return lower_fail(c, "internal: Attention tile needs %lld bytes of shared memory", LL(smem));
  int DC = (int)((DV + 31) / 32);
  const char *T = cg_ctype(q->dt);
  char scale[64];
  cg_float_lit(scale, sizeof scale, gpuc_attr_f(c->n, "scale", 1.0f), "float");
  bool nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) != 0;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "/* attention: Q [%lld,%lld,%lld,%lld], K/V %lld keys, DV %lld */\n", LL(B), LL(H), LL(Sq), LL(D),
            LL(Sk), LL(DV));
  char bounds[48];
  snprintf(bounds, sizeof bounds, "__launch_bounds__(%d)", ATT_WARPS * 32);
  emit_signature(b, bounds, name, T, mask);
  sb_printf(b, "  __shared__ __align__(16) float qs[%d][%lld];\n"
               "  __shared__ __align__(16) float ks[%d][%lld];\n"
               "  __shared__ __align__(16) float vs[%d][%lld];\n"
               "  __shared__ __align__(16) float ps[%d][%d][%d];\n",
            ATT_BQ, LL(D), ATT_BK, LL(KS), ATT_BK, LL(DV), ATT_WARPS, ATT_ROWS, ATT_BK);
  sb_printf(b, "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
               "  const i64 bh = blockIdx.x, b = bh / %lldLL, h = bh %% %lldLL;\n"
               "  const int q0 = blockIdx.y * %d;\n", LL(H), LL(H), ATT_BQ);
  attention_emit_strides(b, a);
  sb_printf(b, "  const %s* qb = q + QO + b * QS0 + h * QS1;\n"
               "  const %s* kb = k + KO + b * KS0 + h * KS1;\n"
               "  const %s* vb = v + VO + b * VS0 + h * VS1;\n", T, T, T);
  /* the block's Q rows (rows past Sq are zeros, never written out) */
  sb_printf(b, "  for (int i = tid; i < %lld; i += %d) {\n"
               "    const int r = i / %lld, d = i - r * %lld;\n"
               "    qs[r][d] = q0 + r < %lld ? ldf(qb[(i64)(q0 + r) * QS2 + d]) : 0.f;\n  }\n",
            LL(ATT_BQ * D), ATT_WARPS * 32, LL(D), LL(D), LL(Sq));
  sb_printf(b, "  float m[%d], l[%d], acc[%d][%d];\n"
               "#pragma unroll\n  for (int r = 0; r < %d; r++) {\n"
               "    m[r] = -__int_as_float(0x7f800000); l[r] = 0.f;\n"
               "#pragma unroll\n    for (int cc = 0; cc < %d; cc++) acc[r][cc] = 0.f;\n  }\n",
            ATT_ROWS, ATT_ROWS, ATT_ROWS, DC, ATT_ROWS, DC);
  sb_printf(b, "  for (int k0 = 0; k0 < %lld; k0 += %d) {\n"
               "    __syncthreads(); /* Q stored; the last tile's readers done */\n",
            LL(Sk), ATT_BK);
  /* K and V tiles; keys past Sk are zeros (their p is 0, and 0 * V must not be NaN) */
  sb_printf(b, "    for (int i = tid; i < %lld; i += %d) {\n"
               "      const int r = i / %lld, d = i - r * %lld;\n"
               "      ks[r][d] = k0 + r < %lld ? ldf(kb[(i64)(k0 + r) * KS2 + d]) : 0.f;\n    }\n",
            LL(ATT_BK * D), ATT_WARPS * 32, LL(D), LL(D), LL(Sk));
  sb_printf(b, "    for (int i = tid; i < %lld; i += %d) {\n"
               "      const int r = i / %lld, d = i - r * %lld;\n"
               "      vs[r][d] = k0 + r < %lld ? ldf(vb[(i64)(k0 + r) * VS2 + d]) : 0.f;\n    }\n"
               "    __syncthreads();\n",
            LL(ATT_BK * DV), ATT_WARPS * 32, LL(DV), LL(DV), LL(Sk));
  /* 1. scores of key k0 + lane against the warp's rows */
  sb_printf(b, "    float s[%d];\n#pragma unroll\n    for (int r = 0; r < %d; r++) s[r] = 0.f;\n", ATT_ROWS, ATT_ROWS);
  if (vec)
    sb_printf(b, "#pragma unroll 8\n    for (int d = 0; d < %lld; d += 4) {\n"
                 "      const float4 kv = *(const float4*)&ks[lane][d];\n"
                 "#pragma unroll\n      for (int r = 0; r < %d; r++) {\n"
                 "        const float4 qv = *(const float4*)&qs[warp * %d + r][d];\n"
                 "        s[r] = fmaf(qv.x, kv.x, s[r]); s[r] = fmaf(qv.y, kv.y, s[r]);\n"
                 "        s[r] = fmaf(qv.z, kv.z, s[r]); s[r] = fmaf(qv.w, kv.w, s[r]);\n"
                 "      }\n    }\n",
              LL(D), ATT_ROWS, ATT_ROWS);
  else
    sb_printf(b, "#pragma unroll 8\n    for (int d = 0; d < %lld; d++) {\n"
                 "      const float kv = ks[lane][d];\n"
                 "#pragma unroll\n      for (int r = 0; r < %d; r++) s[r] = fmaf(qs[warp * %d + r][d], kv, s[r]);\n"
                 "    }\n",
              LL(D), ATT_ROWS, ATT_ROWS);
  /* 2. scale, mask, online softmax */
  sb_printf(b, "    const int j = k0 + lane;\n"
               "#pragma unroll\n    for (int r = 0; r < %d; r++) {\n"
               "      const int row = q0 + warp * %d + r;\n"
               "      float x = s[r] * %s;\n",
            ATT_ROWS, ATT_ROWS, scale);
  if (mask)
    sb_printf(b, "      if (j < %lld && row < %lld) x += ldf(mask[%s * %lldLL + h * %lldLL + (i64)row * %lldLL + (i64)j * %lldLL]);\n",
              LL(Sk), LL(Sq), mb, LL(ms[0]), LL(ms[1]), LL(ms[2]), LL(ms[3]));
  sb_printf(b, "      if (j >= %lld) x = -__int_as_float(0x7f800000);\n"
               "      float mt = x;\n"
               "#pragma unroll\n      for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));\n"
               "      const float mn = fmaxf(m[r], mt);\n"
               "      const float mu = mn == -__int_as_float(0x7f800000) ? 0.f : mn;\n"
               "      const float alpha = expf(m[r] - mu), p = expf(x - mu);\n"
               "      float ps_sum = p;\n"
               "#pragma unroll\n      for (int o = 16; o > 0; o >>= 1) ps_sum += __shfl_xor_sync(0xffffffffu, ps_sum, o);\n"
               "      l[r] = l[r] * alpha + ps_sum;\n"
               "      m[r] = mn;\n"
               "#pragma unroll\n      for (int cc = 0; cc < %d; cc++) acc[r][cc] *= alpha;\n"
               "      ps[warp][r][lane] = p;\n"
               "    }\n    __syncwarp();\n",
            LL(Sk), DC);
  /* 3. acc += P V over the tile's 32 keys (p of keys past Sk is 0) */
  sb_printf(b, "#pragma unroll 2\n    for (int jj = 0; jj < %d; jj += 4) {\n"
               "      float4 pr[%d];\n"
               "#pragma unroll\n      for (int r = 0; r < %d; r++) pr[r] = *(const float4*)&ps[warp][r][jj];\n"
               "#pragma unroll\n      for (int cc = 0; cc < %d; cc++) {\n"
               "        const int d = lane + 32 * cc;\n"
               "        if (d < %lld) {\n"
               "          const float v0 = vs[jj][d], v1 = vs[jj + 1][d], v2 = vs[jj + 2][d], v3 = vs[jj + 3][d];\n"
               "#pragma unroll\n          for (int r = 0; r < %d; r++)\n"
               "            acc[r][cc] = fmaf(pr[r].w, v3, fmaf(pr[r].z, v2, fmaf(pr[r].y, v1, fmaf(pr[r].x, v0, acc[r][cc]))));\n"
               "        }\n      }\n    }\n"
               "    __syncwarp(); /* ps is rewritten by the next tile */\n  }\n",
            ATT_BK, ATT_ROWS, ATT_ROWS, DC, LL(DV), ATT_ROWS);
  /* y = acc / l, once */
  sb_printf(b, "#pragma unroll\n  for (int r = 0; r < %d; r++) {\n"
               "    const int row = q0 + warp * %d + r;\n"
               "    if (row >= %lld) continue;\n"
               "    const float inv = 1.f / l[r];\n"
               "    %s* yr = y + b * YS0 + h * YS1 + (i64)row * YS2;\n"
               "#pragma unroll\n    for (int cc = 0; cc < %d; cc++) {\n"
               "      const int d = lane + 32 * cc;\n"
               "      if (d >= %lld) continue;\n"
               "      float o = acc[r][cc] * inv;\n",
            ATT_ROWS, ATT_ROWS, LL(Sq), T, DC, LL(DV));
  if (nan0) sb_printf(b, "      if (!(l[r] > 0.f)) o = 0.f; /* 0 or NaN */\n");
  sb_printf(b, "      ");
  cg_store(b, y->dt, "yr", "d", "float", "o");
  sb_printf(b, "    }\n  }\n}\n");
  return launch_attention(c, name, a, ATT_BQ, false);
}

int lower_Attention(LowerCtx *c) {
  const Tensor *q = c->in[0], *k = c->in[1], *v = c->in[2], *y = c->out[0];
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  GpucAttnGeom a;
  if (gpuc_attention_geom(c->n, q, k, v, &a) || !gpuc_attention_lowerable(&a, q, k, v, mask) || y->dt != q->dt)
    return lower_fail(c, "internal: Attention outside the kernels' limits (the pass checks them)");
  int64_t ms[4] = {0, 0, 0, 0};
  if (mask) gpuc_attention_mask_strides(mask, ms);
  /* GPUC_ATTENTION_FMA=1 forces the fp32 FMA kernel, GPUC_ATTENTION_TILED=1
   * the tiled tensor-core kernel over the K/V-resident one (to bisect a
   * wrong result between the kernels on a GPU, or time them) */
  bool tc = (q->dt == GPUC_DT_F16 || q->dt == GPUC_DT_BF16) && c->opt->sm >= 80 && a.D % 16 == 0 &&
            a.Dv % 8 == 0 && rows_aligned(&a) && !env_set("GPUC_ATTENTION_FMA");
  /* grouped-query heads and causal masks: the streaming kernels
   * (lower_attention_stream.c), and half past the K/V-resident kernel's
   * limit (GPUC_ATTENTION_TILED=1: the tiled kernel below instead;
   * GPUC_ATTENTION_STREAM=1: the streaming kernel in place of both) */
  if (a.Hk != a.H || gpuc_attr_i(c->n, "causal", 0)) return lower_attention_stream(c, &a, ms, tc);
  if (!tc) return attention_fma(c, &a, ms);
  if (env_set("GPUC_ATTENTION_STREAM") && attention_flash_fits(&a, q->dt, c->opt->sm)) /* to time it */
    return lower_attention_stream(c, &a, ms, tc);
  if (mma_kv_smem(&a) <= 48 * 1024 && !env_set("GPUC_ATTENTION_TILED")) return attention_mma_kv(c, &a, ms);
  if (attention_flash_fits(&a, q->dt, c->opt->sm) && !env_set("GPUC_ATTENTION_TILED"))
    return lower_attention_stream(c, &a, ms, tc);
  return attention_mma(c, &a, ms);
}
