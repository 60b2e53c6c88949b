/* gpuc compiler C API (libgpuc.so, which also holds the runtime): ONNX
 * from a file or from bytes into an in-memory plan, and the CPU reference
 * executor. The same import, passes and code generation as the `gpuc`
 * command; the same messages in gpuc_last_error().
 *
 *   gpuc_compile_options o;
 *   gpuc_options_init(&o);
 *   o.fp16 = 1; o.arch = "sm_90";
 *   const char *shapes[] = {"input=8x3x224x224"};
 *   o.shapes = shapes; o.num_shapes = 1;
 *   gpuc_plan *p;
 *   if (gpuc_compile_file("model.onnx", &o, &p) != GPUC_OK) { fprintf(stderr, "%s\n", gpuc_last_error()); ... }
 *   gpuc_plan_save(p, "model.gpuc");
 *
 * Threads: any thread may call these; the library runs one compile,
 * reference run or model query at a time (a process-wide lock: the
 * compiler was written for one thread), others wait. Sessions
 * (gpuc_runtime.h) run meanwhile. */
#ifndef GPUC_COMPILER_H
#define GPUC_COMPILER_H
#include "gpuc_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options of one compile; the fields mirror the `gpuc MODEL.onnx` flags.
 * Always start with gpuc_options_init (struct_size is how the library
 * knows which fields a caller's struct has: fields are only ever appended;
 * a struct of API 1, without buckets, is still taken). */
typedef struct gpuc_compile_options {
  size_t struct_size;            /* sizeof(gpuc_compile_options), set by gpuc_options_init */
  int opt_level;                 /* 0..3 (-O0..-O3), default 2; 3 autotunes on the present GPU if
                                    there is one (else the plan keeps -O2's choices) */
  int fp16;                      /* --fp16: half storage, fp32 islands */
  int bf16;                      /* --bf16 (excludes fp16) */
  int int8;                      /* --int8: Linear layers on int8 GEMMs */
  const char *int8_skip;         /* --int8-skip: comma-separated layer-name globs, or NULL */
  int fp8;                       /* --fp8: Linear layers on FP8 GEMMs, sm_89+ (excludes int8) */
  const char *prune;             /* --prune: "l1:FRACTION" or "2:4", or NULL */
  const char *arch;              /* "sm_80" .. "sm_120"; NULL or "native": the present GPU */
  int64_t mem_limit;             /* --mem-limit in bytes; 0: none */
  const char *const *shapes;     /* --shape: "name=1x3x224x224" each; a range on a dim
                                    ("name=1..64x3x224x224") makes a bucket plan (gpuc_runtime.h
                                    "Shape buckets"), its buckets compiled one after another here */
  size_t num_shapes;
  /* API 2 */
  const char *const *buckets;    /* --buckets: "1,8,32" (the first ranged dim's sizes), "seq=16,128" (a
                                    dim by name), "1x16,8x64" (exactly these combinations); NULL: powers of
                                    two in each range plus its top */
  size_t num_buckets;
} gpuc_compile_options;

/* Defaults: -O2, float32, no pass flags, the present GPU, no limits. */
GPUC_API void gpuc_options_init(gpuc_compile_options *options);

/* Import, transform and generate code; *out is a new plan (save it with
 * gpuc_plan_save, run it with gpuc_session_new). options NULL: defaults.
 * Works without a GPU when options->arch names the target. Bytes are the
 * serialized ModelProto with its weights inside (external data files are
 * refused: they need the model's folder, so compile those from the path). */
GPUC_API gpuc_status gpuc_compile_file(const char *onnx_path, const gpuc_compile_options *options, gpuc_plan **out);
GPUC_API gpuc_status gpuc_compile_bytes(const void *onnx, size_t size, const gpuc_compile_options *options,
                                        gpuc_plan **out);

/* The CPU reference executor (`gpuc run MODEL.onnx --cpu`): runs the model
 * on the host in the reference kernels. inputs[i] gives name, dtype, dims
 * and data (host) of each graph input (all of them, each once; the dtype
 * and shape must be the model's). options may be NULL; its shapes bind
 * symbolic dims (a graph input whose dims are still symbolic takes the
 * dims of the tensor given for it) and its pass flags (fp16, int8,
 * prune...) rewrite the graph first, as with `gpuc run --cpu`; opt_level,
 * arch and mem_limit are not used.
 * On GPUC_OK, *outputs is a new array of *num_outputs tensors (the
 * model's outputs in order, names and data owned by the array): free it
 * with gpuc_tensors_free. */
GPUC_API gpuc_status gpuc_reference_run(const char *onnx_path, const gpuc_compile_options *options,
                                        const gpuc_tensor *inputs, size_t num_inputs, gpuc_tensor **outputs,
                                        size_t *num_outputs);
GPUC_API gpuc_status gpuc_reference_run_bytes(const void *onnx, size_t size, const gpuc_compile_options *options,
                                              const gpuc_tensor *inputs, size_t num_inputs, gpuc_tensor **outputs,
                                              size_t *num_outputs);
/* The model's graph inputs before a run: how many, and each one's name,
 * dtype and dims after options->shapes (data NULL, nbytes its size; -1 in
 * dims for a dimension no shape binds). *inputs is freed with
 * gpuc_tensors_free. */
GPUC_API gpuc_status gpuc_model_inputs(const char *onnx_path, const gpuc_compile_options *options,
                                       gpuc_tensor **inputs, size_t *num_inputs);
GPUC_API void gpuc_tensors_free(gpuc_tensor *tensors, size_t n); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
