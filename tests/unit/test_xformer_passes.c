/* The transformer rewrites, each on small graphs built here and checked
 * against the unrewritten graph on the CPU reference with seeded random
 * inputs (f32: |a-b| <= 1e-5 + 1e-5|b|):
 *   fuse_gelu       GELU written out (tanh and erf forms, several
 *                   spellings) -> Gelu; look-alikes and shared values not
 *   fuse_attention  the dynamo exporter's K transpose (Reshape, 3-D
 *                   Transpose, Reshape)
 *   gemm_as_matmul  Gemm -> MatMul/MatMulBias, flattening Reshapes dropped */
#include "passes.h"
#include "ref.h"
#include "check.h"
#define TEST_RNG_SEED 41
#include "graph_build.h"
#include <stdio.h>

static int scalar(Graph *g, double x) {
  char name[32];
  snprintf(name, sizeof name, "s%d", g->nvalues);
  int v = gpuc_graph_add_value(g, name);
  GpucErr e;
  Tensor *t = gpuc_tensor_new(GPUC_DT_F32, 0, NULL, &e);
  GPUC_ASSERT(t);
  gpuc_set_f64(t, 0, x);
  g->values[v].t = *t;
  free(t);
  g->values[v].is_const = true;
  return v;
}

static int shape_const(Graph *g, int rank, const int64_t *dims) {
  char name[32];
  snprintf(name, sizeof name, "shape%d", g->nvalues);
  int v = gpuc_graph_add_value(g, name);
  GpucErr e;
  int64_t n = rank;
  Tensor *t = gpuc_tensor_new(GPUC_DT_I64, 1, &n, &e);
  GPUC_ASSERT(t);
  for (int i = 0; i < rank; i++) gpuc_set_i64(t, i, dims[i]);
  g->values[v].t = *t;
  free(t);
  g->values[v].is_const = true;
  return v;
}

static int reshape(Graph *g, int x, int rank, const int64_t *dims) {
  return NODE(g, GPUC_OP_RESHAPE, x, shape_const(g, rank, dims));
}

/* ---- fuse_gelu --------------------------------------------------------- */

/* x [4,33] (or 2 * input: variant 6) -> GELU -> output:
 * 0 tanh: 0.5x first, Pow(x, 3), sqrt(2/pi) on the sum: fused "tanh"
 * 1 tanh: x*x*x by Muls, the sum expanded, 1 + t, 0.5 last: fused "tanh"
 * 2 erf: Div(x, sqrt 2), x * (1 + erf) then * 0.5: fused "none"
 * 3 erf: Mul(x, 1/sqrt 2), (0.5x) * (1 + erf): fused "none"
 * 4 tanh form with 0.05 for 0.044715: not fused
 * 5 variant 0 with its Tanh's output a second graph output: not fused
 * 6 variant 0 of x = Mul(input, 2): fused, the Mul stays as the root */
static int gelu_variant;
static void build_gelu(Graph *g) {
  int64_t dims[2] = {4, 33};
  int x = input(g, "x", 2, dims), y, t = -1;
  if (gelu_variant == 6) x = NODE(g, GPUC_OP_MUL, x, scalar(g, 2.0));
  switch (gelu_variant) {
  case 0: case 4: case 5: case 6: {
    int h = NODE(g, GPUC_OP_MUL, x, scalar(g, 0.5));
    int c = NODE(g, GPUC_OP_POW, x, scalar(g, 3.0));
    c = NODE(g, GPUC_OP_MUL, c, scalar(g, gelu_variant == 4 ? 0.05 : 0.044715f));
    int s = NODE(g, GPUC_OP_ADD, x, c);
    s = NODE(g, GPUC_OP_MUL, s, scalar(g, 0.7978845608028654f));
    t = NODE(g, GPUC_OP_TANH, s);
    int a = NODE(g, GPUC_OP_ADD, t, scalar(g, 1.0));
    y = NODE(g, GPUC_OP_MUL, h, a);
    break;
  }
  case 1: {
    int x3 = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, x, x), x);
    int a = NODE(g, GPUC_OP_MUL, x, scalar(g, 0.7978845608028654f));
    int b = NODE(g, GPUC_OP_MUL, x3, scalar(g, 0.7978845608028654f * 0.044715f));
    t = NODE(g, GPUC_OP_TANH, NODE(g, GPUC_OP_ADD, a, b));
    int p = NODE(g, GPUC_OP_ADD, scalar(g, 1.0), t);
    y = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, x, p), scalar(g, 0.5));
    break;
  }
  case 2: {
    int er = NODE(g, GPUC_OP_ERF, NODE(g, GPUC_OP_DIV, x, scalar(g, 1.4142135623730951f)));
    int p = NODE(g, GPUC_OP_ADD, er, scalar(g, 1.0));
    y = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, x, p), scalar(g, 0.5));
    break;
  }
  default: {
    int er = NODE(g, GPUC_OP_ERF, NODE(g, GPUC_OP_MUL, x, scalar(g, 0.7071067811865476f)));
    int p = NODE(g, GPUC_OP_ADD, er, scalar(g, 1.0));
    y = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, x, scalar(g, 0.5)), p);
    break;
  }
  }
  output(g, y);
  if (gelu_variant == 5) output(g, t);
}

static void test_gelu(void) {
  for (gelu_variant = 0; gelu_variant <= 6; gelu_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(20), *g1 = graph_new(20);
    build_gelu(g0);
    build_gelu(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gelu %d: bad test graph: %s",
          gelu_variant, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = gelu_variant != 4 && gelu_variant != 5;
    int got = pass_fuse_gelu(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_GELU) == want, "gelu %d: %d fused, expected %d (%s)", gelu_variant,
          got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gelu %d: verify: %s", gelu_variant,
          e.msg);
    if (want) {
      const Node *n = &g1->nodes[g1->nnodes - 1];
      const char *form = gelu_variant <= 1 || gelu_variant == 6 ? "tanh" : "none";
      CHECK(g1->nnodes == (gelu_variant == 6 ? 2 : 1) && n->op == GPUC_OP_GELU &&
                !strcmp(gpuc_attr_s(n, "approximate", "?"), form),
            "gelu %d: %d nodes, last %s approximate=%s (want %s)", gelu_variant, g1->nnodes, gpuc_op_name(n),
            gpuc_attr_s(n, "approximate", "?"), form);
    }
    compare("gelu", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fuse_attention: the dynamo exporter's K transpose ------------------ */

/* q [2,3,7,8], k and v [2,3,5,8]; Kt = Reshape(Transpose(Reshape(k,
 * [6,5,8]), [0,2,1]), [2,3,8,5]); Q and Kt each scaled by Mul(., 8^-1/4),
 * an additive [2,1,1,5] mask, Softmax, Where(IsNaN), MatMul by V.
 * 0: fused, one node left
 * 1: the 3-D Transpose's output is a second graph output: not fused */
static int kt_variant;
static void build_kt(Graph *g) {
  int64_t qd[4] = {2, 3, 7, 8}, kd[4] = {2, 3, 5, 8}, md[4] = {2, 1, 1, 5};
  int64_t flat[3] = {6, 5, 8}, back[4] = {2, 3, 8, 5}, p3[3] = {0, 2, 1};
  int q = input(g, "q", 4, qd), k = input(g, "k", 4, kd), v = input(g, "v", 4, kd);
  int mask = constant(g, 4, md, 5, -3, 0);
  int t3 = transpose(g, reshape(g, k, 3, flat), 3, p3);
  int kt = reshape(g, t3, 4, back);
  double c = pow(8.0, -0.25);
  int s = NODE(g, GPUC_OP_MATMUL, NODE(g, GPUC_OP_MUL, q, scalar(g, c)), NODE(g, GPUC_OP_MUL, kt, scalar(g, c)));
  int p = NODE(g, GPUC_OP_SOFTMAX, NODE(g, GPUC_OP_ADD, s, mask));
  attr_i(g, "axis", -1);
  int w = NODE(g, GPUC_OP_WHERE, NODE(g, GPUC_OP_ISNAN, p), scalar(g, 0.0), p);
  output(g, NODE(g, GPUC_OP_MATMUL, w, v));
  if (kt_variant == 1) output(g, t3);
}

static void test_attention_kt(void) {
  for (kt_variant = 0; kt_variant <= 1; kt_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(20), *g1 = graph_new(20);
    build_kt(g0);
    build_kt(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "attention kt %d: bad test graph: %s",
          kt_variant, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = kt_variant == 0;
    int got = pass_fuse_attention(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_ATTENTION) == want, "attention kt %d: %d fused, expected %d (%s)",
          kt_variant, got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "attention kt %d: verify: %s",
          kt_variant, e.msg);
    if (want) {
      const Node *n = &g1->nodes[g1->nnodes - 1];
      CHECK(g1->nnodes == 1 && fabs(gpuc_attr_f(n, "scale", 0) - 1 / sqrt(8.0)) < 1e-6,
            "attention kt %d: %d nodes, scale %g", kt_variant, g1->nnodes, gpuc_attr_f(n, "scale", 0));
    }
    compare("attention kt", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- gemm_as_matmul ---------------------------------------------------- */

/* x [2,5,16] -> Reshape [10,16] -> Gemm -> Reshape [2,5,24] -> Relu:
 * 0: Gemm(W [24,16], transB 1, C [24]): MatMulBias on x, 3-D, Reshapes gone
 * 1: Gemm(W [16,24]) without C: MatMul, likewise
 * 2: alpha 2: stays a Gemm
 * 3: as 0, the inner Reshape's output a second graph output: MatMulBias,
 *    that Reshape stays */
static int gemm_variant;
static void build_gemm(Graph *g) {
  int64_t xd[3] = {2, 5, 16}, flat[2] = {10, 16}, back[3] = {2, 5, 24}, wt[2] = {24, 16}, w[2] = {16, 24};
  int64_t nb[1] = {24};
  int x = input(g, "x", 3, xd);
  int a = reshape(g, x, 2, flat), y;
  if (gemm_variant == 1) {
    y = NODE(g, GPUC_OP_GEMM, a, constant(g, 2, w, 3, -0.5, 0.5));
  } else {
    y = NODE(g, GPUC_OP_GEMM, a, constant(g, 2, wt, 3, -0.5, 0.5), constant(g, 1, nb, 4, -1, 1));
    attr_i(g, "transB", 1);
    if (gemm_variant == 2) attr_f(g, "alpha", 2.0f);
  }
  output(g, NODE(g, GPUC_OP_RELU, reshape(g, y, 3, back)));
  if (gemm_variant == 3) output(g, a);
}

static void test_gemm_as_matmul(void) {
  for (gemm_variant = 0; gemm_variant <= 3; gemm_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(17), *g1 = graph_new(17);
    build_gemm(g0);
    build_gemm(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gemm %d: bad test graph: %s",
          gemm_variant, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int got = pass_gemm_as_matmul(g1, &o, &e);
    CHECK(got == (gemm_variant == 2 ? 0 : 2), "gemm %d: %d changes (%s)", gemm_variant, got, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gemm %d: verify: %s", gemm_variant,
          e.msg);
    GpucOp want = gemm_variant == 1 ? GPUC_OP_MATMUL : gemm_variant == 2 ? GPUC_OP_GEMM : GPUC_OP_MATMULBIAS;
    int want_nodes = gemm_variant == 2 ? 4 : gemm_variant == 3 ? 3 : 2;
    CHECK(count_op(g1, want) == 1 && g1->nnodes == want_nodes && count_op(g1, GPUC_OP_RESHAPE) == want_nodes - 2,
          "gemm %d: %d nodes, %d of op %d", gemm_variant, g1->nnodes, count_op(g1, want), (int)want);
    compare("gemm_as_matmul", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

int main(void) {
  test_gelu();
  test_attention_kt();
  test_gemm_as_matmul();
  return check_summary();
}
