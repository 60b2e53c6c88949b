/* --bf16 (passes/fp16.c with PassOptions.bf16) against the fp32 graph on
 * the CPU reference, with seeded random inputs (never zeros):
 *   - the bundled models at -O2 --bf16: the model's output dtypes kept, no
 *     f16 value left, bf16 values present, relative L2 to -O0 fp32 within
 *     BF16_TOL and not 0 (the rounding happened), and not the fp16 graph's
 *     result;
 *   - a graph whose activations pass fp16's 65504 (T5-style): --fp16 gives
 *     inf/NaN, --bf16 stays within BF16_TOL of fp32;
 *   - --fp16 with --bf16 is refused; --bf16 -O2 puts convolutions in NHWC
 *     as --fp16 does (resnet_block: all 5);
 *   - bf16 plans (NVRTC, no GPU): marked GPUC_PLAN_F_BF16, GEMMs and
 *     convolutions in bf16, bf16 convolutions without cuDNN's fused
 *     bias-activation call, the attention kernel on bf16 tensor cores.
 * usage: test_bf16 MODELS_DIR */
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "ref.h"
#include "check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bf16 keeps 8 significant bits (unit roundoff 2^-9 = 0.2%); rounding at
 * every stored activation of a few layers stays under 2% (measured at most
 * 0.67%, ffn_block; fp16 0.09%):
 * the per-model lines this test prints. */
#define BF16_TOL 2e-2

static uint64_t rng = 1234;
static double urand(void) { /* splitmix64 -> [-1, 1) */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0 * 2 - 1;
}

static double rel_l2(const Tensor *a, const Tensor *w) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < gpuc_numel(w); i++) {
    double d = gpuc_get_f64(a, i) - gpuc_get_f64(w, i);
    num += d * d;
    den += gpuc_get_f64(w, i) * gpuc_get_f64(w, i);
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int count_dtype(const Graph *g, GpucDType dt) {
  int n = 0;
  for (int v = 0; v < g->nvalues; v++) n += g->values[v].t.dt == dt;
  return n;
}

/* The graph's outputs on inputs ins: the graph as given (level 0) or after
 * the passes of level with fp16/bf16. Returns the outputs (caller frees). */
static Tensor **run(Graph *g, int level, bool fp16, bool bf16, Tensor **ins) {
  GpucErr e = {0};
  PassOptions o;
  gpuc_pass_options_default(&o, level);
  o.fp16 = fp16;
  o.bf16 = bf16;
  if (level > 0) {
    int rc = gpuc_passes_run(g, &o, &e);
    CHECK(rc == 0, "%s: passes (%s): %s", g->path, bf16 ? "bf16" : fp16 ? "fp16" : "fp32", e.msg);
    if (rc) return NULL;
  }
  Tensor **outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
  int rc = gpuc_ref_run(g, (const Tensor *const *)ins, outs, &e);
  CHECK(rc == 0, "%s: reference run: %s", g->path, e.msg);
  if (rc) { free(outs); return NULL; }
  return outs;
}

static void free_outs(Tensor **o, int n) {
  for (int k = 0; o && k < n; k++) gpuc_tensor_free(o[k]);
  free(o);
}

static void check_model(const char *dir, const char *file, const GpucShapeBind *b, int nb) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  GpucErr e = {0};
  Graph *g[3];
  for (int k = 0; k < 3; k++) g[k] = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g[0] && g[1] && g[2], "load %s: %s", path, e.msg);
  if (!g[0] || !g[1] || !g[2]) { for (int k = 0; k < 3; k++) gpuc_graph_free(g[k]); return; }
  Tensor **ins = calloc((size_t)g[0]->ninputs + 1, sizeof *ins);
  for (int k = 0; k < g[0]->ninputs; k++) {
    const Tensor *d = &g[0]->values[g[0]->inputs[k]].t;
    ins[k] = gpuc_tensor_new(d->dt, d->rank, d->dims, &e);
    for (int64_t i = 0; i < gpuc_numel(d); i++) gpuc_set_f64(ins[k], i, urand());
  }
  Tensor **o32 = run(g[0], 0, false, false, ins), **obf = run(g[1], 2, false, true, ins),
         **o16 = run(g[2], 2, true, false, ins);
  if (obf) {
    CHECK(count_dtype(g[1], GPUC_DT_F16) == 0, "%s: --bf16 left f16 values", file);
    CHECK(count_dtype(g[1], GPUC_DT_BF16) > 0, "%s: --bf16 made no bf16 value", file);
  }
  for (int k = 0; o32 && obf && o16 && k < g[0]->noutputs; k++) {
    CHECK(obf[k]->dt == o32[k]->dt, "%s output %d: --bf16 changed the output dtype", file, k);
    if (gpuc_numel(obf[k]) != gpuc_numel(o32[k])) { CHECK(0, "%s output %d: sizes differ", file, k); continue; }
    double r = rel_l2(obf[k], o32[k]), r16 = rel_l2(o16[k], o32[k]), rbf16 = rel_l2(obf[k], o16[k]);
    printf("  %-22s output %d: bf16 rel L2 %.3g, fp16 %.3g\n", file, k, r, r16);
    CHECK(r > 0 && r <= BF16_TOL, "%s output %d: bf16 relative L2 %.3g (tolerance %g)", file, k, r, BF16_TOL);
    CHECK(rbf16 > 0, "%s output %d: the bf16 graph computed exactly the fp16 graph's result", file, k);
  }
  free_outs(o32, g[0]->noutputs);
  free_outs(obf, g[1]->noutputs);
  free_outs(o16, g[2]->noutputs);
  for (int k = 0; k < g[0]->ninputs; k++) gpuc_tensor_free(ins[k]);
  free(ins);
  for (int k = 0; k < 3; k++) gpuc_graph_free(g[k]);
}

/* ---- a graph that overflows fp16 ----------------------------------------
 * x [4,32] -> MatMul W1 [32,32] (entries +-40000: |h| up to ~1e6, past
 * fp16's 65504) -> Relu -> MatMul W2 [32,8] (entries +-1e-4) -> y. */
static int add_const(Graph *g, const char *name, int rank, const int64_t *dims, double scale) {
  GpucErr e = {0};
  int v = gpuc_graph_add_value(g, name);
  Tensor *t = gpuc_tensor_new(GPUC_DT_F32, rank, dims, &e);
  GPUC_ASSERT(v >= 0 && t);
  for (int64_t i = 0; i < gpuc_numel(t); i++) gpuc_set_f64(t, i, scale * (urand() < 0 ? -1 : 1) * (0.5 + 0.5 * fabs(urand())));
  g->values[v].t = *t;
  free(t); /* the value owns the data */
  g->values[v].is_const = true;
  return v;
}

static int add_node(Graph *g, GpucOp op, const char *name, int a, int b) {
  int ni = gpuc_graph_add_node(g, op, name, b >= 0 ? 2 : 1, 1);
  int y = gpuc_graph_add_value(g, name);
  GPUC_ASSERT(ni >= 0 && y >= 0);
  g->nodes[ni].in[0] = a;
  if (b >= 0) g->nodes[ni].in[1] = b;
  g->nodes[ni].out[0] = y;
  g->values[y].producer = ni;
  return y;
}

static Graph *overflow_graph(void) {
  uint64_t keep = rng;
  rng = 77; /* the same weights in every copy */
  Graph *g = gpuc_graph_new("overflow-test");
  g->opset = 17;
  g->inputs = gpuc_arena_alloc(&g->arena, sizeof(int));
  g->outputs = gpuc_arena_alloc(&g->arena, sizeof(int));
  int64_t xd[2] = {4, 32}, w1d[2] = {32, 32}, w2d[2] = {32, 8};
  int x = gpuc_graph_add_value(g, "x");
  gpuc_set_shape(&g->values[x].t, GPUC_DT_F32, 2, xd);
  g->values[x].is_input = true;
  g->inputs[g->ninputs++] = x;
  int w1 = add_const(g, "w1", 2, w1d, 40000), w2 = add_const(g, "w2", 2, w2d, 1e-4);
  int h = add_node(g, GPUC_OP_MATMUL, "h", x, w1);
  int r = add_node(g, GPUC_OP_RELU, "r", h, -1);
  int y = add_node(g, GPUC_OP_MATMUL, "y", r, w2);
  g->outputs[g->noutputs++] = y;
  g->values[y].is_output = true;
  rng = keep;
  GpucErr e = {0};
  CHECK(gpuc_graph_infer(g, &e) == 0 && gpuc_graph_verify(g, &e) == 0, "overflow graph: %s", e.msg);
  return g;
}

static void test_overflow(void) {
  Graph *g[3] = {overflow_graph(), overflow_graph(), overflow_graph()};
  GpucErr e = {0};
  int64_t xd[2] = {4, 32};
  Tensor *x = gpuc_tensor_new(GPUC_DT_F32, 2, xd, &e);
  for (int64_t i = 0; i < 4 * 32; i++) gpuc_set_f64(x, i, urand());
  Tensor *ins[1] = {x};
  Tensor **o32 = run(g[0], 0, false, false, ins), **obf = run(g[1], 2, false, true, ins),
         **o16 = run(g[2], 2, true, false, ins);
  if (o32 && obf && o16) {
    double big = 0;
    int64_t bad16 = 0, badbf = 0;
    for (int64_t i = 0; i < gpuc_numel(o32[0]); i++) {
      big = fmax(big, fabs(gpuc_get_f64(o32[0], i)));
      bad16 += !isfinite(gpuc_get_f64(o16[0], i));
      badbf += !isfinite(gpuc_get_f64(obf[0], i));
    }
    double r = rel_l2(obf[0], o32[0]);
    printf("  overflow graph: fp16 %lld of %lld outputs non-finite; bf16 rel L2 %.3g\n", (long long)bad16,
           (long long)gpuc_numel(o32[0]), r);
    CHECK(big > 1 && isfinite(big), "overflow graph: the fp32 output is %g at most", big);
    CHECK(bad16 > 0, "overflow graph: fp16 did not overflow (the test lost its point)");
    CHECK(badbf == 0 && r <= BF16_TOL, "overflow graph: bf16 %lld non-finite, rel L2 %.3g", (long long)badbf, r);
  }
  free_outs(o32, 1);
  free_outs(obf, 1);
  free_outs(o16, 1);
  gpuc_tensor_free(x);
  for (int k = 0; k < 3; k++) gpuc_graph_free(g[k]);
}

static void test_exclusive(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/small_cnn.onnx", dir);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = o.bf16 = true;
  CHECK(gpuc_passes_run(g, &o, &e) != 0 && strstr(e.msg, "--fp16 and --bf16"), "--fp16 with --bf16: '%s'", e.msg);
  gpuc_graph_free(g);
}

/* -O2 --bf16: every convolution of the model NHWC (FusedConv layout 1). */
static void check_nhwc(const char *dir, const char *file, int want) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.bf16 = true;
  int nhwc = 0, convs = 0;
  if (gpuc_passes_run(g, &o, &e) == 0)
    for (int i = 0; i < g->nnodes; i++) {
      const Node *n = &g->nodes[i];
      if (n->op != GPUC_OP_CONV && n->op != GPUC_OP_FUSEDCONV) continue;
      convs++;
      nhwc += n->op == GPUC_OP_FUSEDCONV && gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC &&
              g->values[n->in[0]].t.dt == GPUC_DT_BF16;
    }
  CHECK(convs == want && nhwc == want, "%s --bf16: %d of %d convolutions NHWC bf16, want %d", file, nhwc, convs, want);
  gpuc_graph_free(g);
}

/* A bf16 plan of a bundled model for sm_90. */
static Plan *bf16_plan(const char *dir, const char *file, const GpucShapeBind *b, int nb) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return NULL;
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  po.bf16 = true;
  Plan *p = NULL;
  int rc = gpuc_passes_run(g, &po, &e);
  CHECK(rc == 0, "passes on %s: %s", path, e.msg);
  CodegenOptions co = {.sm = 90, .level = 2, .bf16 = true};
  if (!rc) CHECK(gpuc_codegen(g, &co, &p, NULL, &e) == 0 && p, "codegen %s: %s", path, e.msg);
  gpuc_graph_free(g);
  return p;
}

static void test_plans(const char *dir) {
  GpucShapeBind m = {.name = "image", .rank = 2, .dims = {8, 784}};
  Plan *p = bf16_plan(dir, "mlp.onnx", &m, 1);
  if (p) {
    CHECK(p->hdr.flags == GPUC_PLAN_F_BF16, "mlp: plan flags %#x", p->hdr.flags);
    CHECK(p->ngemms > 0, "mlp: no GEMM");
    for (uint32_t i = 0; i < p->ngemms; i++) CHECK(p->gemms[i].dt == GPUC_DT_BF16, "mlp: GEMM %u in %u", i, p->gemms[i].dt);
    gpuc_plan_free(p);
  }
  if ((p = bf16_plan(dir, "small_cnn.onnx", NULL, 0))) {
    CHECK(p->nconvs > 0, "small_cnn: no convolution");
    for (uint32_t i = 0; i < p->nconvs; i++) {
      CHECK(p->convs[i].dt == GPUC_DT_BF16, "small_cnn: conv %u in %u", i, p->convs[i].dt);
      CHECK(p->convs[i].b == UINT32_MAX && GPUC_CONV_ACT(p->convs[i].act) == 0,
            "small_cnn: bf16 conv %u uses cuDNN's fused bias-activation call", i);
    }
    CHECK(p->ptx && strstr(p->ptx, "cvt.rn.bf16.f32"), "small_cnn: no bf16 rounding in the PTX");
    gpuc_plan_free(p);
  }
  if ((p = bf16_plan(dir, "attention_shapes.onnx", NULL, 0))) {
    CHECK(p->ptx && strstr(p->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
          "attention_shapes: no bf16 tensor-core mma in the PTX");
    gpuc_plan_free(p);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: test_bf16 MODELS_DIR\n"); return 2; }
  const char *dir = argv[1];
  GpucShapeBind mlp = {.name = "image", .rank = 2, .dims = {3, 784}};
  GpucShapeBind ffn = {.name = "x", .rank = 3, .dims = {3, 16, 64}};
  GpucShapeBind r18 = {.name = "input", .rank = 4, .dims = {1, 3, 224, 224}};
  check_model(dir, "mlp.onnx", &mlp, 1);
  check_model(dir, "small_cnn.onnx", NULL, 0);
  check_model(dir, "resnet_block.onnx", NULL, 0);
  check_model(dir, "mobile_block.onnx", NULL, 0);
  check_model(dir, "ffn_block.onnx", &ffn, 1);
  check_model(dir, "add_layernorm.onnx", NULL, 0);
  check_model(dir, "attention_shapes.onnx", NULL, 0);
  check_model(dir, "resnet18.onnx", &r18, 1);
  test_overflow();
  test_exclusive(dir);
  check_nhwc(dir, "resnet_block.onnx", 5);
  check_nhwc(dir, "small_cnn.onnx", 2);
  test_plans(dir);
  return check_summary();
}
