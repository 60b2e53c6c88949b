/* Code generation: an optimized, shape-static graph -> a plan.
 * Each node is lowered by lower_<Op> (codegen/lower_*.c) into generated
 * CUDA C kernels (one module, compiled by NVRTC for the target arch, PTX
 * kept for JIT on newer GPUs) and/or library calls (cuBLASLt GEMMs, cuDNN
 * convolutions). Memory: one activation arena, offsets planned from
 * liveness over the schedule; weights in one blob. Needs no GPU. */
#ifndef GPUC_CODEGEN_H
#define GPUC_CODEGEN_H
#include "ir.h"
#include "plan.h"
#include <stdarg.h>

typedef struct CodegenOptions {
  int sm;                        /* target arch: 80, 86, 89, 90, 120 */
  bool fp16, bf16;               /* the plan is marked GPUC_PLAN_F_FP16 / _BF16 */
  int level;
  int64_t mem_limit;             /* 0 = none */
  bool skip_nvrtc;               /* the plan without PTX/CUBIN (the fuzzer: codegen runs, NVRTC does not) */
} CodegenOptions;

typedef struct CompileStats {
  int nodes_in, nodes_after;
  int kernels, gemms, convs;
  int gemms_24;                  /* GEMMs whose constant B is 2:4 sparse along K (PLAN_GEMM_F_SPARSE24) */
  uint64_t arena_bytes, naive_bytes, weight_bytes, workspace_bytes;
  uint64_t lower_bound_bytes;    /* most bytes live at any one step */
  uint32_t inplace_tensors;      /* outputs placed over a dying input */
  double nvrtc_seconds, compile_seconds;
  int sm;
} CompileStats;

/* g must have static shapes (bind with --shape). Builds the plan in *out. */
int gpuc_codegen(const Graph *g, const CodegenOptions *o, Plan **out, CompileStats *st,
                 GpucErr *e);
/* Compile CUDA C for sm_<sm> (sm_<sm>a with arch_specific: Hopper's
 * wgmma, whose code runs on that exact arch only): PTX always, CUBIN when
 * cubin != NULL. On failure the message includes the NVRTC log; the
 * source is written to a file named in the message. */
int gpuc_nvrtc_compile(const char *src, int sm, bool arch_specific, char **ptx, size_t *ptx_size, uint8_t **cubin,
                       size_t *cubin_size, GpucErr *e);

/* ---- for lowerings ---- */
typedef struct StrBuf { char *s; size_t len, cap; bool oom; } StrBuf;
void sb_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vprintf(StrBuf *b, const char *fmt, va_list ap);

typedef struct PlanBuilder PlanBuilder;

typedef struct LowerCtx {
  const Graph *g;
  const Node *n;
  int node_index;
  int nin, nout;
  const Tensor **in;             /* static dtype/shape; data for constants */
  const Tensor **out;
  uint32_t *tin, *tout;          /* plan tensor indices; UINT32_MAX if absent */
  PlanBuilder *pb;
  const CodegenOptions *opt;
  GpucErr *err;
  char kname[96];                /* unique base name for this node's kernels */
  int nkernels_emitted;
  /* fusion (codegen/lower_fused.c): when set, cg_elementwise records the
   * node's expression here instead of emitting a kernel, and any other
   * emitting helper marks the node as not inlinable */
  struct EwCapture *capture;
  const char *label;             /* ONNX nodes the steps cover; NULL: n->name */
  size_t src_start;              /* module source length when the lowering began: its kernels lie past it */
  const struct RowFuse *row;     /* a norm's fused dequantize/quantize (codegen/lower_row_group.c); NULL: none */
} LowerCtx;

/* What a norm lowering (codegen/lower_norm.c), or GatedUnit's (quantize
 * only, codegen/lower_gated.c), fuses when LowerCtx.row is
 * set (passes/fuse_quantize_rows.c): with dq >= 0, X (input 0) is
 * DequantizeRows node dq's output, loaded as acc * xs * ws + bias from
 * those plan tensors (tbias UINT32_MAX: none) and rounded to X's dtype;
 * with q >= 0, Y is also quantized per row by QuantizeRows(F8) node q into
 * tq (int8 or e4m3) and ts (f32 scale per row). */
typedef struct RowFuse {
  int dq, q;
  bool drop_y;                   /* Y is read only by the quantize: not stored, no plan tensor */
  uint32_t tacc, txs, tws, tbias, tq, ts;
} RowFuse;
/* The norm lowering takes LowerCtx.row for node n (codegen/lower_norm.c). */
bool cg_norm_row_fusable(const Graph *g, const Node *n, bool dq);
/* GatedUnit's lowering takes LowerCtx.row (a quantize only) for node n:
 * float X and Y of one dtype, rows of Y up to ROW_LAYOUT_MAX_N (lower_rows.h). */
bool cg_gated_row_fusable(const Graph *g, const Node *n);

/* The module source kernels are appended to. Kernels are
 * extern "C" __global__ and take tensor pointers in argument order. */
StrBuf *cg_src(LowerCtx *c);
/* A fresh unique kernel name "<kname>" or "<kname>_<n>". */
const char *cg_kernel_name(LowerCtx *c);
const char *cg_ctype(GpucDType dt);   /* CUDA C element type name */
/* Schedule a launch of kernel `name` with a 1-D grid covering `threads`
 * (block threads each), arguments = plan tensor indices. */
int cg_launch(LowerCtx *c, const char *name, uint64_t threads, unsigned block, unsigned shmem,
              int nargs, const uint32_t *args);
int cg_launch_grid(LowerCtx *c, const char *name, const unsigned grid[3], const unsigned block[3],
                   unsigned shmem, int nargs, const uint32_t *args);
/* Schedule a kernel whose body is one GRID_STRIDE loop over `items`
 * independent items: item i's iteration reads what it likes, writes only
 * item i's outputs, and keeps nothing for the next iteration; no shared
 * memory, no block or warp cooperation, no atomics. Then any block size
 * computes the same bytes, and the step is marked block-size free
 * (PlanTune) for -O3 to time other blocks. The kernel's source is checked
 * for the shape (cg_items_kernel_check): a kernel that fails is an
 * internal error, not a silent fallback. What the check cannot see (a
 * store to a data-dependent index, a helper with side effects) is the
 * caller's promise: scatters and anything racy use cg_launch. */
int cg_launch_items(LowerCtx *c, const char *name, uint64_t items, int nargs, const uint32_t *args);
/* NULL when kernel `name` (searched in src from offset `from`) is one
 * GRID_STRIDE loop with only const declarations before it and no block/warp/shared/atomic
 * construct in its text; else why not. *hash: FNV-1a 64 of its text with
 * its name left out (codegen/items_check.c). */
const char *cg_items_kernel_check(const char *src, size_t from, const char *name, uint64_t *hash);
int cg_gemm(LowerCtx *c, const PlanGemm *g);
/* cg_gemm with PLAN_GEMM_F_* flags (plan.h) or'ed into PlanGemm.flags. */
int cg_gemm_flagged(LowerCtx *c, const PlanGemm *g, uint32_t flags);
int cg_conv(LowerCtx *c, const PlanConv *cv);
/* A temporary arena tensor for this node (freed after its last use). */
uint32_t cg_scratch(LowerCtx *c, GpucDType dt, int rank, const int64_t *dims);
/* A constant tensor made at compile time (a weight re-laid-out for a
 * kernel): its bytes are appended to the plan's weights now. */
uint32_t cg_weights(LowerCtx *c, const char *name, const Tensor *t);
/* out tensor o becomes a view of tensor `src` (same bytes): Reshape & co. */
int cg_alias(LowerCtx *c, int o, uint32_t src);
/* The step just made reads `in` and writes `out` element for element (each
 * element of out from the same element of in, read before written): the
 * planner may put out over in's bytes when in dies there. A hint, not a
 * promise: kernels must be right either way. */
void cg_in_place(LowerCtx *c, uint32_t in, uint32_t out);
/* The kernel step just made computes on tensor cores (mma.sync): the
 * profile measures it against the tensor peak. */
void cg_mark_tensor_math(LowerCtx *c);
/* The kernel step just launched takes a TMA descriptor (PlanTensorMap,
 * plan.h) after its tensor arguments: tensor (one of them) as rows of
 * row_bytes bytes, row_stride apart, loaded box_bytes x box_rows at a time
 * in the 128-byte swizzle. In parameter order, one call a map. */
int cg_tensor_map(LowerCtx *c, uint32_t tensor, uint64_t row_bytes, uint64_t rows, uint64_t row_stride,
                  unsigned box_bytes, unsigned box_rows);
/* The kernel just emitted uses an arch-specific feature (Hopper's wgmma):
 * the module compiles for sm_XXa and the plan is marked
 * GPUC_PLAN_F_ARCH_SPECIFIC (it runs on that exact arch only). */
void cg_mark_arch_specific(LowerCtx *c);
/* Bytes and FLOPs of the steps made since the last call, counted for
 * node c->n (codegen/cost.c); the builder calls it after each lowering. */
int cg_cost_steps(Plan *p, const LowerCtx *c);

/* ---- the driver's pieces fusion uses (codegen/lower_fused.c) ---- */
/* Plan tensor of graph value v, created on first use. */
uint32_t cg_value_tensor(PlanBuilder *pb, int v);
/* Lower node i of the graph. With cap set its expression is recorded, not
 * emitted, and values made by nodes of its fusion group get no tensor.
 * label (may be NULL) names the ONNX nodes its steps cover. */
int cg_lower_node(PlanBuilder *pb, int i, struct EwCapture *cap, const char *label);
/* Lower norm node i with its fused dequantize/quantize (LowerCtx.row). */
int cg_lower_node_row(PlanBuilder *pb, int i, const RowFuse *row, const char *label);
/* Lower fusion group `members` (node indices in order; the last one's
 * output is the group's) as one kernel; as separate nodes when a member
 * cannot be inlined. */
int cg_lower_group(PlanBuilder *pb, const Graph *g, const int *members, int nmembers,
                   const int *reader_group);
GpucErr *cg_builder_err(PlanBuilder *pb);
Plan *cg_builder_plan(PlanBuilder *pb);
const CodegenOptions *cg_builder_opt(PlanBuilder *pb);

#define OP(E, Name, min_in, max_in, min_out, max_out, flags) int lower_##Name(LowerCtx *c);
#include "ops.def"
#undef OP
typedef int (*GpucLowerFn)(LowerCtx *c);
extern const GpucLowerFn lower_fns[GPUC_OP_COUNT];
#endif
