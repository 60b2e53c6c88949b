/* The GPU runtime: a loaded plan on one device, ready to run.
 *   GpucSession *s = gpuc_session_create("model.gpuc", 0, &err);
 *   gpuc_session_set_input(s, "input", host_tensor, &err);
 *   gpuc_session_replay(s, &err);
 *   Tensor *y = gpuc_session_get_output(s, "logits", &err);
 * One stream; the schedule is captured into a CUDA graph on first run and
 * replayed. Every CUDA/cuBLASLt/cuDNN call is checked with file and line. */
#ifndef GPUC_SESSION_H
#define GPUC_SESSION_H
#include "plan.h"

typedef struct GpucSession GpucSession;

GpucSession *gpuc_session_create(const char *plan_path, int device, GpucErr *e);
/* The same from a plan in memory (the trainer compiles its plans without a
 * file); the session owns p from here, also on failure. `what` names it in
 * messages. */
GpucSession *gpuc_session_create_plan(Plan *p, const char *what, int device, GpucErr *e);
void gpuc_session_free(GpucSession *s);
const Plan *gpuc_session_plan(const GpucSession *s);
/* A one-shape plan takes exactly its compiled shape. A bucket plan (plan.h,
 * format 5) takes any shape within its ranges: the inputs are kept on the
 * host as given, and each run picks the smallest bucket holding them,
 * pads, and slices the outputs back (runtime/gpu/buckets.c). */
int gpuc_session_set_input(GpucSession *s, const char *name, const Tensor *host, GpucErr *e);
int gpuc_session_replay(GpucSession *s, GpucErr *e);
/* New host tensor; caller frees. */
Tensor *gpuc_session_get_output(GpucSession *s, const char *name, GpucErr *e);
/* The plan of the bucket the last run or bench used (the plan itself for a
 * one-shape plan, or before any run). */
const Plan *gpuc_session_run_plan(const GpucSession *s);
/* For code that works on the session's stream beside the plan (the GPU
 * trainer's optimizer kernels): replay without waiting, wait, a plan
 * tensor's index by name (any role; -1 if none) and its device address
 * (CUdeviceptr), and the CUstream. Work queued on that stream is ordered
 * with the replays. */
int gpuc_session_launch(GpucSession *s, GpucErr *e);
int gpuc_session_sync(GpucSession *s, GpucErr *e);
/* Data errors the kernels found (an index or label out of range,
 * runtime/device_fault.h): run, sync and bench fail with the reference's
 * message (node, value, bound) and the session stays usable. Code that
 * waits on the stream itself calls this after its wait. */
int gpuc_session_check(GpucSession *s, GpucErr *e);
/* The replay on another stream of the session's context (a CUstream; NULL
 * the legacy default stream), without waiting: the public API's
 * gpuc_session_run_async (runtime/api_runtime.c). */
int gpuc_session_launch_on(GpucSession *s, void *stream, GpucErr *e);
int gpuc_session_tensor(const GpucSession *s, const char *name);
uint64_t gpuc_session_tensor_ptr(const GpucSession *s, uint32_t i);
void *gpuc_session_stream(const GpucSession *s);
/* -O3 (runtime/gpu/autotune.c): time the candidate algorithms of every
 * cuDNN forward convolution and cuBLASLt GEMM of the loaded plan, and the
 * block sizes of its block-size-free kernels, on this GPU and record the
 * fastest in the session's plan (write it out with
 * gpuc_plan_write(gpuc_session_plan(s), ...)); results are remembered in the
 * text file cache_path (NULL: no cache), keyed by device, cuDNN version and
 * shape. */
typedef struct GpucTuneStats {
  int convs, convs_cached;       /* tuned; of them from the cache */
  int gemms, gemms_cached;
  int blocks, blocks_cached;     /* block-size-free kernels timed; of them from the cache */
  int blocks_changed;            /* of them given another block than codegen's */
  int blocks_chosen[5];          /* of the timed kernels, how many chose 64, 128, 256, 512, 1024 */
  int sparse, sparse_dense, sparse_cached; /* 2:4 GEMMs timed sparse vs dense; of them run dense; from the cache */
  int sparse_searched, sparse_cfg_cached; /* of them with a configuration cuSPARSELt's search chose; from the cache */
  bool convs_reverted, gemms_reverted, blocks_reverted; /* the plan was not faster with them: heuristics kept */
  bool sparse_reverted;
  double ms_heuristic, ms_tuned; /* whole-plan replay, median */
  double seconds;
} GpucTuneStats;
int gpuc_session_autotune(GpucSession *s, const char *cache_path, GpucTuneStats *ts, GpucErr *e);
/* Timing of whole-plan replays with CUDA events: warmup runs, then iters
 * timed runs; per-step profile when prof_ms (nsteps entries) is not NULL. */
typedef struct GpucBench {
  double median_ms, p90_ms, min_ms;
  uint64_t peak_device_bytes;
  uint64_t gpu_used_bytes;       /* total - free on the GPU after the runs (cuMemGetInfo):
                                    this process's context, libraries and buffers, and
                                    anything else on the GPU */
} GpucBench;
int gpuc_session_bench(GpucSession *s, int warmup, int iters, GpucBench *b, double *prof_ms,
                       GpucErr *e);
/* Device name and compute capability (for reports). */
void gpuc_session_device(const GpucSession *s, char *name, size_t n, int *sm);
/* What the profile needs to know of the device (runtime/gpu/profile.h
 * turns it into peak rates); a field the driver does not report is 0. */
typedef struct GpucDeviceInfo {
  char name[128];
  int sm;                        /* compute capability, e.g. 90 */
  int sms;                       /* multiprocessors */
  int clock_khz;                 /* SM clock (CU_DEVICE_ATTRIBUTE_CLOCK_RATE) */
  int mem_clock_khz;             /* peak memory clock */
  int bus_bits;                  /* global memory bus width */
} GpucDeviceInfo;
void gpuc_session_device_info(const GpucSession *s, GpucDeviceInfo *d);
/* Compute capability of device 0 without loading a plan (-1 if none). */
int gpuc_gpu_sm(GpucErr *e);
#endif
