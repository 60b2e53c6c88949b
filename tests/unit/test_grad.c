/* Gradient check of every op with a rule (passes/grad_rules.c): a tiny f64
 * graph per case, op + loss = ReduceSum(op output * R) for a fixed random R,
 * differentiated by gpuc_autodiff and compared element by element with
 * central finite differences (eps 1e-6, tolerance 1e-6 relative), all run
 * on the CPU reference. Also: an op without a rule fails with a message.
 * Prints each failure, then "N passed, N failed". */
#include "grad_harness.h"

static void test_gemm(void) {
  static const int64_t cshapes[][3] = {{1, 5}, {2, 3, 5}, {2, 1, 5}, {2, 3, 1}, {0}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int cs = 0; cs < 6; cs++) {
        char nm[64];
        snprintf(nm, sizeof nm, "Gemm ta=%d tb=%d c=%d", ta, tb, cs);
        begin(nm);
        int64_t ad[2] = {ta ? 4 : 3, ta ? 3 : 4}, bd[2] = {tb ? 5 : 4, tb ? 4 : 5};
        int a = cval("A", F, 2, ad), b = cval("B", F, 2, bd);
        int ins[3] = {a, b, -1}, nin = 2;
        if (cs < 5) { ins[2] = cval("C", F, (int)cshapes[cs][0], cshapes[cs] + 1); nin = 3; }
        node(GPUC_OP_GEMM, "gemm", nin, ins);
        if (ta) attr_i("transA", 1);
        if (tb) attr_i("transB", 1);
        if (cs & 1) { attr_f("alpha", 0.75f); attr_f("beta", 1.5f); }
        finish(G->nodes[last_node].out[0]);
      }
}

static void test_matmul(void) {
  begin("MatMul");
  int64_t ad[2] = {3, 4}, bd[2] = {4, 2};
  int ins[2] = {cval("A", F, 2, ad), cval("B", F, 2, bd)};
  finish(node(GPUC_OP_MATMUL, "mm", 2, ins));
}

static void test_binary(void) {
  static const struct { GpucOp op; const char *name; int ra; int64_t a[3]; int rb; int64_t b[3]; } cs[] = {
    {GPUC_OP_ADD, "Add same", 2, {2, 3}, 2, {2, 3}},
    {GPUC_OP_ADD, "Add bcast", 3, {2, 3, 4}, 2, {3, 1}},
    {GPUC_OP_ADD, "Add bcast both", 2, {3, 1}, 3, {2, 1, 4}},
    {GPUC_OP_SUB, "Sub same", 2, {2, 3}, 2, {2, 3}},
    {GPUC_OP_SUB, "Sub bcast", 1, {3}, 3, {2, 4, 3}},
    {GPUC_OP_SUB, "Sub scalar", 0, {0}, 2, {2, 3}},
    {GPUC_OP_MUL, "Mul same", 2, {2, 3}, 2, {2, 3}},
    {GPUC_OP_MUL, "Mul bcast", 3, {2, 3, 4}, 1, {4}},
    {GPUC_OP_MUL, "Mul bcast both", 3, {2, 1, 4}, 2, {3, 1}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    int ins[2] = {cval("A", F, cs[i].ra, cs[i].a), cval("B", F, cs[i].rb, cs[i].b)};
    finish(node(cs[i].op, "bin", 2, ins));
  }
  /* the same value twice: gradients accumulate */
  begin("Mul x*x");
  int64_t d[2] = {2, 3};
  int x = cval("X", F, 2, d), ins[2] = {x, x};
  finish(node(GPUC_OP_MUL, "sq", 2, ins));
  begin("Add chain x+(x*x)");
  x = cval("X", F, 2, d);
  int sq = node(GPUC_OP_MUL, "sq", 2, ins);
  int ins2[2] = {x, sq};
  finish(node(GPUC_OP_ADD, "add", 2, ins2));
}

static void test_unary(void) {
  static const struct { GpucOp op; const char *name; } cs[] = {
    {GPUC_OP_RELU, "Relu"}, {GPUC_OP_SIGMOID, "Sigmoid"}, {GPUC_OP_TANH, "Tanh"}, {GPUC_OP_MISH, "Mish"},
    {GPUC_OP_IDENTITY, "Identity"},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    away_from_zero = cs[i].op == GPUC_OP_RELU;
    int64_t d[3] = {2, 3, 4};
    int x = cval("X", F, 3, d);
    finish(node(cs[i].op, "u", 1, &x));
  }
}

/* Mish over [-6, 6): both branches of the stable softplus, and the
 * saturated tails where tanh(softplus(x)) is near 1 or x * sigmoid(x) near 0 */
static void test_mish_wide(void) {
  begin("Mish wide");
  int64_t d[2] = {4, 8};
  int x = cval("X", F, 2, d);
  for (int64_t i = 0; i < 32; i++) gpuc_set_f64(&G->values[x].t, i, 6 * gpuc_get_f64(&G->values[x].t, i));
  finish(node(GPUC_OP_MISH, "mish", 1, &x));
}

static void test_shape(void) {
  int64_t d[3] = {2, 3, 4};
  for (int axis = 0; axis <= 3; axis++) {
    char nm[64];
    snprintf(nm, sizeof nm, "Flatten axis=%d", axis);
    begin(nm);
    int x = cval("X", F, 3, d);
    node(GPUC_OP_FLATTEN, "fl", 1, &x);
    attr_i("axis", axis);
    finish(G->nodes[last_node].out[0]);
  }
  begin("Reshape");
  int x = cval("X", F, 3, d);
  int64_t s[2] = {4, -1};
  int ins[2] = {x, cints("shape", 2, s)};
  finish(node(GPUC_OP_RESHAPE, "rs", 2, ins));
}

static void test_reduce(void) {
  int64_t d[3] = {2, 3, 4};
  for (int keep = 0; keep < 2; keep++) {
    char nm[64];
    snprintf(nm, sizeof nm, "ReduceSum axes=[2,0] keepdims=%d", keep);
    begin(nm);
    int64_t ax[2] = {2, 0};
    int ins[2] = {cval("X", F, 3, d), cints("axes", 2, ax)};
    node(GPUC_OP_REDUCESUM, "rs", 2, ins);
    attr_i("keepdims", keep);
    finish(G->nodes[last_node].out[0]);
  }
  begin("ReduceSum all");
  int x = cval("X", F, 3, d);
  node(GPUC_OP_REDUCESUM, "rs", 1, &x);
  finish(G->nodes[last_node].out[0]);
}

static void test_sce(void) {
  static const struct { const char *name, *red; int rank; int64_t d[3]; bool ignore, weights; } cs[] = {
    {"SCE mean", "mean", 2, {4, 5}, false, false},
    {"SCE sum", "sum", 2, {4, 5}, false, false},
    {"SCE none", "none", 2, {4, 5}, false, false},
    {"SCE mean ignore_index", "mean", 2, {6, 3}, true, false},
    {"SCE mean weights", "mean", 2, {4, 5}, false, true},
    {"SCE mean [N,C,D]", "mean", 3, {2, 3, 4}, false, false},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    int x = cval("scores", F, cs[i].rank, cs[i].d);
    int64_t ld[2] = {cs[i].d[0], cs[i].d[2]};
    int t = cval("labels", GPUC_DT_I64, cs[i].rank - 1, ld);
    int64_t nl = gpuc_numel(&G->values[t].t);
    for (int64_t j = 0; j < nl; j++) gpuc_set_i64(&G->values[t].t, j, (j * 7 + 3) % cs[i].d[1]);
    int ins[3] = {x, t, -1};
    if (cs[i].weights) {
      int64_t c = cs[i].d[1];
      ins[2] = cval("weights", F, 1, &c);
      for (int64_t j = 0; j < c; j++) gpuc_set_f64(&G->values[ins[2]].t, j, 0.5 + 0.25 * (double)j);
    }
    node(GPUC_OP_SOFTMAXCROSSENTROPYLOSS, "sce", cs[i].weights ? 3 : 2, ins);
    attr_s("reduction", cs[i].red);
    if (cs[i].ignore) attr_i("ignore_index", 1);
    finish(G->nodes[last_node].out[0]);
  }
}

/* Gemm -> Relu -> Gemm -> SoftmaxCrossEntropyLoss, the trainer's shape */
static void test_mlp(void) {
  begin("MLP chain");
  away_from_zero = true;
  int64_t xd[2] = {4, 6}, w1d[2] = {5, 6}, b1d[1] = {5}, w2d[2] = {3, 5}, b2d[1] = {3}, ld[1] = {4};
  int x = cval("x", F, 2, xd);
  G->values[x].is_const = true;
  int ins[3] = {x, cval("w1", F, 2, w1d), cval("b1", F, 1, b1d)};
  int h = node(GPUC_OP_GEMM, "fc1", 3, ins);
  attr_i("transB", 1);
  int hr = node(GPUC_OP_RELU, "relu", 1, &h);
  int ins2[3] = {hr, cval("w2", F, 2, w2d), cval("b2", F, 1, b2d)};
  int y = node(GPUC_OP_GEMM, "fc2", 3, ins2);
  attr_i("transB", 1);
  int t = cval("labels", GPUC_DT_I64, 1, ld);
  for (int j = 0; j < 4; j++) gpuc_set_i64(&G->values[t].t, j, j % 3);
  int ins3[2] = {y, t};
  finish(node(GPUC_OP_SOFTMAXCROSSENTROPYLOSS, "loss", 2, ins3));
}

static void test_no_rule(void) {
  begin("no rule");
  int64_t d[2] = {2, 3};
  int x = cval("X", F, 2, d);
  int xi = node(GPUC_OP_IDENTITY, "id", 1, &x); /* makes X a parameter */
  int y = node(GPUC_OP_COS, "cos", 1, &xi);
  int loss = node(GPUC_OP_REDUCESUM, "sum", 1, &y);
  attr_i("keepdims", 0);
  GpucErr e = {0};
  bool ok = !gpuc_graph_infer(G, &e);
  int rc = ok ? gpuc_autodiff(G, loss, &e) : -1;
  CHECK(ok && rc < 0 && strstr(e.msg, "no gradient rule for Cos") && e.unsupported,
        "no rule: expected 'no gradient rule for Cos', got '%s'", e.msg);
  gpuc_graph_free(G);
  /* a non-scalar loss is refused */
  begin("non-scalar loss");
  x = cval("X", F, 2, d);
  y = node(GPUC_OP_RELU, "r", 1, &x);
  memset(&e, 0, sizeof e);
  ok = !gpuc_graph_infer(G, &e);
  rc = ok ? gpuc_autodiff(G, y, &e) : -1;
  CHECK(ok && rc < 0 && strstr(e.msg, "scalar"), "non-scalar loss: got '%s'", e.msg);
  gpuc_graph_free(G);
}

int main(void) {
  test_gemm();
  test_matmul();
  test_binary();
  test_unary();
  test_mish_wide();
  test_shape();
  test_reduce();
  test_sce();
  test_mlp();
  test_no_rule();
  return check_summary();
}
