/* MatMul(A, B) + bias -> MatMulBias(A, B, bias): the Linear layers PyTorch
 * exports as a MatMul against a 2-D weight followed by an Add of an N-vector.
 * cuBLASLt adds the bias in the GEMM's epilogue, so the [M,N] product is
 * written once instead of written, read and written again.
 * Conditions: B is 2-D; the MatMul's output is read only by the Add and is
 * not a graph output; the Add's other input holds N values shaped [N] or
 * [1,..,1,N] of the same dtype (so the Add's output has the MatMul's shape).
 * A MatMul with a 2-D constant B that only a Relu or Gelu reads (a Linear
 * layer exported without its bias, or whose zero bias the exporter
 * dropped) becomes MatMulBias with a zero bias row, so fuse_gemm_act can
 * put the activation in the epilogue (not for training graphs). */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the N-value zero bias row of a MatMul's output yt, or -1 */
static int zero_bias(Graph *g, const Node *mm, const Tensor *yt, GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.zero_bias", mm->name);
  int64_t n = yt->dims[yt->rank - 1];
  GpucDType dt = yt->dt;
  int b = gpuc_linear_new_const(g, name, dt, 1, &n, e);
  if (b >= 0) memset(g->values[b].t.data, 0, gpuc_tensor_bytes(&g->values[b].t));
  return b;
}

static bool bias_row(const Tensor *bias, const Tensor *y) {
  if (bias->dt != y->dt || bias->rank < 1 || bias->rank > y->rank || !gpuc_shape_known(bias)) return false;
  for (int d = 0; d + 1 < bias->rank; d++)
    if (bias->dims[d] != 1) return false;
  return bias->dims[bias->rank - 1] == y->dims[y->rank - 1];
}

int pass_fuse_matmul_bias(Graph *g, const PassOptions *o, GpucErr *e) {
  int nn = g->nnodes, changes = 0;
  int *uses = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  int *user = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!uses || !user || !drop) { free(uses); free(user); free(drop); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, uses, user);
  for (int i = 0; i < nn; i++) {
    Node *mm = &g->nodes[i];
    if (mm->op != GPUC_OP_MATMUL || mm->out[0] < 0) continue;
    int y = mm->out[0];
    const Tensor *yt = &g->values[y].t, *bt = &g->values[mm->in[1]].t;
    if (bt->rank != 2 || !gpuc_shape_known(yt) || yt->rank < 1 || !gpuc_dtype_is_float(yt->dt)) continue;
    if (uses[y] != 1 || g->values[y].is_output) continue;
    Node *add = &g->nodes[user[y]];
    GpucOp rop = add->op;
    if ((rop == GPUC_OP_RELU || rop == GPUC_OP_GELU) && !o->training && g->values[mm->in[1]].is_const) {
      /* the MatMul stays in place; only its op and inputs change */
      Tensor yv = *yt;
      int bias = zero_bias(g, mm, &yv, e), *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
      if (bias < 0 || !in) {
        free(uses); free(user); free(drop);
        return bias < 0 ? -1 : gpuc_err_set(e, "%s: out of memory", g->path);
      }
      mm = &g->nodes[i];
      in[0] = mm->in[0]; in[1] = mm->in[1]; in[2] = bias;
      mm->op = GPUC_OP_MATMULBIAS;
      mm->in = in;
      mm->nin = 3;
      changes++;
      continue;
    }
    if (add->op != GPUC_OP_ADD || add->in[0] == add->in[1]) continue;
    int bias = add->in[0] == y ? add->in[1] : add->in[0];
    const Tensor *out = &g->values[add->out[0]].t;
    if (!bias_row(&g->values[bias].t, yt) || out->rank != yt->rank) continue;
    /* the Add becomes the MatMulBias, in the Add's place: A, B and the
     * bias are all computed before it */
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
    if (!in) { free(uses); free(user); free(drop); return gpuc_err_set(e, "%s: out of memory", g->path); }
    in[0] = mm->in[0];
    in[1] = mm->in[1];
    in[2] = bias;
    add->op = GPUC_OP_MATMULBIAS;
    add->in = in;
    add->nin = 3;
    drop[i] = true;
    changes++;
  }
  gpuc_graph_remove_nodes(g, drop); /* the absorbed MatMuls */
  free(uses); free(user); free(drop);
  return changes;
}
