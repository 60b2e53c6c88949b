/* Training-mode Dropout: the internal op DropoutTrain on the CPU reference
 * (the generator of ir/dropout_rng.h) and the trainer's rewrite.
 *  - the threshold is ceil(ratio * 2^24), clamped to [0, 2^24];
 *  - on 2^20 f32 elements, ratios 0.1 0.3 0.5 0.9: the kept fraction is
 *    within 0.003 of 1 - ratio (binomial sd <= 0.0005); kept elements are
 *    exactly float(x * float(1 / (1 - ratio))), dropped ones 0, and the
 *    mask says which;
 *  - the same (seed, step, salt) gives the same mask; another step, salt
 *    or seed a different one, agreeing with it on 1 - 2p(1-p) of the
 *    elements within 0.005 (independent draws); ratio 0 keeps everything;
 *    f16 and f64 X get the f32 mask;
 *  - inference refuses ratio 1, ratio -0.1, a counter of 3 values and an
 *    int32 counter, naming the node;
 *  - the trainer: mlp_dropout.onnx's training graph has one DropoutTrain
 *    whose input 1 is the graph's input 2, "gpuc.step" int64 [2]; mlp.onnx's
 *    has two inputs; evaluation is inference: mlp_dropout's logits equal
 *    mlp's (same weights) bit for bit.
 * usage: test_dropout MODELS_DIR. Prints failures, then "N passed, N failed". */
#include "dropout_rng.h"
#include "ref.h"
#include "train.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

enum { N = 1 << 20 };

/* Y and mask of DropoutTrain(X, (seed, step)) with X [n] of dtype dt
 * holding 1 + i % 7 / 8 (never 0; exact in half); NULL on a failure (the
 * message in e). */
static Tensor **run_op(GpucDType dt, int64_t n, double ratio, int64_t seed, int64_t step, int64_t salt,
                       GpucDType cdt, int64_t ncounter, GpucErr *e) {
  Graph *g = gpuc_graph_new("dropout_test");
  g->opset = 17;
  int x = gpuc_graph_add_value(g, "X"), k = gpuc_graph_add_value(g, "counter");
  int y = gpuc_graph_add_value(g, "Y"), m = gpuc_graph_add_value(g, "mask");
  gpuc_set_shape(&g->values[x].t, dt, 1, &n);
  gpuc_set_shape(&g->values[k].t, cdt, 1, &ncounter);
  GPUC_ASSERT(!gpuc_tensor_alloc(&g->values[x].t, e) && !gpuc_tensor_alloc(&g->values[k].t, e));
  for (int64_t i = 0; i < n; i++) gpuc_set_f64(&g->values[x].t, i, 1.0 + (double)(i % 7) / 8);
  gpuc_set_i64(&g->values[k].t, 0, seed);
  gpuc_set_i64(&g->values[k].t, 1, step);
  g->values[x].is_const = g->values[k].is_const = true;
  int ni = gpuc_graph_add_node(g, GPUC_OP_DROPOUTTRAIN, "drop", 2, 2);
  Node *nd = &g->nodes[ni];
  nd->in[0] = x;
  nd->in[1] = k;
  nd->out[0] = y;
  nd->out[1] = m;
  nd->attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * 2);
  nd->attrs[0] = (Attr){.name = "ratio", .kind = GPUC_ATTR_FLOAT, .f = (float)ratio};
  nd->attrs[1] = (Attr){.name = "salt", .kind = GPUC_ATTR_INT, .i = salt};
  nd->nattr = 2;
  g->values[y].producer = g->values[m].producer = ni;
  g->outputs = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
  g->outputs[0] = y;
  g->outputs[1] = m;
  g->noutputs = 2;
  g->values[y].is_output = g->values[m].is_output = true;
  Tensor **outs = calloc(2, sizeof *outs);
  if (gpuc_graph_infer(g, e) || gpuc_ref_run(g, NULL, outs, e)) { free(outs); outs = NULL; }
  gpuc_graph_free(g);
  return outs;
}

static void free_outs(Tensor **o) {
  if (!o) return;
  gpuc_tensor_free(o[0]);
  gpuc_tensor_free(o[1]);
  free(o);
}

/* the fraction of elements on which two masks agree */
static double agreement(const Tensor *a, const Tensor *b) {
  int64_t same = 0;
  for (int64_t i = 0; i < N; i++) same += gpuc_get_i64(a, i) == gpuc_get_i64(b, i);
  return (double)same / N;
}

static void test_threshold(void) {
  CHECK(gpuc_dropout_threshold(0) == 0, "threshold(0)");
  CHECK(gpuc_dropout_threshold(0.5) == 1u << 23, "threshold(0.5) = %u", gpuc_dropout_threshold(0.5));
  CHECK(gpuc_dropout_threshold(0.3) == 5033165u, "threshold(0.3) = %u", gpuc_dropout_threshold(0.3));
  CHECK(gpuc_dropout_threshold(1 - ldexp(1, -26)) == GPUC_DROPOUT_ONE, "threshold near 1");
  CHECK(gpuc_dropout_bits(gpuc_dropout_key(1, 2, 3), 4) < GPUC_DROPOUT_ONE, "24 bits");
  /* the device text is the same macro's */
  CHECK(strstr(GPUC_DROPOUT_RNG_SRC, "__device__") && strstr(GPUC_DROPOUT_RNG_SRC, "gpuc_dropout_bits") &&
        strstr(GPUC_DROPOUT_RNG_SRC, "0x94d049bb133111ebull"), "device text");
}

static void test_statistics(void) {
  static const double ratios[] = {0.1, 0.3, 0.5, 0.9};
  for (int r = 0; r < 4; r++) {
    GpucErr e = {0};
    Tensor **o = run_op(GPUC_DT_F32, N, ratios[r], 11, 100, 0, GPUC_DT_I64, 2, &e);
    CHECK(o != NULL, "ratio %g: %s", ratios[r], e.msg);
    if (!o) continue;
    float scale = (float)(1.0 / (1.0 - (double)(float)ratios[r]));
    int64_t kept = 0, wrong = 0;
    for (int64_t i = 0; i < N; i++) {
      bool keep = gpuc_get_i64(o[1], i) != 0;
      float x = (float)(1.0 + (double)(i % 7) / 8), y = ((float *)o[0]->data)[i];
      kept += keep;
      wrong += keep ? y != x * scale : y != 0;
    }
    double frac = (double)kept / N;
    CHECK(fabs(frac - (1 - ratios[r])) < 0.003, "ratio %g: kept %.5f", ratios[r], frac);
    CHECK(wrong == 0, "ratio %g: %lld values not x * scale or 0", ratios[r], (long long)wrong);
    free_outs(o);
  }
}

static void test_repeat(void) {
  GpucErr e = {0};
  double p = 0.3, indep = 1 - 2 * p * (1 - p);
  Tensor **a = run_op(GPUC_DT_F32, N, p, 11, 100, 0, GPUC_DT_I64, 2, &e);
  Tensor **same = run_op(GPUC_DT_F32, N, p, 11, 100, 0, GPUC_DT_I64, 2, &e);
  Tensor **step = run_op(GPUC_DT_F32, N, p, 11, 101, 0, GPUC_DT_I64, 2, &e);
  Tensor **salt = run_op(GPUC_DT_F32, N, p, 11, 100, 1, GPUC_DT_I64, 2, &e);
  Tensor **seed = run_op(GPUC_DT_F32, N, p, 12, 100, 0, GPUC_DT_I64, 2, &e);
  Tensor **h = run_op(GPUC_DT_F16, N, p, 11, 100, 0, GPUC_DT_I64, 2, &e);
  Tensor **d = run_op(GPUC_DT_F64, N, p, 11, 100, 0, GPUC_DT_I64, 2, &e);
  Tensor **zero = run_op(GPUC_DT_F32, N, 0, 11, 100, 0, GPUC_DT_I64, 2, &e);
  CHECK(a && same && step && salt && seed && h && d && zero, "runs: %s", e.msg);
  if (a && same && step && salt && seed && h && d && zero) {
    CHECK(agreement(a[1], same[1]) == 1.0, "same counter, another mask");
    CHECK(!memcmp(a[0]->data, same[0]->data, gpuc_tensor_bytes(a[0])), "same counter, another Y");
    const struct { Tensor **o; const char *what; } other[] = {{step, "step"}, {salt, "salt"}, {seed, "seed"}};
    for (int k = 0; k < 3; k++) {
      double ag = agreement(a[1], other[k].o[1]);
      CHECK(fabs(ag - indep) < 0.005, "another %s: masks agree on %.4f, independent ones on %.4f",
            other[k].what, ag, indep);
    }
    CHECK(agreement(a[1], h[1]) == 1.0 && agreement(a[1], d[1]) == 1.0, "f16 / f64 masks differ from f32's");
    int64_t kept = 0;
    for (int64_t i = 0; i < N; i++) kept += gpuc_get_i64(zero[1], i) != 0;
    CHECK(kept == N, "ratio 0 dropped %lld", (long long)(N - kept));
  }
  free_outs(a); free_outs(same); free_outs(step); free_outs(salt); free_outs(seed);
  free_outs(h); free_outs(d); free_outs(zero);
}

static void test_refused(void) {
  static const struct { double ratio; GpucDType cdt; int64_t nc; const char *says; } cs[] = {
    {1.0, GPUC_DT_I64, 2, "ratio 1 is outside [0, 1)"},
    {-0.1, GPUC_DT_I64, 2, "outside [0, 1)"},
    {0.3, GPUC_DT_I64, 3, "counter must hold 2 values"},
    {0.3, GPUC_DT_I32, 2, "input 1 has dtype i32"},
  };
  for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
    GpucErr e = {0};
    Tensor **o = run_op(GPUC_DT_F32, 8, cs[k].ratio, 1, 1, 0, cs[k].cdt, cs[k].nc, &e);
    CHECK(!o && strstr(e.msg, cs[k].says) && strstr(e.msg, "drop"), "case %zu: want '%s', got '%s'", k,
          cs[k].says, e.msg);
    free_outs(o);
  }
}

static void test_trainer(const char *dir) {
  char p[4096], q[4096];
  snprintf(p, sizeof p, "%s/mlp_dropout.onnx", dir);
  snprintf(q, sizeof q, "%s/mlp.onnx", dir);
  GpucErr e = {0};
  Trainer *t = gpuc_trainer_new(p, 16, &e), *plain = t ? gpuc_trainer_new(q, 16, &e) : NULL;
  CHECK(t && plain, "trainers: %s", e.msg);
  if (!t || !plain) { gpuc_trainer_free(t); return; }
  const Graph *g = gpuc_trainer_graph(t);
  int nd = 0, nplain = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    nplain += n->op == GPUC_OP_DROPOUT;
    if (n->op != GPUC_OP_DROPOUTTRAIN) continue;
    nd++;
    CHECK(g->ninputs == 3 && n->nin == 2 && n->in[1] == g->inputs[2], "DropoutTrain reads input 2");
    CHECK(fabsf(gpuc_attr_f(n, "ratio", -1) - 0.3f) == 0, "ratio attribute");
  }
  CHECK(nd == 1 && nplain == 0, "%d DropoutTrain, %d Dropout", nd, nplain);
  if (g->ninputs == 3) {
    const Value *c = &g->values[g->inputs[2]];
    CHECK(!strcmp(c->name, "gpuc.step") && c->t.dt == GPUC_DT_I64 && c->t.rank == 1 && c->t.dims[0] == 2,
          "counter input '%s'", c->name);
  }
  CHECK(gpuc_trainer_graph(plain)->ninputs == 2, "mlp's training graph has a counter");
  /* evaluation: Dropout is the identity */
  enum { B = 5 };
  float *x = malloc(sizeof(float) * B * 784);
  for (int i = 0; i < B * 784; i++) x[i] = (float)((i * 37) % 101) / 100.0f;
  Tensor *la = NULL, *lb = NULL;
  CHECK(!gpuc_trainer_logits(t, x, B, &la, &e) && !gpuc_trainer_logits(plain, x, B, &lb, &e), "logits: %s",
        e.msg);
  if (la && lb)
    CHECK(!memcmp(la->data, lb->data, gpuc_tensor_bytes(la)), "evaluation logits differ from mlp's");
  gpuc_tensor_free(la);
  gpuc_tensor_free(lb);
  free(x);
  gpuc_trainer_free(t);
  gpuc_trainer_free(plain);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_dropout MODELS_DIR\n"); return 2; }
  test_threshold();
  test_statistics();
  test_repeat();
  test_refused();
  test_trainer(argv[1]);
  return check_summary();
}
