/* passes/patchify_conv.c: a Conv whose kernel equals its stride as
 * Reshape, Transpose, MatMul (+ bias Add), Transpose.
 *   - small convs built here (p = q and p != q, with and without bias,
 *     C = 1 and 3, batch 1 and 4, 1-D and 3-D, an input that is a
 *     Transpose of an NHWC value): the pass alone leaves no Conv and
 *     exactly the expected nodes, and the result matches the un-rewritten
 *     graph on the reference with seeded random inputs (f32: |a-b| <=
 *     1e-5 + 1e-5|b|, only the summation order changes); then the whole
 *     -O2 pipeline, fp32 (same tolerance) and --fp16 (2e-2: half storage
 *     of x, W and y): no Conv or FusedConv left, one MatMulBias (a MatMul
 *     without a bias);
 *   - convs the pass must leave alone (padding, dilation, group 2, kernel
 *     != stride, H not a multiple of the kernel, W a graph input, K < 16,
 *     1x1 stride 1): still one Conv, and the pass reports no change;
 *   - the zoo's ViT and ConvNeXt from both exporters (tests/models/zoo),
 *     compiled at -O2 for sm_90 at batch 1 and 4, fp32 and fp16: no conv
 *     of group 1 (ViT's conv_proj, ConvNeXt's 4x4 stem and 2x2
 *     downsampling) is left, no cuDNN step covers one and one GEMM step
 *     each does.
 * usage: test_patchify ZOO_DIR */
#include "passes.h"
#include "ref.h"
#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "plan.h"
#define TEST_RNG_SEED 29
#include "graph_build.h"
#include "compile_model.h"
#include <stdio.h>

/* One conv case: X [dims], W [o, c/group, k...], attributes. */
typedef struct {
  const char *what;
  int rank;                      /* X's */
  int64_t x[5];
  int64_t o, group;
  int64_t k[3], stride[3], pad, dil;
  bool bias, w_input, nhwc_in;   /* W a graph input; X = Transpose(X0 NHWC) */
} ConvCase;

static void build_conv(Graph *g, const ConvCase *cc) {
  int n = cc->rank - 2, x;
  if (cc->nhwc_in) { /* X0 [B,H,W,C] -> Transpose [0,3,1,2] -> X [B,C,H,W] */
    int64_t d0[4] = {cc->x[0], cc->x[2], cc->x[3], cc->x[1]}, p[4] = {0, 3, 1, 2};
    x = transpose(g, input(g, "x0", 4, d0), 4, p);
  } else {
    x = input(g, "x", cc->rank, cc->x);
  }
  int64_t wd[5] = {cc->o, cc->x[1] / cc->group};
  for (int j = 0; j < n; j++) wd[2 + j] = cc->k[j];
  int w = cc->w_input ? input(g, "w", cc->rank, wd) : constant(g, cc->rank, wd, 7, -1, 1);
  int64_t od = cc->o;
  int y = cc->bias ? NODE(g, GPUC_OP_CONV, x, w, constant(g, 1, &od, 8, -1, 1)) : NODE(g, GPUC_OP_CONV, x, w);
  int64_t pads[6], dil[3];
  for (int j = 0; j < 2 * n; j++) pads[j] = cc->pad;
  for (int j = 0; j < n; j++) dil[j] = cc->dil;
  attr_ints(g, "kernel_shape", n, cc->k);
  attr_ints(g, "strides", n, cc->stride);
  attr_ints(g, "pads", 2 * n, pads);
  attr_ints(g, "dilations", n, dil);
  attr_i(g, "group", cc->group);
  output(g, y);
}

static int count_convs(const Graph *g) { return count_op(g, GPUC_OP_CONV) + count_op(g, GPUC_OP_FUSEDCONV); }

static const ConvCase POSITIVE[] = {
    {"C3 b1 4x4/4 bias", 4, {1, 3, 16, 16}, 8, 1, {4, 4}, {4, 4}, 0, 1, true, false, false},
    {"C3 b4 2x4/(2,4) no bias", 4, {4, 3, 12, 16}, 5, 1, {2, 4}, {2, 4}, 0, 1, false, false, false},
    {"C1 b4 4x4/4 bias", 4, {4, 1, 16, 8}, 6, 1, {4, 4}, {4, 4}, 0, 1, true, false, false},
    {"C3 b1 8x8/8 (ViT-like)", 4, {1, 3, 32, 32}, 16, 1, {8, 8}, {8, 8}, 0, 1, true, false, false},
    {"1-D C4 b2 k4/4", 3, {2, 4, 24}, 7, 1, {4}, {4}, 0, 1, true, false, false},
    {"3-D C2 b1 2x2x2/2", 5, {1, 2, 4, 6, 8}, 3, 1, {2, 2, 2}, {2, 2, 2}, 0, 1, true, false, false},
    {"NHWC input C8 b2 2x2/2", 4, {2, 8, 8, 12}, 9, 1, {2, 2}, {2, 2}, 0, 1, true, false, true},
};

static const ConvCase NEGATIVE[] = {
    {"padding", 4, {1, 3, 16, 16}, 8, 1, {4, 4}, {4, 4}, 1, 1, true, false, false},
    {"dilation 2", 4, {1, 3, 16, 16}, 8, 1, {4, 4}, {4, 4}, 0, 2, true, false, false},
    {"group 2", 4, {1, 4, 16, 16}, 8, 2, {4, 4}, {4, 4}, 0, 1, true, false, false},
    {"kernel 4 stride 2", 4, {1, 3, 16, 16}, 8, 1, {4, 4}, {2, 2}, 0, 1, true, false, false},
    {"H 18 not a multiple of 4", 4, {1, 3, 18, 16}, 8, 1, {4, 4}, {4, 4}, 0, 1, true, false, false},
    {"W a graph input", 4, {1, 3, 16, 16}, 8, 1, {4, 4}, {4, 4}, 0, 1, true, true, false},
    {"K = 1*2*2 < 16", 4, {1, 1, 16, 16}, 8, 1, {2, 2}, {2, 2}, 0, 1, true, false, false},
    {"1x1 stride 1", 4, {1, 32, 8, 8}, 8, 1, {1, 1}, {1, 1}, 0, 1, true, false, false},
};

static Graph *built(const ConvCase *cc) {
  GpucErr e = {0};
  Graph *g = graph_new(17);
  build_conv(g, cc);
  CHECK(gpuc_graph_infer(g, &e) == 0, "%s: bad test graph: %s", cc->what, e.msg);
  return g;
}

static void test_positive(const ConvCase *cc) {
  GpucErr e = {0};
  Graph *g0 = built(cc), *g1 = built(cc);
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  int got = pass_patchify_conv(g1, &o, &e);
  CHECK(got == 1, "%s: %d rewritten, want 1 (%s)", cc->what, got, e.msg);
  CHECK(gpuc_graph_verify(g1, &e) == 0, "%s: verify: %s", cc->what, e.msg);
  /* Reshape, Transpose, Reshape, MatMul, [Add,] Transpose; the NHWC
   * input's own Transpose is read through and gone */
  CHECK(count_convs(g1) == 0 && count_op(g1, GPUC_OP_MATMUL) == 1 && count_op(g1, GPUC_OP_RESHAPE) == 2 &&
            count_op(g1, GPUC_OP_TRANSPOSE) == 2 && count_op(g1, GPUC_OP_ADD) == (cc->bias ? 1 : 0) &&
            g1->nnodes == (cc->bias ? 6 : 5),
        "%s: %d nodes (%d Conv, %d MatMul, %d Reshape, %d Transpose, %d Add)", cc->what, g1->nnodes,
        count_convs(g1), count_op(g1, GPUC_OP_MATMUL), count_op(g1, GPUC_OP_RESHAPE),
        count_op(g1, GPUC_OP_TRANSPOSE), count_op(g1, GPUC_OP_ADD));
  if (cc->nhwc_in) { /* the patches' Transpose only swaps p with W/q: [0,1,3,2,4,5] */
    static const int64_t want[6] = {0, 1, 3, 2, 4, 5};
    bool found = false;
    for (int i = 0; i < g1->nnodes; i++) {
      const int64_t *pv;
      if (g1->nodes[i].op == GPUC_OP_TRANSPOSE && gpuc_attr_ints(&g1->nodes[i], "perm", &pv) == 6)
        found = !memcmp(pv, want, sizeof want);
    }
    CHECK(found, "%s: the patches' Transpose is [0,1,3,2,4,5]", cc->what);
  }
  compare(cc->what, g0, g1, 1e-5);
  gpuc_graph_free(g1);
  /* the whole -O2 pipeline, fp32 and fp16 */
  for (int half = 0; half <= 1; half++) {
    Graph *g2 = built(cc);
    gpuc_pass_options_default(&o, 2);
    o.fp16 = half;
    CHECK(gpuc_passes_run(g2, &o, &e) == 0, "%s: -O2%s: %s", cc->what, half ? " --fp16" : "", e.msg);
    /* the bias in the GEMM's epilogue; without one the MatMul stays */
    CHECK(count_convs(g2) == 0 && count_op(g2, GPUC_OP_MATMULBIAS) == (cc->bias ? 1 : 0) &&
              count_op(g2, GPUC_OP_MATMUL) == (cc->bias ? 0 : 1),
          "%s: -O2%s: %d convs, %d MatMulBias, %d MatMul", cc->what, half ? " --fp16" : "", count_convs(g2),
          count_op(g2, GPUC_OP_MATMULBIAS), count_op(g2, GPUC_OP_MATMUL));
    char what[160];
    snprintf(what, sizeof what, "%s -O2%s", cc->what, half ? " --fp16" : "");
    compare(what, g0, g2, half ? 2e-2 : 1e-5);
    gpuc_graph_free(g2);
  }
  gpuc_graph_free(g0);
}

static void test_negative(const ConvCase *cc) {
  GpucErr e = {0};
  Graph *g = built(cc);
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  int got = pass_patchify_conv(g, &o, &e);
  CHECK(got == 0 && count_op(g, GPUC_OP_CONV) == 1 && count_op(g, GPUC_OP_MATMUL) == 0,
        "%s: left as a Conv (%d rewritten, %d Conv)", cc->what, got, count_op(g, GPUC_OP_CONV));
  gpuc_graph_free(g);
}

/* ---- the zoo's models: no cuDNN step for a patch conv ------------------- */

/* Does the step's node list name a node that starts with one of names[0..n)? */
static bool covers(const Plan *p, const PlanStep *s, char names[][256], int n) {
  const char *nodes = gpuc_plan_str(p, s->nodes);
  for (int k = 0; k < n; k++)
    if (nodes && strstr(nodes, names[k])) return true;
  return false;
}

/* Convs of group 1 in g (the patch convs of these models), names copied */
static int group1_convs(const Graph *g, char names[][256], int max) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *c = &g->nodes[i];
    if ((c->op != GPUC_OP_CONV && c->op != GPUC_OP_FUSEDCONV) || gpuc_attr_i(c, "group", 1) != 1) continue;
    if (n < max && names) snprintf(names[n], 256, "%s", c->name);
    n++;
  }
  return n;
}

static void test_zoo(const char *zoo) {
  /* ViT: conv_proj 8x8/8; ConvNeXt: the 4x4/4 stem and the 2x2/2
   * downsampling (its other convs are 7x7 depthwise) */
  static const struct { const char *file; int patch_convs; } models[] = {
      {"tiny_vit_ts.onnx", 1},
      {"tiny_vit_dynamo.onnx", 1},
      {"tiny_convnext_ts.onnx", 2},
      {"tiny_convnext_dynamo.onnx", 2},
  };
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
    for (int batch = 1; batch <= 4; batch += 3)
      for (int half = 0; half <= 1; half++) {
        char path[4096], names[4][256];
        snprintf(path, sizeof path, "%s/%s", zoo, models[m].file);
        GpucShapeBind b = {.name = "input", .rank = 4, .dims = {batch, 3, 32, 32}};
        GpucErr e = {0};
        Graph *g = gpuc_onnx_load(path, &b, 1, &e);
        CHECK(g != NULL, "load %s: %s", path, e.msg);
        if (!g) continue;
        int npatch = group1_convs(g, names, 4);
        CHECK(npatch == models[m].patch_convs, "%s: %d convs of group 1, want %d", path, npatch,
              models[m].patch_convs);
        PassOptions po;
        pass_options_as(&po, 2, (CompilePrecision){.fp16 = half});
        CHECK(gpuc_passes_run(g, &po, &e) == 0, "%s: passes: %s", path, e.msg);
        int left = group1_convs(g, NULL, 0), convs = count_convs(g);
        Plan *p = NULL;
        CodegenOptions co = {.sm = 90, .level = 2, .fp16 = half};
        CHECK(gpuc_codegen(g, &co, &p, NULL, &e) == 0 && p, "codegen %s: %s", path, e.msg);
        gpuc_graph_free(g);
        if (!p) continue;
        int cudnn_patch = 0, gemm_patch = 0;
        for (uint32_t s = 0; s < p->nsteps; s++) {
          const PlanStep *st = &p->steps[s];
          if (!covers(p, st, names, npatch < 4 ? npatch : 4)) continue;
          cudnn_patch += st->kind == PLAN_STEP_CONV;
          gemm_patch += st->kind == PLAN_STEP_GEMM;
        }
        /* the rewritten nodes keep the conv's name as a prefix
         * ("<conv>.gemm_bias"), so the GEMM step of each names it */
        CHECK(left == 0 && cudnn_patch == 0 && gemm_patch == npatch && convs == (npatch == 2 ? 2 : 0), /* ConvNeXt's depthwise convs */
              "%s b%d%s: %d patch convs left, %d cuDNN and %d GEMM steps on them (want 0, 0, %d), %d convs",
              models[m].file, batch, half ? " fp16" : "", left, cudnn_patch, gemm_patch, npatch, convs);
        gpuc_plan_free(p);
      }
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_patchify ZOO_DIR\n"); return 2; }
  for (size_t i = 0; i < sizeof POSITIVE / sizeof POSITIVE[0]; i++) test_positive(&POSITIVE[i]);
  for (size_t i = 0; i < sizeof NEGATIVE / sizeof NEGATIVE[0]; i++) test_negative(&NEGATIVE[i]);
  test_zoo(argv[1]);
  return check_summary();
}
