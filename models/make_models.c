/* Builds the models gpuc bundles, with seeded random weights:
 *   small_cnn.onnx  the README's default model: a 28x28 grayscale
 *                   classifier (Conv-Relu-MaxPool x2, Flatten, Gemm-Relu-Gemm
 *                   1568-128-10; a GlobalAveragePool head tops out below
 *                   Fashion-MNIST's 90%), input "image" [1,1,28,28], output
 *                   "logits" [1,10]
 *   mlp.onnx        784-256-10 MLP for Fashion-MNIST, batch symbolic
 *   mlp_dropout.onnx  mlp with mlp's weights and a training-mode Dropout
 *                   (ratio 0.3) after the hidden Relu, as PyTorch exports
 *                   with TrainingMode.TRAINING: Dropout(h, ratio,
 *                   training_mode = true), both initializers
 *   mlp_dropout0.onnx  the same with ratio 0 (trains exactly as mlp)
 *   resnet18.onnx   ResNet-18 topology as PyTorch exports it (Conv without
 *                   bias + BatchNormalization + Relu, residual Add), input
 *                   "input" [batch,3,224,224] with a symbolic batch
 *   resnet50.onnx   ResNet-50 (v1.5 bottlenecks), same conventions
 *   shape_chain.onnx  Shape-Gather-Unsqueeze-Concat-Reshape, for folding tests
 *   ffn_block.onnx  a BERT feed-forward block as PyTorch exports it, for the
 *                   fusion passes: MatMul + bias Add, the Erf GELU chain,
 *                   MatMul + bias, residual Add, LayerNormalization, then a
 *                   broadcast gate; input "x" [batch,16,64]; a second
 *                   output scales the transposed LayerNorm output, two
 *                   more are its Softmax and LogSoftmax (the residual Add
 *                   is read by the LayerNormalization only, as in BERT)
 *   small_bn_cnn.onnx  small_cnn with BatchNormalization after each Conv
 *                   (no Conv bias), as PyTorch exports a model in eval mode:
 *                   training_mode absent, running statistics as initializers;
 *                   input "image" [batch,1,28,28], for the BatchNorm training
 *                   tests
 *   resnet_block.onnx  two ResNet BasicBlocks as PyTorch exports them: an
 *                   identity block (conv-bn-relu-conv-bn + x, relu) on
 *                   "x" [2,16,12,12], then a strided one with a 1x1
 *                   projection shortcut -> "y" [2,32,6,6]; for the NHWC
 *                   layout pass (one region: a Transpose in, one out)
 *   attention.onnx  two multi-head attention blocks over "x" [batch,33,64]
 *                   and "mem" [batch,20,64], for passes/fuse_attention.c:
 *                   self-attention exported TorchScript-SDPA style (H 4, D
 *                   16: Q and the transposed K scaled by sqrt(1/4) each,
 *                   mask "mask" [batch,1,1,33] added, Softmax, Where(IsNaN)),
 *                   output "y"; then cross-attention of y over mem, eager
 *                   style (H 2, D 32, 20 keys: MatMul(Q, Transpose(K)), Div
 *                   by sqrt(32), mask-free Softmax), output "z"
 *   attention_bert.onnx  BERT-base's attention shape, SDPA style, on inputs
 *                   "q", "k", "v" [batch,12,128,64] and "mask"
 *                   [batch,1,1,128]: output "o" [batch,12,128,64]
 *   attention_shapes.onnx  four independent attention blocks on inputs
 *                   qN, kN, vN (and maskN) of fixed shapes, for the kernels'
 *                   edge cases: D 128 with 70 queries, 130 keys and a full
 *                   [B,H,Sq,Sk] mask; D 80 / Dv 64 with a rank-1 [Sk] mask
 *                   (eager Div); D 7 / Dv 9 without a mask; one query, one
 *                   key, D 24; outputs oN; then SDPA style (Where(IsNaN))
 *                   with a constant [1,1,20,70] mask: query row 0 masked
 *                   out entirely (its output is 0), row 2 on keys 0..63
 *                   (a whole key tile -inf before finite scores)
 *   add_layernorm.onnx  four residual Add + LayerNormalization pairs on
 *                   fixed-shape inputs aN, bN, outputs yN, for the
 *                   AddLayerNormalization kernels: rows of 768 with bias
 *                   (BERT's; one warp per row), rows of 2048 (one block
 *                   per row), rows of 16 without bias (one thread per
 *                   row), axis 1 over [5,40] with a [5,1] scale (broadcast
 *                   within the row: the general kernel)
 *   linears.onnx    three Linear layers whose outputs are graph outputs, for
 *                   --int8 on the GPU (int8 GEMM results seen directly):
 *                   "x" [batch,8,64] -> fc_a (MatMul + Add, 96 out) -> "y";
 *                   x -> fc_b (32 out) -> Relu -> "r"; "v" [batch,64] ->
 *                   fc_c (Gemm, transB, 48 out) -> "z"; "w" [batch,64] ->
 *                   fc_d (Gemm, no transB, alpha 0.5, beta 2, C [1,16]) -> "g"
 * usage: make_models OUTDIR */
#include "onnx_builder.h"
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seed = 42;

/* He-uniform weights: bound sqrt(6/fan_in) keeps activations O(1). */
static void weights(OnnxBuilder *b, const char *name, int rank, const int64_t *dims, int64_t fan_in) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *w = malloc(sizeof *w * (size_t)n), bound = sqrtf(6.0f / (float)fan_in);
  for (int64_t i = 0; i < n; i++) w[i] = ob_rand(&seed) * bound;
  ob_init_f32(b, name, rank, dims, w);
  free(w);
}

static void constant_vec(OnnxBuilder *b, const char *name, int64_t n, float base, float jitter) {
  float *v = malloc(sizeof *v * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = base + jitter * ob_rand(&seed);
  ob_init_f32(b, name, 1, &n, v);
  free(v);
}

static void conv(OnnxBuilder *b, const char *name, const char *x, const char *y, int64_t cin,
                 int64_t cout, int64_t k, int64_t stride, bool bias) {
  char w[128], bn[128];
  snprintf(w, sizeof w, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  int64_t wd[4] = {cout, cin, k, k};
  weights(b, w, 4, wd, cin * k * k);
  if (bias) constant_vec(b, bn, cout, 0.0f, 0.05f);
  const char *ins[] = {x, w, bias ? bn : NULL, NULL};
  const char *outs[] = {y, NULL};
  ob_node(b, "Conv", name, ins, outs);
  int64_t ks[2] = {k, k}, st[2] = {stride, stride}, p = k / 2, pads[4] = {p, p, p, p};
  ob_attr_ints(b, "kernel_shape", 2, ks);
  ob_attr_ints(b, "strides", 2, st);
  ob_attr_ints(b, "pads", 4, pads);
}

static void batchnorm(OnnxBuilder *b, const char *name, const char *x, const char *y, int64_t c) {
  char g[128], be[128], m[128], v[128];
  snprintf(g, sizeof g, "%s.weight", name);
  snprintf(be, sizeof be, "%s.bias", name);
  snprintf(m, sizeof m, "%s.running_mean", name);
  snprintf(v, sizeof v, "%s.running_var", name);
  constant_vec(b, g, c, 1.0f, 0.1f);
  constant_vec(b, be, c, 0.0f, 0.1f);
  constant_vec(b, m, c, 0.0f, 0.1f);
  constant_vec(b, v, c, 1.0f, 0.1f);
  const char *ins[] = {x, g, be, m, v, NULL}, *outs[] = {y, NULL};
  ob_node(b, "BatchNormalization", name, ins, outs);
  ob_attr_f(b, "epsilon", 1e-5f);
}

static void unary(OnnxBuilder *b, const char *op, const char *name, const char *x, const char *y) {
  const char *ins[] = {x, NULL}, *outs[] = {y, NULL};
  ob_node(b, op, name, ins, outs);
}

static void gemm(OnnxBuilder *b, const char *name, const char *x, const char *y, int64_t in,
                 int64_t out) {
  char w[128], bias[128];
  snprintf(w, sizeof w, "%s.weight", name);
  snprintf(bias, sizeof bias, "%s.bias", name);
  int64_t wd[2] = {out, in};
  weights(b, w, 2, wd, in);
  constant_vec(b, bias, out, 0.0f, 0.05f);
  const char *ins[] = {x, w, bias, NULL}, *outs[] = {y, NULL};
  ob_node(b, "Gemm", name, ins, outs);
  ob_attr_i(b, "transB", 1);
}

static void maxpool(OnnxBuilder *b, const char *name, const char *x, const char *y, int64_t k,
                    int64_t s, int64_t p) {
  unary(b, "MaxPool", name, x, y);
  int64_t ks[2] = {k, k}, st[2] = {s, s}, pads[4] = {p, p, p, p};
  ob_attr_ints(b, "kernel_shape", 2, ks);
  ob_attr_ints(b, "strides", 2, st);
  ob_attr_ints(b, "pads", 4, pads);
}

static int small_cnn(const char *dir) {
  OnnxBuilder *b = ob_new("small_cnn", 17);
  int64_t in[4] = {1, 1, 28, 28}, out[2] = {1, 10};
  ob_input(b, "image", 1, 4, in, NULL);
  conv(b, "conv1", "image", "c1", 1, 16, 3, 1, true);
  unary(b, "Relu", "relu1", "c1", "r1");
  maxpool(b, "pool1", "r1", "p1", 2, 2, 0);
  conv(b, "conv2", "p1", "c2", 16, 32, 3, 1, true);
  unary(b, "Relu", "relu2", "c2", "r2");
  maxpool(b, "pool2", "r2", "p2", 2, 2, 0);
  unary(b, "Flatten", "flatten", "p2", "f");
  gemm(b, "fc1", "f", "h", 32 * 7 * 7, 128);
  unary(b, "Relu", "relu3", "h", "r3");
  gemm(b, "fc2", "r3", "logits", 128, 10);
  ob_output(b, "logits", 1, 2, out);
  char path[4096];
  snprintf(path, sizeof path, "%s/small_cnn.onnx", dir);
  return ob_save(b, path);
}

/* The MLP named `name`; with ratio >= 0, a training-mode Dropout after the
 * hidden Relu. */
static int mlp_model(const char *dir, const char *name, float ratio) {
  OnnxBuilder *b = ob_new(name, 17);
  int64_t in[2] = {-1, 784}, out[2] = {-1, 10};
  ob_input(b, "image", 1, 2, in, "batch");
  gemm(b, "fc1", "image", "h", 784, 256);
  unary(b, "Relu", "relu1", "h", "hr");
  const char *hidden = "hr";
  if (ratio >= 0) {
    static const uint8_t on = 1;
    ob_init_f32(b, "dropout.ratio", 0, NULL, &ratio);
    ob_init_bool(b, "dropout.training_mode", 0, NULL, &on);
    const char *ins[] = {"hr", "dropout.ratio", "dropout.training_mode", NULL}, *outs[] = {"hd", NULL};
    ob_node(b, "Dropout", "dropout1", ins, outs);
    hidden = "hd";
  }
  gemm(b, "fc2", hidden, "logits", 256, 10);
  ob_output(b, "logits", 1, 2, out);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  return ob_save(b, path);
}

/* mlp, then the Dropout variants with the same weights (the generator
 * rewound for them and left where mlp alone leaves it, so the models
 * built after these do not change) */
static int mlp(const char *dir) {
  uint64_t start = seed;
  if (mlp_model(dir, "mlp", -1)) return 1;
  uint64_t after = seed;
  seed = start;
  if (mlp_model(dir, "mlp_dropout", 0.3f)) return 1;
  seed = start;
  if (mlp_model(dir, "mlp_dropout0", 0.0f)) return 1;
  seed = after;
  return 0;
}

/* One BasicBlock: conv3x3-bn-relu-conv3x3-bn (+ downsample) + x, relu */
static void basic_block(OnnxBuilder *b, const char *pre, const char *x, const char *y,
                        int64_t cin, int64_t cout, int64_t stride) {
  char n[8][160];
  const char *names[] = {"conv1", "bn1", "relu1", "conv2", "bn2", "down", "downbn", "add"};
  char t[8][160];
  for (int i = 0; i < 8; i++) {
    snprintf(n[i], sizeof n[i], "%s.%s", pre, names[i]);
    snprintf(t[i], sizeof t[i], "%s.%s.out", pre, names[i]);
  }
  conv(b, n[0], x, t[0], cin, cout, 3, stride, false);
  batchnorm(b, n[1], t[0], t[1], cout);
  unary(b, "Relu", n[2], t[1], t[2]);
  conv(b, n[3], t[2], t[3], cout, cout, 3, 1, false);
  batchnorm(b, n[4], t[3], t[4], cout);
  const char *shortcut = x;
  if (stride != 1 || cin != cout) {
    conv(b, n[5], x, t[5], cin, cout, 1, stride, false);
    batchnorm(b, n[6], t[5], t[6], cout);
    shortcut = t[6];
  }
  const char *ins[] = {t[4], shortcut, NULL}, *outs[] = {t[7], NULL};
  ob_node(b, "Add", n[7], ins, outs);
  char rn[160];
  snprintf(rn, sizeof rn, "%s.relu", pre);
  unary(b, "Relu", rn, t[7], y);
}

static int resnet18(const char *dir) {
  OnnxBuilder *b = ob_new("resnet18", 17);
  int64_t in[4] = {-1, 3, 224, 224}, out[2] = {-1, 1000};
  ob_input(b, "input", 1, 4, in, "batch");
  conv(b, "conv1", "input", "c1", 3, 64, 7, 2, false);
  batchnorm(b, "bn1", "c1", "b1", 64);
  unary(b, "Relu", "relu", "b1", "r1");
  maxpool(b, "maxpool", "r1", "x0", 3, 2, 1);
  const int64_t widths[4] = {64, 128, 256, 512};
  char prev[64] = "x0";
  int64_t cin = 64;
  for (int s = 0; s < 4; s++)
    for (int k = 0; k < 2; k++) {
      char pre[64], y[64];
      snprintf(pre, sizeof pre, "layer%d.%d", s + 1, k);
      snprintf(y, sizeof y, "layer%d.%d.y", s + 1, k);
      basic_block(b, pre, prev, y, cin, widths[s], (s > 0 && k == 0) ? 2 : 1);
      cin = widths[s];
      snprintf(prev, sizeof prev, "%s", y);
    }
  unary(b, "GlobalAveragePool", "avgpool", prev, "gap");
  unary(b, "Flatten", "flatten", "gap", "flat");
  gemm(b, "fc", "flat", "logits", 512, 1000);
  ob_output(b, "logits", 1, 2, out);
  char path[4096];
  snprintf(path, sizeof path, "%s/resnet18.onnx", dir);
  return ob_save(b, path);
}

/* One Bottleneck (torchvision ResNet v1.5): 1x1 -> 3x3 (stride) -> 1x1 x4,
 * each with BN; projection shortcut when the shape changes. */
static void bottleneck(OnnxBuilder *b, const char *pre, const char *x, const char *y, int64_t cin,
                       int64_t width, int64_t stride) {
  int64_t cout = width * 4;
  char n[10][160], t[10][160];
  const char *names[] = {"conv1", "bn1", "relu1", "conv2", "bn2", "relu2", "conv3", "bn3", "down", "downbn"};
  for (int i = 0; i < 10; i++) {
    snprintf(n[i], sizeof n[i], "%s.%s", pre, names[i]);
    snprintf(t[i], sizeof t[i], "%s.%s.out", pre, names[i]);
  }
  conv(b, n[0], x, t[0], cin, width, 1, 1, false);
  batchnorm(b, n[1], t[0], t[1], width);
  unary(b, "Relu", n[2], t[1], t[2]);
  conv(b, n[3], t[2], t[3], width, width, 3, stride, false);
  batchnorm(b, n[4], t[3], t[4], width);
  unary(b, "Relu", n[5], t[4], t[5]);
  conv(b, n[6], t[5], t[6], width, cout, 1, 1, false);
  batchnorm(b, n[7], t[6], t[7], cout);
  const char *shortcut = x;
  if (stride != 1 || cin != cout) {
    conv(b, n[8], x, t[8], cin, cout, 1, stride, false);
    batchnorm(b, n[9], t[8], t[9], cout);
    shortcut = t[9];
  }
  char an[160], at[160], rn[160];
  snprintf(an, sizeof an, "%s.add", pre);
  snprintf(at, sizeof at, "%s.add.out", pre);
  snprintf(rn, sizeof rn, "%s.relu", pre);
  const char *ins[] = {t[7], shortcut, NULL}, *outs[] = {at, NULL};
  ob_node(b, "Add", an, ins, outs);
  unary(b, "Relu", rn, at, y);
}

/* ResNet-50 topology with a symbolic batch, for CI compiles of a real-size
 * network (the GPU machine exports torchvision's for the comparisons). */
static int resnet50(const char *dir) {
  OnnxBuilder *b = ob_new("resnet50", 17);
  int64_t in[4] = {-1, 3, 224, 224}, out[2] = {-1, 1000};
  ob_input(b, "input", 1, 4, in, "batch");
  conv(b, "conv1", "input", "c1", 3, 64, 7, 2, false);
  batchnorm(b, "bn1", "c1", "b1", 64);
  unary(b, "Relu", "relu", "b1", "r1");
  maxpool(b, "maxpool", "r1", "x0", 3, 2, 1);
  const int blocks[4] = {3, 4, 6, 3};
  const int64_t widths[4] = {64, 128, 256, 512};
  char prev[64] = "x0";
  int64_t cin = 64;
  for (int s = 0; s < 4; s++)
    for (int k = 0; k < blocks[s]; k++) {
      char pre[64], y[64];
      snprintf(pre, sizeof pre, "layer%d.%d", s + 1, k);
      snprintf(y, sizeof y, "layer%d.%d.y", s + 1, k);
      bottleneck(b, pre, prev, y, cin, widths[s], (s > 0 && k == 0) ? 2 : 1);
      cin = widths[s] * 4;
      snprintf(prev, sizeof prev, "%s", y);
    }
  unary(b, "GlobalAveragePool", "avgpool", prev, "gap");
  unary(b, "Flatten", "flatten", "gap", "flat");
  gemm(b, "fc", "flat", "logits", 2048, 1000);
  ob_output(b, "logits", 1, 2, out);
  char path[4096];
  snprintf(path, sizeof path, "%s/resnet50.onnx", dir);
  return ob_save(b, path);
}

/* MobileNetV2's pieces with every stage an output (GPU fp16 diagnosis):
 * depthwise 3x3 conv + bias -> "dw", Clip(0, 6) -> "clip",
 * 1x1 conv (no activation) + residual x -> "y". Input "x" [1,32,16,16]. */
static int mobile_block(const char *dir) {
  OnnxBuilder *b = ob_new("mobile_block", 17);
  int64_t in[4] = {1, 32, 16, 16}, scalar = 0;
  ob_input(b, "x", 1, 4, in, NULL);
  int64_t wd[4] = {32, 1, 3, 3};
  weights(b, "dw.weight", 4, wd, 9);
  constant_vec(b, "dw.bias", 32, 0.0f, 0.1f);
  const char *i1[] = {"x", "dw.weight", "dw.bias", NULL}, *o1[] = {"dw", NULL};
  ob_node(b, "Conv", "dw", i1, o1);
  int64_t ks[2] = {3, 3}, pads[4] = {1, 1, 1, 1};
  ob_attr_ints(b, "kernel_shape", 2, ks);
  ob_attr_ints(b, "pads", 4, pads);
  ob_attr_i(b, "group", 32);
  float lo = 0, hi = 6;
  ob_init_f32(b, "lo", 0, &scalar, &lo);
  ob_init_f32(b, "hi", 0, &scalar, &hi);
  const char *i2[] = {"dw", "lo", "hi", NULL}, *o2[] = {"clip", NULL};
  ob_node(b, "Clip", "relu6", i2, o2);
  conv(b, "pw", "clip", "pw.out", 32, 32, 1, 1, true);
  const char *i3[] = {"pw.out", "x", NULL}, *o3[] = {"y", NULL};
  ob_node(b, "Add", "residual", i3, o3);
  ob_output(b, "dw", 1, 4, in);
  ob_output(b, "clip", 1, 4, in);
  ob_output(b, "y", 1, 4, in);
  char path[4096];
  snprintf(path, sizeof path, "%s/mobile_block.onnx", dir);
  return ob_save(b, path);
}

/* The shape chain PyTorch exports for x.view(x.size(0), -1): folds away
 * once the batch is bound. Input "x" [batch,3,4,5] -> "y" [batch,60]. */
static int shape_chain(const char *dir) {
  OnnxBuilder *b = ob_new("shape_chain", 13);
  int64_t in[4] = {-1, 3, 4, 5}, out[2] = {-1, 60}, one = 1, zero = 0, minus1 = -1;
  ob_input(b, "x", 1, 4, in, "batch");
  ob_init_i64(b, "idx0", 0, NULL, &zero);
  ob_init_i64(b, "axes0", 1, &one, &zero);
  ob_init_i64(b, "minus1", 1, &one, &minus1);
  const char *i1[] = {"x", NULL}, *o1[] = {"shape", NULL};
  ob_node(b, "Shape", "shape", i1, o1);
  const char *i2[] = {"shape", "idx0", NULL}, *o2[] = {"batch_dim", NULL};
  ob_node(b, "Gather", "gather", i2, o2);
  ob_attr_i(b, "axis", 0);
  const char *i3[] = {"batch_dim", "axes0", NULL}, *o3[] = {"batch_1d", NULL};
  ob_node(b, "Unsqueeze", "unsqueeze", i3, o3);
  const char *i4[] = {"batch_1d", "minus1", NULL}, *o4[] = {"new_shape", NULL};
  ob_node(b, "Concat", "concat", i4, o4);
  ob_attr_i(b, "axis", 0);
  const char *i5[] = {"x", "new_shape", NULL}, *o5[] = {"y", NULL};
  ob_node(b, "Reshape", "reshape", i5, o5);
  ob_output(b, "y", 1, 2, out);
  char path[4096];
  snprintf(path, sizeof path, "%s/shape_chain.onnx", dir);
  return ob_save(b, path);
}

static void scalar(OnnxBuilder *b, const char *name, float v) {
  ob_init_f32(b, name, 0, NULL, &v);
}

static void binary(OnnxBuilder *b, const char *op, const char *name, const char *x, const char *y,
                   const char *out) {
  const char *ins[] = {x, y, NULL}, *outs[] = {out, NULL};
  ob_node(b, op, name, ins, outs);
}

/* Linear as exported: MatMul(x, W[in,out]) then Add(bias, .) (bias first, as
 * PyTorch writes it for some layers) or Add(., bias). */
static void linear(OnnxBuilder *b, const char *name, const char *x, const char *y, int64_t in,
                   int64_t out, bool bias_first) {
  char w[128], bias[128], mm[128], add[128];
  snprintf(w, sizeof w, "%s.weight", name);
  snprintf(bias, sizeof bias, "%s.bias", name);
  snprintf(mm, sizeof mm, "%s/MatMul", name);
  snprintf(add, sizeof add, "%s/Add", name);
  int64_t wd[2] = {in, out};
  weights(b, w, 2, wd, in);
  constant_vec(b, bias, out, 0.0f, 0.1f);
  char t[160];
  snprintf(t, sizeof t, "%s.mm", name);
  binary(b, "MatMul", mm, x, w, t);
  if (bias_first) binary(b, "Add", add, bias, t, y);
  else binary(b, "Add", add, t, bias, y);
}

static int ffn_block(const char *dir) {
  OnnxBuilder *b = ob_new("ffn_block", 17);
  int64_t in[3] = {-1, 16, 64};
  ob_input(b, "x", 1, 3, in, "batch");
  linear(b, "fc1", "x", "h", 64, 256, false);
  /* GELU: h * (erf(h / sqrt 2) + 1) * 0.5 */
  scalar(b, "sqrt2", 1.4142135f);
  scalar(b, "one", 1.0f);
  scalar(b, "half", 0.5f);
  binary(b, "Div", "gelu/Div", "h", "sqrt2", "g1");
  unary(b, "Erf", "gelu/Erf", "g1", "g2");
  binary(b, "Add", "gelu/Add", "g2", "one", "g3");
  binary(b, "Mul", "gelu/Mul", "h", "g3", "g4");
  binary(b, "Mul", "gelu/Mul_1", "g4", "half", "g5");
  linear(b, "fc2", "g5", "o", 256, 64, true);
  binary(b, "Add", "residual", "o", "x", "r");
  constant_vec(b, "ln.weight", 64, 1.0f, 0.1f);
  constant_vec(b, "ln.bias", 64, 0.0f, 0.1f);
  const char *li[] = {"r", "ln.weight", "ln.bias", NULL}, *lo[] = {"n", NULL};
  ob_node(b, "LayerNormalization", "ln", li, lo);
  ob_attr_i(b, "axis", -1);
  ob_attr_f(b, "epsilon", 1e-5f);
  /* a gate broadcast over rows, Sigmoid, Where on a comparison, Clip */
  constant_vec(b, "gate.weight", 64, 1.0f, 0.5f);
  binary(b, "Mul", "gate/Mul", "n", "gate.weight", "q1");
  unary(b, "Sigmoid", "gate/Sigmoid", "q1", "q2");
  binary(b, "Mul", "gate/Mul_1", "n", "q2", "q3");
  scalar(b, "zero", 0.0f);
  binary(b, "Less", "gate/Less", "q3", "zero", "neg");
  const char *wi[] = {"neg", "zero", "q3", NULL}, *wo[] = {"q4", NULL};
  ob_node(b, "Where", "gate/Where", wi, wo);
  scalar(b, "cap", 2.0f);
  const char *ci[] = {"q4", "zero", "cap", NULL}, *co[] = {"y", NULL};
  ob_node(b, "Clip", "gate/Clip", ci, co);
  ob_output(b, "y", 1, 3, in);
  /* second output: the LayerNorm output transposed and scaled (attention's
   * q * s) */
  const char *ti[] = {"n", NULL}, *to[] = {"rt", NULL};
  ob_node(b, "Transpose", "t/Transpose", ti, to);
  int64_t perm[3] = {1, 0, 2}, tdims[3] = {16, -1, 64}; /* innermost dim kept: fusable */
  ob_attr_ints(b, "perm", 3, perm);
  scalar(b, "scale", 0.125f);
  binary(b, "Mul", "t/Mul", "rt", "scale", "t");
  ob_output(b, "t", 1, 3, tdims);
  /* third and fourth: softmax / log-softmax of the LayerNorm output over
   * its rows */
  const char *si[] = {"n", NULL}, *so[] = {"s", NULL}, *lso[] = {"ls", NULL};
  ob_node(b, "Softmax", "softmax", si, so);
  ob_attr_i(b, "axis", -1);
  ob_output(b, "s", 1, 3, in);
  ob_node(b, "LogSoftmax", "logsoftmax", si, lso);
  ob_attr_i(b, "axis", -1);
  ob_output(b, "ls", 1, 3, in);
  char path[4096];
  snprintf(path, sizeof path, "%s/ffn_block.onnx", dir);
  return ob_save(b, path);
}

/* [B,S,H*D] -> Linear -> [B,H,S,D] (Reshape with 0 = keep batch, Transpose) */
static void heads(OnnxBuilder *b, const char *name, const char *x, const char *y, int64_t s, int64_t h,
                  int64_t d) {
  char lin[128], shp[128], r[128], t[128];
  snprintf(lin, sizeof lin, "%s.lin", name);
  snprintf(shp, sizeof shp, "%s.shape", name);
  snprintf(r, sizeof r, "%s.r", name);
  snprintf(t, sizeof t, "%s/Transpose", name);
  linear(b, name, x, lin, h * d, h * d, false);
  int64_t shape[4] = {0, s, h, d}, four = 4, perm[4] = {0, 2, 1, 3};
  ob_init_i64(b, shp, 1, &four, shape);
  binary(b, "Reshape", r, lin, shp, r);
  const char *ti[] = {r, NULL}, *to[] = {y, NULL};
  ob_node(b, "Transpose", t, ti, to);
  ob_attr_ints(b, "perm", 4, perm);
}

/* [B,H,S,D] -> [B,S,H*D] */
static void merge_heads(OnnxBuilder *b, const char *name, const char *x, const char *y, int64_t s, int64_t e) {
  char shp[128], t[128], tn[128];
  snprintf(shp, sizeof shp, "%s.shape", name);
  snprintf(t, sizeof t, "%s.t", name);
  snprintf(tn, sizeof tn, "%s/Transpose", name);
  int64_t perm[4] = {0, 2, 1, 3}, shape[3] = {0, s, e}, three = 3;
  const char *ti[] = {x, NULL}, *to[] = {t, NULL};
  ob_node(b, "Transpose", tn, ti, to);
  ob_attr_ints(b, "perm", 4, perm);
  ob_init_i64(b, shp, 1, &three, shape);
  binary(b, "Reshape", name, t, shp, y);
}

/* softmax(Q K^T * s + mask) V as torch.onnx (TorchScript) exports SDPA:
 * Mul(Q, sqrt s), Mul(Transpose(K), sqrt s), MatMul, Add mask, Softmax,
 * Where(IsNaN(P), 0, P), MatMul V. `extra` (!= 1) also multiplies Q first. */
static void sdpa(OnnxBuilder *b, const char *name, const char *q, const char *k, const char *v,
                 const char *mask, const char *y, float sqrt_scale, float extra) {
  char n[16][160];
  for (int i = 0; i < 16; i++) snprintf(n[i], sizeof n[i], "%s.%d", name, i);
  int64_t perm[4] = {0, 1, 3, 2};
  scalar(b, n[0], sqrt_scale);
  const char *qin = q;
  if (extra != 1.0f) {
    scalar(b, n[12], extra);
    binary(b, "Mul", n[13], q, n[12], n[14]);
    qin = n[14];
  }
  binary(b, "Mul", n[1], qin, n[0], n[2]);                /* Q * sqrt s */
  const char *ti[] = {k, NULL}, *to[] = {n[3], NULL};
  ob_node(b, "Transpose", n[4], ti, to);
  ob_attr_ints(b, "perm", 4, perm);
  binary(b, "Mul", n[5], n[3], n[0], n[6]);               /* K^T * sqrt s */
  binary(b, "MatMul", n[7], n[2], n[6], n[8]);
  binary(b, "Add", n[9], n[8], mask, n[10]);
  const char *si[] = {n[10], NULL}, *so[] = {n[11], NULL};
  ob_node(b, "Softmax", n[15], si, so);
  ob_attr_i(b, "axis", -1);
  char isn[160], isnn[160], zero[160], wh[160], whn[160], mm[160];
  snprintf(isn, sizeof isn, "%s.isnan", name);
  snprintf(isnn, sizeof isnn, "%s/IsNaN", name);
  snprintf(zero, sizeof zero, "%s.zero", name);
  snprintf(wh, sizeof wh, "%s.where", name);
  snprintf(whn, sizeof whn, "%s/Where", name);
  snprintf(mm, sizeof mm, "%s/MatMul_1", name);
  unary(b, "IsNaN", isnn, n[11], isn);
  scalar(b, zero, 0.0f);
  const char *wi[] = {isn, zero, n[11], NULL}, *wo[] = {wh, NULL};
  ob_node(b, "Where", whn, wi, wo);
  binary(b, "MatMul", mm, wh, v, y);
}

static int attention(const char *dir) {
  OnnxBuilder *b = ob_new("attention", 17);
  int64_t x[3] = {-1, 33, 64}, mem[3] = {-1, 20, 64}, mask[4] = {-1, 1, 1, 33};
  ob_input(b, "x", 1, 3, x, "batch");
  ob_input(b, "mem", 1, 3, mem, "batch");
  ob_input(b, "mask", 1, 4, mask, "batch");
  /* self-attention, SDPA export: H 4, D 16, scale 1/4 as sqrt(1/4) twice */
  heads(b, "q1", "x", "q1h", 33, 4, 16);
  heads(b, "k1", "x", "k1h", 33, 4, 16);
  heads(b, "v1", "x", "v1h", 33, 4, 16);
  sdpa(b, "sdpa1", "q1h", "k1h", "v1h", "mask", "a1", 0.5f, 1.0f);
  merge_heads(b, "a1m", "a1", "y", 33, 64);
  ob_output(b, "y", 1, 3, x);
  /* cross-attention, eager export: H 2, D 32, MatMul(Q, K^T) / sqrt 32 */
  heads(b, "q2", "y", "q2h", 33, 2, 32);
  heads(b, "k2", "mem", "k2h", 20, 2, 32);
  heads(b, "v2", "mem", "v2h", 20, 2, 32);
  int64_t perm[4] = {0, 1, 3, 2};
  const char *ti[] = {"k2h", NULL}, *to[] = {"k2t", NULL};
  ob_node(b, "Transpose", "att2/Transpose", ti, to);
  ob_attr_ints(b, "perm", 4, perm);
  binary(b, "MatMul", "att2/MatMul", "q2h", "k2t", "s2");
  scalar(b, "att2.sqrt_d", 5.656854f);
  binary(b, "Div", "att2/Div", "s2", "att2.sqrt_d", "s2d");
  const char *si[] = {"s2d", NULL}, *so[] = {"p2", NULL};
  ob_node(b, "Softmax", "att2/Softmax", si, so);
  ob_attr_i(b, "axis", 3);
  binary(b, "MatMul", "att2/MatMul_1", "p2", "v2h", "a2");
  merge_heads(b, "a2m", "a2", "z", 33, 64);
  ob_output(b, "z", 1, 3, x);
  char path[4096];
  snprintf(path, sizeof path, "%s/attention.onnx", dir);
  return ob_save(b, path);
}

static int attention_bert(const char *dir) {
  OnnxBuilder *b = ob_new("attention_bert", 17);
  int64_t qkv[4] = {-1, 12, 128, 64}, mask[4] = {-1, 1, 1, 128};
  ob_input(b, "q", 1, 4, qkv, "batch");
  ob_input(b, "k", 1, 4, qkv, "batch");
  ob_input(b, "v", 1, 4, qkv, "batch");
  ob_input(b, "mask", 1, 4, mask, "batch");
  /* inputs are uniform in [-1,1): Q * 4 sharpens the softmax */
  sdpa(b, "sdpa", "q", "k", "v", "mask", "o", 0.35355339f, 4.0f);
  ob_output(b, "o", 1, 4, qkv);
  char path[4096];
  snprintf(path, sizeof path, "%s/attention_bert.onnx", dir);
  return ob_save(b, path);
}

/* eager-style attention on inputs named <p>q, <p>k, <p>v (and <p>mask when
 * mask_rank > 0): softmax(MatMul(Q, Transpose(K)) / sqrt(D) + mask) V */
static void attn_inputs(OnnxBuilder *b, const char *p, int64_t B, int64_t H, int64_t sq, int64_t sk, int64_t d,
                        int64_t dv, int mask_rank, const int64_t *mask_dims) {
  char q[32], k[32], v[32], m[32], kt[32], s[32], sd[32], x[32], pr[32], o[32], c[32], nm[64];
  snprintf(q, sizeof q, "q%s", p); snprintf(k, sizeof k, "k%s", p); snprintf(v, sizeof v, "v%s", p);
  snprintf(m, sizeof m, "mask%s", p); snprintf(kt, sizeof kt, "kt%s", p); snprintf(s, sizeof s, "s%s", p);
  snprintf(sd, sizeof sd, "sd%s", p); snprintf(x, sizeof x, "x%s", p); snprintf(pr, sizeof pr, "p%s", p);
  snprintf(o, sizeof o, "o%s", p); snprintf(c, sizeof c, "sqrt_d%s", p);
  int64_t qd[4] = {B, H, sq, d}, kd[4] = {B, H, sk, d}, vd[4] = {B, H, sk, dv}, od[4] = {B, H, sq, dv};
  int64_t perm[4] = {0, 1, 3, 2};
  ob_input(b, q, 1, 4, qd, NULL);
  ob_input(b, k, 1, 4, kd, NULL);
  ob_input(b, v, 1, 4, vd, NULL);
  const char *ti[] = {k, NULL}, *to[] = {kt, NULL};
  snprintf(nm, sizeof nm, "%s/Transpose", p);
  ob_node(b, "Transpose", nm, ti, to);
  ob_attr_ints(b, "perm", 4, perm);
  snprintf(nm, sizeof nm, "%s/MatMul", p);
  binary(b, "MatMul", nm, q, kt, s);
  scalar(b, c, sqrtf((float)d));
  snprintf(nm, sizeof nm, "%s/Div", p);
  binary(b, "Div", nm, s, c, sd);
  const char *sin_ = sd;
  if (mask_rank > 0) {
    ob_input(b, m, 1, mask_rank, mask_dims, NULL);
    snprintf(nm, sizeof nm, "%s/Add", p);
    binary(b, "Add", nm, sd, m, x);
    sin_ = x;
  }
  const char *si[] = {sin_, NULL}, *so[] = {pr, NULL};
  snprintf(nm, sizeof nm, "%s/Softmax", p);
  ob_node(b, "Softmax", nm, si, so);
  ob_attr_i(b, "axis", -1);
  snprintf(nm, sizeof nm, "%s/MatMul_1", p);
  binary(b, "MatMul", nm, pr, v, o);
  ob_output(b, o, 1, 4, od);
}

static int attention_shapes(const char *dir) {
  OnnxBuilder *b = ob_new("attention_shapes", 17);
  int64_t full[4] = {2, 3, 70, 130}, row[1] = {5}, one[4] = {1, 1, 1, 1};
  attn_inputs(b, "0", 2, 3, 70, 130, 128, 128, 4, full);
  attn_inputs(b, "1", 1, 2, 17, 5, 80, 64, 1, row);
  attn_inputs(b, "2", 2, 2, 3, 40, 7, 9, 0, NULL);
  attn_inputs(b, "3", 1, 1, 1, 1, 24, 24, 4, one);
  int64_t qd[4] = {1, 2, 20, 32}, kd[4] = {1, 2, 70, 32}, md[4] = {1, 1, 20, 70};
  ob_input(b, "q4", 1, 4, qd, NULL);
  ob_input(b, "k4", 1, 4, kd, NULL);
  ob_input(b, "v4", 1, 4, kd, NULL);
  float *mask = malloc(sizeof *mask * 20 * 70);
  for (int i = 0; i < 20; i++)
    for (int j = 0; j < 70; j++)
      mask[i * 70 + j] = i == 0 || (i == 2 && j < 64) || (i == 5 && j % 3 == 0) ? -INFINITY : 0.0f;
  ob_init_f32(b, "mask4", 4, md, mask);
  free(mask);
  sdpa(b, "sdpa4", "q4", "k4", "v4", "mask4", "o4", 0.42044821f, 1.0f);
  ob_output(b, "o4", 1, 4, qd);
  char path[4096];
  snprintf(path, sizeof path, "%s/attention_shapes.onnx", dir);
  return ob_save(b, path);
}

static int small_bn_cnn(const char *dir) {
  OnnxBuilder *b = ob_new("small_bn_cnn", 17);
  int64_t in[4] = {-1, 1, 28, 28}, out[2] = {-1, 10};
  ob_input(b, "image", 1, 4, in, "batch");
  conv(b, "conv1", "image", "c1", 1, 8, 3, 1, false);
  batchnorm(b, "bn1", "c1", "b1", 8);
  unary(b, "Relu", "relu1", "b1", "r1");
  maxpool(b, "pool1", "r1", "p1", 2, 2, 0);
  conv(b, "conv2", "p1", "c2", 8, 16, 3, 1, false);
  batchnorm(b, "bn2", "c2", "b2", 16);
  unary(b, "Relu", "relu2", "b2", "r2");
  unary(b, "GlobalAveragePool", "gap", "r2", "g");
  unary(b, "Flatten", "flatten", "g", "f");
  gemm(b, "fc", "f", "logits", 16, 10);
  ob_output(b, "logits", 1, 2, out);
  char path[4096];
  snprintf(path, sizeof path, "%s/small_bn_cnn.onnx", dir);
  return ob_save(b, path);
}

static int resnet_block(const char *dir) {
  OnnxBuilder *b = ob_new("resnet_block", 17);
  int64_t in[4] = {2, 16, 12, 12}, out[4] = {2, 32, 6, 6};
  ob_input(b, "x", 1, 4, in, NULL);
  basic_block(b, "block1", "x", "h", 16, 16, 1);
  basic_block(b, "block2", "h", "y", 16, 32, 2);
  ob_output(b, "y", 1, 4, out);
  char path[4096];
  snprintf(path, sizeof path, "%s/resnet_block.onnx", dir);
  return ob_save(b, path);
}

static int add_layernorm(const char *dir) {
  OnnxBuilder *b = ob_new("add_layernorm", 17);
  static const struct { int64_t dims[3]; int axis; int64_t scale[2]; int nscale; bool bias; } c[4] = {
    {{2, 4, 768}, -1, {768}, 1, true},
    {{2, 8, 2048}, -1, {2048}, 1, true},
    {{4, 12, 16}, -1, {16}, 1, false},
    {{3, 5, 40}, 1, {5, 1}, 2, true},
  };
  for (int k = 0; k < 4; k++) {
    char a[16], bb[16], s[16], y[16], add[16], ln[16], w[16], bias[16];
    snprintf(a, sizeof a, "a%d", k); snprintf(bb, sizeof bb, "b%d", k);
    snprintf(s, sizeof s, "s%d", k); snprintf(y, sizeof y, "y%d", k);
    snprintf(add, sizeof add, "add%d", k); snprintf(ln, sizeof ln, "ln%d", k);
    snprintf(w, sizeof w, "ln%d.weight", k); snprintf(bias, sizeof bias, "ln%d.bias", k);
    ob_input(b, a, 1, 3, c[k].dims, NULL);
    ob_input(b, bb, 1, 3, c[k].dims, NULL);
    binary(b, "Add", add, a, bb, s);
    int64_t n = c[k].scale[0] * (c[k].nscale > 1 ? c[k].scale[1] : 1);
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = 1.0f + 0.1f * (float)ob_rand(&seed);
    ob_init_f32(b, w, c[k].nscale, c[k].scale, v);
    free(v);
    if (c[k].bias) constant_vec(b, bias, c[k].dims[2], 0.0f, 0.1f);
    const char *li[] = {s, w, c[k].bias ? bias : NULL, NULL}, *lo[] = {y, NULL};
    ob_node(b, "LayerNormalization", ln, li, lo);
    ob_attr_i(b, "axis", c[k].axis);
    ob_attr_f(b, "epsilon", 1e-5f);
    ob_output(b, y, 1, 3, c[k].dims);
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/add_layernorm.onnx", dir);
  return ob_save(b, path);
}

static int linears(const char *dir) {
  OnnxBuilder *b = ob_new("linears", 17);
  int64_t x[3] = {-1, 8, 64}, v[2] = {-1, 64}, y[3] = {-1, 8, 96}, r[3] = {-1, 8, 32}, z[2] = {-1, 48};
  ob_input(b, "x", 1, 3, x, "batch");
  ob_input(b, "v", 1, 2, v, "rows_v"); /* its own dim: bound apart from x's batch */
  linear(b, "fc_a", "x", "y", 64, 96, false);
  linear(b, "fc_b", "x", "hb", 64, 32, true);
  unary(b, "Relu", "relu", "hb", "r");
  gemm(b, "fc_c", "v", "z", 64, 48);
  /* Gemm without transB, alpha 0.5 and beta 2 on a [1,16] C */
  int64_t wd[2] = {-1, 64}, gd[2] = {-1, 16}, cd[2] = {1, 16}, wdn[2] = {64, 16};
  float c[16];
  for (int i = 0; i < 16; i++) c[i] = 0.05f * (float)(i - 8);
  ob_input(b, "w", 1, 2, wd, "rows_w");
  weights(b, "fc_d.weight", 2, wdn, 64);
  ob_init_f32(b, "fc_d.c", 2, cd, c);
  const char *gi[] = {"w", "fc_d.weight", "fc_d.c", NULL}, *go[] = {"g", NULL};
  ob_node(b, "Gemm", "fc_d", gi, go);
  ob_attr_f(b, "alpha", 0.5f);
  ob_attr_f(b, "beta", 2.0f);
  ob_output(b, "y", 1, 3, y);
  ob_output(b, "r", 1, 3, r);
  ob_output(b, "z", 1, 2, z);
  ob_output(b, "g", 1, 2, gd);
  char path[4096];
  snprintf(path, sizeof path, "%s/linears.onnx", dir);
  return ob_save(b, path);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: make_models OUTDIR\n"); return 2; }
  return small_cnn(argv[1]) || mlp(argv[1]) || resnet18(argv[1]) || resnet50(argv[1]) || shape_chain(argv[1]) || mobile_block(argv[1]) ||
                 ffn_block(argv[1]) || small_bn_cnn(argv[1]) || resnet_block(argv[1]) || attention(argv[1]) ||
                 attention_bert(argv[1]) || attention_shapes(argv[1]) || add_layernorm(argv[1]) ||
                 linears(argv[1]) ? 1 : 0;
}
