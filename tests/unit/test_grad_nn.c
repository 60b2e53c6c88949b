/* Gradient check of the CNN rules (passes/grad_rules_nn.c): Conv (strides,
 * pads, dilations, groups, auto_pad, 1-D, with and without bias), MaxPool,
 * AveragePool (count_include_pad both ways, ceil_mode), GlobalAveragePool,
 * BatchNormalization (training and inference mode) and a small CNN chain.
 * Same harness as test_grad.c: a tiny f64 graph per case, loss =
 * ReduceSum(op output * R), autodiff against central finite differences
 * (eps 1e-6, tolerance 1e-6 relative) on the CPU reference. Plus: MaxPool
 * ties route the gradient to the first maximum.
 * Prints each failure, then "N passed, N failed". */
#include "grad_harness.h"


/* ---- Conv ---------------------------------------------------------------- */

typedef struct {
  const char *name;
  int rank;
  int64_t x[5], w[5];
  bool bias;
  int64_t group;
  int64_t strides[3], pads[6], dil[3];  /* strides[0] == 0: attribute absent */
  const char *auto_pad;
} ConvCase;

static void test_conv(void) {
  static const ConvCase cs[] = {
    {"Conv 3x3 pad 1", 4, {2, 2, 5, 5}, {3, 2, 3, 3}, true, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, NULL},
    {"Conv stride 2 no bias", 4, {1, 3, 6, 7}, {2, 3, 3, 2}, false, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}, NULL},
    {"Conv stride 2 asym pads", 4, {2, 2, 6, 5}, {4, 2, 3, 3}, true, 1, {2, 2}, {1, 0, 2, 1}, {1, 1}, NULL},
    {"Conv groups 2 stride (2,1) dil (1,2)", 4, {2, 4, 7, 8}, {6, 2, 3, 2}, true, 2, {2, 1}, {1, 1, 0, 1}, {1, 2}, NULL},
    {"Conv depthwise", 4, {1, 3, 5, 5}, {3, 1, 3, 3}, true, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, NULL},
    {"Conv depthwise x2 stride 2", 4, {2, 2, 6, 6}, {4, 1, 3, 3}, true, 2, {2, 2}, {1, 1, 1, 1}, {1, 1}, NULL},
    {"Conv 1x1 stride 2", 4, {2, 3, 5, 5}, {2, 3, 1, 1}, true, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}, NULL},
    {"Conv SAME_UPPER stride 2", 4, {1, 2, 5, 6}, {3, 2, 3, 3}, true, 1, {2, 2}, {0}, {1, 1}, "SAME_UPPER"},
    {"Conv SAME_LOWER", 4, {1, 2, 4, 5}, {2, 2, 2, 3}, false, 1, {1, 1}, {0}, {1, 1}, "SAME_LOWER"},
    {"Conv 1-D stride 2 pad", 3, {2, 2, 9}, {3, 2, 3}, true, 1, {2}, {1, 2}, {1}, NULL},
    {"Conv 3-D groups", 5, {1, 2, 4, 3, 4}, {2, 1, 2, 2, 3}, true, 2, {1, 2, 1}, {0, 1, 1, 1, 0, 0}, {1, 1, 1}, NULL},
    {"Conv default attrs", 4, {1, 1, 4, 4}, {2, 1, 2, 2}, true, 0, {0}, {0}, {0}, NULL},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    const ConvCase *k = &cs[i];
    begin(k->name);
    int nsp = k->rank - 2;
    int ins[3] = {cval("X", F, k->rank, k->x), cval("W", F, k->rank, k->w), -1};
    if (k->bias) ins[2] = cval("B", F, 1, k->w);
    node(GPUC_OP_CONV, "conv", k->bias ? 3 : 2, ins);
    if (k->group) attr_i("group", k->group);
    if (k->strides[0]) attr_ints("strides", nsp, k->strides);
    if (k->auto_pad) attr_s("auto_pad", k->auto_pad);
    else if (k->strides[0]) attr_ints("pads", 2 * nsp, k->pads);
    if (k->dil[0]) attr_ints("dilations", nsp, k->dil);
    finish(G->nodes[last_node].out[0]);
  }
}

/* ---- pools --------------------------------------------------------------- */

typedef struct {
  const char *name;
  GpucOp op;
  int rank;
  int64_t x[5], k[3], strides[3], pads[6], dil[3];
  int include_pad, ceil;
} PoolCase;

static void test_pool(void) {
  static const PoolCase cs[] = {
    {"MaxPool 2x2 s2", GPUC_OP_MAXPOOL, 4, {2, 3, 4, 6}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 0},
    {"MaxPool 3x3 s2 pad 1", GPUC_OP_MAXPOOL, 4, {1, 2, 5, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0},
    {"MaxPool overlap s1 asym pads", GPUC_OP_MAXPOOL, 4, {1, 2, 4, 5}, {2, 3}, {1, 1}, {0, 1, 1, 1}, {1, 1}, 0, 0},
    {"MaxPool ceil_mode", GPUC_OP_MAXPOOL, 4, {1, 2, 5, 5}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 1},
    {"MaxPool dilation 2", GPUC_OP_MAXPOOL, 4, {1, 1, 6, 6}, {2, 2}, {1, 2}, {0, 0, 0, 0}, {2, 2}, 0, 0},
    {"MaxPool 1-D", GPUC_OP_MAXPOOL, 3, {2, 2, 9}, {3}, {2}, {1, 1}, {1}, 0, 0},
    {"AveragePool 2x2 s2", GPUC_OP_AVERAGEPOOL, 4, {2, 3, 4, 6}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 0},
    {"AveragePool pad exclude", GPUC_OP_AVERAGEPOOL, 4, {1, 2, 5, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0},
    {"AveragePool pad include", GPUC_OP_AVERAGEPOOL, 4, {1, 2, 5, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, 0},
    {"AveragePool asym pads include", GPUC_OP_AVERAGEPOOL, 4, {1, 2, 4, 5}, {2, 3}, {1, 2}, {0, 1, 1, 2}, {1, 1}, 1, 0},
    {"AveragePool ceil_mode include", GPUC_OP_AVERAGEPOOL, 4, {1, 2, 5, 5}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1, 1},
    {"AveragePool ceil_mode exclude", GPUC_OP_AVERAGEPOOL, 4, {1, 2, 5, 5}, {2, 2}, {2, 2}, {1, 1, 0, 0}, {1, 1}, 0, 1},
    {"AveragePool 1-D", GPUC_OP_AVERAGEPOOL, 3, {2, 2, 9}, {3}, {2}, {1, 1}, {1}, 1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    const PoolCase *k = &cs[i];
    begin(k->name);
    int nsp = k->rank - 2;
    int x = cval("X", F, k->rank, k->x);
    node(k->op, "pool", 1, &x);
    attr_ints("kernel_shape", nsp, k->k);
    attr_ints("strides", nsp, k->strides);
    attr_ints("pads", 2 * nsp, k->pads);
    if (k->dil[0] != 1) attr_ints("dilations", nsp, k->dil);
    if (k->include_pad) attr_i("count_include_pad", 1);
    if (k->ceil) attr_i("ceil_mode", 1);
    finish(G->nodes[last_node].out[0]);
  }
  for (int r = 3; r <= 5; r++) {
    static const int64_t d[5] = {2, 3, 4, 3, 2};
    char nm[64];
    snprintf(nm, sizeof nm, "GlobalAveragePool rank %d", r);
    begin(nm);
    int x = cval("X", F, r, d);
    finish(node(GPUC_OP_GLOBALAVERAGEPOOL, "gap", 1, &x));
  }
}

/* Ties: the whole gradient of a window goes to its first maximum. */
static void test_maxpool_ties(void) {
  begin("MaxPool ties");
  int64_t d[4] = {1, 1, 2, 4};
  int x = cval("X", F, 4, d);
  for (int i = 0; i < 8; i++) gpuc_set_f64(&G->values[x].t, i, 1.0);
  int xi = node(GPUC_OP_IDENTITY, "id", 1, &x);
  int y = node(GPUC_OP_MAXPOOL, "pool", 1, &xi);
  int64_t k[2] = {2, 2}, s[2] = {2, 2};
  attr_ints("kernel_shape", 2, k);
  attr_ints("strides", 2, s);
  int loss = node(GPUC_OP_REDUCESUM, "sum", 1, &y);
  attr_i("keepdims", 0);
  G->outputs = gpuc_arena_alloc(&G->arena, sizeof(int));
  G->outputs[0] = loss;
  G->noutputs = 1;
  GpucErr e = {0};
  if (gpuc_graph_infer(G, &e) || gpuc_autodiff(G, loss, &e)) {
    CHECK(false, "ties: %s", e.msg);
    gpuc_graph_free(G);
    return;
  }
  Tensor *outs[8] = {0};
  if (gpuc_ref_run(G, NULL, outs, &e)) {
    CHECK(false, "ties: run: %s", e.msg);
    gpuc_graph_free(G);
    return;
  }
  static const double want[8] = {1, 0, 1, 0, 0, 0, 0, 0};
  bool ok = G->noutputs == 2 && gpuc_numel(outs[1]) == 8;
  for (int i = 0; ok && i < 8; i++) ok = gpuc_get_f64(outs[1], i) == want[i];
  CHECK(ok, "ties: the gradient does not go to the first maximum of each window");
  for (int k2 = 0; k2 < G->noutputs; k2++) gpuc_tensor_free(outs[k2]);
  gpuc_graph_free(G);
}

/* ---- BatchNormalization ---------------------------------------------------- */

static void test_bn(void) {
  static const struct { const char *name; int rank; int64_t d[5]; int training; int opset; } cs[] = {
    {"BN training [2,3,4,5]", 4, {2, 3, 4, 5}, 1, 17},
    {"BN training [4,2]", 2, {4, 2}, 1, 17},
    {"BN training [3,2,5]", 3, {3, 2, 5}, 1, 15},
    {"BN inference [2,3,4,5]", 4, {2, 3, 4, 5}, 0, 17},
    {"BN inference opset 9", 4, {2, 2, 3, 3}, 0, 9},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    G->opset = cs[i].opset;
    int64_t c = cs[i].d[1];
    /* X through an Identity: BatchNormalization's X slot is not a parameter */
    int x = cval("X", F, cs[i].rank, cs[i].d);
    int xi = node(GPUC_OP_IDENTITY, "id", 1, &x);
    int ins[5] = {xi, cval("scale", F, 1, &c), cval("B", F, 1, &c), cval("mean", F, 1, &c),
                  cval("var", F, 1, &c)};
    for (int64_t j = 0; j < c; j++)
      gpuc_set_f64(&G->values[ins[4]].t, j, 0.5 + fabs(gpuc_get_f64(&G->values[ins[4]].t, j)));
    node(GPUC_OP_BATCHNORMALIZATION, "bn", 5, ins);
    attr_f("epsilon", 1e-3f);
    if (cs[i].training) attr_i("training_mode", 1);
    finish(G->nodes[last_node].out[0]);
  }
}

/* Conv -> Relu -> MaxPool -> Conv (groups) -> BatchNorm -> Relu ->
 * AveragePool -> GlobalAveragePool -> Flatten -> Gemm -> SoftmaxCrossEntropyLoss */
static void test_cnn(void) {
  begin("CNN chain");
  G->opset = 17;
  int64_t xd[4] = {2, 2, 8, 8}, w1d[4] = {4, 2, 3, 3}, b1d[1] = {4}, w2d[4] = {4, 2, 3, 3};
  int64_t cd[1] = {4}, fwd[2] = {3, 4}, fbd[1] = {3}, ld[1] = {2};
  int x = cval("x", F, 4, xd);
  int ins[5] = {x, cval("w1", F, 4, w1d), cval("b1", F, 1, b1d)};
  int h = node(GPUC_OP_CONV, "c1", 3, ins);
  int64_t p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2}, s2[2] = {2, 2};
  attr_ints("pads", 4, p1);
  h = node(GPUC_OP_RELU, "r1", 1, &h);
  h = node(GPUC_OP_MAXPOOL, "mp", 1, &h);
  attr_ints("kernel_shape", 2, k2);
  attr_ints("strides", 2, s2);
  int ins2[2] = {h, cval("w2", F, 4, w2d)};
  h = node(GPUC_OP_CONV, "c2", 2, ins2);
  attr_i("group", 2);
  attr_ints("pads", 4, p1);
  int ins3[5] = {h, cval("g", F, 1, cd), cval("b", F, 1, cd), cval("m", F, 1, cd), cval("v", F, 1, cd)};
  for (int j = 0; j < 4; j++) gpuc_set_f64(&G->values[ins3[4]].t, j, 1.0);
  h = node(GPUC_OP_BATCHNORMALIZATION, "bn", 5, ins3);
  attr_i("training_mode", 1);
  h = node(GPUC_OP_RELU, "r2", 1, &h);
  h = node(GPUC_OP_AVERAGEPOOL, "ap", 1, &h);
  attr_ints("kernel_shape", 2, k2);
  attr_ints("pads", 4, p1);
  attr_ints("strides", 2, s2);
  h = node(GPUC_OP_GLOBALAVERAGEPOOL, "gap", 1, &h);
  h = node(GPUC_OP_FLATTEN, "fl", 1, &h);
  int ins4[3] = {h, cval("fw", F, 2, fwd), cval("fb", F, 1, fbd)};
  h = node(GPUC_OP_GEMM, "fc", 3, ins4);
  attr_i("transB", 1);
  int t = cval("labels", GPUC_DT_I64, 1, ld);
  gpuc_set_i64(&G->values[t].t, 0, 1);
  gpuc_set_i64(&G->values[t].t, 1, 2);
  int ins5[2] = {h, t};
  finish(node(GPUC_OP_SOFTMAXCROSSENTROPYLOSS, "loss", 2, ins5));
}

int main(void) {
  test_conv();
  test_pool();
  test_maxpool_ties();
  test_bn();
  test_cnn();
  return check_summary();
}
