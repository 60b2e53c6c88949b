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

/* ---- ref_dgemm: row-at-a-time, simple (f64 is rare and not hot) --------- */

/* Pack op(B) into a row-major [K,N] buffer so the inner loop is contiguous
 * for both operands. */
int ref_dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
              const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
              double *C, int64_t ldc) {
  double *bp = NULL;
  const double *Bk = B;
  int64_t ldbk = ldb;
  if (trans_b) { /* B is [N,K]: make it [K,N] */
    bp = malloc(sizeof(double) * (size_t)(K * N + 1));
    if (!bp) return -1;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < K; k++) bp[k * N + n] = B[n * ldb + k];
    Bk = bp;
    ldbk = N;
  }
  double *row = malloc(sizeof(double) * (size_t)(N ? N : 1));
  if (!row) { free(bp); return -1; }
  for (int64_t m = 0; m < M; m++) {
    memset(row, 0, sizeof(double) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
      double a = trans_a ? A[k * lda + m] : A[m * lda + k];
      const double *b = Bk + k * ldbk;
      for (int64_t n = 0; n < N; n++) row[n] += a * b[n];
    }
    double *c = C + m * ldc;
    if (beta == 0)
      for (int64_t n = 0; n < N; n++) c[n] = alpha * row[n];
    else
      for (int64_t n = 0; n < N; n++) c[n] = alpha * row[n] + beta * c[n];
  }
  free(row);
  free(bp);
  return 0;
}

/* ---- ref_sgemm: packed, cache-blocked, register-tiled --------------------
 *
 * The classic layout: C is computed in [MC x NC] blocks, K in slices of KC.
 * For each slice, op(B)[KC x NC] is packed into column panels of NR
 * (Bp[panel][k][0..NR)) and op(A)[MC x KC] into row panels of MR
 * (Ap[panel][k][0..MR)), both zero-padded at the edges. A micro-kernel
 * then computes one [MR x NR] tile over the slice in registers, reading
 * both panels contiguously. Every product is computed (zeros are never
 * skipped), so NaN and Inf propagate as in the plain triple loop; the
 * padding only feeds tile entries that are never stored.
 *
 * Two micro-kernels: 6x16 with 8-wide vectors for CPUs with AVX2+FMA
 * (chosen at run time), and a portable 4x8 one with 4-wide vectors that
 * gcc maps onto SSE2. Both use GCC vector extensions; the f32 sums within
 * one slice of KC are in f32 (with FMA on the AVX2 path). */

typedef float gv4 __attribute__((vector_size(16)));
typedef float gv8 __attribute__((vector_size(32)));

#define GEMM_KC 256
#define GEMM_MC 96     /* a multiple of both MRs (4 and 6) */
#define GEMM_NC 1024   /* a multiple of both NRs (8 and 16) */
#define GEMM_MR_MAX 6
#define GEMM_NR_MAX 16

typedef void (*GemmKernel)(int64_t kc, const float *a, const float *b, float *tile);

/* The accumulators are named variables, one row per ROW() line, so that
 * they live in registers (an array would stay in memory at -O2). */

/* tile[4][8] = sum_k a[k][0..4) (x) b[k][0..8) */
static void kernel_4x8(int64_t kc, const float *restrict a, const float *restrict b,
                       float *restrict tile) {
  gv4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  for (int64_t k = 0; k < kc; k++, a += 4, b += 8) {
    gv4 b0, b1;
    memcpy(&b0, b, sizeof b0);
    memcpy(&b1, b + 4, sizeof b1);
#define ROW(i) c##i##0 += a[i] * b0; c##i##1 += a[i] * b1;
    ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
  }
#define ROW(i) memcpy(tile + i * 8, &c##i##0, 16); memcpy(tile + i * 8 + 4, &c##i##1, 16);
  ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
}

/* tile[6][16], compiled for AVX2+FMA: 12 accumulators in ymm registers. */
__attribute__((target("avx2,fma"))) static void kernel_6x16(int64_t kc, const float *restrict a,
                                                           const float *restrict b,
                                                           float *restrict tile) {
  gv8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
  gv8 c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
  for (int64_t k = 0; k < kc; k++, a += 6, b += 16) {
    gv8 b0, b1;
    memcpy(&b0, b, sizeof b0);
    memcpy(&b1, b + 8, sizeof b1);
#define ROW(i) c##i##0 += a[i] * b0; c##i##1 += a[i] * b1;
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
  }
#define ROW(i) memcpy(tile + i * 16, &c##i##0, 32); memcpy(tile + i * 16 + 8, &c##i##1, 32);
  ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
}

static bool cpu_has_avx2_fma(void) {
  static int has = -1; /* single-threaded executor: a benign one-time race at worst */
  if (has < 0) {
    __builtin_cpu_init();
    has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return has;
}

/* Element (i, k) of op(A) and (k, j) of op(B). */
static inline float op_at(const float *X, int64_t ld, bool trans, int64_t r, int64_t c) {
  return trans ? X[c * ld + r] : X[r * ld + c];
}

/* Ap[p][k][0..mr) for rows i0.. of op(A), k0..k0+kc, zero past m rows. */
static void pack_a(const float *A, int64_t lda, bool ta, int64_t i0, int64_t m, int64_t k0,
                   int64_t kc, int mr, float *Ap) {
  for (int64_t p = 0; p < m; p += mr, Ap += kc * mr)
    for (int i = 0; i < mr; i++) {
      bool in = p + i < m;
      for (int64_t k = 0; k < kc; k++)
        Ap[k * mr + i] = in ? op_at(A, lda, ta, i0 + p + i, k0 + k) : 0.0f;
    }
}

/* Bp[p][k][0..nr) for columns j0.. of op(B), k0..k0+kc, zero past n. The
 * common untransposed case copies contiguous runs of each row of B. */
static void pack_b(const float *B, int64_t ldb, bool tb, int64_t j0, int64_t n, int64_t k0,
                   int64_t kc, int nr, float *Bp) {
  for (int64_t p = 0; p < n; p += nr, Bp += kc * nr) {
    int64_t w = n - p < nr ? n - p : nr;
    for (int64_t k = 0; k < kc; k++) {
      float *dst = Bp + k * nr;
      if (!tb) memcpy(dst, B + (k0 + k) * ldb + j0 + p, sizeof(float) * (size_t)w);
      else
        for (int64_t j = 0; j < w; j++) dst[j] = B[(j0 + p + j) * ldb + k0 + k];
      for (int64_t j = w; j < nr; j++) dst[j] = 0.0f;
    }
  }
}

/* A few rows (matrix-vector products): packing B would cost more than the
 * product, so stream B's rows once per row of C instead. */
static int sgemm_thin(bool ta, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                      int64_t ldc) {
  float *row = malloc(sizeof(float) * (size_t)N);
  if (!row) return -1;
  for (int64_t m = 0; m < M; m++) {
    float *restrict r = row;
    memset(r, 0, sizeof(float) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
      float av = op_at(A, lda, ta, m, k);
      const float *restrict b = B + k * ldb;
      for (int64_t n = 0; n < N; n++) r[n] += av * b[n];
    }
    float *c = C + m * ldc;
    if (beta == 0)
      for (int64_t n = 0; n < N; n++) c[n] = alpha * r[n];
    else
      for (int64_t n = 0; n < N; n++) c[n] = alpha * r[n] + beta * c[n];
  }
  free(row);
  return 0;
}

int ref_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
              int64_t ldc) {
  if (M <= 0 || N <= 0) return 0;
  if (K <= 0) { /* empty sums: C = beta * C (beta == 0 does not read C) */
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) C[m * ldc + n] = beta == 0 ? 0.0f : beta * C[m * ldc + n];
    return 0;
  }
  if (M < 4 && !trans_b) return sgemm_thin(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  bool avx = cpu_has_avx2_fma();
  int mr = avx ? 6 : 4, nr = avx ? 16 : 8;
  GemmKernel kernel = avx ? kernel_6x16 : kernel_4x8;
  int64_t kcmax = K < GEMM_KC ? K : GEMM_KC;
  int64_t ncmax = N < GEMM_NC ? N : GEMM_NC, mcmax = M < GEMM_MC ? M : GEMM_MC;
  /* panels rounded up to whole tiles */
  size_t asz = (size_t)((mcmax + mr - 1) / mr * mr * kcmax);
  size_t bsz = (size_t)((ncmax + nr - 1) / nr * nr * kcmax);
  float *Ap = malloc(sizeof(float) * asz), *Bp = malloc(sizeof(float) * bsz);
  if (!Ap || !Bp) { free(Ap); free(Bp); return -1; }
  float tile[GEMM_MR_MAX * GEMM_NR_MAX];
  for (int64_t jc = 0; jc < N; jc += GEMM_NC) {
    int64_t nc = N - jc < GEMM_NC ? N - jc : GEMM_NC;
    for (int64_t pc = 0; pc < K; pc += GEMM_KC) {
      int64_t kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
      bool first = pc == 0; /* the first slice applies beta, later ones add */
      pack_b(B, ldb, trans_b, jc, nc, pc, kc, nr, Bp);
      for (int64_t ic = 0; ic < M; ic += GEMM_MC) {
        int64_t mc = M - ic < GEMM_MC ? M - ic : GEMM_MC;
        pack_a(A, lda, trans_a, ic, mc, pc, kc, mr, Ap);
        for (int64_t jr = 0; jr < nc; jr += nr) {
          int64_t w = nc - jr < nr ? nc - jr : nr;
          for (int64_t ir = 0; ir < mc; ir += mr) {
            int64_t h = mc - ir < mr ? mc - ir : mr;
            kernel(kc, Ap + ir * kc, Bp + jr * kc, tile);
            for (int64_t i = 0; i < h; i++) {
              float *c = C + (ic + ir + i) * ldc + jc + jr;
              const float *t = tile + i * nr;
              if (!first)
                for (int64_t j = 0; j < w; j++) c[j] += alpha * t[j];
              else if (beta == 0)
                for (int64_t j = 0; j < w; j++) c[j] = alpha * t[j];
              else
                for (int64_t j = 0; j < w; j++) c[j] = alpha * t[j] + beta * c[j];
            }
          }
        }
      }
    }
  }
  free(Ap);
  free(Bp);
  return 0;
}
