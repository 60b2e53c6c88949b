/* Broadcast index maps and the reference GEMMs. */
#include "ref_util.h"
#include <stdlib.h>
#include <string.h>

int64_t *ref_bcast_map(const Tensor *in, const Tensor *out) {
  int64_t n = gpuc_numel(out);
  int64_t *map = malloc(sizeof *map * (size_t)(n ? n : 1));
  if (!map) return NULL;
  int r = out->rank, off = r - in->rank;
  int64_t in_stride[GPUC_MAX_RANK] = {0}, s = 1;
  for (int d = in->rank - 1; d >= 0; d--) {
    in_stride[d + off] = in->dims[d] == 1 ? 0 : s;
    s *= in->dims[d];
  }
  int64_t idx[GPUC_MAX_RANK] = {0}, pos = 0;
  for (int64_t i = 0; i < n; i++) {
    map[i] = pos;
    for (int d = r - 1; d >= 0; d--) { /* odometer increment */
      idx[d]++;
      pos += in_stride[d];
      if (idx[d] < out->dims[d]) break;
      pos -= in_stride[d] * idx[d];
      idx[d] = 0;
    }
  }
  return map;
}

/* Pack op(X) into a row-major [rows, cols] buffer so the inner loop is
 * contiguous for both operands. */
#define DEFINE_GEMM(NAME, T)                                                              \
  int NAME(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,          \
            const T *A, int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) { \
    T *bp = NULL;                                                                          \
    const T *Bk = B;                                                                       \
    int64_t ldbk = ldb;                                                                    \
    if (trans_b) { /* B is [N,K]: make it [K,N] */                                         \
      bp = malloc(sizeof(T) * (size_t)(K * N + 1));                                \
      if (!bp) return -1;                                                                  \
      for (int64_t n = 0; n < N; n++)                                                      \
        for (int64_t k = 0; k < K; k++) bp[k * N + n] = B[n * ldb + k];                    \
      Bk = bp;                                                                             \
      ldbk = N;                                                                            \
    }                                                                                      \
    T *row = malloc(sizeof(T) * (size_t)(N ? N : 1));                                      \
    if (!row) { free(bp); return -1; }                                                     \
    for (int64_t m = 0; m < M; m++) {                                                      \
      memset(row, 0, sizeof(T) * (size_t)N);                                               \
      for (int64_t k = 0; k < K; k++) {                                                    \
        T a = trans_a ? A[k * lda + m] : A[m * lda + k];                                   \
        const T *b = Bk + k * ldbk;                                                        \
        for (int64_t n = 0; n < N; n++) row[n] += a * b[n];                                \
      }                                                                                    \
      T *c = C + m * ldc;                                                                  \
      if (beta == 0)                                                                       \
        for (int64_t n = 0; n < N; n++) c[n] = alpha * row[n];                             \
      else                                                                                 \
        for (int64_t n = 0; n < N; n++) c[n] = alpha * row[n] + beta * c[n];               \
    }                                                                                      \
    free(row);                                                                             \
    free(bp);                                                                              \
    return 0;                                                                              \
  }

DEFINE_GEMM(ref_sgemm, float)
DEFINE_GEMM(ref_dgemm, double)
