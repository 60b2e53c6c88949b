/* Row-wise kernel emitters (see lower_rows.h). */
#include "lower_rows.h"
#include <stdio.h>

#define MAX_GRID (65535u * 32)
#define LL(v) ((long long)(v))


/* Short rows run one per thread; so do strided (non-contiguous) rows when
 * there are enough of them to fill the GPU. */
Rows rows_pick(int64_t nrows, int64_t len, bool contiguous) {
  Rows r = {.block = false, .threads = 256};
  if (len <= 16 || (!contiguous && nrows >= 8192)) return r;
  r.block = true;
  unsigned cap = nrows < 256 && len >= 65536 ? 1024 : 256, t = 32;
  while (t < cap && (int64_t)t < len) t *= 2;
  r.threads = t;
  return r;
}

Rows rows_pick_warp(int64_t nrows, int64_t len, bool contiguous) {
  if (!contiguous || len <= 16 || len > 1024 || nrows < 2048) return rows_pick(nrows, len, contiguous);
  return (Rows){.block = true, .warp = true, .threads = 256};
}

void rows_open(StrBuf *b, const Rows *r, int64_t nrows) {
  if (r->warp) /* every lane of a warp runs the same rows: shuffles stay whole-warp */
    sb_printf(b, "  for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < %lldLL;\n"
                 "       row += ((i64)gridDim.x * blockDim.x) >> 5) {\n", LL(nrows));
  else if (r->block) sb_printf(b, "  for (i64 row = blockIdx.x; row < %lldLL; row += gridDim.x) {\n", LL(nrows));
  else sb_printf(b, "  GRID_STRIDE(row, %lldLL) {\n", LL(nrows));
}

/* "for (i64 j = ...)" over the row's n elements, this thread's share */
void rows_for(StrBuf *b, const Rows *r, const char *j, int64_t n) {
  if (r->warp) sb_printf(b, "    for (i64 %s = threadIdx.x & 31; %s < %lldLL; %s += 32)", j, j, LL(n), j);
  else if (r->block)
    sb_printf(b, "    for (i64 %s = threadIdx.x; %s < %lldLL; %s += blockDim.x)", j, j, LL(n), j);
  else sb_printf(b, "    for (i64 %s = 0; %s < %lldLL; %s++)", j, j, LL(n), j);
}

int rows_launch(LowerCtx *c, const Rows *r, const char *name, int64_t nrows, int nargs,
                       const uint32_t *args) {
  if (!r->block) return cg_launch(c, name, (uint64_t)nrows, r->threads, 0, nargs, args);
  if (r->warp) return cg_launch(c, name, (uint64_t)nrows * 32, r->threads, 0, nargs, args);
  uint64_t g = nrows < 1 ? 1 : (uint64_t)nrows;
  if (g > MAX_GRID) g = MAX_GRID;
  unsigned grid[3] = {(unsigned)g, 1, 1}, blk[3] = {r->threads, 1, 1};
  return cg_launch_grid(c, name, grid, blk, 0, nargs, args);
}

void rows_load_x(StrBuf *b, const char *ct, GpucDType dt, GpucDType dt2, const char *idx, const char *idx2) {
  if (dt2 == GPUC_DT_UNDEF) { cg_load(b, ct, dt, "x", idx); return; }
  sb_printf(b, "(");
  cg_load(b, ct, dt, "x", idx);
  sb_printf(b, " + ");
  cg_load(b, ct, dt2, "x2", idx2);
  sb_printf(b, ")");
}

int warp_rows_vec(int64_t n, GpucDType dt, GpucDType dt2, GpucDType ydt) {
  size_t w = gpuc_dtype_size(dt);
  if (dt2 != GPUC_DT_UNDEF && gpuc_dtype_size(dt2) > w) w = gpuc_dtype_size(dt2);
  if (gpuc_dtype_size(ydt) > w) w = gpuc_dtype_size(ydt);
  int v = w > 0 && w <= 4 ? (int)(16 / w) : 1;
  if (v > 8) v = 8;
  while (v > 1 && n % v != 0) v /= 2;
  return v;
}

int warp_rows_lanes(int64_t n, int vec) {
  int64_t vectors = (n + vec - 1) / vec;
  int lanes = 32;
  while (lanes > 4 && lanes / 2 >= vectors) lanes /= 2;
  return lanes;
}

/* vectors a lane holds */
static int warp_rows_groups(int64_t n, int vec) {
  int lanes = warp_rows_lanes(n, vec);
  return (int)((n + (int64_t)lanes * vec - 1) / ((int64_t)lanes * vec));
}

void warp_rows_begin(StrBuf *b, int64_t nrows, int64_t n, int vec) {
  int lanes = warp_rows_lanes(n, vec), rpw = 32 / lanes;
  sb_printf(b, "  const int lane = threadIdx.x & %d;\n"
               "  const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;\n"
               "  for (i64 row0 = (((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * %d; row0 < %lldLL;\n"
               "       row0 += nwarps * %d) {\n"
               "    const i64 row = row0 + (threadIdx.x & 31) / %d;\n"
               "    const bool live_ = row < %lldLL;\n"
               "    const i64 base = row * %lldLL;\n",
            lanes - 1, rpw, LL(nrows), rpw, lanes, LL(nrows), LL(n));
}

void warp_rows_open(StrBuf *b, int64_t nrows, int64_t n, int vec, const char *ct, GpucDType dt, GpucDType dt2,
                    bool x2_row, const char *pad) {
  int groups = warp_rows_groups(n, vec), lanes = warp_rows_lanes(n, vec);
  warp_rows_begin(b, nrows, n, vec);
  sb_printf(b, "    %s v[%d];\n"
               "#pragma unroll\n"
               "    for (int g = 0; g < %d; g++) {\n"
               "      const int j0 = (lane + %d * g) * %d;\n",
            ct, groups * vec, groups, lanes, vec);
  if (vec == 1) {
    sb_printf(b, "      v[g] = live_ && j0 < %lld ? ", LL(n));
    rows_load_x(b, ct, dt, dt2, "base + j0", x2_row ? "j0" : "base + j0");
    sb_printf(b, " : %s;\n    }\n", pad);
    return;
  }
  /* one 16-byte vector per input per lane and group; the row's base is a
   * multiple of vec elements (n % vec == 0), so the vectors are aligned */
  sb_printf(b, "      if (live_ && j0 < %lld) {\n        const Vec<%s, %d> a = *(const Vec<%s, %d>*)(x + base + j0);\n",
            LL(n), cg_ctype(dt), vec, cg_ctype(dt), vec);
  if (dt2 != GPUC_DT_UNDEF)
    sb_printf(b, "        const Vec<%s, %d> a2 = *(const Vec<%s, %d>*)(x2 + %sj0);\n", cg_ctype(dt2), vec,
              cg_ctype(dt2), vec, x2_row ? "" : "base + ");
  sb_printf(b, "#pragma unroll\n        for (int u = 0; u < %d; u++) v[g * %d + u] = ", vec, vec);
  if (dt2 != GPUC_DT_UNDEF) sb_printf(b, "(");
  cg_load(b, ct, dt, "a.v", "u");
  if (dt2 != GPUC_DT_UNDEF) {
    sb_printf(b, " + ");
    cg_load(b, ct, dt2, "a2.v", "u");
    sb_printf(b, ")");
  }
  sb_printf(b, ";\n      } else {\n#pragma unroll\n        for (int u = 0; u < %d; u++) v[g * %d + u] = %s;\n"
               "      }\n    }\n", vec, vec, pad);
}

void warp_rows_for(StrBuf *b, int64_t n, int vec) {
  int groups = warp_rows_groups(n, vec), lanes = warp_rows_lanes(n, vec);
  sb_printf(b, "#pragma unroll\n    for (int g = 0; g < %d; g++)\n#pragma unroll\n"
               "    for (int u = 0; u < %d; u++) if ((lane + %d * g) * %d + u < %lld) {\n"
               "      const int k = g * %d + u, j = (lane + %d * g) * %d + u; (void)j;\n",
            groups, vec, lanes, vec, LL(n), vec, lanes, vec);
}

void warp_rows_store_begin(StrBuf *b, int64_t n, int vec, GpucDType ydt) {
  int groups = warp_rows_groups(n, vec), lanes = warp_rows_lanes(n, vec);
  sb_printf(b, "#pragma unroll\n    for (int g = 0; g < %d; g++) {\n"
               "      const int j0 = (lane + %d * g) * %d;\n      if (!live_ || j0 >= %lld) continue;\n"
               "      Vec<%s, %d> r;\n#pragma unroll\n      for (int u = 0; u < %d; u++) {\n"
               "      const int k = g * %d + u, j = j0 + u; (void)j;\n",
            groups, lanes, vec, LL(n), cg_ctype(ydt), vec, vec, vec);
}

void warp_rows_store_end(StrBuf *b, int vec, GpucDType ydt) {
  sb_printf(b, "      }\n      *(Vec<%s, %d>*)(y + base + j0) = r;\n    }\n", cg_ctype(ydt), vec);
}

void warp_allreduce(StrBuf *b, const char *var, const char *ct, const char *comb) {
  sb_printf(b, "#pragma unroll\n    for (int o = 16; o > 0; o >>= 1) {\n"
               "      const %s a = %s, b = __shfl_xor_sync(0xffffffffu, %s, o);\n"
               "      %s = %s;\n    }\n", ct, var, var, var, comb);
}

void warp_rows_allreduce(StrBuf *b, int64_t n, int vec, const char *var, const char *ct, const char *comb) {
  sb_printf(b, "#pragma unroll\n    for (int o = %d; o > 0; o >>= 1) {\n"
               "      const %s a = %s, b = __shfl_xor_sync(0xffffffffu, %s, o);\n"
               "      %s = %s;\n    }\n", warp_rows_lanes(n, vec) / 2, ct, var, var, var, comb);
}

int warp_rows_launch(LowerCtx *c, const char *name, int64_t nrows, int64_t n, int vec, int nargs,
                     const uint32_t *args) {
  int rpw = 32 / warp_rows_lanes(n, vec);
  int64_t warps = nrows > 0 ? (nrows + rpw - 1) / rpw : 1;
  return cg_launch(c, name, (uint64_t)warps * 32u, 256, 0, nargs, args);
}

int row_layout_pick(RowLayout *L, int64_t nrows, int64_t n, int vec) {
  if (n < 1 || n > ROW_LAYOUT_MAX_N || nrows < 1) return 1;
  if (vec < 1) vec = 1;
  while (vec > 1 && n % vec) vec /= 2;
  int wpr = 1;
  while (wpr < 8 && n > 1024LL * wpr) wpr *= 2;
  L->nrows = nrows;
  L->n = n;
  L->vec = vec;
  L->wpr = wpr;
  L->rpb = ROW_LAYOUT_BLOCK / 32 / wpr;
  L->groups = (int)((n + 32LL * wpr * vec - 1) / (32LL * wpr * vec));
  return 0;
}

void row_layout_open(StrBuf *b, const RowLayout *L) {
  if (L->wpr > 1) sb_printf(b, "  __shared__ float red_[%d][%d];\n", L->rpb, L->wpr);
  sb_printf(b, "  const int lane = threadIdx.x & 31, sub_ = (threadIdx.x >> 5) %% %d, rloc_ = (threadIdx.x >> 5) / %d;\n"
               "  for (i64 r0_ = (i64)blockIdx.x * %d; r0_ < %lldLL; r0_ += (i64)gridDim.x * %d) {\n"
               "    const i64 row_ = r0_ + rloc_;\n"
               "    const bool live_ = row_ < %lldLL;\n"
               "    const i64 base_ = row_ * %lldLL;\n",
            L->wpr, L->wpr, L->rpb, LL(L->nrows), L->rpb, LL(L->nrows), LL(L->n));
}

void row_layout_for_vec(StrBuf *b, const RowLayout *L) {
  sb_printf(b, "#pragma unroll\n    for (int g = 0; g < %d; g++) {\n"
               "      const int j0_ = ((g * %d + sub_) * 32 + lane) * %d;\n"
               "      if (live_ && j0_ < %lld) {\n",
            L->groups, L->wpr, L->vec, LL(L->n));
}

void row_layout_reduce(StrBuf *b, const RowLayout *L, const char *var, const char *comb) {
  warp_allreduce(b, var, "float", comb);
  if (L->wpr == 1) return;
  /* the row's warps: partials through shared memory; the second barrier
   * keeps red_ until every warp of the block has read it */
  sb_printf(b, "    if (lane == 0) red_[rloc_][sub_] = %s;\n    __syncthreads();\n    %s = red_[rloc_][0];\n"
               "#pragma unroll\n    for (int s_ = 1; s_ < %d; s_++) { const float a = %s, b = red_[rloc_][s_]; %s = %s; }\n"
               "    __syncthreads();\n",
            var, var, L->wpr, var, var, comb);
}

void row_layout_quantize(StrBuf *b, const RowLayout *L, bool f8) {
  const int V = L->vec;
  const char *lim = f8 ? "448.0f" : "127.0f";
  sb_printf(b, "    float m = 0.0f;\n"
               "#pragma unroll\n    for (int t_ = 0; t_ < %d; t_++) m = fmaxf(m, fabsf(w_[t_]));\n",
            L->groups * V);
  row_layout_reduce(b, L, "m", "fmaxf(a, b)");
  sb_printf(b, "    const float qinv = m > 0.0f ? %s / m : 0.0f;\n"
               "    if (live_ && sub_ == 0 && lane == 0) qs[row_] = m > 0.0f ? m / %s : 1.0f;\n",
            lim, lim);
  const char *wt = V == 8 ? "uint2" : V == 4 ? "unsigned int" : V == 2 ? "unsigned short" : "unsigned char";
  row_layout_for_vec(b, L);
  sb_printf(b, "        union { %s w; unsigned char c[%d]; } o_;\n#pragma unroll\n        for (int u = 0; u < %d; u++) {\n",
            wt, V, V);
  if (f8)
    sb_printf(b, "          unsigned short d;\n"
                 "          asm(\"cvt.rn.satfinite.e4m3x2.f32 %%0, %%1, %%2;\" : \"=h\"(d) : \"f\"(0.0f), "
                 "\"f\"(__fmul_rn(w_[g * %d + u], qinv)));\n"
                 "          o_.c[u] = (unsigned char)(d & 0xff);\n",
              V);
  else
    sb_printf(b, "          o_.c[u] = (unsigned char)(signed char)fminf(fmaxf(rintf(__fmul_rn(w_[g * %d + u], qinv)), "
                 "-127.0f), 127.0f);\n",
              V);
  sb_printf(b, "        }\n        *(%s*)(qo + base_ + j0_) = o_.w;\n      }\n    }\n", wt);
}

int row_layout_launch(LowerCtx *c, const RowLayout *L, const char *name, int nargs, const uint32_t *args) {
  uint64_t g = (uint64_t)((L->nrows + L->rpb - 1) / L->rpb);
  if (g > MAX_GRID) g = MAX_GRID;
  unsigned grid[3] = {(unsigned)g, 1, 1}, blk[3] = {ROW_LAYOUT_BLOCK, 1, 1};
  return cg_launch_grid(c, name, grid, blk, 0, nargs, args);
}

/* "i64 var = offset of index `idx` decomposed over (dims, strides)", n
 * merged axes, row-major */
void emit_offset(StrBuf *b, const char *var, const char *idx, int n, const int64_t *dims,
                        const int64_t *strides) {
  if (n == 0) { sb_printf(b, "      i64 %s = 0;\n", var); return; }
  if (n == 1) { sb_printf(b, "      i64 %s = (%s) * %lldLL;\n", var, idx, LL(strides[0])); return; }
  sb_printf(b, "      i64 %s = 0, q_%s = %s;\n", var, var, idx);
  for (int d = n - 1; d > 0; d--)
    sb_printf(b, "      %s += (q_%s %% %lldLL) * %lldLL; q_%s /= %lldLL;\n", var, var, LL(dims[d]),
              LL(strides[d]), var, LL(dims[d]));
  sb_printf(b, "      %s += q_%s * %lldLL;\n", var, var, LL(strides[0]));
}

void push_axis(int64_t *dims, int64_t *strides, int *n, int64_t dim, int64_t stride) {
  if (*n > 0 && strides[*n - 1] == dim * stride) {
    dims[*n - 1] *= dim;
    strides[*n - 1] = stride;
    return;
  }
  dims[*n] = dim;
  strides[*n] = stride;
  (*n)++;
}
