/* MatMul and Gemm as cuBLASLt calls (and Det, one thread per matrix, at the end). Row-major shapes; batch dims either
 * equal or broadcast with stride 0; when B is 2-D the batch folds into M
 * (one large GEMM instead of many small ones). */
#include "lower_util.h"
#include <string.h>

static bool gemm_dtype(GpucDType dt) {
  return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16 || dt == GPUC_DT_F64;
}

/* A half GEMM whose constant B has at most 2 nonzeros in each group of 4
 * along K (--prune 2:4 made it so, or the model came pruned) is flagged
 * for sparse tensor cores; the rest of PLAN_GEMM_F_SPARSE24's conditions
 * (plan.h) are checked here so that every flagged GEMM can run there. */
static uint32_t sparse24_flags(const LowerCtx *c, const PlanGemm *g) {
  const Tensor *b = c->in[1];
  if (!b->data || b->rank != 2 || b->dt != GPUC_DT_F16 || g->dt != GPUC_DT_F16 || g->batch != 1 ||
      g->trans_a || g->m % 16 || g->n % 16 || g->k % 16 || g->ldb != b->dims[1] ||
      (g->c != UINT32_MAX && g->ldc != 0))
    return 0;
  return gpuc_tensor_is_24_sparse(b, g->trans_b ? 1 : 0) ? PLAN_GEMM_F_SPARSE24 : 0;
}

/* MatMul, and MatMulBias when bias is not NULL (B is then 2-D, so the batch
 * folds into M and the bias row is cuBLASLt's epilogue, with activation
 * epi, a GPUC_GEMM_EPI_*; a residual R (resid) is C with beta 1, Y = A B +
 * R + bias, and Y may take R's bytes: cuBLASLt computes in place when C
 * and D have one layout). */
static int matmul(LowerCtx *c, uint32_t bias, uint32_t epi, uint32_t resid) {
  const Tensor *a = c->in[0], *b = c->in[1], *y = c->out[0];
  if (!gemm_dtype(a->dt) || a->dt != b->dt)
    return lower_unsupported(c, "MatMul of %s x %s on the GPU", gpuc_dtype_name(a->dt), gpuc_dtype_name(b->dt));
  int ra = a->rank, rb = b->rank;
  int64_t M = ra >= 2 ? a->dims[ra - 2] : 1, K = a->dims[ra - 1];
  int64_t N = rb >= 2 ? b->dims[rb - 1] : 1;
  if (gpuc_numel(y) == 0) return 0;
  PlanGemm g = {.a = c->tin[0], .b = c->tin[1], .c = UINT32_MAX, .y = c->tout[0], .m = M, .n = N,
                .k = K, .batch = 1, .lda = K, .ldb = N, .ldy = N, .alpha = 1, .dt = a->dt};
  if (rb == 1) g.ldb = 1; /* B is a column [K] */
  int64_t batch_a = 1, batch_b = 1;
  for (int d = 0; d < ra - 2; d++) batch_a *= a->dims[d];
  for (int d = 0; d < rb - 2; d++) batch_b *= b->dims[d];
  if (rb <= 2) {
    g.m = M * batch_a; /* A's batch folds into rows */
    if (bias != UINT32_MAX) { g.c = bias; g.ldc = 0; g.trans_a = GPUC_GEMM_TRANS_A_PACK(0, epi); }
    if (bias != UINT32_MAX && resid != UINT32_MAX) {
      g.c = resid;
      g.ldc = N;
      g.beta = 1;
      g.reserved = bias;
      if (cg_gemm_flagged(c, &g, PLAN_GEMM_F_BIAS_C)) return -1;
      cg_in_place(c, resid, g.y);
      return 0;
    }
  } else {
    /* batched: output batch dims = broadcast of both; support the cases
     * where each operand's batch is either the full batch or a single one */
    int64_t batch_y = 1;
    for (int d = 0; d < y->rank - 2; d++) batch_y *= y->dims[d];
    if ((batch_a != batch_y && batch_a != 1) || (batch_b != batch_y && batch_b != 1))
      return lower_unsupported(c, "MatMul with partially broadcast batch dims on the GPU");
    g.batch = batch_y;
    g.stride_a = batch_a == 1 ? 0 : M * K;
    g.stride_b = batch_b == 1 ? 0 : K * N;
    g.stride_y = M * N;
  }
  return cg_gemm_flagged(c, &g, sparse24_flags(c, &g));
}
int lower_MatMul(LowerCtx *c) { return matmul(c, UINT32_MAX, 0, UINT32_MAX); }
/* activation (passes/fuse_gemm_act.c): 1 Relu and 3 tanh GELU in
 * cuBLASLt's epilogue; 2 the erf GELU there too for half (its tanh form is
 * within half's rounding), in f32 exactly, in a kernel after the GEMM. */
int lower_MatMulBias(LowerCtx *c) {
  if (c->in[1]->rank != 2 || c->in[2]->dt != c->in[0]->dt)
    return lower_fail(c, "internal: MatMulBias needs a 2-D B and a bias of A's dtype");
  int64_t act = gpuc_attr_i(c->n, "activation", 0);
  bool half = c->in[0]->dt == GPUC_DT_F16 || c->in[0]->dt == GPUC_DT_BF16;
  uint32_t epi = act == 1 ? GPUC_GEMM_EPI_RELU : act == 3 || (act == 2 && half) ? GPUC_GEMM_EPI_GELU : 0;
  if (act < 0 || act > 3) return lower_fail(c, "internal: MatMulBias activation %lld", (long long)act);
  bool resid = c->nin > 3 && c->in[3];
  if (resid && (act || c->in[3]->dt != c->in[0]->dt))
    return lower_fail(c, "internal: MatMulBias's residual needs activation 0 and A's dtype");
  int rc = matmul(c, c->tin[2], epi, resid ? c->tin[3] : UINT32_MAX);
  if (rc || epi || act == 0) return rc;
  const Tensor *ins[1] = {c->out[0]};
  uint32_t tins[1] = {c->tout[0]};
  LowerCtx e = *c;
  e.in = ins;
  e.tin = tins;
  e.nin = 1;
  static const int which[1] = {0};
  rc = cg_elementwise(&e, which, 1, cg_compute_type(c->out[0]->dt), NULL,
                      "0.5 * x0 * (1 + erf(x0 * 0.7071067811865476))");
  c->nkernels_emitted = e.nkernels_emitted;
  return rc;
}

int lower_Gemm(LowerCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[1], *y = c->out[0];
  if (!gemm_dtype(a->dt) || a->dt != b->dt)
    return lower_unsupported(c, "Gemm of %s on the GPU", gpuc_dtype_name(a->dt));
  bool ta = gpuc_attr_i(c->n, "transA", 0), tb = gpuc_attr_i(c->n, "transB", 0);
  int64_t M = y->dims[0], N = y->dims[1], K = ta ? a->dims[0] : a->dims[1];
  float alpha = gpuc_attr_f(c->n, "alpha", 1.0f), beta = gpuc_attr_f(c->n, "beta", 1.0f);
  if (M == 0 || N == 0) return 0;
  PlanGemm g = {.a = c->tin[0], .b = c->tin[1], .c = UINT32_MAX, .y = c->tout[0], .trans_a = ta,
                .trans_b = tb, .m = M, .n = N, .k = K, .batch = 1, .lda = a->dims[1],
                .ldb = b->dims[1], .ldy = N, .alpha = alpha, .beta = 0, .dt = a->dt};
  const Tensor *cc = c->nin > 2 ? c->in[2] : NULL;
  if (!cc || beta == 0) return cg_gemm_flagged(c, &g, sparse24_flags(c, &g));
  if (cc->dt != a->dt) return lower_unsupported(c, "Gemm with C of another dtype");
  int64_t cn = gpuc_numel(cc);
  bool row = cn == N && (cc->rank == 1 || (cc->rank == 2 && cc->dims[0] == 1));
  bool full = cc->rank == 2 && cc->dims[0] == M && cc->dims[1] == N;
  if (row && beta == 1.0f) { /* bias row: cuBLASLt epilogue */
    g.c = c->tin[2];
    g.ldc = 0;
    return cg_gemm_flagged(c, &g, sparse24_flags(c, &g));
  }
  if (full) {
    g.c = c->tin[2];
    g.ldc = N;
    g.beta = beta;
    return cg_gemm(c, &g);
  }
  /* any other broadcast C: GEMM into a scratch, then y = s + beta * C */
  int64_t dims[2] = {M, N};
  uint32_t s = cg_scratch(c, a->dt, 2, dims);
  g.y = s;
  if (cg_gemm(c, &g)) return -1;
  Tensor sd = {.dt = a->dt, .rank = 2, .dims = {M, N}};
  const Tensor *ins[2] = {&sd, cc};
  uint32_t tins[2] = {s, c->tin[2]};
  LowerCtx e = *c;
  e.in = ins;
  e.tin = tins;
  e.nin = 2;
  char expr[96], lit[64];
  cg_float_lit(lit, sizeof lit, beta, cg_compute_type(a->dt));
  snprintf(expr, sizeof expr, "x0 + %s * x1", lit);
  const int which[2] = {0, 1};
  int rc = cg_elementwise(&e, which, 2, cg_compute_type(a->dt), NULL, expr);
  c->nkernels_emitted = e.nkernels_emitted;
  return rc;
}

/* Det: one thread per M x M matrix (M <= 32: the matrix lives in the
 * thread's local memory), LU with partial pivoting in double like the
 * reference; larger matrices are refused. */
int lower_Det(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int64_t M = x->dims[x->rank - 1], batch = gpuc_numel(y);
  if (x->dims[x->rank - 2] != M) return lower_fail(c, "matrices must be square");
  if (M > 32) return lower_unsupported(c, "Det of %lld x %lld matrices on the GPU (one thread per matrix: at most 32 x 32)",
                                       (long long)M, (long long)M);
  if (batch == 0) return 0;
  const char *T = cg_ctype(x->dt);
  bool half = x->dt == GPUC_DT_F16 || x->dt == GPUC_DT_BF16;
  long long m = (long long)M, mm = m * m > 0 ? m * m : 1;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(bi, %lldLL) {\n"
               "    double a[%lld];\n"
               "    const %s* xm = x + bi * %lldLL;\n"
               "    for (int i = 0; i < %lld; i++) a[i] = (double)%s(xm[i]);\n"
               "    double det = 1;\n"
               "    for (int k = 0; k < %lld; k++) {\n"
               "      int piv = k;\n"
               "      for (int i = k + 1; i < %lld; i++) if (fabs(a[i * %lld + k]) > fabs(a[piv * %lld + k])) piv = i;\n"
               "      if (a[piv * %lld + k] == 0) { det = 0; break; }\n"
               "      if (piv != k) {\n"
               "        for (int j = 0; j < %lld; j++) { double t = a[k * %lld + j]; a[k * %lld + j] = a[piv * %lld + j]; a[piv * %lld + j] = t; }\n"
               "        det = -det;\n      }\n"
               "      const double d = a[k * %lld + k];\n      det *= d;\n"
               "      for (int i = k + 1; i < %lld; i++) {\n"
               "        const double f = a[i * %lld + k] / d;\n"
               "        for (int j = k + 1; j < %lld; j++) a[i * %lld + j] -= f * a[k * %lld + j];\n"
               "      }\n    }\n",
            name, T, T, (long long)batch, mm, T, m * m, m * m, half ? "ldf" : "", m, m, m, m, m, m, m, m, m, m, m, m, m,
            m, m, m);
  if (half) sb_printf(b, "    y[bi] = stf<%s>((float)det);\n  }\n}\n", T);
  else sb_printf(b, "    y[bi] = (%s)det;\n  }\n}\n", T);
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch(c, name, (uint64_t)batch, 128, 0, 2, args);
}
