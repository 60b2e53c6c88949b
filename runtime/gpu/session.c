/* Plan execution on the GPU with the CUDA driver API, cuBLASLt and cuDNN. */
#include "session_internal.h"
#include "sparse_gemm.h"
#include "buckets.h"
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cu_free(CUdeviceptr p) { if (p) cu.cuMemFree(p); }

int gpuc_gpu_sm(GpucErr *e) {
  if (gpuc_load_cuda_driver(e)) return -1;
  int n = 0;
  CUdevice d;
  int major = 0, minor = 0;
  if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
    gpuc_err_set(e, "no CUDA device found");
    return -1;
  }
  CU_TRY(e, cu.cuDeviceGet(&d, 0));
  CU_TRY(e, cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
  CU_TRY(e, cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
  return major * 10 + minor;
}

static cudaDataType_t cuda_type(uint32_t dt) {
  switch (dt) {
  case GPUC_DT_F16: return CUDA_R_16F;
  case GPUC_DT_BF16: return CUDA_R_16BF;
  case GPUC_DT_F64: return CUDA_R_64F;
  case GPUC_DT_I8: return CUDA_R_8I;
  case GPUC_DT_I32: return CUDA_R_32I;
  case GPUC_DT_F8E4M3: return CUDA_R_8F_E4M3;
  default: return CUDA_R_32F;
  }
}

/* An int8 GEMM (PLAN_GEMM_COMPUTE_I32) is i8 x i8 -> i32 with int32 alpha
 * and beta, in the "TN" order the reader checked (plan.h): cuBLASLt's A is
 * our B stored [N,K] (transposed), its B our A [M,K]; its IMMA kernels
 * then run on the regular (not COL32) layouts. */
/* An FP8 GEMM (PLAN_GEMM_COMPUTE_F8, sm_89+): cuBLASLt's A is our B (the
 * weight, N rows), so its A scale is our per-channel vector (stride_b) and
 * its B scale our per-row one (stride_a), both in the outer-vector mode
 * (one f32 per row of op(A) and per column of op(B); CUDA 12.9+). */
static int setup_f8_scales(GpucSession *s, const PlanGemm *g, GemmState *st, GpucErr *e) {
  if (s->sm < 89)
    return gpuc_err_set(e, "the plan has FP8 GEMMs (--fp8), which need sm_89 or newer; this GPU is sm_%d", s->sm);
  void *sa = (void *)(uintptr_t)s->tptr[g->stride_b], *sb = (void *)(uintptr_t)s->tptr[g->stride_a];
  cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
  return 0;
}

static int setup_gemm(GpucSession *s, const PlanGemm *g, GemmState *st, GpucErr *e) {
  bool i8 = g->compute == PLAN_GEMM_COMPUTE_I32, f8 = g->compute == PLAN_GEMM_COMPUTE_F8;
  cudaDataType_t t = cuda_type(g->dt), ta = cuda_type(g->a_dt), tb = cuda_type(g->b_dt), ty = cuda_type(g->y_dt);
  cublasComputeType_t ct = i8 ? CUBLAS_COMPUTE_32I : g->dt == GPUC_DT_F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = i8 ? CUDA_R_32I : g->dt == GPUC_DT_F64 ? CUDA_R_64F : CUDA_R_32F;
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescCreate(&st->op, ct, scale));
  /* Row-major Y = op(A) op(B) is column-major Y^T = op(B)^T op(A)^T: cuBLASLt's
   * "A" is our B and its "B" is our A. */
  cublasOperation_t opa = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = GPUC_GEMM_TRANS_A(g->trans_a) ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (f8 && setup_f8_scales(s, g, st, e)) return -1;
  uint64_t ar = g->trans_b ? (uint64_t)g->k : (uint64_t)g->n, ac = g->trans_b ? (uint64_t)g->n : (uint64_t)g->k;
  bool trans_a = GPUC_GEMM_TRANS_A(g->trans_a);
  uint64_t br = trans_a ? (uint64_t)g->m : (uint64_t)g->k, bc = trans_a ? (uint64_t)g->k : (uint64_t)g->m;
  CUBLAS_TRY(e, cublaslt.cublasLtMatrixLayoutCreate(&st->la, tb, ar, ac, g->ldb));
  CUBLAS_TRY(e, cublaslt.cublasLtMatrixLayoutCreate(&st->lb, ta, br, bc, g->lda));
  CUBLAS_TRY(e, cublaslt.cublasLtMatrixLayoutCreate(&st->ld, ty, (uint64_t)g->n, (uint64_t)g->m, g->ldy));
  st->bias_epilogue = g->c != UINT32_MAX && g->ldc == 0;
  bool bias_c = g->flags & PLAN_GEMM_F_BIAS_C; /* bias row in the epilogue and C a matrix */
  if (g->c != UINT32_MAX && !st->bias_epilogue)
    CUBLAS_TRY(e, cublaslt.cublasLtMatrixLayoutCreate(&st->lc, t, (uint64_t)g->n, (uint64_t)g->m, g->ldc));
  else
    CUBLAS_TRY(e, cublaslt.cublasLtMatrixLayoutCreate(&st->lc, ty, (uint64_t)g->n, (uint64_t)g->m, g->ldy));
  if (g->batch > 1) {
    int32_t bc32 = (int32_t)g->batch;
    int64_t sa = g->stride_b, sb = g->stride_a, sc = st->bias_epilogue || g->c == UINT32_MAX ? g->stride_y : g->stride_c,
            sd = g->stride_y;
    cublasLtMatrixLayout_t ls[4] = {st->la, st->lb, st->lc, st->ld};
    int64_t strides[4] = {sa, sb, sc, sd};
    for (int i = 0; i < 4; i++) {
      CUBLAS_TRY(e, cublaslt.cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc32, sizeof bc32));
      CUBLAS_TRY(e, cublaslt.cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof strides[i]));
    }
  }
  if (st->bias_epilogue || bias_c) {
    uint32_t act = GPUC_GEMM_EPI(g->trans_a);
    cublasLtEpilogue_t ep = act == GPUC_GEMM_EPI_RELU   ? CUBLASLT_EPILOGUE_RELU_BIAS
                            : act == GPUC_GEMM_EPI_GELU ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                        : CUBLASLT_EPILOGUE_BIAS;
    void *bias = (void *)(uintptr_t)s->tptr[bias_c ? g->reserved : g->c];
    cudaDataType_t bt = f8 ? ty : t; /* FP8: the bias is Y's dtype (f16/bf16) */
    CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    CUBLAS_TRY(e, cublaslt.cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  cublasLtMatmulHeuristicResult_t res[GPUC_GEMM_TUNE_MAX];
  int found = 0;
  if (gpuc_gemm_heuristics(s, st, res, (int)g->algo_index + 1, &found, e)) return -1;
  if (found == 0 && f8)
    return gpuc_err_set(e, "cuBLASLt has no FP8 algorithm with per-row/per-channel (outer-vector) scales for gemm "
                        "%lldx%lldx%lld on this GPU and library (--fp8 needs cuBLASLt 12.9 or newer); compile "
                        "without --fp8", (long long)g->m, (long long)g->n, (long long)g->k);
  if (found == 0)
    return gpuc_err_set(e, "cuBLASLt has no algorithm for gemm %lldx%lldx%lld", (long long)g->m,
                        (long long)g->n, (long long)g->k);
  /* -O3's timed choice where this GPU offers it, else the first */
  st->algo = res[(int)g->algo_index < found ? g->algo_index : 0].algo;
  return 0;
}

int gpuc_gemm_heuristics(GpucSession *s, GemmState *st, cublasLtMatmulHeuristicResult_t *res, int max, int *found,
                         GpucErr *e) {
  cublasLtMatmulPreference_t pref;
  CUBLAS_TRY(e, cublaslt.cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = s->plan->meta.workspace_bytes;
  cublasStatus_t r = cublaslt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  *found = 0;
  if (r == CUBLAS_STATUS_SUCCESS)
    r = cublaslt.cublasLtMatmulAlgoGetHeuristic(s->lt, st->op, st->la, st->lb, st->lc, st->ld, pref, max, res, found);
  cublaslt.cublasLtMatmulPreferenceDestroy(pref);
  if (r != CUBLAS_STATUS_SUCCESS) { *found = 0; return 0; } /* "none": the caller says which GEMM */
  return 0;
}

/* Backward data (dX from W and dY) or backward filter (dW from X and dY):
 * the descriptors are the forward's; the algorithm is cuDNN's heuristic
 * ("get") choice, preferring deterministic ones, then any, that need at
 * most 1 GiB of scratch; the workspace grows to what it needs. */
static int setup_conv_backward(GpucSession *s, const PlanConv *c, ConvState *st, GpucErr *e) {
  const size_t cap = (size_t)1 << 30;
  size_t need = 0;
  int found = 0;
  if (c->mode == PLAN_CONV_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[8];
    CUDNN_TRY(e, cudnn.cudnnGetConvolutionBackwardDataAlgorithm_v7(s->dnn, st->w, st->y, st->conv, st->x, 8,
                                                                   &found, perf));
    st->bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    bool chosen = false;
    for (int pass = 0; pass < 2 && !chosen; pass++)
      for (int i = 0; i < found && !chosen; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= cap &&
            (pass == 1 || perf[i].determinism == CUDNN_DETERMINISTIC)) {
          st->bwd_data = perf[i].algo;
          chosen = true;
        }
    CUDNN_TRY(e, cudnn.cudnnGetConvolutionBackwardDataWorkspaceSize(s->dnn, st->w, st->y, st->conv, st->x,
                                                                    st->bwd_data, &need));
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[8];
    CUDNN_TRY(e, cudnn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(s->dnn, st->x, st->y, st->conv, st->w, 8,
                                                                     &found, perf));
    st->bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    bool chosen = false;
    for (int pass = 0; pass < 2 && !chosen; pass++)
      for (int i = 0; i < found && !chosen; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= cap &&
            (pass == 1 || perf[i].determinism == CUDNN_DETERMINISTIC)) {
          st->bwd_filter = perf[i].algo;
          chosen = true;
        }
    CUDNN_TRY(e, cudnn.cudnnGetConvolutionBackwardFilterWorkspaceSize(s->dnn, st->x, st->y, st->conv, st->w,
                                                                      st->bwd_filter, &need));
  }
  if (need > s->workspace_bytes) s->workspace_bytes = need;
  return 0;
}

static int setup_conv(GpucSession *s, const PlanConv *c, ConvState *st, GpucErr *e) {
  const Plan *p = s->plan;
  const PlanTensor *x = &p->tensors[c->x], *w = &p->tensors[c->w], *y = &p->tensors[c->y];
  int nd = (int)c->nspatial + 2;
  int xd[5], wd[5], yd[5], xs[5], ys[5];
  bool nhwc = GPUC_CONV_LAYOUT(c->act) == GPUC_LAYOUT_NHWC;
  if (nhwc) {
    /* plan tensors [N,H,W,C] and [K,R,S,C/g] (validated 2-D, rank 4): cuDNN
     * takes dims in NCHW / KCRS order, the layout from the strides of x and
     * y and from the filter's format */
    static const int from[4] = GPUC_NHWC_TO_NCHW;
    for (int i = 0; i < 4; i++) {
      xd[i] = (int)x->dims[from[i]];
      wd[i] = (int)w->dims[from[i]];
      yd[i] = (int)y->dims[from[i]];
    }
    int *dd[2] = {xd, yd}, *ss[2] = {xs, ys};
    for (int k = 0; k < 2; k++) { /* N, C, H, W strides of an NHWC tensor */
      int *d = dd[k], *st = ss[k];
      st[1] = 1;
      st[3] = d[1];
      st[2] = d[3] * d[1];
      st[0] = d[2] * d[3] * d[1];
    }
  } else {
    /* 1-D convolutions arrive as rank 3 and run as 2-D with a unit dim */
    for (int i = 0; i < nd; i++) {
      xd[i] = i < x->rank ? (int)x->dims[i] : 1;
      wd[i] = i < w->rank ? (int)w->dims[i] : 1;
      yd[i] = i < y->rank ? (int)y->dims[i] : 1;
    }
    xs[nd - 1] = ys[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) { xs[i] = xs[i + 1] * xd[i + 1]; ys[i] = ys[i + 1] * yd[i + 1]; }
  }
  cudnnDataType_t t = c->dt == GPUC_DT_F16    ? CUDNN_DATA_HALF
                      : c->dt == GPUC_DT_BF16 ? CUDNN_DATA_BFLOAT16
                      : c->dt == GPUC_DT_F64  ? CUDNN_DATA_DOUBLE
                                              : CUDNN_DATA_FLOAT;
  CUDNN_TRY(e, cudnn.cudnnCreateTensorDescriptor(&st->x));
  CUDNN_TRY(e, cudnn.cudnnCreateTensorDescriptor(&st->y));
  CUDNN_TRY(e, cudnn.cudnnCreateFilterDescriptor(&st->w));
  CUDNN_TRY(e, cudnn.cudnnCreateConvolutionDescriptor(&st->conv));
  CUDNN_TRY(e, cudnn.cudnnSetTensorNdDescriptor(st->x, t, nd, xd, xs));
  CUDNN_TRY(e, cudnn.cudnnSetTensorNdDescriptor(st->y, t, nd, yd, ys));
  CUDNN_TRY(e, cudnn.cudnnSetFilterNdDescriptor(st->w, t, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nd, wd));
  int pads[3], strides[3], dil[3];
  for (int i = 0; i < (int)c->nspatial; i++) { pads[i] = c->pads[i]; strides[i] = c->strides[i]; dil[i] = c->dilations[i]; }
  cudnnDataType_t acc = c->dt == GPUC_DT_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  CUDNN_TRY(e, cudnn.cudnnSetConvolutionNdDescriptor(st->conv, (int)c->nspatial, pads, strides, dil,
                                                     CUDNN_CROSS_CORRELATION, acc));
  CUDNN_TRY(e, cudnn.cudnnSetConvolutionGroupCount(st->conv, (int)c->groups));
  /* fp32 stays fp32 (no TF32) so results match the reference to 1e-4;
   * fp16 and bf16 run on tensor cores, accumulating in fp32 */
  bool half = c->dt == GPUC_DT_F16 || c->dt == GPUC_DT_BF16;
  CUDNN_TRY(e, cudnn.cudnnSetConvolutionMathType(st->conv, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  if (c->mode != PLAN_CONV_FWD) return setup_conv_backward(s, c, st, e);
  /* the heuristic sees the NHWC descriptors: half NHWC is where its
   * tensor-core implicit-GEMM kernels run without internal transposes */
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int found = 0;
  CUDNN_TRY(e, cudnn.cudnnGetConvolutionForwardAlgorithm_v7(s->dnn, st->x, st->w, st->conv, st->y, 8, &found, perf));
  st->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  bool identity_fused = c->b != UINT32_MAX && GPUC_CONV_ACT(c->act) == 0;
  /* the heuristic's first choice whose workspace fits the budget (1 GiB);
   * when none does, the one needing least; the workspace grows to it */
  int fit = -1, least = -1;
  size_t least_need = 0;
  for (int i = 0; i < found && fit < 0; i++) {
    size_t need_i = 0; /* the heuristic's perf.memory can be below the real need (NHWC, C=3) */
    if (perf[i].status != CUDNN_STATUS_SUCCESS ||
        cudnn.cudnnGetConvolutionForwardWorkspaceSize(s->dnn, st->x, st->w, st->conv, st->y, perf[i].algo,
                                                      &need_i) != CUDNN_STATUS_SUCCESS)
      continue;
    if (need_i <= s->workspace_budget) fit = i;
    if (least < 0 || need_i < least_need) { least = i; least_need = need_i; }
  }
  if (fit >= 0 || least >= 0) st->algo = perf[fit >= 0 ? fit : least].algo;
  /* -O3's timed choice, where this GPU accepts it within the budget */
  size_t tuned_need = 0;
  if (c->algo >= 0 &&
      cudnn.cudnnGetConvolutionForwardWorkspaceSize(s->dnn, st->x, st->w, st->conv, st->y,
                                                    (cudnnConvolutionFwdAlgo_t)c->algo, &tuned_need) == CUDNN_STATUS_SUCCESS &&
      tuned_need <= s->workspace_budget)
    st->algo = (cudnnConvolutionFwdAlgo_t)c->algo;
  /* the fused call with an identity activation runs only this algorithm */
  if (identity_fused) st->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  if (c->b != UINT32_MAX) {
    int bd[5] = {1, yd[1], 1, 1, 1}, bs[5];
    bs[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) bs[i] = bs[i + 1] * bd[i + 1];
    CUDNN_TRY(e, cudnn.cudnnCreateTensorDescriptor(&st->b));
    CUDNN_TRY(e, cudnn.cudnnSetTensorNdDescriptor(st->b, t, nd, bd, bs));
    CUDNN_TRY(e, cudnn.cudnnCreateActivationDescriptor(&st->act));
    CUDNN_TRY(e, cudnn.cudnnSetActivationDescriptor(st->act, GPUC_CONV_ACT(c->act) ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                                    CUDNN_PROPAGATE_NAN, 0.0));
  }
  size_t need = 0;
  CUDNN_TRY(e, cudnn.cudnnGetConvolutionForwardWorkspaceSize(s->dnn, st->x, st->w, st->conv, st->y, st->algo, &need));
  /* the workspace is runtime memory: grow it to what this GPU's algorithms
   * need (cuDNN's needs are only known with the device present) */
  if (need > s->workspace_bytes) s->workspace_bytes = need;
  return 0;
}

/* The plan's 2:4 GEMMs on sparse tensor cores where cuSPARSELt and this
 * GPU run them (GPUC_SPARSE=0 keeps them dense, to compare); the rest stay
 * the dense cuBLASLt GEMMs setup_gemm made, and a note says why. */
static int setup_sparse_gemms(GpucSession *s, GpucErr *e) {
  const Plan *p = s->plan;
  const char *env = getenv("GPUC_SPARSE");
  int cfg_refused = 0;
  char cfg_why[256] = "";
  for (uint32_t i = 0; i < p->ngemms; i++) {
    if (!(p->gemms[i].flags & PLAN_GEMM_F_SPARSE24)) continue;
    const PlanGemm *g = &p->gemms[i];
    char why[256] = "GPUC_SPARSE=0";
    size_t ws = 0;
    int rc = env && !strcmp(env, "0") ? 1
           : gpuc_sparse_gemm_setup(g, s->tptr[g->a], s->tptr[g->b], g->c != UINT32_MAX ? s->tptr[g->c] : 0,
                                    s->tptr[g->y], s->stream, &s->gemms[i].sparse, &ws, why, sizeof why, e);
    if (rc < 0) return -1;
    if (rc == 0) {
      s->gemms_sparse++;
      if (ws > s->workspace_bytes) s->workspace_bytes = ws;
      const char *note = gpuc_sparse_gemm_cfg_note(s->gemms[i].sparse);
      if (*note && !cfg_refused++) snprintf(cfg_why, sizeof cfg_why, "%s", note);
    } else if (s->gemms_sparse_dense++ == 0) {
      snprintf(s->sparse_why, sizeof s->sparse_why, "%s", why);
    }
  }
  if (s->gemms_sparse_dense)
    fprintf(stderr, "gpuc: note: %d of %d 2:4 GEMMs run dense on this GPU: %s\n", s->gemms_sparse_dense,
            s->gemms_sparse + s->gemms_sparse_dense, s->sparse_why);
  if (cfg_refused)
    fprintf(stderr, "gpuc: note: %d 2:4 GEMMs run cuSPARSELt's default configuration, not the plan's: %s\n",
            cfg_refused, cfg_why);
  if (s->gemms_sparse && p->hdr.format_version < 6 && !(p->hdr.flags & GPUC_PLAN_F_BUCKET))
    fprintf(stderr, "gpuc: note: a format %u plan holds no searched cuSPARSELt configuration: its 2:4 GEMMs run "
            "the library's default (recompile with -O3 to search and keep one)\n", p->hdr.format_version);
  return 0;
}

GpucSession *gpuc_session_create(const char *plan_path, int device, GpucErr *e) {
  Plan *p = gpuc_plan_read(plan_path, e);
  if (!p) return NULL;
  return gpuc_session_create_plan(p, plan_path, device, e);
}

/* parent set: a bucket's session inside a bucket plan's (buckets.c), which
 * shares its parent's stream, arena, weights and workspace, and whose plan
 * the parent's plan owns.
 *
 * Every resource is acquired in this order and gpuc_session_free releases
 * whatever was acquired in the reverse order, so any failure on the way
 * (a full GPU, a library that will not load) leaves nothing behind: `goto
 * fail` is the one exit. Before each acquisition an INJECT lets the test
 * hook fail it (gpuc_session_fail_at; tests/tools/session_check.c
 * `faults` fails every point in turn, on a GPU). */
static GpucSession *open_session(Plan *p, const char *plan_path, int device, GpucSession *parent, GpucErr *e) {
  GpucSession *s = calloc(1, sizeof *s);
  if (!s) { if (!parent) gpuc_plan_free(p); gpuc_err_set(e, "out of memory"); return NULL; }
  s->plan = p;
  s->shared = parent != NULL;
  int sm = gpuc_gpu_sm(e);
  if (sm < 0) goto fail;
  s->sm = sm;
  s->workspace_bytes = p->meta.workspace_bytes;
  s->workspace_budget = (size_t)1 << 30; /* per cuDNN algorithm */
  const char *wl = getenv("GPUC_WORKSPACE_LIMIT"); /* a user's cap, in bytes (README) */
  if (wl && *wl) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(wl, &end, 10);
    if (errno || *end || wl[0] == '-') {
      gpuc_err_set(e, "GPUC_WORKSPACE_LIMIT='%.40s' is not a number of bytes", wl);
      goto fail;
    }
    s->workspace_budget = (size_t)v;
  }
  if ((p->hdr.flags & GPUC_PLAN_F_ARCH_SPECIFIC) && sm != (int)p->hdr.sm) {
    gpuc_err_set(e, "%s: plan built for sm_%ua (Hopper-only int8 GEMMs), this GPU is sm_%d; rebuild with: "
                 "gpuc MODEL.onnx --arch sm_%d -o %s", plan_path, p->hdr.sm, sm, sm, plan_path);
    goto fail;
  }
  if (sm < (int)p->hdr.sm) {
    gpuc_err_set(e, "%s: plan built for sm_%u, this GPU is sm_%d; rebuild with: gpuc MODEL.onnx --arch sm_%d -o %s",
                 plan_path, p->hdr.sm, sm, sm, plan_path);
    goto fail;
  }
  if (cu.cuDeviceGet(&s->dev, device) != CUDA_SUCCESS) { gpuc_err_set(e, "no CUDA device %d", device); goto fail; }
  cu.cuDeviceGetName(s->devname, sizeof s->devname, s->dev);
  s->funcs = calloc(p->nkernels + 1, sizeof *s->funcs);
  s->tptr = calloc(p->ntensors + 1, sizeof *s->tptr);
  s->gemms = calloc(p->ngemms + 1, sizeof *s->gemms);
  s->convs = calloc(p->nconvs + 1, sizeof *s->convs);
  if (!s->funcs || !s->tptr || !s->gemms || !s->convs) { gpuc_err_set(e, "out of memory"); goto fail; }
#define TRYF(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { gpuc_cu_fail(e, r_, #call, __FILE__, __LINE__); goto fail; } } while (0)
/* before each acquisition: the test hook may fail it (nothing acquired) */
#define INJECT(what) do { if (gpuc_session_inject(what, e)) goto fail; } while (0)
  /* 1. the device's primary context, held until the session is freed */
  INJECT("cuDevicePrimaryCtxRetain");
  TRYF(cu.cuDevicePrimaryCtxRetain(&s->ctx, s->dev));
  TRYF(cu.cuCtxSetCurrent(s->ctx));
  /* 2. the stream (a bucket's is its parent's) */
  if (parent) s->stream = parent->stream;
  else {
    INJECT("cuStreamCreate");
    TRYF(cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING));
  }
  /* 3. the module: CUBIN for the exact arch; the PTX JIT-compiles on newer GPUs */
  INJECT("cuModuleLoadDataEx");
  if (sm == (int)p->hdr.sm && p->cubin_size) TRYF(cu.cuModuleLoadDataEx(&s->module, p->cubin, 0, NULL, NULL));
  else TRYF(cu.cuModuleLoadDataEx(&s->module, p->ptx, 0, NULL, NULL));
  for (uint32_t i = 0; i < p->nkernels; i++)
    TRYF(cu.cuModuleGetFunction(&s->funcs[i], s->module, gpuc_plan_str(p, p->kernels[i].name)));
  /* dynamic shared memory past the default 48 KB is opted into per
   * function (the int8 GEMM's pipeline, codegen/lower_int8_gemm.c); a GPU
   * with less than a step asks fails here, naming the call */
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *st = &p->steps[i];
    if (st->kind == PLAN_STEP_KERNEL && st->shmem > 48 * 1024 && st->index < p->nkernels)
      TRYF(cu.cuFuncSetAttribute(s->funcs[st->index], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)st->shmem));
  }
  /* 4. the device error record's pinned copy (its INJECT is inside) */
  if (gpuc_fault_setup(s, plan_path, e)) goto fail;
  /* 5. arena and weights (a bucket's are its parent's) */
  char parts[160];
  if (parent) { /* one arena (the largest bucket's) and one copy of the weights */
    s->arena = parent->arena;
    s->weights = parent->weights;
  } else {
    uint64_t arena = gpuc_bucket_arena_bytes(p);
    snprintf(parts, sizeof parts, "arena %llu + weights %llu + library workspace %llu",
             (unsigned long long)arena, (unsigned long long)p->weights_size,
             (unsigned long long)s->workspace_bytes);
    if (gpuc_session_fits(s, plan_path, arena + p->weights_size + s->workspace_bytes, parts, e)) goto fail;
    INJECT("cuMemAlloc (arena)");
    TRYF(cu.cuMemAlloc(&s->arena, arena ? arena : 256));
    INJECT("cuMemAlloc (weights)");
    TRYF(cu.cuMemAlloc(&s->weights, p->weights_size ? p->weights_size : 256));
    INJECT("cuMemcpyHtoD (weights)");
    if (p->weights_size) TRYF(cu.cuMemcpyHtoD(s->weights, p->weights, p->weights_size));
  }
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    s->tptr[i] = t->mem == PLAN_MEM_ARENA ? s->arena + t->offset
               : t->mem == PLAN_MEM_WEIGHTS ? s->weights + t->offset
               : s->tptr[t->offset]; /* alias: validated to point backwards */
  }
  /* 6. cuBLASLt: the handle, each GEMM's descriptors, the 2:4 GEMMs' compressed weights */
  if (p->ngemms) {
    if (gpuc_load_cublaslt(e)) goto fail;
    INJECT("cublasLtCreate");
    cublasStatus_t r = cublaslt.cublasLtCreate(&s->lt);
    if (r != CUBLAS_STATUS_SUCCESS) { s->lt = NULL; gpuc_cublas_fail(e, r, "cublasLtCreate", __FILE__, __LINE__); goto fail; }
    for (uint32_t i = 0; i < p->ngemms; i++) {
      INJECT("GEMM descriptors");
      if (setup_gemm(s, &p->gemms[i], &s->gemms[i], e)) goto fail;
    }
    if (setup_sparse_gemms(s, e)) goto fail;
  }
  /* 7. cuDNN: the handle on the stream, each convolution's descriptors */
  if (p->nconvs) {
    if (gpuc_load_cudnn(e)) goto fail;
    INJECT("cudnnCreate");
    cudnnStatus_t r = cudnn.cudnnCreate(&s->dnn);
    if (r != CUDNN_STATUS_SUCCESS) { s->dnn = NULL; gpuc_cudnn_fail(e, r, "cudnnCreate", __FILE__, __LINE__); goto fail; }
    r = cudnn.cudnnSetStream(s->dnn, (cudaStream_t)s->stream);
    if (r != CUDNN_STATUS_SUCCESS) { gpuc_cudnn_fail(e, r, "cudnnSetStream", __FILE__, __LINE__); goto fail; }
    for (uint32_t i = 0; i < p->nconvs; i++) {
      INJECT("convolution descriptors");
      if (setup_conv(s, &p->convs[i], &s->convs[i], e)) goto fail;
    }
  }
  /* 8. the library workspace, at the size the chosen algorithms need (a bucket's is its parent's) */
  if (parent) s->workspace = parent->workspace; /* gpuc_buckets_open grows it to the largest need */
  else {
    snprintf(parts, sizeof parts, "the library workspace the chosen cuDNN algorithms need");
    if (gpuc_session_fits(s, plan_path, s->workspace_bytes, parts, e)) goto fail;
    INJECT("cuMemAlloc (workspace)");
    TRYF(cu.cuMemAlloc(&s->workspace, s->workspace_bytes ? s->workspace_bytes : 256));
    if (gpuc_session_mark_setup(s, e)) goto fail;
  }
  /* 9. a bucket plan's buckets: a session each, sharing the above */
  if (!parent && p->nbuckets && gpuc_buckets_open(s, e)) goto fail;
  if (getenv("GPUC_DEBUG_TENSORS") && *getenv("GPUC_DEBUG_TENSORS") == '1') gpuc_session_print_tensors(s, stderr);
  return s;
fail:
  gpuc_session_free(s);
  return NULL;
#undef INJECT
#undef TRYF
}

GpucSession *gpuc_session_create_plan(Plan *p, const char *plan_path, int device, GpucErr *e) {
  return open_session(p, plan_path, device, NULL, e);
}

GpucSession *gpuc_session_open_bucket(GpucSession *parent, Plan *p, const char *what, GpucErr *e) {
  return open_session(p, what, (int)parent->dev, parent, e);
}

/* What open_session acquired, released in the reverse order; every field
 * is 0 until acquired, so a session that failed half-way is freed here
 * too. Shared (bucket) sessions leave their parent's stream and memory. */
void gpuc_session_free(GpucSession *s) {
  if (!s) return;
  gpuc_buckets_close(s); /* 9 */
  if (s->ctx) {
    cu.cuCtxSetCurrent(s->ctx);
    if (s->stream) cu.cuStreamSynchronize(s->stream); /* nothing in flight reads what goes next */
    if (s->graph) cu.cuGraphExecDestroy(s->graph);
    if (!s->shared) cu_free(s->workspace); /* 8 */
    cu_free(s->mark_scratch);
    if (s->plan && s->convs) /* 7 */
      for (uint32_t i = 0; i < s->plan->nconvs; i++) {
        ConvState *c = &s->convs[i];
        if (c->x) cudnn.cudnnDestroyTensorDescriptor(c->x);
        if (c->y) cudnn.cudnnDestroyTensorDescriptor(c->y);
        if (c->w) cudnn.cudnnDestroyFilterDescriptor(c->w);
        if (c->conv) cudnn.cudnnDestroyConvolutionDescriptor(c->conv);
        if (c->b) cudnn.cudnnDestroyTensorDescriptor(c->b);
        if (c->act) cudnn.cudnnDestroyActivationDescriptor(c->act);
      }
    if (s->dnn) cudnn.cudnnDestroy(s->dnn);
    if (s->plan && s->gemms) /* 6 */
      for (uint32_t i = 0; i < s->plan->ngemms; i++) {
        GemmState *g = &s->gemms[i];
        gpuc_sparse_gemm_free(g->sparse);
        if (g->op) cublaslt.cublasLtMatmulDescDestroy(g->op);
        if (g->la) cublaslt.cublasLtMatrixLayoutDestroy(g->la);
        if (g->lb) cublaslt.cublasLtMatrixLayoutDestroy(g->lb);
        if (g->lc) cublaslt.cublasLtMatrixLayoutDestroy(g->lc);
        if (g->ld) cublaslt.cublasLtMatrixLayoutDestroy(g->ld);
      }
    if (s->lt) cublaslt.cublasLtDestroy(s->lt);
    if (!s->shared) { /* 5 */
      cu_free(s->weights);
      cu_free(s->arena);
    }
    gpuc_fault_free(s); /* 4 */
    if (s->module) cu.cuModuleUnload(s->module); /* 3 */
    if (s->stream && !s->shared) cu.cuStreamDestroy(s->stream); /* 2 */
    cu.cuDevicePrimaryCtxRelease(s->dev); /* 1 */
  }
  free(s->funcs); free(s->tptr); free(s->gemms); free(s->convs); free(s->what);
  if (!s->shared) gpuc_plan_free(s->plan);
  free(s);
}

const Plan *gpuc_session_plan(const GpucSession *s) { return s->plan; }

void gpuc_session_device(const GpucSession *s, char *name, size_t n, int *sm) {
  snprintf(name, n, "%s", s->devname);
  *sm = s->sm;
}

/* Asked only by the profile, so a plain load does not pay for it; an
 * attribute this driver lacks stays 0 ("n/a"). */
void gpuc_session_device_info(const GpucSession *s, GpucDeviceInfo *d) {
  memset(d, 0, sizeof *d);
  d->sm = s->sm;
  snprintf(d->name, sizeof d->name, "%s", s->devname);
  const struct { CUdevice_attribute a; int *v; } attrs[] = {
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &d->sms},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &d->clock_khz},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, &d->mem_clock_khz},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, &d->bus_bits},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++)
    if (cu.cuDeviceGetAttribute(attrs[i].v, attrs[i].a, s->dev) != CUDA_SUCCESS || *attrs[i].v < 0) *attrs[i].v = 0;
}

static int find_tensor(const Plan *p, const char *name, bool output) {
  for (uint32_t i = 0; i < p->ntensors; i++) {
    int r = p->tensors[i].role;
    bool ok = output ? (r == PLAN_ROLE_OUTPUT || r == PLAN_ROLE_INPUT_OUTPUT)
                     : (r == PLAN_ROLE_INPUT || r == PLAN_ROLE_INPUT_OUTPUT);
    if (ok && !strcmp(gpuc_plan_str(p, p->tensors[i].name), name)) return (int)i;
  }
  return -1;
}

int gpuc_session_set_input(GpucSession *s, const char *name, const Tensor *host, GpucErr *e) {
  if (s->bk) return gpuc_buckets_set_input(s, name, host, e); /* any shape in range, padded at run */
  return gpuc_session_upload(s, name, host, e);
}

int gpuc_session_upload(GpucSession *s, const char *name, const Tensor *host, GpucErr *e) {
  const Plan *p = s->plan;
  int i = find_tensor(p, name, false);
  if (i < 0) return gpuc_err_set(e, "the plan has no input named '%s'", name);
  const PlanTensor *t = &p->tensors[i];
  bool same = host->dt == t->dt && host->rank == t->rank;
  for (int d = 0; same && d < t->rank; d++) same = host->dims[d] == t->dims[d];
  if (!same) {
    char a[160], b[160];
    Tensor want = {.dt = t->dt, .rank = t->rank};
    memcpy(want.dims, t->dims, sizeof want.dims);
    gpuc_shape_str(host, a, sizeof a);
    gpuc_shape_str(&want, b, sizeof b);
    return gpuc_err_set(e, "input '%s' is %s %s, the plan was compiled for %s %s", name, a,
                        gpuc_dtype_name(host->dt), b, gpuc_dtype_name(t->dt));
  }
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  if (t->bytes) CU_TRY(e, cu.cuMemcpyHtoDAsync(s->tptr[i], host->data, t->bytes, s->stream));
  CU_TRY(e, cu.cuStreamSynchronize(s->stream));
  return 0;
}

int gpuc_gemm_run(GpucSession *s, uint32_t i, const cublasLtMatmulAlgo_t *algo, GpucErr *e) {
  const Plan *p = s->plan;
  const PlanGemm *g = &p->gemms[i];
  GemmState *gs = &s->gemms[i];
  if (gs->sparse) return gpuc_sparse_gemm_run(gs->sparse, s->workspace, s->stream, e);
  float alpha = g->alpha, beta = gs->bias_epilogue || g->c == UINT32_MAX ? 0.0f : g->beta;
  double alpha64 = g->alpha, beta64 = beta;
  int32_t alpha32 = 1, beta32 = 0; /* int8 GEMMs: the reader allows only these */
  bool f64 = g->dt == GPUC_DT_F64, i8 = g->compute == PLAN_GEMM_COMPUTE_I32;
  void *pa = f64 ? (void *)&alpha64 : i8 ? (void *)&alpha32 : (void *)&alpha;
  void *pb = f64 ? (void *)&beta64 : i8 ? (void *)&beta32 : (void *)&beta;
  void *C = (void *)(uintptr_t)(g->c != UINT32_MAX && !gs->bias_epilogue ? s->tptr[g->c] : s->tptr[g->y]);
  CUBLAS_TRY(e, cublaslt.cublasLtMatmul(s->lt, gs->op, pa,
                                        (void *)(uintptr_t)s->tptr[g->b], gs->la,
                                        (void *)(uintptr_t)s->tptr[g->a], gs->lb,
                                        pb, C, gs->lc,
                                        (void *)(uintptr_t)s->tptr[g->y], gs->ld, algo,
                                        (void *)(uintptr_t)s->workspace, p->meta.workspace_bytes,
                                        (cudaStream_t)s->stream));
  return 0;
}

/* Kernel step i's TMA descriptors (plan.h, PlanTensorMap; the plan reader
 * checked them), encoded into maps[] from where the tensors are now (so a
 * capture at other addresses gets theirs), *n of them. */
static int encode_tensor_maps(GpucSession *s, uint32_t i, CUtensorMap *maps, uint32_t *n, GpucErr *e) {
  const Plan *p = s->plan;
  uint32_t lo = 0, hi = p->ntmaps; /* the first record of step i (sorted by step) */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (p->tmaps[mid].step < i) lo = mid + 1;
    else hi = mid;
  }
  *n = 0;
  for (uint32_t j = lo; j < p->ntmaps && p->tmaps[j].step == i; j++) {
    const PlanTensorMap *m = &p->tmaps[j];
    cuuint64_t dims[2] = {m->dims[0], m->dims[1]}, stride[1] = {m->row_stride};
    cuuint32_t box[2] = {m->box[0], m->box[1]}, step[2] = {1, 1};
    CU_TRY(e, cu.cuTensorMapEncodeTiled(&maps[*n], CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)(uintptr_t)s->tptr[m->tensor],
                                        dims, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    ++*n;
  }
  return 0;
}

int gpuc_kernel_run(GpucSession *s, uint32_t i, const uint32_t grid[3], const uint32_t block[3], GpucErr *e) {
  const Plan *p = s->plan;
  const PlanStep *st = &p->steps[i];
  const uint32_t *a = &p->args[st->args];
  CUdeviceptr ptrs[64];
  void *params[64];
  for (uint32_t k = 0; k < st->nargs; k++) { ptrs[k] = s->tptr[a[k]]; params[k] = &ptrs[k]; }
  CUtensorMap maps[GPUC_PLAN_TMAPS_PER_STEP]; /* by value after the tensors (64-byte aligned: CUtensorMap's own) */
  uint32_t nmaps = 0;
  if (p->ntmaps && encode_tensor_maps(s, i, maps, &nmaps, e)) return -1;
  for (uint32_t k = 0; k < nmaps; k++) params[st->nargs + k] = &maps[k];
  CU_TRY(e, cu.cuLaunchKernel(s->funcs[st->index], grid[0], grid[1], grid[2], block[0], block[1], block[2],
                              st->shmem, s->stream, params, NULL));
  return 0;
}

static int conv_run(GpucSession *s, uint32_t index, GpucErr *e);

/* Issue every step on the stream (also used while capturing a graph). */
static int issue(GpucSession *s, GpucErr *e, CUevent *marks) {
  const Plan *p = s->plan;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *st = &p->steps[i];
    if (marks) CU_TRY(e, cu.cuEventRecord(marks[i], s->stream));
    if (st->kind == PLAN_STEP_KERNEL) {
      if (gpuc_kernel_run(s, i, st->grid, st->block, e)) return -1;
    } else if (st->kind == PLAN_STEP_GEMM) {
      if (gpuc_gemm_run(s, st->index, &s->gemms[st->index].algo, e)) return -1;
      if (gpuc_session_mark_library_output(s, p->gemms[st->index].y, e)) return -1;
    } else {
      if (conv_run(s, st->index, e)) return -1;
      if (gpuc_session_mark_library_output(s, gpuc_plan_conv_output(&p->convs[st->index]), e)) return -1;
    }
  }
  return 0;
}

/* One convolution step: forward (with bias, residual and activation in
 * one call when the plan has a bias), or the backward data/filter modes. */
static int conv_run(GpucSession *s, uint32_t index, GpucErr *e) {
  const Plan *p = s->plan;
  const PlanConv *c = &p->convs[index];
  ConvState *cs = &s->convs[index];
  float one = 1, zero = 0;
  double one64 = 1, zero64 = 0;
  bool f64 = c->dt == GPUC_DT_F64;
  void *alpha = f64 ? (void *)&one64 : (void *)&one, *beta = f64 ? (void *)&zero64 : (void *)&zero;
  void *ws = (void *)(uintptr_t)s->workspace;
  if (c->mode == PLAN_CONV_BWD_DATA) { /* x = dX from w and y = dY */
    CUDNN_TRY(e, cudnn.cudnnConvolutionBackwardData(s->dnn, alpha, cs->w, (void *)(uintptr_t)s->tptr[c->w],
                                                    cs->y, (void *)(uintptr_t)s->tptr[c->y], cs->conv,
                                                    cs->bwd_data, ws, s->workspace_bytes, beta, cs->x,
                                                    (void *)(uintptr_t)s->tptr[c->x]));
    return 0;
  }
  if (c->mode == PLAN_CONV_BWD_FILTER) { /* w = dW from x and y = dY */
    CUDNN_TRY(e, cudnn.cudnnConvolutionBackwardFilter(s->dnn, alpha, cs->x, (void *)(uintptr_t)s->tptr[c->x],
                                                      cs->y, (void *)(uintptr_t)s->tptr[c->y], cs->conv,
                                                      cs->bwd_filter, ws, s->workspace_bytes, beta, cs->w,
                                                      (void *)(uintptr_t)s->tptr[c->w]));
    return 0;
  }
  if (c->b != UINT32_MAX) { /* y = act(conv + z + b) in one call */
    float alpha2 = c->z != UINT32_MAX ? 1.0f : 0.0f;
    void *zp = (void *)(uintptr_t)s->tptr[c->z != UINT32_MAX ? c->z : c->y];
    CUDNN_TRY(e, cudnn.cudnnConvolutionBiasActivationForward(
                     s->dnn, &one, cs->x, (void *)(uintptr_t)s->tptr[c->x], cs->w,
                     (void *)(uintptr_t)s->tptr[c->w], cs->conv, cs->algo,
                     (void *)(uintptr_t)s->workspace, s->workspace_bytes, &alpha2, cs->y, zp,
                     cs->b, (void *)(uintptr_t)s->tptr[c->b], cs->act, cs->y,
                     (void *)(uintptr_t)s->tptr[c->y]));
    return 0;
  }
  CUDNN_TRY(e, cudnn.cudnnConvolutionForward(s->dnn, f64 ? (void *)&one64 : (void *)&one, cs->x,
                                             (void *)(uintptr_t)s->tptr[c->x], cs->w,
                                             (void *)(uintptr_t)s->tptr[c->w], cs->conv, cs->algo,
                                             (void *)(uintptr_t)s->workspace, s->workspace_bytes,
                                             f64 ? (void *)&zero64 : (void *)&zero, cs->y,
                                             (void *)(uintptr_t)s->tptr[c->y]));
  return 0;
}

/* The schedule as a CUDA graph, at the addresses in s->tptr now. */
static int capture(GpucSession *s, CUgraph *g, GpucErr *e) {
  CU_TRY(e, cu.cuStreamBeginCapture(s->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  int rc = issue(s, e, NULL);
  if (!rc) rc = gpuc_fault_enqueue(s, e); /* the device error record's copy: the graph's last node */
  CUresult r = cu.cuStreamEndCapture(s->stream, g);
  if (rc) {
    if (r == CUDA_SUCCESS) cu.cuGraphDestroy(*g);
    return -1;
  }
  if (r != CUDA_SUCCESS) return gpuc_cu_fail(e, r, "cuStreamEndCapture", __FILE__, __LINE__);
  return 0;
}

/* Capture the schedule once into a CUDA graph; replays cost one launch. */
static int ensure_graph(GpucSession *s, GpucErr *e) {
  if (s->graph_ready) return 0;
  CUgraph g;
  if (capture(s, &g, e)) return -1;
  CUresult r = cu.cuGraphInstantiate(&s->graph, g, 0);
  cu.cuGraphDestroy(g);
  if (r != CUDA_SUCCESS) return gpuc_cu_fail(e, r, "cuGraphInstantiate", __FILE__, __LINE__);
  s->graph_ready = true;
  return 0;
}

int gpuc_session_capture_at(GpucSession *s, CUdeviceptr *tptr, CUgraphExec *exec, bool *updated, GpucErr *e) {
  *updated = false;
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  CUdeviceptr *own = s->tptr;
  s->tptr = tptr; /* what issue() reads; the session's own table again right after */
  CUgraph g;
  int rc = capture(s, &g, e);
  s->tptr = own;
  if (rc) return -1;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (*exec) { /* the same steps at other addresses: usually updatable in place */
    CUgraphExecUpdateResultInfo info;
    r = cu.cuGraphExecUpdate(*exec, g, &info);
    if (r == CUDA_SUCCESS) *updated = true;
    else { cu.cuGraphExecDestroy(*exec); *exec = NULL; } /* freed once a launch in flight ends */
  }
  if (r != CUDA_SUCCESS) r = cu.cuGraphInstantiate(exec, g, 0);
  cu.cuGraphDestroy(g);
  if (r != CUDA_SUCCESS) { *exec = NULL; return gpuc_cu_fail(e, r, "cuGraphInstantiate", __FILE__, __LINE__); }
  return 0;
}

int gpuc_session_replay(GpucSession *s, GpucErr *e) {
  if (s->bk && gpuc_buckets_prepare(s, &s, e)) return -1; /* s: the chosen bucket's session */
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  if (ensure_graph(s, e)) return -1;
  CU_TRY(e, cu.cuGraphLaunch(s->graph, s->stream));
  CU_TRY(e, cu.cuStreamSynchronize(s->stream));
  return gpuc_fault_check(s, e);
}

int gpuc_session_launch(GpucSession *s, GpucErr *e) {
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  if (ensure_graph(s, e)) return -1;
  CU_TRY(e, cu.cuGraphLaunch(s->graph, s->stream));
  return 0;
}

int gpuc_session_capture(GpucSession *s, GpucErr *e) {
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  return ensure_graph(s, e);
}

int gpuc_session_launch_on(GpucSession *s, void *stream, GpucErr *e) {
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  if (ensure_graph(s, e)) return -1;
  CU_TRY(e, cu.cuGraphLaunch(s->graph, (CUstream)stream));
  return 0;
}

int gpuc_session_sync(GpucSession *s, GpucErr *e) {
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  CU_TRY(e, cu.cuStreamSynchronize(s->stream));
  return gpuc_fault_check(s, e);
}

int gpuc_session_check(GpucSession *s, GpucErr *e) { return gpuc_fault_check(s, e); }

int gpuc_session_tensor(const GpucSession *s, const char *name) {
  const Plan *p = s->plan;
  for (uint32_t i = 0; i < p->ntensors; i++)
    if (!strcmp(gpuc_plan_str(p, p->tensors[i].name), name)) return (int)i;
  return -1;
}

uint64_t gpuc_session_tensor_ptr(const GpucSession *s, uint32_t i) {
  return i < s->plan->ntensors ? (uint64_t)s->tptr[i] : 0;
}

void *gpuc_session_stream(const GpucSession *s) { return (void *)s->stream; }

Tensor *gpuc_session_get_output(GpucSession *s, const char *name, GpucErr *e) {
  if (s->bk) return gpuc_buckets_get_output(s, name, e); /* sliced to the shape the inputs had */
  return gpuc_session_download(s, name, e);
}

Tensor *gpuc_session_download(GpucSession *s, const char *name, GpucErr *e) {
  const Plan *p = s->plan;
  int i = find_tensor(p, name, true);
  if (i < 0) { gpuc_err_set(e, "the plan has no output named '%s'", name); return NULL; }
  const PlanTensor *t = &p->tensors[i];
  Tensor *h = gpuc_tensor_new(t->dt, t->rank, t->dims, e);
  if (!h) return NULL;
  CUresult r = cu.cuCtxSetCurrent(s->ctx);
  if (r == CUDA_SUCCESS && t->bytes) r = cu.cuMemcpyDtoH(h->data, s->tptr[i], t->bytes);
  if (r != CUDA_SUCCESS) {
    gpuc_cu_fail(e, r, "cuMemcpyDtoH", __FILE__, __LINE__);
    gpuc_tensor_free(h);
    return NULL;
  }
  return h;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int gpuc_session_bench(GpucSession *s, int warmup, int iters, GpucBench *b, double *prof_ms,
                       GpucErr *e) {
  uint64_t arena = gpuc_bucket_arena_bytes(s->plan); /* a bucket plan's: the largest bucket's, shared */
  uint64_t weights = s->plan->weights_size;
  if (s->bk && gpuc_buckets_prepare(s, &s, e)) return -1; /* the bucket of the inputs' shape */
  if (gpuc_session_bench_graph(s, warmup, iters, b, prof_ms, e)) return -1;
  b->peak_device_bytes = arena + s->workspace_bytes + weights; /* the shared arena and weights */
  return 0;
}

/* cuEventElapsedTime between a and b, or -1 with the message. */
static int elapsed(CUevent a, CUevent b, float *ms, GpucErr *e) {
  CU_TRY(e, cu.cuEventElapsedTime(ms, a, b));
  return 0;
}

/* Per-step times of s's schedule issued eagerly with an event before each
 * step, averaged over min(iters, 20) runs, into prof_ms[nsteps]. */
static int profile_steps(GpucSession *s, int iters, double *prof_ms, GpucErr *e) {
  const Plan *p = s->plan;
  CUevent *marks = calloc(p->nsteps + 1, sizeof *marks);
  if (!marks) return gpuc_err_set(e, "out of memory");
  int rc = -1;
  CUresult r = CUDA_SUCCESS;
  for (uint32_t i = 0; i <= p->nsteps && r == CUDA_SUCCESS; i++) r = cu.cuEventCreate(&marks[i], CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) { gpuc_cu_fail(e, r, "cuEventCreate", __FILE__, __LINE__); goto done; }
  for (uint32_t i = 0; i < p->nsteps; i++) prof_ms[i] = 0;
  int reps = iters < 20 ? iters : 20;
  for (int k = 0; k < reps; k++) {
    if (issue(s, e, marks)) goto done;
    if ((r = cu.cuEventRecord(marks[p->nsteps], s->stream)) != CUDA_SUCCESS ||
        (r = cu.cuEventSynchronize(marks[p->nsteps])) != CUDA_SUCCESS) {
      gpuc_cu_fail(e, r, "cuEventRecord/cuEventSynchronize", __FILE__, __LINE__);
      goto done;
    }
    for (uint32_t i = 0; i < p->nsteps; i++) {
      float f;
      if (elapsed(marks[i], marks[i + 1], &f, e)) goto done;
      prof_ms[i] += f / reps;
    }
  }
  rc = 0;
done:
  for (uint32_t i = 0; i <= p->nsteps; i++)
    if (marks[i]) cu.cuEventDestroy(marks[i]);
  free(marks);
  return rc;
}

int gpuc_session_bench_graph(GpucSession *s, int warmup, int iters, GpucBench *b, double *prof_ms, GpucErr *e) {
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  if (ensure_graph(s, e)) return -1;
  CUevent t0 = NULL, t1 = NULL;
  double *ms = calloc((size_t)iters + 1, sizeof *ms);
  int rc = -1;
  CUresult r = ms ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) r = cu.cuEventCreate(&t0, CU_EVENT_DEFAULT);
  if (r == CUDA_SUCCESS) r = cu.cuEventCreate(&t1, CU_EVENT_DEFAULT);
  for (int i = 0; i < warmup && r == CUDA_SUCCESS; i++) r = cu.cuGraphLaunch(s->graph, s->stream);
  for (int i = 0; i < iters && r == CUDA_SUCCESS; i++) {
    float f = 0;
    if ((r = cu.cuEventRecord(t0, s->stream)) == CUDA_SUCCESS && (r = cu.cuGraphLaunch(s->graph, s->stream)) == CUDA_SUCCESS &&
        (r = cu.cuEventRecord(t1, s->stream)) == CUDA_SUCCESS && (r = cu.cuEventSynchronize(t1)) == CUDA_SUCCESS)
      r = cu.cuEventElapsedTime(&f, t0, t1);
    ms[i] = f;
  }
  if (r != CUDA_SUCCESS) {
    if (ms) gpuc_cu_fail(e, r, "timing the graph's replays", __FILE__, __LINE__);
    else gpuc_err_set(e, "out of memory");
    goto done;
  }
  if (gpuc_fault_check(s, e)) goto done; /* the runs are complete: t1 was the last */
  qsort(ms, (size_t)iters, sizeof *ms, cmp_d);
  b->median_ms = ms[iters / 2];
  b->p90_ms = ms[(int)(iters * 0.9) < iters ? (int)(iters * 0.9) : iters - 1];
  b->min_ms = ms[0];
  b->peak_device_bytes = gpuc_bucket_arena_bytes(s->plan) + s->workspace_bytes + s->plan->weights_size;
  size_t free_b = 0, total_b = 0;
  b->gpu_used_bytes = cu.cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS ? total_b - free_b : 0;
  if (prof_ms && profile_steps(s, iters, prof_ms, e)) goto done;
  rc = 0;
done:
  free(ms);
  if (t0) cu.cuEventDestroy(t0);
  if (t1) cu.cuEventDestroy(t1);
  return rc;
}
