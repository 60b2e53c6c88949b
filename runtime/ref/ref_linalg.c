/* Reference kernels of MatMul, MatMulInteger and Gemm. Float matrix
 * products go through ref_sgemm/ref_dgemm (f16/bf16 via f32 copies);
 * integer ones through a plain int64 loop that wraps like the narrower
 * result type. */
#include "ref_util.h"
#include "infer_linalg.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- batch geometry of a (broadcast) matrix product --------------------- */

/* y = a @ b with numpy matmul rules. Each of the nb output matrices [M,N]
 * uses A at aoff[i] and B at boff[i] (element offsets). */
typedef struct {
  int64_t M, N, K, nb;
  int64_t *aoff, *boff;
} MmGeom;

static void mm_free(MmGeom *g) { free(g->aoff); free(g->boff); }

/* Element strides of the batch dims of x (right-aligned to nbatch dims,
 * 0 where x has no such dim or it is 1). */
static void batch_strides(const Tensor *x, int nbatch, int64_t mat, int64_t *st) {
  int nx = x->rank > 2 ? x->rank - 2 : 0;
  int64_t s = mat;
  for (int d = nbatch - 1; d >= 0; d--) {
    int dx = d - (nbatch - nx);
    if (dx < 0) { st[d] = 0; continue; }
    st[d] = x->dims[dx] == 1 ? 0 : s;
    s *= x->dims[dx];
  }
}

static int mm_geom(OpCtx *c, const Tensor *a, const Tensor *b, const Tensor *y, MmGeom *g) {
  int ra = a->rank, rb = b->rank;
  memset(g, 0, sizeof *g);
  g->M = ra >= 2 ? a->dims[ra - 2] : 1;
  g->K = a->dims[ra - 1];
  g->N = rb >= 2 ? b->dims[rb - 1] : 1;
  int nbatch = y->rank - (ra >= 2) - (rb >= 2);
  int64_t bdims[GPUC_MAX_RANK], sa[GPUC_MAX_RANK], sb[GPUC_MAX_RANK];
  g->nb = 1;
  for (int d = 0; d < nbatch; d++) { bdims[d] = y->dims[d]; g->nb *= y->dims[d]; }
  batch_strides(a, nbatch, g->M * g->K, sa);
  batch_strides(b, nbatch, g->K * g->N, sb);
  g->aoff = malloc(sizeof(int64_t) * (size_t)(g->nb + 1));
  g->boff = malloc(sizeof(int64_t) * (size_t)(g->nb + 1));
  if (!g->aoff || !g->boff) { mm_free(g); return gpuc_op_fail(c, "out of host memory"); }
  int64_t idx[GPUC_MAX_RANK] = {0}, oa = 0, ob = 0;
  for (int64_t i = 0; i < g->nb; i++) { /* odometer over the batch dims */
    g->aoff[i] = oa;
    g->boff[i] = ob;
    for (int d = nbatch - 1; d >= 0; d--) {
      oa += sa[d];
      ob += sb[d];
      if (++idx[d] < bdims[d]) break;
      oa -= sa[d] * idx[d];
      ob -= sb[d] * idx[d];
      idx[d] = 0;
    }
  }
  /* B shared by every batch and A contiguous: one [nb*M, K] @ [K, N] */
  if (rb <= 2 && g->nb > 1) {
    g->M *= g->nb;
    g->nb = 1;
  }
  return 0;
}

/* ---- integer products ---------------------------------------------------- */

/* C[M,N] = A[M,K] @ B[K,N] in wrapping 64-bit arithmetic; row-at-a-time so
 * the inner loop runs along contiguous rows of B and C. */
static void gemm_i64(int64_t M, int64_t N, int64_t K, const int64_t *A, const int64_t *B,
                     int64_t *C) {
  for (int64_t m = 0; m < M; m++) {
    uint64_t *c = (uint64_t *)(C + m * N);
    for (int64_t n = 0; n < N; n++) c[n] = 0;
    for (int64_t k = 0; k < K; k++) {
      uint64_t av = (uint64_t)A[m * K + k];
      const uint64_t *brow = (const uint64_t *)(B + k * N);
      for (int64_t n = 0; n < N; n++) c[n] += av * brow[n];
    }
  }
}

/* x as int64 values, minus zero point zp (NULL: none) broadcast per
 * element through map (NULL: zp is a scalar). */
static int64_t *to_i64(const Tensor *x, const Tensor *zp, const int64_t *map) {
  int64_t n = gpuc_numel(x);
  int64_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
  if (!v) return NULL;
  for (int64_t i = 0; i < n; i++) {
    v[i] = gpuc_get_i64(x, i);
    if (zp) v[i] -= gpuc_get_i64(zp, map ? map[i] : 0);
  }
  return v;
}

/* Integer matmul of int64 copies; results stored with y's wrap-around. */
static int mm_int(OpCtx *c, const MmGeom *g, const int64_t *A, const int64_t *B, Tensor *y) {
  int64_t *C = malloc(sizeof *C * (size_t)(g->M * g->N + 1));
  if (!C) return gpuc_op_fail(c, "out of host memory");
  for (int64_t i = 0; i < g->nb; i++) {
    gemm_i64(g->M, g->N, g->K, A + g->aoff[i], B + g->boff[i], C);
    int64_t base = i * g->M * g->N;
    for (int64_t j = 0; j < g->M * g->N; j++) gpuc_set_i64(y, base + j, C[j]);
  }
  free(C);
  return 0;
}

/* ---- MatMul ---------------------------------------------------------------- */

static int mm_float(OpCtx *c, const MmGeom *g, const Tensor *a, const Tensor *b, Tensor *y) {
  int64_t mn = g->M * g->N;
  if (y->dt == GPUC_DT_F64) {
    const double *A = a->data, *B = b->data;
    double *Y = y->data;
    for (int64_t i = 0; i < g->nb; i++)
      if (ref_dgemm(false, false, g->M, g->N, g->K, 1, A + g->aoff[i], g->K, B + g->boff[i],
                    g->N, 0, Y + i * mn, g->N))
        return gpuc_op_fail(c, "out of host memory");
    return 0;
  }
  /* f32 directly; f16/bf16 through f32 copies */
  bool f32 = y->dt == GPUC_DT_F32;
  float *A = f32 ? a->data : gpuc_to_f32(a, c->err);
  float *B = f32 ? b->data : gpuc_to_f32(b, c->err);
  float *Y = f32 ? y->data : malloc(sizeof(float) * (size_t)(gpuc_numel(y) + 1));
  int rc = 0;
  if (!A || !B || !Y) rc = gpuc_op_fail(c, "out of host memory");
  for (int64_t i = 0; !rc && i < g->nb; i++)
    if (ref_sgemm(false, false, g->M, g->N, g->K, 1, A + g->aoff[i], g->K, B + g->boff[i], g->N,
                  0, Y + i * mn, g->N))
      rc = gpuc_op_fail(c, "out of host memory");
  if (!f32) {
    if (!rc) gpuc_from_f32(y, Y);
    free(A); free(B); free(Y);
  }
  return rc;
}

int ref_MatMul(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[1];
  Tensor *y = c->out[0];
  MmGeom g;
  if (mm_geom(c, a, b, y, &g)) return -1;
  int rc;
  if (gpuc_dtype_is_float(y->dt)) rc = mm_float(c, &g, a, b, y);
  else {
    int64_t *A = to_i64(a, NULL, NULL), *B = to_i64(b, NULL, NULL);
    rc = A && B ? mm_int(c, &g, A, B, y) : gpuc_op_fail(c, "out of host memory");
    free(A); free(B);
  }
  mm_free(&g);
  return rc;
}

/* MatMulBias = act(MatMul(A, B) + bias) + R (bias: N values, one per
 * column; activation 0 none, 1 Relu, 2 erf GELU, 3 tanh GELU;
 * passes/fuse_gemm_act.c; R optional, Y's shape: passes/fuse_residual_gemm.c). */
int ref_MatMulBias(OpCtx *c) {
  int64_t act = gpuc_attr_i(c->n, "activation", 0);
  if (act < 0 || act > 3) return gpuc_op_fail(c, "activation %lld is not 0..3", (long long)act);
  OpCtx mm = *c;
  mm.nin = 2;
  if (ref_MatMul(&mm)) return -1;
  Tensor *y = c->out[0];
  const Tensor *bias = c->in[2];
  int64_t n = gpuc_numel(y), cols = gpuc_numel(bias);
  for (int64_t i = 0; i < n && cols > 0; i++) {
    double v = gpuc_get_f64(y, i) + gpuc_get_f64(bias, i % cols);
    if (act == 1) v = v > 0 ? v : 0;
    else if (act == 2) v = 0.5 * v * (1 + erf(v * 0.7071067811865476));
    else if (act == 3) v = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    if (gpuc_has_in(c, 3)) v += gpuc_get_f64(c->in[3], i);
    gpuc_set_f64(y, i, v);
  }
  return 0;
}

/* ---- MatMulInteger ------------------------------------------------------- */

/* Index map from x's elements to its zero point's (NULL for a scalar zero
 * point). A 1-D per-row zero point of A ([M]) is viewed as [M,1]; B's 1-D
 * per-column one ([N]) broadcasts as it is. *err set on OOM. */
static int64_t *zp_map(const Tensor *zp, const Tensor *x, bool row, bool *err) {
  *err = false;
  if (!zp || gpuc_numel(zp) == 1) return NULL;
  Tensor view = *zp;
  if (row && zp->rank == 1) {
    view.rank = 2;
    view.dims[1] = 1;
  }
  int64_t *map = ref_bcast_map(&view, x);
  *err = map == NULL;
  return map;
}

int ref_MatMulInteger(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[1];
  const Tensor *za = gpuc_has_in(c, 2) ? c->in[2] : NULL, *zb = gpuc_has_in(c, 3) ? c->in[3] : NULL;
  Tensor *y = c->out[0];
  MmGeom g;
  if (mm_geom(c, a, b, y, &g)) return -1;
  bool e1, e2;
  int64_t *ma = zp_map(za, a, true, &e1), *mb = zp_map(zb, b, false, &e2);
  int64_t *A = e1 || e2 ? NULL : to_i64(a, za, ma);
  int64_t *B = e1 || e2 ? NULL : to_i64(b, zb, mb);
  int rc = A && B ? mm_int(c, &g, A, B, y) : gpuc_op_fail(c, "out of host memory");
  free(A); free(B); free(ma); free(mb);
  mm_free(&g);
  return rc;
}

/* ---- Gemm -------------------------------------------------------------------- */

/* double to int64 without undefined behaviour: NaN 0, saturating. */
static int64_t sat_i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

/* Offset into C for Y[m,n] under unidirectional broadcasting. */
static int64_t c_index(const Tensor *cc, int64_t m, int64_t n) {
  if (cc->rank == 0) return 0;
  int64_t last = cc->dims[cc->rank - 1];
  int64_t col = last == 1 ? 0 : n;
  if (cc->rank == 1 || cc->dims[0] == 1) return col;
  return m * last + col;
}

/* Y = alpha * op(A) @ op(B) + beta * C. beta == 0 drops C altogether
 * (BLAS and the ONNX reference do: a NaN in C does not show). */
int ref_Gemm(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[1], *cc = gpuc_has_in(c, 2) ? c->in[2] : NULL;
  Tensor *y = c->out[0];
  float beta = gpuc_attr_f(c->n, "beta", 1.0f);
  if (beta == 0) cc = NULL;
  bool ta = gpuc_attr_i(c->n, "transA", 0) != 0, tb = gpuc_attr_i(c->n, "transB", 0) != 0;
  float alpha = gpuc_attr_f(c->n, "alpha", 1.0f);
  int64_t M = y->dims[0], N = y->dims[1], K = a->dims[ta ? 0 : 1];
  int64_t lda = a->dims[1], ldb = b->dims[1];
  int rc = 0;
  if (y->dt == GPUC_DT_F64) {
    double *Y = y->data;
    if (ref_dgemm(ta, tb, M, N, K, alpha, a->data, lda, b->data, ldb, 0, Y, N))
      return gpuc_op_fail(c, "out of host memory");
    if (cc)
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) Y[m * N + n] += beta * gpuc_get_f64(cc, c_index(cc, m, n));
  } else if (gpuc_dtype_is_float(y->dt)) {
    bool f32 = y->dt == GPUC_DT_F32;
    float *A = f32 ? a->data : gpuc_to_f32(a, c->err);
    float *B = f32 ? b->data : gpuc_to_f32(b, c->err);
    float *Y = f32 ? y->data : malloc(sizeof(float) * (size_t)(M * N + 1));
    if (!A || !B || !Y || ref_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0, Y, N))
      rc = gpuc_op_fail(c, "out of host memory");
    if (!rc && cc) {
      if (cc->dt == GPUC_DT_F32) {
        const float *C = cc->data;
        for (int64_t m = 0; m < M; m++)
          for (int64_t n = 0; n < N; n++) Y[m * N + n] += beta * C[c_index(cc, m, n)];
      } else {
        for (int64_t m = 0; m < M; m++)
          for (int64_t n = 0; n < N; n++)
            Y[m * N + n] += beta * (float)gpuc_get_f64(cc, c_index(cc, m, n));
      }
    }
    if (!f32) {
      if (!rc) gpuc_from_f32(y, Y);
      free(A); free(B); free(Y);
    }
  } else {
    /* integers: exact product; alpha/beta applied only when not 1 */
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        uint64_t acc = 0;
        for (int64_t k = 0; k < K; k++) {
          int64_t av = gpuc_get_i64(a, ta ? k * lda + m : m * lda + k);
          int64_t bv = gpuc_get_i64(b, tb ? n * ldb + k : k * ldb + n);
          acc += (uint64_t)av * (uint64_t)bv;
        }
        int64_t v = alpha == 1 ? (int64_t)acc : sat_i64(alpha * (double)(int64_t)acc);
        if (cc) {
          int64_t cv = gpuc_get_i64(cc, c_index(cc, m, n));
          v = (int64_t)((uint64_t)v + (uint64_t)(beta == 1 ? cv : sat_i64(beta * (double)cv)));
        }
        gpuc_set_i64(y, m * N + n, v);
      }
  }
  return rc;
}
