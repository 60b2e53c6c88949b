/* What the GPU runtime's files share about a session (runtime/gpu/:
 * session.c loads and runs a plan, autotune.c times its library calls and
 * generated kernels' block sizes for -O3). Not for users of the runtime: they see session.h. */
#ifndef GPUC_SESSION_INTERNAL_H
#define GPUC_SESSION_INTERNAL_H
#include "session.h"
#include "cuda_api.h"

typedef struct GemmState {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatmulAlgo_t algo;
  bool bias_epilogue;
  struct SparseGemm *sparse;     /* PLAN_GEMM_F_SPARSE24 on sparse tensor cores (sparse_gemm.c), or NULL: dense */
} GemmState;

typedef struct ConvState {
  cudnnTensorDescriptor_t x, y, b;
  cudnnActivationDescriptor_t act;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t algo;           /* PLAN_CONV_FWD */
  cudnnConvolutionBwdDataAlgo_t bwd_data;   /* PLAN_CONV_BWD_DATA */
  cudnnConvolutionBwdFilterAlgo_t bwd_filter; /* PLAN_CONV_BWD_FILTER */
} ConvState;

struct GpucSession {
  Plan *plan;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUmodule module;
  CUfunction *funcs;
  CUdeviceptr arena, weights, workspace;
  CUdeviceptr *tptr;             /* device address of every plan tensor */
  cublasLtHandle_t lt;
  cudnnHandle_t dnn;
  GemmState *gemms;
  ConvState *convs;
  CUgraphExec graph;
  bool graph_ready;
  size_t workspace_bytes;        /* >= the plan's: cuDNN may need more here */
  size_t workspace_budget;       /* the most one cuDNN forward algorithm may use: 1 GiB
                                    (GPUC_WORKSPACE_LIMIT, a diagnostic, overrides) */
  int sm;
  char devname[128];
  int gemms_sparse, gemms_sparse_dense; /* 2:4 GEMMs on sparse tensor cores / run dense here */
  char sparse_why[256];          /* why the first of the latter runs dense */
  char *what;                    /* the plan's file (or what made it), for messages */
  CUdeviceptr fault;             /* the module's device error record (runtime/device_fault.h); 0: none */
  uint64_t *fault_host;          /* pinned: its copy, the captured graph's last node */
  bool fault_quiet;              /* -O3's timing runs (zeroed arena, not the user's data): reset, not reported */
  struct BucketRun *bk;          /* a bucket plan's: the buckets' sessions and staged inputs (buckets.c) */
  bool shared;                   /* a bucket's session: stream, arena, weights, workspace and plan are its parent's */
  CUdeviceptr mark_scratch;      /* GPUC_INITCHECK_MARK_LIBRARY=1: the largest library output's size (device_memory.c) */
};

/* The device error record (device_fault_gpu.c): found after the module
 * loads; its copy enqueued at the end of the captured schedule; checked
 * after a run completes (-1 with the reference's message, the record
 * reset); freed with the session. */
int gpuc_fault_setup(GpucSession *s, const char *what, GpucErr *e);
int gpuc_fault_enqueue(GpucSession *s, GpucErr *e);
int gpuc_fault_check(GpucSession *s, GpucErr *e);
int gpuc_fault_reset(GpucSession *s, GpucErr *e);
void gpuc_fault_free(GpucSession *s);
/* -1 with "needs N bytes (parts), the GPU has F free of T" when `bytes`
 * more device memory do not fit in what is free now (device_memory.c). */
int gpuc_session_fits(GpucSession *s, const char *what, uint64_t bytes, const char *parts, GpucErr *e);
/* Failure injection for the error paths of session creation (a test
 * hook; tests/tools/session_check.c `faults`): after
 * gpuc_session_fail_at(n), the n-th point at which session creation is
 * about to acquire something (context, stream, module, pinned record,
 * arena, weights, library handles and descriptors, workspace, buckets),
 * counted from that call on, fails there as if the GPU were out of memory,
 * before acquiring it; n = 0 turns it off (the default: one compare).
 * gpuc_session_inject is that point (true: fail, the message in e);
 * gpuc_session_fail_points how many points were passed since the last
 * gpuc_session_fail_at. Not thread-safe: tests only. */
void gpuc_session_fail_at(int n);
int gpuc_session_fail_points(void);
bool gpuc_session_inject(const char *what, GpucErr *e);
/* Capture and instantiate s's CUDA graph now if it is not yet (what the
 * first launch does; the public API calls it under its session lock:
 * the first cuBLASLt/cuDNN/cuSPARSELt calls load kernels and touch shared
 * handles, and two threads capturing at once would race there). */
int gpuc_session_capture(GpucSession *s, GpucErr *e);
/* The schedule captured with every tensor at tptr[i] instead of its own
 * address (the public API's in-place bindings, runtime/zero_copy.h) into
 * *exec: updated in place (cuGraphExecUpdate, *updated set) when *exec is
 * a graph of the same steps, else a new one instantiated (an old *exec is
 * destroyed; a launch of it still in flight completes). Needs the lock
 * gpuc_session_capture needs. */
int gpuc_session_capture_at(GpucSession *s, CUdeviceptr *tptr, CUgraphExec *exec, bool *updated, GpucErr *e);
/* gpuc_session_bench on s's own graph as its buffers hold the inputs (a
 * bucket plan's container: its largest bucket; no staged inputs needed):
 * the public API's gpuc_session_benchmark. */
int gpuc_session_bench_graph(GpucSession *s, int warmup, int iters, GpucBench *b, double *prof_ms, GpucErr *e);
/* Every tensor's device address and size (GPUC_DEBUG_TENSORS=1 at session creation). */
void gpuc_session_print_tensors(const GpucSession *s, FILE *f);
/* The tensor a convolution step writes: Y, or dX / dW for the backward modes. */
uint32_t gpuc_plan_conv_output(const PlanConv *c);
/* GPUC_INITCHECK_MARK_LIBRARY=1 (a sanitizer aid, device_memory.c): the
 * scratch buffer at session creation, and after each cuBLASLt/cuDNN call a
 * copy of its output out to that buffer and back, so compute-sanitizer's
 * initcheck, which does not see those libraries' stores on sm_90, sees the
 * bytes written; reads of every other tensor stay checked. */
int gpuc_session_mark_setup(GpucSession *s, GpucErr *e);
int gpuc_session_mark_library_output(GpucSession *s, uint32_t tensor, GpucErr *e);

/* Inputs and outputs at the plan's compiled shape (the body of
 * set_input/get_output for a one-shape plan, and of each bucket's run). */
int gpuc_session_upload(GpucSession *s, const char *name, const Tensor *host, GpucErr *e);
Tensor *gpuc_session_download(GpucSession *s, const char *name, GpucErr *e);
/* Bucket plans (runtime/gpu/buckets.c): a session per bucket sharing the
 * parent's memory; inputs staged on the host at their actual shape;
 * prepare picks the bucket, pads and uploads, and gives the session to
 * run; outputs are sliced back. close frees the buckets' sessions (a no-op
 * without). */
GpucSession *gpuc_session_open_bucket(GpucSession *parent, Plan *p, const char *what, GpucErr *e);
int gpuc_buckets_open(GpucSession *s, GpucErr *e);
void gpuc_buckets_close(GpucSession *s);
int gpuc_buckets_set_input(GpucSession *s, const char *name, const Tensor *host, GpucErr *e);
int gpuc_buckets_prepare(GpucSession *s, GpucSession **run, GpucErr *e);
Tensor *gpuc_buckets_get_output(GpucSession *s, const char *name, GpucErr *e);
/* Bucket k's session (the container itself for the last), NULL past the
 * buckets or for a one-shape plan: the C API runs it (runtime/api_buckets.c). */
GpucSession *gpuc_buckets_session(GpucSession *s, uint32_t k);

/* cuBLASLt's heuristic results for GEMM state st (up to max, the workspace
 * limited to the plan's); *found how many. */
int gpuc_gemm_heuristics(GpucSession *s, GemmState *st, cublasLtMatmulHeuristicResult_t *res, int max, int *found,
                         GpucErr *e);
/* GEMM i of the plan with the given algorithm, on the session's stream. */
int gpuc_gemm_run(GpucSession *s, uint32_t i, const cublasLtMatmulAlgo_t *algo, GpucErr *e);
/* Kernel step i with the given launch shape, on the session's stream. */
int gpuc_kernel_run(GpucSession *s, uint32_t i, const uint32_t grid[3], const uint32_t block[3], GpucErr *e);
#endif
