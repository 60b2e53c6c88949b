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
/* Inference BatchNormalization no Conv absorbed -> Mul and Add per channel. */
int pass_batchnorm_affine(Graph *g, const PassOptions *o, GpucErr *e);
/* A Conv's bias into the next, unpadded Conv's bias when that alone reads it. */
int pass_fold_conv_bias(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_conv(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fp16(Graph *g, const PassOptions *o, GpucErr *e);
/* 2-D convolutions and the elementwise ops between them in NHWC, with
 * Transposes only where values enter or leave such a region (--fp16). */
int pass_layout_nhwc(Graph *g, const PassOptions *o, GpucErr *e);
/* Transposes composed, identities dropped, Transposes sunk through
 * elementwise ops, Softmax and LayerNormalization until pairs cancel. */
int pass_simplify_transpose(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_matmul_bias(Graph *g, const PassOptions *o, GpucErr *e);
/* MatMulBias + Relu / Gelu (erf GELU only with fp16) -> MatMulBias with
 * attribute activation, cuBLASLt's epilogue. */
int pass_fuse_matmul_act(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_attention(Graph *g, const PassOptions *o, GpucErr *e);
/* Residual Add + LayerNormalization -> AddLayerNormalization. */
int pass_fuse_add_layernorm(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_elementwise(Graph *g, const PassOptions *o, GpucErr *e);
/* Runs the passes of o->level, verifying the graph after each. */
int gpuc_passes_run(Graph *g, const PassOptions *o, GpucErr *e);
#endif
