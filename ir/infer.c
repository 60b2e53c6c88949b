/* Graph-level dtype/shape inference: runs each op's infer function in
 * topological order with constant data where the IR knows it. */
#include "infer_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gpuc_infer_unknown(OpCtx *c, int o, GpucDType dt) {
  if (o < c->nout && c->out[o]) {
    c->out[o]->dt = dt;
    c->out[o]->rank = -1;
  }
  return 0;
}

void gpuc_set_shape(Tensor *t, GpucDType dt, int rank, const int64_t *dims) {
  t->dt = dt;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
}

int gpuc_infer_same(OpCtx *c, int o, int i) {
  if (o >= c->nout || !c->out[o]) return 0;
  const Tensor *x = c->in[i];
  gpuc_set_shape(c->out[o], x->dt, x->rank, x->dims);
  return 0;
}

int gpuc_infer_broadcast(OpCtx *c, int first, int count, Tensor *out) {
  int rank = 0;
  for (int k = first; k < first + count && k < c->nin; k++) {
    if (!c->in[k]) continue;
    if (c->in[k]->rank < 0) { out->rank = -1; return 0; }
    if (c->in[k]->rank > rank) rank = c->in[k]->rank;
  }
  int64_t dims[GPUC_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = 1;
  for (int d = 0; d < rank; d++) {
    bool unknown = false;
    for (int k = first; k < first + count && k < c->nin; k++) {
      const Tensor *t = c->in[k];
      if (!t) continue;
      int off = rank - t->rank;
      if (d < off) continue;
      int64_t v = t->dims[d - off];
      if (v < 0) { unknown = true; continue; }
      if (v == 1) continue;
      if (dims[d] == 1) dims[d] = v;
      else if (dims[d] != v) {
        char a[128], b[128];
        gpuc_shape_str(c->in[first], a, sizeof a);
        gpuc_shape_str(t, b, sizeof b);
        return gpuc_op_fail(c, "shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", a, b,
                            d, (long long)dims[d], (long long)v);
      }
    }
    if (unknown && dims[d] == 1) dims[d] = -1;
  }
  out->rank = rank;
  for (int d = 0; d < rank; d++) out->dims[d] = dims[d];
  return 0;
}

int gpuc_norm_axis(OpCtx *c, int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank || (rank == 0 && axis != 0 && axis != -1))
    return gpuc_op_fail(c, "axis %lld out of range for rank %d", (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return 0;
}

int gpuc_read_ints(OpCtx *c, int i, int64_t *buf, int max) {
  const Tensor *t = c->in[i];
  if (!t || !t->data) return gpuc_op_fail(c, "input %d must be known", i);
  if (!gpuc_dtype_is_int(t->dt)) return gpuc_op_fail(c, "input %d must be an integer tensor", i);
  if (t->rank > 1) return gpuc_op_fail(c, "input %d must be 0-D or 1-D", i);
  int64_t n = gpuc_numel(t);
  if (n < 0 || n > max) return gpuc_op_fail(c, "input %d has %lld values, at most %d allowed",
                                            i, (long long)n, max);
  for (int64_t k = 0; k < n; k++) buf[k] = gpuc_get_i64(t, k);
  return (int)n;
}

int gpuc_check_dtype(OpCtx *c, int i, const GpucDType *allowed) {
  if (!gpuc_has_in(c, i)) return 0;
  for (const GpucDType *a = allowed; *a != GPUC_DT_UNDEF; a++)
    if (c->in[i]->dt == *a) return 0;
  return gpuc_op_unsupported(c, "input %d has dtype %s, which this op does not support", i,
                             gpuc_dtype_name(c->in[i]->dt));
}

void gpuc_strides(const Tensor *t, int64_t *strides) {
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) { strides[i] = s; s *= t->dims[i]; }
}

/* A known shape whose element count or byte size overflows int64, or,
 * with `cap`, whose size is past the single-tensor cap: describe it into
 * why and return true. Overflow is refused at import, so later stages never
 * see sizes that overflow. The cap applies at import to graph inputs and
 * outputs (they exist in memory whatever the passes do, so `inspect`
 * rejects a model the executor could never run: a ConstantOfShape or Tile
 * of terabytes); an intermediate value over it is refused only if it
 * survives the passes (gpuc_graph_check_sizes), since fusion can remove it:
 * the [B,H,S,S] scores of a long-sequence attention never exist once it is
 * one Attention node. */
static bool too_big(const Tensor *t, bool cap, char *why, size_t n) {
  if (!gpuc_shape_known(t)) return false;
  char s[160];
  gpuc_shape_str(t, s, sizeof s);
  int64_t numel = gpuc_numel(t);
  size_t es = gpuc_dtype_size(t->dt);
  if (numel < 0 || (es && numel > INT64_MAX / (int64_t)es)) {
    snprintf(why, n, "shape %s: element count or byte size overflows int64", s);
    return true;
  }
  if (cap && es && numel > GPUC_MAX_TENSOR_BYTES / (int64_t)es) {
    snprintf(why, n, "shape %s (%s) needs %.3g GB, over the %lld MiB limit for one tensor", s,
             gpuc_dtype_name(t->dt), (double)numel * (double)es / 1e9,
             (long long)(GPUC_MAX_TENSOR_BYTES >> 20));
    return true;
  }
  return false;
}

/* One node: its outputs' dtype/shape from its inputs as they are now. */
int gpuc_node_infer(Graph *g, int i, GpucErr *e) {
  const Tensor *ins[GPUC_MAX_IO];
  Tensor *outs[GPUC_MAX_IO];
  char why[256];
  Node *n = &g->nodes[i];
  OpCtx c = {.g = g, .n = n, .nin = n->nin, .nout = n->nout, .in = ins, .out = outs,
             .err = e, .runtime = false};
  bool rank_known = true;
  for (int k = 0; k < n->nin; k++) {
    ins[k] = n->in[k] >= 0 ? &g->values[n->in[k]].t : NULL;
    if (ins[k] && ins[k]->rank < 0) rank_known = false;
  }
  for (int k = 0; k < n->nout; k++) outs[k] = n->out[k] >= 0 ? &g->values[n->out[k]].t : NULL;
  if (!rank_known) {
    /* Inputs of unknown rank: leave the outputs unknown; the executor
     * infers them with real data at run time. */
    for (int k = 0; k < n->nout; k++)
      if (outs[k]) { outs[k]->rank = -1; outs[k]->dt = GPUC_DT_UNDEF; }
    return 0;
  }
  if (gpuc_ops[n->op].infer(&c)) return -1;
  for (int k = 0; k < n->nout; k++)
    if (outs[k] && too_big(outs[k], g->values[n->out[k]].is_output, why, sizeof why))
      return gpuc_op_fail(&c, "output %d: %s", k, why);
  return 0;
}

int gpuc_graph_check_sizes(const Graph *g, GpucErr *e) {
  char why[256];
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    for (int k = 0; k < n->nout; k++) {
      if (n->out[k] < 0 || !too_big(&g->values[n->out[k]].t, true, why, sizeof why)) continue;
      OpCtx c = {.g = g, .n = n, .nin = n->nin, .nout = n->nout, .err = e};
      return gpuc_op_fail(&c, "output %d: %s", k, why);
    }
  }
  return 0;
}

int gpuc_graph_infer(Graph *g, GpucErr *e) {
  char why[256];
  for (int k = 0; k < g->ninputs; k++) {
    const Value *v = &g->values[g->inputs[k]];
    if (too_big(&v->t, true, why, sizeof why))
      return gpuc_err_set(e, "%s: input '%s': %s", g->path, v->name, why);
  }
  for (int i = 0; i < g->nnodes; i++)
    if (gpuc_node_infer(g, i, e)) return -1;
  return 0;
}
