/* BatchNormalization (inference) that no Conv absorbed (fold_bn.c) ->
 * Mul(x, k) then Add(., c) per channel:
 *   y = (x - mean) * gamma / sqrt(var + eps) + beta = x * k + c,
 *   k = gamma / sqrt(var + eps), c = beta - mean * k   (f64, stored in x's dtype)
 * k and c are constants [C,1,..,1] (broadcast over x [N,C,...]). As two
 * elementwise ops they join fusion groups (CoAtNet's pre-norm BN and the
 * SiLU after it: one kernel) and NHWC regions (layout_nhwc.c re-lays
 * per-channel constants), where a BatchNormalization node ended both.
 * Conditions: training_mode 0, Y the only output used, gamma/beta/mean/var
 * constants of C elements, x of known rank >= 2 and float dtype; not in a
 * training graph (the BN's parameters are being trained there). */
#include "passes.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Value *param(const Graph *g, const Node *n, int k, int64_t C) {
  if (k >= n->nin || n->in[k] < 0) return NULL;
  const Value *v = &g->values[n->in[k]];
  return v->is_const && v->t.data && gpuc_dtype_is_float(v->t.dt) && gpuc_numel(&v->t) == C ? v : NULL;
}

int pass_batchnorm_affine(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0;
  int changes = 0, nn = g->nnodes;
  for (int i = 0; i < nn; i++) {
    Node *bn = &g->nodes[i];
    if (bn->op != GPUC_OP_BATCHNORMALIZATION || bn->in[0] < 0 || bn->out[0] < 0 ||
        gpuc_attr_i(bn, "training_mode", 0))
      continue;
    bool extra_out = false;
    for (int k = 1; k < bn->nout; k++) extra_out |= bn->out[k] >= 0;
    const Tensor *x = &g->values[bn->in[0]].t;
    if (extra_out || x->rank < 2 || !gpuc_shape_known(x) || !gpuc_dtype_is_float(x->dt)) continue;
    int64_t C = x->dims[1];
    if (!param(g, bn, 1, C) || !param(g, bn, 2, C) || !param(g, bn, 3, C) || !param(g, bn, 4, C)) continue;
    int rank = x->rank;
    GpucDType dt = x->dt;
    char name[512];
    int vals[3];
    const char *suffix[3] = {"bn_scale", "bn_shift", "bn_scaled"};
    for (int k = 0; k < 3; k++) {
      snprintf(name, sizeof name, "%s.%s", bn->name, suffix[k]);
      if ((vals[k] = gpuc_graph_add_value(g, name)) < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
      bn = &g->nodes[i]; /* adding values may move the array */
    }
    snprintf(name, sizeof name, "%s.shift", bn->name);
    int ai = gpuc_graph_add_node(g, GPUC_OP_ADD, name, 2, 1);
    if (ai < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
    bn = &g->nodes[i];
    int64_t dims[GPUC_MAX_RANK];
    dims[0] = C;
    for (int d = 1; d < rank - 1; d++) dims[d] = 1;
    Value *kv = &g->values[vals[0]], *cv = &g->values[vals[1]];
    gpuc_set_shape(&kv->t, dt, rank - 1, dims);
    gpuc_set_shape(&cv->t, dt, rank - 1, dims);
    if (gpuc_tensor_alloc(&kv->t, e) || gpuc_tensor_alloc(&cv->t, e)) return -1;
    kv->is_const = cv->is_const = true;
    const Tensor *gam = &g->values[bn->in[1]].t, *bet = &g->values[bn->in[2]].t,
                 *mean = &g->values[bn->in[3]].t, *var = &g->values[bn->in[4]].t;
    double eps = gpuc_attr_f(bn, "epsilon", 1e-5f);
    for (int64_t c = 0; c < C; c++) {
      double k = gpuc_get_f64(gam, c) / sqrt(gpuc_get_f64(var, c) + eps);
      gpuc_set_f64(&kv->t, c, k);
      gpuc_set_f64(&cv->t, c, gpuc_get_f64(bet, c) - gpuc_get_f64(mean, c) * k);
    }
    int xin = bn->in[0], y = bn->out[0], mid = vals[2];
    g->values[mid].t = g->values[xin].t; /* not *x: adding values may have moved the array */
    g->values[mid].t.data = NULL;
    /* the BN node becomes the Mul (its name stays), then the Add writes y */
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
    if (!in) return gpuc_err_set(e, "%s: out of memory", g->path);
    in[0] = xin;
    in[1] = vals[0];
    bn->op = GPUC_OP_MUL;
    bn->in = in;
    bn->nin = 2;
    bn->nout = 1;
    bn->out[0] = mid;
    bn->nattr = 0;
    g->values[mid].producer = i;
    Node *add = &g->nodes[ai];
    add->in[0] = mid;
    add->in[1] = vals[1];
    add->out[0] = y;
    g->values[y].producer = ai;
    changes++;
  }
  return changes && gpuc_graph_toposort(g, e) ? -1 : changes;
}
