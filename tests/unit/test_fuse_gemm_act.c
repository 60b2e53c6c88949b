/* passes/fuse_gemm_act.c on graphs built here: Linear (MatMul + bias Add)
 * then Relu, tanh Gelu, erf Gelu or the TorchScript erf pattern (three
 * spellings), with and without --fp16: which fuse (the MatMulBias's
 * activation, the nodes left) and which must not (erf GELU in f32 plans,
 * a product that is also a graph output, a pattern with another
 * constant); and every rewritten graph computes what the original did on
 * the reference (f32: |a-b| <= 1e-5 + 1e-5|b|; the reference computes
 * each activation exactly). */
#include "passes.h"
#include "ref.h"
#include "check.h"
#include "graph_build.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { RELU, GELU_TANH, GELU_NONE, ERF_A, ERF_B, ERF_MUL, ERF_WRONG, RELU_SHARED };

static int variant;

static int scalar(Graph *g, double v) {
  int64_t one[1] = {1};
  return constant(g, 1, one, 0, v, v);
}

/* x [3,4,8] -> MatMul [8,16] + b [16] -> the variant's activation */
static void build(Graph *g) {
  int64_t xd[3] = {3, 4, 8}, wd[2] = {8, 16}, bd[1] = {16};
  int x = input(g, "x", 3, xd);
  int y = NODE(g, GPUC_OP_ADD, NODE(g, GPUC_OP_MATMUL, x, constant(g, 2, wd, 41, -0.8, 0.8)),
               constant(g, 1, bd, 42, -0.5, 0.5));
  int out;
  if (variant == RELU || variant == RELU_SHARED) {
    out = NODE(g, GPUC_OP_RELU, y);
    if (variant == RELU_SHARED) output(g, y);
  } else if (variant == GELU_TANH || variant == GELU_NONE) {
    out = NODE(g, GPUC_OP_GELU, y);
    attr_s(g, "approximate", variant == GELU_TANH ? "tanh" : "none");
  } else {
    int d = variant == ERF_MUL ? NODE(g, GPUC_OP_MUL, y, scalar(g, sqrt(0.5)))
                               : NODE(g, GPUC_OP_DIV, y, scalar(g, variant == ERF_WRONG ? 2.0 : sqrt(2.0)));
    int a = NODE(g, GPUC_OP_ADD, NODE(g, GPUC_OP_ERF, d), scalar(g, 1));
    if (variant == ERF_B) out = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, y, scalar(g, 0.5)), a);
    else out = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, y, a), scalar(g, 0.5));
  }
  output(g, out);
}

typedef struct {
  const char *what;
  int variant;
  bool fp16;
  int want_act; /* -1: not fused */
} Case;

static const Case cases[] = {
    {"relu", RELU, false, 1},
    {"gelu tanh", GELU_TANH, false, 3},
    {"gelu erf, f32 plan", GELU_NONE, false, -1},
    {"gelu erf, fp16 plan", GELU_NONE, true, 2},
    {"erf pattern (y * (1 + erf)) * 0.5", ERF_A, true, 2},
    {"erf pattern (y * 0.5) * (1 + erf)", ERF_B, true, 2},
    {"erf pattern with y * (1 / sqrt 2)", ERF_MUL, true, 2},
    {"erf pattern, f32 plan", ERF_A, false, -1},
    {"erf pattern divided by 2", ERF_WRONG, true, -1},
    {"relu of a graph output", RELU_SHARED, false, -1},
};

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const Case *c = &cases[i];
    GpucErr e = {0};
    variant = c->variant;
    Graph *g0 = graph_new(20), *g1 = graph_new(20);
    build(g0);
    build(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: bad test graph: %s", c->what, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    o.fp16 = c->fp16; /* the pass reads the flag; the graph stays f32 here */
    CHECK(pass_fuse_matmul_bias(g1, &o, &e) == 1, "%s: no MatMulBias: %s", c->what, e.msg);
    int before = g1->nnodes, got = pass_fuse_matmul_act(g1, &o, &e);
    CHECK(got == (c->want_act > 0), "%s: %d fused (%s)", c->what, got, e.msg);
    int act = -1;
    for (int k = 0; k < g1->nnodes; k++)
      if (g1->nodes[k].op == GPUC_OP_MATMULBIAS) act = (int)gpuc_attr_i(&g1->nodes[k], "activation", 0);
    CHECK(act == (c->want_act > 0 ? c->want_act : 0), "%s: activation %d, expected %d", c->what, act, c->want_act);
    if (c->want_act > 0)
      CHECK(g1->nnodes == 1, "%s: %d nodes left of %d, expected the MatMulBias alone", c->what, g1->nnodes, before);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: verify: %s", c->what, e.msg);
    compare(c->what, g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
  return check_summary();
}
