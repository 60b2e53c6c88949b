/* RotaryEmbedding-23: the import-time expansion into primitive ops
 * (frontend/onnx_rotary.c) against the direct reference kernel
 * (runtime/ref/ref_rotary.c) on seeded random inputs, per X rank (3-D,
 * 4-D), position_ids (constant ids into [max_pos, rot/2] caches, or
 * [B, S, rot/2] caches), halves or interleaved pairs, full or partial
 * rotation, and dtype (f32 within 1e-6; f16 and bf16, where the expansion
 * rounds after each op and the kernel once, within 4 and 3 units of the
 * last place at 1). The expanded graph must hold no RotaryEmbedding. */
#include "check.h"
#include "ref.h"
#include "frontend.h"
#include "graph_build.h"

enum { B = 2, H = 3, S = 4, D = 8, MAXPOS = 10 };

/* one RotaryEmbedding node in a graph of its own */
static Graph *build(GpucDType dt, int rank, bool pos, int inter, int rot) {
  Graph *g = graph_new(23);
  int64_t half = (rot ? rot : D) / 2;
  int64_t x4[4] = {B, H, S, D}, x3[3] = {B, S, H * D};
  int64_t c2[2] = {MAXPOS, half}, c3[3] = {B, S, half};
  int x = input(g, "X", rank, rank == 4 ? x4 : x3);
  int c = input(g, "cos", pos ? 2 : 3, pos ? c2 : c3), s = input(g, "sin", pos ? 2 : 3, pos ? c2 : c3);
  for (int v = 0; v < g->nvalues; v++) g->values[v].t.dt = dt;
  int ins[4] = {x, c, s, -1};
  if (pos) { /* constant ids, every position of the caches reachable */
    int p = gpuc_graph_add_value(g, "pos");
    GpucErr e;
    Tensor *t = gpuc_tensor_new(GPUC_DT_I64, 2, (int64_t[]){B, S}, &e);
    GPUC_ASSERT(t);
    for (int64_t i = 0; i < B * S; i++) gpuc_set_i64(t, i, (i * 7 + 3) % MAXPOS);
    g->values[p].t = *t;
    free(t);
    g->values[p].is_const = true;
    ins[3] = p;
  }
  int y = node(g, GPUC_OP_ROTARYEMBEDDING, pos ? 4 : 3, ins);
  attr_i(g, "interleaved", inter);
  if (rot) attr_i(g, "rotary_embedding_dim", rot);
  if (rank == 3) attr_i(g, "num_heads", H);
  output(g, y);
  GpucErr e = {0};
  CHECK(gpuc_graph_infer(g, &e) == 0, "infer: %s", e.msg);
  return g;
}

int main(void) {
  const GpucDType dts[3] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16};
  const double tol[3] = {1e-6, 4.0 / 1024, 3.0 / 128};
  int cases = 0;
  for (int k = 0; k < 3; k++)
    for (int rank = 3; rank <= 4; rank++)
      for (int pos = 0; pos < 2; pos++)
        for (int inter = 0; inter < 2; inter++)
          for (int rot = 0; rot <= D; rot += 4) {
            char what[128];
            snprintf(what, sizeof what, "%s rank %d %s %s rot %d", gpuc_dtype_name(dts[k]), rank,
                     pos ? "position_ids" : "no ids", inter ? "interleaved" : "halves", rot);
            Graph *g0 = build(dts[k], rank, pos, inter, rot), *g1 = build(dts[k], rank, pos, inter, rot);
            GpucErr e = {0};
            int rc = gpuc_onnx_expand_rotary(g1, &e);
            CHECK(rc == 0, "%s: expand: %s", what, e.msg);
            CHECK(count_op(g0, GPUC_OP_ROTARYEMBEDDING) == 1 && count_op(g1, GPUC_OP_ROTARYEMBEDDING) == 0,
                  "%s: the expansion left the node", what);
            if (rc == 0) compare(what, g0, g1, tol[k]);
            gpuc_graph_free(g0);
            gpuc_graph_free(g1);
            cases++;
          }
  printf("%d cases\n", cases);
  return check_summary();
}
