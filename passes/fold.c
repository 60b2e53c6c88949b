/* Constant folding: a node whose inputs are all constants is evaluated once
 * with its reference kernel and replaced by constant values, when each
 * output is at most o->fold_max_bytes (a hostile ConstantOfShape must not
 * make the compiler allocate gigabytes: bigger results stay as nodes and
 * are computed, and refused, at run time). Shape chains (Shape -> Gather ->
 * Concat -> Reshape) fold away once input shapes are bound: each node is
 * inferred again just before it is looked at, so a chain whose every link
 * waits on the one before folds in one sweep (a fixed point of whole-graph
 * fold/infer rounds moved one link a round and stopped, capped, in the
 * middle of a 12-layer transformer). */
#include "passes.h"
#include "ref.h"
#include <stdlib.h>
#include <string.h>

static bool foldable(const Graph *g, const Node *n, const PassOptions *o) {
  bool shape_only = gpuc_ops[n->op].flags & GPUC_OPF_SHAPE;
  for (int k = 0; k < n->nin; k++) {
    if (n->in[k] < 0) continue;
    const Value *v = &g->values[n->in[k]];
    /* Shape/Size need only a known shape, not known values */
    if (shape_only ? !gpuc_shape_known(&v->t) : !v->is_const) return false;
  }
  for (int k = 0; k < n->nout; k++) {
    if (n->out[k] < 0) continue;
    const Tensor *t = &g->values[n->out[k]].t;
    if (!gpuc_shape_known(t) || t->dt == GPUC_DT_UNDEF) return false;
    if ((int64_t)gpuc_tensor_bytes(t) > o->fold_max_bytes) return false;
    if (g->values[n->out[k]].is_output) return false; /* keep outputs computed */
  }
  return true;
}

int pass_fold_constants(Graph *g, const PassOptions *o, GpucErr *e) {
  int changes = 0, kept = 0;
  const Tensor *ins[GPUC_MAX_IO];
  Tensor *outs[GPUC_MAX_IO];
  Tensor shape_only_in[GPUC_MAX_IO];
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    /* inputs folded earlier in this sweep may have made the shape known */
    if (gpuc_node_infer(g, i, e)) return -1;
    if (!foldable(g, n, o)) {
      g->nodes[kept] = *n;
      for (int k = 0; k < n->nout; k++)
        if (n->out[k] >= 0) g->values[n->out[k]].producer = kept;
      kept++;
      continue;
    }
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k] < 0) { ins[k] = NULL; continue; }
      shape_only_in[k] = g->values[n->in[k]].t; /* Shape/Size read no data */
      ins[k] = &shape_only_in[k];
    }
    if (gpuc_ref_run_node(g, n, ins, outs, e)) return -1;
    for (int k = 0; k < n->nout; k++) {
      if (n->out[k] < 0) continue;
      Value *v = &g->values[n->out[k]];
      free(v->t.data);
      v->t = *outs[k];
      free(outs[k]);               /* the struct; v owns the data now */
      v->is_const = true;
      v->producer = -1;
    }
    /* the node is gone: its attribute tensors (ConstantOfShape's value) too */
    for (int k = 0; k < n->nattr; k++) { gpuc_tensor_free(n->attrs[k].t); n->attrs[k].t = NULL; }
    changes++;
  }
  g->nnodes = kept;
  return changes;
}
