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
/* var = offset of multi-index idx over n (dims, strides) */
void emit_offset(StrBuf *b, const char *var, const char *idx, int n, const int64_t *dims,
                 const int64_t *strides);
void push_axis(int64_t *dims, int64_t *strides, int *n, int64_t dim, int64_t stride);

#endif
