/* The transformer rewrites, each on small graphs built here and checked
 * against the unrewritten graph on the CPU reference with seeded random
 * inputs (f32: |a-b| <= 1e-5 + 1e-5|b|):
 *   fuse_gelu       GELU written out (tanh and erf forms, several
 *                   spellings) -> Gelu; look-alikes and shared values not
 *   fuse_rmsnorm    RMSNorm written out (both exporters' forms) ->
 *                   RMSNormalization; other axes, exponents, shared values not
 *   fuse_l2norm     F.normalize(x, -1) [* per-row scale] -> L2NormRows,
 *                   x read through Swin V2's Reshape/Transpose/Gather as a
 *                   view; other axes, bounds, shared values not; fp16
 *                   pipeline, sm_90 kernels compiled
 *   fuse_rotary     HF's rotate-half rotary embedding -> RotaryHalf, bit
 *                   for bit; other concatenations and shared halves not
 *   fuse_gated_mlp  SwiGLU's gate/up GEMMs -> one GEMM + GatedUnit, bit for
 *                   bit; other inputs, activations, shared values not
 *   fuse_attention  the dynamo exporter's K transpose (Reshape, 3-D
 *                   Transpose, Reshape); Swin's per-window mask between
 *                   two Reshapes (mask_period), Swin V2's per-head
 *                   score scale moved onto Q; fp32 and fp16, sm_90
 *                   kernels compiled
 *   roll_gather     torch.roll's Slice + Concat -> Gather;
 *   strided_concat  strided Slices + Concat (PatchMerging) -> Transpose;
 *                   identity's
 *                   Pad of zeros and Slice of everything
 *   attention_views Q, K, V as strided views of the GEMM output behind
 *                   GPT-2's Split, BERT's three projections merged into
 *                   one GEMM, torchvision's in_proj chunking, timm's
 *                   Slices (dynamo); fuse_attention's zero-mask drop
 *   gemm_as_matmul  Gemm -> MatMul/MatMulBias, flattening Reshapes dropped
 *   attention on channels  CoAtNet's q/k/v sliced from an NHWC conv's
 *                   channels read in place, its output written [B,S,H,D]
 *                   (views walk split axes; simplify_transpose's permuted rule)
 *   einsum_matmul   MaxViT's 5-D attention Einsums, a permuted operand and
 *                   result -> MatMul (+ Transposes); a broadcast batch, two
 *                   K labels and a one-operand sum not
 *   attention_fold  MaxViT's 5-D attention folded to 4-D, then one
 *                   Attention (bias per head, Y unmerged, Q read
 *                   elsewhere); a per-image bias not
 *   fold_gemm_scale Mul(MatMul[Bias](x, W, b), c) -> MatMul[Bias](x, Wc, bc)
 *                   (scalar and per-column c, either order); a runtime c
 *                   and a shared GEMM output not
 *   fuse_residual_gemm  Add(GEMM, R) -> MatMulBias(A, B, bias, R), and its
 *                   plan: a GEMM with C and the bias row (PLAN_GEMM_F_BIAS_C)
 *                   written, read back, and refused when corrupt
 * usage: test_xformer_passes WORK_DIR (plan files go there) */
#include "passes.h"
#include "ref.h"
#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "plan.h"
#define TEST_RNG_SEED 41
#include "graph_build.h"
#include "compile_model.h"
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

/* Two copies of the graph build() makes, shapes inferred: g0 stays as
 * built, g1 gets the rewrite under test. */
static void pair_new(void (*build)(Graph *), int64_t opset, Graph **g0, Graph **g1, const char *what, int variant) {
  GpucErr e = {0};
  *g0 = graph_new(opset);
  *g1 = graph_new(opset);
  build(*g0);
  build(*g1);
  CHECK(gpuc_graph_infer(*g0, &e) == 0 && gpuc_graph_infer(*g1, &e) == 0, "%s %d: bad test graph: %s", what, variant,
        e.msg);
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
    Graph *g0, *g1;
    pair_new(build_gelu, 20, &g0, &g1, "gelu", gelu_variant);
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

/* ---- fuse_rmsnorm ------------------------------------------------------ */

/* x [4,6,33] -> RMSNorm over the last axis, scale w [33] -> output:
 * 0 TorchScript's: Pow(x, 2), ReduceMean {axes [-1]}, Add(m, eps), Sqrt,
 *   Div(1, s), Mul(x, r), Mul(w, y): fused
 * 1 dynamo's (opset 20): ReduceMean axes as an input, Add(eps, m),
 *   Reciprocal, Mul(r, x), Mul(y, w): fused
 * 2 Mul(x, x) for the square, Div(x, s): fused
 * 3 the mean over axis 1: not fused
 * 4 no scale Mul (the output is y): not fused
 * 5 the Sqrt's output a second graph output: not fused
 * 6 Pow(x, 4): not fused */
static int rms_variant;
static void build_rms(Graph *g) {
  int64_t dims[3] = {4, 6, 33}, wd[1] = {33}, axes = rms_variant == 3 ? 1 : -1;
  int x = input(g, "x", 3, dims), w = constant(g, 1, wd, 9, 0.5, 1.5);
  int sq = rms_variant == 2 ? NODE(g, GPUC_OP_MUL, x, x) : NODE(g, GPUC_OP_POW, x, scalar(g, rms_variant == 6 ? 4 : 2));
  int m;
  if (rms_variant == 1) {
    m = NODE(g, GPUC_OP_REDUCEMEAN, sq, shape_const(g, 1, &axes));
  } else {
    m = NODE(g, GPUC_OP_REDUCEMEAN, sq);
    attr_ints(g, "axes", 1, &axes);
  }
  attr_i(g, "keepdims", 1);
  int a = rms_variant == 1 ? NODE(g, GPUC_OP_ADD, scalar(g, 1e-6f), m) : NODE(g, GPUC_OP_ADD, m, scalar(g, 1e-6f));
  int r = NODE(g, GPUC_OP_SQRT, a), sqrt_out = r, y;
  if (rms_variant == 1) y = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_RECIPROCAL, r), x);
  else if (rms_variant == 2) y = NODE(g, GPUC_OP_DIV, x, r);
  else y = NODE(g, GPUC_OP_MUL, x, NODE(g, GPUC_OP_DIV, scalar(g, 1.0), r));
  output(g, rms_variant == 4 ? y : rms_variant == 1 ? NODE(g, GPUC_OP_MUL, y, w) : NODE(g, GPUC_OP_MUL, w, y));
  if (rms_variant == 5) output(g, sqrt_out);
}

static void test_rmsnorm(void) {
  for (rms_variant = 0; rms_variant <= 6; rms_variant++) {
    GpucErr e = {0};
    int64_t opset = rms_variant == 1 ? 20 : 17;
    Graph *g0, *g1;
    pair_new(build_rms, opset, &g0, &g1, "rmsnorm", rms_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = rms_variant <= 2;
    int got = pass_fuse_rmsnorm(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_RMSNORMALIZATION) == want && (!want || g1->nnodes == 1),
          "rmsnorm %d: %d fused, %d nodes left (want %d fused%s)", rms_variant, got, g1->nnodes, want,
          want ? ", 1 node" : "");
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "rmsnorm %d: verify: %s", rms_variant,
          e.msg);
    if (want) {
      const Node *n = &g1->nodes[0];
      CHECK(gpuc_attr_i(n, "axis", 0) == -1 && gpuc_attr_f(n, "epsilon", 0) == 1e-6f,
            "rmsnorm %d: axis %lld epsilon %g (want -1, 1e-6)", rms_variant, (long long)gpuc_attr_i(n, "axis", 0),
            gpuc_attr_f(n, "epsilon", 0));
    }
    /* training keeps the written-out form (its backward reads the values) */
    o.training = true;
    CHECK(pass_fuse_rmsnorm(g0, &o, &e) == 0, "rmsnorm %d: fused in training", rms_variant);
    char what[32];
    snprintf(what, sizeof what, "rmsnorm %d", rms_variant);
    compare(what, g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fuse_attention: the dynamo exporter's K transpose ------------------ */

/* q [2,3,7,8], k and v [2,3,5,8]; Kt = Reshape(Transpose(Reshape(k,
 * [6,5,8]), [0,2,1]), [2,3,8,5]); Q and Kt each scaled by Mul(., 8^-1/4),
 * an additive [2,1,1,5] mask, Softmax, Where(IsNaN), MatMul by V.
 * 0: fused, one node left
 * 1: the 3-D Transpose's output is a second graph output: the chain
 *    stays and Kt is read as K given transposed (the scores' MatMul turned
 *    into Transpose(Kt)): fused, 5 nodes left */
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
    Graph *g0, *g1;
    pair_new(build_kt, 20, &g0, &g1, "attention kt", kt_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = 1;
    int got = pass_fuse_attention(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_ATTENTION) == want, "attention kt %d: %d fused, expected %d (%s)",
          kt_variant, got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "attention kt %d: verify: %s",
          kt_variant, e.msg);
    if (want) {
      const Node *n = &g1->nodes[g1->nnodes - 1];
      CHECK(g1->nnodes == (kt_variant ? 5 : 1) && fabs(gpuc_attr_f(n, "scale", 0) - 1 / sqrt(8.0)) < 1e-6,
            "attention kt %d: %d nodes, scale %g", kt_variant, g1->nnodes, gpuc_attr_f(n, "scale", 0));
    }
    compare("attention kt", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fuse_attention: Swin's per-window mask (mask_period) ---------------- */

/* 2 images x 3 windows merged window-fastest into a batch of 6: q, k, v
 * [6,2,7,16]; S = MatMul(Mul(q, 1/4), Transpose(k, [0,1,3,2])) [6,2,7,7];
 * X1 = S + bias [1,2,7,7]; R1 = Reshape(X1, [2,3,2,7,7]); X2 = R1 + W,
 * W a constant [3,1,7,7]; Reshape(X2, [6,2,7,7]); Softmax; MatMul by v.
 * 0: fused, mask_period 3, mask bias + W [3,2,7,7]
 * 1: no bias, W [1,3,1,7,7] as Add(W, R1): fused, mask W [3,1,7,7]
 * 2: W [2,3,1,7,7] differs between the images (not periodic): not fused
 * 3: W an input, not a constant: not fused
 * 4: bias [6,2,7,7], one per merged batch (does not repeat): not fused
 * 5: S = MatMul(q, Kt) * c, c [2,1,1] one scale a head (Swin V2's logit
 *    scale): fused, the Mul kept as Mul(q, c), the Attention's Q
 * 6: c [2,7,1] varies over the queries too: not fused */
static int window_variant;
static void build_window(Graph *g) {
  int64_t qd[4] = {6, 2, 7, 16}, bd[4] = {1, 2, 7, 7}, bd4[4] = {6, 2, 7, 7}, wd[4] = {3, 1, 7, 7};
  int64_t wd5[5] = {1, 3, 1, 7, 7}, wd2[5] = {2, 3, 1, 7, 7}, split[5] = {2, 3, 2, 7, 7}, back[4] = {6, 2, 7, 7};
  int64_t perm[4] = {0, 1, 3, 2};
  int q = input(g, "q", 4, qd), k = input(g, "k", 4, qd), v = input(g, "v", 4, qd);
  int64_t hd[3] = {2, 1, 1}, hd2[3] = {2, 7, 1};
  int s;
  if (window_variant >= 5)
    s = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MATMUL, q, transpose(g, k, 4, perm)),
             constant(g, 3, window_variant == 5 ? hd : hd2, 13, 0.1, 0.5));
  else
    s = NODE(g, GPUC_OP_MATMUL, NODE(g, GPUC_OP_MUL, q, scalar(g, 0.25)), transpose(g, k, 4, perm));
  if (window_variant != 1)
    s = NODE(g, GPUC_OP_ADD, s, window_variant == 4 ? constant(g, 4, bd4, 9, -2, 2) : constant(g, 4, bd, 9, -2, 2));
  int r1 = reshape(g, s, 5, split), w;
  if (window_variant == 1) w = constant(g, 5, wd5, 11, -100, 0);
  else if (window_variant == 2) w = constant(g, 5, wd2, 11, -100, 0);
  else if (window_variant == 3) w = input(g, "w", 4, wd);
  else w = constant(g, 4, wd, 11, -100, 0);
  int x2 = window_variant == 1 ? NODE(g, GPUC_OP_ADD, w, r1) : NODE(g, GPUC_OP_ADD, r1, w);
  int p = NODE(g, GPUC_OP_SOFTMAX, reshape(g, x2, 4, back));
  attr_i(g, "axis", -1);
  output(g, NODE(g, GPUC_OP_MATMUL, p, v));
}

/* the plan compiles for sm_90 (NVRTC) */
static void window_codegen(const Graph *g, bool fp16, const char *what) {
  GpucErr e = {0};
  CodegenOptions co = {.sm = 90, .level = 2, .fp16 = fp16};
  CompileStats st;
  Plan *p = NULL;
  CHECK(gpuc_codegen(g, &co, &p, &st, &e) == 0 && p, "attention window %d %s: codegen: %s", window_variant, what,
        e.msg);
  gpuc_plan_free(p);
}

static void test_attention_window(void) {
  for (window_variant = 0; window_variant <= 6; window_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_window, 17, &g0, &g1, "attention window", window_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = window_variant <= 1 || window_variant == 5;
    int got = pass_fuse_attention(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_ATTENTION) == want, "attention window %d: %d fused, expected %d (%s)",
          window_variant, got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "attention window %d: verify: %s",
          window_variant, e.msg);
    if (want) {
      const Node *n = &g1->nodes[g1->nnodes - 1];
      const Tensor *m = n->nin > 3 ? &g1->values[n->in[3]].t : NULL;
      int nodes = window_variant == 5 ? 2 : 1; /* variant 5: Mul(q, c) before the Attention, read as Q */
      CHECK(g1->nnodes == nodes && n->op == GPUC_OP_ATTENTION && gpuc_attr_i(n, "mask_period", 0) == 3 && m &&
                m->rank == 4 && m->dims[0] == 3 && m->dims[1] == (window_variant == 1 ? 1 : 2) &&
                (nodes == 1 || (g1->nodes[0].op == GPUC_OP_MUL && g1->nodes[0].out[0] == n->in[0])),
            "attention window %d: %d nodes, mask_period %lld, mask rank %d", window_variant, g1->nnodes,
            (long long)gpuc_attr_i(n, "mask_period", 0), m ? m->rank : -1);
    }
    compare("attention window", g0, g1, 1e-5);
    if (want) { /* the whole -O2 pipeline in fp16 against the fp32 graph; then sm_90 kernels (NVRTC) */
      Graph *g2 = graph_new(17);
      build_window(g2);
      o.fp16 = true;
      CHECK(gpuc_graph_infer(g2, &e) == 0 && gpuc_passes_run(g2, &o, &e) == 0 &&
                count_op(g2, GPUC_OP_ATTENTION) == 1 && count_op(g2, GPUC_OP_SOFTMAX) == 0,
            "attention window %d fp16: passes: %s", window_variant, e.msg);
      compare("attention window fp16", g0, g2, 2e-2);
      /* each tensor-core kernel: K/V resident, tiled, streaming */
      const char *kernel_env[] = {NULL, "GPUC_ATTENTION_TILED", "GPUC_ATTENTION_STREAM"};
      for (int k = 0; k < 3; k++) {
        if (kernel_env[k]) setenv(kernel_env[k], "1", 1);
        window_codegen(g2, true, kernel_env[k] ? kernel_env[k] : "fp16");
        if (kernel_env[k]) unsetenv(kernel_env[k]);
      }
      gpuc_graph_free(g2);
      g2 = graph_new(17); /* fp32: the FMA kernel */
      build_window(g2);
      o.fp16 = false;
      CHECK(gpuc_graph_infer(g2, &e) == 0 && gpuc_passes_run(g2, &o, &e) == 0, "attention window fp32: %s", e.msg);
      window_codegen(g2, false, "fp32");
      gpuc_graph_free(g2);
    }
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- roll_gather: torch.roll's Slice + Concat; identity: Pad 0, whole Slice */

static int ints1(Graph *g, int64_t v) { return shape_const(g, 1, &v); }

static int slice1(Graph *g, int x, int64_t s, int64_t e, int64_t axis, int64_t step) {
  return NODE(g, GPUC_OP_SLICE, x, ints1(g, s), ints1(g, e), ints1(g, axis), ints1(g, step));
}

/* x [2,5,6,3]; y1 = Concat(x[:, 2:], x[:, :2]) (torch.roll by -2 on
 * axis 1, the end INT64_MAX); y2 = Concat(y1[:, :, -4:], y1[:, :, :-4])
 * on axis -2 (negative bounds); Relu.
 * 0: both pairs become Gathers (3 nodes left)
 * 1: the second pair in order [:2], [2:] (a copy, not a roll): 1 Gather
 * 2: x[:, 2:] also a graph output: the first pair stays, 1 Gather */
static int roll_variant;
static void build_roll(Graph *g) {
  int64_t xd[4] = {2, 5, 6, 3};
  int x = input(g, "x", 4, xd);
  int a = slice1(g, x, 2, INT64_MAX, 1, 1), b = slice1(g, x, 0, 2, 1, 1);
  int y1 = NODE(g, GPUC_OP_CONCAT, a, b);
  attr_i(g, "axis", 1);
  int c = slice1(g, y1, -4, 6, -2, 1), d = slice1(g, y1, 0, -4, -2, 1);
  int y2 = roll_variant == 1 ? NODE(g, GPUC_OP_CONCAT, d, c) : NODE(g, GPUC_OP_CONCAT, c, d);
  attr_i(g, "axis", -2);
  output(g, NODE(g, GPUC_OP_RELU, y2));
  if (roll_variant == 2) output(g, a);
}

static void test_roll(void) {
  for (roll_variant = 0; roll_variant <= 2; roll_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(17), *g1 = graph_new(17);
    build_roll(g0);
    build_roll(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "roll %d: bad test graph: %s", roll_variant,
          e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = roll_variant == 0 ? 2 : 1;
    int got = pass_roll_gather(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_GATHER) == want && count_op(g1, GPUC_OP_CONCAT) == 2 - want,
          "roll %d: %d rewritten, expected %d (%s)", roll_variant, got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "roll %d: verify: %s", roll_variant,
          e.msg);
    compare("roll", g0, g1, 0);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* x [2,4,6,3] (after a Relu); Swin's PatchMerging: a = x[:, 0::2],
 * b = x[:, 1::2], then x0 = a[:, :, 0::2], x1 = b[:, :, 0::2],
 * x2 = a[:, :, 1::2], x3 = b[:, :, 1::2]; Concat(x0..x3, -1) [2,2,3,12]
 * 0: one Transpose between two Reshapes
 * 1: order x0, x2, x1, x3 (H offset major): also one Transpose
 * 2: order x0, x1, x3, x2 (not the digits of any axis order): stays
 * 3: a also a graph output: stays */
static int s2d_variant;
static void build_s2d(Graph *g) {
  int64_t xd[4] = {2, 4, 6, 3};
  int x = NODE(g, GPUC_OP_RELU, input(g, "x", 4, xd));
  int a = slice1(g, x, 0, INT64_MAX, 1, 2), b = slice1(g, x, 1, INT64_MAX, 1, 2);
  int x0 = slice1(g, a, 0, INT64_MAX, 2, 2), x1 = slice1(g, b, 0, INT64_MAX, 2, 2);
  int x2 = slice1(g, a, 1, INT64_MAX, 2, 2), x3 = slice1(g, b, 1, INT64_MAX, 2, 2);
  int y = s2d_variant == 1   ? NODE(g, GPUC_OP_CONCAT, x0, x2, x1, x3)
          : s2d_variant == 2 ? NODE(g, GPUC_OP_CONCAT, x0, x1, x3, x2)
                             : NODE(g, GPUC_OP_CONCAT, x0, x1, x2, x3);
  attr_i(g, "axis", -1);
  output(g, NODE(g, GPUC_OP_RELU, y));
  if (s2d_variant == 3) output(g, a);
}

static void test_strided_concat(void) {
  for (s2d_variant = 0; s2d_variant <= 3; s2d_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(17), *g1 = graph_new(17);
    build_s2d(g0);
    build_s2d(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "s2d %d: bad test graph: %s", s2d_variant,
          e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = s2d_variant <= 1;
    int got = pass_strided_concat(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_TRANSPOSE) == want && count_op(g1, GPUC_OP_SLICE) == (want ? 0 : 6),
          "s2d %d: %d rewritten, expected %d (%s)", s2d_variant, got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "s2d %d: verify: %s", s2d_variant, e.msg);
    compare("strided concat", g0, g1, 0);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* x [2,4,3] -> Pad (pads 0) -> Slice [0, INT64_MAX) on axis 1 with step
 * 1 (variant 0: both forwarded, Relu alone left) or step -1 (variant 1:
 * the Slice reverses, stays) -> Relu */
static int whole_variant;
static void build_whole(Graph *g) {
  int64_t xd[3] = {2, 4, 3}, zeros[6] = {0, 0, 0, 0, 0, 0};
  int x = input(g, "x", 3, xd);
  int p = NODE(g, GPUC_OP_PAD, x, shape_const(g, 6, zeros));
  int s = whole_variant ? slice1(g, p, -1, INT64_MIN, 1, -1) : slice1(g, p, 0, INT64_MAX, 1, 1);
  output(g, NODE(g, GPUC_OP_RELU, s));
}

static void test_whole_copies(void) {
  for (whole_variant = 0; whole_variant <= 1; whole_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_whole, 17, &g0, &g1, "whole", whole_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    CHECK(pass_identity(g1, &o, &e) >= 0 && pass_dead_code(g1, &o, &e) >= 0, "whole %d: %s", whole_variant, e.msg);
    int want = whole_variant == 0 ? 1 : 2;
    CHECK(g1->nnodes == want && count_op(g1, GPUC_OP_PAD) == 0, "whole %d: %d nodes left, expected %d",
          whole_variant, g1->nnodes, want);
    compare("whole copies", g0, g1, 0);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fuse_l2norm ------------------------------------------------------- */

/* F.normalize(x, dim=-1) [* s] -> output:
 * 0 Swin V2's q: qkv [2,5,48] -> Reshape [2,5,3,2,8] -> Transpose
 *   [2,0,3,1,4] -> Gather(1) = x [2,2,5,8]; ReduceL2 {axes [-1]}, Clip(n,
 *   1e-12), Div, Mul(y, s [2,1,1]): fused, x read as a view of qkv
 * 1 dynamo's: axes as an input, Max(eps, n), no scale: fused
 * 2 x [4,6,33] plain, Mul(s [6,1], y): fused (scalar loads: 33 is odd)
 * 3 the norm over axis 1: not fused
 * 4 Clip with an upper bound: not fused
 * 5 the norm a second graph output: not fused
 * 6 s [33] (not one value a row): the Div fused, the Mul left */
static int l2_variant;
static void build_l2(Graph *g) {
  int64_t axes = l2_variant == 3 ? 1 : -1;
  int x, s = -1;
  if (l2_variant <= 1) {
    int64_t qd[3] = {2, 5, 48}, r5[5] = {2, 5, 3, 2, 8}, perm[5] = {2, 0, 3, 1, 4}, sd[3] = {2, 1, 1};
    int64_t one = 1;
    int qkv = input(g, "qkv", 3, qd);
    int t = NODE(g, GPUC_OP_TRANSPOSE, reshape(g, qkv, 5, r5));
    attr_ints(g, "perm", 5, perm);
    int idx = gpuc_graph_add_value(g, "idx");
    GpucErr e;
    Tensor *it = gpuc_tensor_new(GPUC_DT_I64, 0, NULL, &e);
    GPUC_ASSERT(it);
    gpuc_set_i64(it, 0, one);
    g->values[idx].t = *it;
    free(it);
    g->values[idx].is_const = true;
    x = NODE(g, GPUC_OP_GATHER, t, idx);
    attr_i(g, "axis", 0);
    if (l2_variant == 0) s = constant(g, 3, sd, 5, 2.0, 9.0);
  } else {
    int64_t xd[3] = {4, 6, 33}, sd[2] = {6, 1}, s33[1] = {33};
    x = input(g, "x", 3, xd);
    s = l2_variant == 6 ? constant(g, 1, s33, 5, 0.5, 2.0) : constant(g, 2, sd, 5, 0.5, 2.0);
  }
  int n;
  if (l2_variant == 1) {
    n = NODE(g, GPUC_OP_REDUCEL2, x, shape_const(g, 1, &axes));
  } else {
    n = NODE(g, GPUC_OP_REDUCEL2, x);
    attr_ints(g, "axes", 1, &axes);
  }
  attr_i(g, "keepdims", 1);
  int c = l2_variant == 1 ? NODE(g, GPUC_OP_MAX, scalar(g, 1e-12), n)
          : l2_variant == 4 ? NODE(g, GPUC_OP_CLIP, n, scalar(g, 1e-12), scalar(g, 3.0))
                            : NODE(g, GPUC_OP_CLIP, n, scalar(g, 1e-12));
  int y = NODE(g, GPUC_OP_DIV, x, c);
  if (s >= 0) y = l2_variant == 0 ? NODE(g, GPUC_OP_MUL, y, s) : NODE(g, GPUC_OP_MUL, s, y);
  output(g, y);
  if (l2_variant == 5) output(g, n);
}

static void test_l2norm(void) {
  for (l2_variant = 0; l2_variant <= 6; l2_variant++) {
    GpucErr e = {0};
    int64_t opset = l2_variant == 1 ? 20 : 17;
    Graph *g0, *g1;
    pair_new(build_l2, opset, &g0, &g1, "l2norm", l2_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = l2_variant <= 2 || l2_variant == 6;
    int got = pass_fuse_l2norm(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_L2NORMROWS) == want && count_op(g1, GPUC_OP_REDUCEL2) == !want &&
              count_op(g1, GPUC_OP_GATHER) == 0 && count_op(g1, GPUC_OP_TRANSPOSE) == 0 &&
              count_op(g1, GPUC_OP_MUL) == (l2_variant == 6 || !want ? (l2_variant == 6 || l2_variant >= 2) : 0),
          "l2norm %d: %d fused, %d nodes left", l2_variant, got, g1->nnodes);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "l2norm %d: verify: %s", l2_variant,
          e.msg);
    for (int i = 0; i < g1->nnodes; i++) {
      const Node *nd = &g1->nodes[i];
      if (nd->op != GPUC_OP_L2NORMROWS) continue;
      const int64_t *view;
      int nv = gpuc_attr_ints(nd, "view", &view);
      /* variant 0/1: qkv itself, element (b, h=1 of part 1, n, d) at
       * 16 + 8h + 48n + 240b: view [16, 240, 8, 48, 1] */
      bool viewed = l2_variant <= 1 ? nd->in[0] == g1->inputs[0] && nv == 5 && view[0] == 16 && view[1] == 240 &&
                                          view[2] == 8 && view[3] == 48 && view[4] == 1
                                    : nd->in[0] == g1->inputs[0];
      CHECK(viewed && gpuc_attr_f(nd, "epsilon", 0) == 1e-12f && (nd->nin == 2) == (l2_variant == 0 || l2_variant == 2),
            "l2norm %d: read from value %d (view %d entries), epsilon %g, %d inputs", l2_variant, nd->in[0], nv,
            gpuc_attr_f(nd, "epsilon", 0), nd->nin);
    }
    o.training = true;
    CHECK(pass_fuse_l2norm(g0, &o, &e) == 0, "l2norm %d: fused in training", l2_variant);
    char what[32];
    snprintf(what, sizeof what, "l2norm %d", l2_variant);
    compare(what, g0, g1, 1e-5);
    if (want) { /* the -O2 pipeline in fp16 and fp32 against the fp32 graph; sm_90 kernels (NVRTC) */
      for (int half = 1; half >= 0; half--) {
        Graph *g2 = graph_new(opset);
        build_l2(g2);
        o.training = false;
        o.fp16 = half;
        CHECK(gpuc_graph_infer(g2, &e) == 0 && gpuc_passes_run(g2, &o, &e) == 0 &&
                  count_op(g2, GPUC_OP_L2NORMROWS) == 1 && count_op(g2, GPUC_OP_GATHER) == 0,
              "l2norm %d %s: passes: %s (%d L2NormRows, %d Gathers)", l2_variant, half ? "fp16" : "fp32", e.msg,
              count_op(g2, GPUC_OP_L2NORMROWS), count_op(g2, GPUC_OP_GATHER));
        snprintf(what, sizeof what, "l2norm %d %s", l2_variant, half ? "fp16" : "fp32");
        compare(what, g0, g2, half ? 2e-3 : 1e-5);
        CodegenOptions co = {.sm = 90, .level = 2, .fp16 = half};
        CompileStats st;
        Plan *p = NULL;
        CHECK(gpuc_codegen(g2, &co, &p, &st, &e) == 0 && p, "%s: codegen: %s", what, e.msg);
        gpuc_plan_free(p);
        gpuc_graph_free(g2);
      }
    }
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fold_gemm_scale ---------------------------------------------------- */

/* x [4,6,16] -> Linear (W [16,12], + b [12] for 0, 2, 3) -> Mul(., c):
 * 0 c = 0.3 (one value): folded into a MatMulBias
 * 1 no bias, Mul(c [12], y) per column: folded into a MatMul
 * 2 c a graph input: not folded
 * 3 the GEMM's output also a graph output: not folded */
static int gs_variant;
static void build_gs(Graph *g) {
  int64_t xd[3] = {4, 6, 16}, wd[2] = {16, 12}, n = 12, one = 1;
  int x = input(g, "x", 3, xd), y = NODE(g, GPUC_OP_MATMUL, x, constant(g, 2, wd, 31, -0.5, 0.5));
  if (gs_variant != 1) y = NODE(g, GPUC_OP_ADD, y, constant(g, 1, &n, 32, -0.2, 0.2));
  int c = gs_variant == 1 ? constant(g, 1, &n, 33, 0.5, 2.0) : gs_variant == 2 ? input(g, "c", 1, &one) : scalar(g, 0.3);
  output(g, gs_variant == 1 ? NODE(g, GPUC_OP_MUL, c, y) : NODE(g, GPUC_OP_MUL, y, c));
  if (gs_variant == 3) output(g, y);
}

static void test_gemm_scale(void) {
  for (gs_variant = 0; gs_variant <= 3; gs_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(17), *g1 = graph_new(17);
    build_gs(g0);
    build_gs(g1);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0 && pass_fuse_matmul_bias(g1, &o, &e) >= 0,
          "gemm scale %d: bad test graph: %s", gs_variant, e.msg);
    int want = gs_variant <= 1, got = pass_fold_gemm_scale(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_MUL) == !want && g1->nnodes == (want ? 1 : 2),
          "gemm scale %d: %d folded, %d nodes, %d Muls (want %d folded)", gs_variant, got, g1->nnodes,
          count_op(g1, GPUC_OP_MUL), want);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gemm scale %d: verify: %s", gs_variant,
          e.msg);
    o.training = true;
    CHECK(pass_fold_gemm_scale(g0, &o, &e) == 0, "gemm scale %d: folded in training", gs_variant);
    char what[32];
    snprintf(what, sizeof what, "gemm scale %d", gs_variant);
    compare(what, g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fuse_rotary: HF's rotate-half rotary embedding ---------------------- */

/* x [2,3,5,8] (B, H, S, D), cos and sin [2,1,5,8] (variant 5: [2,3,5,8]);
 * y = x * cos + Concat(Neg(x[..., 4:]), x[..., :4]) * sin
 * 0: as TorchScript writes it: fused, exact (the same f32 roundings)
 * 1: operands the other way round, the upper Slice to INT64_MAX on axis 3:
 *    fused, exact
 * 2: Concat(x[..., :4], Neg(x[..., 4:])) (not rotate_half): not fused
 * 3: Concat(Neg(x[..., :4]), x[..., 4:]) (the halves swapped): not fused
 * 4: x[..., :4] also a graph output: not fused
 * 5: cos and sin of x's full shape: fused, exact
 * 6: x = Transpose(x0 [2,5,3,8], [0,2,1,3]) (q as LLaMA's attention
 *    transposes it): fused, the Transpose read through perm, 1 node, exact
 * 7: x = Transpose(x0 [2,5,8,3], [0,3,1,2]) moving the last axis: fused,
 *    the Transpose stays (2 nodes), exact */
static int rot_variant;
static void build_rotary(Graph *g) {
  int64_t xd[4] = {2, 3, 5, 8}, cd[4] = {2, rot_variant == 5 ? 3 : 1, 5, 8};
  int64_t x6[4] = {2, 5, 3, 8}, p6[4] = {0, 2, 1, 3}, x7[4] = {2, 5, 8, 3}, p7[4] = {0, 3, 1, 2};
  int x = rot_variant == 6 ? transpose(g, input(g, "x", 4, x6), 4, p6)
        : rot_variant == 7 ? transpose(g, input(g, "x", 4, x7), 4, p7) : input(g, "x", 4, xd);
  int cs = constant(g, 4, cd, 3, -1, 1), sn = constant(g, 4, cd, 4, -1, 1);
  int lo = slice1(g, x, 0, 4, -1, 1), hi = rot_variant == 1 ? slice1(g, x, 4, INT64_MAX, 3, 1) : slice1(g, x, 4, 8, -1, 1);
  int cat;
  if (rot_variant == 2) cat = NODE(g, GPUC_OP_CONCAT, lo, NODE(g, GPUC_OP_NEG, hi));
  else if (rot_variant == 3) cat = NODE(g, GPUC_OP_CONCAT, NODE(g, GPUC_OP_NEG, lo), hi);
  else cat = NODE(g, GPUC_OP_CONCAT, NODE(g, GPUC_OP_NEG, hi), lo);
  attr_i(g, "axis", -1);
  int y = rot_variant == 1 ? NODE(g, GPUC_OP_ADD, NODE(g, GPUC_OP_MUL, sn, cat), NODE(g, GPUC_OP_MUL, cs, x))
                           : NODE(g, GPUC_OP_ADD, NODE(g, GPUC_OP_MUL, x, cs), NODE(g, GPUC_OP_MUL, cat, sn));
  output(g, y);
  if (rot_variant == 4) output(g, lo);
}

static void test_rotary(void) {
  for (rot_variant = 0; rot_variant <= 7; rot_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_rotary, 17, &g0, &g1, "rotary", rot_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = rot_variant <= 1 || rot_variant >= 5, nodes = rot_variant == 7 ? 2 : 1;
    int got = pass_fuse_rotary(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_ROTARYHALF) == want && (!want || g1->nnodes == nodes),
          "rotary %d: %d fused, %d nodes left (want %d fused, %d nodes)", rot_variant, got, g1->nnodes, want,
          want ? nodes : g0->nnodes);
    const int64_t *perm;
    CHECK(!want || (gpuc_attr_ints(&g1->nodes[g1->nnodes - 1], "perm", &perm) == 4) == (rot_variant == 6),
          "rotary %d: the Transpose %s", rot_variant, rot_variant == 6 ? "read through perm" : "left alone");
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "rotary %d: verify: %s", rot_variant,
          e.msg);
    o.training = true;
    CHECK(pass_fuse_rotary(g0, &o, &e) == 0, "rotary %d: fused in training", rot_variant);
    char what[32];
    snprintf(what, sizeof what, "rotary %d", rot_variant);
    compare(what, g0, g1, 0); /* exact: each product and the sum rounded as the ops do */
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fuse_gated_mlp: LLaMA's SwiGLU ------------------------------------- */

/* x [2,5,16]; g = x Wg, u = x Wu (Wg, Wu constant [16,24]);
 * y = Mul(Mul(g, Sigmoid(g)), u)
 * 0: fused: one MatMul [16,48] and a GatedUnit, exact
 * 1: Mul(u, Mul(Sigmoid(g), g)), the up GEMM first: fused, exact
 * 2: the up GEMM reads another input: not fused
 * 3: g also a graph output: not fused
 * 4: Tanh for Sigmoid: not fused
 * 5: Wu a graph input, not a constant: not fused */
static int gated_variant;
static void build_gated(Graph *g) {
  int64_t xd[3] = {2, 5, 16}, wd[2] = {16, 24};
  int x = input(g, "x", 3, xd), x2 = gated_variant == 2 ? input(g, "x2", 3, xd) : x;
  int wg = constant(g, 2, wd, 5, -0.5, 0.5), wu = gated_variant == 5 ? input(g, "wu", 2, wd) : constant(g, 2, wd, 6, -0.5, 0.5);
  int u = -1;
  if (gated_variant == 1) u = NODE(g, GPUC_OP_MATMUL, x2, wu);
  int gv = NODE(g, GPUC_OP_MATMUL, x, wg);
  if (gated_variant != 1) u = NODE(g, GPUC_OP_MATMUL, x2, wu);
  int sg = NODE(g, gated_variant == 4 ? GPUC_OP_TANH : GPUC_OP_SIGMOID, gv);
  int y = gated_variant == 1 ? NODE(g, GPUC_OP_MUL, u, NODE(g, GPUC_OP_MUL, sg, gv))
                             : NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, gv, sg), u);
  output(g, y);
  if (gated_variant == 3) output(g, gv);
}

static void test_gated_mlp(void) {
  for (gated_variant = 0; gated_variant <= 5; gated_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_gated, 17, &g0, &g1, "gated", gated_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = gated_variant <= 1;
    int got = pass_fuse_gated_mlp(g1, &o, &e);
    CHECK(got == want && count_op(g1, GPUC_OP_GATEDUNIT) == want && (!want || g1->nnodes == 2),
          "gated %d: %d fused, %d nodes left (want %d fused%s)", gated_variant, got, g1->nnodes, want,
          want ? ", 2 nodes" : "");
    if (want) {
      const Node *mm = &g1->nodes[0];
      const Tensor *w = &g1->values[mm->in[1]].t;
      CHECK(mm->op == GPUC_OP_MATMUL && w->rank == 2 && w->dims[0] == 16 && w->dims[1] == 48,
            "gated %d: the merged GEMM's weight is [16,48]", gated_variant);
    }
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gated %d: verify: %s", gated_variant,
          e.msg);
    o.training = true;
    CHECK(pass_fuse_gated_mlp(g0, &o, &e) == 0, "gated %d: fused in training", gated_variant);
    char what[32];
    snprintf(what, sizeof what, "gated %d", gated_variant);
    compare(what, g0, g1, 0); /* exact: the same dot products, GatedUnit rounds as the ops do */
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- attention_views: Q, K, V as views, one QKV GEMM --------------------- */

static int index_const(Graph *g, int64_t i) {
  char name[32];
  snprintf(name, sizeof name, "idx%d", g->nvalues);
  int v = gpuc_graph_add_value(g, name);
  GpucErr e;
  Tensor *t = gpuc_tensor_new(GPUC_DT_I64, 0, NULL, &e);
  GPUC_ASSERT(t);
  gpuc_set_i64(t, 0, i);
  g->values[v].t = *t;
  free(t);
  g->values[v].is_const = true;
  return v;
}

/* Split(x) along `axis` into three equal parts (opset 17: no split input) */
static void split3(Graph *g, int x, int64_t axis, int out[3]) {
  int ni = gpuc_graph_add_node(g, GPUC_OP_SPLIT, "split", 1, 3);
  GPUC_ASSERT(ni >= 0);
  g->nodes[ni].in[0] = x;
  g->nodes[ni].attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  g->nodes[ni].attrs[0] = (Attr){.name = "axis", .kind = GPUC_ATTR_INT, .i = axis};
  g->nodes[ni].nattr = 1;
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "part%d", k);
    out[k] = gpuc_graph_add_value(g, name);
    g->nodes[ni].out[k] = out[k];
    g->values[out[k]].producer = ni;
  }
}

/* softmax(Q K^T / sqrt 8 + mask?) V on q, k, v [B,H,S,8] (K already
 * transposed when kt): the MatMul/Softmax pattern fuse_attention takes */
static int attention_pattern(Graph *g, int q, int k, int v, bool kt, int mask) {
  int64_t p[4] = {0, 1, 3, 2};
  int s = NODE(g, GPUC_OP_MATMUL, q, kt ? k : transpose(g, k, 4, p));
  s = NODE(g, GPUC_OP_MUL, s, scalar(g, 1 / sqrt(8.0)));
  if (mask >= 0) s = NODE(g, GPUC_OP_ADD, s, mask);
  int sm = NODE(g, GPUC_OP_SOFTMAX, s);
  attr_i(g, "axis", -1);
  return NODE(g, GPUC_OP_MATMUL, sm, v);
}

/* B 2, S 5, H 2, D 8, E 16; x [2,5,16]:
 * 0 GPT-2: c_attn MatMulBias [2,5,48] -> Split -> Reshape [2,5,2,8] ->
 *   Transpose (K by [0,2,3,1]), heads merged by Transpose + Reshape, a
 *   [2,1,1,5] mask: one Attention reading the GEMM output three times
 * 1 BERT: three MatMulBias on x (Q, K, V), each Reshape + Transpose: the
 *   three become one GEMM [16,48], the Attention reads it
 * 2 as 1, the K projection also a graph output: Q and V merged (one
 *   GEMM [16,32]), K read from its own
 * 3 torchvision: x -> Transpose [5,2,16] -> in_proj [5,2,48] -> Reshape
 *   [5,2,3,16] -> Unsqueeze -> Transpose [3,1,2,0,4] -> Squeeze -> Gather
 *   0/1/2 -> Reshape [5,4,8] -> Transpose [1,0,2] -> Reshape [2,2,5,8];
 *   Y by Transpose [2,0,1,3] -> Reshape [5,2,16] -> out_proj -> Transpose
 *   [1,0,2] -> residual Add of x: no copies left, in_proj reads x, the
 *   Attention writes Y [B,S,H,D] and the Add follows out_proj directly
 * 5 cross-attention: Q from x, K and V from mem [2,7,16]: K and V merged
 *   (one GEMM [16,32] on mem), Q its own
 * 6 as 1 with K a MatMul without bias: one GEMM, zeros in its bias
 * 4 as 0 with V split along S instead (Split on axis 1 of [2,15,16] made
 *   by a Reshape of the GEMM output [2,5,48]): K, Q views; V's still a
 *   view where the axes fit, the result the same
 * 7 timm, dynamo exporter: qkv [2,5,48] -> Reshape [2,5,3,2,8] ->
 *   Transpose [2,0,3,1,4] -> Slice [i:i+1] on axis 0 -> Squeeze: no
 *   copies, the Attention reads the GEMM output three times
 * 8 as 7 with the Slices' bounds from the back (-3:-2, -2:-1, -1:max) and
 *   axes -5: the same
 * 9 as 7 with V = Slice(step 2) of a [2,2,10,8] head split of its own GEMM
 *   [2,10,16] (x repeated along S): that Slice is no window, so V's walk
 *   stops there and the Slice (and the Transpose it reads) stay copies
 * 10 as 1 with a constant mask of zeros [2,1,5,5]: one GEMM, and the
 *   Attention reads no mask */
static int views_variant;
static void build_views(Graph *g) {
  int64_t xd[3] = {2, 5, 16}, w48[2] = {16, 48}, b48[1] = {48}, w16[2] = {16, 16}, b16[1] = {16};
  int64_t heads[4] = {2, 5, 2, 8}, flat[3] = {2, 5, 16}, md[4] = {2, 1, 1, 5};
  int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
  int x = input(g, "x", 3, xd), q, k, v, y;
  if (views_variant == 0 || views_variant == 4) {
    int qkv = NODE(g, GPUC_OP_MATMULBIAS, x, constant(g, 2, w48, 21, -0.5, 0.5), constant(g, 1, b48, 22, -1, 1));
    int part[3];
    if (views_variant == 4) {
      int64_t s15[3] = {2, 15, 16};
      split3(g, reshape(g, qkv, 3, s15), 1, part);
    } else {
      split3(g, qkv, 2, part);
    }
    q = transpose(g, reshape(g, part[0], 4, heads), 4, p0213);
    k = transpose(g, reshape(g, part[1], 4, heads), 4, p0231);
    v = transpose(g, reshape(g, part[2], 4, heads), 4, p0213);
    int mask = constant(g, 4, md, 23, -3, 0);
    y = attention_pattern(g, q, k, v, true, mask);
    y = reshape(g, transpose(g, y, 4, p0213), 3, flat);
  } else if (views_variant >= 7 && views_variant <= 9) {
    int qkv = NODE(g, GPUC_OP_MATMULBIAS, x, constant(g, 2, w48, 21, -0.5, 0.5), constant(g, 1, b48, 22, -1, 1));
    int64_t b5[5] = {2, 5, 3, 2, 8}, p20314[5] = {2, 0, 3, 1, 4}, ax[1] = {views_variant == 8 ? -5 : 0};
    int t = transpose(g, reshape(g, qkv, 5, b5), 5, p20314), part[3];
    for (int i = 0; i < 3; i++) {
      int64_t st[1] = {views_variant == 8 ? i - 3 : i}, en[1] = {views_variant == 8 && i == 2 ? INT64_MAX : st[0] + 1};
      int sl = NODE(g, GPUC_OP_SLICE, t, shape_const(g, 1, st), shape_const(g, 1, en), shape_const(g, 1, ax));
      int64_t a0[1] = {0};
      part[i] = NODE(g, GPUC_OP_SQUEEZE, sl, shape_const(g, 1, a0));
    }
    if (views_variant == 9) { /* V: every other row of a [2,10,16] projection of x repeated */
      int64_t h10[4] = {2, 10, 2, 8}, two[1] = {2}, big[1] = {INT64_MAX}, zero[1] = {0}, s2[1] = {2};
      int x2 = NODE(g, GPUC_OP_CONCAT, x, x);
      attr_i(g, "axis", 1);
      int pv = NODE(g, GPUC_OP_MATMULBIAS, x2, constant(g, 2, w16, 60, -0.5, 0.5), constant(g, 1, b16, 61, -1, 1));
      int hv = transpose(g, reshape(g, pv, 4, h10), 4, p0213);
      part[2] = NODE(g, GPUC_OP_SLICE, hv, shape_const(g, 1, zero), shape_const(g, 1, big), shape_const(g, 1, s2),
                     shape_const(g, 1, two));
    }
    y = attention_pattern(g, part[0], part[1], part[2], false, -1);
    y = reshape(g, transpose(g, y, 4, p0213), 3, flat);
  } else if (views_variant <= 2 || (views_variant >= 5 && views_variant != 9)) {
    int64_t md7[3] = {2, 7, 16}, kv7[4] = {2, 7, 2, 8};
    int mem = views_variant == 5 ? input(g, "mem", 3, md7) : x;
    int proj[3];
    for (int i = 0; i < 3; i++) {
      if (views_variant == 6 && i == 1) /* K without a bias (Whisper's k_proj) */
        proj[i] = NODE(g, GPUC_OP_MATMUL, x, constant(g, 2, w16, 30 + i, -0.5, 0.5));
      else
        proj[i] = NODE(g, GPUC_OP_MATMULBIAS, i ? mem : x, constant(g, 2, w16, 30 + i, -0.5, 0.5),
                       constant(g, 1, b16, 40 + i, -1, 1));
      if (views_variant == 5 && i) proj[i] = reshape(g, proj[i], 4, kv7);
      if (views_variant == 2 && i == 1) output(g, proj[i]);
    }
    for (int i = 0; i < 3; i++)
      proj[i] = transpose(g, views_variant == 5 && i ? proj[i] : reshape(g, proj[i], 4, heads), 4, p0213);
    int64_t zd[4] = {2, 1, 5, 5};
    int zmask = views_variant == 10 ? constant(g, 4, zd, 70, 0, 0) : -1;
    y = attention_pattern(g, proj[0], proj[1], proj[2], false, zmask);
    y = reshape(g, transpose(g, y, 4, p0213), 3, flat);
  } else {
    int64_t p102[3] = {1, 0, 2}, sb3e[4] = {5, 2, 3, 16}, p31204[5] = {3, 1, 2, 0, 4}, sbh[3] = {5, 4, 8};
    int64_t bhsd[4] = {2, 2, 5, 8}, p2013[4] = {2, 0, 1, 3}, sbe[3] = {5, 2, 16}, ax0[1] = {0}, ax3[1] = {3};
    int xt = transpose(g, x, 3, p102);
    int proj = NODE(g, GPUC_OP_MATMULBIAS, xt, constant(g, 2, w48, 50, -0.5, 0.5), constant(g, 1, b48, 51, -1, 1));
    int u = NODE(g, GPUC_OP_UNSQUEEZE, reshape(g, proj, 4, sb3e), shape_const(g, 1, ax0));
    int sq = NODE(g, GPUC_OP_SQUEEZE, transpose(g, u, 5, p31204), shape_const(g, 1, ax3));
    int part[3];
    for (int i = 0; i < 3; i++) {
      int gi = NODE(g, GPUC_OP_GATHER, sq, index_const(g, i));
      attr_i(g, "axis", 0);
      part[i] = reshape(g, transpose(g, reshape(g, gi, 3, sbh), 3, p102), 4, bhsd);
    }
    y = attention_pattern(g, part[0], part[1], part[2], false, -1);
    y = reshape(g, transpose(g, y, 4, p2013), 3, sbe);
    /* out_proj, back to [B,S,E], the residual */
    y = NODE(g, GPUC_OP_MATMULBIAS, y, constant(g, 2, w16, 52, -0.5, 0.5), constant(g, 1, b16, 53, -1, 1));
    y = NODE(g, GPUC_OP_ADD, transpose(g, y, 3, p102), x);
  }
  output(g, y);
}

static void test_attention_views(void) {
  for (views_variant = 0; views_variant <= 10; views_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_views, 17, &g0, &g1, "views", views_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    CHECK(pass_fuse_attention(g1, &o, &e) == 1, "views %d: attention not fused (%s)", views_variant, e.msg);
    int got = pass_attention_views(g1, &o, &e);
    CHECK(got > 0, "views %d: %d changes (%s)", views_variant, got, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "views %d: verify: %s", views_variant,
          e.msg);
    int gemms = count_op(g1, GPUC_OP_MATMULBIAS), copies = count_op(g1, GPUC_OP_SPLIT) +
                count_op(g1, GPUC_OP_TRANSPOSE) + count_op(g1, GPUC_OP_GATHER) + count_op(g1, GPUC_OP_SLICE);
    const Node *at = NULL;
    for (int i = 0; i < g1->nnodes; i++)
      if (g1->nodes[i].op == GPUC_OP_ATTENTION) at = &g1->nodes[i];
    CHECK(at != NULL, "views %d: no Attention", views_variant);
    if (at) {
      bool one_input = at->in[0] == at->in[1] && at->in[1] == at->in[2];
      int want_gemms = views_variant == 2 || views_variant == 3 || views_variant == 5 || views_variant == 9 ? 2 : 1;
      int want_copies = views_variant == 9 ? 2 : 0; /* the step-2 Slice and the Transpose it reads */
      CHECK(count_op(g1, GPUC_OP_SLICE) == (views_variant == 9), "views %d: %d Slices left", views_variant,
            count_op(g1, GPUC_OP_SLICE));
      if (views_variant == 2) one_input = at->in[0] == at->in[2] && at->in[1] != at->in[0];
      if (views_variant == 9) one_input = at->in[0] == at->in[1] && at->in[2] != at->in[0];
      if (views_variant == 10) CHECK(at->nin == 3, "views 10: the zero mask is still read (%d inputs)", at->nin);
      if (views_variant == 5) one_input = at->in[1] == at->in[2] && at->in[1] != at->in[0];
      CHECK(gemms == want_gemms && copies == want_copies && one_input,
            "views %d: %d GEMMs, %d copies (want %d, %d), inputs %d %d %d", views_variant, gemms, copies,
            want_gemms, want_copies, at->in[0], at->in[1], at->in[2]);
    }
    if (views_variant == 3) { /* the residual Add reads out_proj's output */
      const Node *last = &g1->nodes[g1->nnodes - 1], *gm = &g1->nodes[g1->nnodes - 2];
      CHECK(last->op == GPUC_OP_ADD && gm->op == GPUC_OP_MATMULBIAS && last->in[0] == gm->out[0],
            "views 3: the residual Add does not follow out_proj (%s after %s)", gpuc_op_name(last),
            gpuc_op_name(gm));
    }
    compare("attention views", g0, g1, 1e-5);
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
 *    that Reshape stays
 * 4: as 0 on a 2-D x without the Reshapes: stays a Gemm
 * 5: as 0 on x [2,5,4,4] (heads merged by the inner Reshape): MatMulBias,
 *    the inner Reshape kept, now giving [2,5,16] */
static int gemm_variant;
static void build_gemm(Graph *g) {
  int64_t xd[3] = {2, 5, 16}, flat[2] = {10, 16}, back[3] = {2, 5, 24}, wt[2] = {24, 16}, w[2] = {16, 24};
  int64_t nb[1] = {24};
  int64_t heads[4] = {2, 5, 4, 4};
  int x = gemm_variant == 4 ? input(g, "x", 2, flat) : gemm_variant == 5 ? input(g, "x", 4, heads) : input(g, "x", 3, xd);
  int a = gemm_variant == 4 ? x : reshape(g, x, 2, flat), y;
  if (gemm_variant == 1) {
    y = NODE(g, GPUC_OP_GEMM, a, constant(g, 2, w, 3, -0.5, 0.5));
  } else {
    y = NODE(g, GPUC_OP_GEMM, a, constant(g, 2, wt, 3, -0.5, 0.5), constant(g, 1, nb, 4, -1, 1));
    attr_i(g, "transB", 1);
    if (gemm_variant == 2) attr_f(g, "alpha", 2.0f);
  }
  output(g, NODE(g, GPUC_OP_RELU, gemm_variant == 4 ? y : reshape(g, y, 3, back)));
  if (gemm_variant == 3) output(g, a);
}

static void test_gemm_as_matmul(void) {
  for (gemm_variant = 0; gemm_variant <= 5; gemm_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_gemm, 17, &g0, &g1, "gemm", gemm_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int got = pass_gemm_as_matmul(g1, &o, &e);
    bool stays = gemm_variant == 2 || gemm_variant == 4;
    CHECK(got == !stays, "gemm %d: %d changes (%s)", gemm_variant, got, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gemm %d: verify: %s", gemm_variant,
          e.msg);
    GpucOp want = gemm_variant == 1 ? GPUC_OP_MATMUL : stays ? GPUC_OP_GEMM : GPUC_OP_MATMULBIAS;
    int want_nodes = gemm_variant == 2 ? 4 : gemm_variant == 3 || gemm_variant == 5 ? 3 : 2;
    CHECK(count_op(g1, want) == 1 && g1->nnodes == want_nodes && count_op(g1, GPUC_OP_RESHAPE) == (gemm_variant == 4 ? 0 : want_nodes - 2),
          "gemm %d: %d nodes, %d of op %d", gemm_variant, g1->nnodes, count_op(g1, want), (int)want);
    compare("gemm_as_matmul", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- attention on a conv's channels (CoAtNet) ------------------------- */

/* x [2,3,4,48] NHWC (a 1x1 qkv conv's output) -> Transpose [0,3,1,2] ->
 * Reshape [2,2,24,12] (2 heads of q|k|v x 8, 12 pixels) -> Slices of 8 on
 * axis 2; q, v by Transpose [0,1,3,2], k read as it is ([B,H,D,S]); both
 * scaled by 8^-1/4; softmax(q k + bias [1,2,12,12]) v -> Transpose
 * [0,1,3,2] -> Reshape [2,16,3,4] -> Transpose [0,2,3,1] -> [2,3,4,16].
 * fuse_attention, attention_views, simplify_transpose and attention_views
 * again: one Attention reading x three times through views, writing
 * [B,S,H,D] (y_perm), then a Reshape; no Transpose, Slice or MatMul left.
 * Variant 1: the output chain's middle value (the Reshape's) is a second
 * graph output: the output Transposes stay, the inputs' views as before. */
static int chan_variant;
static void build_chan(Graph *g) {
  int64_t xd[4] = {2, 3, 4, 48}, heads[4] = {2, 2, 24, 12}, md[4] = {1, 2, 12, 12}, nchw[4] = {2, 16, 3, 4};
  int64_t to_nchw[4] = {0, 3, 1, 2}, swap[4] = {0, 1, 3, 2}, to_nhwc[4] = {0, 2, 3, 1};
  int x = input(g, "x", 4, xd);
  int r = reshape(g, transpose(g, x, 4, to_nchw), 4, heads);
  int q = transpose(g, slice1(g, r, 0, 8, 2, 1), 4, swap), k = slice1(g, r, 8, 16, 2, 1);
  int v = transpose(g, slice1(g, r, 16, 24, 2, 1), 4, swap);
  double c = pow(8.0, -0.25);
  int sc = NODE(g, GPUC_OP_MATMUL, NODE(g, GPUC_OP_MUL, q, scalar(g, c)), NODE(g, GPUC_OP_MUL, k, scalar(g, c)));
  int p = NODE(g, GPUC_OP_SOFTMAX, NODE(g, GPUC_OP_ADD, sc, constant(g, 4, md, 9, -1, 1)));
  attr_i(g, "axis", -1);
  int y = reshape(g, transpose(g, NODE(g, GPUC_OP_MATMUL, p, v), 4, swap), 4, nchw);
  output(g, transpose(g, y, 4, to_nhwc));
  if (chan_variant == 1) output(g, y);
}

static void test_attention_channels(void) {
  for (chan_variant = 0; chan_variant <= 1; chan_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_chan, 17, &g0, &g1, "channels", chan_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    CHECK(pass_fuse_attention(g1, &o, &e) == 1, "channels %d: attention not fused (%s)", chan_variant, e.msg);
    CHECK(pass_attention_views(g1, &o, &e) > 0, "channels %d: no views (%s)", chan_variant, e.msg);
    CHECK(pass_simplify_transpose(g1, &o, &e) >= 0 && pass_attention_views(g1, &o, &e) >= 0, "channels %d: %s",
          chan_variant, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "channels %d: verify: %s", chan_variant,
          e.msg);
    const Node *at = NULL;
    for (int i = 0; i < g1->nnodes; i++)
      if (g1->nodes[i].op == GPUC_OP_ATTENTION) at = &g1->nodes[i];
    int x = g1->inputs[0];
    CHECK(at && at->in[0] == x && at->in[1] == x && at->in[2] == x, "channels %d: Q, K, V not views of x",
          chan_variant);
    int want_t = chan_variant ? 2 : 0;
    CHECK(count_op(g1, GPUC_OP_TRANSPOSE) == want_t && count_op(g1, GPUC_OP_SLICE) == 0 &&
              count_op(g1, GPUC_OP_MATMUL) == 0,
          "channels %d: %d Transposes (want %d), %d Slices, %d MatMuls", chan_variant, count_op(g1, GPUC_OP_TRANSPOSE),
          want_t, count_op(g1, GPUC_OP_SLICE), count_op(g1, GPUC_OP_MATMUL));
    const int64_t *yp;
    if (at && !chan_variant)
      CHECK(gpuc_attr_ints(at, "y_perm", &yp) == 4 && yp[1] == 2 && yp[2] == 1, "channels 0: Y not written [B,S,H,D]");
    compare("attention channels", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- einsum_matmul ----------------------------------------------------- */

/* Einsum(A, B) -> output, f32:
 * 0 "bghid,bghjd->bghij" A [2,3,2,5,4], B [2,3,2,6,4] (MaxViT's scores): MatMul + B's Transpose
 * 1 "bghij,bghjd->bghid" A [2,3,2,5,6], B [2,3,2,6,4] (MaxViT's P V): a MatMul alone
 * 2 "kbi,jkb->jbi" A [4,2,5], B [6,4,2]: both operands and the result transposed
 * 3 "bij,bjk->bik" A [1,5,4], B [2,4,6]: b broadcasts: not rewritten
 * 4 "bij,bjk->ik" A [2,5,4], B [2,4,6]: two summed labels: not rewritten
 * 5 "bij,bjk->bk" A [2,5,4], B [2,4,6]: i summed over A alone: not rewritten */
static int einsum_variant;
static void build_einsum(Graph *g) {
  static const char *eq[6] = {"bghid,bghjd->bghij", "bghij,bghjd->bghid", "kbi,jkb->jbi", "bij,bjk->bik",
                              "bij,bjk->ik", "bij,bjk->bk"};
  static const int64_t ad[6][5] = {{2, 3, 2, 5, 4}, {2, 3, 2, 5, 6}, {4, 2, 5}, {1, 5, 4}, {2, 5, 4}, {2, 5, 4}};
  static const int64_t bd[6][5] = {{2, 3, 2, 6, 4}, {2, 3, 2, 6, 4}, {6, 4, 2}, {2, 4, 6}, {2, 4, 6}, {2, 4, 6}};
  int r = einsum_variant <= 1 ? 5 : 3;
  int a = input(g, "a", r, ad[einsum_variant]), b = input(g, "b", r, bd[einsum_variant]);
  output(g, NODE(g, GPUC_OP_EINSUM, a, b));
  attr_s(g, "equation", eq[einsum_variant]);
}

static void test_einsum_matmul(void) {
  for (einsum_variant = 0; einsum_variant <= 5; einsum_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_einsum, 17, &g0, &g1, "einsum", einsum_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int got = pass_einsum_matmul(g1, &o, &e);
    bool stays = einsum_variant >= 3;
    CHECK(got == !stays, "einsum %d: %d changes (%s)", einsum_variant, got, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "einsum %d: verify: %s", einsum_variant,
          e.msg);
    static const int transposes[3] = {1, 0, 3};
    if (!stays)
      CHECK(count_op(g1, GPUC_OP_MATMUL) == 1 && count_op(g1, GPUC_OP_EINSUM) == 0 &&
                count_op(g1, GPUC_OP_TRANSPOSE) == transposes[einsum_variant],
            "einsum %d: %d MatMuls, %d Transposes (want 1, %d)", einsum_variant, count_op(g1, GPUC_OP_MATMUL),
            count_op(g1, GPUC_OP_TRANSPOSE), transposes[einsum_variant]);
    else
      CHECK(count_op(g1, GPUC_OP_EINSUM) == 1 && g1->nnodes == 1, "einsum %d: rewritten", einsum_variant);
    compare("einsum_matmul", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- attention_fold ---------------------------------------------------- */

/* MaxViT's 5-D attention, A 2 images, B 3 windows, S 5, H 2, D 4: qx, kx,
 * vx [2,3,5,2,4] head-split by Transpose [0,1,3,2,4] (K scaled first,
 * then Transpose [0,1,3,4,2]); scores + bias; Softmax; P V; heads merged
 * by Transpose [0,1,3,2,4] + Reshape [2,3,5,8]:
 * 0 bias const [2,5,5]: folded, then one Attention, no Transposes
 *   (the head splits and merge read in place)
 * 1 bias [1,1,2,5,5], Y a graph output itself (no merge): folded by
 *   Reshapes, one Attention
 * 2 bias [2,1,2,5,5] (per image, not per window): left as it is
 * 3 as 0 with Q's head split also a graph output: Q folded by a Reshape
 *   after its Transpose, one Attention */
static int fold_variant;
static void build_fold(Graph *g) {
  static const int64_t xd[5] = {2, 3, 5, 2, 4}, p_split[5] = {0, 1, 3, 2, 4}, p_kt[5] = {0, 1, 3, 4, 2};
  static const int64_t bias_d[4][5] = {{2, 5, 5}, {1, 1, 2, 5, 5}, {2, 1, 2, 5, 5}, {2, 5, 5}};
  static const int bias_r[4] = {3, 5, 5, 3};
  int qx = input(g, "qx", 5, xd), kx = input(g, "kx", 5, xd), vx = input(g, "vx", 5, xd);
  int q = transpose(g, qx, 5, p_split), v = transpose(g, vx, 5, p_split);
  int kt = transpose(g, NODE(g, GPUC_OP_MUL, kx, scalar(g, 0.5)), 5, p_kt);
  int bias = constant(g, bias_r[fold_variant], bias_d[fold_variant], 77, -1, 1);
  int sm = NODE(g, GPUC_OP_SOFTMAX, NODE(g, GPUC_OP_ADD, NODE(g, GPUC_OP_MATMUL, q, kt), bias));
  attr_i(g, "axis", -1);
  int y = NODE(g, GPUC_OP_MATMUL, sm, v);
  if (fold_variant == 1) {
    output(g, y);
    return;
  }
  static const int64_t od[4] = {2, 3, 5, 8};
  output(g, reshape(g, transpose(g, y, 5, p_split), 4, od));
  if (fold_variant == 3) output(g, q);
}

static void test_attention_fold(void) {
  for (fold_variant = 0; fold_variant <= 3; fold_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_fold, 17, &g0, &g1, "fold", fold_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int got = pass_attention_fold(g1, &o, &e);
    bool stays = fold_variant == 2;
    CHECK(got == !stays, "fold %d: %d changes (%s)", fold_variant, got, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "fold %d: verify: %s", fold_variant,
          e.msg);
    compare("attention_fold", g0, g1, 1e-5);
    int fa = pass_fuse_attention(g1, &o, &e);
    CHECK(fa == !stays && count_op(g1, GPUC_OP_ATTENTION) == !stays && count_op(g1, GPUC_OP_SOFTMAX) == stays,
          "fold %d: fuse_attention %d: %d Attention, %d Softmax", fold_variant, fa, count_op(g1, GPUC_OP_ATTENTION),
          count_op(g1, GPUC_OP_SOFTMAX));
    if (fold_variant == 0)
      CHECK(count_op(g1, GPUC_OP_TRANSPOSE) == 0, "fold 0: %d Transposes left (head splits and merge read in place)",
            count_op(g1, GPUC_OP_TRANSPOSE));
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "fold %d: verify after fuse: %s",
          fold_variant, e.msg);
    compare("attention_fold + fuse_attention", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- fuse_residual_gemm ------------------------------------------------ */

/* x [2,5,16], r [2,5,24]; y = MatMulBias(x, W [16,24], b [24]); s = Add(y, r)
 * (or Add(r, y)); outputs s and Relu(s) (the sum read twice, as pre-LN
 * models read it):
 * 0: fused, MatMulBias(x, W, b, r), the Relu
 * 1: y = MatMul(x, W) without bias, Add(r, y): fused with a zero bias
 * 2: MatMulBias with activation 1 (Relu): not fused
 * 3: r is [24] (broadcast): not fused
 * 4: y is a graph output too: not fused */
static int res_variant;
static void build_res(Graph *g) {
  int64_t xd[3] = {2, 5, 16}, rd[3] = {2, 5, 24}, wd[2] = {16, 24}, bd[1] = {24};
  int x = input(g, "x", 3, xd), r = res_variant == 3 ? input(g, "r", 1, bd) : input(g, "r", 3, rd);
  int w = constant(g, 2, wd, 11, -0.5, 0.5), y;
  if (res_variant == 1) {
    y = NODE(g, GPUC_OP_MATMUL, x, w);
  } else {
    y = NODE(g, GPUC_OP_MATMULBIAS, x, w, constant(g, 1, bd, 12, -1, 1));
    if (res_variant == 2) attr_i(g, "activation", 1);
  }
  int sum = res_variant == 1 ? NODE(g, GPUC_OP_ADD, r, y) : NODE(g, GPUC_OP_ADD, y, r);
  output(g, sum);
  output(g, NODE(g, GPUC_OP_RELU, sum));
  if (res_variant == 4) output(g, y);
}

static void test_residual(void) {
  for (res_variant = 0; res_variant <= 4; res_variant++) {
    GpucErr e = {0};
    Graph *g0, *g1;
    pair_new(build_res, 17, &g0, &g1, "residual", res_variant);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    int want = res_variant <= 1;
    int got = pass_fuse_residual_gemm(g1, &o, &e);
    CHECK(got == want, "residual %d: %d fused, expected %d (%s)", res_variant, got, want, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "residual %d: verify: %s", res_variant,
          e.msg);
    if (want) {
      const Node *n = &g1->nodes[0];
      CHECK(g1->nnodes == 2 && n->op == GPUC_OP_MATMULBIAS && n->nin == 4 && n->in[3] == g1->inputs[1],
            "residual %d: %d nodes, first %s with %d inputs", res_variant, g1->nnodes, gpuc_op_name(n), n->nin);
    }
    compare("residual", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* variant 0 in fp16, compiled for sm_90: one GEMM with C = r (ldc N,
 * beta 1), the bias row in `reserved` and PLAN_GEMM_F_BIAS_C; the plan
 * round-trips, and a plan whose bias index or C does not fit is refused. */
static void test_residual_plan(const char *dir) {
  GpucErr e = {0};
  res_variant = 0;
  Graph *g = graph_new(17);
  build_res(g);
  CHECK(gpuc_graph_infer(g, &e) == 0, "residual plan: bad test graph: %s", e.msg);
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  po.fp16 = true;
  CHECK(gpuc_passes_run(g, &po, &e) == 0, "residual plan: passes: %s", e.msg);
  CodegenOptions co = {.sm = 90, .level = 2, .fp16 = true};
  CompileStats st;
  Plan *p = NULL;
  CHECK(gpuc_codegen(g, &co, &p, &st, &e) == 0 && p, "residual plan: codegen: %s", e.msg);
  gpuc_graph_free(g);
  if (!p) return;
  CHECK(p->ngemms == 1, "residual plan: %u GEMMs", p->ngemms);
  const PlanGemm *gm = &p->gemms[0];
  CHECK((gm->flags & PLAN_GEMM_F_BIAS_C) && gm->c != UINT32_MAX && gm->ldc == 24 && gm->beta == 1.0f &&
            gm->m == 10 && gm->n == 24 && gm->k == 16 && p->tensors[gm->reserved].bytes == 24 * 2 &&
            GPUC_GEMM_EPI(gm->trans_a) == 0,
        "residual plan: GEMM flags %#x c %u ldc %lld beta %g", gm->flags, gm->c, (long long)gm->ldc, gm->beta);
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s/residual_a.gpuc", dir);
  snprintf(b, sizeof b, "%s/residual_b.gpuc", dir);
  Plan *q = plan_round_trip(p, a, b, "residual");
  gpuc_plan_free(q);
  for (int bad = 0; bad < 3; bad++) {
    PlanGemm keep = p->gemms[0];
    if (bad == 0) p->gemms[0].reserved = p->ntensors + 5;         /* no such tensor */
    if (bad == 1) p->gemms[0].ldc = 20;                           /* C rows shorter than N */
    if (bad == 2) p->gemms[0].trans_a = GPUC_GEMM_TRANS_A_PACK(0, GPUC_GEMM_EPI_RELU); /* act after C */
    CHECK(gpuc_plan_write(p, a, &e) == 0, "write: %s", e.msg);
    GpucErr e2 = {0};
    Plan *r = gpuc_plan_read(a, &e2);
    CHECK(!r && strstr(e2.msg, "corrupt plan: gemm"), "residual plan corruption %d refused: %s", bad,
          r ? "read" : e2.msg);
    gpuc_plan_free(r);
    p->gemms[0] = keep;
  }
  gpuc_plan_free(p);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_xformer_passes WORK_DIR\n"); return 2; }
  test_gelu();
  test_rmsnorm();
  test_l2norm();
  test_gemm_scale();
  test_attention_kt();
  test_attention_window();
  test_roll();
  test_rotary();
  test_gated_mlp();
  test_strided_concat();
  test_whole_copies();
  test_attention_views();
  test_gemm_as_matmul();
  test_einsum_matmul();
  test_attention_fold();
  test_attention_channels();
  test_residual();
  test_residual_plan(argv[1]);
  return check_summary();
}
