/* Linear layers exported as a 2-D Gemm between Reshapes that flatten the
 * batch and restore it (GPT-2's Conv1D, torchvision's attention out_proj)
 * -> MatMul / MatMulBias on the activation's own shape, so the fusions
 * written for MatMulBias (the activation epilogue, the residual through
 * C, attention's head splits) see them:
 *
 *   Reshape(Gemm(Reshape(x, [M,K]), B, C?), [d0,..,dr-2, N])
 *     -> MatMul(x, B') or MatMulBias(x, B', C), writing the outer
 *        Reshape's value
 *
 * where x is [d0,..,dr-2, K] and M = d0*..*dr-2; the Gemm has transA 0
 * and alpha 1, B a constant 2-D weight, and C is absent, or an N-row ([N]
 * or [1,N]) with beta 1. B' is B, or for transB 1 a new constant holding B
 * transposed to [K,N]. A 2-D B folds the batch into M anyway
 * (codegen/lower_linalg.c), so the GEMM is the same; what follows it now
 * reads it directly. A Gemm without such Reshapes around it stays a Gemm
 * (its lowering has the bias epilogue already).
 * Conditions: the Gemm's output is read only by the outer Reshape and is
 * no graph output; the inner Reshape stays when something else reads it.
 * Not with --int8/--fp8 (their passes take Gemm's [N,K] weight as it is
 * and name the layer by its ONNX op). Runs at -O2 before fuse_matmul. */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool const_weight(const Graph *g, int v) {
  const Value *w = &g->values[v];
  return w->is_const && w->t.data && w->t.rank == 2 && gpuc_dtype_is_float(w->t.dt) && gpuc_shape_known(&w->t);
}

static int unflatten(Graph *g, int i, const int *readers, const int *reader, bool *drop, bool apply, GpucErr *e);

/* the Gemm at node i as a MatMul/MatMulBias (the same inputs, B' for B);
 * 1 when rewritten */
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

/* The Reshapes around node i dropped, x and the outer Reshape's value its
 * input and output; with apply false only whether that is possible. When
 * x has other leading dims ([B,S,H,D] flattened to [B*S, H*D]: the head
 * merge before an attention's output projection) and the inner Reshape is
 * read only here, that Reshape is kept but made to give [d0,..,dr-2, K].
 * -1 on error. */
static int unflatten(Graph *g, int i, const int *readers, const int *reader, bool *drop, bool apply, GpucErr *e) {
  Node *n = &g->nodes[i];
  int av = n->in[0], y = n->out[0];
  if (y < 0 || g->values[n->in[1]].t.rank != 2 || readers[y] != 1 || g->values[y].is_output) return 0;
  int pa = g->values[av].producer, pr = reader[y];
  if (pa < 0 || drop[pa] || g->nodes[pa].op != GPUC_OP_RESHAPE || drop[pr] || g->nodes[pr].op != GPUC_OP_RESHAPE)
    return 0;
  int x = g->nodes[pa].in[0], out = g->nodes[pr].out[0];
  const Tensor *xt = &g->values[x].t, *at = &g->values[av].t, *ot = &g->values[out].t, *yt = &g->values[y].t;
  if (!gpuc_shape_known(xt) || !gpuc_shape_known(ot) || !gpuc_shape_known(at) || !gpuc_shape_known(yt) ||
      xt->rank < 2 || at->rank != 2 || ot->rank < 2 || xt->dt != at->dt ||
      ot->dims[ot->rank - 1] != yt->dims[yt->rank - 1])
    return 0;
  bool same = ot->rank == xt->rank && xt->dims[xt->rank - 1] == at->dims[1];
  int64_t m = 1, mo = 1;
  for (int d = 0; d + 1 < ot->rank; d++) {
    same = same && ot->dims[d] == xt->dims[d];
    mo *= ot->dims[d];
  }
  for (int d = 0; d + 1 < xt->rank; d++) m *= xt->dims[d];
  bool retarget = !same && mo == at->dims[0] && readers[av] == 1 && !g->values[av].is_output && mo > 0;
  if (!(same && m == at->dims[0]) && !retarget) return 0;
  if (!apply) return 1;
  if (retarget) { /* the inner Reshape gives [d0,..,dr-2, K] */
    int r = ot->rank;
    int64_t dims[GPUC_MAX_RANK], K = at->dims[1];
    GpucDType dt = at->dt;
    for (int d = 0; d + 1 < r; d++) dims[d] = ot->dims[d];
    dims[r - 1] = K;
    char name[512];
    snprintf(name, sizeof name, "%s.unflat_shape", g->nodes[pa].name);
    int64_t nr = r;
    int sv = gpuc_linear_new_const(g, name, GPUC_DT_I64, 1, &nr, e);
    if (sv < 0) return -1;
    for (int d = 0; d < r; d++) gpuc_set_i64(&g->values[sv].t, d, dims[d]);
    int *rin = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
    if (!rin) return gpuc_err_set(e, "%s: out of memory", g->path);
    rin[0] = x;
    rin[1] = sv;
    g->nodes[pa].in = rin;
    g->nodes[pa].nin = 2;
    gpuc_set_shape(&g->values[av].t, dt, r, dims);
    x = av;
  }
  n = &g->nodes[i];
  /* the MatMul moves to the outer Reshape's place: x and its other inputs
   * come before it, and so it comes before every reader of out */
  drop[pr] = true;
  if (x != av && readers[av] == 1 && !g->values[av].is_output) drop[pa] = true;
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
  if (o->training || o->int8 || o->fp8) return 0;
  int nn = g->nnodes, changes = 0, rc = -1;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!readers || !reader || !drop) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_GEMM || drop[i] || unflatten(g, i, readers, reader, drop, false, e) != 1) continue;
    int r = gemm_to_matmul(g, i, e); /* adds a value (B'): the counts above stay right for the old ones */
    if (r < 0) goto done;
    if (r && (r = unflatten(g, i, readers, reader, drop, true, e)) < 0) goto done;
    changes += r;
  }
  gpuc_graph_remove_nodes(g, drop);
  rc = changes;
done:
  free(readers); free(reader); free(drop);
  return rc;
}
