/* Folds of per-channel affine maps, each against the reference on random
 * inputs (f32: |a-b| <= 1e-5 + 1e-5|b|).
 * passes/bn_affine.c: an inference BatchNormalization no Conv absorbed
 * becomes Mul and Add by per-channel constants ([C,1,1] for NCHW, [C] for
 * [N,C]); the rewritten graph computes what the original did on the
 * reference (f32: |a-b| <= 1e-5 + 1e-5|b|). Not rewritten: training_mode
 * 1, a Mean output in use, a non-constant parameter, a training graph.
 * passes/fold_conv_bias.c: Conv A's bias into the bias of the unpadded
 * Conv B that alone reads A (1x1, and 3x3 without padding); not with
 * padding, groups, a second reader of A, or in a training graph. */
#include "passes.h"
#include "ref.h"
#include "check.h"
#include "graph_build.h"
#include <stdio.h>

enum { NCHW, ROWS, TRAINING_MODE, MEAN_OUT, COMPUTED_SCALE, TRAINING_GRAPH };
static int variant;

static void build(Graph *g) {
  int64_t x4[4] = {2, 5, 3, 4}, x2[2] = {6, 5}, c[1] = {5};
  int x = variant == ROWS ? input(g, "x", 2, x2) : input(g, "x", 4, x4);
  int gamma = variant == COMPUTED_SCALE ? input(g, "gamma", 1, c) : constant(g, 1, c, 51, 0.5, 1.5);
  int ni = gpuc_graph_add_node(g, GPUC_OP_BATCHNORMALIZATION, "bn", 5, variant == MEAN_OUT ? 2 : 1);
  int ins[5] = {x, gamma, constant(g, 1, c, 52, -1, 1), constant(g, 1, c, 53, -0.5, 0.5), constant(g, 1, c, 54, 0.2, 2)};
  for (int k = 0; k < 5; k++) g->nodes[ni].in[k] = ins[k];
  g->nodes[ni].attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * MAX_ATTRS);
  attr_f(g, "epsilon", 1e-3f);
  if (variant == TRAINING_MODE) attr_i(g, "training_mode", 1);
  for (int k = 0; k < g->nodes[ni].nout; k++) {
    char name[16];
    snprintf(name, sizeof name, "bn.%d", k);
    int v = gpuc_graph_add_value(g, name);
    g->nodes[ni].out[k] = v;
    g->values[v].producer = ni;
  }
  int y = g->nodes[ni].out[0];
  output(g, NODE(g, GPUC_OP_RELU, y));
  if (variant == MEAN_OUT) output(g, g->nodes[ni].out[1]);
}

enum { NEXT_1X1, NEXT_3X3_VALID, NEXT_PADDED, NEXT_GROUPED, A_READ_TWICE, NEXT_TRAINING };

/* x [2,4,7,7] -> Conv A 1x1 (bias) -> Conv B (variant) -> out */
static void build_convs(Graph *g) {
  int64_t xd[4] = {2, 4, 7, 7}, wa[4] = {6, 4, 1, 1}, c6[1] = {6}, c5[1] = {5};
  int64_t wb1[4] = {5, 6, 1, 1}, wb3[4] = {5, 6, 3, 3}, wbg[4] = {6, 3, 1, 1}, pads[4] = {1, 1, 1, 1};
  int x = input(g, "x", 4, xd);
  int a = NODE(g, GPUC_OP_CONV, x, constant(g, 4, wa, 61, -0.5, 0.5), constant(g, 1, c6, 62, -1, 1));
  int w = variant == NEXT_1X1 || variant == A_READ_TWICE || variant == NEXT_TRAINING ? constant(g, 4, wb1, 63, -0.5, 0.5)
          : variant == NEXT_GROUPED ? constant(g, 4, wbg, 63, -0.5, 0.5) : constant(g, 4, wb3, 63, -0.5, 0.5);
  int b = variant == NEXT_GROUPED ? NODE(g, GPUC_OP_CONV, a, w) : NODE(g, GPUC_OP_CONV, a, w, constant(g, 1, c5, 64, -1, 1));
  if (variant == NEXT_PADDED) attr_ints(g, "pads", 4, pads);
  if (variant == NEXT_GROUPED) attr_i(g, "group", 2);
  output(g, b);
  if (variant == A_READ_TWICE) output(g, NODE(g, GPUC_OP_RELU, a));
}

static void test_conv_bias(void) {
  static const struct { const char *what; int variant; bool want; } cases[] = {
      {"next 1x1", NEXT_1X1, true}, {"next 3x3 unpadded", NEXT_3X3_VALID, true}, {"next padded", NEXT_PADDED, false},
      {"next grouped", NEXT_GROUPED, false}, {"A read twice", A_READ_TWICE, false}, {"training graph", NEXT_TRAINING, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    GpucErr e = {0};
    variant = cases[i].variant;
    Graph *g0 = graph_new(17), *g1 = graph_new(17);
    build_convs(g0);
    build_convs(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: bad test graph: %s", cases[i].what, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    o.training = variant == NEXT_TRAINING;
    int got = pass_fold_conv_bias(g1, &o, &e);
    CHECK(got == (cases[i].want ? 1 : 0), "%s: %d folded (%s)", cases[i].what, got, e.msg);
    CHECK((g1->nodes[0].nin == 2) == cases[i].want, "%s: conv A has %d inputs", cases[i].what, g1->nodes[0].nin);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: verify: %s", cases[i].what, e.msg);
    compare(cases[i].what, g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

int main(void) {
  test_conv_bias();
  static const struct { const char *what; int variant; bool want; } cases[] = {
      {"NCHW", NCHW, true}, {"[N,C] rows", ROWS, true}, {"training_mode 1", TRAINING_MODE, false},
      {"running mean output in use", MEAN_OUT, false}, {"computed scale", COMPUTED_SCALE, false},
      {"training graph", TRAINING_GRAPH, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    GpucErr e = {0};
    variant = cases[i].variant;
    Graph *g0 = graph_new(17), *g1 = graph_new(17);
    build(g0);
    build(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: bad test graph: %s", cases[i].what, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    o.training = variant == TRAINING_GRAPH;
    int got = pass_batchnorm_affine(g1, &o, &e);
    CHECK(got == (cases[i].want ? 1 : 0), "%s: %d rewritten (%s)", cases[i].what, got, e.msg);
    CHECK((count_op(g1, GPUC_OP_BATCHNORMALIZATION) == 0) == cases[i].want &&
              count_op(g1, GPUC_OP_MUL) == (cases[i].want ? 1 : 0) && count_op(g1, GPUC_OP_ADD) == (cases[i].want ? 1 : 0),
          "%s: nodes after the pass", cases[i].what);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: verify: %s", cases[i].what, e.msg);
    if (variant != TRAINING_MODE) compare(cases[i].what, g0, g1, 1e-5); /* training mode: batch statistics */
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
  return check_summary();
}
