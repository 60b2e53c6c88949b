/* Add(MatMulBias(A, B, bias), R) -> MatMulBias(A, B, bias, R): the residual
 * Add after a transformer's attention projection or second MLP layer as
 * cuBLASLt's C operand with beta 1 (Y = A B + R + bias, the bias row still
 * in the epilogue; codegen/lower_linalg.c, PLAN_GEMM_F_BIAS_C), so the
 * product is never written and read back by an Add kernel. A MatMul with
 * a 2-D constant weight and no bias gets a zero bias row (N values) for it.
 *
 * Bytes, per [M,N] half tensor T: unfused, the GEMM writes T and the Add
 * reads T and R and writes the sum (4T); fused, the GEMM reads R and writes
 * the sum (2T), one launch fewer, and the sum may take R's bytes (cuBLASLt
 * computes in place). This pass runs late (before fuse_elementwise),
 * after fuse_add_layernorm: where the sum feeds only a LayerNormalization
 * (BERT's post-LN), AddLayerNormalization already took the Add and the two
 * ways move the same bytes (GEMM writes T, the LayerNorm kernel reads T
 * and R: 3T before the LayerNorm's own write; here: the GEMM reads R and
 * writes T, the LayerNorm reads T: 3T), so that measured fusion stays.
 * What is left are the pre-LN models' residuals (GPT-2, ViT), whose sum is
 * read by the next LayerNorm and the next residual: there only this one
 * saves anything. And an Add that fuse_elementwise would group with more
 * elementwise ops after it (a gate, a scale) still saves the GEMM's
 * write and read of T here, so it is taken whatever reads the sum.
 *
 * Conditions: the GEMM has activation 0 (cuBLASLt applies an activation
 * after C is added, which is not act(A B + bias) + R); its output is read
 * only by the Add and is no graph output; R has the Add's output's shape
 * and dtype (no broadcasting) and is not the GEMM's output. Not for
 * training graphs, and not with --prune 2:4 (a sparse GEMM takes no C). */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool same_type(const Tensor *a, const Tensor *b) {
  if (a->dt != b->dt || a->rank != b->rank || !gpuc_shape_known(a) || !gpuc_shape_known(b)) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The GEMM producing y that may take a residual: a MatMulBias with
 * activation 0 and 3 inputs, or a MatMul with a 2-D constant B. */
static int gemm_of(const Graph *g, int y) {
  int p = g->values[y].producer;
  if (p < 0) return -1;
  const Node *n = &g->nodes[p];
  if (n->op == GPUC_OP_MATMULBIAS) return n->nin == 3 && gpuc_attr_i(n, "activation", 0) == 0 ? p : -1;
  if (n->op != GPUC_OP_MATMUL) return -1;
  const Value *b = &g->values[n->in[1]];
  return g->values[n->in[0]].t.rank >= 2 && b->is_const && b->t.data && b->t.rank == 2 && gpuc_dtype_is_float(b->t.dt) ? p : -1;
}

int pass_fuse_residual_gemm(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training || o->prune_kind == GPUC_PRUNE_24) return 0;
  int nn = g->nnodes, changes = 0, rc = -1;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!readers || !drop) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  gpuc_graph_count_readers(g, readers, NULL);
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_ADD || g->nodes[i].nin != 2) continue;
    for (int side = 0; side < 2; side++) {
      const Node *add = &g->nodes[i];
      int y = add->in[side], r = add->in[1 - side], out = add->out[0];
      if (y < 0 || r < 0 || y == r || out < 0 || readers[y] != 1 || g->values[y].is_output) continue;
      int p = gemm_of(g, y);
      if (p < 0 || drop[p] || !same_type(&g->values[y].t, &g->values[out].t) ||
          !same_type(&g->values[r].t, &g->values[out].t))
        continue;
      int bias;
      if (g->nodes[p].op == GPUC_OP_MATMUL) { /* a zero bias row of N values */
        char name[512];
        snprintf(name, sizeof name, "%s.zero_bias", g->nodes[p].name);
        int64_t n = g->values[y].t.dims[g->values[y].t.rank - 1];
        bias = gpuc_linear_new_const(g, name, g->values[y].t.dt, 1, &n, e);
        if (bias < 0) goto done;
        memset(g->values[bias].t.data, 0, gpuc_tensor_bytes(&g->values[bias].t));
      } else {
        bias = g->nodes[p].in[2];
      }
      int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
      size_t len = strlen(g->nodes[p].name) + strlen(g->nodes[i].name) + 3;
      char *name = gpuc_arena_alloc(&g->arena, len);
      if (!in || !name) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
      snprintf(name, len, "%s, %s", g->nodes[p].name, g->nodes[i].name);
      /* the Add becomes the GEMM, in its place: A, B, the bias and R all
       * come before the Add */
      in[0] = g->nodes[p].in[0];
      in[1] = g->nodes[p].in[1];
      in[2] = bias;
      in[3] = r;
      Node *n = &g->nodes[i];
      n->op = GPUC_OP_MATMULBIAS;
      n->name = name;
      n->in = in;
      n->nin = 4;
      n->nattr = 0;
      drop[p] = true;
      changes++;
      break;
    }
  }
  gpuc_graph_remove_nodes(g, drop);
  rc = changes;
done:
  free(readers); free(drop);
  return rc;
}
