/* Dead-code elimination and Identity/Dropout(inference)/same-dtype Cast removal. */
#include "passes.h"
#include <stdlib.h>
#include <string.h>

/* Remove nodes none of whose outputs reach a graph output. Walks backwards
 * from the outputs, so chains of dead nodes go in one pass. */
int pass_dead_code(Graph *g, const PassOptions *o, GpucErr *e) {
  bool *live = calloc((size_t)g->nvalues + 1, 1);
  bool *keep = calloc((size_t)g->nnodes + 1, 1);
  if (!live || !keep) { free(live); free(keep); return gpuc_err_set(e, "%s: out of memory", g->path); }
  for (int k = 0; k < g->noutputs; k++) live[g->outputs[k]] = true;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const Node *n = &g->nodes[i];
    for (int k = 0; k < n->nout; k++)
      if (n->out[k] >= 0 && live[n->out[k]]) keep[i] = true;
    if (keep[i])
      for (int k = 0; k < n->nin; k++)
        if (n->in[k] >= 0) live[n->in[k]] = true;
  }
  for (int i = 0; i < g->nnodes; i++) keep[i] = !keep[i]; /* now: drop */
  int removed = gpuc_graph_remove_nodes(g, keep);
  /* constants nothing reads any more: release their data */
  for (int v = 0; v < g->nvalues; v++)
    if (g->values[v].is_const && !live[v] && !g->values[v].is_output && g->values[v].t.data) {
      free(g->values[v].t.data);
      g->values[v].t.data = NULL;
      g->values[v].is_const = false; /* now an orphan nobody reads */
    }
  free(live);
  free(keep);
  return removed;
}

/* a Pad of zeros on every side (Swin's window padding when the image is a
 * whole number of windows: the amounts fold to constant zeros): its output
 * is its input, same static shape */
static bool zero_pad(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_PAD || n->in[0] < 0 || n->out[0] < 0) return false;
  const Tensor *x = &g->values[n->in[0]].t, *y = &g->values[n->out[0]].t;
  if (!gpuc_shape_known(x) || !gpuc_shape_known(y) || x->rank != y->rank || x->dt != y->dt) return false;
  for (int d = 0; d < x->rank; d++)
    if (x->dims[d] != y->dims[d]) return false;
  if (g->opset < 11) { /* pads an attribute */
    const int64_t *p;
    int np = gpuc_attr_ints(n, "pads", &p);
    for (int i = 0; i < np; i++)
      if (p[i]) return false;
    return np >= 0;
  }
  if (n->nin < 2 || n->in[1] < 0) return false;
  const Value *pv = &g->values[n->in[1]];
  if (!pv->is_const || !pv->t.data || (pv->t.dt != GPUC_DT_I64 && pv->t.dt != GPUC_DT_I32)) return false;
  for (int64_t i = 0; i < gpuc_numel(&pv->t); i++)
    if (gpuc_get_i64(&pv->t, i)) return false;
  return true;
}

/* a Slice (opset >= 10) that keeps every element: same static shape,
 * steps absent or all 1 (a step -1 would reverse). Swin's crop of the
 * window padding when there was none. */
static bool whole_slice(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_SLICE || g->opset < 10 || n->in[0] < 0 || n->out[0] < 0) return false;
  const Tensor *x = &g->values[n->in[0]].t, *y = &g->values[n->out[0]].t;
  if (!gpuc_shape_known(x) || !gpuc_shape_known(y) || x->rank != y->rank || x->dt != y->dt) return false;
  for (int d = 0; d < x->rank; d++)
    if (x->dims[d] != y->dims[d]) return false;
  if (n->nin < 5 || n->in[4] < 0) return true;
  const Value *sv = &g->values[n->in[4]];
  if (!sv->is_const || !sv->t.data || (sv->t.dt != GPUC_DT_I64 && sv->t.dt != GPUC_DT_I32)) return false;
  for (int64_t i = 0; i < gpuc_numel(&sv->t); i++)
    if (gpuc_get_i64(&sv->t, i) != 1) return false;
  return true;
}

/* Binary and variadic ops whose inputs broadcast both ways (numpy rules,
 * opset >= 7): an Expand feeding one of them can be skipped. */
static bool broadcasts(GpucOp op) {
  switch (op) {
  case GPUC_OP_ADD: case GPUC_OP_SUB: case GPUC_OP_MUL: case GPUC_OP_DIV: case GPUC_OP_POW:
  case GPUC_OP_WHERE: case GPUC_OP_MAX: case GPUC_OP_MIN:
    return true;
  default:
    return false;
  }
}

/* Input k of n is an Expand's output: when n's inputs, with the Expand's
 * own input in its place, still broadcast to n's output shape, n reads that
 * input and broadcasts it itself. timm's ECA gate, x * sigmoid(...).
 * expand_as(x), otherwise writes and reads a full-size copy of a [B,C,1,1]
 * gate (51 MB at eca_nfnet_l0 b32). Returns the value n should read. */
static int skip_expand(const Graph *g, const Node *n, int k) {
  int v = n->in[k];
  int p = g->values[v].producer;
  if (p < 0 || g->nodes[p].op != GPUC_OP_EXPAND || g->nodes[p].in[0] < 0) return v;
  int y = g->nodes[p].in[0];
  const Tensor *out = &g->values[n->out[0]].t;
  if (g->values[y].t.dt != g->values[v].t.dt || !gpuc_shape_known(out)) return v;
  int64_t dims[GPUC_MAX_RANK];
  for (int d = 0; d < out->rank; d++) dims[d] = 1;
  for (int j = 0; j < n->nin; j++) {
    int w = j == k ? y : n->in[j];
    if (w < 0) continue;
    const Tensor *t = &g->values[w].t;
    if (!gpuc_shape_known(t) || t->rank > out->rank) return v;
    for (int d = 0; d < t->rank; d++) {
      int64_t *o = &dims[out->rank - t->rank + d], x = t->dims[d];
      if (x != 1 && *o != 1 && x != *o) return v;
      if (x != 1) *o = x;
    }
  }
  for (int d = 0; d < out->rank; d++)
    if (dims[d] != out->dims[d]) return v;
  return y;
}

/* Identity, Dropout in inference mode (no training_mode input, mask
 * unused), a Cast to the dtype its input has, a Pad of zeros and a Slice
 * of everything forward
 * their input: consumers read the input directly; and a broadcasting op
 * reads an Expand's input where it would broadcast it the same way. Graph
 * outputs produced by them stay (renaming outputs would change the API). */
int pass_identity(Graph *g, const PassOptions *o, GpucErr *e) {
  int changes = 0;
  /* repl[v]: the value v forwards to; one walk in topological order */
  int *repl = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!repl) return gpuc_err_set(e, "%s: out of memory", g->path);
  for (int v = 0; v < g->nvalues; v++) repl[v] = v;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0 && repl[n->in[k]] != n->in[k]) { n->in[k] = repl[n->in[k]]; changes++; }
    if (broadcasts(n->op) && g->opset >= 7 && n->out[0] >= 0)
      for (int k = 0; k < n->nin; k++)
        if (n->in[k] >= 0) {
          int y = skip_expand(g, n, k);
          if (y != n->in[k]) { n->in[k] = y; changes++; }
        }
    /* before opset 7, Dropout trains unless is_test is set */
    bool dropout_inference = n->op == GPUC_OP_DROPOUT && n->nin < 3 && (n->nout < 2 || n->out[1] < 0) &&
                             (g->opset >= 7 || gpuc_attr_i(n, "is_test", 0));
    /* a Cast to its input's own dtype (torch's .to(x.dtype) on a mask) */
    bool same_cast = n->op == GPUC_OP_CAST && n->in[0] >= 0 && n->out[0] >= 0 &&
                     g->values[n->in[0]].t.dt == g->values[n->out[0]].t.dt;
    bool fwd = n->op == GPUC_OP_IDENTITY || dropout_inference || same_cast || zero_pad(g, n) || whole_slice(g, n);
    if (!fwd || n->in[0] < 0 || n->out[0] < 0 || g->values[n->out[0]].is_output) continue;
    repl[n->out[0]] = n->in[0];
  }
  free(repl);
  return changes;
}
