/* A constant scale after a Linear layer, folded into its weights:
 *   Mul(MatMulBias(x, W, b), c) -> MatMulBias(x, W * c, b * c)
 *   Mul(MatMul(x, W), c)        -> MatMul(x, W * c)
 * c a float constant holding one value, or one value per output column
 * ([N] or [1,..,1,N]), either operand order; W a 2-D float constant [K,N]
 * and b (if any) a constant of N values. Whisper's attention (and BART's,
 * Marian's: Hugging Face's `q_proj(x) * self.scaling`) scales the query
 * projection so; the Mul was a kernel of its own a layer (0.027 ms at
 * Whisper-base b32), and in the weights it costs nothing. The scaled
 * weights are new constants (W may be read elsewhere). The values differ
 * from the unfused graph's by rounding only (x (W c) against (x W) c).
 *
 * Conditions: the GEMM's output is read only by the Mul and is no graph
 * output. Runs at -O2 after fuse_matmul (not in training: the weights
 * are what training updates); GPUC_NO_FOLD_GEMM_SCALE=1 turns it off. */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>

/* c's value for output column j, c holding 1 or N values */
static double scale_at(const Tensor *c, int64_t j) { return gpuc_get_f64(c, gpuc_numel(c) == 1 ? 0 : j); }

/* c one value, or N values along the last axis (leading dims 1) */
static bool column_scale(const Graph *g, int v, int64_t n, int rank) {
  const Value *c = &g->values[v];
  if (!c->is_const || !c->t.data || !gpuc_dtype_is_float(c->t.dt) || c->t.rank > rank) return false;
  int64_t k = gpuc_numel(&c->t);
  if (k == 1) return true;
  if (k != n || c->t.dims[c->t.rank - 1] != n) return false;
  return true;
}

/* a new constant: value src's values times value c's by column (src
 * [..., N]); indices, not pointers: adding a value may move g->values */
static int scaled(Graph *g, int src, int c, GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.scaled", g->values[src].name);
  Tensor t = g->values[src].t;
  int v = gpuc_linear_new_const(g, name, t.dt, t.rank, t.dims, e);
  if (v < 0) return -1;
  const Tensor *from = &g->values[src].t, *ct = &g->values[c].t;
  Tensor *out = &g->values[v].t;
  int64_t n = t.rank ? t.dims[t.rank - 1] : 1, total = gpuc_numel(&t);
  for (int64_t i = 0; i < total; i++) gpuc_set_f64(out, i, gpuc_get_f64(from, i) * scale_at(ct, i % n));
  return v;
}

int pass_fold_gemm_scale(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training || pass_env_on("GPUC_NO_FOLD_GEMM_SCALE")) return 0;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  for (int i = 0; i < nn; i++) {
    Node *mul = &g->nodes[i];
    if (mul->op != GPUC_OP_MUL || mul->nin != 2 || mul->nout != 1 || mul->out[0] < 0) continue;
    for (int side = 0; side < 2; side++) {
      Node *mm = pass_sole_producer(g, mul->in[1 - side], GPUC_OP_MATMULBIAS, ps.readers);
      if (!mm) mm = pass_sole_producer(g, mul->in[1 - side], GPUC_OP_MATMUL, ps.readers);
      if (!mm || mm->nin < 2 || (mm->op == GPUC_OP_MATMULBIAS && mm->nin != 3)) continue;
      const Value *w = &g->values[mm->in[1]], *b = mm->nin > 2 ? &g->values[mm->in[2]] : NULL;
      const Tensor *y = &g->values[mm->out[0]].t, *z = &g->values[mul->out[0]].t;
      if (!w->is_const || !w->t.data || w->t.rank != 2 || !gpuc_dtype_is_float(w->t.dt) || (b && !b->is_const) ||
          (b && !b->t.data) || z->dt != y->dt || z->rank != y->rank || !gpuc_shape_known(y))
        continue;
      int64_t n = w->t.dims[1];
      if (!column_scale(g, mul->in[side], n, y->rank) || (b && gpuc_numel(&b->t) != n)) continue;
      int c = mul->in[side], nin = mm->nin, x = mm->in[0], wv = mm->in[1], bv = nin > 2 ? mm->in[2] : -1;
      int ws = scaled(g, wv, c, e);
      int bs = ws >= 0 && bv >= 0 ? scaled(g, bv, c, e) : -1;
      if (ws < 0 || (bv >= 0 && bs < 0)) { pass_scratch_free(&ps); return -1; }
      mul = &g->nodes[i];
      int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
      if (!in) { pass_scratch_free(&ps); return gpuc_err_set(e, "%s: out of memory", g->path); }
      /* the Mul becomes the GEMM, in the Mul's place: x and the new
       * constants come before it */
      in[0] = x;
      in[1] = ws;
      in[2] = bs;
      mul->op = mm->op;
      mul->in = in;
      mul->nin = nin;
      mul->attrs = mm->attrs;
      mul->nattr = mm->nattr;
      ps.drop[mm - g->nodes] = true;
      changes++;
      break;
    }
  }
  gpuc_graph_remove_nodes(g, ps.drop);
  pass_scratch_free(&ps);
  return changes;
}
