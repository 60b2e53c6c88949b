/* Long-sequence attention, on graphs built here:
 *   sizes     an intermediate over the one-tensor cap (the [B,H,S,S]
 *             scores of Whisper's encoder at batch 32) passes inference
 *             and is refused after the passes only if no fusion removed
 *             it; a graph output over the cap is refused at inference
 * usage: test_longattn */
#include "passes.h"
#include "ref.h"
#include "check.h"
#define TEST_RNG_SEED 43
#include "graph_build.h"
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

int main(void) {
  test_sizes();
  return check_summary();
}
