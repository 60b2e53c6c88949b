/* 2:4 sparse GEMMs through cuSPARSELt (see sparse_gemm.h).
 *
 * The plan's GEMM is row-major Y[M,N] = A[M,K] B + bias, B the weight
 * ([K,N], or [N,K] with trans_b) with at most 2 nonzeros in each group of 4
 * along K. As with cuBLASLt (session.c) the row-major product is computed
 * column-major as Y^T = B^T A^T, so the structured operand is cuSPARSELt's
 * matrix A, N x K after its op, 2:4 along K:
 *   structured A: trans_b 0: the bytes of B [K,N] are column-major N x K,
 *                 ld N, op N; trans_b 1: the bytes of B [N,K] are
 *                 column-major K x N, ld K, op T
 *   dense B:      the bytes of A [M,K] are column-major K x M, ld K, op N
 *   C, D:         the bytes of Y [M,N] are column-major N x M, ld N
 *   bias:         N values, one per row of D (cuSPARSELt's bias vector),
 *                 float or half: which one the library reads is found at
 *                 load (bias_reading)
 * Half in and out, fp32 accumulation (CUSPARSE_COMPUTE_32F), as the dense
 * GEMMs. The weight is compressed at load, on the device, by the library
 * that runs it (the compressed layout is the library's own), after a prune
 * check of the dense weight: a pattern cuSPARSELt does not see as 2:4 runs
 * dense rather than wrong. */
#include "sparse_gemm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GPUC_HAVE_CUSPARSELT

int gpuc_sparse_gemm_setup(const PlanGemm *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr y,
                           CUstream stream, SparseGemm **out, size_t *workspace, char *why, size_t nwhy,
                           GpucErr *e) {
  *out = NULL;
  *workspace = 0;
  snprintf(why, nwhy, "%s", gpuc_sparse_gemm_library());
  return 1;
}
int gpuc_sparse_gemm_run(SparseGemm *s, CUdeviceptr workspace, CUstream stream, GpucErr *e) {
  return gpuc_err_set(e, "internal: a sparse GEMM in a build without cuSPARSELt");
}
void gpuc_sparse_gemm_free(SparseGemm *s) { (void)s; }
int gpuc_sparse_gemm_search(SparseGemm *s, int32_t cfg[4], size_t *workspace, CUstream stream, char *why,
                            size_t nwhy, GpucErr *e) {
  return gpuc_err_set(e, "internal: a sparse GEMM in a build without cuSPARSELt");
}
int gpuc_sparse_gemm_configure(SparseGemm *s, const int32_t cfg[4], size_t *workspace, CUstream stream, char *why,
                               size_t nwhy, GpucErr *e) {
  return gpuc_err_set(e, "internal: a sparse GEMM in a build without cuSPARSELt");
}
const char *gpuc_sparse_gemm_cfg_note(const SparseGemm *s) { return ""; }
const char *gpuc_sparse_gemm_library(void) {
  return "built without cuSPARSELt headers (scripts/deps.sh fetches them; then rebuild)";
}

#else
#include "cuda_api.h"
#define DISABLE_CUSPARSE_DEPRECATED /* cusparse.h (the status and enum types) marks its legacy API */
#include <cusparseLt.h>
#include <dlfcn.h>

#define GPUC_CUSPARSELT_FUNCS(X)                                                     \
  X(cusparseLtInit) X(cusparseLtGetVersion) X(cusparseLtDenseDescriptorInit)         \
  X(cusparseLtStructuredDescriptorInit) X(cusparseLtMatDescriptorDestroy)            \
  X(cusparseLtMatmulDescriptorInit) X(cusparseLtMatmulDescSetAttribute)              \
  X(cusparseLtMatmulAlgSelectionInit) X(cusparseLtMatmulPlanInit)                    \
  X(cusparseLtMatmulPlanDestroy) X(cusparseLtMatmulGetWorkspace) X(cusparseLtMatmul) \
  X(cusparseLtSpMMAPruneCheck) X(cusparseLtSpMMACompressedSize) X(cusparseLtSpMMACompress) \
  X(cusparseLtGetErrorString) X(cusparseLtMatmulSearch) X(cusparseLtMatmulAlgSetAttribute)       \
  X(cusparseLtMatmulAlgGetAttribute)

#define FN_PTR(name) __typeof__(name) *name;
static struct { GPUC_CUSPARSELT_FUNCS(FN_PTR) } lt;
#undef FN_PTR

static cusparseLtHandle_t handle;
static int state;                /* 0 not tried, 1 ready, -1 unavailable (why in `status`) */
static char status[1536];

/* libcusparseLt.so.0 on the loader's path, else where pip wheels put it:
 * PyTorch's venv on the GPU machine (nvidia/cusparselt/lib for CUDA 12
 * wheels, nvidia/cu13/lib for CUDA 13 ones), $GPUC_CUSPARSELT first. */
static void *open_library(char *tried, size_t n) {
  static const char *const fixed[] = {
      "libcusparseLt.so.0",
      "/usr/local/cuda/lib64/libcusparseLt.so.0",
      "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cusparselt/lib/libcusparseLt.so.0",
      "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcusparseLt.so.0",
      "/usr/local/lib/python3.12/dist-packages/nvidia/cusparselt/lib/libcusparseLt.so.0",
      "/usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib/libcusparseLt.so.0",
      NULL};
  size_t len = 0;
  tried[0] = 0;
  const char *env = getenv("GPUC_CUSPARSELT");
  if (env && *env) {
    void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    len += (size_t)snprintf(tried, n, "%s (GPUC_CUSPARSELT)", env);
  }
  for (int i = 0; fixed[i]; i++) {
    void *h = dlopen(fixed[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    len += (size_t)snprintf(tried + len, len < n ? n - len : 0, "%s%s", len ? ", " : "", fixed[i]);
  }
  return NULL;
}

/* Opens the library and makes the one handle (a CUDA context is current). */
static int ready(void) {
  if (state) return state;
  char tried[1024];
  void *h = open_library(tried, sizeof tried);
  state = -1;
  if (!h) {
    snprintf(status, sizeof status, "cuSPARSELt not found (tried %s; GPUC_CUSPARSELT=PATH names it)", tried);
    return state;
  }
#define LOAD(name)                                                                           \
  if (!(lt.name = (__typeof__(lt.name))dlsym(h, #name))) {                                   \
    snprintf(status, sizeof status, "cuSPARSELt: symbol %s not found (older than 0.8?)", #name); \
    return state;                                                                            \
  }
  GPUC_CUSPARSELT_FUNCS(LOAD)
#undef LOAD
  cusparseStatus_t r = lt.cusparseLtInit(&handle);
  if (r != CUSPARSE_STATUS_SUCCESS) {
    snprintf(status, sizeof status, "cusparseLtInit failed: %s", lt.cusparseLtGetErrorString(r));
    return state;
  }
  int v = 0;
  lt.cusparseLtGetVersion(&handle, &v);
  snprintf(status, sizeof status, "cuSPARSELt %d.%d.%d", v / 1000000, v / 100 % 10000, v % 100);
  return state = 1;
}

const char *gpuc_sparse_gemm_library(void) {
  ready();
  return status;
}

struct SparseGemm {
  cusparseLtMatDescriptor_t ma, mb, mc;
  cusparseLtMatmulDescriptor_t mm;
  cusparseLtMatmulAlgSelection_t alg;
  cusparseLtMatmulPlan_t plan;
  bool has_ma, has_mb, has_mc, has_plan;
  CUdeviceptr compressed, bias32, b_dense, y;
  CUdeviceptr w, bias_half;      /* the dense 2:4 weight and the plan's bias row (0: none) */
  PlanGemm g;
  float alpha, beta;
  bool has_cfg;                  /* cfg set on the algorithm selection (else the default) */
  int32_t cfg[4];                /* ALG_CONFIG_ID, SPLIT_K, SPLIT_K_MODE, SPLIT_K_BUFFERS */
  char cfg_note[256];            /* why the plan's configuration was not used */
};

static const cusparseLtMatmulAlgAttribute_t cfg_attr[4] = {CUSPARSELT_MATMUL_ALG_CONFIG_ID, CUSPARSELT_MATMUL_SPLIT_K,
                                                           CUSPARSELT_MATMUL_SPLIT_K_MODE,
                                                           CUSPARSELT_MATMUL_SPLIT_K_BUFFERS};

static void destroy_plan(SparseGemm *s) {
  if (s->has_plan) lt.cusparseLtMatmulPlanDestroy(&s->plan);
  if (s->has_ma) lt.cusparseLtMatDescriptorDestroy(&s->ma);
  if (s->has_mb) lt.cusparseLtMatDescriptorDestroy(&s->mb);
  if (s->has_mc) lt.cusparseLtMatDescriptorDestroy(&s->mc);
  s->has_plan = s->has_ma = s->has_mb = s->has_mc = false;
}

void gpuc_sparse_gemm_free(SparseGemm *s) {
  if (!s) return;
  destroy_plan(s);
  if (s->compressed) cu.cuMemFree(s->compressed);
  if (s->bias32) cu.cuMemFree(s->bias32);
  free(s);
}

/* A cuSPARSELt status other than success: why, for the dense fallback (1). */
static int lt_fail(cusparseStatus_t r, const char *call, char *why, size_t nwhy) {
  snprintf(why, nwhy, "%s: %s", call, lt.cusparseLtGetErrorString(r));
  return 1;
}
#define LT(call)                                                                              \
  do {                                                                                        \
    cusparseStatus_t r_ = (call);                                                             \
    if (r_ != CUSPARSE_STATUS_SUCCESS) return lt_fail(r_, #call, why, nwhy);                  \
  } while (0)

static int cu_check(GpucErr *e, CUresult r, const char *what) {
  return r == CUDA_SUCCESS ? 0 : gpuc_cu_fail(e, r, what, __FILE__, __LINE__);
}

/* Descriptors and plan for g (the mapping at the top of the file), with the
 * bias vector at `bias` (0: none). 0, or 1 with why. */
static int make_plan(SparseGemm *s, const PlanGemm *g, CUdeviceptr bias, char *why, size_t nwhy) {
  const uint32_t align = 16;
  int64_t N = g->n, K = g->k, M = g->m;
  cusparseOperation_t opa = g->trans_b ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
  LT(lt.cusparseLtStructuredDescriptorInit(&handle, &s->ma, g->trans_b ? K : N, g->trans_b ? N : K,
                                           g->trans_b ? K : N, align, CUDA_R_16F, CUSPARSE_ORDER_COL,
                                           CUSPARSELT_SPARSITY_50_PERCENT));
  s->has_ma = true;
  LT(lt.cusparseLtDenseDescriptorInit(&handle, &s->mb, K, M, K, align, CUDA_R_16F, CUSPARSE_ORDER_COL));
  s->has_mb = true;
  LT(lt.cusparseLtDenseDescriptorInit(&handle, &s->mc, N, M, N, align, CUDA_R_16F, CUSPARSE_ORDER_COL));
  s->has_mc = true;
  LT(lt.cusparseLtMatmulDescriptorInit(&handle, &s->mm, opa, CUSPARSE_OPERATION_NON_TRANSPOSE, &s->ma, &s->mb,
                                       &s->mc, &s->mc, CUSPARSE_COMPUTE_32F));
  if (bias) {
    void *bp = (void *)(uintptr_t)bias;
    LT(lt.cusparseLtMatmulDescSetAttribute(&handle, &s->mm, CUSPARSELT_MATMUL_BIAS_POINTER, &bp, sizeof bp));
  }
  LT(lt.cusparseLtMatmulAlgSelectionInit(&handle, &s->alg, &s->mm, CUSPARSELT_MATMUL_ALG_DEFAULT));
  /* a searched configuration (the plan's, or a cached one): the config id,
   * then split-K, then its mode and buffers only where it splits */
  for (int k = 0; s->has_cfg && k < (s->cfg[1] > 1 ? 4 : 2); k++)
    LT(lt.cusparseLtMatmulAlgSetAttribute(&handle, &s->alg, cfg_attr[k], &s->cfg[k], sizeof s->cfg[k]));
  LT(lt.cusparseLtMatmulPlanInit(&handle, &s->plan, &s->mm, &s->alg));
  s->has_plan = true;
  return 0;
}

/* What the host sees in the half weight at b ([K,N], or [N,K] with
 * trans_b), groups of 4 along K: groups with more than 2 nonzero values,
 * and with more than 2 nonzero bit patterns (-0 counted), so a refusal
 * says whether the bytes or the check disagree. */
static void pattern_why(const PlanGemm *g, CUdeviceptr b, char *out, size_t n) {
  size_t count = (size_t)g->n * (size_t)g->k;
  uint16_t *w = malloc(count * 2 + 2);
  if (!w || cu.cuMemcpyDtoH(w, b, count * 2) != CUDA_SUCCESS) {
    snprintf(out, n, "weight not read back");
    free(w);
    return;
  }
  long long by_value = 0, by_bits = 0, groups = 0;
  for (int64_t o = 0; o < g->n; o++)
    for (int64_t k0 = 0; k0 + 4 <= g->k; k0 += 4, groups++) {
      int nv = 0, nb = 0;
      for (int j = 0; j < 4; j++) {
        uint16_t h = w[g->trans_b ? o * g->k + k0 + j : (k0 + j) * g->n + o];
        nv += (h & 0x7fff) != 0;
        nb += h != 0;
      }
      by_value += nv > 2;
      by_bits += nb > 2;
    }
  snprintf(out, n, "host: %lld of %lld groups over 2 by value, %lld by bits", by_value, groups, by_bits);
  free(w);
}

/* The dense 2:4 weight at b checked (cuSPARSELt must see it 2:4 in the
 * layout above, or the product would be wrong) and compressed into a
 * buffer of s's own. 0, 1 with why, or -1 on a CUDA error. */
static int compress(SparseGemm *s, const PlanGemm *g, CUdeviceptr b, CUstream stream, char *why, size_t nwhy,
                    GpucErr *e) {
  size_t csize = 0, cbuf = 0;
  LT(lt.cusparseLtSpMMACompressedSize(&handle, &s->plan, &csize, &cbuf));
  CUdeviceptr tmp = 0; /* the check's int, then the compression scratch */
  if (cu_check(e, cu.cuMemAlloc(&tmp, 256 + cbuf), "cuMemAlloc")) return -1;
  int invalid = 1, rc = 0;
  /* the result word starts at 0: left as cuMemAlloc gave it (reused bytes
   * of earlier compressions' scratch), a check that writes it only for a
   * bad group reads back garbage. The likely cause of the 11 of BERT's 72
   * weights refused on the H200 (docs/BENCHMARKS.md): a data-dependent few
   * of one shape, while gpuc's own check of the same bytes passed; a
   * refusal now also says what the host sees in the bytes (pattern_why) */
  CUresult cr = cu.cuMemsetD8Async(tmp, 0, sizeof(int), stream);
  if (cr != CUDA_SUCCESS) {
    cu.cuMemFree(tmp);
    return gpuc_cu_fail(e, cr, "cuMemsetD8Async", __FILE__, __LINE__);
  }
  cusparseStatus_t r = lt.cusparseLtSpMMAPruneCheck(&handle, &s->mm, (const void *)(uintptr_t)b,
                                                    (int *)(uintptr_t)tmp, (cudaStream_t)stream);
  if (r != CUSPARSE_STATUS_SUCCESS) rc = lt_fail(r, "cusparseLtSpMMAPruneCheck", why, nwhy);
  if (!rc && (cr = cu.cuStreamSynchronize(stream)) == CUDA_SUCCESS) cr = cu.cuMemcpyDtoH(&invalid, tmp, sizeof invalid);
  if (!rc && cr == CUDA_SUCCESS && invalid) {
    char host[160];
    pattern_why(g, b, host, sizeof host);
    snprintf(why, nwhy, "cuSPARSELt does not see the weight of GEMM %lldx%lldx%lld as 2:4 (%s)", (long long)g->m,
             (long long)g->n, (long long)g->k, host);
    rc = 1;
  }
  if (!rc && cr == CUDA_SUCCESS && !s->compressed) cr = cu.cuMemAlloc(&s->compressed, csize ? csize : 256);
  if (!rc && cr == CUDA_SUCCESS) {
    r = lt.cusparseLtSpMMACompress(&handle, &s->plan, (const void *)(uintptr_t)b, (void *)(uintptr_t)s->compressed,
                                   cbuf ? (void *)(uintptr_t)(tmp + 256) : NULL, (cudaStream_t)stream);
    if (r != CUSPARSE_STATUS_SUCCESS) rc = lt_fail(r, "cusparseLtSpMMACompress", why, nwhy);
    else cr = cu.cuStreamSynchronize(stream);
  }
  cu.cuMemFree(tmp);
  if (cr != CUDA_SUCCESS) return gpuc_cu_fail(e, cr, "cuSPARSELt weight check/compression", __FILE__, __LINE__);
  return rc;
}

/* A float copy of the N half bias values at `bias`, in s->bias32. */
static int bias_as_float(SparseGemm *s, CUdeviceptr bias, size_t n, GpucErr *e) {
  uint16_t *h = malloc(n * 2 + 2);
  float *f = malloc(n * 4 + 4);
  int rc = -1;
  if (!h || !f) gpuc_err_set(e, "out of memory");
  else if (!cu_check(e, cu.cuMemcpyDtoH(h, bias, n * 2), "cuMemcpyDtoH") &&
           !cu_check(e, cu.cuMemAlloc(&s->bias32, n * 4), "cuMemAlloc")) {
    for (size_t i = 0; i < n; i++) f[i] = gpuc_f16_to_f32(h[i]);
    rc = cu_check(e, cu.cuMemcpyHtoD(s->bias32, f, n * 4), "cuMemcpyHtoD");
  }
  free(h);
  free(f);
  return rc;
}

/* Which dtype cuSPARSELt's bias vector has for half C and D is not spelled
 * out (NVIDIA's sample passes float): the plan is made with the float copy
 * first (a library reading half from it reads within it), then the GEMM
 * runs once on A = 0, where Y's first row must be the bias exactly; if it
 * is not, the plan is made again with the half bias and checked the same
 * way. 0: one reading works; 1: neither (why); -1: a CUDA error. A and Y
 * are arena bytes nothing holds yet at load. */
static int bias_reading(SparseGemm *s, const PlanGemm *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias,
                        CUstream stream, CUdeviceptr ws, char *why, size_t nwhy, GpucErr *e) {
  size_t n = (size_t)g->n;
  uint16_t *want = malloc(n * 2 + 2), *got = malloc(n * 2 + 2);
  int rc = -1;
  if (!want || !got) { gpuc_err_set(e, "out of memory"); goto done; }
  if (cu_check(e, cu.cuMemcpyDtoH(want, bias, n * 2), "cuMemcpyDtoH")) goto done;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (attempt == 1) { /* the half reading */
      destroy_plan(s);
      if ((rc = make_plan(s, g, bias, why, nwhy)) != 0 || (rc = compress(s, g, b, stream, why, nwhy, e)) != 0)
        goto done;
      rc = -1;
    }
    if (cu_check(e, cu.cuMemsetD8Async(a, 0, (size_t)(g->m * g->k) * 2, stream), "cuMemsetD8Async") ||
        gpuc_sparse_gemm_run(s, ws, stream, e) ||
        cu_check(e, cu.cuStreamSynchronize(stream), "cuStreamSynchronize") ||
        cu_check(e, cu.cuMemcpyDtoH(got, s->y, n * 2), "cuMemcpyDtoH"))
      goto done;
    bool same = true; /* by value: 0 + -0 is +0 */
    for (size_t i = 0; i < n && same; i++) same = gpuc_f16_to_f32(got[i]) == gpuc_f16_to_f32(want[i]);
    if (same) {
      if (attempt == 1) { cu.cuMemFree(s->bias32); s->bias32 = 0; }
      rc = 0;
      goto done;
    }
  }
  snprintf(why, nwhy, "cuSPARSELt's bias epilogue gave back neither the float nor the half bias");
  rc = 1;
done:
  free(want);
  free(got);
  return rc;
}

/* cuSPARSELt times its kernel configurations on this GPU and keeps the
 * fastest (GPUC_SPARSE_SEARCH=1: seconds per model at load). The activation
 * and output are arena bytes not yet written: only their time matters. */
static int search(SparseGemm *s, size_t *ws, CUstream stream, char *why, size_t nwhy, GpucErr *e) {
  size_t big = *ws > ((size_t)64 << 20) ? *ws : ((size_t)64 << 20);
  CUdeviceptr tmp = 0;
  if (cu_check(e, cu.cuMemAlloc(&tmp, big), "cuMemAlloc")) return -1;
  cudaStream_t st = (cudaStream_t)stream;
  int rc = 0;
  cusparseStatus_t r = lt.cusparseLtMatmulSearch(&handle, &s->plan, &s->alpha, (const void *)(uintptr_t)s->compressed,
                                                 (const void *)(uintptr_t)s->b_dense, &s->beta,
                                                 (void *)(uintptr_t)s->y, (void *)(uintptr_t)s->y,
                                                 (void *)(uintptr_t)tmp, &st, 1);
  if (r != CUSPARSE_STATUS_SUCCESS) rc = lt_fail(r, "cusparseLtMatmulSearch", why, nwhy);
  if (!rc && cu_check(e, cu.cuStreamSynchronize(stream), "cuStreamSynchronize")) rc = -1;
  cu.cuMemFree(tmp);
  /* what it chose, read back from the algorithm selection the plan was
   * made with (the search updates both) */
  int32_t got[4] = {0, 0, 0, 0};
  for (int k = 0; !rc && k < 4; k++)
    if ((r = lt.cusparseLtMatmulAlgGetAttribute(&handle, &s->alg, cfg_attr[k], &got[k], sizeof got[k])) !=
        CUSPARSE_STATUS_SUCCESS)
      rc = lt_fail(r, "cusparseLtMatmulAlgGetAttribute", why, nwhy);
  if (!rc) {
    memcpy(s->cfg, got, sizeof got);
    s->has_cfg = true;
  }
  if (!rc && (r = lt.cusparseLtMatmulGetWorkspace(&handle, &s->plan, ws)) != CUSPARSE_STATUS_SUCCESS)
    rc = lt_fail(r, "cusparseLtMatmulGetWorkspace", why, nwhy);
  return rc;
}

static int setup(const PlanGemm *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr y, CUstream stream,
                 bool use_cfg, SparseGemm **out, size_t *workspace, char *why, size_t nwhy, GpucErr *e);

int gpuc_sparse_gemm_setup(const PlanGemm *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr y,
                           CUstream stream, SparseGemm **out, size_t *workspace, char *why, size_t nwhy,
                           GpucErr *e) {
  bool cfg = (g->flags & PLAN_GEMM_F_SPARSE_CFG) != 0;
  int rc = setup(g, a, b, bias, y, stream, cfg, out, workspace, why, nwhy, e);
  if (rc != 1 || !cfg) return rc;
  /* the plan's configuration refused here (another cuSPARSELt, another
   * GPU): the default one, and the reason kept for the session's note */
  char first[256];
  snprintf(first, sizeof first, "%s", why);
  rc = setup(g, a, b, bias, y, stream, false, out, workspace, why, nwhy, e);
  if (rc == 0)
    snprintf((*out)->cfg_note, sizeof (*out)->cfg_note, "the plan's cuSPARSELt configuration (%d, %d, %d, %d): %s",
             g->sparse_cfg[0], g->sparse_cfg[1], g->sparse_cfg[2], g->sparse_cfg[3], first);
  return rc;
}

const char *gpuc_sparse_gemm_cfg_note(const SparseGemm *s) { return s ? s->cfg_note : ""; }

static int setup(const PlanGemm *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr y, CUstream stream,
                 bool use_cfg, SparseGemm **out, size_t *workspace, char *why, size_t nwhy, GpucErr *e) {
  *out = NULL;
  *workspace = 0;
  if (ready() < 0) { snprintf(why, nwhy, "%s", status); return 1; }
  if (g->dt != GPUC_DT_F16 || g->batch != 1 || g->trans_a || g->lda != g->k || g->ldy != g->n ||
      (g->c != UINT32_MAX && g->ldc != 0)) {
    snprintf(why, nwhy, "GEMM %lldx%lldx%lld is not a half GEMM cuSPARSELt runs here", (long long)g->m,
             (long long)g->n, (long long)g->k);
    return 1;
  }
  SparseGemm *s = calloc(1, sizeof *s);
  if (!s) return gpuc_err_set(e, "out of memory");
  s->alpha = g->alpha;
  s->beta = 0;
  s->b_dense = a; /* cuSPARSELt's dense operand is the plan's A */
  s->y = y;
  s->w = b;
  s->g = *g;
  if (use_cfg) {
    memcpy(s->cfg, g->sparse_cfg, sizeof s->cfg);
    s->has_cfg = true;
  }
  bool has_bias = g->c != UINT32_MAX;
  s->bias_half = has_bias ? bias : 0;
  size_t ws = 0;
  int rc = has_bias ? bias_as_float(s, bias, (size_t)g->n, e) : 0;
  if (!rc) rc = make_plan(s, g, has_bias ? s->bias32 : 0, why, nwhy);
  if (!rc) rc = compress(s, g, b, stream, why, nwhy, e);
  cusparseStatus_t r;
  if (!rc && (r = lt.cusparseLtMatmulGetWorkspace(&handle, &s->plan, &ws)) != CUSPARSE_STATUS_SUCCESS)
    rc = lt_fail(r, "cusparseLtMatmulGetWorkspace", why, nwhy);
  if (!rc && has_bias) { /* trial runs in a workspace of their own */
    CUdeviceptr tmp = 0;
    if (ws && cu_check(e, cu.cuMemAlloc(&tmp, ws), "cuMemAlloc")) rc = -1;
    if (!rc) rc = bias_reading(s, g, a, b, bias, stream, tmp, why, nwhy, e);
    if (tmp) cu.cuMemFree(tmp);
    if (!rc && (r = lt.cusparseLtMatmulGetWorkspace(&handle, &s->plan, &ws)) != CUSPARSE_STATUS_SUCCESS)
      rc = lt_fail(r, "cusparseLtMatmulGetWorkspace", why, nwhy);
  }
  const char *env = getenv("GPUC_SPARSE_SEARCH");
  if (!rc && env && !strcmp(env, "1")) rc = search(s, &ws, stream, why, nwhy, e);
  if (rc) { gpuc_sparse_gemm_free(s); return rc; }
  *workspace = ws;
  *out = s;
  return 0;
}

int gpuc_sparse_gemm_search(SparseGemm *s, int32_t cfg[4], size_t *workspace, CUstream stream, char *why,
                            size_t nwhy, GpucErr *e) {
  size_t ws = 0;
  cusparseStatus_t r = lt.cusparseLtMatmulGetWorkspace(&handle, &s->plan, &ws);
  if (r != CUSPARSE_STATUS_SUCCESS) return lt_fail(r, "cusparseLtMatmulGetWorkspace", why, nwhy);
  int rc = search(s, &ws, stream, why, nwhy, e);
  if (rc) return rc;
  memcpy(cfg, s->cfg, sizeof s->cfg);
  *workspace = ws;
  return 0;
}

/* s's plan made again with its current configuration and the weight
 * compressed for it. */
static int remake(SparseGemm *s, CUstream stream, char *why, size_t nwhy, GpucErr *e) {
  destroy_plan(s);
  if (s->compressed) { cu.cuMemFree(s->compressed); s->compressed = 0; }
  int rc = make_plan(s, &s->g, s->bias32 ? s->bias32 : s->bias_half, why, nwhy);
  return rc ? rc : compress(s, &s->g, s->w, stream, why, nwhy, e);
}

int gpuc_sparse_gemm_configure(SparseGemm *s, const int32_t cfg[4], size_t *workspace, CUstream stream, char *why,
                               size_t nwhy, GpucErr *e) {
  bool had = s->has_cfg;
  int32_t old[4];
  memcpy(old, s->cfg, sizeof old);
  memcpy(s->cfg, cfg, sizeof s->cfg);
  s->has_cfg = true;
  int rc = remake(s, stream, why, nwhy, e);
  if (rc == 1) { /* refused: back to what ran before */
    char keep[256];
    snprintf(keep, sizeof keep, "%s", why);
    memcpy(s->cfg, old, sizeof old);
    s->has_cfg = had;
    int rc2 = remake(s, stream, why, nwhy, e);
    if (rc2) return rc2 < 0 ? -1 : gpuc_err_set(e, "cuSPARSELt: a GEMM's plan cannot be made again: %s", why);
    snprintf(why, nwhy, "%s", keep);
  }
  if (rc < 0) return -1;
  cusparseStatus_t r = lt.cusparseLtMatmulGetWorkspace(&handle, &s->plan, workspace);
  if (r != CUSPARSE_STATUS_SUCCESS) return gpuc_err_set(e, "cusparseLtMatmulGetWorkspace: %s", lt.cusparseLtGetErrorString(r));
  return rc;
}

int gpuc_sparse_gemm_run(SparseGemm *s, CUdeviceptr workspace, CUstream stream, GpucErr *e) {
  cudaStream_t st = (cudaStream_t)stream;
  void *y = (void *)(uintptr_t)s->y;
  cusparseStatus_t r = lt.cusparseLtMatmul(&handle, &s->plan, &s->alpha, (const void *)(uintptr_t)s->compressed,
                                           (const void *)(uintptr_t)s->b_dense, &s->beta, y, y,
                                           (void *)(uintptr_t)workspace, &st, 1);
  if (r != CUSPARSE_STATUS_SUCCESS)
    return gpuc_err_set(e, "cuSPARSELt error %s in cusparseLtMatmul at %s:%d", lt.cusparseLtGetErrorString(r),
                        __FILE__, __LINE__);
  return 0;
}
#endif
