/* Each pass must leave a graph that computes what the original computed:
 * for every model given, run the reference executor on the imported graph
 * (-O0) and on the -O1 graph with the same seeded random inputs (never
 * zeros) and compare outputs (f32: |a-b| <= 1e-5 + 1e-5|b|; others exact).
 * Also checks that folding really removed the shape chain of
 * shape_chain.onnx, and that a fold cap is honoured.
 * usage: test_passes MODELS_DIR */
#include "passes.h"
#include "ref.h"
#include "frontend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
static int level = 1; /* -O level the passes run at */
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) passed++;                                    \
    else { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
  } while (0)

static uint64_t rng = 99;
static double urand(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0 * 2 - 1;
}

static Tensor **random_inputs(const Graph *g) {
  Tensor **ins = calloc((size_t)g->ninputs + 1, sizeof *ins);
  GpucErr e;
  for (int k = 0; k < g->ninputs; k++) {
    const Tensor *d = &g->values[g->inputs[k]].t;
    ins[k] = gpuc_tensor_new(d->dt, d->rank, d->dims, &e);
    for (int64_t i = 0; i < gpuc_numel(d); i++) gpuc_set_f64(ins[k], i, urand());
  }
  return ins;
}

static void compare_model_opts(const char *path, const GpucShapeBind *b, int nb, int expect_nodes_after,
                               bool fp16);
static void compare_model(const char *path, const GpucShapeBind *b, int nb, int expect_nodes_after) {
  compare_model_opts(path, b, nb, expect_nodes_after, false);
}

/* relative L2 of a against reference w */
static double rel_l2(const Tensor *a, const Tensor *w) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < gpuc_numel(w); i++) {
    double d = gpuc_get_f64(a, i) - gpuc_get_f64(w, i);
    num += d * d;
    den += gpuc_get_f64(w, i) * gpuc_get_f64(w, i);
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

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
  for (int k = 0; k < g0->ninputs; k++) gpuc_tensor_free(ins[k]);
  free(ins);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
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
   * MatMulBias (19 -> 17 nodes); the GELU chain (5 ops), the gate
   * (Mul-Sigmoid-Mul, then Less-Where-Clip) and Transpose-Mul are groups */
  GpucShapeBind fb = {.name = "x", .rank = 3, .dims = {3, 16, 64}};
  snprintf(p, sizeof p, "%s/ffn_block.onnx", argv[1]);
  compare_model(p, &fb, 1, 17);
  compare_model_opts(p, &fb, 1, -1, true);
  static const int ffn_groups[] = {5, 3, 3, 2, 0}, ffn16_groups[] = {5, 4, 3, 3, 0}, none[] = {0}, pair[] = {2, 0};
  check_fusion(p, &fb, 1, false, 2, ffn_groups);
  /* fp16: the Cast back to the f32 output joins the last group */
  check_fusion(p, &fb, 1, true, 2, ffn16_groups);
  /* mobile_block's depthwise Conv and Clip outputs are graph outputs: they
   * stay; the 1x1 Conv's bias moves into an Add fused with the residual */
  snprintf(p, sizeof p, "%s/mobile_block.onnx", argv[1]);
  compare_model(p, NULL, 0, -1);
  check_fusion(p, NULL, 0, false, 0, pair);
  /* ResNet-18: every Conv ends in a FusedConv or a fused Relu; no groups */
  snprintf(p, sizeof p, "%s/resnet18.onnx", argv[1]);
  check_fusion(p, &r18, 1, false, 0, none);
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
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
