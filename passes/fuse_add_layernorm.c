/* Add(A, B) -> LayerNormalization => AddLayerNormalization(A, B, Scale, Bias?):
 * the residual Add before each LayerNormalization of a post-LN transformer
 * (BERT: twice per layer). The kernel adds A and B as it loads the row, so
 * the sum is never written to memory and read back, and one launch goes.
 * Conditions: the LayerNormalization's Mean and InvStdDev outputs are
 * absent or unread; its X is the Add's output, read by nothing else and
 * not a graph output; A, B and X have one dtype and one known shape (no
 * broadcasting). The fused node takes both names ("add, layernorm"), which
 * `gpuc inspect` lists for its step. */
#include "passes.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool same_shape(const Tensor *a, const Tensor *b) {
  if (a->dt != b->dt || a->rank != b->rank || !gpuc_shape_known(a) || !gpuc_shape_known(b)) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* Output k of n is absent, or nothing reads it. */
static bool unused_out(const Graph *g, const Node *n, int k, const int *uses) {
  if (k >= n->nout || n->out[k] < 0) return true;
  return uses[n->out[k]] == 0 && !g->values[n->out[k]].is_output;
}

int pass_fuse_add_layernorm(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0;
  int *uses = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!uses || !drop) { free(uses); free(drop); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, uses, NULL);
  for (int i = 0; i < nn; i++) {
    Node *ln = &g->nodes[i];
    if (ln->op != GPUC_OP_LAYERNORMALIZATION || !unused_out(g, ln, 1, uses) || !unused_out(g, ln, 2, uses))
      continue;
    int x = ln->in[0], p = x >= 0 ? g->values[x].producer : -1;
    if (p < 0 || drop[p] || g->nodes[p].op != GPUC_OP_ADD || uses[x] != 1 || g->values[x].is_output) continue;
    const Node *add = &g->nodes[p];
    const Tensor *xt = &g->values[x].t;
    if (!gpuc_dtype_is_float(xt->dt) || !same_shape(&g->values[add->in[0]].t, xt) ||
        !same_shape(&g->values[add->in[1]].t, xt))
      continue;
    /* the LayerNormalization becomes the fused node, in its place: A and B
     * are computed before the Add, so before it */
    size_t len = strlen(add->name) + strlen(ln->name) + 3;
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
    char *name = gpuc_arena_alloc(&g->arena, len);
    if (!in || !name) { free(uses); free(drop); return gpuc_err_set(e, "%s: out of memory", g->path); }
    snprintf(name, len, "%s, %s", add->name, ln->name);
    in[0] = add->in[0];
    in[1] = add->in[1];
    in[2] = ln->in[1];
    in[3] = ln->nin > 2 ? ln->in[2] : -1;
    ln->op = GPUC_OP_ADDLAYERNORMALIZATION;
    ln->name = name;
    ln->in = in;
    ln->nin = in[3] >= 0 ? 4 : 3;
    ln->nout = 1; /* Mean and InvStdDev: unread, no longer written */
    drop[p] = true;
    changes++;
  }
  gpuc_graph_remove_nodes(g, drop); /* the absorbed Adds */
  free(uses); free(drop);
  return changes;
}
