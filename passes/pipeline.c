/* The pass pipeline per -O level. */
#include "passes.h"
#include <stdio.h>
#include <string.h>

void gpuc_pass_options_default(PassOptions *o, int level) {
  memset(o, 0, sizeof *o);
  o->level = level;
  o->fold_max_bytes = GPUC_FOLD_MAX_BYTES_DEFAULT;
}

const char gpuc_pass_names[] =
    "fold, expand_qlinear, prune, identity, cse, fold_bn, dce, roll_gather, strided_concat, channel_shuffle, batchnorm_affine, fold_conv_bias, patchify_conv, "
    "fuse_conv, einsum_matmul, gemm_as_matmul, fuse_gelu, fuse_rmsnorm, fuse_rotary, fuse_gated_mlp, fuse_matmul, fold_gemm_scale, matmulinteger_int8, fuse_matmul_act, attention_fold, fuse_attention, "
    "attention_gqa_causal, attention_views, fuse_l2norm, fuse_add_layernorm, layout_nhwc, simplify_transpose, attention_views_nhwc, fp16, "
    "fuse_conv_act, qdq_int8, quantize_int8, quantize_fp8, fuse_residual_gemm, fuse_elementwise, "
    "fuse_quantize_rows";

static int after(Graph *g, const PassOptions *o, const char *name, int rc, GpucErr *e) {
  GPUC_ASSERT(strstr(gpuc_pass_names, name)); /* --dump-after offers the list: keep it whole */
  if (rc < 0) return -1;
  if (gpuc_graph_verify(g, e)) {
    char what[128];
    snprintf(what, sizeof what, "after pass %s", name);
    gpuc_err_prefix(e, what);
    return -1;
  }
  if (o->dump_after && !strcmp(o->dump_after, name)) {
    fprintf(o->dump_to ? o->dump_to : stdout, "# after %s\n", name);
    gpuc_graph_dump(g, o->dump_to ? o->dump_to : stdout);
  }
  return rc;
}

static int fold_to_fixed_point(Graph *g, const PassOptions *o, GpucErr *e) {
  /* Folding makes values known, inference then knows more shapes, which
   * lets more nodes fold (shape chains): iterate to a fixed point. */
  for (int round = 0; round < 16; round++) {
    int changed = after(g, o, "fold", pass_fold_constants(g, o, e), e);
    if (changed < 0) return -1;
    if (gpuc_graph_infer(g, e)) return -1;
    if (changed == 0) break;
  }
  return 0;
}

static int run_passes(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->fp16 && o->bf16) return gpuc_err_set(e, "%s: --fp16 and --bf16 exclude each other", g->path);
  if (o->level < 1) return 0;
  if (fold_to_fixed_point(g, o, e)) return -1;
  /* quantized operators from other tools into ops that lower (their
   * weights and scales are known now) */
  if (after(g, o, "expand_qlinear", pass_expand_qlinear(g, o, e), e) < 0) return -1;
  /* first after folding: the weights as the model has them (BatchNorm not
   * yet folded into a Conv's weight, as torch prunes the Conv module's) */
  if (o->prune_kind && after(g, o, "prune", pass_prune(g, o, e), e) < 0) return -1;
  if (after(g, o, "identity", pass_identity(g, o, e), e) < 0) return -1;
  if (after(g, o, "cse", pass_cse(g, o, e), e) < 0) return -1;
  if (after(g, o, "fold_bn", pass_fold_batchnorm(g, o, e), e) < 0) return -1;
  if (after(g, o, "dce", pass_dead_code(g, o, e), e) < 0) return -1;
  /* torch.roll's Slice + Concat as one Gather (the bounds folded) */
  if (o->level >= 2 && after(g, o, "roll_gather", pass_roll_gather(g, o, e), e) < 0) return -1;
  /* strided Slices + Concat (space-to-depth) as one Transpose */
  if (o->level >= 2 && after(g, o, "strided_concat", pass_strided_concat(g, o, e), e) < 0) return -1;
  /* ShuffleNet's Concat + channel shuffle + chunk as one copy; before
   * layout_nhwc, which keeps the node inside an NHWC region */
  if (o->level >= 2 && after(g, o, "channel_shuffle", pass_channel_shuffle(g, o, e), e) < 0) return -1;
  /* after fold_bn: BNs no Conv absorbed become elementwise ops */
  if (o->level >= 2 && after(g, o, "batchnorm_affine", pass_batchnorm_affine(g, o, e), e) < 0) return -1;
  if (o->level >= 2 && after(g, o, "fold_conv_bias", pass_fold_conv_bias(g, o, e), e) < 0) return -1;
  /* after the BN and bias folds (the conv's final weight and bias), before
   * fuse_conv and layout_nhwc (no Conv left for them) and fuse_matmul (the
   * bias Add into the GEMM's epilogue) */
  if (o->level >= 2 && after(g, o, "patchify_conv", pass_patchify_conv(g, o, e), e) < 0) return -1;
  if (o->level >= 2 && after(g, o, "fuse_conv", pass_fuse_conv(g, o, e), e) < 0) return -1;
  /* MaxViT's attention Einsums as cuBLASLt GEMMs (fp16 where the policy allows) */
  if (o->level >= 2 && after(g, o, "einsum_matmul", pass_einsum_matmul(g, o, e), e) < 0) return -1;
  if (o->level >= 2 && after(g, o, "gemm_as_matmul", pass_gemm_as_matmul(g, o, e), e) < 0) return -1;
  /* before fuse_matmul(_act): a GELU written out becomes one Gelu their epilogue takes */
  if (o->level >= 2 && after(g, o, "fuse_gelu", pass_fuse_gelu(g, o, e), e) < 0) return -1;
  /* an RMSNorm written out as one norm node (one row kernel, no fp32 island) */
  if (o->level >= 2 && after(g, o, "fuse_rmsnorm", pass_fuse_rmsnorm(g, o, e), e) < 0) return -1;
  /* HF's rotate-half rotary embedding as one RotaryHalf node (one kernel) */
  if (o->level >= 2 && after(g, o, "fuse_rotary", pass_fuse_rotary(g, o, e), e) < 0) return -1;
  /* a SwiGLU's gate and up projections as one GEMM and a GatedUnit */
  if (o->level >= 2 && after(g, o, "fuse_gated_mlp", pass_fuse_gated_mlp(g, o, e), e) < 0) return -1;
  if (o->level >= 2 && after(g, o, "fuse_matmul", pass_fuse_matmul_bias(g, o, e), e) < 0) return -1;
  /* a constant scale after a Linear layer into its weights (Whisper's q_proj * scaling) */
  if (o->level >= 2 && after(g, o, "fold_gemm_scale", pass_fold_gemm_scale(g, o, e), e) < 0) return -1;
  /* an exact rewrite of integer math: quantized models from other tools */
  if (o->level >= 2 && after(g, o, "matmulinteger_int8", pass_matmulinteger_int8(g, o, e), e) < 0) return -1;
  if (o->level >= 2 && after(g, o, "fuse_matmul_act", pass_fuse_matmul_act(g, o, e), e) < 0) return -1;
  /* before fp16: it matches the fp32 pattern, and Attention then runs on
   * half storage with fp32 math like the nodes it replaces */
  if (o->level >= 2 && after(g, o, "attention_fold", pass_attention_fold(g, o, e), e) < 0) return -1;
  if (o->level >= 2 && after(g, o, "fuse_attention", pass_fuse_attention(g, o, e), e) < 0) return -1;
  /* right after: K/V read before a repeat_kv, causal masks as an attribute;
   * then Q, K, V read in place (no Split/Transpose copies), one QKV GEMM */
  if (o->level >= 2 && after(g, o, "attention_gqa_causal", pass_attention_gqa_causal(g, o, e), e) < 0) return -1;
  if (o->level >= 2 && after(g, o, "attention_views", pass_attention_views(g, o, e), e) < 0) return -1;
  /* F.normalize(x, -1) [* a per-row scale] as one L2NormRows node reading
   * x in place (Swin V2's cosine attention: no q/k Transpose or Gather
   * copies); after fuse_attention, which moves the logit scale from the
   * scores onto q, where this takes it */
  if (o->level >= 2 && after(g, o, "fuse_l2norm", pass_fuse_l2norm(g, o, e), e) < 0) return -1;
  /* before fp16 too: it then gets LayerNormalization's treatment (half
   * storage, fp32 statistics in the kernel) */
  if (o->level >= 2 && after(g, o, "fuse_add_layernorm", pass_fuse_add_layernorm(g, o, e), e) < 0) return -1;
  /* NHWC for half tensor cores; fp32 convs stay NCHW (FMA math, no TF32) */
  bool half = o->fp16 || o->bf16;
  if (o->level >= 2 && half && after(g, o, "layout_nhwc", pass_layout_nhwc(g, o, e), e) < 0) return -1;
  /* after layout_nhwc: its edge Transposes meet the model's own permutes
   * (ConvNeXt's around each LayerNorm) and cancel */
  if (o->level >= 2 && after(g, o, "simplify_transpose", pass_simplify_transpose(g, o, e), e) < 0) return -1;
  /* again after the NHWC layout: an attention on a conv's channels (CoAtNet's
   * 1x1 qkv conv) has its head dim contiguous only now, so the to_nchw
   * Transpose, the head Slices and the q/k/v Transposes become views */
  if (o->level >= 2 && half && !pass_env_on("GPUC_NO_ATTENTION_VIEWS_NHWC") &&
      after(g, o, "attention_views_nhwc", pass_attention_views(g, o, e), e) < 0)
    return -1;
  /* the pass is "fp16" for --dump-after with either half type */
  if (half && after(g, o, "fp16", pass_fp16(g, o, e), e) < 0) return -1;
  /* after fp16 (the activation's dtype is the conv's), before
   * fuse_elementwise (which would split the conv's bias off) */
  if (o->level >= 2 && half && after(g, o, "fuse_conv_act", pass_fuse_conv_act(g, o, e), e) < 0) return -1;
  /* after fuse_matmul (MatMulBias's bias goes to the dequantize step) and
   * after fp16 (the precision of everything else is decided; Y keeps it) */
  if (o->level >= 2 && after(g, o, "qdq_int8", pass_qdq_int8(g, o, e), e) < 0) return -1;
  if (o->int8 && after(g, o, "quantize_int8", pass_quantize_int8(g, o, e), e) < 0) return -1;
  if (o->fp8 && after(g, o, "quantize_fp8", pass_quantize_fp8(g, o, e), e) < 0) return -1;
  /* after fuse_add_layernorm (which keeps the Adds only a LayerNorm reads)
   * and the quantizing passes (their GEMMs take no C): the residual Adds
   * left become the GEMM's C operand */
  if (o->level >= 2 && after(g, o, "fuse_residual_gemm", pass_fuse_residual_gemm(g, o, e), e) < 0) return -1;
  /* last: groups are over the final nodes, Casts from the fp16 pass too */
  if (o->level >= 2 && after(g, o, "fuse_elementwise", pass_fuse_elementwise(g, o, e), e) < 0) return -1;
  /* after it: the int8/fp8 row quantize and dequantize steps join the groups and norms beside them */
  if (o->level >= 2 && after(g, o, "fuse_quantize_rows", pass_fuse_quantize_rows(g, o, e), e) < 0) return -1;
  return 0;
}

int gpuc_passes_run(Graph *g, const PassOptions *o, GpucErr *e) {
  if (run_passes(g, o, e)) return -1;
  /* an intermediate over the one-tensor cap that no fusion removed (the
   * scores of an unfused attention) is refused now, naming its node */
  return gpuc_graph_check_sizes(g, e);
}
