/* passes/fuse_conv.c's pass_fuse_conv_act on graphs built here: an NHWC
 * depthwise FusedConv (x [2,6,7,8], W [8,3,3,1], bias, pads 1, as
 * layout_nhwc makes it) followed by Relu, Clip (constant inputs at opset
 * 13, attributes at opset 6), HardSwish, Mish, erf Gelu, or SiLU (Sigmoid and
 * Mul, both operand orders): which fuse (the conv's activation attribute,
 * the nodes left) and which must not (the conv's output also a graph
 * output or read by a third node, a non-depthwise conv, a Clip bound
 * computed at run time, tanh Gelu, a Sigmoid whose output is read
 * elsewhere, a training graph); and every rewritten graph computes what
 * the original did on the reference (f32: |a-b| <= 1e-5 + 1e-5|b|).
 * Input activations (in_activation): HardSwish, SiLU and Clip of a value
 * only the conv reads fuse, one read elsewhere too does not.
 * Then the -O2 --fp16 pipeline on an NCHW depthwise Conv + HardSwish
 * (batch 2): the activation ends in an NHWC FusedConv and the outputs
 * match -O0 within fp16's rounding (|a-b| <= 1e-2 + 1e-2|b|).
 * And a pointwise MLP (1x1 Conv 8 -> 32 with bias, erf Gelu, 1x1 Conv 32
 * -> 8: PoolFormer's) at -O2 --fp16: the Gelu ends in the NHWC pointwise
 * FusedConv (cuBLASLt's GELU_BIAS epilogue, codegen/lower_se.c), also
 * when the conv has no bias (a zero row added); with stride 2 on the first
 * conv (not one GEMM) it stays a node. With the block's input added back
 * (x + MLP(x), MBConv's shortcut) the Add becomes the second conv's
 * residual Z (pw_residual: cuBLASLt's C with the bias row; the sm_90 plan
 * holds a GEMM with PLAN_GEMM_F_BIAS_C), not when the conv's output is
 * also a graph output. */
#include "codegen.h"
#include "plan.h"
#include "passes.h"
#include "ref.h"
#include "check.h"
#include "graph_build.h"
#include "conv_act.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { RELU, CLIP_INPUTS, CLIP_ATTRS, CLIP_LOW_ONLY, HARDSWISH, MISH, GELU, SILU_YS, SILU_SY,
       Y_OUTPUT, Y_SHARED, DENSE, CLIP_COMPUTED, GELU_TANH, SIGMOID_SHARED, TRAINING };

static int variant;

static int scalar(Graph *g, double v) {
  int64_t one[1] = {1};
  return constant(g, 0, one, 0, v, v);
}

static void build(Graph *g) {
  int64_t xd[4] = {2, 6, 7, 8}, wd[4] = {8, 3, 3, 1}, wdense[4] = {8, 3, 3, 8}, bd[1] = {8}, pads[4] = {1, 1, 1, 1};
  int64_t ks[2] = {3, 3};
  int x = input(g, "x", 4, xd);
  int w = constant(g, 4, variant == DENSE ? wdense : wd, 71, -0.6, 0.6);
  int y = NODE(g, GPUC_OP_FUSEDCONV, x, w, constant(g, 1, bd, 72, -1, 1));
  attr_i(g, "group", variant == DENSE ? 1 : 8);
  attr_ints(g, "kernel_shape", 2, ks);
  attr_ints(g, "pads", 4, pads);
  attr_i(g, "layout", GPUC_LAYOUT_NHWC);
  attr_i(g, "activation", 0);
  int out;
  switch (variant) {
  case CLIP_INPUTS: out = NODE(g, GPUC_OP_CLIP, y, scalar(g, 0), scalar(g, 0.75)); break;
  case CLIP_LOW_ONLY: out = NODE(g, GPUC_OP_CLIP, y, scalar(g, -0.25)); break;
  case CLIP_ATTRS:
    out = NODE(g, GPUC_OP_CLIP, y);
    attr_f(g, "min", -0.5f);
    attr_f(g, "max", 0.5f);
    break;
  case CLIP_COMPUTED: out = NODE(g, GPUC_OP_CLIP, y, scalar(g, 0), NODE(g, GPUC_OP_RELU, input(g, "hi", 0, bd))); break;
  case HARDSWISH: out = NODE(g, GPUC_OP_HARDSWISH, y); break;
  case MISH: out = NODE(g, GPUC_OP_MISH, y); break;
  case GELU: case GELU_TANH:
    out = NODE(g, GPUC_OP_GELU, y);
    attr_s(g, "approximate", variant == GELU ? "none" : "tanh");
    break;
  case SILU_YS: case SILU_SY: case SIGMOID_SHARED: {
    int s = NODE(g, GPUC_OP_SIGMOID, y);
    out = variant == SILU_SY ? NODE(g, GPUC_OP_MUL, s, y) : NODE(g, GPUC_OP_MUL, y, s);
    if (variant == SIGMOID_SHARED) output(g, s);
    break;
  }
  default: out = NODE(g, GPUC_OP_RELU, y); break;
  }
  output(g, out);
  if (variant == Y_OUTPUT) output(g, y);
  if (variant == Y_SHARED) output(g, NODE(g, GPUC_OP_NEG, y));
}

typedef struct {
  const char *what;
  int variant, opset;
  int want_act; /* -1: not fused */
} Case;

static const Case cases[] = {
    {"relu", RELU, 13, GPUC_FCONV_ACT_RELU},
    {"clip(0, 0.75) by inputs", CLIP_INPUTS, 13, GPUC_FCONV_ACT_CLIP},
    {"clip(-0.5, 0.5) by attributes", CLIP_ATTRS, 6, GPUC_FCONV_ACT_CLIP},
    {"clip with a minimum only", CLIP_LOW_ONLY, 13, GPUC_FCONV_ACT_CLIP},
    {"hardswish", HARDSWISH, 14, GPUC_FCONV_ACT_HARDSWISH},
    {"mish", MISH, 18, GPUC_FCONV_ACT_MISH},
    {"gelu (erf)", GELU, 20, GPUC_FCONV_ACT_GELU},
    {"silu y * sigmoid(y)", SILU_YS, 13, GPUC_FCONV_ACT_SILU},
    {"silu sigmoid(y) * y", SILU_SY, 13, GPUC_FCONV_ACT_SILU},
    {"conv output also a graph output", Y_OUTPUT, 13, -1},
    {"conv output read by a third node", Y_SHARED, 13, -1},
    {"dense (group 1) conv", DENSE, 13, -1},
    {"clip bound computed at run time", CLIP_COMPUTED, 13, -1},
    {"gelu (tanh)", GELU_TANH, 20, -1},
    {"sigmoid output also a graph output", SIGMOID_SHARED, 13, -1},
    {"training graph", TRAINING, 13, -1},
};

/* Input activations: x [2,6,7,8] -> Add(x, c) = y -> activation (variant)
 * -> NHWC depthwise FusedConv (-> out). */
enum { PRE_HARDSWISH, PRE_SILU, PRE_CLIP, PRE_SHARED, PRE_INPUT };
static int pre_variant;

static void build_pre(Graph *g) {
  int64_t xd[4] = {2, 6, 7, 8}, wd[4] = {8, 3, 3, 1}, bd[1] = {8}, pads[4] = {1, 1, 1, 1}, ks[2] = {3, 3};
  int x = input(g, "x", 4, xd);
  int y = pre_variant == PRE_INPUT ? x : NODE(g, GPUC_OP_ADD, x, constant(g, 1, bd, 73, -1, 1));
  int a;
  if (pre_variant == PRE_SILU) a = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_SIGMOID, y), y);
  else if (pre_variant == PRE_CLIP) a = NODE(g, GPUC_OP_CLIP, y, scalar(g, 0), scalar(g, 0.5));
  else a = NODE(g, GPUC_OP_HARDSWISH, y);
  int out = NODE(g, GPUC_OP_FUSEDCONV, a, constant(g, 4, wd, 74, -0.6, 0.6), constant(g, 1, bd, 75, -1, 1));
  attr_i(g, "group", 8);
  attr_ints(g, "kernel_shape", 2, ks);
  attr_ints(g, "pads", 4, pads);
  attr_i(g, "layout", GPUC_LAYOUT_NHWC);
  attr_i(g, "activation", 0);
  output(g, out);
  if (pre_variant == PRE_SHARED) output(g, NODE(g, GPUC_OP_NEG, a));
}

static void test_pre(void) {
  static const struct { const char *what; int variant, want; } pre[] = {
      {"input hardswish", PRE_HARDSWISH, GPUC_FCONV_ACT_HARDSWISH},
      {"input silu", PRE_SILU, GPUC_FCONV_ACT_SILU},
      {"input clip(0, 0.5)", PRE_CLIP, GPUC_FCONV_ACT_CLIP},
      {"input activation read elsewhere too", PRE_SHARED, 0},
      {"input activation of a graph input", PRE_INPUT, GPUC_FCONV_ACT_HARDSWISH},
  };
  for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
    GpucErr e = {0};
    pre_variant = pre[i].variant;
    Graph *g0 = graph_new(13), *g1 = graph_new(13);
    build_pre(g0);
    build_pre(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: bad test graph: %s", pre[i].what, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    o.fp16 = true;
    int got = pass_fuse_conv_act(g1, &o, &e), in_act = -1;
    for (int k = 0; k < g1->nnodes; k++)
      if (g1->nodes[k].op == GPUC_OP_FUSEDCONV) in_act = (int)gpuc_attr_i(&g1->nodes[k], "in_activation", 0);
    CHECK(got == (pre[i].want > 0) && in_act == pre[i].want, "%s: %d fused, in_activation %d, expected %d (%s)",
          pre[i].what, got, in_act, pre[i].want, e.msg);
    int left = (pre[i].variant == PRE_INPUT ? 0 : 1) + 1; /* the Add (if any) and the conv */
    if (pre[i].want > 0) CHECK(g1->nnodes == left, "%s: %d nodes left, expected %d", pre[i].what, g1->nnodes, left);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: verify: %s", pre[i].what, e.msg);
    compare(pre[i].what, g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* -O2 --fp16 on x [2,8,9,9] -> depthwise Conv 3x3 (bias) -> HardSwish */
static Graph *build_nchw(void) {
  Graph *g = graph_new(14);
  int64_t xd[4] = {2, 8, 9, 9}, wd[4] = {8, 1, 3, 3}, bd[1] = {8}, pads[4] = {1, 1, 1, 1}, ks[2] = {3, 3};
  int x = input(g, "x", 4, xd);
  int y = NODE(g, GPUC_OP_CONV, x, constant(g, 4, wd, 81, -0.6, 0.6), constant(g, 1, bd, 82, -1, 1));
  attr_i(g, "group", 8);
  attr_ints(g, "kernel_shape", 2, ks);
  attr_ints(g, "pads", 4, pads);
  output(g, NODE(g, GPUC_OP_HARDSWISH, y));
  return g;
}

static void test_pipeline(void) {
  GpucErr e = {0};
  Graph *g0 = build_nchw(), *g1 = build_nchw();
  CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "pipeline: bad test graph: %s", e.msg);
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = true;
  CHECK(gpuc_passes_run(g1, &o, &e) == 0, "pipeline: passes: %s", e.msg);
  int fused = 0, hs = count_op(g1, GPUC_OP_HARDSWISH);
  for (int k = 0; k < g1->nnodes; k++)
    if (g1->nodes[k].op == GPUC_OP_FUSEDCONV && gpuc_attr_i(&g1->nodes[k], "layout", 0) == GPUC_LAYOUT_NHWC &&
        gpuc_attr_i(&g1->nodes[k], "activation", 0) == GPUC_FCONV_ACT_HARDSWISH)
      fused++;
  CHECK(fused == 1 && hs == 0, "pipeline: %d NHWC FusedConvs with HardSwish, %d HardSwish nodes left", fused, hs);
  compare("pipeline -O2 --fp16", g0, g1, 1e-2);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

/* -O2 --fp16 on a squeeze-and-excitation block: x [2,16,9,9] -> 1x1 Conv
 * -> Relu -> depthwise 3x3 -> HardSwish = a; GlobalAveragePool(a) -> 1x1
 * Conv 16->8 -> Relu -> 1x1 Conv 8->16 -> HardSigmoid = s; a * s -> 1x1
 * Conv -> out; also with ReduceMean(axes (2, -1), keepdims) for the pool,
 * as the dynamo exporter writes it. The pool must run NHWC (layout 1) and the only Transposes
 * are the input's and the output's. */
static Graph *build_se(bool reducemean) {
  Graph *g = graph_new(reducemean ? 18 : 14);
  int64_t xd[4] = {2, 16, 9, 9}, w1[4] = {16, 16, 1, 1}, wd[4] = {16, 1, 3, 3}, f1[4] = {8, 16, 1, 1};
  int64_t f2[4] = {16, 8, 1, 1}, b16[1] = {16}, b8[1] = {8}, pads[4] = {1, 1, 1, 1}, ks[2] = {3, 3};
  int x = input(g, "x", 4, xd);
  int h = NODE(g, GPUC_OP_RELU, NODE(g, GPUC_OP_CONV, x, constant(g, 4, w1, 91, -0.4, 0.4), constant(g, 1, b16, 92, -1, 1)));
  int d = NODE(g, GPUC_OP_CONV, h, constant(g, 4, wd, 93, -0.6, 0.6), constant(g, 1, b16, 94, -1, 1));
  attr_i(g, "group", 16);
  attr_ints(g, "kernel_shape", 2, ks);
  attr_ints(g, "pads", 4, pads);
  int a = NODE(g, GPUC_OP_HARDSWISH, d);
  int64_t two[1] = {2};
  int p = reducemean ? NODE(g, GPUC_OP_REDUCEMEAN, a, constant(g, 1, two, 0, 0, 0)) : NODE(g, GPUC_OP_GLOBALAVERAGEPOOL, a);
  if (reducemean) { /* axes (2, 3) as an int64 input, as the dynamo exporter writes torch's mean((2, 3), keepdim) */
    Tensor *ax = &g->values[g->nodes[g->nnodes - 1].in[1]].t;
    free(ax->data);
    int64_t axes[2] = {2, -1};
    gpuc_set_shape(ax, GPUC_DT_I64, 1, two);
    GpucErr e;
    GPUC_ASSERT(gpuc_tensor_alloc(ax, &e) == 0);
    memcpy(ax->data, axes, sizeof axes);
  }
  int q = NODE(g, GPUC_OP_RELU, NODE(g, GPUC_OP_CONV, p, constant(g, 4, f1, 95, -0.5, 0.5), constant(g, 1, b8, 96, -1, 1)));
  int s = NODE(g, GPUC_OP_HARDSIGMOID, NODE(g, GPUC_OP_CONV, q, constant(g, 4, f2, 97, -0.5, 0.5), constant(g, 1, b16, 98, -1, 1)));
  attr_f(g, "alpha", 1.0f / 6);
  int m = NODE(g, GPUC_OP_MUL, a, s);
  output(g, NODE(g, GPUC_OP_CONV, m, constant(g, 4, w1, 99, -0.4, 0.4), constant(g, 1, b16, 100, -1, 1)));
  return g;
}

static void test_se(bool reducemean) {
  GpucErr e = {0};
  Graph *g0 = build_se(reducemean), *g1 = build_se(reducemean);
  CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "se: bad test graph: %s", e.msg);
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = true;
  CHECK(gpuc_passes_run(g1, &o, &e) == 0, "se: passes: %s", e.msg);
  int nhwc_pool = 0, big_transposes = 0;
  for (int k = 0; k < g1->nnodes; k++) {
    const Node *n = &g1->nodes[k];
    if (n->op == GPUC_OP_GLOBALAVERAGEPOOL && gpuc_attr_i(n, "layout", 0) == GPUC_LAYOUT_NHWC) nhwc_pool++;
    if (n->op == GPUC_OP_TRANSPOSE) big_transposes++;
  }
  CHECK(nhwc_pool == 1 && big_transposes == 2, "se: %d NHWC pools, %d Transposes (expected the input's and the output's)", nhwc_pool,
        big_transposes);
  compare("se -O2 --fp16", g0, g1, 2e-2);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

/* -O2 --fp16 on x [2,8,9,9] -> 1x1 Conv 8->32 (bias or none; stride s) -> erf Gelu -> 1x1 Conv 32->8 */
static bool pointwise_bias = true;
static int pointwise_residual; /* 1: out = x + MLP(x); 2: and MLP(x) a graph output too */
static Graph *build_pointwise(int64_t stride) {
  Graph *g = graph_new(20);
  int64_t xd[4] = {2, 8, 9, 9}, w1[4] = {32, 8, 1, 1}, w2[4] = {8, 32, 1, 1}, b32[1] = {32}, b8[1] = {8};
  int64_t st[2] = {stride, stride};
  int x = input(g, "x", 4, xd);
  int h = pointwise_bias ? NODE(g, GPUC_OP_CONV, x, constant(g, 4, w1, 101, -0.5, 0.5), constant(g, 1, b32, 102, -1, 1))
                         : NODE(g, GPUC_OP_CONV, x, constant(g, 4, w1, 101, -0.5, 0.5));
  attr_ints(g, "strides", 2, st);
  int a = NODE(g, GPUC_OP_GELU, h);
  attr_s(g, "approximate", "none");
  int y = NODE(g, GPUC_OP_CONV, a, constant(g, 4, w2, 103, -0.3, 0.3), constant(g, 1, b8, 104, -1, 1));
  output(g, pointwise_residual ? NODE(g, GPUC_OP_ADD, y, x) : y);
  if (pointwise_residual == 2) output(g, y);
  return g;
}

static void test_pointwise(int64_t stride) {
  GpucErr e = {0};
  Graph *g0 = build_pointwise(stride), *g1 = build_pointwise(stride);
  CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "pointwise: bad test graph: %s", e.msg);
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = true;
  CHECK(gpuc_passes_run(g1, &o, &e) == 0, "pointwise: passes: %s", e.msg);
  int fused = 0, gelus = count_op(g1, GPUC_OP_GELU);
  for (int k = 0; k < g1->nnodes; k++)
    if (g1->nodes[k].op == GPUC_OP_FUSEDCONV && gpuc_attr_i(&g1->nodes[k], "layout", 0) == GPUC_LAYOUT_NHWC &&
        gpuc_attr_i(&g1->nodes[k], "activation", 0) == GPUC_FCONV_ACT_GELU)
      fused++;
  if (stride == 1)
    CHECK(fused == 1 && gelus == 0, "pointwise: %d NHWC FusedConvs with GELU, %d Gelu nodes left (want 1, 0)", fused,
          gelus);
  else
    CHECK(fused == 0 && gelus == 1, "pointwise stride 2: %d NHWC FusedConvs with GELU, %d Gelu nodes (want 0, 1)",
          fused, gelus);
  int with_z = 0;
  for (int k = 0; k < g1->nnodes; k++)
    with_z += g1->nodes[k].op == GPUC_OP_FUSEDCONV && g1->nodes[k].nin > 3 && g1->nodes[k].in[3] >= 0;
  if (pointwise_residual) {
    bool want = pointwise_residual == 1 && stride == 1;
    CHECK(with_z == want && count_op(g1, GPUC_OP_ADD) == !want, "pointwise residual %d: %d convs with Z, %d Adds",
          pointwise_residual, with_z, count_op(g1, GPUC_OP_ADD));
    CodegenOptions co = {.sm = 90, .level = 2, .fp16 = true};
    Plan *p = NULL;
    CHECK(gpuc_codegen(g1, &co, &p, NULL, &e) == 0 && p, "pointwise residual: codegen: %s", e.msg);
    int bias_c = 0;
    for (uint32_t k = 0; p && k < p->ngemms; k++) bias_c += (p->gemms[k].flags & PLAN_GEMM_F_BIAS_C) != 0;
    CHECK(bias_c == want, "pointwise residual %d: %d GEMMs with C and the bias row (want %d)", pointwise_residual,
          bias_c, want);
    gpuc_plan_free(p);
  }
  compare("pointwise -O2 --fp16", g0, g1, 1e-2);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

int main(void) {
  test_pointwise(1);
  test_pointwise(2);
  pointwise_bias = false; /* the dynamo exporter drops a bias of zeros: a zero row is added */
  test_pointwise(1);
  pointwise_bias = true;
  for (pointwise_residual = 1; pointwise_residual <= 2; pointwise_residual++) test_pointwise(1);
  pointwise_residual = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const Case *c = &cases[i];
    GpucErr e = {0};
    variant = c->variant;
    Graph *g0 = graph_new(c->opset), *g1 = graph_new(c->opset);
    build(g0);
    build(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: bad test graph: %s", c->what, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    o.fp16 = true; /* as the pipeline runs it; the graph stays f32 here */
    o.training = c->variant == TRAINING;
    int before = g1->nnodes, got = pass_fuse_conv_act(g1, &o, &e);
    CHECK(got == (c->want_act > 0), "%s: %d fused (%s)", c->what, got, e.msg);
    int act = -1;
    for (int k = 0; k < g1->nnodes; k++)
      if (g1->nodes[k].op == GPUC_OP_FUSEDCONV) act = (int)gpuc_attr_i(&g1->nodes[k], "activation", 0);
    CHECK(act == (c->want_act > 0 ? c->want_act : 0), "%s: activation %d, expected %d", c->what, act, c->want_act);
    int left = c->variant == CLIP_COMPUTED ? 2 : 1; /* the Relu computing the bound stays */
    if (c->want_act > 0)
      CHECK(g1->nnodes == left, "%s: %d nodes left of %d, expected the FusedConv alone", c->what, g1->nnodes, before);
    else
      CHECK(g1->nnodes == before, "%s: %d nodes left of %d", c->what, g1->nnodes, before);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: verify: %s", c->what, e.msg);
    compare(c->what, g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
  test_pre();
  test_pipeline();
  test_se(false);
  test_se(true); /* the dynamo exporter's ReduceMean over (2, 3) becomes the pool */
  return check_summary();
}
