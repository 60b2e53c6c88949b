/* Gradient check of the CNN rules (passes/grad_rules_nn.c): Conv (strides,
 * pads, dilations, groups, auto_pad, 1-D, with and without bias), MaxPool,
 * AveragePool (count_include_pad both ways, ceil_mode), GlobalAveragePool,
 * BatchNormalization (training and inference mode) and a small CNN chain.
 * Same harness as test_grad.c: a tiny f64 graph per case, loss =
 * ReduceSum(op output * R), autodiff against central finite differences
 * (eps 1e-6, tolerance 1e-6 relative) on the CPU reference. Plus: MaxPool
 * ties route the gradient to the first maximum.
 * Prints each failure, then "N passed, N failed". */
#include "autodiff.h"
#include "ref.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;

static void check(bool ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void check(bool ok, const char *file, int line, const char *fmt, ...) {
  if (ok) { n_pass++; return; }
  n_fail++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
#define CHECK(cond, ...) check((cond), __FILE__, __LINE__, __VA_ARGS__)

static uint64_t rng = 2024;
static double rnd_u(void) { /* uniform [-1, 1) */
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static Graph *G;
static const char *case_name;
static bool away_from_zero;   /* for Relu: keep inputs off the kink */

static int cval(const char *name, GpucDType dt, int rank, const int64_t *dims) {
  int v = gpuc_graph_add_value(G, name);
  GPUC_ASSERT(v >= 0);
  Value *val = &G->values[v];
  gpuc_set_shape(&val->t, dt, rank, dims);
  GpucErr e = {0};
  GPUC_ASSERT(!gpuc_tensor_alloc(&val->t, &e));
  int64_t n = gpuc_numel(&val->t);
  for (int64_t i = 0; i < n; i++) {
    double x = rnd_u();
    if (away_from_zero) x = x < 0 ? x - 0.2 : x + 0.2;
    gpuc_set_f64(&val->t, i, x);
  }
  val->is_const = true;
  val->is_param = gpuc_dtype_is_float(dt);
  return v;
}

static int last_node;
static int node(GpucOp op, const char *name, int nin, const int *ins) {
  int ni = gpuc_graph_add_node(G, op, name, nin, 1);
  GPUC_ASSERT(ni >= 0);
  Node *n = &G->nodes[ni];
  n->attrs = gpuc_arena_alloc(&G->arena, sizeof(Attr) * 8);
  for (int k = 0; k < nin; k++) n->in[k] = ins[k];
  char vn[128];
  snprintf(vn, sizeof vn, "%s.out", name);
  int v = gpuc_graph_add_value(G, vn);
  G->nodes[ni].out[0] = v;
  G->values[v].producer = ni;
  last_node = ni;
  return v;
}
static Attr *attr(const char *name, GpucAttrKind k) {
  Node *n = &G->nodes[last_node];
  Attr *a = &n->attrs[n->nattr++];
  memset(a, 0, sizeof *a);
  a->name = name;
  a->kind = k;
  return a;
}
static void attr_i(const char *name, int64_t v) { attr(name, GPUC_ATTR_INT)->i = v; }
static void attr_f(const char *name, float v) { attr(name, GPUC_ATTR_FLOAT)->f = v; }
static void attr_s(const char *name, const char *s) { attr(name, GPUC_ATTR_STRING)->s = s; }
static void attr_ints(const char *name, int n, const int64_t *v) {
  Attr *a = attr(name, GPUC_ATTR_INTS);
  a->n = n;
  a->ints = gpuc_arena_alloc(&G->arena, sizeof(int64_t) * (size_t)(n ? n : 1));
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

static void begin(const char *name) {
  case_name = name;
  G = gpuc_graph_new(name);
  G->opset = 17;
  away_from_zero = false;
}

static double loss_of(const Graph *g, GpucErr *e, bool *ok) {
  Tensor *outs[64] = {0};
  GPUC_ASSERT(g->noutputs <= 64);
  *ok = !gpuc_ref_run(g, NULL, outs, e);
  if (!*ok) return 0;
  double l = gpuc_get_f64(outs[0], 0);
  for (int k = 0; k < g->noutputs; k++) gpuc_tensor_free(outs[k]);
  return l;
}

/* y: the op's output. Builds loss = ReduceSum(y * R), differentiates, checks. */
static void finish(int y) {
  GpucErr e = {0};
  if (gpuc_graph_infer(G, &e)) {
    CHECK(false, "%s: infer: %s", case_name, e.msg);
    gpuc_graph_free(G);
    return;
  }
  bool save = away_from_zero;
  away_from_zero = false;
  const Tensor *yt = &G->values[y].t;
  int r = cval("R", GPUC_DT_F64, yt->rank, yt->dims);
  away_from_zero = save;
  G->values[r].is_param = false;
  int ins[2] = {y, r};
  int p = node(GPUC_OP_MUL, "loss_mul", 2, ins);
  int loss = node(GPUC_OP_REDUCESUM, "loss_sum", 1, &p);
  attr_i("keepdims", 0);
  G->outputs = gpuc_arena_alloc(&G->arena, sizeof(int));
  G->outputs[0] = loss;
  G->noutputs = 1;
  G->values[loss].is_output = true;
  int nv0 = G->nvalues;
  if (gpuc_graph_infer(G, &e) || gpuc_autodiff(G, loss, &e)) {
    CHECK(false, "%s: autodiff: %s", case_name, e.msg);
    gpuc_graph_free(G);
    return;
  }
  Tensor *outs[64] = {0};
  GPUC_ASSERT(G->noutputs <= 64);
  if (gpuc_ref_run(G, NULL, outs, &e)) {
    CHECK(false, "%s: run: %s", case_name, e.msg);
    gpuc_graph_free(G);
    return;
  }
  int checked = 0;
  for (int k = 1; k < G->noutputs; k++) {
    const char *gname = G->values[G->outputs[k]].name;
    char pname[256];
    snprintf(pname, sizeof pname, "%.*s", (int)(strlen(gname) - 5), gname);
    int pv = gpuc_graph_find_value(G, pname);
    GPUC_ASSERT(pv >= 0 && pv < nv0);
    if (!strcmp(pname, "R")) continue; /* the loss's own weights: checked too, but skip */
    Tensor *pt = &G->values[pv].t;
    CHECK(outs[k]->rank == pt->rank && gpuc_numel(outs[k]) == gpuc_numel(pt),
          "%s: grad of %s has the wrong shape", case_name, pname);
    if (gpuc_numel(outs[k]) != gpuc_numel(pt)) continue;
    const double eps = 1e-6;
    double worst = 0;
    int64_t worst_i = 0;
    double worst_a = 0, worst_fd = 0;
    for (int64_t i = 0; i < gpuc_numel(pt); i++) {
      double x = gpuc_get_f64(pt, i);
      bool ok1, ok2;
      gpuc_set_f64(pt, i, x + eps);
      double lp = loss_of(G, &e, &ok1);
      gpuc_set_f64(pt, i, x - eps);
      double lm = loss_of(G, &e, &ok2);
      gpuc_set_f64(pt, i, x);
      if (!ok1 || !ok2) { CHECK(false, "%s: run: %s", case_name, e.msg); break; }
      double fd = (lp - lm) / (2 * eps), a = gpuc_get_f64(outs[k], i);
      double err = fabs(a - fd) / fmax(1.0, fmax(fabs(a), fabs(fd)));
      if (err > worst || isnan(err)) { worst = isnan(err) ? INFINITY : err; worst_i = i; worst_a = a; worst_fd = fd; }
    }
    CHECK(worst <= 1e-6, "%s: d loss / d %s[%lld]: autodiff %.10g, finite differences %.10g",
          case_name, pname, (long long)worst_i, worst_a, worst_fd);
    checked++;
  }
  CHECK(checked > 0, "%s: no parameter gradient checked", case_name);
  for (int k = 0; k < G->noutputs; k++) gpuc_tensor_free(outs[k]);
  gpuc_graph_free(G);
}

static const GpucDType F = GPUC_DT_F64;


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
  printf("%d passed, %d failed\n", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
