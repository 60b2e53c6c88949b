/* gpuc's int8 tensor-core GEMM (int8_gemm.h): Acc [M, N] = Xq [M, K] Wq [N, K]^T,
 * int8 x int8 -> int32, exact: by mma.sync m16n8k32 (sm_80+), and on sm_90
 * by Hopper's warpgroup wgmma m64nNk32 reading both operands from shared
 * memory (the plan's module then compiles for sm_90a, arch-specific: the
 * plan is flagged GPUC_PLAN_F_ARCH_SPECIFIC and loads on sm_90 only).
 *
 * Why not cuBLASLt: its int8 GEMMs write int32 only (no half output, no
 * per-channel alpha with int32 compute: docs/BENCHMARKS.md), so each
 * --int8 GEMM was followed by a DequantizeRows kernel reading 4 bytes an
 * element back. Here the epilogue is the DequantizeRows node's fusion
 * group itself (ew_kernel.h), evaluated on the accumulators in registers:
 * acc * xs[row] * ws[col] + bias[col], then GELU, residual, the cast, with
 * the same f32 steps as the unfused kernels, so the same bits.
 *
 * Kernel shape (one CTA of 256 threads = 8 warps):
 *   tile BM x 128 of Acc, BM 128 (warps 2 x 4, each 64 x 32) or 64 (each
 *   32 x 32); K in steps of 64 bytes through a 4-stage cp.async pipeline
 *   (zero-filled past M, N and K), shared rows of 64 bytes with the 16-byte
 *   chunks XOR-swizzled by (row >> 1) & 3 so ldmatrix's 8 row reads hit 32
 *   distinct banks; fragments by ldmatrix.x4 (an int8 16 x 32 A tile is a
 *   b16 16 x 16 one: the m16n8k32 A layout; Wq's rows give B's .col layout
 *   directly); shared memory ST * (BM + 128) * 64 bytes (64 KB at BM 128:
 *   the runtime opts in past 48 KB, runtime/gpu/session.c).
 *   Accumulator (m16n8 s32): lane l holds rows l/4 and l/4 + 8, columns
 *   2 (l % 4) and + 1 of each 16 x 8 tile: stored (or evaluated) as pairs.
 *   (The tile sizes above are the first version's; tile_for has today's.)
 * wgmma (sm_90): BM/64 warpgroups, K steps of 128 bytes, tiles picked by
 * K and N (tile_for); notes at int8_wgmma_helpers. The warp-specialized
 * variant (a producer filling an mbarrier ring, by cp.async or TMA;
 * persistent CTAs; notes at I8Ws) fed by TMA is the default where the
 * H200 measured it faster (ws_choice: K >= 2048 or N >= 2048);
 * GPUC_INT8_WS=0 turns it off, =1 or =tma takes it everywhere. */
#include "int8_gemm.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LL(x) ((long long)(x))

enum { I8_MIN_TILES = 64 };

/* A CTA's tile: BM x BN of Acc, K in steps of BK bytes through ST stages.
 * mma.sync: WM x WN warps, each (BM/WM) x (BN/WN): MT = BM/(16 WM) m16
 * tiles and NT = BN/(8 WN) n8 tiles (NT even: B fragments come in pairs).
 * wgmma (Hopper): BM/64 warpgroups of 128 threads, each 64 x BN by one
 * m64nBNk32 instruction a 32-byte K step; BK 128 (one 128-byte swizzle
 * row). */
typedef struct I8Tile { int bm, bn, bk, st, wm, wn; bool wg; } I8Tile;

static bool tile_ok(const I8Tile *t) {
  if (t->wg)
    return (t->bm == 64 || t->bm == 128 || t->bm == 256) && (t->bn == 64 || t->bn == 128 || t->bn == 256) &&
           t->bk == 128 && t->st >= 3 && t->st <= 8 && t->st * (t->bm + t->bn) * t->bk + 1024 <= 227 * 1024 &&
           t->bm * t->bn <= 128 * 256;
  if (!(t->bm == 64 || t->bm == 128 || t->bm == 256) || !(t->bn == 64 || t->bn == 128 || t->bn == 256) ||
      !(t->bk == 64 || t->bk == 128) || t->st < 2 || t->st > 6 || t->st * (t->bm + t->bn) * t->bk > 200 * 1024 ||
      !(t->wm == 1 || t->wm == 2 || t->wm == 4) || !(t->wn == 1 || t->wn == 2 || t->wn == 4))
    return false;
  int mt = t->bm / (16 * t->wm), nt = t->bn / (8 * t->wn);
  return mt >= 1 && nt >= 2 && nt % 2 == 0 && mt * nt <= 32 && t->wm * t->wn >= 4;
}

/* Hopper's wgmma kernel on sm_90 (arch-specific code: sm_90a), unless
 * GPUC_INT8_WGMMA=0 (the mma.sync kernel there, for A/B) */
static bool use_wgmma(const CodegenOptions *o) {
  const char *env = getenv("GPUC_INT8_WGMMA");
  return o->sm == 90 && !(env && !strcmp(env, "0"));
}

/* GPUC_INT8_TILE fixes the tile (the sweeps of tests/gpu/int8_gemm_check.py):
 * mma.sync BMxBNxBKsST[wWMxWN] (e.g. 128x256x64s3, 128x128x64s4w2x2; warps
 * 2 x 4 unless named), wgmma wgBMxBNsST (e.g. wg128x256s4); else the
 * default below. */
static I8Tile tile_for(const CodegenOptions *o, int64_t n, int64_t k) {
  const char *env = getenv("GPUC_INT8_TILE");
  bool wg = use_wgmma(o);
  I8Tile t = {0, 0, 128, 0, 2, 4, wg};
  if (env && wg && sscanf(env, "wg%dx%ds%d", &t.bm, &t.bn, &t.st) == 3 && tile_ok(&t)) return t;
  if (env && !wg && sscanf(env, "%dx%dx%ds%dw%dx%d", &t.bm, &t.bn, &t.bk, &t.st, &t.wm, &t.wn) >= 4 && tile_ok(&t))
    return t;
  if (wg) {
    /* The H200 sweep (docs/BENCHMARKS.md, BERT-base's four shapes at 4096
     * rows): with a long K the main loop dominates and the 256 x 128 tile,
     * fewest L2 bytes an operation, won (K 3072: 0.0442 ms, 128 x 128
     * 0.0498); with K 768 a tile's prologue and epilogue weigh as much, and
     * CTAs sharing an SM hide each other's: 3-stage tiles small enough for
     * 2 (128 x 128, N >= 2048) or 3 (128 x 64) CTAs an SM beat deeper
     * pipelines at one CTA an SM by 1.3-1.8x */
    if (k >= 2048) return (I8Tile){256, 128, 128, 4, 1, 1, true};
    if (n >= 2048) return (I8Tile){128, 128, 128, 3, 1, 1, true};
    return (I8Tile){128, 64, 128, 3, 1, 1, true};
  }
  /* the sweep's best at BERT-base's four shapes but N 768 (where 64-wide
   * warp tiles won by 1%): 128 x 128 tiles, 128-byte K steps, 3 stages */
  return (I8Tile){128, 128, 128, 3, 2, 4, false};
}

/* The module's shared pieces, once: the zero-filling cp.async, the int8
 * mma, the swizzle and the main loop (a template over the tile). */
static void int8_gemm_helpers(StrBuf *b) {
  static const char *marker = "/* gpuc int8 gemm helpers */";
  if (b->s && strstr(b->s, marker)) return;
  mma_helpers(b); /* ldsm_x4, cp_async_commit/wait (codegen/lower_attention.c) */
  sb_printf(b, "%s\n", marker);
  sb_printf(b,
    "__device__ __forceinline__ void cp_async16_z(void* dst, const void* src, bool ok) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16, %%2;\\n\"\n"
    "               :: \"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(src), \"r\"(ok ? 16 : 0));\n}\n"
    "__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, unsigned b0, unsigned b1) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%%0,%%1,%%2,%%3}, {%%4,%%5,%%6,%%7}, \"\n"
    "               \"{%%8,%%9}, {%%0,%%1,%%2,%%3};\\n\"\n"
    "               : \"+r\"(c[0]), \"+r\"(c[1]), \"+r\"(c[2]), \"+r\"(c[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n}\n"
    "/* byte offset of 16-byte chunk ch of row r in a tile of BK-byte rows: the\n"
    " * chunks XOR-swizzled so the 8 rows one ldmatrix matrix reads hit 32 banks */\n"
    "template <int BK> __device__ __forceinline__ int i8_sw(int r, int ch) {\n"
    "  return BK == 128 ? r * 128 + ((ch ^ (r & 7)) << 4) : r * 64 + ((ch ^ ((r >> 1) & 3)) << 4);\n}\n"
    "template <int BM, int BN, int BK, int NTH>\n"
    "__device__ __forceinline__ void i8_load(const signed char* __restrict__ x, const signed char* __restrict__ w,\n"
    "    int M, int N, int K, int m0, int n0, int kt, unsigned char* st) {\n"
    "  constexpr int CH = BK / 16; /* 16-byte chunks a row */\n"
    "  const int k0 = kt * BK;\n"
    "#pragma unroll\n"
    "  for (int q = threadIdx.x; q < BM * CH; q += NTH) {\n"
    "    const int r = q / CH, ch = q %% CH;\n"
    "    const bool ok = m0 + r < M && k0 + ch * 16 < K;\n"
    "    cp_async16_z(st + i8_sw<BK>(r, ch), x + (ok ? (i64)(m0 + r) * K + k0 + ch * 16 : 0), ok);\n"
    "  }\n"
    "#pragma unroll\n"
    "  for (int q = threadIdx.x; q < BN * CH; q += NTH) {\n"
    "    const int r = q / CH, ch = q %% CH;\n"
    "    const bool ok = n0 + r < N && k0 + ch * 16 < K;\n"
    "    cp_async16_z(st + BM * BK + i8_sw<BK>(r, ch), w + (ok ? (i64)(n0 + r) * K + k0 + ch * 16 : 0), ok);\n"
    "  }\n"
    "}\n"
    "/* acc[MT][NT] of this warp's (MT*16) x (NT*8) part of the BM x BN tile at (m0, n0) */\n"
    "template <int BM, int BN, int BK, int ST, int MT, int NT>\n"
    "__device__ __forceinline__ void i8_mainloop(const signed char* __restrict__ x, const signed char* __restrict__ w,\n"
    "    int M, int N, int K, int m0, int n0, int (&acc)[MT][NT][4], unsigned char* sm) {\n"
    "  constexpr int WN = BN / (NT * 8), NTH = (BM / (MT * 16)) * WN * 32, SB = (BM + BN) * BK;\n"
    "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp / WN, wn = warp %% WN;\n"
    "  const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: this lane addresses row lr of matrix lm */\n"
    "  const int KT = (K + BK - 1) / BK;\n"
    "#pragma unroll\n"
    "  for (int s = 0; s < ST - 1; s++) {\n"
    "    if (s < KT) i8_load<BM, BN, BK, NTH>(x, w, M, N, K, m0, n0, s, sm + s * SB);\n"
    "    cp_async_commit();\n"
    "  }\n"
    "  for (int kt = 0; kt < KT; kt++) {\n"
    "    cp_async_wait<ST - 2>(); /* stage kt is in */\n"
    "    __syncthreads();         /* and every warp is done with stage kt - 1, refilled next */\n"
    "    if (kt + ST - 1 < KT) i8_load<BM, BN, BK, NTH>(x, w, M, N, K, m0, n0, kt + ST - 1, sm + ((kt + ST - 1) %% ST) * SB);\n"
    "    cp_async_commit();\n"
    "    const unsigned char* as = sm + (kt %% ST) * SB;\n"
    "    const unsigned char* bs = as + BM * BK;\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < BK / 32; kk++) {\n"
    "      unsigned af[MT][4], bf[NT][2];\n"
    "#pragma unroll\n"
    "      for (int mt = 0; mt < MT; mt++)\n"
    "        ldsm_x4(af[mt], as + i8_sw<BK>(wm * MT * 16 + mt * 16 + (lm & 1) * 8 + lr, kk * 2 + (lm >> 1)));\n"
    "#pragma unroll\n"
    "      for (int np = 0; np < NT / 2; np++) {\n"
    "        unsigned t[4];\n"
    "        ldsm_x4(t, bs + i8_sw<BK>(wn * NT * 8 + np * 16 + (lm >> 1) * 8 + lr, kk * 2 + (lm & 1)));\n"
    "        bf[2 * np][0] = t[0]; bf[2 * np][1] = t[1]; bf[2 * np + 1][0] = t[2]; bf[2 * np + 1][1] = t[3];\n"
    "      }\n"
    "#pragma unroll\n"
    "      for (int mt = 0; mt < MT; mt++)\n"
    "#pragma unroll\n"
    "        for (int nt = 0; nt < NT; nt++) mma_s8(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);\n"
    "    }\n"
    "  }\n"
    "  cp_async_wait<0>();\n"
    "}\n");
}

/* Hopper's pieces, once a width: the shared-memory matrix descriptor, the
 * m64nBNk32 s8 wgmma, its fence / commit / wait, and the main loop.
 *
 * Descriptor (PTX ISA, "matrix descriptor" of wgmma): start address >> 4
 * in bits 0-13, leading byte offset >> 4 in 16-29 (unused by a swizzled
 * K-major operand: 1), stride byte offset >> 4 in 32-45 (1024: from one
 * 8-row group of 128-byte rows to the next), swizzle 128B (1) in 62-63.
 * i8_sw<128> stores chunk ch of row r at r * 128 + ((ch ^ (r & 7)) << 4),
 * which is that swizzle on a 1024-byte-aligned tile; a 32-byte K step
 * inside the row is the start address plus 32 (the hardware swizzles the
 * address it forms, so the row's XOR pattern still applies).
 *
 * Pipeline: ST stages, loads issued ST - 2 ahead, so the stage refilled is
 * the one two steps back, whose wgmma each warpgroup waited for (wait 1
 * keeps only the newest group in flight) before the barrier. cp.async
 * writes reach wgmma (the async proxy) through fence.proxy.async. */
static void int8_wgmma_helpers(StrBuf *b, int bn) {
  char marker[64];
  snprintf(marker, sizeof marker, "/* gpuc int8 wgmma n%d */", bn);
  if (b->s && strstr(b->s, marker)) return;
  static const char *common = "/* gpuc int8 wgmma common */";
  if (!b->s || !strstr(b->s, common))
    sb_printf(b, "%s\n"
      "template <int BN> __device__ void wgmma_s8(int* d, unsigned long long da, unsigned long long db, int acc);\n"
      "__device__ __forceinline__ unsigned long long wg_desc(const unsigned char* p) {\n"
      "  const unsigned a = (unsigned)__cvta_generic_to_shared(p);\n"
      "  return (unsigned long long)((a & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |\n"
      "         (1ull << 62);\n}\n"
      "__device__ __forceinline__ void wg_fence() { asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\"); }\n"
      "__device__ __forceinline__ void wg_commit() { asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\"); }\n"
      "template <int N> __device__ __forceinline__ void wg_wait() {\n"
      "  asm volatile(\"wgmma.wait_group.sync.aligned %%0;\\n\" :: \"n\"(N) : \"memory\");\n}\n"
      "/* keeps the compiler from moving the accumulators across wgmma's async window */\n"
      "template <int R> __device__ __forceinline__ void wg_fence_acc(int* d) {\n"
      "#pragma unroll\n  for (int i = 0; i < R; i++) asm volatile(\"\" : \"+r\"(d[i]) :: \"memory\");\n}\n"
      "template <int BM, int BN, int ST>\n"
      "__device__ __forceinline__ void i8_wg_mainloop(const signed char* __restrict__ x, const signed char* __restrict__ w,\n"
      "    int M, int N, int K, int m0, int n0, int* acc, unsigned char* sm) {\n"
      "  constexpr int BK = 128, NTH = BM * 2, SB = (BM + BN) * BK;\n"
      "  const int wg = threadIdx.x >> 7;\n"
      "  const int KT = (K + BK - 1) / BK;\n"
      "#pragma unroll\n"
      "  for (int s = 0; s < ST - 2; s++) {\n"
      "    if (s < KT) i8_load<BM, BN, BK, NTH>(x, w, M, N, K, m0, n0, s, sm + s * SB);\n"
      "    cp_async_commit();\n"
      "  }\n"
      "  for (int kt = 0; kt < KT; kt++) {\n"
      "    cp_async_wait<ST - 3>(); /* this thread's part of stage kt is in */\n"
      "    asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n"
      "    __syncthreads(); /* everyone's, and every warpgroup is done with stage kt - 2 */\n"
      "    if (kt + ST - 2 < KT)\n"
      "      i8_load<BM, BN, BK, NTH>(x, w, M, N, K, m0, n0, kt + ST - 2, sm + ((kt + ST - 2) %% ST) * SB);\n"
      "    cp_async_commit();\n"
      "    const unsigned char* as = sm + (kt %% ST) * SB + wg * 64 * BK;\n"
      "    const unsigned char* bs = sm + (kt %% ST) * SB + BM * BK;\n"
      "    wg_fence_acc<BN / 2>(acc);\n"
      "    wg_fence();\n"
      "#pragma unroll\n"
      "    for (int kk = 0; kk < BK / 32; kk++)\n"
      "      wgmma_s8<BN>(acc, wg_desc(as + kk * 32), wg_desc(bs + kk * 32), kt | kk);\n"
      "    wg_commit();\n"
      "    wg_fence_acc<BN / 2>(acc);\n"
      "    wg_wait<1>();\n"
      "  }\n"
      "  wg_wait<0>();\n"
      "  wg_fence_acc<BN / 2>(acc);\n"
      "  cp_async_wait<0>();\n"
      "}\n", common);
  /* d[4j + e]: the m16n8 layout a warp, n8 tile j (accumulator layout of
   * wgmma .m64nNk32: warp w of the group rows 16w + lane/4 (+ 8)); the
   * last operand 0 on a CTA's first K step: D = A B, no zeroed D read */
  const int nr = bn / 2;
  sb_printf(b, "%s\ntemplate <> __device__ __forceinline__ void wgmma_s8<%d>(int* d, unsigned long long da, "
               "unsigned long long db, int acc) {\n"
               "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"\n"
               "    \"wgmma.mma_async.sync.aligned.m64n%dk32.s32.s8.s8 {", marker, bn, nr + 2, bn);
  for (int i = 0; i < nr; i++) sb_printf(b, "%s%%%d", i ? "," : "", i);
  sb_printf(b, "}, %%%d, %%%d, p;\\n}\\n\"\n    : ", nr, nr + 1);
  for (int i = 0; i < nr; i++) sb_printf(b, "%s\"+r\"(d[%d])", i ? (i % 8 ? ", " : ",\n      ") : "", i);
  sb_printf(b, "\n    : \"l\"(da), \"l\"(db), \"r\"(acc));\n}\n");
}

/* The tile's store: each warp's accumulators acc[mt][nt][4] (the m16n8
 * layout: lane l rows l/4 and + 8, columns 2 (l % 4) and + 1 of each
 * 16 x 8 tile; warps wn across the tile's columns) at (m0, n0), pairs of
 * columns at a time, through epi's program or as int32. Warp w is
 * threadIdx.x / 32 (the WS kernel's consumers are its first warps). */
static void emit_store(StrBuf *b, const EwProgram *epi, int64_t n, int wn, int mt, int nt, const char *warp) {
  sb_printf(b, "  const int lane = threadIdx.x & 31, warp = %s;\n"
               "  const int rw = m0 + (warp / %d) * %d + (lane >> 2), cw = n0 + (warp %% %d) * %d + (lane & 3) * 2;\n"
               "#pragma unroll\n  for (int a = 0; a < %d; a++)\n#pragma unroll\n    for (int c = 0; c < %d; c++)\n"
               "#pragma unroll\n      for (int h = 0; h < 2; h++) {\n"
               "    const int r = rw + a * 16 + h * 8, col = cw + c * 8;\n"
               "    if (r >= M || col >= N) continue;\n"
               "    const i64 i0_ = (i64)r * N + col;\n",
            warp, wn, mt * 16, wn, nt * 8, mt, nt);
  if (epi) {
    sb_printf(b, "    const i64 row_ = r; const int j0_ = col; (void)row_; (void)j0_;\n"
                 "    const int reg_[2] = {acc[a][c][2 * h], acc[a][c][2 * h + 1]};\n");
    ew_epilogue_pair(b, epi, n);
  } else {
    sb_printf(b, "    *(int2*)(out0 + i0_) = make_int2(acc[a][c][2 * h], acc[a][c][2 * h + 1]);\n");
  }
  sb_printf(b, "  }\n");
}

/* ---- the warp-specialized wgmma kernel (GPUC_INT8_WS=1 or =tma, sm_90) ----
 *
 * The kernel above has every warp both load (cp.async) and compute
 * (wgmma), with a __syncthreads a K step; at BERT's K 768 (6 steps of
 * 128 bytes) a tile's prologue and epilogue weigh as much as its main
 * loop. Here the roles split (docs/BENCHMARKS.md, twelfth session):
 *   - C consumer warpgroups (threads 0 .. 128 C - 1), each 64 rows x BN of
 *     a BM = 64 C tile, run wgmma m64nBNk32 on a ring of ST stages and the
 *     same epilogue (emit_store: warp w holds rows 16 w + lane / 4 (+ 8));
 *   - a producer (the last warpgroup, or warp: ws_fit) fills the ring by
 *     cp.async, each thread one 16-byte chunk column of the 128-byte rows,
 *     or (GPUC_INT8_WS=tma) its first thread by two TMA box loads a stage
 *     (cp.async.bulk.tensor: Xq's BM x 128 bytes and Wq's BN x 128 from
 *     the CUtensorMaps the session encodes, cg_tensor_map; the hardware
 *     writes the 128B swizzle and zeros past the tensor);
 *   - per stage a "full" mbarrier (an arrival a producer thread: its
 *     cp.async.mbarrier.arrive.noinc fires when its copies have landed;
 *     TMA: one arrival with expect_tx of the stage's bytes, which the box
 *     loads count down) and an "empty" one (4 C arrivals: lane 0 of each
 *     consumer warp once wgmma.wait_group says the stage's reads are done);
 *   - persistent CTAs: CTA b takes tiles b, b + grid, ... (M fastest, so
 *     CTAs side by side share Wq's columns in L2); the ring runs on across
 *     tiles, so the producer fills the next tile's stages while the
 *     consumers run this tile's epilogue.
 * Same shared layout (i8_sw<128>: the 128B swizzle on 1024-byte-aligned
 * stages), descriptors and wgmma as the kernel above, the same zero-filled
 * loads past M, N and K, so the same exact int32 sums and epilogue bits.
 * Tile shapes: by shape or GPUC_INT8_WS_TILE (ws_choice), ping-pong included
 * (emit_pp_body). Checked on the host by tests/int8_ws_host_test.py (an
 * emulation of the threads, cp.async, TMA, mbarriers and wgmma), on the
 * GPU by tests/gpu/int8_ws_check.sh. */
typedef struct I8Ws { int c, bn, st, grid_per_sm, per_sm, np, r0; bool pp, tma; } I8Ws;

/* rows of a tile: the consumer warpgroups' 64 each, or one's (ping-pong) */
static int ws_bm(const I8Ws *w) { return w->pp ? 64 : 64 * w->c; }

/* sm_90's choice between the wgmma kernel and the warp-specialized one, by
 * GPUC_INT8_WS: unset, the default (I8_WS_AUTO: per shape, ws_choice); "0"
 * the wgmma kernel everywhere (the default before the TMA kernel was
 * measured, kept for A/B); "1" the WS kernel everywhere, its loads by
 * cp.async; "tma" by TMA. Not sm_90 (or GPUC_INT8_WGMMA=0): off. */
typedef enum { I8_WS_OFF, I8_WS_AUTO, I8_WS_CPASYNC, I8_WS_TMA } I8WsMode;
static I8WsMode ws_mode(const CodegenOptions *o) {
  const char *env = getenv("GPUC_INT8_WS");
  if (!use_wgmma(o) || (env && !strcmp(env, "0"))) return I8_WS_OFF;
  if (!env || !*env) return I8_WS_AUTO;
  return strcmp(env, "tma") ? I8_WS_CPASYNC : I8_WS_TMA;
}

enum { WS_SM_BYTES = 228 * 1024, WS_CTA_MAX = 227 * 1024, WS_SMS = 132 };

/* shared bytes: ST stages of (BM + BN) 128-byte rows, 1 KB to align them,
 * then 2 ST + 2 mbarriers (8 bytes each: full, empty, ping-pong's turns) */
static unsigned ws_shmem(const I8Ws *w) { return (unsigned)(w->st * (ws_bm(w) + w->bn) * 128 + 1024 + 16 * w->st + 16); }

/* Fills in CTAs an SM (as many as shared memory allows, 1 KB a CTA the
 * runtime's, at most 3), the producer's threads and r0, the registers a
 * thread that __launch_bounds__ allows (65536 / threads an SM, a multiple
 * of 8; ptxas may use fewer). ptxas allocates the whole kernel within r0:
 * setmaxnreg.inc does not raise what it gives the code after it (it
 * aborts, and NVRTC with it, on an m64n256 wgmma at 128 even after an
 * inc to 232, on an m64n128 one at 80), so r0 must hold the consumers'
 * BN / 2 accumulators and the epilogue's values itself, and setmaxnreg
 * (which would also need ptxas's exact count, or an inc may wait for
 * registers no warp frees) is not used. A producer warpgroup where one
 * CTA takes the SM: its 4 warps issue the copies on the SM's 4
 * schedulers; one producer warp where CTAs share it, so each thread keeps
 * more registers, and with TMA (one thread issues a stage's loads). False
 * for a tile that does not fit. */
static bool ws_fit(I8Ws *w) {
  if (w->c < 1 || w->c > 4 || (w->pp && w->c != 2) || !(w->bn == 64 || w->bn == 128 || w->bn == 256) || w->st < 2 ||
      w->st > 8)
    return false;
  const unsigned sh = ws_shmem(w);
  if (sh > WS_CTA_MAX) return false;
  const int need = w->bn / 2 + 32;
  int fit = (int)(WS_SM_BYTES / (sh + 1024));
  for (w->per_sm = fit > 3 ? 3 : fit; w->per_sm >= 1; w->per_sm--) {
    w->np = w->tma || w->per_sm > 1 ? 32 : 128; /* TMA: one thread issues a stage's two loads */
    w->r0 = (65536 / (w->per_sm * (128 * w->c + w->np))) & ~7;
    if (w->r0 >= need) return true;
  }
  return false;
}

/* w as a tile of C consumer warpgroups (ping-pong pp: two taking turns at
 * 64-row tiles), BN columns, ST stages, G CTAs an SM in the persistent grid
 * (0 or past what fits: as many as fit); false when it does not fit. */
static bool ws_tile(I8Ws *w, int c, int bn, int st, bool pp, bool tma, int g) {
  *w = (I8Ws){.c = c, .bn = bn, .st = st, .pp = pp, .tma = tma};
  if (!ws_fit(w)) return false;
  w->grid_per_sm = g > 0 && g <= w->per_sm ? g : w->per_sm;
  return true;
}

/* GPUC_INT8_WS_TILE=wsBMxBNsST[gG] (BM 64 to 256: 1 to 4 consumer
 * warpgroups; BN 64, 128 or 256; ST 2 to 8 stages; G CTAs an SM in the
 * persistent grid, else as many as fit), or pp64xBNsST[gG]: ping-pong, two
 * consumer warpgroups taking turns at 64 x BN tiles (emit_ws_body), for
 * the sweeps of tests/gpu/int8_gemm_check.py; false when unset or not a
 * tile that fits. */
static bool ws_tile_env(I8Ws *w, bool tma) {
  const char *env = getenv("GPUC_INT8_WS_TILE");
  int bm = 0, bn = 0, st = 0, g = 0;
  if (!env) return false;
  if (sscanf(env, "ws%dx%ds%dg%d", &bm, &bn, &st, &g) >= 3 && bm > 0 && bm % 64 == 0)
    return ws_tile(w, bm / 64, bn, st, false, tma, g);
  if (sscanf(env, "pp%dx%ds%dg%d", &bm, &bn, &st, &g) >= 3 && bm == 64) return ws_tile(w, 2, bn, st, true, tma, g);
  return false;
}

/* Whether sm_90's int8 GEMM Acc [m, n] = Xq [m, k] Wq [n, k]^T runs the
 * warp-specialized kernel, and its tile w.
 *   GPUC_INT8_WS=1 / =tma: always; GPUC_INT8_WS_TILE's tile, else 128 x
 *   128 with 3 stages, two CTAs an SM (the wgmma kernel's best at K 768).
 *   Default (unset): TMA loads, GPUC_INT8_WS_TILE's tile for every GEMM
 *   if set, else per shape from the H200 sweep (docs/BENCHMARKS.md,
 *   fifteenth session: GEMM + epilogue step at M 4096, ms; "default" the
 *   wgmma kernel of tile_for):
 *     K >= 2048: ws128x128s3. K 3072 N 768 +res: 0.0354 against
 *       pp64x128s4 0.0363 and default 0.0439 (LLaMA's K 2048 down
 *       projection takes it too);
 *     K < 2048, N >= 2048: ping-pong, 4 stages. N 2304: pp64x256s4 0.0320
 *       (the sweep's best; ws128x128s3 0.0337, default 0.0397); N 3072
 *       ReLU: pp64x128s4 0.0425 (the sweep's best, pp64x256s4 slower;
 *       ws128x128s3 0.0429, default 0.0508). So BN 256 below N 3072, 128
 *       from there on (LLaMA's N 4096 gate+up: the nearer measured shape);
 *     K < 2048, N < 2048: the wgmma kernel. N 768 +res: default 0.0222
 *       against TMA ws128x128s3 0.0246 and pp64x128s4 0.0240. */
static bool ws_choice(const CodegenOptions *o, int64_t n, int64_t k, I8Ws *w) {
  const I8WsMode mode = ws_mode(o);
  if (mode == I8_WS_OFF) return false;
  const bool tma = mode != I8_WS_CPASYNC;
  if (ws_tile_env(w, tma)) return true;
  if (mode != I8_WS_AUTO || k >= 2048) {
    if (!ws_tile(w, 2, 128, 3, false, tma, 0)) abort(); /* fits by construction */
    return true;
  }
  if (n < 2048) return false;
  if (!ws_tile(w, 2, n < 3072 ? 256 : 128, 4, true, tma, 0)) abort();
  return true;
}

/* The ring's device side, once a module: mbarrier wait/arrive, the
 * producer's loop and one consumer tile's main loop. */
static void int8_ws_helpers(StrBuf *b) {
  static const char *marker = "/* gpuc int8 wgmma ws */";
  if (b->s && strstr(b->s, marker)) return;
  sb_printf(b, "%s\n", marker);
  sb_printf(b,
    "__device__ __forceinline__ unsigned ws_sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }\n"
    "__device__ __forceinline__ void ws_bar_init(unsigned long long* bar, unsigned count) {\n"
    "  asm volatile(\"mbarrier.init.shared::cta.b64 [%%0], %%1;\\n\" :: \"r\"(ws_sa(bar)), \"r\"(count) : \"memory\");\n}\n"
    "/* until the phase of this parity has completed (a fresh barrier: parity 1 has) */\n"
    "__device__ __forceinline__ void ws_bar_wait(unsigned long long* bar, unsigned parity) {\n"
    "  asm volatile(\"{\\n.reg .pred done;\\nws_wait:\\n\"\n"
    "               \"mbarrier.try_wait.parity.shared::cta.b64 done, [%%0], %%1;\\n\"\n"
    "               \"@!done bra ws_wait;\\n}\\n\" :: \"r\"(ws_sa(bar)), \"r\"(parity) : \"memory\");\n}\n"
    "__device__ __forceinline__ void ws_bar_arrive(unsigned long long* bar) {\n"
    "  asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%%0];\\n\" :: \"r\"(ws_sa(bar)) : \"memory\");\n}\n"
    "/* an arrival once this thread's cp.asyncs so far have landed (noinc: the\n"
    " * barrier's count includes it) */\n"
    "__device__ __forceinline__ void ws_bar_arrive_cp(unsigned long long* bar) {\n"
    "  asm volatile(\"cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%%0];\\n\" :: \"r\"(ws_sa(bar)) : \"memory\");\n}\n"
    "/* the producer (NP threads: a warp or a warpgroup): thread p copies 16-byte\n"
    " * chunk p %% 8 of rows p / 8 + (NP / 8) i of each stage's A (BM rows) and\n"
    " * B (BN rows) tiles, for every K step of every tile of this CTA, in ring order */\n"
    "template <int BM, int BN, int ST, int NP>\n"
    "__device__ __forceinline__ void ws_produce(const signed char* __restrict__ x, const signed char* __restrict__ w,\n"
    "    int M, int N, int K, int mtiles, int tiles, int p, unsigned char* sm, unsigned long long* full,\n"
    "    unsigned long long* empty) {\n"
    "  constexpr int BK = 128, SB = (BM + BN) * BK;\n"
    "  const int KT = (K + BK - 1) / BK, ch = p & 7, r0 = p >> 3;\n"
    "  int s = 0;\n"
    "  unsigned ph = 0;\n"
    "  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {\n"
    "    const int m0 = (t %% mtiles) * BM, n0 = (t / mtiles) * BN;\n"
    "    for (int kt = 0; kt < KT; kt++) {\n"
    "      ws_bar_wait(empty + s, ph ^ 1); /* the consumers are done with this stage's last round */\n"
    "      unsigned char* st = sm + s * SB;\n"
    "      const int kc = kt * BK + ch * 16;\n"
    "      const bool kin = kc < K;\n"
    "#pragma unroll 4\n" /* fully unrolled, NP 32's 64 copies spill at 112 registers */
    "      for (int i = 0; i < BM / (NP / 8); i++) {\n"
    "        const int r = r0 + (NP / 8) * i;\n"
    "        const bool ok = kin && m0 + r < M;\n"
    "        cp_async16_z(st + i8_sw<BK>(r, ch), x + (ok ? (i64)(m0 + r) * K + kc : 0), ok);\n"
    "      }\n"
    "#pragma unroll 4\n"
    "      for (int i = 0; i < BN / (NP / 8); i++) {\n"
    "        const int r = r0 + (NP / 8) * i;\n"
    "        const bool ok = kin && n0 + r < N;\n"
    "        cp_async16_z(st + BM * BK + i8_sw<BK>(r, ch), w + (ok ? (i64)(n0 + r) * K + kc : 0), ok);\n"
    "      }\n"
    "      ws_bar_arrive_cp(full + s);\n"
    "      if (++s == ST) { s = 0; ph ^= 1; }\n"
    "    }\n"
    "  }\n"
    "  cp_async_wait<0>();\n"
    "}\n"
    "/* consumer warpgroup wg's 64 x BN sums of one tile (acc: wgmma's m64nBN\n"
    " * s32 fragment), taking the ring's stages from (s, ph) on; each stage\n"
    " * handed back once the wgmma reading it has completed (wait 1: all but\n"
    " * the newest group) */\n"
    "template <int BM, int BN, int ST>\n"
    "__device__ __forceinline__ void ws_consume(int* acc, int K, int wg, unsigned char* sm, unsigned long long* full,\n"
    "    unsigned long long* empty, int& s, unsigned& ph) {\n"
    "  constexpr int BK = 128, SB = (BM + BN) * BK;\n"
    "  const int KT = (K + BK - 1) / BK;\n"
    "  const bool lead = (threadIdx.x & 31) == 0;\n"
    "  int prev = -1;\n"
    "  for (int kt = 0; kt < KT; kt++) {\n"
    "    ws_bar_wait(full + s, ph);\n"
    "    /* the cp.async bytes (generic proxy) seen by wgmma (async proxy) */\n"
    "    asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n"
    "    const unsigned char* as = sm + s * SB + wg * 64 * BK;\n"
    "    const unsigned char* bs = sm + s * SB + BM * BK;\n"
    "    wg_fence_acc<BN / 2>(acc);\n"
    "    wg_fence();\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < BK / 32; kk++)\n"
    "      wgmma_s8<BN>(acc, wg_desc(as + kk * 32), wg_desc(bs + kk * 32), kt | kk);\n"
    "    wg_commit();\n"
    "    wg_fence_acc<BN / 2>(acc);\n"
    "    wg_wait<1>();\n"
    "    if (prev >= 0 && lead) ws_bar_arrive(empty + prev);\n"
    "    prev = s;\n"
    "    if (++s == ST) { s = 0; ph ^= 1; }\n"
    "  }\n"
    "  wg_wait<0>();\n"
    "  wg_fence_acc<BN / 2>(acc);\n"
    "  if (lead) ws_bar_arrive(empty + prev);\n"
    "}\n"
    "/* TMA (GPUC_INT8_WS=tma): a CUtensorMap the session encodes, by value */\n"
    "struct __align__(64) TmaMap { unsigned long long v[16]; };\n"
    "/* this thread's arrival, and `bytes` more the phase waits for */\n"
    "__device__ __forceinline__ void ws_bar_expect(unsigned long long* bar, unsigned bytes) {\n"
    "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], %%1;\\n\" :: \"r\"(ws_sa(bar)), \"r\"(bytes) : \"memory\");\n}\n"
    "/* the box at (byte c0 of a row, row c1) of map's tensor into dst (128B swizzle,\n"
    " * zeros past the tensor), its bytes counted on bar */\n"
    "__device__ __forceinline__ void ws_tma_load(unsigned char* dst, const TmaMap* map, int c0, int c1,\n"
    "    unsigned long long* bar) {\n"
    "  asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%%0], [%%1, {%%2, %%3}], [%%4];\\n\"\n"
    "               :: \"r\"(ws_sa(dst)), \"l\"((unsigned long long)map), \"r\"(c0), \"r\"(c1), \"r\"(ws_sa(bar)) : \"memory\");\n}\n"
    "/* the TMA producer (one thread): per stage an expect of its bytes and two box\n"
    " * loads, A's BM rows and B's BN rows of 128 bytes, the order ws_produce's */\n"
    "template <int BM, int BN, int ST>\n"
    "__device__ __forceinline__ void ws_produce_tma(const TmaMap* tx, const TmaMap* tw, int K, int mtiles, int tiles,\n"
    "    unsigned char* sm, unsigned long long* full, unsigned long long* empty) {\n"
    "  constexpr int BK = 128, SB = (BM + BN) * BK;\n"
    "  const int KT = (K + BK - 1) / BK;\n"
    "  int s = 0;\n"
    "  unsigned ph = 0;\n"
    "  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {\n"
    "    const int m0 = (t %% mtiles) * BM, n0 = (t / mtiles) * BN;\n"
    "    for (int kt = 0; kt < KT; kt++) {\n"
    "      ws_bar_wait(empty + s, ph ^ 1);\n"
    "      ws_bar_expect(full + s, SB);\n"
    "      ws_tma_load(sm + s * SB, tx, kt * BK, m0, full + s);\n"
    "      ws_tma_load(sm + s * SB + BM * BK, tw, kt * BK, n0, full + s);\n"
    "      if (++s == ST) { s = 0; ph ^= 1; }\n"
    "    }\n"
    "  }\n"
    "}\n"
    "/* the ring position n steps on (the other warpgroup's tile: ping-pong) */\n"
    "template <int ST> __device__ __forceinline__ void ws_skip(int& s, unsigned& ph, int n) {\n"
    "  s += n;\n"
    "  ph ^= (unsigned)(s / ST) & 1u;\n"
    "  s %%= ST;\n"
    "}\n");
}

/* The producer's branch (threads 128 C on): ws_produce on every producer
 * thread, or ws_produce_tma on the first (TMA) */
static void emit_producer(StrBuf *b, const I8Ws *w, int bm) {
  const int first = 128 * w->c;
  if (w->tma)
    sb_printf(b, "  if (threadIdx.x >= %d) { /* the producer: one thread issues the TMA loads */\n"
                 "    if (threadIdx.x == %d) ws_produce_tma<%d, %d, %d>(&tmx_, &tmw_, K, mtiles_, tiles_, smem_, full_, empty_);\n"
                 "    return;\n"
                 "  }\n",
              first, first, bm, w->bn, w->st);
  else
    sb_printf(b, "  if (threadIdx.x >= %d) { /* the producer */\n"
                 "    ws_produce<%d, %d, %d, %d>(xq, wq, M, N, K, mtiles_, tiles_, threadIdx.x - %d, smem_, full_, empty_);\n"
                 "    return;\n"
                 "  }\n",
              first, bm, w->bn, w->st, w->np, first);
}

/* Ping-pong (GPUC_INT8_WS_TILE=pp64xBNsST): the CTA's tiles (64 x BN each)
 * in order i = 0, 1, 2, ... are filled into the ring by the producer as
 * ever; warpgroup g takes the tiles i = g, g + 2, ..., so while one runs
 * its tile's wgmmas the other runs its epilogue. A warpgroup steps its
 * ring position over the other's K steps (ws_skip), and starts a tile's
 * wgmmas only when the other has finished its previous tile's (mbarrier
 * turn_[g]: 4 arrivals, lane 0 of each of the other's warps): that keeps
 * the tensor cores to one warpgroup at a time, and keeps a warpgroup from
 * waiting on a stage's full barrier more than one fill ahead of what has
 * been consumed (a parity wait cannot tell fill r from fill r - 2). Each
 * stage is released by one warpgroup: empty counts 4. */
static void emit_pp_body(StrBuf *b, const I8Ws *w, const EwProgram *epi, int64_t n) {
  const int nt = w->bn / 8;
  sb_printf(b, "  unsigned long long* turn_ = empty_ + %d;\n"
               "  if (threadIdx.x == 0) {\n"
               "    ws_bar_init(turn_, 4);\n"
               "    ws_bar_init(turn_ + 1, 4);\n"
               "  }\n"
               "  __syncthreads();\n",
            w->st);
  emit_producer(b, w, 64);
  sb_printf(b, "  int acc[1][%d][4];\n"
               "#pragma unroll\n  for (int c = 0; c < %d; c++)\n#pragma unroll\n    for (int e = 0; e < 4; e++) acc[0][c][e] = 0;\n"
               "  const int wg_ = threadIdx.x >> 7, KT_ = (K + 127) / 128;\n"
               "  int s_ = 0;\n"
               "  unsigned ph_ = 0, turns_ = 0;\n"
               "  ws_skip<%d>(s_, ph_, wg_ * KT_);\n"
               "  for (int t_ = blockIdx.x + wg_ * gridDim.x; t_ < tiles_; t_ += 2 * gridDim.x) {\n"
               "  const int m0 = (t_ %% mtiles_) * 64, n0 = (t_ / mtiles_) * %d;\n"
               "  ws_bar_wait(turn_ + wg_, (turns_++ & 1u) ^ (wg_ ? 0u : 1u)); /* the other's wgmmas of the tile before are done */\n"
               "  ws_consume<64, %d, %d>(&acc[0][0][0], K, 0, smem_, full_, empty_, s_, ph_);\n"
               "  if ((threadIdx.x & 31) == 0) ws_bar_arrive(turn_ + (wg_ ^ 1));\n"
               "  ws_skip<%d>(s_, ph_, KT_);\n",
            nt, nt, w->st, w->bn, w->bn, w->st, w->st);
  emit_store(b, epi, n, 1, 1, nt, "(threadIdx.x >> 5) & 3");
  sb_printf(b, "  }\n}\n");
}

/* The WS kernel's body after its parameters (b: the kernel text so far):
 * barriers, the role split, the persistent tile loop with emit_store. */
static void emit_ws_body(StrBuf *b, const I8Ws *w, const EwProgram *epi, int64_t m, int64_t n, int64_t k) {
  const int bm = ws_bm(w), nt = w->bn / 8;
  sb_printf(b, "  extern __shared__ __align__(1024) unsigned char smem_raw_[];\n"
               "  unsigned char* smem_ = smem_raw_ + ((1024 - ((unsigned)__cvta_generic_to_shared(smem_raw_) & 1023)) & 1023);\n"
               "  unsigned long long* full_ = (unsigned long long*)(smem_ + %d);\n"
               "  unsigned long long* empty_ = full_ + %d;\n"
               "  const int M = %lld, N = %lld, K = %lld;\n"
               "  const int mtiles_ = (M + %d) / %d, tiles_ = mtiles_ * ((N + %d) / %d);\n"
               "  if (threadIdx.x == 0)\n"
               "    for (int s = 0; s < %d; s++) {\n"
               "      ws_bar_init(full_ + s, %d);\n"
               "      ws_bar_init(empty_ + s, %d);\n"
               "    }\n"
               "  __syncthreads();\n",
            w->st * (bm + w->bn) * 128, w->st, LL(m), LL(n), LL(k), bm - 1, bm, w->bn - 1, w->bn, w->st,
            w->tma ? 1 : w->np, w->pp ? 4 : 4 * w->c);
  if (w->pp) {
    emit_pp_body(b, w, epi, n);
    return;
  }
  emit_producer(b, w, bm);
  sb_printf(b, "  int acc[1][%d][4];\n"
               "#pragma unroll\n  for (int c = 0; c < %d; c++)\n#pragma unroll\n    for (int e = 0; e < 4; e++) acc[0][c][e] = 0;\n"
               "  int s_ = 0;\n"
               "  unsigned ph_ = 0;\n"
               "  for (int t_ = blockIdx.x; t_ < tiles_; t_ += gridDim.x) {\n"
               "  const int m0 = (t_ %% mtiles_) * %d, n0 = (t_ / mtiles_) * %d;\n"
               "  ws_consume<%d, %d, %d>(&acc[0][0][0], K, threadIdx.x >> 7, smem_, full_, empty_, s_, ph_);\n",
            nt, nt, bm, w->bn, bm, w->bn, w->st);
  emit_store(b, epi, n, 1, 1, nt, "threadIdx.x >> 5");
  sb_printf(b, "  }\n}\n");
}

/* The all-warps kernels' body after its parameters: one tile (blockIdx)
 * by the mma.sync or the wgmma main loop, then emit_store. */
static void emit_body(StrBuf *b, const I8Tile *t, const EwProgram *epi, int64_t m, int64_t n, int64_t k) {
  const I8Tile T = *t;
  const int mt = T.wg ? 1 : T.bm / (16 * T.wm), nt = T.wg ? T.bn / 8 : T.bn / (8 * T.wn);
  const int wn = T.wg ? 1 : T.wn;
  if (T.wg)
    sb_printf(b, "  extern __shared__ __align__(1024) unsigned char smem_raw_[];\n"
                 "  unsigned char* smem_ = smem_raw_ + ((1024 - ((unsigned)__cvta_generic_to_shared(smem_raw_) & 1023)) & 1023);\n");
  else
    sb_printf(b, "  extern __shared__ __align__(128) unsigned char smem_[];\n");
  sb_printf(b, "  const int M = %lld, N = %lld, K = %lld;\n"
               "  const int m0 = blockIdx.y * %d, n0 = blockIdx.x * %d;\n"
               "  int acc[%d][%d][4];\n"
               "#pragma unroll\n  for (int a = 0; a < %d; a++)\n#pragma unroll\n    for (int c = 0; c < %d; c++)\n"
               "#pragma unroll\n      for (int e = 0; e < 4; e++) acc[a][c][e] = 0;\n",
            LL(m), LL(n), LL(k), T.bm, T.bn, mt, nt, mt, nt);
  if (T.wg)
    sb_printf(b, "  i8_wg_mainloop<%d, %d, %d>(xq, wq, M, N, K, m0, n0, &acc[0][0][0], smem_);\n", T.bm, T.bn, T.st);
  else
    sb_printf(b, "  i8_mainloop<%d, %d, %d, %d, %d, %d>(xq, wq, M, N, K, m0, n0, acc, smem_);\n", T.bm, T.bn, T.bk,
              T.st, mt, nt);
  emit_store(b, epi, n, wn, mt, nt, "threadIdx.x >> 5");
  sb_printf(b, "}\n");
}

bool cg_int8_gemm_own(const CodegenOptions *o, int64_t m, int64_t n, int64_t k, bool epilogue) {
  const char *env = getenv("GPUC_INT8_GEMM");
  bool force = env && !strcmp(env, "own");
  if ((env && !strcmp(env, "cublaslt")) || o->sm < 80) return false;
  if (m <= 0 || n <= 0 || k <= 0 || k % 16 || n % 2 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return false;
  if (force) return true;
  const I8Tile t = tile_for(o, n, k);
  I8Ws w;
  const bool ws = t.wg && ws_choice(o, n, k, &w);
  const int64_t bm = ws ? ws_bm(&w) : t.bm, bn = ws ? w.bn : t.bn;
  const int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
  if (tiles < I8_MIN_TILES) return false; /* tiles for every SM: no GEMM of fewer measured */
  /* sm_90's default (the TMA kernel where ws_choice takes it, the wgmma
   * kernel elsewhere): every int8 GEMM, epilogue or int32 sums, of N >=
   * 256. BERT-base b32 on the H200 (docs/BENCHMARKS.md, fifteenth
   * session): the TMA kernel for every GEMM, the three that write int32
   * for a row kernel included (out-proj, FC1, FC2: 36 of 48), 2.093 ms
   * against 2.185 with the epilogue GEMMs alone (0.09 ms less: ~2.5 us a
   * GEMM over cuBLASLt's int32 GEMM). N 256 (LLaMA's grouped-query k and
   * v projections, cuBLASLt + a DequantizeRows kernel each before) is not
   * timed alone; the wgmma kernel was 1.30x cuBLASLt + DequantizeRows at
   * N 768 K 768 (0.0222 vs 0.0288 ms), and the rest of that gap is the
   * DequantizeRows kernel, the same share of an N 256 GEMM. Narrower N
   * (linears.onnx's 5-96) stays cuBLASLt's, unmeasured. */
  if (t.wg && ws_mode(o) == I8_WS_AUTO) return n >= 256;
  /* Measured on the H200 (docs/BENCHMARKS.md, BERT-base's shapes at 4096
   * rows), with its epilogue in place of a DequantizeRows kernel, against
   * cuBLASLt's IMMA GEMM + DequantizeRows: the mma.sync kernel 1.17-1.21x
   * at N 2304 and 3072, 0.88x at N 768, 0.6x when both write int32; the
   * wgmma kernel (sm_90) 1.31-1.45x at K 768 (N 768 included), 0.95x at
   * K 3072 N 768. Epilogue GEMMs only, and no narrower N than measured */
  if (!epilogue) return false;
  return t.wg ? n >= 2048 || (n >= 768 && k < 2048) : n >= 2048;
}

int cg_int8_gemm(LowerCtx *c, uint32_t tx, uint32_t tw, int64_t m, int64_t n, int64_t k, const EwProgram *epi,
                 uint32_t tacc) {
  const I8Tile T = tile_for(c->opt, n, k);
  /* a warp's m16 and n8 tiles; a wgmma warp has one m16 row band of the
   * whole BN (its accumulators indexed [0][n8 tile][e] like mma.sync's) */
  const int mt = T.wg ? 1 : T.bm / (16 * T.wm), nt = T.wg ? T.bn / 8 : T.bn / (8 * T.wn);
  const int threads = T.wg ? 2 * T.bm : 32 * T.wm * T.wn;
  /* wgmma: 1 KB more to align the tiles to the 128-byte swizzle's 1024-byte atom */
  unsigned shmem = (unsigned)(T.st * (T.bm + T.bn) * T.bk) + (T.wg ? 1024u : 0u);
  I8Ws W = {0};
  const bool ws = T.wg && ws_choice(c->opt, n, k, &W);
  StrBuf *src = cg_src(c);
  int8_gemm_helpers(src);
  if (T.wg) int8_wgmma_helpers(src, ws ? W.bn : T.bn);
  if (ws) int8_ws_helpers(src);
  /* the kernel's text after its name, in its own buffer first: twelve
   * layers of one shape make one kernel, not twelve for NVRTC to compile */
  StrBuf body = {0}, *b = &body;
  uint32_t args[EW_MAX_EXT + 3];
  int na = 0;
  args[na++] = tx;
  args[na++] = tw;
  sb_printf(b, "(const signed char* __restrict__ xq, const signed char* __restrict__ wq, ");
  if (epi) {
    na += ew_epilogue_params(b, epi, args + na);
    sb_printf(b, "%s* __restrict__ out0", cg_ctype(epi->y->dt));
    args[na++] = epi->ty;
  } else {
    sb_printf(b, "int* __restrict__ out0");
    args[na++] = tacc;
  }
  /* TMA: Xq's and Wq's maps by value after the tensors (cg_tensor_map below) */
  sb_printf(b, "%s) {\n", ws && W.tma ? ", const __grid_constant__ TmaMap tmx_, const __grid_constant__ TmaMap tmw_" : "");
  if (ws)
    emit_ws_body(b, &W, epi, m, n, k);
  else
    emit_body(b, &T, epi, m, n, k);
  if (body.oom) {
    free(body.s);
    return gpuc_err_set(c->err, "out of memory");
  }
  char name[sizeof c->kname + 16];
  const char *same = src->s ? strstr(src->s, body.s) : NULL;
  const char *start = same;
  while (start && start > src->s && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) start--;
  size_t len = same ? (size_t)(same - start) : 0;
  if (len && len < sizeof name) {
    memcpy(name, same - len, len);
    name[len] = 0;
  } else {
    snprintf(name, sizeof name, "%s", cg_kernel_name(c));
    /* CTAs an SM: as many as keep each thread its accumulators and ~64
     * registers more (fragments, addresses) out of local memory (WS: as
     * many as its shared memory lets, ws_fit: setmaxnreg's split assumes
     * that register count at launch) */
    int per_sm = ws ? W.per_sm : 65536 / (threads * (mt * nt * 4 + 64));
    sb_printf(src, "extern \"C\" __global__ void __launch_bounds__(%d, %d) %s%s", ws ? 128 * W.c + W.np : threads,
              per_sm < 1 ? 1 : per_sm > 4 ? 4 : per_sm, name, body.s);
  }
  free(body.s);
  unsigned grid[3] = {(unsigned)((n + T.bn - 1) / T.bn), (unsigned)((m + T.bm - 1) / T.bm), 1};
  unsigned block[3] = {(unsigned)threads, 1, 1};
  if (ws) { /* persistent: grid_per_sm CTAs an SM of an H100/H200 (132 SMs), at most one a tile */
    const int64_t tiles = ((m + ws_bm(&W) - 1) / ws_bm(&W)) * ((n + W.bn - 1) / W.bn);
    const int64_t ctas = (int64_t)WS_SMS * W.grid_per_sm;
    grid[0] = (unsigned)(tiles < ctas ? tiles : ctas);
    grid[1] = 1;
    block[0] = (unsigned)(128 * W.c + W.np);
    shmem = ws_shmem(&W);
  }
  if (cg_launch_grid(c, name, grid, block, shmem, na, args)) return -1;
  /* Xq [m, k] in boxes of 128 bytes x BM rows, Wq [n, k] in 128 x BN */
  if (ws && W.tma && (cg_tensor_map(c, tx, (uint64_t)k, (uint64_t)m, (uint64_t)k, 128, (unsigned)ws_bm(&W)) ||
                      cg_tensor_map(c, tw, (uint64_t)k, (uint64_t)n, (uint64_t)k, 128, (unsigned)W.bn)))
    return -1;
  cg_mark_tensor_math(c);
  if (T.wg) cg_mark_arch_specific(c);
  return 0;
}

/* rows of the GEMM node mm: Xq [..., K] as [M, K], Wq [N, K] */
static bool gemm_dims(const Graph *g, const Node *mm, int64_t *m, int64_t *n, int64_t *k) {
  if (mm->op != GPUC_OP_MATMULINT8 || mm->nin < 2 || mm->in[0] < 0 || mm->in[1] < 0 || mm->out[0] < 0) return false;
  const Tensor *x = &g->values[mm->in[0]].t, *w = &g->values[mm->in[1]].t;
  if (w->rank != 2 || x->rank < 1 || x->dims[x->rank - 1] != w->dims[1] || w->dims[1] <= 0) return false;
  *n = w->dims[0];
  *k = w->dims[1];
  *m = gpuc_numel(x) / *k;
  return true;
}

bool cg_int8_gemm_takes_epilogue(const Graph *g, int mm, int sm) {
  const CodegenOptions o = {.sm = sm};
  if (mm < 0 || mm >= g->nnodes || g->nodes[mm].op != GPUC_OP_MATMULINT8) return false;
  /* the builder's own test (cg_int8_epilogue_reader) on the groups as they
   * stand: the shape, and the reader's group as an epilogue */
  int *reader_group = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!reader_group) return false; /* out of memory: the dequantize stays in a row kernel, still correct */
  cg_reader_groups(g, reader_group);
  bool takes = cg_int8_epilogue_reader(g, &o, mm, reader_group) >= 0;
  free(reader_group);
  return takes;
}

int cg_int8_epilogue_reader(const Graph *g, const CodegenOptions *o, int mm, const int *reader_group) {
  const Node *n = &g->nodes[mm];
  int64_t M, N, K;
  if (!gemm_dims(g, n, &M, &N, &K) || !cg_int8_gemm_own(o, M, N, K, true)) return -1;
  int acc = n->out[0];
  if (g->values[acc].is_output || g->values[acc].t.dt != GPUC_DT_I32) return -1;
  int reader = -1;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i].nin; j++) {
      if (g->nodes[i].in[j] != acc) continue;
      if ((reader >= 0 && reader != i) || j != 0) return -1; /* one reader, as its input 0 only */
      reader = i;
    }
  if (reader < 0 || g->nodes[reader].op != GPUC_OP_DEQUANTIZEROWS) return -1;
  const Node *d = &g->nodes[reader];
  /* the group's output: rows of N (the last dim), M of them */
  int grp = d->fuse_group, sink = reader;
  if (grp > 0) {
    for (int i = 0; i < g->nnodes; i++)
      if (g->nodes[i].fuse_group == grp) sink = i;
    GpucOp last = g->nodes[sink].op;
    if (last == GPUC_OP_QUANTIZEROWS || last == GPUC_OP_QUANTIZEROWSF8 || last == GPUC_OP_LAYERNORMALIZATION ||
        last == GPUC_OP_ADDLAYERNORMALIZATION)
      return -1; /* a row group: it reads the int32 sums itself (codegen/lower_row_group.c) */
    int nm = 0, members[EW_MAX_TERMS];
    for (int i = 0; i < g->nnodes; i++) {
      if (g->nodes[i].fuse_group != grp) continue;
      if (nm == EW_MAX_TERMS) return -1;
      members[nm++] = i;
    }
    if (!cg_group_valid(g, members, nm, reader_group)) return -1;
  }
  const Tensor *y = &g->values[g->nodes[sink].out[0]].t;
  if (y->rank < 1 || y->dims[y->rank - 1] != N || gpuc_numel(y) != M * N) return -1;
  GpucDType dt = y->dt;
  if (dt != GPUC_DT_F32 && dt != GPUC_DT_F16 && dt != GPUC_DT_BF16) return -1;
  return reader;
}

int cg_lower_int8_epilogue(PlanBuilder *pb, const Graph *g, int mm, const int *m, int nm) {
  const Node *n = &g->nodes[mm];
  EwProgram *p = calloc(1, sizeof *p);
  EwCapture *caps = calloc((size_t)nm, sizeof *caps);
  StrBuf label = {0};
  int rc = -1;
  if (!p || !caps) {
    rc = gpuc_err_set(cg_builder_err(pb), "%s: out of memory", g->path);
    goto out;
  }
  p->has_reg = true;
  p->reg_value = n->out[0];
  int built = ew_group_program(pb, g, m, nm, p, caps);
  if (built < 0) goto out;
  if (built > 0) { /* not one inlinable program: the caller lowers both apart */
    rc = 1;
    goto out;
  }
  const Node *sink = &g->nodes[m[nm - 1]];
  p->y = &g->values[sink->out[0]].t;
  p->ty = cg_value_tensor(pb, sink->out[0]);
  sb_printf(&label, "%s", n->name);
  for (int t = 0; t < nm; t++) sb_printf(&label, ", %s", g->nodes[m[t]].name);
  uint32_t tx = cg_value_tensor(pb, n->in[0]), tw = cg_value_tensor(pb, n->in[1]);
  if (label.oom || p->ty == UINT32_MAX || tx == UINT32_MAX || tw == UINT32_MAX) {
    rc = gpuc_err_set(cg_builder_err(pb), "%s: out of memory", g->path);
    goto out;
  }
  int64_t M, N, K;
  if (!gemm_dims(g, n, &M, &N, &K)) {
    rc = gpuc_err_set(cg_builder_err(pb), "%s: node %s: internal: not an int8 GEMM", g->path, n->name);
    goto out;
  }
  /* the step is the GEMM node's (its flops), emitted in its name */
  const Tensor *ins[2] = {&g->values[n->in[0]].t, &g->values[n->in[1]].t}, *outs[1] = {p->y};
  uint32_t tin[2] = {tx, tw}, tout[1] = {p->ty};
  LowerCtx c = {.g = g, .n = n, .node_index = mm, .nin = 2, .nout = 1, .in = ins, .out = outs, .tin = tin,
                .tout = tout, .pb = pb, .opt = cg_builder_opt(pb), .err = cg_builder_err(pb), .label = label.s};
  snprintf(c.kname, sizeof c.kname, "k%d_int8_gemm_epilogue%d", mm, nm); /* inspect names it int8 */
  rc = cg_int8_gemm(&c, tx, tw, M, N, K, p, UINT32_MAX);
  if (!rc) rc = cg_cost_steps(cg_builder_plan(pb), &c);
out:
  ew_captures_free(caps, nm);
  free(p);
  free(label.s);
  return rc;
}
