/* Attention(Q, K, V, mask?) as one kernel that never writes the scores.
 *
 * Shapes (static, baked in): Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,DV],
 * mask broadcast to [B,H,Sq,Sk] by strides (0 on broadcast dims), Y
 * [B,H,Sq,DV]; all contiguous. Limits: gpuc_attention_lowerable.
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
 * probability of such a row) writes 0.
 * Math is fp32 FMA (no tensor cores yet) for f32, f16 and bf16 storage. */
#include "lower_util.h"
#include "infer_linalg.h"
#include <stdio.h>

#define LL(v) ((long long)(v))
enum { ATT_WARPS = 4, ATT_ROWS = 4, ATT_BQ = ATT_WARPS * ATT_ROWS, ATT_BK = 32 };

/* mask strides over [B,H,Sq,Sk] (0 where the mask broadcasts) */
static void mask_strides(const Tensor *m, int64_t st[4]) {
  int64_t s = 1;
  for (int d = 3; d >= 0; d--) {
    int md = d - (4 - m->rank);
    if (md < 0 || m->dims[md] == 1) { st[d] = 0; continue; }
    st[d] = s;
    s *= m->dims[md];
  }
}

int lower_Attention(LowerCtx *c) {
  const Tensor *q = c->in[0], *k = c->in[1], *v = c->in[2], *y = c->out[0];
  const Tensor *mask = c->nin > 3 ? c->in[3] : NULL;
  if (!gpuc_attention_lowerable(q, k, v, mask) || y->dt != q->dt)
    return lower_fail(c, "internal: Attention outside the kernel's limits (the pass checks them)");
  int64_t B = q->dims[0], H = q->dims[1], Sq = q->dims[2], D = q->dims[3], Sk = k->dims[2], DV = v->dims[3];
  bool vec = D % 4 == 0;
  int64_t KS = vec ? D + 4 : (D % 2 ? D : D + 1); /* K row stride in floats: banks, 16-byte rows */
  int64_t smem = 4 * (ATT_BQ * D + ATT_BK * KS + ATT_BK * DV + ATT_WARPS * ATT_ROWS * ATT_BK);
  if (smem > 48 * 1024) return lower_fail(c, "internal: Attention tile needs %lld bytes of shared memory", LL(smem));
  int64_t ms[4] = {0, 0, 0, 0};
  if (mask) mask_strides(mask, ms);
  int DC = (int)((DV + 31) / 32);
  const char *T = cg_ctype(q->dt);
  char scale[64];
  cg_float_lit(scale, sizeof scale, gpuc_attr_f(c->n, "scale", 1.0f), "float");
  bool nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) != 0;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "/* attention: Q [%lld,%lld,%lld,%lld], K/V %lld keys, DV %lld */\n", LL(B), LL(H), LL(Sq), LL(D),
            LL(Sk), LL(DV));
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const %s* __restrict__ q, "
               "const %s* __restrict__ k, const %s* __restrict__ v, ", ATT_WARPS * 32, name, T, T, T);
  if (mask) sb_printf(b, "const %s* __restrict__ mask, ", cg_ctype(mask->dt));
  sb_printf(b, "%s* __restrict__ y) {\n", T);
  sb_printf(b, "  __shared__ __align__(16) float qs[%d][%lld];\n"
               "  __shared__ __align__(16) float ks[%d][%lld];\n"
               "  __shared__ __align__(16) float vs[%d][%lld];\n"
               "  __shared__ __align__(16) float ps[%d][%d][%d];\n",
            ATT_BQ, LL(D), ATT_BK, LL(KS), ATT_BK, LL(DV), ATT_WARPS, ATT_ROWS, ATT_BK);
  sb_printf(b, "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
               "  const i64 bh = blockIdx.x, b = bh / %lldLL, h = bh %% %lldLL;\n"
               "  const int q0 = blockIdx.y * %d;\n"
               "  const %s* qb = q + bh * %lldLL;\n"
               "  const %s* kb = k + bh * %lldLL;\n"
               "  const %s* vb = v + bh * %lldLL;\n",
            LL(H), LL(H), ATT_BQ, T, LL(Sq * D), T, LL(Sk * D), T, LL(Sk * DV));
  /* the block's Q rows (rows past Sq are zeros, never written out) */
  sb_printf(b, "  for (int i = tid; i < %lld; i += %d) {\n"
               "    const int r = i / %lld, d = i - r * %lld;\n"
               "    qs[r][d] = q0 + r < %lld ? ldf(qb[(i64)(q0 + r) * %lldLL + d]) : 0.f;\n  }\n",
            LL(ATT_BQ * D), ATT_WARPS * 32, LL(D), LL(D), LL(Sq), LL(D));
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
               "      ks[r][d] = k0 + r < %lld ? ldf(kb[(i64)(k0 + r) * %lldLL + d]) : 0.f;\n    }\n",
            LL(ATT_BK * D), ATT_WARPS * 32, LL(D), LL(D), LL(Sk), LL(D));
  sb_printf(b, "    for (int i = tid; i < %lld; i += %d) {\n"
               "      const int r = i / %lld, d = i - r * %lld;\n"
               "      vs[r][d] = k0 + r < %lld ? ldf(vb[(i64)(k0 + r) * %lldLL + d]) : 0.f;\n    }\n"
               "    __syncthreads();\n",
            LL(ATT_BK * DV), ATT_WARPS * 32, LL(DV), LL(DV), LL(Sk), LL(DV));
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
    sb_printf(b, "      if (j < %lld && row < %lld) x += ldf(mask[b * %lldLL + h * %lldLL + (i64)row * %lldLL + (i64)j * %lldLL]);\n",
              LL(Sk), LL(Sq), LL(ms[0]), LL(ms[1]), LL(ms[2]), LL(ms[3]));
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
               "    %s* yr = y + (bh * %lldLL + row) * %lldLL;\n"
               "#pragma unroll\n    for (int cc = 0; cc < %d; cc++) {\n"
               "      const int d = lane + 32 * cc;\n"
               "      if (d >= %lld) continue;\n"
               "      float o = acc[r][cc] * inv;\n",
            ATT_ROWS, ATT_ROWS, LL(Sq), T, LL(Sq), LL(DV), DC, LL(DV));
  if (nan0) sb_printf(b, "      if (!(l[r] > 0.f)) o = 0.f; /* 0 or NaN */\n");
  sb_printf(b, "      ");
  cg_store(b, y->dt, "yr", "d", "float", "o");
  sb_printf(b, "    }\n  }\n}\n");
  unsigned grid[3] = {(unsigned)(B * H), (unsigned)((Sq + ATT_BQ - 1) / ATT_BQ), 1};
  unsigned blk[3] = {ATT_WARPS * 32, 1, 1};
  uint32_t args[5] = {c->tin[0], c->tin[1], c->tin[2]};
  int nargs = 3;
  if (mask) args[nargs++] = c->tin[3];
  args[nargs++] = c->tout[0];
  return cg_launch_grid(c, name, grid, blk, 0, nargs, args);
}
