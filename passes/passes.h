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
  bool bf16;                     /* the same policy with bfloat16 storage (not with fp16) */
  bool training;                 /* a training graph: each parameter (Value.is_param) stays
                                    the one tensor the optimizer updates, never copied */
  int64_t fold_max_bytes;        /* largest tensor constant folding may create */
  bool int8;                     /* --int8: Linear layers on int8 GEMMs (quantize_int8.c) */
  const char *int8_skip;         /* comma-separated fnmatch globs of layer names kept in float */
  bool fp8;                      /* --fp8: Linear layers on FP8 (e4m3) GEMMs (quantize_fp8.c) */
  int prune_kind;                /* GPUC_PRUNE_*: --prune (passes/prune.c) */
  double prune_fraction;         /*   l1: the fraction of each weight zeroed */
  FILE *prune_report;            /*   per-layer sparsity lines, or NULL */
  const char *dump_after;        /* pass name to dump the graph after, or NULL */
  FILE *dump_to;
  /* Whether the compile target's int8 GEMM kernel takes the DequantizeRows
   * reading MatMulInt8 node mm's sums (and the elementwise ops after it) as
   * its epilogue: codegen's cg_int8_gemm_takes_epilogue, with sm the
   * target, set by the compile driver. fuse_quantize_rows then leaves that
   * dequantize in the GEMM. NULL (the CPU reference, no target): the row
   * kernels take it, as on cuBLASLt's int32 GEMMs. */
  bool (*int8_gemm_epilogue)(const Graph *g, int mm, int sm);
  int sm;
} PassOptions;

#define GPUC_FOLD_MAX_BYTES_DEFAULT ((int64_t)64 << 20)

void gpuc_pass_options_default(PassOptions *o, int level);
/* every pass name run_passes gives after() (--dump-after PASS), in order,
 * ", "-separated */
extern const char gpuc_pass_names[];
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
/* A Conv whose kernel equals its stride (patch embeddings) -> Reshape,
 * Transpose, MatMul (+ bias Add), Transpose (passes/patchify_conv.c). */
int pass_patchify_conv(Graph *g, const PassOptions *o, GpucErr *e);
/* fp16 storage, or bf16 with o->bf16; fp32 islands (passes/fp16.c). */
/* After fp16: Relu/Clip/HardSwish/SiLU/GELU after an NHWC depthwise
 * FusedConv into its activation attribute (ir/conv_act.h; fuse_conv.c). */
int pass_fuse_conv_act(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fp16(Graph *g, const PassOptions *o, GpucErr *e);
/* 2-D convolutions and the elementwise ops between them in NHWC, with
 * Transposes only where values enter or leave such a region (--fp16,
 * --bf16). */
int pass_layout_nhwc(Graph *g, const PassOptions *o, GpucErr *e);
/* Transposes composed, identities dropped, Transposes sunk through
 * elementwise ops, Softmax and LayerNormalization until pairs cancel. */
int pass_simplify_transpose(Graph *g, const PassOptions *o, GpucErr *e);
/* Gemm with a constant weight -> MatMul/MatMulBias; the Reshapes that
 * flatten a batch around a 2-D GEMM dropped (passes/gemm_as_matmul.c). */
/* a two-input Einsum that is a batched matrix product as MatMul (+ Transposes) */
int pass_einsum_matmul(Graph *g, const PassOptions *o, GpucErr *e);
/* 5-D attention ([B,G,H,S,D], MaxViT) folded to 4-D for fuse_attention
 * (passes/attention_fold.c) */
int pass_attention_fold(Graph *g, const PassOptions *o, GpucErr *e);
int pass_gemm_as_matmul(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_matmul_bias(Graph *g, const PassOptions *o, GpucErr *e);
/* Mul(MatMul[Bias](x, W[, b]), c), c constant (one value or one per
 * column) -> MatMul[Bias](x, W c[, b c]) (passes/fold_gemm_scale.c);
 * -O2, not in training */
int pass_fold_gemm_scale(Graph *g, const PassOptions *o, GpucErr *e);
/* A GELU written out as elementwise ops (tanh or erf form, recognized by
 * evaluating it) -> one Gelu node (passes/fuse_gelu.c). */
int pass_fuse_gelu(Graph *g, const PassOptions *o, GpucErr *e);
/* an RMSNorm written out (Pow, ReduceMean, Add, Sqrt, Div/Reciprocal, Mul, scale Mul) -> one
 * RMSNormalization node (passes/fuse_rmsnorm.c); -O2, not in training */
int pass_fuse_rmsnorm(Graph *g, const PassOptions *o, GpucErr *e);
/* F.normalize over the last axis written out (ReduceL2, Clip/Max eps, Div,
 * optional per-row scale Mul) -> one L2NormRows node reading x through
 * the Transposes/Gathers in front of it (passes/fuse_l2norm.c); -O2, not
 * in training */
int pass_fuse_l2norm(Graph *g, const PassOptions *o, GpucErr *e);
/* Slice node n (any opset's form) takes [*start, +count) of `axis` of its
 * input, count its output's dim there, step 1, and all of every other
 * axis (passes/channel_shuffle.c) */
bool pass_axis_slice(const Graph *g, const Node *n, int axis, int64_t *start);
/* HF's rotate-half rotary embedding written out (Slices, Neg, Concat, two
 * Muls, Add) -> one RotaryHalf node (passes/fuse_rotary.c); -O2, not in
 * training */
int pass_fuse_rotary(Graph *g, const PassOptions *o, GpucErr *e);
/* LLaMA's SwiGLU: silu(x Wg) * (x Wu) -> GatedUnit(x [Wg | Wu]), one GEMM
 * (passes/fuse_gated_mlp.c); -O2, not in training */
int pass_fuse_gated_mlp(Graph *g, const PassOptions *o, GpucErr *e);
/* MatMulBias + Relu / Gelu (erf GELU only with fp16) -> MatMulBias with
 * attribute activation, cuBLASLt's epilogue. */
int pass_fuse_matmul_act(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_attention(Graph *g, const PassOptions *o, GpucErr *e);
/* Concat(Slice(x, a:n), Slice(x, 0:a)) on one axis (torch.roll) -> Gather
 * of a constant rotated index (roll_gather.c) */
int pass_roll_gather(Graph *g, const PassOptions *o, GpucErr *e);
/* Concat of strided Slices of one value (a space-to-depth: Swin's
 * PatchMerging) -> Reshape, Transpose, Reshape (strided_concat.c) */
int pass_strided_concat(Graph *g, const PassOptions *o, GpucErr *e);
/* Concat + channel shuffle (Reshape, Transpose, Reshape) + the Slices or
 * Split after it as one ChannelShuffle node (passes/channel_shuffle.c). */
int pass_channel_shuffle(Graph *g, const PassOptions *o, GpucErr *e);
/* Attention's Q, K, V as strided views of the tensors the copies read; their
 * three projections as one GEMM (passes/attention_views.c) */
int pass_attention_views(Graph *g, const PassOptions *o, GpucErr *e);
/* After it: Attention reads K/V before a repeat_kv (grouped-query heads),
 * a causal mask becomes attribute causal (passes/attention_gqa_causal.c). */
int pass_attention_gqa_causal(Graph *g, const PassOptions *o, GpucErr *e);
/* Add(MatMulBias/MatMul, R) -> MatMulBias(A, B, bias, R): the residual as
 * the GEMM's C operand (passes/fuse_residual_gemm.c). */
int pass_fuse_residual_gemm(Graph *g, const PassOptions *o, GpucErr *e);
/* Residual Add + LayerNormalization -> AddLayerNormalization. */
int pass_fuse_add_layernorm(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_elementwise(Graph *g, const PassOptions *o, GpucErr *e);
int pass_fuse_quantize_rows(Graph *g, const PassOptions *o, GpucErr *e);
/* --int8 (o->int8): MatMul/Gemm/MatMulBias with constant weights ->
 * QuantizeRows + MatMulInt8 + DequantizeRows; returns the layers changed. */
int pass_quantize_int8(Graph *g, const PassOptions *o, GpucErr *e);
/* Static Q/DQ: Linear layers reading DequantizeLinear(int8, scale, 0) run
 * on the int8 GEMM with those int8 values (-O2, with or without --int8). */
int pass_qdq_int8(Graph *g, const PassOptions *o, GpucErr *e);
/* MatMulInteger with u8 activations and constant int8 weights (ORT's
 * quantize_dynamic) -> the int8 GEMM with an exact zero-point correction
 * (matmulinteger_int8.c); -O2, with or without --int8. */
int pass_matmulinteger_int8(Graph *g, const PassOptions *o, GpucErr *e);
/* QLinearMatMul / QLinearConv / ConvInteger -> MatMulInteger and f32 Convs
 * on integer values, requantized by QuantizeLinear (passes/expand_qlinear.c) */
int pass_expand_qlinear(Graph *g, const PassOptions *o, GpucErr *e);
/* The int8 layers of a graph after the passes; with o->int8 also the
 * Linear layers kept in float and why, or a note that nothing was
 * quantized (without it, nothing when there are no int8 layers: a
 * quantized model's own int8 GEMMs are listed). */
void gpuc_int8_report(const Graph *g, const PassOptions *o, FILE *f);
/* --fp8 (o->fp8): MatMul/Gemm/MatMulBias with constant weights ->
 * QuantizeRowsF8 + MatMulF8 (scales and bias in the GEMM); returns the
 * layers changed. gpuc_fp8_report lists them and those kept in float. */
int pass_quantize_fp8(Graph *g, const PassOptions *o, GpucErr *e);
void gpuc_fp8_report(const Graph *g, const PassOptions *o, FILE *f);
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
/* Runs the passes of o->level, verifying the graph after each. */
int gpuc_passes_run(Graph *g, const PassOptions *o, GpucErr *e);

/* The scratch most rewrite passes share: readers[v] / last[v] per value
 * (gpuc_graph_count_readers, counted once before the rewrites) and drop[i]
 * per node (gpuc_graph_remove_nodes at the end). pass_scratch_new returns
 * -1 with e set when out of memory. */
typedef struct PassScratch {
  int *readers, *last;
  bool *drop;
} PassScratch;
int pass_scratch_new(Graph *g, PassScratch *s, GpucErr *e);
void pass_scratch_free(PassScratch *s);
/* Pattern helpers of the rewrite passes (passes/pass_scratch.c):
 * the producer of value v when it is op with one output that only the
 * pattern reads (readers[v] == 1) and no graph output, else NULL; */
Node *pass_sole_producer(Graph *g, int v, GpucOp op, const int *readers);
/* v a one-element float constant: true, its value in *x; */
bool pass_const_scalar(const Graph *g, int v, double *x);
/* environment switch `name` set to anything but "" or "0" (the
 * GPUC_NO_<REWRITE>=1 switches of GPU A/B runs); */
bool pass_env_on(const char *name);
/* a new Transpose node `name` reading value in, writing value out (its
 * producer set) by perm [rank]: the node, or -1 out of memory; */
int pass_add_transpose(Graph *g, const char *name, int in, int out, const int *perm, int rank);
/* node ni's attributes replaced by one: perm [rank] (a node made or turned
 * into a Transpose): 0, or -1 out of memory; */
int pass_set_perm(Graph *g, int ni, const int *perm, int rank);
/* a new i64 constant [rank] named `name` holding dims (a Reshape's
 * shape): the value, or -1 with e set; */
int pass_shape_const(Graph *g, const char *name, int rank, const int64_t *dims, GpucErr *e);
/* reduction node m (axes as attribute or input) over x's last axis only,
 * keepdims 1. */
bool pass_reduces_last_axis(Graph *g, const Node *m, const Tensor *x);

#endif
