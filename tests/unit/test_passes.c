/* Each pass must leave a graph that computes what the original computed:
 * for every model given, run the reference executor on the imported graph
 * (-O0) and on the -O1 graph with the same seeded random inputs (never
 * zeros) and compare outputs (f32: |a-b| <= 1e-5 + 1e-5|b|; others exact).
 * Also checks that folding really removed the shape chain of
 * shape_chain.onnx, and that a fold cap is honoured; and CSE on small
 * graphs built here: what must merge does (node counts), what differs by
 * an attribute, a constant's shape or bytes, randomness or an output in
 * use does not, and the rewritten graph computes exactly what the original
 * did. The NHWC layout pass (--fp16 -O2): which convolutions it converts,
 * where the Transposes are, and the reference's NHWC FusedConv against
 * NCHW on random convolutions (groups, depthwise, strides, pads, dilations).
 * usage: test_passes MODELS_DIR */
#include "passes.h"
#include "ref.h"
#include "frontend.h"
#include "check.h"
#define TEST_RNG_SEED 99
#include "ref_random.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int level = 1; /* -O level the passes run at */

static void compare_model_opts(const char *path, const GpucShapeBind *b, int nb, int expect_nodes_after,
                               bool fp16) {
  GpucErr e = {0};
  Graph *g0 = gpuc_onnx_load(path, b, nb, &e), *g1 = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g0 && g1, "load %s: %s", path, e.msg);
  if (!g0 || !g1) { gpuc_graph_free(g0); gpuc_graph_free(g1); return; }
  PassOptions o;
  gpuc_pass_options_default(&o, level);
  o.fp16 = fp16;
  int rc = gpuc_passes_run(g1, &o, &e);
  CHECK(rc == 0, "passes on %s: %s", path, e.msg);
  if (expect_nodes_after >= 0)
    CHECK(g1->nnodes == expect_nodes_after, "%s: %d nodes after -O1, expected %d", path,
          g1->nnodes, expect_nodes_after);
  bool runnable = true;
  for (int k = 0; k < g0->ninputs; k++) runnable &= gpuc_shape_known(&g0->values[g0->inputs[k]].t);
  if (!runnable) { gpuc_graph_free(g0); gpuc_graph_free(g1); return; } /* symbolic: structure only */
  Tensor **ins = random_inputs(g0);
  Tensor *o0[16] = {0}, *o1[16] = {0};
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "run -O0 %s: %s", path, e.msg);
  int r1 = rc == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "run -O1 %s: %s", path, e.msg);
  if (r0 == 0 && r1 == 0) {
    for (int k = 0; k < g0->noutputs && k < 16; k++) {
      int64_t n = gpuc_numel(o0[k]), bad = 0;
      CHECK(n == gpuc_numel(o1[k]) && n > 0, "%s output %d: sizes differ", path, k);
      if (n != gpuc_numel(o1[k])) continue;
      if (fp16) { /* half storage: relative L2 within 1e-2, as the fp16 target */
        double r = rel_l2(o1[k], o0[k]);
        CHECK(o1[k]->dt == o0[k]->dt, "%s output %d: fp16 plan changed the output dtype", path, k);
        CHECK(r < 1e-2 && r > 0, "%s output %d: fp16 relative L2 %.3g", path, k, r);
        continue;
      }
      /* rewrites reassociate float math (BN folded into weights): hold
       * them to 1e-5 of the output's scale, elementwise */
      double scale = 0;
      for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(gpuc_get_f64(o0[k], i)));
      for (int64_t i = 0; i < n; i++) {
        double a = gpuc_get_f64(o1[k], i), w = gpuc_get_f64(o0[k], i);
        if (!(fabs(a - w) <= 1e-5 * scale + 1e-5 * fabs(w))) {
          if (!bad) printf("  first difference at %lld: %.9g vs %.9g (scale %.3g)\n", (long long)i, a, w, scale);
          bad++;
        }
      }
      CHECK(bad == 0, "%s output %d: %lld of %lld elements differ after -O1", path, k,
            (long long)bad, (long long)n);
    }
  }
  for (int k = 0; k < 16; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
  free_inputs(ins);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

static void compare_model(const char *path, const GpucShapeBind *b, int nb, int expect_nodes_after) {
  compare_model_opts(path, b, nb, expect_nodes_after, false);
}

/* Fusion structure after -O2: the number of MatMulBias nodes, and the sizes
 * of the elementwise fusion groups (sorted descending, 0-terminated). */
static void check_fusion(const char *path, const GpucShapeBind *b, int nb, bool fp16, int want_matmul_bias,
                         const int *want_sizes) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = fp16;
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes on %s: %s", path, e.msg);
  int mmb = 0, size[256] = {0};
  for (int i = 0; i < g->nnodes; i++) {
    mmb += g->nodes[i].op == GPUC_OP_MATMULBIAS;
    int grp = g->nodes[i].fuse_group;
    CHECK(grp >= 0 && grp < 256, "%s: group id %d", path, grp);
    if (grp > 0 && grp < 256) size[grp]++;
    /* a member's output is read by members of its group only, or is the group's result */
    if (grp > 0) {
      int v = g->nodes[i].out[0], outside = g->values[v].is_output;
      for (int j = 0; j < g->nnodes; j++)
        for (int k = 0; k < g->nodes[j].nin; k++)
          if (g->nodes[j].in[k] == v && g->nodes[j].fuse_group != grp) outside++;
      int later = 0; /* members after i in the same group */
      for (int j = i + 1; j < g->nnodes; j++) later += g->nodes[j].fuse_group == grp;
      CHECK(!(outside && later), "%s: %s's output leaves group %d before its last member", path,
            g->nodes[i].name, grp);
    }
  }
  CHECK(mmb == want_matmul_bias, "%s: %d MatMulBias nodes, expected %d", path, mmb, want_matmul_bias);
  int sorted[256], n = 0;
  for (int k = 1; k < 256; k++)
    if (size[k]) sorted[n++] = size[k];
  for (int a = 0; a < n; a++)
    for (int c = a + 1; c < n; c++)
      if (sorted[c] > sorted[a]) { int t = sorted[a]; sorted[a] = sorted[c]; sorted[c] = t; }
  int want_n = 0;
  while (want_sizes[want_n]) want_n++;
  bool same = n == want_n;
  for (int k = 0; k < n && same; k++) same = sorted[k] == want_sizes[k];
  char got[256] = "";
  for (int k = 0; k < n; k++) snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", sorted[k]);
  CHECK(same, "%s: fusion group sizes %s", path, got);
  gpuc_graph_free(g);
}


/* ---- CSE on graphs built in memory --------------------------------------- */

#define MAX_GRAPH_IO 16
#define MAX_NODE_ATTRS 8

static Graph *graph_new(void) {
  Graph *g = gpuc_graph_new("cse-test");
  g->opset = 17;
  g->inputs = gpuc_arena_alloc(&g->arena, sizeof(int) * MAX_GRAPH_IO);
  g->outputs = gpuc_arena_alloc(&g->arena, sizeof(int) * MAX_GRAPH_IO);
  return g;
}

static int graph_input(Graph *g, const char *name, int rank, const int64_t *dims) {
  int v = gpuc_graph_add_value(g, name);
  gpuc_set_shape(&g->values[v].t, GPUC_DT_F32, rank, dims);
  g->values[v].is_input = true;
  GPUC_ASSERT(g->ninputs < MAX_GRAPH_IO);
  g->inputs[g->ninputs++] = v;
  return v;
}

static void graph_output(Graph *g, int v) {
  GPUC_ASSERT(g->noutputs < MAX_GRAPH_IO);
  g->outputs[g->noutputs++] = v;
  g->values[v].is_output = true;
}

static int constant(Graph *g, GpucDType dt, int rank, const int64_t *dims, const double *vals) {
  char name[32];
  snprintf(name, sizeof name, "c%d", g->nvalues);
  int v = gpuc_graph_add_value(g, name);
  GpucErr e;
  Tensor *t = gpuc_tensor_new(dt, rank, dims, &e);
  GPUC_ASSERT(t);
  for (int64_t i = 0; i < gpuc_numel(t); i++) gpuc_set_f64(t, i, vals[i]);
  g->values[v].t = *t;
  free(t); /* the struct; the value owns the data */
  g->values[v].is_const = true;
  return v;
}

/* A node reading ins, with nout new output values; returns its index.
 * Attributes added next (attr_*) go to the newest node. */
static int node(Graph *g, GpucOp op, int nin, const int *ins, int nout) {
  char name[32];
  snprintf(name, sizeof name, "n%d", g->nnodes);
  int ni = gpuc_graph_add_node(g, op, name, nin, nout);
  GPUC_ASSERT(ni >= 0);
  memcpy(g->nodes[ni].in, ins, sizeof(int) * (size_t)nin);
  for (int k = 0; k < nout; k++) {
    snprintf(name, sizeof name, "n%d.%d", ni, k);
    int v = gpuc_graph_add_value(g, name);
    g->nodes[ni].out[k] = v;
    g->values[v].producer = ni;
  }
  g->nodes[ni].attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * MAX_NODE_ATTRS);
  return ni;
}
/* a one-output node; returns its output value */
static int node1(Graph *g, GpucOp op, int nin, const int *ins) {
  int ni = node(g, op, nin, ins, 1); /* may move g->nodes: index it after */
  return g->nodes[ni].out[0];
}
#define NODE1(g, op, ...) \
  node1(g, op, sizeof((int[]){__VA_ARGS__}) / sizeof(int), (int[]){__VA_ARGS__})

static Attr *new_attr(Graph *g, const char *name, GpucAttrKind kind) {
  Node *n = &g->nodes[g->nnodes - 1];
  GPUC_ASSERT(n->nattr < MAX_NODE_ATTRS);
  Attr *a = &n->attrs[n->nattr++];
  a->name = name;
  a->kind = kind;
  return a;
}
static void attr_f(Graph *g, const char *name, float v) { new_attr(g, name, GPUC_ATTR_FLOAT)->f = v; }
static void attr_i(Graph *g, const char *name, int64_t v) { new_attr(g, name, GPUC_ATTR_INT)->i = v; }
static void attr_s(Graph *g, const char *name, const char *v) { new_attr(g, name, GPUC_ATTR_STRING)->s = v; }
static void attr_ints(Graph *g, const char *name, int n, const int64_t *v) {
  Attr *a = new_attr(g, name, GPUC_ATTR_INTS);
  a->n = n;
  a->ints = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)n);
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}
/* a one-element f32 tensor attribute (ConstantOfShape's value) */
static void attr_scalar_tensor(Graph *g, const char *name, float v) {
  GpucErr e;
  int64_t one = 1;
  Tensor *t = gpuc_tensor_new(GPUC_DT_F32, 1, &one, &e);
  GPUC_ASSERT(t);
  ((float *)t->data)[0] = v;
  new_attr(g, name, GPUC_ATTR_TENSOR)->t = t;
}

static int count_op(const Graph *g, GpucOp op) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op;
  return c;
}

/* -O2 (fp16 or not): exactly want Attention nodes, and no Softmax or
 * IsNaN left (the score matrices are gone). */
static void check_attention(const char *path, const GpucShapeBind *b, int nb, bool fp16, int want) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = fp16;
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes on %s: %s", path, e.msg);
  CHECK(count_op(g, GPUC_OP_ATTENTION) == want, "%s%s: %d Attention nodes, expected %d", path,
        fp16 ? " (fp16)" : "", count_op(g, GPUC_OP_ATTENTION), want);
  CHECK(want == 0 || (count_op(g, GPUC_OP_SOFTMAX) == 0 && count_op(g, GPUC_OP_ISNAN) == 0),
        "%s: Softmax or IsNaN left after attention fusion", path);
  gpuc_graph_free(g);
}


static bool same_bytes(const Tensor *a, const Tensor *b) {
  return a->dt == b->dt && gpuc_numel(a) == gpuc_numel(b) && gpuc_numel(a) > 0 &&
         !memcmp(a->data, b->data, gpuc_tensor_bytes(a));
}

/* Build the graph twice, run CSE on one: it must merge expect_merged nodes,
 * leave a graph the verifier accepts, and compute bit for bit what the
 * original computes on random inputs (CSE does no arithmetic). Returns the
 * rewritten graph for more checks; the caller frees it. */
static Graph *check_cse(const char *what, void (*build)(Graph *), int expect_merged) {
  GpucErr e = {0};
  Graph *g0 = graph_new(), *g1 = graph_new();
  build(g0);
  build(g1);
  CHECK(gpuc_graph_verify(g0, &e) == 0 && gpuc_graph_infer(g0, &e) == 0 &&
        gpuc_graph_infer(g1, &e) == 0, "%s: the test graph is bad: %s", what, e.msg);
  PassOptions o;
  gpuc_pass_options_default(&o, 1);
  int before = g1->nnodes, merged = pass_cse(g1, &o, &e);
  CHECK(merged == expect_merged, "%s: CSE merged %d nodes, expected %d (%s)", what, merged,
        expect_merged, e.msg);
  CHECK(g1->nnodes == before - expect_merged, "%s: %d nodes after CSE, expected %d", what,
        g1->nnodes, before - expect_merged);
  bool valid = gpuc_graph_verify(g1, &e) == 0;
  CHECK(valid, "%s: verify after CSE: %s", what, e.msg);
  if (!valid) { gpuc_graph_free(g0); return g1; } /* the executor would trust it */
  Tensor **ins = random_inputs(g0);
  Tensor *o0[MAX_GRAPH_IO] = {0}, *o1[MAX_GRAPH_IO] = {0};
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "%s: run before CSE: %s", what, e.msg);
  int r1 = gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e);
  CHECK(r1 == 0, "%s: run after CSE: %s", what, e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs; k++)
    CHECK(same_bytes(o0[k], o1[k]), "%s: output %d differs after CSE", what, k);
  for (int k = 0; k < MAX_GRAPH_IO; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
  free_inputs(ins);
  gpuc_graph_free(g0);
  return g1;
}

/* The same Transpose -> Add -> Shape -> Reshape chain twice, the Adds
 * reading two equal constants, then Mul(a1, r2) and Mul(a2, r1): one
 * constant merge makes the Adds equal, and the whole second chain and
 * the second Mul collapse in one pass (5 of 11 nodes). */
static void build_chain(Graph *g) {
  int64_t dims[] = {2, 3, 4}, one = 1, perm[] = {2, 0, 1};
  int x = graph_input(g, "x", 3, dims);
  int c[2] = {constant(g, GPUC_DT_F32, 1, &one, (double[]){2.0}),
              constant(g, GPUC_DT_F32, 1, &one, (double[]){2.0})};
  int a[2], r[2];
  for (int k = 0; k < 2; k++) {
    int t = NODE1(g, GPUC_OP_TRANSPOSE, x);
    attr_ints(g, "perm", 3, perm);
    a[k] = NODE1(g, GPUC_OP_ADD, t, c[k]);
    int s = NODE1(g, GPUC_OP_SHAPE, a[k]);
    r[k] = NODE1(g, GPUC_OP_RESHAPE, x, s);
  }
  int m1 = NODE1(g, GPUC_OP_MUL, a[0], r[1]), m2 = NODE1(g, GPUC_OP_MUL, a[1], r[0]);
  graph_output(g, NODE1(g, GPUC_OP_ADD, m1, m2));
}

/* Mul by four constants: equal to the first; same bytes but shape [1,4];
 * one element different. Only the first two Muls are one. */
static void build_consts(Graph *g) {
  int64_t dims[] = {3, 4}, four = 4, row[] = {1, 4};
  double v[] = {0.5, -1.25, 2, 3.5}, w[] = {0.5, -1.25, 2, 3.25};
  int x = graph_input(g, "x", 2, dims);
  int c1 = constant(g, GPUC_DT_F32, 1, &four, v), c2 = constant(g, GPUC_DT_F32, 1, &four, v);
  int c3 = constant(g, GPUC_DT_F32, 2, row, v), c4 = constant(g, GPUC_DT_F32, 1, &four, w);
  int m1 = NODE1(g, GPUC_OP_MUL, x, c1), m2 = NODE1(g, GPUC_OP_MUL, x, c2);
  int m3 = NODE1(g, GPUC_OP_MUL, x, c3), m4 = NODE1(g, GPUC_OP_MUL, x, c4);
  graph_output(g, NODE1(g, GPUC_OP_SUM, m1, m2, m3, m4));
}

/* Pairs that differ by one attribute (Transpose perm, LeakyRelu alpha,
 * HardSigmoid beta, Softmax axis, Pad mode, ConstantOfShape's value
 * tensor) stay apart; the copies equal to the first of each (HardSigmoid's
 * with its attributes in the other order) merge: 4 of 17 nodes. */
static void build_attrs(Graph *g) {
  int64_t dims[] = {2, 3, 3}, three = 3, six = 6;
  int64_t swap[] = {0, 2, 1}, keep[] = {0, 1, 2};
  int x = graph_input(g, "x", 3, dims);
  int t1 = NODE1(g, GPUC_OP_TRANSPOSE, x);
  attr_ints(g, "perm", 3, swap);
  int t2 = NODE1(g, GPUC_OP_TRANSPOSE, x);
  attr_ints(g, "perm", 3, keep);
  int l[3];
  float alpha[] = {0.1f, 0.2f, 0.1f};
  for (int k = 0; k < 3; k++) {
    l[k] = NODE1(g, GPUC_OP_LEAKYRELU, t1);
    attr_f(g, "alpha", alpha[k]);
  }
  int h1 = NODE1(g, GPUC_OP_HARDSIGMOID, t1);
  attr_f(g, "alpha", 0.3f);
  attr_f(g, "beta", 0.4f);
  int h2 = NODE1(g, GPUC_OP_HARDSIGMOID, t1);
  attr_f(g, "beta", 0.4f);
  attr_f(g, "alpha", 0.3f);
  int h3 = NODE1(g, GPUC_OP_HARDSIGMOID, t1);
  attr_f(g, "alpha", 0.3f);
  attr_f(g, "beta", 0.6f);
  int s1 = NODE1(g, GPUC_OP_SOFTMAX, t1);
  attr_i(g, "axis", 1);
  int s2 = NODE1(g, GPUC_OP_SOFTMAX, t1);
  attr_i(g, "axis", 2);
  int pads = constant(g, GPUC_DT_I64, 1, &six, (double[]){0, 0, 0, 0, 0, 0}), p[3];
  const char *mode[] = {"edge", "reflect", "edge"};
  for (int k = 0; k < 3; k++) {
    p[k] = NODE1(g, GPUC_OP_PAD, t1, pads);
    attr_s(g, "mode", mode[k]);
  }
  int shape = constant(g, GPUC_DT_I64, 1, &three, (double[]){2, 3, 3}), f[3];
  float fill[] = {1.5f, 2.5f, 1.5f};
  for (int k = 0; k < 3; k++) {
    f[k] = NODE1(g, GPUC_OP_CONSTANTOFSHAPE, shape);
    attr_scalar_tensor(g, "value", fill[k]);
  }
  graph_output(g, NODE1(g, GPUC_OP_SUM, t1, t2, l[0], l[1], l[2], h1, h2, h3, s1, s2, p[0],
                        p[1], p[2], f[0], f[1], f[2]));
}

/* Dropout: two in training mode (random) stay apart even with one seed;
 * two in inference mode (training_mode false, from two equal constants)
 * merge; one that uses its mask is not merged into one that does not
 * compute it. 1 of 8 nodes. */
static void build_random(Graph *g) {
  int64_t dims[] = {3, 4};
  int x = graph_input(g, "x", 2, dims);
  int ratio = constant(g, GPUC_DT_F32, 0, NULL, (double[]){0.5});
  int on = constant(g, GPUC_DT_BOOL, 0, NULL, (double[]){1});
  int off[2] = {constant(g, GPUC_DT_BOOL, 0, NULL, (double[]){0}),
                constant(g, GPUC_DT_BOOL, 0, NULL, (double[]){0})};
  int d[2], v[2];
  for (int k = 0; k < 2; k++) {
    d[k] = NODE1(g, GPUC_OP_DROPOUT, x, ratio, on);
    attr_i(g, "seed", 7);
  }
  for (int k = 0; k < 2; k++) v[k] = NODE1(g, GPUC_OP_DROPOUT, x, ratio, off[k]);
  int f1 = node(g, GPUC_OP_DROPOUT, 1, &x, 2);
  g->values[g->nodes[f1].out[1]].producer = -1; /* mask not computed */
  g->nodes[f1].out[1] = -1;
  int f2 = node(g, GPUC_OP_DROPOUT, 1, &x, 2);
  int mask = NODE1(g, GPUC_OP_CAST, g->nodes[f2].out[1]);
  attr_i(g, "to", 1); /* FLOAT */
  graph_output(g, NODE1(g, GPUC_OP_SUM, d[0], d[1], v[0], v[1], g->nodes[f1].out[0],
                        g->nodes[f2].out[0], mask));
}

/* Two equal Splits, both outputs in use, the second's swapped: the merge
 * must map output k to output k. 1 of 4 nodes. */
static void build_multi(Graph *g) {
  int64_t dims[] = {3, 4};
  int x = graph_input(g, "x", 2, dims), s[2];
  for (int k = 0; k < 2; k++) {
    s[k] = node(g, GPUC_OP_SPLIT, 1, &x, 2);
    attr_i(g, "axis", 1);
  }
  int d = NODE1(g, GPUC_OP_SUB, g->nodes[s[1]].out[1], g->nodes[s[1]].out[0]);
  graph_output(g, NODE1(g, GPUC_OP_ADD, d, g->nodes[s[0]].out[0]));
}

/* Three equal Relus: the first and third are graph outputs, the second
 * feeds a Neg. The second merges into the first (whose output stays a
 * graph output and now also feeds the Neg); the third is not merged, its
 * output being part of the model's interface. 1 of 4 nodes. */
static void build_outputs(Graph *g) {
  int64_t dims[] = {3, 4};
  int x = graph_input(g, "x", 2, dims);
  int r1 = NODE1(g, GPUC_OP_RELU, x), r2 = NODE1(g, GPUC_OP_RELU, x);
  int r3 = NODE1(g, GPUC_OP_RELU, x);
  graph_output(g, r1);
  graph_output(g, NODE1(g, GPUC_OP_NEG, r2));
  graph_output(g, r3);
}

/* Two equal chains of CHAIN_LEN nodes: one pass merges all of the second. */
#define CHAIN_LEN 20000
static void build_long(Graph *g) {
  int64_t dims[] = {4};
  int x = graph_input(g, "x", 1, dims), y[2];
  for (int k = 0; k < 2; k++) {
    y[k] = x;
    for (int i = 0; i < CHAIN_LEN; i++) {
      y[k] = NODE1(g, i % 2 ? GPUC_OP_NEG : GPUC_OP_LEAKYRELU, y[k]);
      if (i % 2 == 0) attr_f(g, "alpha", 0.5f);
    }
  }
  graph_output(g, NODE1(g, GPUC_OP_ADD, y[0], y[1]));
}

/* Mish and the Bitwise ops are elementwise like Relu/Sigmoid: at -O2 a
 * Mish read by a Sigmoid and the Mul of both (x * sigmoid form) is one
 * fusion group, and so is an int32 BitwiseAnd -> BitwiseNot -> BitwiseXor
 * chain. */
static void test_small_ops_fusion(void) {
  GpucErr e = {0};
  Graph *g = graph_new();
  g->opset = 18;
  int64_t d[] = {4, 8};
  int x = graph_input(g, "x", 2, d), a = graph_input(g, "a", 2, d), b = graph_input(g, "b", 2, d);
  g->values[a].t.dt = g->values[b].t.dt = GPUC_DT_I32;
  int m = NODE1(g, GPUC_OP_MISH, x);
  int s = NODE1(g, GPUC_OP_SIGMOID, m);
  graph_output(g, NODE1(g, GPUC_OP_MUL, m, s));
  int an = NODE1(g, GPUC_OP_BITWISEAND, a, b);
  int nt = NODE1(g, GPUC_OP_BITWISENOT, an);
  graph_output(g, NODE1(g, GPUC_OP_BITWISEXOR, nt, a));
  CHECK(gpuc_graph_verify(g, &e) == 0 && gpuc_graph_infer(g, &e) == 0, "small ops: the test graph is bad: %s", e.msg);
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "small ops: passes: %s", e.msg);
  int grp[2] = {-1, -1};
  bool same[2] = {true, true};
  for (int i = 0; i < g->nnodes; i++) {
    GpucOp op = g->nodes[i].op;
    int k = op == GPUC_OP_MISH || op == GPUC_OP_SIGMOID || op == GPUC_OP_MUL ? 0
          : op == GPUC_OP_BITWISEAND || op == GPUC_OP_BITWISENOT || op == GPUC_OP_BITWISEXOR ? 1 : -1;
    if (k < 0) continue;
    if (grp[k] < 0) grp[k] = g->nodes[i].fuse_group;
    same[k] &= g->nodes[i].fuse_group == grp[k] && grp[k] > 0;
  }
  CHECK(same[0], "small ops: Mish, Sigmoid and Mul are not one fusion group");
  CHECK(same[1], "small ops: BitwiseAnd, BitwiseNot and BitwiseXor are not one fusion group");
  CHECK(grp[0] != grp[1], "small ops: the float and integer chains share a group");
  gpuc_graph_free(g);
}

/* A group that ends in a value several members of another group read
 * joins that group whole (passes/fuse_elementwise.c): CoAtNet's BatchNorm
 * as x * a + b, then SiLU's x * Sigmoid(x), is one group of four; not when
 * the BatchNorm's output is also a graph output (variant 1), nor with
 * GPUC_NO_GROUP_JOIN=1 (variant 2: two groups). */
static void test_group_join(void) {
  for (int variant = 0; variant < 3; variant++) {
    GpucErr e = {0};
    Graph *g = graph_new();
    g->opset = 17;
    int64_t d[] = {4, 8}, c1[] = {8};
    int x = graph_input(g, "x", 2, d), a = graph_input(g, "a", 1, c1), b = graph_input(g, "b", 1, c1);
    int bn = NODE1(g, GPUC_OP_ADD, NODE1(g, GPUC_OP_MUL, x, a), b);
    int sg = NODE1(g, GPUC_OP_SIGMOID, bn);
    graph_output(g, NODE1(g, GPUC_OP_MUL, bn, sg));
    if (variant == 1) graph_output(g, bn);
    CHECK(gpuc_graph_verify(g, &e) == 0 && gpuc_graph_infer(g, &e) == 0, "group join: bad graph: %s", e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    if (variant == 2) setenv("GPUC_NO_GROUP_JOIN", "1", 1);
    CHECK(pass_fuse_elementwise(g, &o, &e) >= 0, "group join %d: %s", variant, e.msg);
    unsetenv("GPUC_NO_GROUP_JOIN");
    int first = g->nodes[0].fuse_group, last = g->nodes[g->nnodes - 1].fuse_group;
    bool one = first > 0 && first == last;
    for (int i = 0; i < g->nnodes; i++) one &= g->nodes[i].fuse_group == first;
    CHECK(one == (variant == 0) && first > 0 && last > 0,
          "group join %d: first node in group %d, last in %d (want %s)", variant, first, last,
          variant == 0 ? "one group of four" : "two groups");
    gpuc_graph_free(g);
  }
}

static void test_cse(void) {
  Graph *g = check_cse("chain", build_chain, 5);
  CHECK(count_op(g, GPUC_OP_TRANSPOSE) == 1 && count_op(g, GPUC_OP_MUL) == 1,
        "chain: %d Transposes, %d Muls left, expected 1 and 1", count_op(g, GPUC_OP_TRANSPOSE),
        count_op(g, GPUC_OP_MUL));
  gpuc_graph_free(g);
  g = check_cse("constants", build_consts, 1);
  /* the three Muls left read three different constants */
  int c[3], nc = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == GPUC_OP_MUL && nc < 3) c[nc++] = g->nodes[i].in[1];
  CHECK(nc == 3 && c[0] != c[1] && c[1] != c[2] && c[0] != c[2],
        "constants: the Muls left do not read three different constants");
  gpuc_graph_free(g);
  g = check_cse("attributes", build_attrs, 4);
  static const GpucOp pairs[] = {GPUC_OP_TRANSPOSE, GPUC_OP_LEAKYRELU, GPUC_OP_HARDSIGMOID,
                                 GPUC_OP_SOFTMAX, GPUC_OP_PAD, GPUC_OP_CONSTANTOFSHAPE};
  for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++)
    CHECK(count_op(g, pairs[k]) == 2, "attributes: %d %s nodes left, expected 2",
          count_op(g, pairs[k]), gpuc_ops[pairs[k]].name);
  gpuc_graph_free(g);
  g = check_cse("random", build_random, 1);
  CHECK(count_op(g, GPUC_OP_DROPOUT) == 5, "random: %d Dropouts left, expected 5",
        count_op(g, GPUC_OP_DROPOUT));
  gpuc_graph_free(g);
  gpuc_graph_free(check_cse("two outputs", build_multi, 1));
  g = check_cse("graph outputs", build_outputs, 1);
  int neg = -1;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == GPUC_OP_NEG) neg = i;
  CHECK(neg >= 0 && g->nodes[neg].in[0] == g->outputs[0],
        "graph outputs: the Neg does not read the first Relu's output");
  CHECK(count_op(g, GPUC_OP_RELU) == 2, "graph outputs: %d Relus left, expected 2",
        count_op(g, GPUC_OP_RELU));
  gpuc_graph_free(g);
  gpuc_graph_free(check_cse("long chains", build_long, CHAIN_LEN));
}


/* ---- NHWC layout (passes/layout_nhwc.c) ---------------------------------- */

static bool nhwc_conv(const Node *n) {
  return n->op == GPUC_OP_FUSEDCONV && gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC;
}

/* Walking back from conv input v through Casts: true if a Transpose stands
 * between v and a convolution that produced it. */
static bool transposed_conv_output(const Graph *g, int v) {
  bool through = false;
  for (int p; v >= 0 && (p = g->values[v].producer) >= 0; v = g->nodes[p].in[0]) {
    const Node *n = &g->nodes[p];
    if (n->op == GPUC_OP_FUSEDCONV || n->op == GPUC_OP_CONV) return through;
    if (n->op == GPUC_OP_TRANSPOSE) through = true;
    else if (n->op != GPUC_OP_CAST) return false;
  }
  return false;
}

/* -O2 --fp16: want_convs convolutions, every one NHWC (FusedConv layout 1),
 * exactly want_transposes Transposes (the regions' edges), none between
 * two convolutions. */
static void check_nhwc(const char *path, const GpucShapeBind *b, int nb, int want_convs, int want_nchw,
                       int want_transposes) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = true;
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes on %s: %s", path, e.msg);
  int nhwc = 0, nchw = 0, between = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != GPUC_OP_CONV && n->op != GPUC_OP_FUSEDCONV) continue;
    if (nhwc_conv(n)) nhwc++;
    else nchw++;
    between += transposed_conv_output(g, n->in[0]) || (n->nin > 3 && transposed_conv_output(g, n->in[3]));
  }
  CHECK(nhwc == want_convs && nchw == want_nchw, "%s: %d NHWC and %d NCHW convolutions, expected %d and %d", path,
        nhwc, nchw, want_convs, want_nchw);
  CHECK(count_op(g, GPUC_OP_TRANSPOSE) == want_transposes, "%s: %d Transposes, expected %d", path,
        count_op(g, GPUC_OP_TRANSPOSE), want_transposes);
  CHECK(between == 0, "%s: %d convolutions read another's output through a Transpose", path, between);
  gpuc_graph_free(g);
}

/* -O2 (fp16: also NHWC): each projection shortcut (a convolution without
 * activation read as the residual Z of one FusedConv) gave its bias to
 * that FusedConv: want_bare convolutions have no bias, each of them such a
 * shortcut, and no shortcut keeps one; in a training graph none folds. */
static void check_shortcut_bias(const char *path, const GpucShapeBind *b, int nb, bool fp16, bool training,
                                int want_bare) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = fp16;
  o.training = training;
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes on %s: %s", path, e.msg);
  int bare = 0, shortcuts = 0, bare_shortcuts = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != GPUC_OP_CONV && n->op != GPUC_OP_FUSEDCONV) continue;
    bool nobias = n->nin < 3 || n->in[2] < 0;
    bare += nobias;
    if (n->nin < 4 || n->in[3] < 0) continue;
    CHECK(!nobias, "%s: %s (with a residual) has no bias", path, n->name);
    int p = g->values[n->in[3]].producer;
    if (p < 0) continue;
    const Node *a = &g->nodes[p];
    if (a->op != GPUC_OP_CONV && !(a->op == GPUC_OP_FUSEDCONV && gpuc_attr_i(a, "activation", 0) == 0)) continue;
    shortcuts++;
    bare_shortcuts += a->nin < 3 || a->in[2] < 0;
  }
  const char *what = training ? " (training)" : fp16 ? " (fp16)" : "";
  int want = training ? 0 : want_bare;
  CHECK(bare == want && bare_shortcuts == want && shortcuts == want_bare,
        "%s%s: %d convolutions without a bias, %d of %d shortcuts, expected %d of %d", path, what, bare,
        bare_shortcuts, shortcuts, want, want_bare);
  gpuc_graph_free(g);
}

/* -O2 --fp16: the graph input (f32 NCHW) enters the NHWC region through
 * a Transpose [0,2,3,1] that reads it directly and heads a group of two
 * with the Cast to half (one kernel), when fused; else through the Cast,
 * then the Transpose, each a kernel of its own. */
static void check_input_entry(const char *path, const GpucShapeBind *b, int nb, bool fused) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = true;
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes on %s: %s", path, e.msg);
  int x = g->inputs[0], found = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->nin < 1 || n->in[0] != x) continue;
    found++;
    const int64_t *perm;
    bool to_nhwc = n->op == GPUC_OP_TRANSPOSE && gpuc_attr_ints(n, "perm", &perm) == 4 && perm[1] == 2 &&
                   perm[3] == 1;
    if (fused) {
      int members = 0, cast = -1;
      for (int j = 0; j < g->nnodes && n->fuse_group; j++)
        if (g->nodes[j].fuse_group == n->fuse_group) {
          members++;
          if (g->nodes[j].op == GPUC_OP_CAST) cast = j;
        }
      CHECK(to_nhwc && members == 2 && cast >= 0 && g->nodes[cast].in[0] == n->out[0] &&
            g->values[g->nodes[cast].out[0]].t.dt == GPUC_DT_F16,
            "%s: the input's reader %s (%s) is not a Transpose to NHWC fused with its Cast to half", path,
            n->name, gpuc_ops[n->op].name);
    } else {
      CHECK(n->op == GPUC_OP_CAST && !n->fuse_group, "%s: the input's reader %s (%s) is not a Cast of its own",
            path, n->name, gpuc_ops[n->op].name);
    }
  }
  CHECK(found == 1, "%s: %d nodes read the input, expected 1", path, found);
  gpuc_graph_free(g);
}

/* One convolution on random data: X [N,C,H,W], W [K,C/g,R,S], B [K]
 * (Conv when fused == false), Z [N,K,P,Q] when fused with a residual. */
typedef struct {
  int64_t n, c, h, w, k, r, s, group;
  int64_t stride[2], dil[2], pads[4];
  bool fused, bias, residual, relu, pool; /* pool: a MaxPool 3x3/2 after it */
} ConvCase;

static const ConvCase *conv_case;
static void build_conv_case(Graph *g) {
  const ConvCase *k = conv_case;
  int64_t xd[4] = {k->n, k->c, k->h, k->w}, wd[4] = {k->k, k->c / k->group, k->r, k->s};
  int64_t p = (k->h + k->pads[0] + k->pads[2] - k->dil[0] * (k->r - 1) - 1) / k->stride[0] + 1;
  int64_t q = (k->w + k->pads[1] + k->pads[3] - k->dil[1] * (k->s - 1) - 1) / k->stride[1] + 1;
  int64_t zd[4] = {k->n, k->k, p, q};
  int x = graph_input(g, "x", 4, xd);
  int z = k->residual ? graph_input(g, "z", 4, zd) : -1;
  uint64_t save = rng;
  rng = 7; /* the same weights in both copies of the graph */
  double *wv = malloc(sizeof(double) * (size_t)(wd[0] * wd[1] * wd[2] * wd[3])), bv[64];
  for (int64_t i = 0; i < wd[0] * wd[1] * wd[2] * wd[3]; i++) wv[i] = urand();
  for (int i = 0; i < k->k; i++) bv[i] = urand();
  rng = save;
  int w = constant(g, GPUC_DT_F32, 4, wd, wv);
  free(wv);
  int b = k->bias ? constant(g, GPUC_DT_F32, 1, &k->k, bv) : -1;
  int ins[4] = {x, w, b, z};
  int nin = k->residual ? 4 : k->bias || k->fused ? 3 : 2;
  int y = node1(g, k->fused ? GPUC_OP_FUSEDCONV : GPUC_OP_CONV, nin, ins);
  int64_t ks[2] = {k->r, k->s};
  attr_ints(g, "kernel_shape", 2, ks);
  attr_ints(g, "strides", 2, k->stride);
  attr_ints(g, "dilations", 2, k->dil);
  attr_ints(g, "pads", 4, k->pads);
  if (k->group > 1) attr_i(g, "group", k->group);
  if (k->fused) attr_i(g, "activation", k->relu);
  if (k->pool) {
    int64_t pk[2] = {3, 3}, ps[2] = {2, 2}, pp[4] = {1, 0, 1, 1};
    y = NODE1(g, GPUC_OP_MAXPOOL, y);
    attr_ints(g, "kernel_shape", 2, pk);
    attr_ints(g, "strides", 2, ps);
    attr_ints(g, "pads", 4, pp);
  }
  graph_output(g, y); /* leaves the region through a Transpose */
}

/* The reference's NHWC FusedConv (layout 1) against NCHW (the original
 * graph) in fp32, through the pass: Transposes in, one out. */
static void test_nhwc_reference(void) {
  static const ConvCase cases[] = {
    {.n = 2, .c = 6, .h = 9, .w = 7, .k = 4, .r = 3, .s = 3, .group = 1, .stride = {2, 2}, .dil = {1, 1},
     .pads = {1, 1, 1, 1}, .fused = true, .bias = true, .residual = true, .relu = true},
    {.n = 2, .c = 8, .h = 10, .w = 11, .k = 8, .r = 3, .s = 3, .group = 8, .stride = {1, 1}, .dil = {2, 2},
     .pads = {2, 2, 2, 2}, .fused = true, .bias = true, .relu = true}, /* depthwise, dilated */
    {.n = 3, .c = 6, .h = 5, .w = 9, .k = 4, .r = 1, .s = 3, .group = 2, .stride = {1, 2}, .dil = {1, 1},
     .pads = {0, 1, 0, 1}}, /* grouped Conv, no bias */
    {.n = 2, .c = 3, .h = 8, .w = 8, .k = 5, .r = 2, .s = 2, .group = 1, .stride = {2, 1}, .dil = {1, 2},
     .pads = {0, 1, 1, 0}, .bias = true}, /* asymmetric pads */
    {.n = 1, .c = 4, .h = 6, .w = 6, .k = 4, .r = 3, .s = 3, .group = 1, .stride = {1, 1}, .dil = {1, 1},
     .pads = {1, 1, 1, 1}, .fused = true, .bias = true, .residual = true}, /* residual, no Relu */
    {.n = 2, .c = 3, .h = 11, .w = 9, .k = 6, .r = 3, .s = 3, .group = 1, .stride = {1, 1}, .dil = {1, 1},
     .pads = {1, 1, 1, 1}, .fused = true, .bias = true, .relu = true, .pool = true}, /* NHWC MaxPool */
  };
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    char what[64];
    snprintf(what, sizeof what, "NHWC conv case %zu", t);
    conv_case = &cases[t];
    GpucErr e = {0};
    Graph *g0 = graph_new(), *g1 = graph_new();
    build_conv_case(g0);
    build_conv_case(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "%s: bad test graph: %s", what, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int rc = pass_layout_nhwc(g1, &o, &e);
    int want_rc = cases[t].pool ? 2 : 1;
    CHECK(rc == want_rc, "%s: layout_nhwc converted %d nodes (%s)", what, rc, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0, "%s: verify: %s", what, e.msg);
    int want_t = cases[t].residual ? 3 : 2;
    CHECK(count_op(g1, GPUC_OP_TRANSPOSE) == want_t, "%s: %d Transposes, expected %d", what,
          count_op(g1, GPUC_OP_TRANSPOSE), want_t);
    Tensor **ins = random_inputs(g0);
    Tensor *o0[MAX_GRAPH_IO] = {0}, *o1[MAX_GRAPH_IO] = {0};
    int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
    CHECK(r0 == 0, "%s: run NCHW: %s", what, e.msg);
    int r1 = rc == want_rc ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
    CHECK(r1 == 0, "%s: run NHWC: %s", what, e.msg);
    if (r0 == 0 && r1 == 0) {
      int64_t n = gpuc_numel(o0[0]), bad = 0;
      CHECK(n == gpuc_numel(o1[0]) && o1[0]->rank == 4, "%s: output shapes differ", what);
      for (int64_t i = 0; i < n && n == gpuc_numel(o1[0]); i++) {
        double a = gpuc_get_f64(o1[0], i), w = gpuc_get_f64(o0[0], i);
        bad += !(fabs(a - w) <= 1e-5 + 1e-5 * fabs(w));
      }
      CHECK(bad == 0, "%s: %lld of %lld elements differ", what, (long long)bad, (long long)n);
    }
    for (int k = 0; k < MAX_GRAPH_IO; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
    free_inputs(ins);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- attention fusion on graphs built in memory -------------------------- */

/* attention variants: q, k, v inputs [2,3,SQ,D] / [2,3,SK,D]; see build_att */
enum { ATT_SQ = 17, ATT_SK = 9 };
static int att_variant;

/* 0: Add(mask, S) with a constant [1,1,SQ,SK] mask whose row 0 is -inf
 *    throughout, Where(IsNaN) after the Softmax (its rows become 0), S
 *    scaled by Mul(c, S) and Div: fused
 * 1: the same without the Where: row 0 is NaN in both graphs: fused
 * 2: the scores are a second graph output: not fused
 * 3: Softmax over axis 2: not fused
 * 4: K given as [3,2,SK,D], transposed by perm [1,0,3,2]: not fused
 * 5: head size 130 > GPUC_ATTN_MAX_HEAD: not fused
 * 6: Q and V split from [2,SQ/SK,3,D] by Transpose [0,2,1,3], K by one
 *    Transpose [0,2,3,1], the result merged by Transpose [0,2,1,3]: fused,
 *    every Transpose absorbed (attribute bshd)
 * 7: as 6 but K split by [0,2,1,3] then transposed by [0,1,3,2], and that
 *    K^T is a second graph output: fused, the two K Transposes stay
 * 8: K given transposed, [2,3,D,SK], read by the MatMul as it is (timm's
 *    2-D attention): fused, the MatMul turned into K's Transpose */
static void build_att(Graph *g) {
  bool split = att_variant == 6 || att_variant == 7;
  int64_t D = att_variant == 5 ? 130 : 8;
  int64_t qd[4] = {2, 3, ATT_SQ, D}, kd[4] = {2, 3, ATT_SK, D}, md[4] = {1, 1, ATT_SQ, ATT_SK};
  int64_t kd4[4] = {3, 2, ATT_SK, D}, qs[4] = {2, ATT_SQ, 3, D}, ks[4] = {2, ATT_SK, 3, D}, kdt[4] = {2, 3, D, ATT_SK};
  int64_t perm[4] = {0, 1, 3, 2}, swap[4] = {1, 0, 3, 2}, heads[4] = {0, 2, 1, 3}, kheads[4] = {0, 2, 3, 1};
  int q = graph_input(g, "q", 4, split ? qs : qd);
  int k = graph_input(g, "k", 4, split ? ks : att_variant == 4 ? kd4 : att_variant == 8 ? kdt : kd);
  int v = graph_input(g, "v", 4, split ? ks : kd);
  if (split) {
    q = NODE1(g, GPUC_OP_TRANSPOSE, q);
    attr_ints(g, "perm", 4, heads);
    v = NODE1(g, GPUC_OP_TRANSPOSE, v);
    attr_ints(g, "perm", 4, heads);
    if (att_variant == 7) {
      k = NODE1(g, GPUC_OP_TRANSPOSE, k);
      attr_ints(g, "perm", 4, heads);
    }
  }
  double mv[ATT_SQ * ATT_SK];
  for (int i = 0; i < ATT_SQ * ATT_SK; i++) mv[i] = i < ATT_SK ? -INFINITY : i % 5 == 0 ? -1e9 : sin(i); /* the same in both builds */
  int mask = constant(g, GPUC_DT_F32, 4, md, mv);
  int kt = k;
  if (att_variant != 8) {
    kt = NODE1(g, GPUC_OP_TRANSPOSE, k);
    attr_ints(g, "perm", 4, att_variant == 4 ? swap : att_variant == 6 ? kheads : perm);
  }
  int sc = NODE1(g, GPUC_OP_MATMUL, q, kt);
  int two = constant(g, GPUC_DT_F32, 1, (int64_t[]){1}, (double[]){2.0});
  int three = constant(g, GPUC_DT_F32, 0, NULL, (double[]){3.0});
  sc = NODE1(g, GPUC_OP_MUL, two, sc);
  int scaled = NODE1(g, GPUC_OP_DIV, sc, three);
  int x = NODE1(g, GPUC_OP_ADD, mask, scaled);
  int p = NODE1(g, GPUC_OP_SOFTMAX, x);
  attr_i(g, "axis", att_variant == 3 ? 2 : -1);
  if (att_variant != 1) {
    int isn = NODE1(g, GPUC_OP_ISNAN, p);
    int zero = constant(g, GPUC_DT_F32, 0, NULL, (double[]){0.0});
    p = NODE1(g, GPUC_OP_WHERE, isn, zero, p);
  }
  int y = NODE1(g, GPUC_OP_MATMUL, p, v);
  if (split) {
    y = NODE1(g, GPUC_OP_TRANSPOSE, y);
    attr_ints(g, "perm", 4, heads);
  }
  graph_output(g, y);
  if (att_variant == 2) graph_output(g, scaled);
  if (att_variant == 7) graph_output(g, kt);
}

static void test_attention_graphs(void) {
  for (att_variant = 0; att_variant < 9; att_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(), *g1 = graph_new();
    build_att(g0);
    build_att(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "attention %d: bad test graph: %s",
          att_variant, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = att_variant <= 1 || att_variant >= 6;
    int got = pass_fuse_attention(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_ATTENTION) == want, "attention %d: %d fused, expected %d (%s)",
          att_variant, got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0, "attention %d: verify: %s", att_variant, e.msg);
    if (want) /* everything but the Attention node itself is gone (7: and K's two Transposes; 8: and K's new one) */
      CHECK(g1->nnodes == (att_variant == 7 ? 3 : att_variant == 8 ? 2 : 1), "attention %d: %d nodes left", att_variant,
            g1->nnodes);
    if (want && att_variant == 8)
      CHECK(g1->nodes[0].op == GPUC_OP_TRANSPOSE && g1->nodes[1].op == GPUC_OP_ATTENTION &&
                g1->nodes[1].in[1] == g1->nodes[0].out[0] && g1->values[g1->nodes[0].out[0]].t.dims[2] == ATT_SK,
            "attention 8: not Transpose(Kt) -> K [2,3,SK,D] -> Attention");
    Tensor **ins = random_inputs(g0);
    Tensor *o0[MAX_GRAPH_IO] = {0}, *o1[MAX_GRAPH_IO] = {0};
    int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
    CHECK(r0 == 0, "attention %d: run: %s", att_variant, e.msg);
    int r1 = gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e);
    CHECK(r1 == 0, "attention %d: run fused: %s", att_variant, e.msg);
    if (r0 == 0 && r1 == 0) {
      int64_t n = gpuc_numel(o0[0]), bad = 0, nans = 0;
      for (int64_t i = 0; i < n; i++) {
        double a = gpuc_get_f64(o1[0], i), w = gpuc_get_f64(o0[0], i);
        nans += isnan(w);
        if (isnan(a) != isnan(w) || (!isnan(w) && !(fabs(a - w) <= 1e-5 + 1e-5 * fabs(w)))) bad++;
      }
      CHECK(bad == 0, "attention %d: %lld of %lld outputs differ", att_variant, (long long)bad, (long long)n);
      /* row 0 of each (b,h) is masked out entirely: NaN without the Where */
      int64_t nan_rows = att_variant == 1 ? 2 * 3 * (int64_t)o0[0]->dims[3] : 0;
      for (int k = 1; k < g0->noutputs; k++) /* 7: K^T, untouched */
        CHECK(same_bytes(o0[k], o1[k]), "attention %d: output %d differs", att_variant, k);
      if (want) CHECK(nans == nan_rows, "attention %d: %lld NaN outputs, expected %lld", att_variant,
                      (long long)nans, (long long)nan_rows);
    }
    for (int k = 0; k < MAX_GRAPH_IO; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
    free_inputs(ins);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- Add + LayerNormalization fusion on graphs built in memory ----------- */

/* a [4,5,24] + b -> s -> LayerNormalization(s, scale, bias) -> y:
 * 0: b [4,5,24], axis -1, scale and bias [24]: fused
 * 1: as 0 without the bias, axis 1, scale [5,24]: fused
 * 2: s also read by a Relu (a second graph output): not fused
 * 3: b [24], broadcast by the Add: not fused
 * 4: the LayerNormalization's Mean is a second graph output: not fused
 * 5: s is a second graph output: not fused
 * 6: as 0, the LayerNormalization's Mean and InvStdDev outputs unread: fused */
static int aln_variant;

static void build_aln(Graph *g) {
  int64_t xd[3] = {4, 5, 24}, row[1] = {24}, rows[2] = {5, 24};
  int a = graph_input(g, "a", 3, xd);
  int b = aln_variant == 3 ? graph_input(g, "b", 1, row) : graph_input(g, "b", 3, xd);
  int s = NODE1(g, GPUC_OP_ADD, a, b);
  double sv[5 * 24], bv[24];
  for (int i = 0; i < 5 * 24; i++) sv[i] = 1 + 0.5 * sin(i); /* the same in both builds */
  for (int i = 0; i < 24; i++) bv[i] = cos(i);
  int scale = aln_variant == 1 ? constant(g, GPUC_DT_F32, 2, rows, sv) : constant(g, GPUC_DT_F32, 1, row, sv);
  int bias = constant(g, GPUC_DT_F32, 1, row, bv);
  int ln = aln_variant == 1 ? node(g, GPUC_OP_LAYERNORMALIZATION, 2, (int[]){s, scale}, 1)
         : node(g, GPUC_OP_LAYERNORMALIZATION, 3, (int[]){s, scale, bias}, aln_variant == 4 ? 2 : aln_variant == 6 ? 3 : 1);
  attr_i(g, "axis", aln_variant == 1 ? 1 : -1);
  attr_f(g, "epsilon", 1e-3f);
  graph_output(g, g->nodes[ln].out[0]);
  if (aln_variant == 4) graph_output(g, g->nodes[ln].out[1]);
  if (aln_variant == 2) graph_output(g, NODE1(g, GPUC_OP_RELU, s));
  if (aln_variant == 5) graph_output(g, s);
}

static void test_add_layernorm_graphs(void) {
  for (aln_variant = 0; aln_variant < 7; aln_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(), *g1 = graph_new();
    build_aln(g0);
    build_aln(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "add+layernorm %d: bad test graph: %s",
          aln_variant, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = aln_variant <= 1 || aln_variant == 6, before = g1->nnodes;
    int got = pass_fuse_add_layernorm(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_ADDLAYERNORMALIZATION) == want,
          "add+layernorm %d: %d fused, expected %d (%s)", aln_variant, got, want, e.msg);
    CHECK(g1->nnodes == before - want, "add+layernorm %d: %d nodes, expected %d", aln_variant, g1->nnodes,
          before - want);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "add+layernorm %d: verify: %s",
          aln_variant, e.msg);
    if (want) {
      const Node *n = &g1->nodes[g1->nnodes - 1];
      CHECK(n->op == GPUC_OP_ADDLAYERNORMALIZATION && !strcmp(n->name, "n0, n1") && n->nout == 1 &&
            n->nin == (aln_variant == 1 ? 3 : 4), "add+layernorm %d: fused node '%s' (%d in, %d out)",
            aln_variant, n->name, n->nin, n->nout);
    }
    Tensor **ins = random_inputs(g0);
    Tensor *o0[MAX_GRAPH_IO] = {0}, *o1[MAX_GRAPH_IO] = {0};
    int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
    CHECK(r0 == 0, "add+layernorm %d: run: %s", aln_variant, e.msg);
    int r1 = gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e);
    CHECK(r1 == 0, "add+layernorm %d: run fused: %s", aln_variant, e.msg);
    for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs; k++) {
      int64_t n = gpuc_numel(o0[k]), bad = 0;
      CHECK(n > 0 && n == gpuc_numel(o1[k]), "add+layernorm %d: output %d sizes differ", aln_variant, k);
      for (int64_t i = 0; i < n && n == gpuc_numel(o1[k]); i++) {
        double x = gpuc_get_f64(o1[k], i), w = gpuc_get_f64(o0[k], i);
        bad += !(fabs(x - w) <= 1e-5 + 1e-5 * fabs(w));
      }
      CHECK(bad == 0, "add+layernorm %d: output %d: %lld of %lld differ", aln_variant, k, (long long)bad,
            (long long)n);
    }
    for (int k = 0; k < MAX_GRAPH_IO; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
    free_inputs(ins);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* -O2 of a model (fp16 or not): want AddLayerNormalization nodes, one named
 * `name` (both ONNX names, for inspect), no LayerNormalization left (with
 * want 0: some left); under
 * fp16 its A, B and Y are half, as a LayerNormalization's would be. */
static void check_add_layernorm(const char *path, const GpucShapeBind *b, int nb, bool fp16, int want,
                                const char *name) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = fp16;
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes on %s: %s", path, e.msg);
  int found = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != GPUC_OP_ADDLAYERNORMALIZATION) continue;
    found += !strcmp(n->name, name);
    GpucDType want_dt = fp16 ? GPUC_DT_F16 : GPUC_DT_F32;
    CHECK(g->values[n->in[0]].t.dt == want_dt && g->values[n->in[1]].t.dt == want_dt &&
          g->values[n->out[0]].t.dt == want_dt && n->fuse_group == 0,
          "%s%s: %s: dtypes or group", path, fp16 ? " (fp16)" : "", n->name);
  }
  CHECK(count_op(g, GPUC_OP_ADDLAYERNORMALIZATION) == want && (count_op(g, GPUC_OP_LAYERNORMALIZATION) == 0) == (want > 0) &&
        found == (want > 0), "%s%s: %d AddLayerNormalization nodes (%d named '%s'), expected %d", path,
        fp16 ? " (fp16)" : "", count_op(g, GPUC_OP_ADDLAYERNORMALIZATION), found, name, want);
  gpuc_graph_free(g);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_passes MODELS_DIR\n"); return 2; }
  char p[4096];
  GpucShapeBind b = {.name = "x", .rank = 4, .dims = {2, 3, 4, 5}};
  snprintf(p, sizeof p, "%s/shape_chain.onnx", argv[1]);
  compare_model(p, &b, 1, 1);   /* only the Reshape is left */
  compare_model(p, NULL, 0, 5); /* batch unknown: nothing folds */
  snprintf(p, sizeof p, "%s/small_cnn.onnx", argv[1]);
  compare_model(p, NULL, 0, -1);
  GpucShapeBind m = {.name = "image", .rank = 2, .dims = {3, 784}};
  snprintf(p, sizeof p, "%s/mlp.onnx", argv[1]);
  compare_model(p, &m, 1, -1);
  compare_model_opts(p, &m, 1, -1, true);
  snprintf(p, sizeof p, "%s/small_cnn.onnx", argv[1]);
  compare_model_opts(p, NULL, 0, -1, true);
  GpucShapeBind r18 = {.name = "input", .rank = 4, .dims = {1, 3, 224, 224}};
  snprintf(p, sizeof p, "%s/resnet18.onnx", argv[1]);
  compare_model_opts(p, &r18, 1, -1, true);
  /* -O2: Conv + residual Add + Relu fusions (24 nodes left of ResNet-18's
   * 69), checked against -O0 in fp32 and fp16 */
  level = 2;
  compare_model(p, &r18, 1, 24);
  compare_model_opts(p, &r18, 1, -1, true);
  snprintf(p, sizeof p, "%s/small_cnn.onnx", argv[1]);
  compare_model(p, NULL, 0, -1);
  /* -O2 fusions of a transformer FFN block: two MatMul + bias pairs become
   * MatMulBias, the residual Add + LayerNormalization one
   * AddLayerNormalization, the GELU chain (5 ops) one Gelu
   * (passes/fuse_gelu.c) (21 -> 14 nodes); the gate (Mul-Sigmoid-Mul,
   * then Less-Where-Clip, which reads the gate twice: one group of six)
   * and Transpose-Mul are groups */
  GpucShapeBind fb = {.name = "x", .rank = 3, .dims = {3, 16, 64}};
  snprintf(p, sizeof p, "%s/ffn_block.onnx", argv[1]);
  compare_model(p, &fb, 1, 14);
  compare_model_opts(p, &fb, 1, -1, true);
  check_add_layernorm(p, &fb, 1, false, 1, "residual, ln");
  check_add_layernorm(p, &fb, 1, true, 1, "residual, ln");
  check_add_layernorm(p, NULL, 0, false, 0, ""); /* symbolic batch: shapes unknown, not fused */
  static const int ffn_groups[] = {6, 2, 0}, ffn16_groups[] = {7, 3, 0}, none[] = {0}, pair[] = {2, 0};
  check_fusion(p, &fb, 1, false, 2, ffn_groups);
  /* fp16: the GELU chain is the first MatMulBias's epilogue
   * (passes/fuse_gemm_act.c), the Cast back to the f32 output joins the
   * last group */
  check_fusion(p, &fb, 1, true, 2, ffn16_groups);
  /* the four AddLayerNormalization kernel shapes (warp, block, thread rows,
   * a broadcast scale): -O2 computes what -O0 does, fp32 and fp16 */
  snprintf(p, sizeof p, "%s/add_layernorm.onnx", argv[1]);
  check_add_layernorm(p, NULL, 0, false, 4, "add3, ln3");
  check_add_layernorm(p, NULL, 0, true, 4, "add0, ln0");
  compare_model(p, NULL, 0, 4);
  compare_model_opts(p, NULL, 0, -1, true);
  /* mobile_block's depthwise Conv and Clip outputs are graph outputs: they
   * stay; the 1x1 Conv's bias moves into an Add fused with the residual */
  snprintf(p, sizeof p, "%s/mobile_block.onnx", argv[1]);
  compare_model(p, NULL, 0, -1);
  check_fusion(p, NULL, 0, false, 0, pair);
  /* ResNet-18: every Conv ends in a FusedConv or a fused Relu; no groups */
  snprintf(p, sizeof p, "%s/resnet18.onnx", argv[1]);
  check_fusion(p, &r18, 1, false, 0, none);
  /* --fp16 NHWC: resnet_block's five convolutions are one region (a
   * Transpose in, one out); mobile_block (batch 1, depthwise) keeps NCHW; ResNet-18's and small_cnn's MaxPools are NHWC
   * too: one region each, GlobalAveragePool ends it */
  snprintf(p, sizeof p, "%s/resnet_block.onnx", argv[1]);
  check_nhwc(p, NULL, 0, 5, 0, 2);
  compare_model_opts(p, NULL, 0, -1, true);
  compare_model(p, NULL, 0, -1);
  /* mobile_block is batch 1 with a depthwise convolution: its region keeps
   * NCHW (no Transposes); NHWC depthwise at batch 2 is the reference case
   * in test_nhwc_reference */
  snprintf(p, sizeof p, "%s/mobile_block.onnx", argv[1]);
  check_nhwc(p, NULL, 0, 0, 2, 0);
  compare_model_opts(p, NULL, 0, -1, true);
  snprintf(p, sizeof p, "%s/resnet18.onnx", argv[1]);
  /* the Transpose out of the region after GlobalAveragePool ([N,1,1,C])
   * moves nothing: a Reshape (simplify_transpose's plain rule) */
  check_nhwc(p, &r18, 1, 20, 0, 1);
  /* projection shortcuts give their biases to the block's last conv:
   * ResNet-18 has 3, ResNet-50 4, resnet_block 1 (-O2 vs -O0 above) */
  for (int f = 0; f < 2; f++) check_shortcut_bias(p, &r18, 1, f, false, 3);
  check_shortcut_bias(p, &r18, 1, false, true, 3);
  snprintf(p, sizeof p, "%s/resnet50.onnx", argv[1]);
  for (int f = 0; f < 2; f++) check_shortcut_bias(p, &r18, 1, f, false, 4);
  compare_model(p, &r18, 1, -1);
  compare_model_opts(p, &r18, 1, -1, true);
  snprintf(p, sizeof p, "%s/resnet_block.onnx", argv[1]);
  for (int f = 0; f < 2; f++) check_shortcut_bias(p, NULL, 0, f, false, 1);
  snprintf(p, sizeof p, "%s/small_cnn.onnx", argv[1]);
  /* small_cnn's one-channel input goes NHWC by a Reshape (the Transpose in
   * moves nothing: simplify_transpose's plain rule), its Cast alone */
  check_nhwc(p, NULL, 0, 2, 0, 1);
  check_fusion(p, NULL, 0, true, 0, none);
  compare_model_opts(p, NULL, 0, -1, true);
  /* --fp16 NHWC: the f32 input's Cast and its Transpose in are one group
   * (Transpose first) when the input has at most 16 channels (ResNets 3,
   * resnet_block 16; mobile_block's 32 keep the tiled Transpose) */
  snprintf(p, sizeof p, "%s/resnet_block.onnx", argv[1]);
  check_input_entry(p, NULL, 0, true);
  check_fusion(p, NULL, 0, true, 0, pair);
  snprintf(p, sizeof p, "%s/resnet18.onnx", argv[1]);
  check_input_entry(p, &r18, 1, true);
  check_fusion(p, &r18, 1, true, 0, pair);
  snprintf(p, sizeof p, "%s/resnet50.onnx", argv[1]);
  check_input_entry(p, &r18, 1, true);
  check_fusion(p, &r18, 1, true, 0, pair);
  snprintf(p, sizeof p, "%s/mobile_block.onnx", argv[1]);
  check_input_entry(p, NULL, 0, false);
  /* attention fusion: the SDPA-style block (33 tokens, H 4, D 16, mask,
   * Where(IsNaN)) and the eager-style cross-attention (20 keys, H 2, D 32,
   * Div, no mask) are one Attention node each; -O2 computes what -O0 does */
  GpucShapeBind ab[3] = {{.name = "x", .rank = 3, .dims = {2, 33, 64}},
                         {.name = "mem", .rank = 3, .dims = {2, 20, 64}},
                         {.name = "mask", .rank = 4, .dims = {2, 1, 1, 33}}};
  snprintf(p, sizeof p, "%s/attention.onnx", argv[1]);
  check_attention(p, ab, 3, false, 2);
  check_attention(p, ab, 3, true, 2);
  compare_model(p, ab, 3, -1);
  compare_model_opts(p, ab, 3, -1, true);
  check_attention(p, NULL, 0, false, 0); /* symbolic batch: shapes unknown, not fused */
  GpucShapeBind bb[4] = {{.name = "q", .rank = 4, .dims = {2, 12, 128, 64}},
                         {.name = "k", .rank = 4, .dims = {2, 12, 128, 64}},
                         {.name = "v", .rank = 4, .dims = {2, 12, 128, 64}},
                         {.name = "mask", .rank = 4, .dims = {2, 1, 1, 128}}};
  snprintf(p, sizeof p, "%s/attention_bert.onnx", argv[1]);
  check_attention(p, bb, 4, false, 1);
  compare_model(p, bb, 4, 1);
  compare_model_opts(p, bb, 4, -1, true);
  /* kernel edge cases: D 128, a full mask, a rank-1 mask, D 7, one key,
   * rows masked out entirely or for a whole key tile */
  snprintf(p, sizeof p, "%s/attention_shapes.onnx", argv[1]);
  check_attention(p, NULL, 0, false, 5);
  check_attention(p, NULL, 0, true, 5);
  compare_model(p, NULL, 0, 5);
  compare_model_opts(p, NULL, 0, -1, true);
  level = 1;

  /* The fold cap: with a 16-byte cap the 4-element int64 shape (32 bytes)
   * must not fold, and so nothing after it can: all 5 nodes stay. */
  GpucErr e = {0};
  snprintf(p, sizeof p, "%s/shape_chain.onnx", argv[1]);
  Graph *g = gpuc_onnx_load(p, &b, 1, &e);
  CHECK(g != NULL, "load: %s", e.msg);
  if (g) {
    PassOptions o;
    gpuc_pass_options_default(&o, 1);
    o.fold_max_bytes = 16;
    CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes: %s", e.msg);
    CHECK(g->nnodes == 5, "%d nodes with a 16-byte fold cap, expected 5", g->nnodes);
    gpuc_graph_free(g);
  }
  test_cse();
  test_small_ops_fusion();
  test_group_join();
  test_attention_graphs();
  test_add_layernorm_graphs();
  test_nhwc_reference();
  return check_summary();
}
