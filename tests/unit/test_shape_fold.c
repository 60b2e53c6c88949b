/* Shape chains as exporters write them must fold to constants whatever the
 * bound dims are (batch 1 as well as 32, sequence 1 as well as 7), and what
 * folds must compute what the unfolded graph computes. Each case is a small
 * ONNX model written with models/onnx_builder, loaded with --shape binds,
 * run through the -O2 passes, then:
 *  - every value has a static shape and no Shape node is left;
 *  - the CPU reference gives the same outputs on the imported graph (-O0)
 *    and on the folded one, on seeded random inputs (f32: |a-b| <= 1e-5 of
 *    the output's scale + 1e-5|b|).
 * Cases: a 20-layer GPT-2-style chain (Shape -> Slice -> Squeeze ->
 * Unsqueeze -> Concat -> Reshape per layer, each waiting on the one before:
 * more links than the 16 fold/infer rounds there used to be); a ViT/HF
 * chain (ConstantOfShape, Equal, Where, Expand, Range, Gather, Reshape with
 * 0 and -1); symbolic dims shared by two inputs (one --shape binds both;
 * binds that disagree are refused). And the message for a shape that stays
 * unknown: it names the node and the chain that left it unknown.
 * usage: test_shape_fold WORKDIR */
#include "passes.h"
#include "ref.h"
#include "frontend.h"
#include "codegen.h"
#include "onnx_builder.h"
#include "check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* models/onnx_builder.c leaves a model's protobuf structs to the process's
 * exit (ob_save says so: make_models writes and exits); this test builds its
 * graphs with it, so LeakSanitizer is told that those are not leaks. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:onnx_builder.c\n"; }

enum { F32 = 1, I64 = 7 };
#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *workdir;
static uint64_t seed = 7;

static void path_of(char *p, size_t n, const char *name) { snprintf(p, n, "%s/%s.onnx", workdir, name); }

static void init_rand(OnnxBuilder *b, const char *name, int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *w = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) w[i] = ob_rand(&seed) * 0.2f;
  ob_init_f32(b, name, rank, dims, w);
  free(w);
}
static void init_i64(OnnxBuilder *b, const char *name, int n, const int64_t *v) {
  int64_t d = n;
  ob_init_i64(b, name, 1, &d, v);
}

static Tensor **random_inputs(const Graph *g) {
  Tensor **ins = calloc((size_t)g->ninputs + 1, sizeof *ins);
  GpucErr e;
  for (int k = 0; k < g->ninputs; k++) {
    const Tensor *d = &g->values[g->inputs[k]].t;
    ins[k] = gpuc_tensor_new(d->dt, d->rank, d->dims, &e);
    GPUC_ASSERT(ins[k]);
    for (int64_t i = 0; i < gpuc_numel(d); i++)
      gpuc_set_f64(ins[k], i, d->dt == GPUC_DT_F32 ? ob_rand(&seed) : (double)(i % 5));
  }
  return ins;
}

static int count_op(const Graph *g, GpucOp op) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op;
  return c;
}

/* Load path with binds twice; fold one; check static shapes and the
 * outputs of both on the reference. */
static void check_folds(const char *path, const GpucShapeBind *b, int nb, const char *what) {
  GpucErr e = {0};
  Graph *g0 = gpuc_onnx_load(path, b, nb, &e), *g1 = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g0 && g1, "%s: load: %s", what, e.msg);
  if (!g0 || !g1) { gpuc_graph_free(g0); gpuc_graph_free(g1); return; }
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  int rc = gpuc_passes_run(g1, &o, &e);
  CHECK(rc == 0, "%s: passes: %s", what, e.msg);
  int unknown = 0;
  for (int v = 0; v < g1->nvalues; v++) {
    const Value *val = &g1->values[v];
    if (!(val->is_input || val->is_output || val->producer >= 0)) continue;
    if (gpuc_shape_known(&val->t)) continue;
    if (!unknown) {
      char why[900];
      gpuc_explain_unknown_shape(g1, v, why, sizeof why);
      printf("  %s: %s\n", what, why);
    }
    unknown++;
  }
  CHECK(unknown == 0, "%s: %d values without a static shape after -O2", what, unknown);
  CHECK(count_op(g1, GPUC_OP_SHAPE) == 0, "%s: %d Shape nodes left", what, count_op(g1, GPUC_OP_SHAPE));
  Tensor **ins = random_inputs(g0);
  Tensor *o0[4] = {0}, *o1[4] = {0};
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "%s: run -O0: %s", what, e.msg);
  int r1 = rc == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "%s: run folded: %s", what, e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs && k < 4; k++) {
    int64_t n = gpuc_numel(o0[k]), bad = 0;
    CHECK(n > 0 && n == gpuc_numel(o1[k]) && o0[k]->rank == o1[k]->rank, "%s output %d: shapes differ", what, k);
    if (n != gpuc_numel(o1[k])) continue;
    for (int d = 0; d < o0[k]->rank; d++)
      CHECK(o0[k]->dims[d] == o1[k]->dims[d], "%s output %d dim %d: %lld vs %lld", what, k, d,
            (long long)o0[k]->dims[d], (long long)o1[k]->dims[d]);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(gpuc_get_f64(o0[k], i)));
    for (int64_t i = 0; i < n; i++) {
      double a = gpuc_get_f64(o1[k], i), w = gpuc_get_f64(o0[k], i);
      bad += !(fabs(a - w) <= 1e-5 * scale + 1e-5 * fabs(w));
    }
    CHECK(bad == 0, "%s output %d: %lld of %lld elements differ after folding", what, k, (long long)bad,
          (long long)n);
  }
  for (int k = 0; k < 4; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
  for (int k = 0; k < g0->ninputs; k++) gpuc_tensor_free(ins[k]);
  free(ins);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

/* x [batch, seq, 8]; per layer, as TorchScript exports GPT-2's Conv1D:
 *   s = Shape(h); last = Squeeze(Slice(s, -1, INT64_MAX)); flat = Reshape(h, Concat(-1, Unsqueeze(last)))
 *   y = Reshape(MatMul(flat, W), Concat(Slice(s, 0, -1), 8)); h = Add(h, y)
 * Each layer's Shape waits for the Reshape before it. */
#define DEEP_LAYERS 20
static void build_deep_chain(const char *path) {
  OnnxBuilder *b = ob_new("deep_chain", 17);
  int64_t xd[3] = {-1, -1, 8}, wd[2] = {8, 8};
  ob_input(b, "x", F32, 3, xd, "batch,seq");
  ob_output(b, "y", F32, 3, xd);
  init_i64(b, "minus1", 1, (int64_t[]){-1});
  init_i64(b, "big", 1, (int64_t[]){INT64_MAX});
  init_i64(b, "zero", 1, (int64_t[]){0});
  init_i64(b, "eight", 1, (int64_t[]){8});
  char h[32] = "x", n[32][16];
  for (int l = 0; l < DEEP_LAYERS; l++) {
    const char *const nm[] = {"s", "last", "sq", "un", "cat", "flat", "W", "mm", "head", "cat2", "y", "h"};
    for (int k = 0; k < 12; k++) snprintf(n[k], sizeof n[k], "%s%d", nm[k], l);
    init_rand(b, n[6], 2, wd);
    ob_node(b, "Shape", n[0], NAMES(h), NAMES(n[0]));
    ob_node(b, "Slice", n[1], NAMES(n[0], "minus1", "big", "zero"), NAMES(n[1]));
    ob_node(b, "Squeeze", n[2], NAMES(n[1], "zero"), NAMES(n[2]));
    ob_node(b, "Unsqueeze", n[3], NAMES(n[2], "zero"), NAMES(n[3]));
    ob_node(b, "Concat", n[4], NAMES("minus1", n[3]), NAMES(n[4]));
    ob_attr_i(b, "axis", 0);
    ob_node(b, "Reshape", n[5], NAMES(h, n[4]), NAMES(n[5]));
    ob_node(b, "MatMul", n[7], NAMES(n[5], n[6]), NAMES(n[7]));
    ob_node(b, "Slice", n[8], NAMES(n[0], "zero", "minus1", "zero"), NAMES(n[8]));
    ob_node(b, "Concat", n[9], NAMES(n[8], "eight"), NAMES(n[9]));
    ob_attr_i(b, "axis", 0);
    ob_node(b, "Reshape", n[10], NAMES(n[7], n[9]), NAMES(n[10]));
    ob_node(b, "Add", n[11], NAMES(h, n[10]), NAMES(l == DEEP_LAYERS - 1 ? "y" : n[11]));
    snprintf(h, sizeof h, "%s", n[11]);
  }
  CHECK(ob_save(b, path) == 0, "write %s", path);
}

/* x [batch, seq, 8] (a ViT's patches or a transformer's embeddings):
 *   ViT's class token: target = Concat(Unsqueeze(Gather(Shape(x), 0)), -1, -1);
 *     ones = Cast(ConstantOfShape(Shape(target))) + 1 - 1 + 1 (ones, i64);
 *     Expand(cls [1,1,8], Where(Equal(target, ones * -1), ones, target))
 *   positions: Gather(pos [64, 8], Range(0, Gather(Shape(x), 1), 1)) added
 *   with the class token's row, then Reshape(., [0, -1]) -> [batch, (seq+1)*8] */
static void build_vit_chain(const char *path) {
  OnnxBuilder *b = ob_new("vit_chain", 17);
  int64_t xd[3] = {-1, -1, 8}, yd[2] = {-1, -1}, cd[3] = {1, 1, 8}, pd[2] = {65, 8};
  ob_input(b, "x", F32, 3, xd, "batch,seq");
  ob_output(b, "y", F32, 2, yd);
  init_rand(b, "cls", 3, cd);
  init_rand(b, "pos", 2, pd);
  init_i64(b, "zero", 1, (int64_t[]){0});
  init_i64(b, "one", 1, (int64_t[]){1});
  init_i64(b, "minus1", 1, (int64_t[]){-1});
  init_i64(b, "flat", 2, (int64_t[]){0, -1});
  int64_t s0 = 0, s1 = 1;
  ob_init_i64(b, "i0", 0, NULL, &s0);
  ob_init_i64(b, "i1", 0, NULL, &s1);
  ob_node(b, "Shape", "shape", NAMES("x"), NAMES("s"));
  ob_node(b, "Gather", "g_batch", NAMES("s", "i0"), NAMES("batch"));
  ob_attr_i(b, "axis", 0);
  ob_node(b, "Unsqueeze", "u_batch", NAMES("batch", "zero"), NAMES("batch1"));
  ob_node(b, "Concat", "target", NAMES("batch1", "minus1", "minus1"), NAMES("target"));
  ob_attr_i(b, "axis", 0);
  ob_node(b, "Shape", "shape_t", NAMES("target"), NAMES("st"));
  ob_node(b, "ConstantOfShape", "cos", NAMES("st"), NAMES("zeros_f"));
  ob_node(b, "Cast", "cast", NAMES("zeros_f"), NAMES("zeros"));
  ob_attr_i(b, "to", I64);
  ob_node(b, "Add", "ones", NAMES("zeros", "one"), NAMES("ones"));
  ob_node(b, "Mul", "neg", NAMES("ones", "minus1"), NAMES("neg"));
  ob_node(b, "Equal", "eq", NAMES("target", "neg"), NAMES("eq"));
  ob_node(b, "Where", "where", NAMES("eq", "ones", "target"), NAMES("expand_to"));
  ob_node(b, "Expand", "expand", NAMES("cls", "expand_to"), NAMES("cls_b"));
  ob_node(b, "Concat", "with_cls", NAMES("cls_b", "x"), NAMES("tokens"));
  ob_attr_i(b, "axis", 1);
  ob_node(b, "Shape", "shape_k", NAMES("tokens"), NAMES("sk"));
  ob_node(b, "Gather", "g_seq", NAMES("sk", "i1"), NAMES("seq"));
  ob_attr_i(b, "axis", 0);
  ob_node(b, "Range", "range", NAMES("i0", "seq", "i1"), NAMES("positions"));
  ob_node(b, "Gather", "pos_emb", NAMES("pos", "positions"), NAMES("pe"));
  ob_attr_i(b, "axis", 0);
  ob_node(b, "Add", "add_pos", NAMES("tokens", "pe"), NAMES("embedded"));
  ob_node(b, "Reshape", "flatten", NAMES("embedded", "flat"), NAMES("y"));
  CHECK(ob_save(b, path) == 0, "write %s", path);
}

static GpucShapeBind bind3(const char *name, int64_t a, int64_t s, int64_t c) {
  GpucShapeBind b = {.name = name, .rank = 3, .dims = {a, s, c}};
  return b;
}

static void test_chains(void) {
  char deep[512], vit[512], what[96];
  path_of(deep, sizeof deep, "shapes_deep_chain");
  path_of(vit, sizeof vit, "shapes_vit_chain");
  build_deep_chain(deep);
  build_vit_chain(vit);
  const int64_t batches[] = {1, 32}, seqs[] = {1, 7};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      GpucShapeBind b = bind3("x", batches[i], seqs[j], 8);
      snprintf(what, sizeof what, "deep chain x=%lldx%lldx8", (long long)batches[i], (long long)seqs[j]);
      check_folds(deep, &b, 1, what);
      snprintf(what, sizeof what, "vit chain x=%lldx%lldx8", (long long)batches[i], (long long)seqs[j]);
      check_folds(vit, &b, 1, what);
    }
}

/* x [batch, seq, 8] and mask [batch, seq]: y = x * Unsqueeze(mask, 2).
 * Binding x binds mask's dims through the names they share. */
static void test_shared_symbols(void) {
  char path[512];
  path_of(path, sizeof path, "shapes_shared_symbols");
  OnnxBuilder *b = ob_new("shared_symbols", 17);
  int64_t xd[3] = {-1, -1, 8}, md[2] = {-1, -1};
  ob_input(b, "x", F32, 3, xd, "batch,seq");
  ob_input(b, "mask", F32, 2, md, "batch,seq");
  ob_output(b, "y", F32, 3, xd);
  init_i64(b, "two", 1, (int64_t[]){2});
  ob_node(b, "Unsqueeze", "u", NAMES("mask", "two"), NAMES("m3"));
  ob_node(b, "Mul", "mul", NAMES("x", "m3"), NAMES("y"));
  CHECK(ob_save(b, path) == 0, "write %s", path);
  GpucShapeBind bx = bind3("x", 1, 7, 8);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, &bx, 1, &e);
  CHECK(g != NULL, "shared symbols: load: %s", e.msg);
  if (g) {
    const Tensor *m = &g->values[g->inputs[1]].t;
    CHECK(m->rank == 2 && m->dims[0] == 1 && m->dims[1] == 7, "shared symbols: mask is not 1x7 after x=1x7x8");
    gpuc_graph_free(g);
  }
  check_folds(path, &bx, 1, "shared symbols x=1x7x8");
  GpucShapeBind two[2] = {bind3("x", 1, 7, 8), {.name = "mask", .rank = 2, .dims = {32, 7}}};
  g = gpuc_onnx_load(path, two, 2, &e);
  CHECK(g == NULL && strstr(e.msg, "'batch'") && strstr(e.msg, "'mask'"),
        "shared symbols: x=1x7x8 with mask=32x7 must be refused naming 'batch': %s", g ? "loaded" : e.msg);
  gpuc_graph_free(g);
}

static void expect_compile_error(const char *path, const GpucShapeBind *b, int nb, const char *const *want) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "%s: load: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "%s: passes: %s", path, e.msg);
  CodegenOptions co = {.sm = 90, .level = 2};
  Plan *p = NULL;
  CompileStats st;
  int rc = gpuc_codegen(g, &co, &p, &st, &e);
  CHECK(rc != 0, "%s: compiled, but a shape stays unknown", path);
  bool all = true;
  for (const char *const *w = want; *w; w++) all &= strstr(e.msg, *w) != NULL;
  CHECK(rc != 0 && all, "%s: message lacks the chain: %s", path, e.msg);
  printf("  message: %s\n", e.msg);
  gpuc_plan_free(p);
  gpuc_graph_free(g);
}

/* x [2, 12] and a shape that is data, known only at run time:
 *   y = Reshape(x, Where(Equal(shape, 0), Shape(x)[:2]..., shape)) */
static void test_message(void) {
  char path[512];
  path_of(path, sizeof path, "shapes_data_shape");
  OnnxBuilder *b = ob_new("data_shape", 17);
  int64_t xd[2] = {2, 12}, sd[1] = {2}, yd[2] = {-1, -1};
  ob_input(b, "x", F32, 2, xd, NULL);
  ob_input(b, "shape", I64, 1, sd, NULL);
  ob_output(b, "y", F32, 2, yd);
  init_i64(b, "zero", 1, (int64_t[]){0});
  ob_node(b, "Shape", "Shape_3", NAMES("x"), NAMES("s"));
  ob_node(b, "Equal", "Equal_11", NAMES("shape", "zero"), NAMES("eq"));
  ob_node(b, "Where", "Where_12", NAMES("eq", "s", "shape"), NAMES("target"));
  ob_node(b, "Reshape", "Reshape_13", NAMES("x", "target"), NAMES("r"));
  ob_node(b, "Relu", "Relu_14", NAMES("r"), NAMES("y"));
  CHECK(ob_save(b, path) == 0, "write %s", path);
  /* the first unknown value is Reshape's; its shape input is data */
  expect_compile_error(path, NULL, 0,
                       NAMES("value 'r' of node 'Reshape_13' (Reshape) has no static shape",
                             "its input 1 comes from 'Where_12' (Where) <- 'Equal_11' (Equal) <- graph input 'shape'"));
  /* asked about a value further down, the message walks up to Reshape */
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g != NULL, "%s: load: %s", path, e.msg);
  if (g) {
    char why[900];
    gpuc_explain_unknown_shape(g, gpuc_graph_find_value(g, "y"), why, sizeof why);
    CHECK(strstr(why, "value 'y' of node 'Relu_14' (Relu) has no static shape: it follows from 'r' ?x? of node "
                      "'Reshape_13' (Reshape), whose input 1 comes from 'Where_12' (Where) <- 'Equal_11' (Equal) "
                      "<- graph input 'shape' (data known only at run time)") == why,
          "explain y: %s", why);
    gpuc_graph_free(g);
  }
  /* an unbound dim: the message names the input and the flag */
  char deep[512];
  path_of(deep, sizeof deep, "shapes_deep_chain");
  expect_compile_error(deep, NULL, 0, NAMES("graph input with dims ?x?x8", "--shape x="));
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_shape_fold WORKDIR\n"); return 2; }
  workdir = argv[1];
  test_chains();
  test_shared_symbols();
  test_message();
  return check_summary();
}
