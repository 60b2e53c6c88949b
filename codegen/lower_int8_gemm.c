/* gpuc's int8 tensor-core GEMM (int8_gemm.h): Acc [M, N] = Xq [M, K] Wq [N, K]^T,
 * int8 x int8 -> int32 by mma.sync m16n8k32 (sm_80+), exact.
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
 *   2 (l % 4) and + 1 of each 16 x 8 tile: stored (or evaluated) as pairs. */
#include "int8_gemm.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LL(x) ((long long)(x))

enum { I8_MIN_TILES = 64 };

/* A CTA's tile: BM x BN of Acc, K in steps of BK bytes through ST stages;
 * WM x WN warps, each (BM/WM) x (BN/WN): MT = BM/(16 WM) m16 tiles and
 * NT = BN/(8 WN) n8 tiles (NT even: B fragments come in pairs). */
typedef struct I8Tile { int bm, bn, bk, st, wm, wn; } I8Tile;

static bool tile_ok(const I8Tile *t) {
  if (!(t->bm == 64 || t->bm == 128 || t->bm == 256) || !(t->bn == 64 || t->bn == 128 || t->bn == 256) ||
      !(t->bk == 64 || t->bk == 128) || t->st < 2 || t->st > 6 || t->st * (t->bm + t->bn) * t->bk > 200 * 1024 ||
      !(t->wm == 1 || t->wm == 2 || t->wm == 4) || !(t->wn == 1 || t->wn == 2 || t->wn == 4))
    return false;
  int mt = t->bm / (16 * t->wm), nt = t->bn / (8 * t->wn);
  return mt >= 1 && nt >= 2 && nt % 2 == 0 && mt * nt <= 32 && t->wm * t->wn >= 4;
}

/* GPUC_INT8_TILE=BMxBNxBKsST[wWMxWN] (e.g. 128x256x64s3, 128x128x64s4w2x2;
 * warps 2 x 4 unless named) fixes the tile (the sweep of
 * tests/gpu/int8_gemm_check.py); else the default below. */
static I8Tile tile_for(void) {
  const char *env = getenv("GPUC_INT8_TILE");
  I8Tile t = {0, 0, 0, 0, 2, 4};
  if (env && sscanf(env, "%dx%dx%ds%dw%dx%d", &t.bm, &t.bn, &t.bk, &t.st, &t.wm, &t.wn) >= 4 && tile_ok(&t)) return t;
  /* the sweep's best at BERT-base's four shapes but N 768 (where 64-wide
   * warp tiles won by 1%): 128 x 128 tiles, 128-byte K steps, 3 stages */
  return (I8Tile){128, 128, 128, 3, 2, 4};
}

bool cg_int8_gemm_own(const CodegenOptions *o, int64_t m, int64_t n, int64_t k, bool epilogue) {
  const char *env = getenv("GPUC_INT8_GEMM");
  bool force = env && !strcmp(env, "own");
  if ((env && !strcmp(env, "cublaslt")) || o->sm < 80) return false;
  if (m <= 0 || n <= 0 || k <= 0 || k % 16 || n % 2 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return false;
  if (force) return true;
  /* Measured on the H200 (docs/BENCHMARKS.md, BERT-base's shapes at 4096
   * rows): with its epilogue in place of a DequantizeRows kernel this
   * kernel is 1.17-1.21x cuBLASLt's IMMA GEMM + DequantizeRows at N 2304
   * and 3072, but 0.88x at N 768 and 0.6x when both write int32: only
   * wide epilogue GEMMs with tiles for every SM take it */
  return epilogue && n >= 2048 && ((m + 127) / 128) * ((n + 127) / 128) >= I8_MIN_TILES;
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

int cg_int8_gemm(LowerCtx *c, uint32_t tx, uint32_t tw, int64_t m, int64_t n, int64_t k, const EwProgram *epi,
                 uint32_t tacc) {
  const I8Tile T = tile_for();
  const int mt = T.bm / (16 * T.wm), nt = T.bn / (8 * T.wn), threads = 32 * T.wm * T.wn;
  unsigned shmem = (unsigned)(T.st * (T.bm + T.bn) * T.bk);
  StrBuf *src = cg_src(c);
  int8_gemm_helpers(src);
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
    sb_printf(b, "%s* __restrict__ out0) {\n", cg_ctype(epi->y->dt));
    args[na++] = epi->ty;
  } else {
    sb_printf(b, "int* __restrict__ out0) {\n");
    args[na++] = tacc;
  }
  sb_printf(b, "  extern __shared__ __align__(128) unsigned char smem_[];\n"
               "  const int M = %lld, N = %lld, K = %lld;\n"
               "  const int m0 = blockIdx.y * %d, n0 = blockIdx.x * %d;\n"
               "  int acc[%d][%d][4];\n"
               "#pragma unroll\n  for (int a = 0; a < %d; a++)\n#pragma unroll\n    for (int c = 0; c < %d; c++)\n"
               "#pragma unroll\n      for (int e = 0; e < 4; e++) acc[a][c][e] = 0;\n"
               "  i8_mainloop<%d, %d, %d, %d, %d, %d>(xq, wq, M, N, K, m0, n0, acc, smem_);\n"
               "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
               "  const int rw = m0 + (warp / %d) * %d + (lane >> 2), cw = n0 + (warp %% %d) * %d + (lane & 3) * 2;\n"
               "#pragma unroll\n  for (int a = 0; a < %d; a++)\n#pragma unroll\n    for (int c = 0; c < %d; c++)\n"
               "#pragma unroll\n      for (int h = 0; h < 2; h++) {\n"
               "    const int r = rw + a * 16 + h * 8, col = cw + c * 8;\n"
               "    if (r >= M || col >= N) continue;\n"
               "    const i64 i0_ = (i64)r * N + col;\n",
            LL(m), LL(n), LL(k), T.bm, T.bn, mt, nt, mt, nt, T.bm, T.bn, T.bk, T.st, mt, nt, T.wn, mt * 16, T.wn, nt * 8, mt,
            nt);
  if (epi) {
    sb_printf(b, "    const i64 row_ = r; const int j0_ = col; (void)row_; (void)j0_;\n"
                 "    const int reg_[2] = {acc[a][c][2 * h], acc[a][c][2 * h + 1]};\n");
    ew_epilogue_pair(b, epi, n);
  } else {
    sb_printf(b, "    *(int2*)(out0 + i0_) = make_int2(acc[a][c][2 * h], acc[a][c][2 * h + 1]);\n");
  }
  sb_printf(b, "  }\n}\n");
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
     * registers more (fragments, addresses) out of local memory */
    int per_sm = 65536 / (threads * (mt * nt * 4 + 64));
    sb_printf(src, "extern \"C\" __global__ void __launch_bounds__(%d, %d) %s%s", threads,
              per_sm < 1 ? 1 : per_sm > 4 ? 4 : per_sm, name, body.s);
  }
  free(body.s);
  unsigned grid[3] = {(unsigned)((n + T.bn - 1) / T.bn), (unsigned)((m + T.bm - 1) / T.bm), 1};
  unsigned block[3] = {(unsigned)threads, 1, 1};
  if (cg_launch_grid(c, name, grid, block, shmem, na, args)) return -1;
  cg_mark_tensor_math(c);
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
