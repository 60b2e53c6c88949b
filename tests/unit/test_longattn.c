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
 *   a model, its -O2 graph (with the rewrites) against the -O1 one and the
 *   -O2 one without the causal rewrite, fp32 and fp16, on the reference,
 *   masks with left-padded rows (test_model); N Attention nodes causal /
 *   with grouped-query heads */
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

/* [1,1,S,S] constant: bool (j <= i; j > i with upper), or f32 0 / fill
 * (j <= i / above); flip: one entry below the diagonal wrong */
static int causal_const_(Graph *g, int64_t S, bool boolean, double fill, bool flip, bool upper) {
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
      gpuc_set_f64(t, i * S + j, boolean ? keep != upper : keep ? 0 : fill);
    }
  g->values[v].t = *t;
  free(t);
  g->values[v].is_const = true;
  return v;
}
static int causal_const(Graph *g, int64_t S, bool boolean, double fill, bool flip) {
  return causal_const_(g, S, boolean, fill, flip, false);
}

/* padding [2,1,1,6] of left-padded rows: Greater(c, s) (Less than or
 * equal with inverse: the padded keys), c = {-2,-2,.5,2,2,2} (batch 0:
 * keys 0 and 1 padded, so queries 0 and 1 see no key) and {2,-2,2,.5,2,2}
 * (batch 1: key 1 padded), s a scalar input in [-1, 1) */
static int left_padding(Graph *g, bool inverse) {
  static const double c[12] = {-2, -2, .5, 2, 2, 2, 2, -2, 2, .5, 2, 2};
  int64_t d[4] = {2, 1, 1, 6};
  int v = gpuc_graph_add_value(g, "left_pad_keys");
  GpucErr e;
  Tensor *t = gpuc_tensor_new(GPUC_DT_F32, 4, d, &e);
  GPUC_ASSERT(t);
  for (int i = 0; i < 12; i++) gpuc_set_f64(t, i, c[i]);
  g->values[v].t = *t;
  free(t);
  g->values[v].is_const = true;
  return NODE(g, inverse ? GPUC_OP_LESSOREQUAL : GPUC_OP_GREATER, v, input(g, "s", 0, NULL));
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
 * 6: variant 3 with K repeated 2x but V from 4 heads of its own: no GQA
 * with FMIN = -3.4028e38 (PyTorch's float min, the dynamo exporter's fill)
 * and L the left-padded rows of left_padding (queries that see no key):
 * 7: Where(And(C, L), 0, FMIN): causal, causal_fill FMIN, mask Where(L, 0, FMIN)
 * 8: Where(Or(U, not L), FMIN, 0), U = (j > i): the same
 * 9: Add(0 / -inf triangle, Where(L, 0, FMIN)): causal, fill -inf
 * 10: Add(0 / FMIN triangle, Where(L, 0, FMIN)): not causal (above the
 *     diagonal FMIN + FMIN = -inf beside FMIN + 0: not one fill)
 * 11: Min(0 / FMIN triangle, Where(L, 0, FMIN)): causal, fill FMIN
 * 12: Add(0 / FMIN triangle, Where(L, 0, -30)): causal, fill -inf (no
 *     row is fully masked: its max stays > -1e29)
 * 13: Where(And(C, P), 0, FMIN), P [2,1,6,6] varying along the queries:
 *     not causal */
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
  const double fmin = -3.4028234663852886e38;
  int lp = gc_variant >= 7 && gc_variant <= 12 ? left_padding(g, gc_variant == 8) : -1;
  if (gc_variant == 7) mask = NODE(g, GPUC_OP_WHERE, NODE(g, GPUC_OP_AND, causal_const(g, 6, true, 0, false), lp),
                                   scalar(g, 0), scalar(g, fmin));
  if (gc_variant == 8) mask = NODE(g, GPUC_OP_WHERE, NODE(g, GPUC_OP_OR, causal_const_(g, 6, true, 0, false, true), lp),
                                   scalar(g, fmin), scalar(g, 0));
  if (gc_variant >= 9 && gc_variant <= 12) {
    int pad = NODE(g, GPUC_OP_WHERE, lp, scalar(g, 0), scalar(g, gc_variant == 12 ? -30 : fmin));
    int tri = causal_const(g, 6, false, gc_variant == 9 ? -INFINITY : fmin, false);
    mask = NODE(g, gc_variant == 11 ? GPUC_OP_MIN : GPUC_OP_ADD, tri, pad);
  }
  if (gc_variant == 13) {
    int64_t pq[4] = {2, 1, 6, 6};
    int p = NODE(g, GPUC_OP_GREATER, input(g, "p", 4, pq), scalar(g, -0.6));
    mask = NODE(g, GPUC_OP_WHERE, NODE(g, GPUC_OP_AND, causal_const(g, 6, true, 0, false), p), scalar(g, 0),
                scalar(g, fmin));
  }
  if (mask >= 0) s = NODE(g, GPUC_OP_ADD, s, mask);
  int pr = NODE(g, GPUC_OP_SOFTMAX, s);
  attr_i(g, "axis", -1);
  int w = NODE(g, GPUC_OP_WHERE, NODE(g, GPUC_OP_ISNAN, pr), scalar(g, 0.0), pr);
  output(g, NODE(g, GPUC_OP_MATMUL, w, v));
}

static void test_gqa_causal(void) {
  for (gc_variant = 0; gc_variant <= 13; gc_variant++) {
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
    bool gqa = gc_variant != 6, causal = gc_variant != 0 && gc_variant != 4 && gc_variant != 5 && gc_variant != 10 &&
                                       gc_variant != 13;
    bool fmin_fill = gc_variant == 7 || gc_variant == 8 || gc_variant == 11;
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
      double fill = gpuc_attr_f(n, "causal_fill", -INFINITY);
      CHECK(fmin_fill ? fill == (float)-3.4028234663852886e38 : fill == -INFINITY, "gqa_causal %d: causal_fill %g",
            gc_variant, fill);
      bool mask_left = n->nin > 3 && n->in[3] >= 0;
      CHECK(mask_left == (gc_variant >= 3), "gqa_causal %d: mask input left: %d", gc_variant, mask_left);
      if (causal && mask_left) {
        const Tensor *m = &g1->values[n->in[3]].t;
        CHECK(m->rank == 4 && m->dims[0] == 2 && m->dims[2] == 1 && m->dims[3] == 6,
              "gqa_causal %d: the mask is the padding row", gc_variant);
      }
    }
    char what[32];
    snprintf(what, sizeof what, "gqa_causal %d", gc_variant);
    compare(what, g0, g1, 1e-5);
    gpuc_graph_free(g0);
    gpuc_graph_free(g1);
  }
}

/* ---- same_cast: a Cast to its input's dtype is forwarded ------------------ */

/* x f32 [2,3]: Relu(Cast(x, to f32)) and Cast(x, to f16): pass_identity
 * forwards the first Cast (torch's .to(x.dtype) on a mask, which hid the
 * mask from passes/causal_mask.c), not the second */
static void build_casts(Graph *g) {
  int64_t d[2] = {2, 3};
  int x = input(g, "x", 2, d);
  int c32 = NODE(g, GPUC_OP_CAST, x);
  attr_i(g, "to", 1);
  output(g, NODE(g, GPUC_OP_RELU, c32));
  int c16 = NODE(g, GPUC_OP_CAST, x);
  attr_i(g, "to", 10);
  output(g, c16);
}

static void test_same_cast(void) {
  GpucErr e = {0};
  Graph *g0 = graph_new(17), *g1 = graph_new(17);
  build_casts(g0);
  build_casts(g1);
  CHECK(gpuc_graph_infer(g0, &e) == 0 && gpuc_graph_infer(g1, &e) == 0, "same_cast: bad test graph: %s", e.msg);
  PassOptions o;
  gpuc_pass_options_default(&o, 1);
  CHECK(pass_identity(g1, &o, &e) == 1 && pass_dead_code(g1, &o, &e) >= 0, "same_cast: not forwarded: %s", e.msg);
  CHECK(count_op(g1, GPUC_OP_CAST) == 1 && g1->values[g1->outputs[1]].t.dt == GPUC_DT_F16,
        "same_cast: %d Casts left, expected the f16 one", count_op(g1, GPUC_OP_CAST));
  compare("same_cast", g0, g1, 0);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

/* ---- a model file: -O2 against the unfused graph ------------------------ */

/* a against reference w: NaN in the same places (a row of -inf scores is
 * NaN before and after), rel L2 of the rest; -1 when the NaNs differ */
static double rel_l2_nan(const Tensor *a, const Tensor *w, int64_t *nans) {
  double num = 0, den = 0;
  *nans = 0;
  for (int64_t i = 0; i < gpuc_numel(w); i++) {
    double x = gpuc_get_f64(a, i), y = gpuc_get_f64(w, i);
    if (isnan(x) != isnan(y)) return -1;
    if (isnan(y)) { (*nans)++; continue; }
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static Graph *load_run_passes(const char *path, GpucShapeBind *binds, int nb, int level, bool fp16, bool causal_off) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, binds, nb, &e);
  CHECK(g, "load: %s", e.msg);
  if (!g) return NULL;
  PassOptions o;
  gpuc_pass_options_default(&o, level);
  o.fp16 = fp16;
  if (causal_off) setenv("GPUC_NO_CAUSAL_MASK", "1", 1);
  int rc = gpuc_passes_run(g, &o, &e);
  unsetenv("GPUC_NO_CAUSAL_MASK");
  CHECK(rc == 0, "-O%d%s%s: %s", level, fp16 ? " --fp16" : "", causal_off ? " GPUC_NO_CAUSAL_MASK=1" : "", e.msg);
  if (rc) { gpuc_graph_free(g); return NULL; }
  return g;
}

/* outputs of g1 against g0's on ins: rel L2 <= tol, NaNs in the same places */
static void compare_runs(const char *what, Graph *g0, Graph *g1, Tensor **ins, double tol) {
  GpucErr e = {0};
  Tensor *o0[MAX_IO] = {0}, *o1[MAX_IO] = {0};
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "%s: run: %s", what, e.msg);
  int r1 = r0 == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "%s: run: %s", what, e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs; k++) {
    int64_t nans = 0;
    double r = rel_l2_nan(o1[k], o0[k], &nans);
    printf("  %s: output %d: rel L2 %.2e (%lld NaN in both)\n", what, k, r, (long long)nans);
    CHECK(r >= 0 && r <= tol, "%s: output %d: %s %.2e", what, k, r < 0 ? "NaN in different places" : "rel L2", r);
  }
  for (int k = 0; k < MAX_IO; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
}

/* usage: test_longattn MODEL.onnx NAME=DIMS... [+causal=N] [+gqa=N]:
 * -O2 (fp32) against -O1 and against -O2 with GPUC_NO_CAUSAL_MASK=1, and
 * -O2 --fp16 against the same without the rewrite, on the reference;
 * inputs: ids i * 37 % 100, masks [B,S] of ones with padding by row b % 4:
 * none, right (the last S/4 keys), left (the first S/4: queries that see
 * no key), every third key from key 0. A causal Attention's mask must be
 * one row per batch ([.., 1, Sk]) or none. */
static int test_model(int argc, char **argv) {
  GpucShapeBind binds[8];
  int nb = 0;
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
  Graph *g0 = load_run_passes(argv[1], binds, nb, 1, false, false);
  Graph *g1 = load_run_passes(argv[1], binds, nb, 2, false, false);
  Graph *g1n = load_run_passes(argv[1], binds, nb, 2, false, true);
  Graph *h1 = load_run_passes(argv[1], binds, nb, 2, true, false);
  Graph *h1n = load_run_passes(argv[1], binds, nb, 2, true, true);
  if (!g0 || !g1 || !g1n || !h1 || !h1n) goto done;
  int att = 0, causal = 0, gqa = 0;
  for (int i = 0; i < g1->nnodes; i++) {
    const Node *n = &g1->nodes[i];
    if (n->op != GPUC_OP_ATTENTION) continue;
    GpucAttnGeom a;
    att++;
    bool c = gpuc_attr_i(n, "causal", 0) != 0;
    causal += c;
    gqa += !gpuc_attention_geom(n, &g1->values[n->in[0]].t, &g1->values[n->in[1]].t, &g1->values[n->in[2]].t, &a) &&
           a.Hk != a.H;
    const Tensor *m = n->nin > 3 && n->in[3] >= 0 ? &g1->values[n->in[3]].t : NULL;
    CHECK(!c || !m || (m->rank >= 2 && m->dims[m->rank - 2] == 1),
          "%s: causal Attention '%s' reads a mask of %lld rows", argv[1], n->name,
          m ? (long long)m->dims[m->rank - 2] : 0LL);
  }
  printf("%s: %d nodes at -O1, %d at -O2 (%d without the causal rewrite); %d Attention (%d causal, %d grouped-query)\n",
         argv[1], g0->nnodes, g1->nnodes, g1n->nnodes, att, causal, gqa);
  CHECK(want_causal < 0 || want_causal == causal, "%d causal Attention, expected %d", causal, want_causal);
  CHECK(want_gqa < 0 || want_gqa == gqa, "%d grouped-query Attention, expected %d", gqa, want_gqa);
  Tensor **ins = random_inputs(g0);
  for (int k = 0; k < g0->ninputs; k++) {
    if (gpuc_dtype_is_float(ins[k]->dt)) continue;
    bool mask = strstr(g0->values[g0->inputs[k]].name, "mask") != NULL;
    int64_t S = ins[k]->rank == 2 ? ins[k]->dims[1] : 1, q = S / 4;
    for (int64_t i = 0; i < gpuc_numel(ins[k]); i++) {
      int64_t b = i / S, j = i % S;
      bool pad = b % 4 == 1 ? j >= S - q : b % 4 == 2 ? j < q : b % 4 == 3 ? j % 3 == 0 : false;
      gpuc_set_f64(ins[k], i, mask ? !pad : (double)(i * 37 % 100));
    }
  }
  compare_runs("-O2 vs -O1", g0, g1, ins, 1e-5);
  compare_runs("-O2 vs -O2 unrewritten", g1n, g1, ins, 1e-5);
  compare_runs("-O2 --fp16 vs -O2 --fp16 unrewritten", h1n, h1, ins, 1e-3);
  free_inputs(ins);
done:
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
  gpuc_graph_free(g1n);
  gpuc_graph_free(h1);
  gpuc_graph_free(h1n);
  return check_summary();
}

int main(int argc, char **argv) {
  if (argc > 1) return test_model(argc, argv);
  test_sizes();
  test_gqa_causal();
  test_same_cast();
  return check_summary();
}
