/* BatchNormalization (inference) folded into the Conv before it:
 *   y = (conv(x, W) + B - mean) * gamma / sqrt(var + eps) + beta
 *     = conv(x, W * k) + (B - mean) * k + beta,   k = gamma / sqrt(var + eps)
 * per output channel. Needs constant W/B/BN parameters, a Conv output read
 * only by the BN, and BN in inference mode (one output). Computed in f64,
 * stored in the weights' dtype. */
#include "passes.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Value *const_in(const Graph *g, const Node *n, int k) {
  if (k >= n->nin || n->in[k] < 0) return NULL;
  const Value *v = &g->values[n->in[k]];
  return v->is_const && v->t.data && gpuc_dtype_is_float(v->t.dt) ? v : NULL;
}

int pass_fold_batchnorm(Graph *g, const PassOptions *o, GpucErr *e) {
  int changes = 0;
  bool *drop = calloc((size_t)g->nnodes + 1, 1);
  /* readers of the original values: the pass rewires no node's inputs */
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!drop || !readers) { free(drop); free(readers); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, NULL);
  for (int i = 0; i < g->nnodes; i++) {
    Node *bn = &g->nodes[i];
    if (bn->op != GPUC_OP_BATCHNORMALIZATION || bn->in[0] < 0) continue;
    if (gpuc_attr_i(bn, "training_mode", 0)) continue;
    bool extra_out = false;
    for (int k = 1; k < bn->nout; k++) extra_out |= bn->out[k] >= 0;
    if (extra_out) continue;
    int cv = g->values[bn->in[0]].producer;
    if (cv < 0 || g->nodes[cv].op != GPUC_OP_CONV) continue;
    Node *conv = &g->nodes[cv];
    const Value *W = const_in(g, conv, 1), *B = conv->nin > 2 ? const_in(g, conv, 2) : NULL;
    const Value *gam = const_in(g, bn, 1), *bet = const_in(g, bn, 2), *mean = const_in(g, bn, 3),
                *var = const_in(g, bn, 4);
    if (!W || !gam || !bet || !mean || !var || (conv->nin > 2 && conv->in[2] >= 0 && !B)) continue;
    if (readers[conv->out[0]] != 1 || g->values[conv->out[0]].is_output) continue;
    int64_t M = W->t.dims[0];
    if (W->t.rank < 3 || gpuc_numel(&gam->t) != M || gpuc_numel(&bet->t) != M ||
        gpuc_numel(&mean->t) != M || gpuc_numel(&var->t) != M || (B && gpuc_numel(&B->t) != M))
      continue;
    double eps = gpuc_attr_f(bn, "epsilon", 1e-5f);
    /* new constants: W' and B' */
    char name[512];
    snprintf(name, sizeof name, "%s.bnfold_w", conv->name);
    int wv = gpuc_graph_add_value(g, name);
    snprintf(name, sizeof name, "%s.bnfold_b", conv->name);
    int bv = wv < 0 ? -1 : gpuc_graph_add_value(g, name);
    if (bv < 0) { free(drop); free(readers); return gpuc_err_set(e, "%s: out of memory", g->path); }
    /* add_value may move the values array: refetch */
    bn = &g->nodes[i];
    conv = &g->nodes[cv];
    W = &g->values[conv->in[1]];
    B = conv->nin > 2 && conv->in[2] >= 0 ? &g->values[conv->in[2]] : NULL;
    gam = &g->values[bn->in[1]]; bet = &g->values[bn->in[2]];
    mean = &g->values[bn->in[3]]; var = &g->values[bn->in[4]];
    Value *nw = &g->values[wv], *nb = &g->values[bv];
    nw->t = W->t;
    nw->t.data = NULL;
    gpuc_set_shape(&nb->t, W->t.dt, 1, &M);
    if (gpuc_tensor_alloc(&nw->t, e) || gpuc_tensor_alloc(&nb->t, e)) { free(drop); free(readers); return -1; }
    int64_t per = gpuc_numel(&W->t) / (M ? M : 1);
    for (int64_t m = 0; m < M; m++) {
      double k = gpuc_get_f64(&gam->t, m) / sqrt(gpuc_get_f64(&var->t, m) + eps);
      for (int64_t j = 0; j < per; j++)
        gpuc_set_f64(&nw->t, m * per + j, gpuc_get_f64(&W->t, m * per + j) * k);
      double b0 = B ? gpuc_get_f64(&B->t, m) : 0;
      gpuc_set_f64(&nb->t, m, (b0 - gpuc_get_f64(&mean->t, m)) * k + gpuc_get_f64(&bet->t, m));
    }
    nw->is_const = nb->is_const = true;
    nw->is_param = nb->is_param = true;
    /* the Conv takes W', B' and writes the BN's output; the BN node is
     * dropped below */
    if (conv->nin < 3) {
      int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
      if (!in) { free(drop); free(readers); return gpuc_err_set(e, "%s: out of memory", g->path); }
      in[0] = conv->in[0];
      conv->in = in;
      conv->nin = 3;
    }
    conv->in[1] = wv;
    conv->in[2] = bv;
    int y = bn->out[0];
    g->values[conv->out[0]].producer = -1; /* orphaned: only the BN read it */
    conv->out[0] = y;
    drop[i] = true;
    changes++;
  }
  gpuc_graph_remove_nodes(g, drop);
  free(drop);
  free(readers);
  return changes;
}
