/* Long-sequence attention, on graphs built here:
 *   sizes     an intermediate over the one-tensor cap (the [B,H,S,S]
 *             scores of Whisper's encoder at batch 32) passes inference
 *             and is refused after the passes only if no fusion removed
 *             it; a graph output over the cap is refused at inference
 *   gqa_causal pass_attention_gqa_causal after pass_fuse_attention on small
 *             graphs, against the unfused graph on the reference (f32:
 *             |a-b| <= 1e-5 + 1e-5|b|): repeat_kv read as K/V with fewer
 *             heads, a constant causal mask and transformers' causal +
 *             padding Where(And(C, P), 0, -inf) as attribute causal, and
 *             look-alikes left alone
 * usage: test_longattn [MODEL.onnx [NAME=DIMS]... [+causal=N] [+gqa=N]]: with
 *   a model, its -O2 graph (with the rewrites) against the -O1 one on the
 *   reference, seeded inputs (ids below 100, masks of ones): rel L2 <= 1e-5,
 *   and N Attention nodes causal / with grouped-query heads */
#include "passes.h"
#include "ref.h"
#include "check.h"
#define TEST_RNG_SEED 43
#include "graph_build.h"
#include "frontend.h"
#include "infer_linalg.h"
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

/* ---- sizes ------------------------------------------------------------- */

/* q, k, v [32,8,1500,64] (Whisper-base's encoder at batch 32): S =
 * MatMul(q, Transpose(k)) * 0.125 is [32,8,1500,1500] f32, 2.3 GB;
 * softmax, MatMul by v. scores_out: S is a graph output too. */
static Graph *build_big(bool scores_out) {
  Graph *g = graph_new(17);
  int64_t d[4] = {32, 8, 1500, 64}, perm[4] = {0, 1, 3, 2};
  int q = input(g, "q", 4, d), k = input(g, "k", 4, d), v = input(g, "v", 4, d);
  int s = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MATMUL, q, transpose(g, k, 4, perm)), scalar(g, 0.125));
  int p = NODE(g, GPUC_OP_SOFTMAX, s);
  attr_i(g, "axis", -1);
  output(g, NODE(g, GPUC_OP_MATMUL, p, v));
  if (scores_out) output(g, s);
  return g;
}

static void test_sizes(void) {
  GpucErr e = {0};
  Graph *g = build_big(false);
  CHECK(gpuc_graph_infer(g, &e) == 0, "sizes: an intermediate over the cap passes inference: %s", e.msg);
  e.msg[0] = 0;
  CHECK(gpuc_graph_check_sizes(g, &e) == -1 && strstr(e.msg, "node 'n1' (MatMul): output 0: shape 32x8x1500x1500") &&
            strstr(e.msg, "limit for one tensor"),
        "sizes: the unfused scores are refused, naming the MatMul: %s", e.msg);
  PassOptions o;
  gpuc_pass_options_default(&o, 1);
  e.msg[0] = 0;
  CHECK(gpuc_passes_run(g, &o, &e) == -1 && strstr(e.msg, "(MatMul): output 0"), "sizes: -O1 refuses: %s", e.msg);
  gpuc_graph_free(g);

  g = build_big(false);
  CHECK(gpuc_graph_infer(g, &e) == 0, "sizes: infer: %s", e.msg);
  gpuc_pass_options_default(&o, 2);
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "sizes: -O2 fuses, nothing over the cap is left: %s", e.msg);
  CHECK(count_op(g, GPUC_OP_ATTENTION) == 1 && g->nnodes == 1, "sizes: %d nodes, %d Attention", g->nnodes,
        count_op(g, GPUC_OP_ATTENTION));
  gpuc_graph_free(g);

  g = build_big(true);
  e.msg[0] = 0;
  CHECK(gpuc_graph_infer(g, &e) == -1 && strstr(e.msg, "limit for one tensor"),
        "sizes: a graph output over the cap is refused at inference: %s", e.msg);
  gpuc_graph_free(g);
}

/* ---- gqa_causal --------------------------------------------------------- */

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

static int reshape_(Graph *g, int x, const int64_t dims[4]) {
  return NODE(g, GPUC_OP_RESHAPE, x, shape_const(g, 4, dims));
}

/* [1,1,S,S] constant: bool (j <= i), or f32 0 / fill (j <= i / above);
 * flip: one entry below the diagonal wrong */
static int causal_const(Graph *g, int64_t S, bool boolean, double fill, bool flip) {
  char name[32];
  snprintf(name, sizeof name, "causal%d", g->nvalues);
  int v = gpuc_graph_add_value(g, name);
  GpucErr e;
  int64_t d[4] = {1, 1, S, S};
  Tensor *t = gpuc_tensor_new(boolean ? GPUC_DT_BOOL : GPUC_DT_F32, 4, d, &e);
  GPUC_ASSERT(t);
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) {
      bool keep = (j <= i) != (flip && i == S - 1 && j == 1);
      gpuc_set_f64(t, i * S + j, boolean ? keep : keep ? 0 : fill);
    }
  g->values[v].t = *t;
  free(t);
  g->values[v].is_const = true;
  return v;
}

/* q [2,4,6,8]; K and V of 2 heads repeated to 4 (Unsqueeze, Expand,
 * Reshape), V from the head split Transpose of [2,6,2,8]; scores scaled,
 * a mask, Softmax, Where(IsNaN), MatMul by V. Variants:
 * 0: no mask: GQA only
 * 1: constant f32 causal mask (0 / -inf): GQA, causal, no mask input
 * 2: constant f32 causal mask with fill -3.4e38: causal
 * 3: Where(And(C, P), 0, -inf), P = Greater(p [2,1,1,6], -0.6): causal,
 *    mask Where(P, 0, -inf)
 * 4: variant 3 with fill -1e9: not causal (a padded row would differ)
 * 5: variant 1 with one entry below the diagonal -inf: not causal
 * 6: variant 3 with K repeated 2x but V from 4 heads of its own: no GQA */
static int gc_variant;
static void build_gc(Graph *g) {
  int64_t qd[4] = {2, 4, 6, 8}, kd[4] = {2, 2, 6, 8}, vd[4] = {2, 6, 2, 8}, v4[4] = {2, 4, 6, 8};
  int64_t ax[1] = {2}, ex[5] = {2, 2, 2, 6, 8}, rd[4] = {2, 4, 6, 8}, pd[4] = {2, 1, 1, 6};
  int64_t perm[4] = {0, 2, 1, 3}, kt[4] = {0, 1, 3, 2};
  int q = input(g, "q", 4, qd), kh = input(g, "k", 4, kd);
  int vin = gc_variant == 6 ? input(g, "v", 4, v4) : input(g, "v", 4, vd);
  int k = reshape_(g, NODE(g, GPUC_OP_EXPAND, NODE(g, GPUC_OP_UNSQUEEZE, kh, shape_const(g, 1, ax)), shape_const(g, 5, ex)), rd);
  int v = vin;
  if (gc_variant != 6) {
    int vh = transpose(g, vin, 4, perm);
    v = reshape_(g, NODE(g, GPUC_OP_EXPAND, NODE(g, GPUC_OP_UNSQUEEZE, vh, shape_const(g, 1, ax)), shape_const(g, 5, ex)), rd);
  }
  int s = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MATMUL, q, transpose(g, k, 4, kt)), scalar(g, 0.35));
  int mask = -1;
  if (gc_variant == 1 || gc_variant == 5) mask = causal_const(g, 6, false, -INFINITY, gc_variant == 5);
  if (gc_variant == 2) mask = causal_const(g, 6, false, -3.4e38, false);
  if (gc_variant == 3 || gc_variant == 4 || gc_variant == 6) {
    int p = NODE(g, GPUC_OP_GREATER, input(g, "p", 4, pd), scalar(g, -0.6));
    int c = NODE(g, GPUC_OP_AND, causal_const(g, 6, true, 0, false), p);
    mask = NODE(g, GPUC_OP_WHERE, c, scalar(g, 0), scalar(g, gc_variant == 4 ? -1e9 : -INFINITY));
  }
  if (mask >= 0) s = NODE(g, GPUC_OP_ADD, s, mask);
  int pr = NODE(g, GPUC_OP_SOFTMAX, s);
  attr_i(g, "axis", -1);
  int w = NODE(g, GPUC_OP_WHERE, NODE(g, GPUC_OP_ISNAN, pr), scalar(g, 0.0), pr);
  output(g, NODE(g, GPUC_OP_MATMUL, w, v));
}

static void test_gqa_causal(void) {
  for (gc_variant = 0; gc_variant <= 6; gc_variant++) {
    GpucErr e = {0};
    Graph *g0 = graph_new(17), *g1 = graph_new(17);
    build_gc(g0);
    build_gc(g1);
    CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gqa_causal %d: bad test graph: %s",
          gc_variant, e.msg);
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    CHECK(pass_fuse_attention(g1, &o, &e) == 1, "gqa_causal %d: not fused: %s", gc_variant, e.msg);
    int got = pass_attention_gqa_causal(g1, &o, &e);
    bool gqa = gc_variant != 6, causal = gc_variant == 1 || gc_variant == 2 || gc_variant == 3 || gc_variant == 6;
    CHECK(got == gqa + causal, "gqa_causal %d: %d changes, expected %d (%s)", gc_variant, got, gqa + causal, e.msg);
    CHECK(gpuc_graph_verify(g1, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "gqa_causal %d: verify: %s", gc_variant,
          e.msg);
    const Node *n = NULL;
    for (int i = 0; i < g1->nnodes; i++)
      if (g1->nodes[i].op == GPUC_OP_ATTENTION) n = &g1->nodes[i];
    if (n) {
      const int64_t *fl = NULL;
      gpuc_attr_ints(n, "bshd", &fl);
      int64_t hk = g1->values[n->in[1]].t.dims[1];
      CHECK(gqa == (hk == 2 && count_op(g1, GPUC_OP_EXPAND) == 0 && fl && fl[2] == 1),
            "gqa_causal %d: K heads %lld, %d Expand, V bshd %lld", gc_variant, (long long)hk,
            count_op(g1, GPUC_OP_EXPAND), fl ? (long long)fl[2] : -1LL);
      CHECK(causal == (gpuc_attr_i(n, "causal", 0) == 1), "gqa_causal %d: causal %lld", gc_variant,
            (long long)gpuc_attr_i(n, "causal", 0));
      bool mask_left = n->nin > 3 && n->in[3] >= 0;
      CHECK(mask_left == (gc_variant >= 3), "gqa_causal %d: mask input left: %d", gc_variant, mask_left);
      if (gc_variant == 3) {
        const Tensor *m = &g1->values[n->in[3]].t;
        CHECK(m->rank == 4 && m->dims[2] == 1 && m->dims[3] == 6, "gqa_causal 3: the mask is the padding row");
      }
    }
    compare("gqa_causal", g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- a model file: -O2 against the unfused graph ------------------------ */

static int test_model(int argc, char **argv) {
  GpucShapeBind binds[8];
  int nb = 0;
  GpucErr e = {0};
  int want_causal = -1, want_gqa = -1; /* +causal=N, +gqa=N: Attention nodes expected so */
  for (int i = 2; i < argc && nb < 8; i++, nb++) { /* NAME=D0xD1x... */
    if (!strncmp(argv[i], "+causal=", 8)) { want_causal = atoi(argv[i] + 8); nb--; continue; }
    if (!strncmp(argv[i], "+gqa=", 5)) { want_gqa = atoi(argv[i] + 5); nb--; continue; }
    char *eq = strchr(argv[i], '=');
    if (!eq) { fprintf(stderr, "want NAME=DIMS, got %s\n", argv[i]); return 2; }
    *eq = 0;
    binds[nb].name = argv[i];
    binds[nb].rank = 0;
    for (char *p = eq + 1; *p && binds[nb].rank < GPUC_MAX_RANK; p += *p == 'x')
      binds[nb].dims[binds[nb].rank++] = strtoll(p, &p, 10);
  }
  Graph *g0 = gpuc_onnx_load(argv[1], binds, nb, &e), *g1 = gpuc_onnx_load(argv[1], binds, nb, &e);
  CHECK(g0 && g1, "load: %s", e.msg);
  if (!g0 || !g1) return check_summary();
  PassOptions o;
  gpuc_pass_options_default(&o, 1);
  CHECK(gpuc_passes_run(g0, &o, &e) == 0, "-O1: %s", e.msg);
  gpuc_pass_options_default(&o, 2);
  CHECK(gpuc_passes_run(g1, &o, &e) == 0, "-O2: %s", e.msg);
  int att = 0, causal = 0, gqa = 0;
  for (int i = 0; i < g1->nnodes; i++) {
    const Node *n = &g1->nodes[i];
    if (n->op != GPUC_OP_ATTENTION) continue;
    GpucAttnGeom a;
    att++;
    causal += gpuc_attr_i(n, "causal", 0) != 0;
    gqa += !gpuc_attention_geom(n, &g1->values[n->in[0]].t, &g1->values[n->in[1]].t, &g1->values[n->in[2]].t, &a) &&
           a.Hk != a.H;
  }
  printf("%s: %d nodes at -O1, %d at -O2; %d Attention (%d causal, %d grouped-query)\n", argv[1], g0->nnodes,
         g1->nnodes, att, causal, gqa);
  CHECK(want_causal < 0 || want_causal == causal, "%d causal Attention, expected %d", causal, want_causal);
  CHECK(want_gqa < 0 || want_gqa == gqa, "%d grouped-query Attention, expected %d", gqa, want_gqa);
  Tensor **ins = random_inputs(g0), *o0[MAX_IO] = {0}, *o1[MAX_IO] = {0};
  for (int k = 0; k < g0->ninputs; k++) /* ids below 100, masks of ones */
    if (!gpuc_dtype_is_float(ins[k]->dt))
      for (int64_t i = 0; i < gpuc_numel(ins[k]); i++)
        gpuc_set_f64(ins[k], i, strstr(g0->values[g0->inputs[k]].name, "mask") ? 1 : (double)(i * 37 % 100));
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "run -O1: %s", e.msg);
  int r1 = r0 == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "run -O2: %s", e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs; k++) {
    double r = rel_l2(o1[k], o0[k]);
    printf("  output %d: rel L2 %.2e\n", k, r);
    CHECK(r <= 1e-5, "output %d: rel L2 %.2e", k, r);
  }
  free_inputs(ins);
  for (int k = 0; k < MAX_IO; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
  return check_summary();
}

int main(int argc, char **argv) {
  if (argc > 1) return test_model(argc, argv);
  test_sizes();
  test_gqa_causal();
  return check_summary();
}
