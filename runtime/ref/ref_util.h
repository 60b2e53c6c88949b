/* Helpers shared by reference kernels. */
#ifndef GPUC_REF_UTIL_H
#define GPUC_REF_UTIL_H
#include "ref.h"
#include "infer_util.h"

/* map[i] = index into `in` of the element that broadcasts to out[i]
 * (numpy rules; `in`'s rank <= out's). Returns NULL on OOM. Caller frees. */
int64_t *ref_bcast_map(const Tensor *in, const Tensor *out);

/* C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with
 * leading dimensions; op(X) = X^T when trans. f32 in, f32 accumulate in
 * blocks of K. Returns -1 only when out of host memory. */
int ref_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
               float *C, int64_t ldc);
/* Same in f64 for f64 tensors. */
int ref_dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
               double *C, int64_t ldc);

/* One element of a float tensor as double (f32 read directly, the other
 * float types through gpuc_get_f64), and stored back rounded to its type. */
static inline double ref_ld(const Tensor *t, int64_t i) {
  return t->dt == GPUC_DT_F32 ? ((const float *)t->data)[i] : gpuc_get_f64(t, i);
}
static inline void ref_st(Tensor *t, int64_t i, double v) {
  if (t->dt == GPUC_DT_F32) ((float *)t->data)[i] = (float)v;
  else gpuc_set_f64(t, i, v);
}
/* product of n dims (1 for n = 0) */
static inline int64_t ref_prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}
#endif
