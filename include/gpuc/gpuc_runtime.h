/* gpuc runtime C API (libgpuc_rt.so; also in libgpuc.so): load a compiled
 * plan, query its inputs and outputs, bind host or device buffers by name,
 * and run the plan's CUDA graph on a CUDA stream of the caller's.
 *
 * Stable: no internal struct is visible, every handle is opaque, and a
 * program built against GPUC_API_VERSION N runs with a library whose
 * gpuc_api_version() is N or newer (names are only ever added). The library
 * opens libcuda, cuBLASLt and cuDNN at run time; a program links
 * -lgpuc_rt only (or -lgpuc for the compiler too; not both).
 *
 *   gpuc_plan *p; gpuc_session *s;
 *   if (gpuc_plan_load("model.gpuc", &p) != GPUC_OK ||
 *       gpuc_session_new(p, 0, &s) != GPUC_OK) { fprintf(stderr, "%s\n", gpuc_last_error()); ... }
 *   int64_t dims[4] = {1, 3, 224, 224};
 *   gpuc_session_bind_input(s, "input", x, GPUC_MEMORY_HOST, GPUC_DTYPE_F32, 4, dims);
 *   gpuc_session_run(s);                                       // waits
 *   gpuc_session_fetch_output(s, "logits", y, sizeof y);       // to host
 *   // or device buffers (cudaMalloc'ed), read and written in place by the
 *   // graph on the caller's stream (zero-copy, see gpuc_session_bind_input):
 *   gpuc_session_bind_input(s, "input", d_x, GPUC_MEMORY_DEVICE, GPUC_DTYPE_F32, 4, dims);
 *   gpuc_session_bind_output(s, "logits", d_y, GPUC_MEMORY_DEVICE, GPUC_DTYPE_F32, 2, ydims);
 *   gpuc_session_run_async(s, stream);                         // returns at once
 *   gpuc_session_destroy(s); gpuc_plan_destroy(p);
 *
 * Errors. Every call that can fail returns a gpuc_status; on anything but
 * GPUC_OK, gpuc_last_error() holds one line saying what failed: the file,
 * the tensor or node, and the reason (the text `gpuc` prints after
 * "gpuc: "). The message is per thread and stays until the next failing
 * call on that thread; successful calls leave it alone. No call aborts the
 * process or reads past a buffer on bad input: NULL arguments, unknown
 * names, wrong dtypes or shapes, corrupt plans all return a status.
 *
 * Threads. The library keeps no global state but the per-thread message
 * and the CUDA libraries it opens once (thread-safe).
 *   - A gpuc_plan is read-only after it is made: any number of threads may
 *     query it, save it and create sessions from it at once. Destroy it
 *     once nothing else uses it (sessions keep their own copy).
 *   - A gpuc_session is used by one thread at a time (bind, run, fetch,
 *     bench, destroy); the caller serializes calls on one session. Calls may
 *     come from different threads one after another.
 *   - Different sessions may be used concurrently from different threads,
 *     also sessions of the same plan (gpuc_session_new, graph captures (a
 *     session's first run, a run with new in-place addresses) and
 *     gpuc_session_destroy are serialized inside the library; other runs
 *     are not). They share the device's primary
 *     context (cuDevicePrimaryCtxRetain), so they share memory and streams
 *     with each other and with a CUDA runtime (PyTorch) in the process.
 *   - A session's calls make its device's primary context current on the
 *     calling thread and leave it current.
 *
 * Streams. gpuc_session_run_async enqueues everything (input copies, the
 * graph launch, output copies) on the caller's stream and returns; the
 * caller orders other work and waits with its stream or events. The
 * session holds one set of intermediate buffers, so each run also waits
 * (on the device, cuStreamWaitEvent) for the session's previous run,
 * whatever stream that was on, and records an event of the session's
 * after its last copy: fetch_output, benchmark and destroy wait for that
 * event, never for the caller's stream, which the caller may destroy
 * once the run is enqueued.
 *
 * Lifetime of bound buffers. Host and device buffers are read or written
 * by the run's stream, after the call returns: they must stay valid, and
 * be left alone by other streams and the host, until that work completes
 * (device ones used in place are the graph's own memory for that time).
 * A caching allocator that hands a freed block to work on another stream
 * needs the usual care (torch: Tensor.record_stream). Graphs the session
 * keeps for old addresses are never launched at those addresses again
 * unless the same addresses are bound again, so freeing a buffer after
 * its runs completed is safe. */
#ifndef GPUC_RUNTIME_H
#define GPUC_RUNTIME_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GPUC_API __attribute__((visibility("default")))
#else
#define GPUC_API
#endif

/* The API this header declares; bumped when names are added.
 *   1: the first release
 *   2: device bindings used in place (zero-copy), gpuc_plan_in_place,
 *      gpuc_session_get_stats / gpuc_session_reset_stats; shape buckets:
 *      sessions of a plan compiled for shape ranges take any shape in
 *      range; gpuc_plan_bucket_count, gpuc_plan_dim_range,
 *      gpuc_plan_bucket_dims, gpuc_plan_resolve, gpuc_session_output_dims */
#define GPUC_API_VERSION 2
/* The most dimensions a tensor has. */
#define GPUC_MAX_DIMS 8

/* The library's release ("0.1.0") and the API version it implements
 * (>= the GPUC_API_VERSION a program was built with). */
GPUC_API const char *gpuc_version(void);
GPUC_API int gpuc_api_version(void);

typedef enum gpuc_status {
  GPUC_OK = 0,
  GPUC_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad option or flag value */
  GPUC_ERR_NOT_FOUND = 2,        /* no input/output of that name; index out of range */
  GPUC_ERR_MISMATCH = 3,         /* dtype, shape or byte count disagrees with the plan */
  GPUC_ERR_BAD_INPUT = 4,        /* a missing, unreadable, corrupt or invalid model or plan */
  GPUC_ERR_UNSUPPORTED = 5,      /* an op or dtype outside the supported set */
  GPUC_ERR_CUDA = 6,             /* no GPU or a CUDA/cuBLASLt/cuDNN failure (names the call) */
  GPUC_ERR_OUT_OF_MEMORY = 7,
  GPUC_ERR_STATE = 8             /* a call out of order: e.g. running with an input never bound */
} gpuc_status;

/* The message of this thread's last failed call ("" if none); valid until
 * the next failing call on this thread. */
GPUC_API const char *gpuc_last_error(void);
/* "GPUC_ERR_MISMATCH" and the like; "unknown status" otherwise. */
GPUC_API const char *gpuc_status_name(gpuc_status s);

/* Element types (numbers fixed: they are part of the ABI). */
typedef enum gpuc_dtype {
  GPUC_DTYPE_UNDEFINED = 0,
  GPUC_DTYPE_F32 = 1,
  GPUC_DTYPE_F16 = 2,
  GPUC_DTYPE_BF16 = 3,
  GPUC_DTYPE_F64 = 4,
  GPUC_DTYPE_I8 = 5,
  GPUC_DTYPE_U8 = 6,
  GPUC_DTYPE_I16 = 7,
  GPUC_DTYPE_U16 = 8,
  GPUC_DTYPE_I32 = 9,
  GPUC_DTYPE_U32 = 10,
  GPUC_DTYPE_I64 = 11,
  GPUC_DTYPE_U64 = 12,
  GPUC_DTYPE_BOOL = 13,          /* one byte, 0 or 1 */
  GPUC_DTYPE_F8E4M3 = 14
} gpuc_dtype;
/* Bytes per element (0 for an unknown dtype) and a short name: "f32",
 * "f16", "bf16", "f64", "i8", "u8", "i16", "u16", "i32", "u32", "i64",
 * "u64", "bool", "f8e4m3" ("?" for an unknown dtype). */
GPUC_API size_t gpuc_dtype_itemsize(gpuc_dtype dt);
GPUC_API const char *gpuc_dtype_to_string(gpuc_dtype dt);

typedef enum gpuc_io { GPUC_INPUT = 0, GPUC_OUTPUT = 1 } gpuc_io;
typedef enum gpuc_memory {
  GPUC_MEMORY_HOST = 0,          /* a CPU pointer (pageable or pinned) */
  GPUC_MEMORY_DEVICE = 1         /* a CUdeviceptr / cudaMalloc'ed pointer on the session's device */
} gpuc_memory;

/* Description of one tensor. In queries the library fills it and name
 * points into the plan (valid while the plan lives); in
 * gpuc_reference_run (gpuc_compiler.h) it also carries host data. */
typedef struct gpuc_tensor {
  const char *name;
  gpuc_dtype dtype;
  int ndim;
  int64_t dims[GPUC_MAX_DIMS];
  void *data;                    /* host data; NULL in plan queries */
  size_t nbytes;                 /* product(dims) * gpuc_dtype_itemsize(dtype) */
} gpuc_tensor;

/* ---- plans ---------------------------------------------------------------
 * A compiled model: kernels, library calls, weights, and the shapes and
 * dtypes of its inputs and outputs (fixed at compile time). */
typedef struct gpuc_plan gpuc_plan;

/* Read and validate a plan file (`gpuc MODEL.onnx -o PLAN.gpuc`) or the
 * same bytes in memory (copied; the caller keeps its buffer). *out is set
 * only on GPUC_OK. A plan for another GPU loads; gpuc_session_new says so. */
GPUC_API gpuc_status gpuc_plan_load(const char *path, gpuc_plan **out);
GPUC_API gpuc_status gpuc_plan_load_bytes(const void *data, size_t size, gpuc_plan **out);
/* Write a plan file (atomically: a temporary file, then rename), or into a
 * new buffer *data of *size bytes that the caller frees with gpuc_free. */
GPUC_API gpuc_status gpuc_plan_save(const gpuc_plan *plan, const char *path);
GPUC_API gpuc_status gpuc_plan_save_bytes(const gpuc_plan *plan, void **data, size_t *size);
GPUC_API void gpuc_plan_destroy(gpuc_plan *plan); /* NULL is fine */
/* Memory the library handed out (gpuc_plan_save_bytes). NULL is fine. */
GPUC_API void gpuc_free(void *data);

/* Inputs and outputs, in the model's order (an output the compiler folded
 * to a constant comes after the others). A tensor that is both (a
 * model output that is also an input) is in both lists.
 *   count: 0 for a NULL plan.
 *   name/dtype/ndim/dim: NULL, GPUC_DTYPE_UNDEFINED, -1, -1 for a bad
 *   plan, index or axis (gpuc_last_error says which).
 *   index: the position of name in the list, or -1. */
GPUC_API size_t gpuc_plan_count(const gpuc_plan *plan, gpuc_io io);
GPUC_API const char *gpuc_plan_name(const gpuc_plan *plan, gpuc_io io, size_t index);
GPUC_API gpuc_dtype gpuc_plan_dtype(const gpuc_plan *plan, gpuc_io io, size_t index);
GPUC_API int gpuc_plan_ndim(const gpuc_plan *plan, gpuc_io io, size_t index);
GPUC_API int64_t gpuc_plan_dim(const gpuc_plan *plan, gpuc_io io, size_t index, int axis);
GPUC_API int gpuc_plan_index(const gpuc_plan *plan, gpuc_io io, const char *name);
/* All of one tensor at once (data NULL, nbytes its size in bytes). */
GPUC_API gpuc_status gpuc_plan_info(const gpuc_plan *plan, gpuc_io io, size_t index, gpuc_tensor *info);
/* The GPU the plan was compiled for, as 90 for sm_90. -1 for NULL. */
GPUC_API int gpuc_plan_sm(const gpuc_plan *plan);

/* ---- devices ------------------------------------------------------------- */
/* CUDA devices present (0 without a driver or GPU; not an error), and the
 * compute capability of one (90 for sm_90). */
GPUC_API int gpuc_device_count(void);
GPUC_API gpuc_status gpuc_device_sm(int device, int *sm);

/* ---- sessions ------------------------------------------------------------
 * A plan loaded on one GPU: its module, weights, buffers and CUDA graph.
 * The graph is captured on the first run and replayed after. */
typedef struct gpuc_session gpuc_session;

/* Load plan on CUDA device `device` (0-based), in the device's primary
 * context. A plan compiled with shape ranges (buckets, below) takes any
 * shape in its ranges. The session copies what it needs: the plan may be
 * destroyed right after. Fails (GPUC_ERR_CUDA) without a GPU, or when the
 * plan was built for a newer GPU than this one; GPUC_ERR_OUT_OF_MEMORY when
 * the GPU has not the memory the plan needs (the message: bytes needed vs
 * free). A failed call leaves *out NULL and nothing allocated on the
 * device: a later call, once memory is free, succeeds. */
GPUC_API gpuc_status gpuc_session_new(const gpuc_plan *plan, int device, gpuc_session **out);
GPUC_API void gpuc_session_destroy(gpuc_session *s); /* waits for its work; NULL is fine */
/* The session's plan, for queries; owned by the session. */
GPUC_API const gpuc_plan *gpuc_session_plan_of(const gpuc_session *s);

/* Bind a buffer to input `name`, for every later run until bound again.
 * dtype and ndim must equal the plan's, and dims too for a one-shape plan
 * (GPUC_ERR_MISMATCH names both); for a bucket plan dims may be any in
 * the compiled ranges ("Shape buckets" below).
 *   GPUC_MEMORY_HOST: each run copies from data to the device (on the run's
 *   stream; from pageable memory the copy is synchronous with the host).
 *   GPUC_MEMORY_DEVICE: data is a device address on the session's device,
 *   used in place (zero-copy, below) or else copied device to device into
 *   the plan's own buffer on the run's stream before the graph. Never
 *   through the host.
 * The buffer must stay valid, and unchanged by anyone else, until the runs
 * that read it have finished on their stream.
 *
 * Zero-copy. The CUDA graph has every address baked in at capture, so a
 * run whose in-place device addresses (inputs and outputs) differ from
 * those of the graphs the session holds captures a new graph for them
 * (host time, about what the first run's capture takes; updated into an
 * old graph's executable where CUDA allows). A session keeps the graphs of
 * the last 4 such address sets, so a loop whose buffers repeat (PyTorch's
 * caching allocator hands back the same blocks) replays without capturing.
 * A device binding is used in place when:
 *   - the plan allows it: gpuc_plan_in_place says so per input/output (not
 *     for an output the compiler folded into the weights, nor a tensor
 *     whose address a cuBLASLt/cuSPARSELt descriptor took at load: a GEMM
 *     epilogue's bias row, FP8 scales, a 2:4 GEMM's operands);
 *   - the address is 256-byte aligned (cudaMalloc's and PyTorch's
 *     allocations at offset 0 are; the plan's library calls were chosen
 *     for such addresses);
 *   - it lies outside the session's own memory, and an output's buffer
 *     overlaps no other in-place buffer (inputs may share one);
 *   - no earlier input/output of the same tensor took it (a model input
 *     that is also an output: the output is copied);
 *   - it is the first device address bound to that input/output, or one
 *     of the last 4 bound to it: a new address is copied in its first run
 *     and used in place from its second, so buffers that change every run
 *     cost copies, not a capture per run.
 * Otherwise it is copied as described above. gpuc_session_get_stats
 * counts what was copied and captured. A run leaves an in-place output in
 * the caller's buffer only (the session's own buffer of that output keeps
 * an older value; fetch_output reads the caller's buffer, which must then
 * still be valid). The plan never writes an input's bytes, in place or
 * not. A bucket plan's bindings are always copied (below).
 * GPUC_ZERO_COPY=0 in the environment when a session is made copies every
 * device binding (a diagnostic, to compare). */
GPUC_API gpuc_status gpuc_session_bind_input(gpuc_session *s, const char *name, const void *data, gpuc_memory mem,
                                             gpuc_dtype dtype, int ndim, const int64_t *dims);
/* Bind a buffer to output `name`: each run leaves the output there (device:
 * written by the graph in place (zero-copy, above), or copied device to
 * device after the graph on the run's stream; host: a device-to-host copy,
 * complete when the run's stream is). Unbound outputs stay in the
 * session's buffers: read them with gpuc_session_fetch_output. */
GPUC_API gpuc_status gpuc_session_bind_output(gpuc_session *s, const char *name, void *data, gpuc_memory mem,
                                              gpuc_dtype dtype, int ndim, const int64_t *dims);
/* Forget every binding (runs then need inputs bound again). */
GPUC_API gpuc_status gpuc_session_unbind_all(gpuc_session *s);

/* Enqueue one run on `stream` (a CUstream / cudaStream_t of the session's
 * device, passed as void *; NULL is the legacy default stream) and return
 * without waiting: bound inputs not used in place are copied in, the CUDA
 * graph is launched on that stream (cuGraphLaunch), bound outputs not
 * written in place are copied out. Every input must be bound
 * (GPUC_ERR_STATE names the first that is not). The first run of a
 * session, and a run with a new set of in-place addresses, also captures
 * and instantiates a graph (host time). */
GPUC_API gpuc_status gpuc_session_run_async(gpuc_session *s, void *stream);
/* The same on the session's own stream, then wait for it. */
GPUC_API gpuc_status gpuc_session_run(gpuc_session *s);

/* Copy output `name` of the last run into host memory data of size bytes
 * (== the output's bytes at the last run's shape, else GPUC_ERR_MISMATCH).
 * Waits for the last run first (its event, not its stream). From the
 * caller's buffer when the last run wrote that output in place. */
GPUC_API gpuc_status gpuc_session_fetch_output(gpuc_session *s, const char *name, void *data, size_t size);
/* Bad data the kernels found in the runs since the last check (an index
 * or label out of range: the message names the node, the value and the
 * bound, as the reference's would): GPUC_ERR_BAD_INPUT, else GPUC_OK.
 * gpuc_session_run, fetch_output and benchmark check by themselves; after
 * gpuc_session_run_async, call this once the stream is waited for (a run
 * still in flight is not seen yet). */
GPUC_API gpuc_status gpuc_session_poll_errors(gpuc_session *s);
/* The device address of the session's own buffer for input or output
 * `name` (valid for the session's life). A caller may write an input
 * there itself (ordered before the run) and bind that address (no copy
 * at run time, no capture), or read an output from it after the run; its
 * bytes change with every run that does not write that output into a
 * caller's buffer in place. A bucket plan has one such buffer per bucket:
 * GPUC_ERR_UNSUPPORTED there (bind buffers of your own). */
GPUC_API gpuc_status gpuc_session_buffer(gpuc_session *s, gpuc_io io, const char *name, void **device_ptr);

/* Time whole-plan replays with CUDA events on the session's stream:
 * `warmup` untimed runs, then `iters` (1..100000) timed ones; the median
 * and 90th percentile in milliseconds (either pointer may be NULL). The
 * inputs are whatever the session's buffers hold (zeros until a run copies
 * an input there; one bound in place is not); bindings are not copied
 * (the graph alone is timed at the session's own addresses, like `gpuc
 * bench`). A bucket plan's session times the bucket its last run used
 * (the largest before any run). */
GPUC_API gpuc_status gpuc_session_benchmark(gpuc_session *s, int warmup, int iters, double *median_ms,
                                            double *p90_ms);
/* The session's device name and compute capability (either may be NULL). */
GPUC_API gpuc_status gpuc_session_gpu(const gpuc_session *s, char *name, size_t name_size, int *sm);

/* ---- zero-copy and what moved (API 2) ----------------------------------- */
/* Whether a device buffer bound to input/output `index` of plan can be used
 * in place (the plan's part of the rules at gpuc_session_bind_input; the
 * run's part depends on the address): 1 yes, 0 no, -1 for a bad plan, io
 * or index (gpuc_last_error says). *why (may be NULL) gets a static line
 * saying why not ("used in place" when it can). Needs no GPU. */
GPUC_API int gpuc_plan_in_place(const gpuc_plan *plan, gpuc_io io, size_t index, const char **why);

/* What a session's runs moved and captured since it was made or reset.
 * Bytes count the library's own copies for bindings (every run's) and
 * fetch_output; weights uploaded at gpuc_session_new are not counted, nor
 * the device error record (a few bytes the graph copies to pinned host
 * memory at its end, in plans whose kernels check their data: Gather
 * indices, labels). Fields are only ever appended: pass sizeof of this
 * header's struct; a library knowing fewer fields zeroes the rest. */
typedef struct gpuc_session_stats {
  uint64_t runs;                 /* runs enqueued (run, run_async) */
  uint64_t bytes_host_to_device; /* host-bound inputs */
  uint64_t bytes_device_to_host; /* host-bound outputs and fetch_output */
  uint64_t bytes_device_to_device; /* device bindings that were copied, not used in place */
  uint64_t copies;               /* the copies behind the three byte counts */
  uint64_t in_place_bindings;    /* device bindings used in place, summed over runs */
  uint64_t graph_captures;       /* the schedule captured: the first graph, and one per new in-place address set */
  uint64_t graph_updates;        /* of those, applied to a kept graph with cuGraphExecUpdate */
  uint64_t graph_cache_hits;     /* runs with in-place bindings whose graph was kept */
} gpuc_session_stats;
GPUC_API gpuc_status gpuc_session_get_stats(const gpuc_session *s, gpuc_session_stats *stats, size_t size);
GPUC_API gpuc_status gpuc_session_reset_stats(gpuc_session *s);
/* ---- shape buckets (API 2) ------------------------------------------------
 * A plan compiled with a range on some input dims (`gpuc MODEL.onnx
 * --shape input_ids=1..32x16..128`, gpuc_compile_options.shapes the same
 * way) holds one schedule per bucket (a point of the ranges) and takes any
 * shape in range:
 *   - gpuc_plan_info/gpuc_plan_dim report the largest shape (each range's
 *     top); gpuc_plan_dim_range the range and kind of each dim;
 *   - gpuc_session_bind_input takes any dims in range (checked at once:
 *     GPUC_ERR_MISMATCH names the dim, its value and the range, and the
 *     session is unchanged and stays usable);
 *   - each run picks the smallest bucket holding the bound dims (as
 *     `gpuc run` does): a batch dim is padded by repeating the last row, a
 *     sequence dim that an attention-mask input carries is padded with
 *     zeros (the mask hides them), any other ranged dim runs only at the
 *     bucket sizes (GPUC_ERR_MISMATCH lists them); inputs sharing a dim
 *     must agree;
 *   - the inputs are copied padded into that bucket's buffers and bound
 *     outputs copied sliced back to the actual shape, on the run's stream
 *     (strided copies, host or device memory alike: a bucket plan's
 *     bindings are always copied, never used in place, since padding
 *     needs a copy anyway); bound outputs' dims must be the actual ones
 *     (gpuc_session_output_dims), checked when the run is enqueued;
 *   - the buckets share one arena, one copy of the weights and the
 *     session's stream; each bucket's CUDA graph is captured on its first
 *     run (serialized like the first capture above).
 * Threads: the plan queries below are read-only (any thread, as the other
 * plan queries); gpuc_session_output_dims reads the session (one thread at
 * a time, as its other calls). */
typedef enum gpuc_dim_kind {
  GPUC_DIM_FIXED = 0,            /* one size (min == max) */
  GPUC_DIM_BATCH = 1,            /* any size in range: padded by repeating the last row, sliced */
  GPUC_DIM_MASKED = 2,           /* any size in range: padded with zeros an attention mask hides, sliced */
  GPUC_DIM_BUCKET_SIZES = 3      /* only the sizes the buckets have (gpuc_plan_bucket_dims): no safe padding */
} gpuc_dim_kind;
/* Buckets in the plan: 1 for a plan of one shape, 0 for NULL. */
GPUC_API size_t gpuc_plan_bucket_count(const gpuc_plan *plan);
/* The sizes input/output `index`'s dim `axis` takes: [*min, *max] and how
 * (any out-pointer may be NULL). A one-shape plan's dims are all FIXED. */
GPUC_API gpuc_status gpuc_plan_dim_range(const gpuc_plan *plan, gpuc_io io, size_t index, int axis, int64_t *min,
                                         int64_t *max, gpuc_dim_kind *kind);
/* The dims input/output `index` has in bucket `bucket` (dims: room for
 * GPUC_MAX_DIMS). Buckets are ordered as compiled; the last is the largest. */
GPUC_API gpuc_status gpuc_plan_bucket_dims(const gpuc_plan *plan, size_t bucket, gpuc_io io, size_t index,
                                           int *ndim, int64_t *dims);
/* What a run on inputs of these dims does, without a GPU: inputs[i] name
 * every input once with its dtype, ndim and dims (data unused); *bucket
 * (may be NULL) gets the bucket it runs in (its padded dims:
 * gpuc_plan_bucket_dims), and outputs (may be NULL; room for
 * gpuc_plan_count(plan, GPUC_OUTPUT)) each output's name, dtype, actual
 * dims and bytes. The refusals are a session's, with the same messages. */
GPUC_API gpuc_status gpuc_plan_resolve(const gpuc_plan *plan, const gpuc_tensor *inputs, size_t num_inputs,
                                       size_t *bucket, gpuc_tensor *outputs);
/* The dims output `name` has for the inputs bound now (every input bound),
 * else for the last run (GPUC_ERR_STATE before either); a one-shape plan's
 * are the plan's. dims: room for GPUC_MAX_DIMS. */
GPUC_API gpuc_status gpuc_session_output_dims(gpuc_session *s, const char *name, int *ndim, int64_t *dims);

#ifdef __cplusplus
}
#endif
#endif
