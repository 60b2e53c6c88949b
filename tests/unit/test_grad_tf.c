/* Gradient check of the transformer/MLP rules (passes/grad_rules_tf.c), with
 * the harness of test_grad.c: a tiny f64 graph per case, loss =
 * ReduceSum(op output * R) for a fixed random R, differentiated by
 * gpuc_autodiff and compared element by element with central finite
 * differences (eps 1e-6, tolerance 1e-6 relative) on the CPU reference.
 * Inputs of ops without the GR flag (Pow, Where, Expand, Squeeze,
 * Unsqueeze) are fed through an Identity so that they count as parameters.
 * Prints each failure, then "N passed, N failed". */
#include "grad_harness.h"

/* a parameter behind an Identity (for ops without the GR flag) */
static int pval(const char *name, int rank, const int64_t *dims) {
  int x = cval(name, F, rank, dims);
  char nm[64];
  snprintf(nm, sizeof nm, "id_%s", name);
  return node(GPUC_OP_IDENTITY, nm, 1, &x);
}

/* make every element of a constant positive: |x| + 0.5 */
static void positive(int v) {
  Tensor *t = &G->values[v].t;
  for (int64_t i = 0; i < gpuc_numel(t); i++) gpuc_set_f64(t, i, fabs(gpuc_get_f64(t, i)) + 0.5);
}

static void test_unary_tf(void) {
  static const struct { GpucOp op; const char *name; bool pos; } cs[] = {
    {GPUC_OP_NEG, "Neg", false}, {GPUC_OP_EXP, "Exp", false}, {GPUC_OP_ERF, "Erf", false},
    {GPUC_OP_SQRT, "Sqrt", true}, {GPUC_OP_LOG, "Log", true},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    int64_t d[3] = {2, 3, 4};
    int x = cval("X", F, 3, d);
    if (cs[i].pos) positive(x);
    finish(node(cs[i].op, "u", 1, &x));
  }
}

static void test_div(void) {
  static const struct { const char *name; int ra; int64_t a[3]; int rb; int64_t b[3]; } cs[] = {
    {"Div same", 2, {2, 3}, 2, {2, 3}},
    {"Div bcast", 3, {2, 3, 4}, 2, {3, 1}},
    {"Div bcast both", 2, {3, 1}, 3, {2, 1, 4}},
    {"Div scalar", 0, {0}, 2, {2, 3}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    away_from_zero = true;
    int ins[2] = {cval("A", F, cs[i].ra, cs[i].a), cval("B", F, cs[i].rb, cs[i].b)};
    finish(node(GPUC_OP_DIV, "div", 2, ins));
  }
}

static void test_pow(void) {
  int64_t d[2] = {2, 3}, e1[1] = {3};
  /* constant exponents: f64 scalar 3, f32 2.5 (cast), per-column [3] */
  for (int k = 0; k < 3; k++) {
    static const char *nm[] = {"Pow const 3", "Pow const f32 2.5", "Pow const [3]"};
    begin(nm[k]);
    int xc = cval("X", F, 2, d);
    positive(xc);
    int x = node(GPUC_OP_IDENTITY, "id_X", 1, &xc);
    int b;
    if (k == 0) { b = cval("e", F, 0, NULL); gpuc_set_f64(&G->values[b].t, 0, 3.0); }
    else if (k == 1) { b = cval("e", GPUC_DT_F32, 0, NULL); gpuc_set_f64(&G->values[b].t, 0, 2.5); }
    else {
      b = cval("e", F, 1, e1);
      for (int j = 0; j < 3; j++) gpuc_set_f64(&G->values[b].t, j, 1.5 + j);
    }
    int ins[2] = {x, b};
    finish(node(GPUC_OP_POW, "pow", 2, ins));
  }
  /* a differentiated exponent too */
  begin("Pow base and exponent");
  int xc = cval("X", F, 2, d);
  positive(xc);
  int ins[2] = {node(GPUC_OP_IDENTITY, "id_X", 1, &xc), pval("E", 1, e1)};
  finish(node(GPUC_OP_POW, "pow", 2, ins));
}

/* x * 0.5 * (1 + erf(x / sqrt(2))), as PyTorch exports GELU */
static void test_gelu(void) {
  begin("GELU (erf)");
  int64_t d[2] = {3, 4};
  int x = cval("X", F, 2, d);
  int s2 = cval("sqrt2", F, 0, NULL);
  gpuc_set_f64(&G->values[s2].t, 0, sqrt(2.0));
  G->values[s2].is_const = true;
  int one = cval("one", F, 0, NULL), half = cval("half", F, 0, NULL);
  gpuc_set_f64(&G->values[one].t, 0, 1.0);
  gpuc_set_f64(&G->values[half].t, 0, 0.5);
  int i1[2] = {x, s2};
  int t = node(GPUC_OP_DIV, "div", 2, i1);
  t = node(GPUC_OP_ERF, "erf", 1, &t);
  int i2[2] = {t, one};
  t = node(GPUC_OP_ADD, "add", 2, i2);
  int i3[2] = {x, t};
  t = node(GPUC_OP_MUL, "mul", 2, i3);
  int i4[2] = {t, half};
  finish(node(GPUC_OP_MUL, "mul2", 2, i4));
}

/* Gelu-20, both forms: inputs spread over [-3, 3] to cover the tails */
static void test_gelu_op(void) {
  static const char *forms[] = {NULL, "none", "tanh"};
  for (int k = 0; k < 3; k++) {
    char nm[64];
    snprintf(nm, sizeof nm, "Gelu approximate=%s", forms[k] ? forms[k] : "(default)");
    begin(nm);
    int64_t d[2] = {3, 5};
    int x = cval("X", F, 2, d);
    Tensor *t = &G->values[x].t;
    for (int64_t i = 0; i < gpuc_numel(t); i++) gpuc_set_f64(t, i, 3 * gpuc_get_f64(t, i));
    int y = node(GPUC_OP_GELU, "gelu", 1, &x);
    if (forms[k]) attr_s("approximate", forms[k]);
    finish(y);
  }
}

static void test_softmax(void) {
  int64_t d[3] = {2, 3, 4};
  static const struct { GpucOp op; const char *name; int opset; int64_t axis; bool has_axis; } cs[] = {
    {GPUC_OP_SOFTMAX, "Softmax default axis", 17, 0, false},
    {GPUC_OP_SOFTMAX, "Softmax axis=1", 17, 1, true},
    {GPUC_OP_SOFTMAX, "Softmax opset 11 axis=1 (2-D view)", 11, 1, true},
    {GPUC_OP_LOGSOFTMAX, "LogSoftmax default axis", 17, 0, false},
    {GPUC_OP_LOGSOFTMAX, "LogSoftmax axis=-2", 17, -2, true},
    {GPUC_OP_LOGSOFTMAX, "LogSoftmax opset 11 default axis", 11, 0, false},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    G->opset = cs[i].opset;
    int x = cval("X", F, 3, d);
    node(cs[i].op, "sm", 1, &x);
    if (cs[i].has_axis) attr_i("axis", cs[i].axis);
    finish(G->nodes[last_node].out[0]);
  }
}

static void test_reduce_mean(void) {
  int64_t d[3] = {2, 3, 4};
  for (int keep = 0; keep < 2; keep++) {
    char nm[64];
    snprintf(nm, sizeof nm, "ReduceMean axes attr [0,2] keepdims=%d", keep);
    begin(nm);
    int64_t ax[2] = {0, 2};
    int x = cval("X", F, 3, d);
    node(GPUC_OP_REDUCEMEAN, "rm", 1, &x);
    attr_ints("axes", 2, ax);
    attr_i("keepdims", keep);
    finish(G->nodes[last_node].out[0]);
  }
  begin("ReduceMean opset 18 axes input [-1]");
  G->opset = 18;
  int64_t ax = -1;
  int ins[2] = {cval("X", F, 3, d), cints("axes", 1, &ax)};
  node(GPUC_OP_REDUCEMEAN, "rm", 2, ins);
  attr_i("keepdims", 0);
  finish(G->nodes[last_node].out[0]);
  begin("ReduceMean all");
  int x = cval("X", F, 3, d);
  finish(node(GPUC_OP_REDUCEMEAN, "rm", 1, &x));
}

static void test_transpose(void) {
  int64_t d[3] = {2, 3, 4}, p[3] = {2, 0, 1};
  begin("Transpose perm=[2,0,1]");
  int x = cval("X", F, 3, d);
  node(GPUC_OP_TRANSPOSE, "tr", 1, &x);
  attr_ints("perm", 3, p);
  finish(G->nodes[last_node].out[0]);
  begin("Transpose default");
  x = cval("X", F, 3, d);
  finish(node(GPUC_OP_TRANSPOSE, "tr", 1, &x));
}

static void test_concat(void) {
  int64_t a[3] = {2, 1, 4}, b[3] = {2, 3, 4}, cc[3] = {2, 2, 4};
  begin("Concat axis=1");
  int ins[3] = {cval("A", F, 3, a), cval("B", F, 3, b), cval("C", F, 3, cc)};
  node(GPUC_OP_CONCAT, "cat", 3, ins);
  attr_i("axis", 1);
  finish(G->nodes[last_node].out[0]);
  begin("Concat axis=-1, same input twice");
  int64_t e[2] = {3, 2}, f[2] = {3, 5};
  int x = cval("X", F, 2, e);
  int ins2[3] = {x, cval("Y", F, 2, f), x};
  node(GPUC_OP_CONCAT, "cat", 3, ins2);
  attr_i("axis", -1);
  finish(G->nodes[last_node].out[0]);
}

static void test_slice(void) {
  int64_t d[3] = {4, 5, 6};
  begin("Slice axes=[0,2] negative/clamped");
  int64_t st[2] = {1, -4}, en[2] = {3, 100}, ax[2] = {0, 2};
  int ins[4] = {cval("X", F, 3, d), cints("starts", 2, st), cints("ends", 2, en), cints("axes", 2, ax)};
  finish(node(GPUC_OP_SLICE, "sl", 4, ins));
  begin("Slice no axes, steps 1");
  int64_t st2[2] = {0, 2}, en2[2] = {-1, 4}, sp[2] = {1, 1};
  int ins2[5] = {cval("X", F, 3, d), cints("starts", 2, st2), cints("ends", 2, en2), -1, cints("steps", 2, sp)};
  finish(node(GPUC_OP_SLICE, "sl", 5, ins2));
  /* other steps: [starts, ends, axes, steps] per case, axes 0..2 of [4,5,6] */
  static const struct { const char *name; int n; int64_t st[3], en[3], ax[3], sp[3]; } cs[] = {
    {"Slice step 2", 1, {0}, {6}, {2}, {2}},
    {"Slice step 3 (trailing zeros trimmed)", 1, {1}, {6}, {2}, {3}},
    {"Slice step 4, one element", 1, {1}, {3}, {1}, {4}},
    {"Slice step -1 (reverse)", 1, {-1}, {INT64_MIN}, {0}, {-1}},
    {"Slice step -2 clamped", 1, {100}, {-100}, {2}, {-2}},
    {"Slice step -3 from 4 to 0", 1, {4}, {0}, {1}, {-3}},
    {"Slice 3 axes steps [2,-1,3]", 3, {0, 3, -5}, {4, 0, 6}, {0, 1, 2}, {2, -1, 3}},
    {"Slice axes [2,0] steps [-2,1]", 2, {5, 1}, {0, 4}, {2, 0}, {-2, 1}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    int ins3[5] = {cval("X", F, 3, d), cints("starts", cs[i].n, cs[i].st), cints("ends", cs[i].n, cs[i].en),
                   cints("axes", cs[i].n, cs[i].ax), cints("steps", cs[i].n, cs[i].sp)};
    finish(node(GPUC_OP_SLICE, "sl", 5, ins3));
  }
}

static void test_gather(void) {
  static const int64_t idx[] = {2, 0, 2, -1, 1, 2};
  int64_t td[2] = {5, 3};
  for (int axis = 0; axis < 2; axis++) {
    char nm[64];
    snprintf(nm, sizeof nm, "Gather embedding axis=%d [2,3] indices", axis);
    begin(nm);
    int t = cval("table", F, 2, td);
    int64_t id[2] = {2, 3};
    int iv = cval("ids", GPUC_DT_I64, 2, id);
    for (int j = 0; j < 6; j++) gpuc_set_i64(&G->values[iv].t, j, idx[j]);
    int ins[2] = {t, iv};
    node(GPUC_OP_GATHER, "emb", 2, ins);
    if (axis) attr_i("axis", axis);
    finish(G->nodes[last_node].out[0]);
  }
  begin("Gather scalar index");
  int t = cval("table", F, 2, td);
  int iv = cval("ids", GPUC_DT_I64, 0, NULL);
  gpuc_set_i64(&G->values[iv].t, 0, 3);
  int ins[2] = {t, iv};
  finish(node(GPUC_OP_GATHER, "emb", 2, ins));
}

static void test_squeeze(void) {
  begin("Unsqueeze axes=[0,2]");
  int64_t d[2] = {3, 4}, ax[2] = {0, 2};
  int ins[2] = {pval("X", 2, d), cints("axes", 2, ax)};
  finish(node(GPUC_OP_UNSQUEEZE, "uq", 2, ins));
  begin("Squeeze axes=[1,3]");
  int64_t d2[4] = {2, 1, 3, 1}, ax2[2] = {1, 3};
  int ins2[2] = {pval("X", 4, d2), cints("axes", 2, ax2)};
  finish(node(GPUC_OP_SQUEEZE, "sq", 2, ins2));
}

static void test_expand(void) {
  int64_t d[2] = {3, 1}, s[3] = {2, 3, 4};
  begin("Expand [3,1] -> [2,3,4]");
  int ins[2] = {pval("X", 2, d), cints("shape", 3, s)};
  finish(node(GPUC_OP_EXPAND, "ex", 2, ins));
  begin("Expand [2,3,4] by [3,1]");
  int64_t s2[2] = {3, 1};
  int ins2[2] = {pval("X", 3, s), cints("shape", 2, s2)};
  finish(node(GPUC_OP_EXPAND, "ex", 2, ins2));
}

static void test_where(void) {
  begin("Where bcast");
  int64_t cd[3] = {2, 1, 4}, xd[3] = {2, 3, 4}, yd[1] = {4};
  int cnd = cval("cond", GPUC_DT_BOOL, 3, cd);
  for (int j = 0; j < 8; j++) gpuc_set_i64(&G->values[cnd].t, j, (j * 5 + 1) % 3 != 0);
  int ins[3] = {cnd, pval("X", 3, xd), pval("Y", 1, yd)};
  finish(node(GPUC_OP_WHERE, "wh", 3, ins));
}

static void test_layernorm(void) {
  static const struct { const char *name; int64_t axis; int rs; int64_t s[2]; int rb; int64_t b[2]; } cs[] = {
    {"LayerNorm axis=-1", -1, 1, {4}, 1, {4}},
    {"LayerNorm axis=1 scale [3,4] bias [4]", 1, 2, {3, 4}, 1, {4}},
    {"LayerNorm axis=-1 no bias", -1, 1, {4}, -1, {0}},
    {"LayerNorm axis=1 scale [1,4]", 1, 2, {1, 4}, 2, {3, 1}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    int64_t d[3] = {2, 3, 4};
    int ins[3] = {cval("X", F, 3, d), cval("scale", F, cs[i].rs, cs[i].s), -1};
    int nin = 2;
    if (cs[i].rb >= 0) { ins[2] = cval("bias", F, cs[i].rb, cs[i].b); nin = 3; }
    node(GPUC_OP_LAYERNORMALIZATION, "ln", nin, ins);
    attr_i("axis", cs[i].axis);
    attr_f("epsilon", 1e-3f);
    finish(G->nodes[last_node].out[0]);
  }
}

static void test_dropout(void) {
  int64_t d[2] = {4, 6};
  for (int mode = 0; mode < 3; mode++) {
    static const char *nm[] = {"Dropout training ratio=0.3", "Dropout inference", "Dropout no training input"};
    begin(nm[mode]);
    int x = cval("X", F, 2, d);
    int r = cval("ratio", F, 0, NULL);
    gpuc_set_f64(&G->values[r].t, 0, 0.3);
    int tm = cval("training_mode", GPUC_DT_BOOL, 0, NULL);
    gpuc_set_i64(&G->values[tm].t, 0, mode == 0);
    int ins[3] = {x, r, tm};
    node(GPUC_OP_DROPOUT, "drop", mode == 2 ? 2 : 3, ins);
    attr_i("seed", 7);
    finish(G->nodes[last_node].out[0]);
  }
}

/* The trainer's DropoutTrain with a fixed counter (seed 7, step 3): the
 * mask is a function of the counter, so the finite differences see the
 * forward's mask; the check also requires it to drop and keep some. */
static void test_dropout_train(void) {
  static const double ratios[] = {0.3, 0.0, 0.75};
  for (int k = 0; k < 3; k++) {
    char *nm = k == 0 ? "DropoutTrain ratio=0.3" : k == 1 ? "DropoutTrain ratio=0" : "DropoutTrain ratio=0.75";
    begin(nm);
    int64_t d[3] = {3, 4, 5}, two = 2;
    int x = cval("X", F, 3, d);
    int ctr = cval("counter", GPUC_DT_I64, 1, &two);
    gpuc_set_i64(&G->values[ctr].t, 0, 7);
    gpuc_set_i64(&G->values[ctr].t, 1, 3);
    int ins[2] = {x, ctr};
    int y = node(GPUC_OP_DROPOUTTRAIN, "drop", 2, ins);
    attr_f("ratio", (float)ratios[k]);
    attr_i("salt", 5);
    /* the mask the forward draws: zeros of Y where X is not zero */
    GpucErr e = {0};
    Tensor *outs[1] = {0};
    G->outputs = gpuc_arena_alloc(&G->arena, sizeof(int));
    G->outputs[0] = y;
    G->noutputs = 1;
    CHECK(!gpuc_graph_infer(G, &e) && !gpuc_ref_run(G, NULL, outs, &e), "%s: run: %s", nm, e.msg);
    int64_t kept = 0, n = gpuc_numel(&G->values[x].t);
    for (int64_t i = 0; outs[0] && i < n; i++) kept += gpuc_get_f64(outs[0], i) != 0;
    gpuc_tensor_free(outs[0]);
    G->noutputs = 0;
    if (k == 1) CHECK(kept == n, "%s: %lld of %lld kept", nm, (long long)kept, (long long)n);
    else CHECK(kept > 0 && kept < n, "%s: %lld of %lld kept", nm, (long long)kept, (long long)n);
    finish(y);
  }
}

static void test_matmul_nd(void) {
  static const struct { const char *name; int ra; int64_t a[4]; int rb; int64_t b[4]; } cs[] = {
    {"MatMul [2,3,4]x[4,5]", 3, {2, 3, 4}, 2, {4, 5}},
    {"MatMul [3,4]x[2,4,5]", 2, {3, 4}, 3, {2, 4, 5}},
    {"MatMul [2,3,4]x[2,4,5]", 3, {2, 3, 4}, 3, {2, 4, 5}},
    {"MatMul [2,1,3,4]x[3,4,2]", 4, {2, 1, 3, 4}, 3, {3, 4, 2}},
    {"MatMul [4]x[2,4,5]", 1, {4}, 3, {2, 4, 5}},
    {"MatMul [2,3,4]x[4]", 3, {2, 3, 4}, 1, {4}},
    {"MatMul [4]x[4,3]", 1, {4}, 2, {4, 3}},
    {"MatMul [4]x[4]", 1, {4}, 1, {4}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    begin(cs[i].name);
    int ins[2] = {cval("A", F, cs[i].ra, cs[i].a), cval("B", F, cs[i].rb, cs[i].b)};
    finish(node(GPUC_OP_MATMUL, "mm", 2, ins));
  }
}

/* embedding -> LayerNorm -> self-attention scores -> Softmax -> weighted sum
 * -> GELU-ish -> ReduceMean: a transformer block in miniature */
static void test_block(void) {
  begin("transformer block chain");
  int64_t td[2] = {6, 4}, id[2] = {2, 3}, sd[1] = {4}, wd[2] = {4, 4};
  int t = cval("table", F, 2, td);
  int iv = cval("ids", GPUC_DT_I64, 2, id);
  static const int64_t idx[] = {1, 5, 1, 0, 3, 2};
  for (int j = 0; j < 6; j++) gpuc_set_i64(&G->values[iv].t, j, idx[j]);
  int i0[2] = {t, iv};
  int h = node(GPUC_OP_GATHER, "emb", 2, i0);                        /* [2,3,4] */
  int i1[3] = {h, cval("ln_s", F, 1, sd), cval("ln_b", F, 1, sd)};
  h = node(GPUC_OP_LAYERNORMALIZATION, "ln", 3, i1);
  int i2[2] = {h, cval("wq", F, 2, wd)};
  int q = node(GPUC_OP_MATMUL, "q", 2, i2);                           /* [2,3,4] */
  int kt = node(GPUC_OP_TRANSPOSE, "kt", 1, &h);
  int64_t p[3] = {0, 2, 1};
  attr_ints("perm", 3, p);                                            /* [2,4,3] */
  int i3[2] = {q, kt};
  int s = node(GPUC_OP_MATMUL, "scores", 2, i3);                      /* [2,3,3] */
  int sc = cval("inv_sqrt_d", F, 0, NULL);
  gpuc_set_f64(&G->values[sc].t, 0, 0.5);
  int i4[2] = {s, sc};
  s = node(GPUC_OP_DIV, "scale", 2, i4);
  s = node(GPUC_OP_SOFTMAX, "attn", 1, &s);
  int i5[2] = {s, h};
  int o = node(GPUC_OP_MATMUL, "ctx", 2, i5);                         /* [2,3,4] */
  o = node(GPUC_OP_ERF, "erf", 1, &o);
  int64_t ax = 1;
  node(GPUC_OP_REDUCEMEAN, "mean", 1, &o);
  attr_ints("axes", 1, &ax);
  finish(G->nodes[last_node].out[0]);
}

int main(void) {
  test_unary_tf();
  test_div();
  test_pow();
  test_gelu();
  test_gelu_op();
  test_softmax();
  test_reduce_mean();
  test_transpose();
  test_concat();
  test_slice();
  test_gather();
  test_squeeze();
  test_expand();
  test_where();
  test_layernorm();
  test_dropout();
  test_dropout_train();
  test_matmul_nd();
  test_block();
  return check_summary();
}
