/* Row-wise kernel emitters shared by the reduction, softmax and
 * normalization lowerings: a tensor viewed as rows, one row per thread
 * (short or strided rows) or per block (long contiguous rows). */
#ifndef GPUC_LOWER_ROWS_H
#define GPUC_LOWER_ROWS_H
#include "lower_util.h"

typedef struct {
  bool block;        /* one block per row, else one thread per row */
  bool warp;         /* with block: one warp per row, 8 rows a block of 256 (rows_pick_warp) */
  unsigned threads;  /* block size */
  int uid;           /* unique shared-memory names */
} Rows;

Rows rows_pick(int64_t nrows, int64_t len, bool contiguous);
/* rows_pick, with a warp a row where that fits better: many contiguous
 * rows of 17..1024 elements (a block of 32 threads a row left the SMs
 * half empty and synced per row: Swin V2's ReduceL2 over 32-element heads
 * read 213 GB/s on the H200). The lowering reduces with shuffles only
 * (no shared step when r.warp) and writes from lane 0. */
Rows rows_pick_warp(int64_t nrows, int64_t len, bool contiguous);
void rows_open(StrBuf *b, const Rows *r, int64_t nrows);
void rows_for(StrBuf *b, const Rows *r, const char *j, int64_t n);
int rows_launch(LowerCtx *c, const Rows *r, const char *name, int64_t nrows, int nargs,
                const uint32_t *args);
/* Warp rows: contiguous rows of n <= WARP_ROW_MAX elements held in
 * registers, `lanes` lanes of a warp a row (warp_rows_lanes: 32, or the
 * power of two, at least 4, covering a short row's vectors: rows of 96
 * halves take 16 lanes, two rows a warp). Lanes read vec consecutive
 * elements at a time (16-byte vectors; vec = 1: single elements): v[k] is
 * element j = (lane + lanes g) * vec + u for k = g * vec + u; entries past
 * the row's end, and every entry of a row past the last (live_ false),
 * hold `pad`. warp_rows_open declares lane, row, live_, base and v[]
 * (loaded from x as ct) inside a grid-stride loop over the warps' rows
 * (warp_rows_begin alone: without v[]); close it with "  }\n}\n" and
 * launch with warp_rows_launch. The loop runs the same trips in every
 * lane of a warp, so shuffles are convergent; warp_rows_allreduce reduces
 * over a row's lanes. */
enum { WARP_ROW_MAX = 1024 };
/* vec for rows of n elements of x (dt), x2 (dt2 or GPUC_DT_UNDEF) and y:
 * 16 bytes of the widest, at most 8, dividing n; else 1. */
int warp_rows_vec(int64_t n, GpucDType dt, GpucDType dt2, GpucDType ydt);
/* lanes a row of n elements in vectors of vec */
int warp_rows_lanes(int64_t n, int vec);
void warp_rows_begin(StrBuf *b, int64_t nrows, int64_t n, int vec);
/* The row's elements are x's (dtype dt), or x[i] + x2[i] when dt2 is not
 * GPUC_DT_UNDEF (AddLayerNormalization: the sum formed as each element is
 * loaded, in ct, never stored); x2_row: x2 is one row, x2[i % n]. */
void warp_rows_open(StrBuf *b, int64_t nrows, int64_t n, int vec, const char *ct, GpucDType dt, GpucDType dt2,
                    bool x2_row, const char *pad);
/* for (k) over this lane's valid elements, with j (the element's index in
 * the row) declared */
void warp_rows_for(StrBuf *b, int64_t n, int vec);
/* The row's output y (dtype ydt), written vec elements at a time: between
 * begin and end, for each of this lane's elements of a live row (k, j
 * declared), set r.v[u] (e.g. cg_store(b, ydt, "r.v", "u", ct, value)). */
void warp_rows_store_begin(StrBuf *b, int64_t n, int vec, GpucDType ydt);
void warp_rows_store_end(StrBuf *b, int vec, GpucDType ydt);
/* var = op over the warp (all lanes get it); comb is an expression in a, b */
void warp_allreduce(StrBuf *b, const char *var, const char *ct, const char *comb);
/* var = op over a warp row's lanes (each of them gets it) */
void warp_rows_allreduce(StrBuf *b, int64_t n, int vec, const char *var, const char *ct, const char *comb);
int warp_rows_launch(LowerCtx *c, const char *name, int64_t nrows, int64_t n, int vec, int nargs,
                     const uint32_t *args);

/* Multi-row layout: contiguous rows of n elements, held in registers, a
 * block of 256 threads taking rpb rows with wpr warps each (wpr 1 up to
 * n = 1024, else 2, 4 or 8: 2-4 warps share a long row), so a block moves
 * several rows and every lane moves 16-byte vectors. Lane `lane` of warp
 * `sub_` of its row holds vector g at element j0_ = ((g * wpr + sub_) * 32 +
 * lane) * vec of the row: consecutive lanes, consecutive vectors
 * (coalesced), the row's vectors spread over its warps. Rows past the end
 * (nrows not a multiple of rpb) are dead: their threads load nothing,
 * store nothing and still take part in the block's reductions. */
typedef struct RowLayout {
  int64_t nrows, n;
  int vec;     /* elements a vector: divides n */
  int wpr;     /* warps a row */
  int rpb;     /* rows a block: 8 / wpr */
  int groups;  /* vectors a lane: ceil(n / (32 * wpr * vec)) */
} RowLayout;
enum { ROW_LAYOUT_BLOCK = 256, ROW_LAYOUT_MAX_N = 8192 };
/* vec: the widest vector wanted (16 bytes of the narrowest stored
 * element), halved until it divides n. 1 when rows of n do not fit the
 * registers (n > ROW_LAYOUT_MAX_N), else 0. */
int row_layout_pick(RowLayout *L, int64_t nrows, int64_t n, int vec);
/* After the kernel's parameter list: declares lane, sub_, row_, live_,
 * base_ (row_ * n) and opens the grid-stride loop over blocks of rows;
 * close with "  }\n}\n". */
void row_layout_open(StrBuf *b, const RowLayout *L);
/* "for (g) { const int j0_ = ...; if (live_ && j0_ < n) {": this lane's
 * vectors in the row; the caller closes both braces (an else may follow
 * the inner one). */
void row_layout_for_vec(StrBuf *b, const RowLayout *L);
/* var (float) = comb over the row's lanes and warps (comb in a, b: max,
 * sum); every thread of the row gets it. Needs every thread of the block
 * (a barrier when wpr > 1), so never inside a live_ test. */
void row_layout_reduce(StrBuf *b, const RowLayout *L, const char *var, const char *comb);
/* The row held as float w_[groups * vec] (w_[g * vec + u]: element j0_ + u
 * of vector g, as stored in the row's dtype; 0 past the row) quantized by
 * QuantizeRows' rule (ir/quant_int8.h: absmax / 127, rint, clamp) or
 * QuantizeRowsF8's (absmax / 448, cvt.rn.satfinite e4m3) into the kernel's
 * qo (int8 / e4m3, vec bytes a store) and qs[row_] (the scale). Inside the
 * row loop of row_layout_open, every thread of the block (a reduction). */
void row_layout_quantize(StrBuf *b, const RowLayout *L, bool f8);
int row_layout_launch(LowerCtx *c, const RowLayout *L, const char *name, int nargs, const uint32_t *args);

/* The element of x at idx as ct, or of x + x2 (x2 of dtype dt2, at idx2)
 * when dt2 is not GPUC_DT_UNDEF. */
void rows_load_x(StrBuf *b, const char *ct, GpucDType dt, GpucDType dt2, const char *idx, const char *idx2);

/* var = offset of multi-index idx over n (dims, strides) */
void emit_offset(StrBuf *b, const char *var, const char *idx, int n, const int64_t *dims,
                 const int64_t *strides);
void push_axis(int64_t *dims, int64_t *strides, int *n, int64_t dim, int64_t stride);

#endif
