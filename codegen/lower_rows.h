/* Row-wise kernel emitters shared by the reduction, softmax and
 * normalization lowerings: a tensor viewed as rows, one row per thread
 * (short or strided rows) or per block (long contiguous rows). */
#ifndef GPUC_LOWER_ROWS_H
#define GPUC_LOWER_ROWS_H
#include "lower_util.h"

typedef struct {
  bool block;        /* one block per row, else one thread per row */
  unsigned threads;  /* block size */
  int uid;           /* unique shared-memory names */
} Rows;

Rows rows_pick(int64_t nrows, int64_t len, bool contiguous);
void rows_open(StrBuf *b, const Rows *r, int64_t nrows);
void rows_for(StrBuf *b, const Rows *r, const char *j, int64_t n);
int rows_launch(LowerCtx *c, const Rows *r, const char *name, int64_t nrows, int nargs,
                const uint32_t *args);
/* Warp rows: contiguous rows of n <= WARP_ROW_MAX elements, one warp per
 * row, the row held in registers (v[k] = element lane + 32 k, k <
 * ceil(n/32); lanes past the end hold `pad`). warp_rows_open declares
 * lane, row, base and v[] (loaded from x as ct) inside a grid-stride loop
 * over rows; close it with "  }\n}\n" and launch with warp_rows_launch.
 * Every lane of a warp works on the same row, so shuffles are convergent. */
enum { WARP_ROW_MAX = 1024 };
/* The row's elements are x's (dtype dt), or x[i] + x2[i] when dt2 is not
 * GPUC_DT_UNDEF (AddLayerNormalization: the sum formed as each element is
 * loaded, in ct, never stored). */
void warp_rows_open(StrBuf *b, int64_t nrows, int64_t n, const char *ct, GpucDType dt, GpucDType dt2,
                    const char *pad);
/* for (k) over this lane's valid elements: "if (j < n)" with j declared */
void warp_rows_for(StrBuf *b, int64_t n);
/* var = op over the warp (all lanes get it); comb is an expression in a, b */
void warp_allreduce(StrBuf *b, const char *var, const char *ct, const char *comb);
int warp_rows_launch(LowerCtx *c, const char *name, int64_t nrows, int nargs, const uint32_t *args);

/* The element of x at idx as ct, or of x + x2 (x2 of dtype dt2) when dt2
 * is not GPUC_DT_UNDEF. */
void rows_load_x(StrBuf *b, const char *ct, GpucDType dt, GpucDType dt2, const char *idx);

/* var = offset of multi-index idx over n (dims, strides) */
void emit_offset(StrBuf *b, const char *var, const char *idx, int n, const int64_t *dims,
                 const int64_t *strides);
void push_axis(int64_t *dims, int64_t *strides, int *n, int64_t dim, int64_t stride);

#endif
