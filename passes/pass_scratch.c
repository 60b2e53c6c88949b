/* The per-value reader counts and per-node drop flags that rewrite passes
 * share (passes.h: PassScratch), and their pattern helpers. */
#include "passes.h"
#include "infer_reduce.h"
#include "linear_layers.h"
#include <stdlib.h>
#include <string.h>

int pass_scratch_new(Graph *g, PassScratch *s, GpucErr *e) {
  size_t nv = (size_t)g->nvalues + 1;
  s->readers = malloc(sizeof(int) * nv);
  s->last = malloc(sizeof(int) * nv);
  s->drop = calloc((size_t)g->nnodes + 1, 1);
  if (!s->readers || !s->last || !s->drop) {
    pass_scratch_free(s);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, s->readers, s->last);
  return 0;
}

void pass_scratch_free(PassScratch *s) {
  free(s->readers);
  free(s->last);
  free(s->drop);
  *s = (PassScratch){0};
}

Node *pass_sole_producer(Graph *g, int v, GpucOp op, const int *readers) {
  if (v < 0 || g->values[v].is_output || readers[v] != 1) return NULL;
  int p = g->values[v].producer;
  return p >= 0 && g->nodes[p].op == op && g->nodes[p].nout == 1 ? &g->nodes[p] : NULL;
}

bool pass_env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0");
}

int pass_set_perm(Graph *g, int ni, const int *perm, int rank) {
  Attr *a = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  int64_t *p = a ? gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)rank) : NULL;
  if (!p) return -1;
  for (int i = 0; i < rank; i++) p[i] = perm[i];
  *a = (Attr){.name = "perm", .kind = GPUC_ATTR_INTS, .n = rank, .ints = p};
  g->nodes[ni].attrs = a;
  g->nodes[ni].nattr = 1;
  return 0;
}

int pass_add_transpose(Graph *g, const char *name, int in, int out, const int *perm, int rank) {
  int ni = gpuc_graph_add_node(g, GPUC_OP_TRANSPOSE, name, 1, 1);
  if (ni < 0 || pass_set_perm(g, ni, perm, rank)) return -1;
  Node *n = &g->nodes[ni];
  n->in[0] = in;
  n->out[0] = out;
  g->values[out].producer = ni;
  return ni;
}

int pass_shape_const(Graph *g, const char *name, int rank, const int64_t *dims, GpucErr *e) {
  int64_t r = rank;
  int s = gpuc_linear_new_const(g, name, GPUC_DT_I64, 1, &r, e);
  if (s < 0) return -1;
  for (int i = 0; i < rank; i++) gpuc_set_i64(&g->values[s].t, i, dims[i]);
  return s;
}

bool pass_const_scalar(const Graph *g, int v, double *x) {
  if (v < 0) return false;
  const Value *c = &g->values[v];
  if (!c->is_const || !c->t.data || !gpuc_dtype_is_float(c->t.dt) || gpuc_numel(&c->t) != 1) return false;
  *x = gpuc_get_f64(&c->t, 0);
  return true;
}

bool pass_reduces_last_axis(Graph *g, const Node *m, const Tensor *x) {
  if (gpuc_attr_i(m, "keepdims", 1) != 1 || x->rank < 1) return false;
  const Tensor *ins[2] = {x, m->nin > 1 && m->in[1] >= 0 ? &g->values[m->in[1]].t : NULL};
  GpucErr err;
  OpCtx oc = {.g = g, .n = m, .nin = m->nin, .nout = 1, .in = ins, .err = &err};
  bool mask[GPUC_MAX_RANK] = {0}, known = false;
  if (gpuc_reduce_axes(&oc, mask, &known) || !known) return false;
  for (int d = 0; d < x->rank; d++)
    if (mask[d] != (d == x->rank - 1)) return false;
  return true;
}
