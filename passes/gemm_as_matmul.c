/* Linear layers exported as 2-D Gemm -> MatMul / MatMulBias on the
 * activation's own shape, so the fusions written for MatMulBias (the
 * activation epilogue, Q/K/V as one GEMM, the residual through C) see them.
 *
 * 1. Gemm(A [M,K], B, C?) with transA 0 and alpha 1, B a constant 2-D
 *    weight, and C absent, or C an N-row ([N] or [1,N]) with beta 1 ->
 *    MatMul(A, B') or MatMulBias(A, B', C). B' is B, or for transB 1 a new
 *    constant holding B transposed to [K,N].
 * 2. Reshape(MatMul(Reshape(x, [M,K]), W), [d0,..,dr-2, N]) where x is
 *    [d0,..,dr-2, K] and M = d0*..*dr-2 (GPT-2's Conv1D, torchvision's
 *    out_proj: the batch flattened around a 2-D GEMM) -> MatMul(x, W)
 *    writing the outer Reshape's value (MatMulBias likewise): a 2-D B
 *    folds the batch into M anyway (codegen/lower_linalg.c), so the bytes
 *    are the same, and what follows the GEMM now reads it directly.
 * Conditions: the Gemm's and the inner MatMul's outputs are read only by
 * what replaces them and are no graph outputs; the inner Reshape stays when
 * something else reads it. Runs at -O2 before fuse_matmul. */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool const_weight(const Graph *g, int v) {
  const Value *w = &g->values[v];
  return w->is_const && w->t.data && w->t.rank == 2 && gpuc_dtype_is_float(w->t.dt) && gpuc_shape_known(&w->t);
}

/* rule 1 on node i; 1 when rewritten */
static int gemm_to_matmul(Graph *g, int i, GpucErr *e) {
  Node *n = &g->nodes[i];
  if (gpuc_attr_i(n, "transA", 0) != 0 || gpuc_attr_f(n, "alpha", 1.0f) != 1.0f || n->out[0] < 0) return 0;
  int a = n->in[0], b = n->in[1], c = n->nin > 2 ? n->in[2] : -1;
  if (!const_weight(g, b) || g->values[a].t.rank != 2 || g->values[b].t.dt != g->values[a].t.dt) return 0;
  bool tb = gpuc_attr_i(n, "transB", 0) != 0;
  int64_t K = g->values[b].t.dims[tb ? 1 : 0], N = g->values[b].t.dims[tb ? 0 : 1];
  if (c >= 0) {
    const Tensor *ct = &g->values[c].t;
    bool row = gpuc_shape_known(ct) && ct->dt == g->values[a].t.dt && gpuc_numel(ct) == N &&
               (ct->rank == 1 || (ct->rank == 2 && ct->dims[0] == 1));
    if (!row || gpuc_attr_f(n, "beta", 1.0f) != 1.0f) return 0;
  }
  if (tb) { /* B [N,K] -> a new [K,N] constant */
    char name[512];
    snprintf(name, sizeof name, "%s.T", g->values[b].name ? g->values[b].name : "gemm_weight");
    int64_t dims[2] = {K, N};
    int bt = gpuc_linear_new_const(g, name, g->values[b].t.dt, 2, dims, e);
    if (bt < 0) return -1;
    const Tensor *src = &g->values[b].t;
    Tensor *dst = &g->values[bt].t;
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) gpuc_set_f64(dst, k * N + j, gpuc_get_f64(src, j * K + k));
    b = bt;
    n = &g->nodes[i];
  }
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
  if (!in) return gpuc_err_set(e, "%s: out of memory", g->path);
  in[0] = a; in[1] = b; in[2] = c;
  n->op = c >= 0 ? GPUC_OP_MATMULBIAS : GPUC_OP_MATMUL;
  n->in = in;
  n->nin = c >= 0 ? 3 : 2;
  n->nattr = 0; /* Gemm's attributes are spent */
  return 1;
}

/* rule 2 on MatMul/MatMulBias node i */
static int unflatten(Graph *g, int i, const int *readers, const int *reader, bool *drop) {
  Node *n = &g->nodes[i];
  int av = n->in[0], y = n->out[0];
  if (y < 0 || g->values[n->in[1]].t.rank != 2 || readers[y] != 1 || g->values[y].is_output) return 0;
  int pa = g->values[av].producer, pr = reader[y];
  if (pa < 0 || drop[pa] || g->nodes[pa].op != GPUC_OP_RESHAPE || drop[pr] || g->nodes[pr].op != GPUC_OP_RESHAPE)
    return 0;
  int x = g->nodes[pa].in[0], out = g->nodes[pr].out[0];
  const Tensor *xt = &g->values[x].t, *at = &g->values[av].t, *ot = &g->values[out].t, *yt = &g->values[y].t;
  if (!gpuc_shape_known(xt) || !gpuc_shape_known(ot) || !gpuc_shape_known(at) || !gpuc_shape_known(yt) ||
      xt->rank < 2 || at->rank != 2 || ot->rank != xt->rank || xt->dt != at->dt)
    return 0;
  int64_t m = 1;
  for (int d = 0; d + 1 < xt->rank; d++) {
    if (ot->dims[d] != xt->dims[d]) return 0;
    m *= xt->dims[d];
  }
  if (m != at->dims[0] || xt->dims[xt->rank - 1] != at->dims[1] || ot->dims[ot->rank - 1] != yt->dims[yt->rank - 1])
    return 0;
  /* the MatMul moves to the outer Reshape's place: x and its other inputs
   * come before it, and so it comes before every reader of out */
  drop[pr] = true;
  if (readers[av] == 1 && !g->values[av].is_output) drop[pa] = true;
  n->in[0] = x;
  n->out[0] = out;
  Node moved = *n;
  g->nodes[pr] = moved;
  drop[pr] = false;
  drop[i] = true;
  g->nodes[i].nattr = 0; /* its attributes live on in the moved copy */
  return 1;
}

int pass_gemm_as_matmul(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0; /* a backward reads the forward's values by name */
  int changes = 0;
  /* --int8 and --fp8 take Gemm's [N,K] weight as it is, and their reports
   * name the layer by its ONNX op: rule 1 leaves them their Gemms */
  for (int i = 0; i < g->nnodes && !o->int8 && !o->fp8; i++) {
    if (g->nodes[i].op != GPUC_OP_GEMM) continue;
    int r = gemm_to_matmul(g, i, e);
    if (r < 0) return -1;
    changes += r;
  }
  int nn = g->nnodes;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!readers || !reader || !drop) {
    free(readers); free(reader); free(drop);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < nn; i++) {
    GpucOp op = g->nodes[i].op;
    if ((op == GPUC_OP_MATMUL || op == GPUC_OP_MATMULBIAS) && !drop[i])
      changes += unflatten(g, i, readers, reader, drop);
  }
  gpuc_graph_remove_nodes(g, drop);
  free(readers); free(reader); free(drop);
  return changes;
}
