/* Graph -> graph rewrites. Each pass is `int pass_<name>(Graph *, const
 * PassOptions *, GpucErr *)`, returns the number of changes or -1, and
 * leaves a graph that gpuc_graph_verify accepts. The pipeline per -O level
 * is gpuc_passes_run, readable top to bottom. Passes may evaluate ops with
 * the CPU reference kernels (constant folding); they know nothing of CUDA. */
#ifndef GPUC_PASSES_H
#define GPUC_PASSES_H
#include "ir.h"

typedef struct PassOptions {
  int level;                     /* -O0..-O3 */
  bool fp16;                     /* half storage with fp32 islands */
  bool training;                 /* a training graph: each parameter (Value.is_param) stays
                                    the one tensor the optimizer updates, never copied */
  int64_t fold_max_bytes;        /* largest tensor constant folding may create */
  int prune_kind;                /* GPUC_PRUNE_*: --prune (passes/prune.c) */
  double prune_fraction;         /*   l1: the fraction of each weight zeroed */
  FILE *prune_report;            /*   per-layer sparsity lines, or NULL */
  const char *dump_after;        /* pass name to dump the graph after, or NULL */
  FILE *dump_to;
} PassOptions;

#define GPUC_FOLD_MAX_BYTES_DEFAULT ((int64_t)64 << 20)

void gpuc_pass_options_default(PassOptions *o, int level);
int pass_fold_constants(Graph *g, const PassOptions *o, GpucErr *e);
int pass_dead_code(Graph *g, const PassOptions *o, GpucErr *e);
int pass_identity(Graph *g, const PassOptions *o, GpucErr *e);
/* Common-subexpression elimination; returns the number of nodes merged. */
int pass_cse(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fold_batchnorm(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_conv(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fp16(Graph *g, const PassOptions *o, GpucErr *e);
/* 2-D convolutions and the elementwise ops between them in NHWC, with
 * Transposes only where values enter or leave such a region (--fp16). */
int pass_layout_nhwc(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_matmul_bias(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_attention(Graph *g, const PassOptions *o, GpucErr *e);
/* Residual Add + LayerNormalization -> AddLayerNormalization. */
int pass_fuse_add_layernorm(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_elementwise(Graph *g, const PassOptions *o, GpucErr *e);
/* --prune l1:F | 2:4 (passes/prune.c): weights of Conv and Linear layers
 * zeroed in place; returns the number of layers pruned. */
enum { GPUC_PRUNE_NONE = 0, GPUC_PRUNE_L1 = 1, GPUC_PRUNE_24 = 2 };
int pass_prune(Graph *g, const PassOptions *o, GpucErr *e);
/* "l1:F" (0 <= F <= 1) or "2:4"; -1 for anything else. */
int gpuc_prune_parse(const char *arg, int *kind, double *fraction);
#define GPUC_PRUNE_USAGE "--prune wants l1:FRACTION (0 <= FRACTION <= 1) or 2:4"
/* The weight value node n prunes under kind (-1: none) and, for a 2-D
 * weight, the axis of the reduction dim K in *kaxis. */
int gpuc_prune_target(const Graph *g, const Node *n, int kind, int *kaxis);
/* Prune one weight; returns its zeros after, -1 on error, -2 when 2:4
 * cannot apply (not 2-D, K not a multiple of 4). */
int64_t gpuc_prune_weight(Tensor *w, int kind, double fraction, int kaxis, GpucErr *e);
/* The passes that change what a model computes (--prune), as `gpuc run
 * --cpu` applies them to the imported graph: constant folding to a fixed
 * point first, as the pipeline runs it before them, so both find the same
 * weights (one behind a Transpose too). */
int gpuc_passes_reference(Graph *g, const PassOptions *o, GpucErr *e);
/* Runs the passes of o->level, verifying the graph after each. */
int gpuc_passes_run(Graph *g, const PassOptions *o, GpucErr *e);
#endif
