/* Graph storage: an arena for names/arrays/attributes, growable value and
 * node tables, topological sort, verifier, shape binding. */
#include "ir.h"
#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
  ArenaBlock *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

void *gpuc_arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  ArenaBlock *b = a->head;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > (64u << 10) ? n : (64u << 10);
    b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = a->head;
    b->used = 0;
    b->cap = cap;
    a->head = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  a->used_total += n;
  memset(p, 0, n);
  return p;
}

char *gpuc_arena_strdup(Arena *a, const char *s, size_t n) {
  char *p = gpuc_arena_alloc(a, n + 1);
  if (p && n) memcpy(p, s, n); /* s may be NULL when n == 0 (empty protobuf bytes) */
  if (p) p[n] = 0;
  return p;
}

void gpuc_arena_free(Arena *a) {
  for (ArenaBlock *b = a->head, *nx; b; b = nx) { nx = b->next; free(b); }
  a->head = NULL;
  a->used_total = 0;
}

Graph *gpuc_graph_new(const char *path) {
  Graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->path = gpuc_arena_strdup(&g->arena, path ? path : "<memory>",
                              strlen(path ? path : "<memory>"));
  return g;
}

static void free_attr_tensors(Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nattr; k++)
      gpuc_tensor_free(g->nodes[i].attrs[k].t);
}

void gpuc_graph_free(Graph *g) {
  if (!g) return;
  for (int i = 0; i < g->nvalues; i++) free(g->values[i].t.data);
  free_attr_tensors(g);
  free(g->values);
  free(g->nodes);
  gpuc_arena_free(&g->arena);
  free(g);
}

int gpuc_graph_add_value(Graph *g, const char *name) {
  if (g->nvalues == g->cap_values) {
    int cap = g->cap_values ? g->cap_values * 2 : 64;
    Value *v = realloc(g->values, (size_t)cap * sizeof *v);
    if (!v) return -1;
    g->values = v;
    g->cap_values = cap;
  }
  Value *v = &g->values[g->nvalues];
  memset(v, 0, sizeof *v);
  v->name = gpuc_arena_strdup(&g->arena, name, strlen(name));
  if (!v->name) return -1;
  v->t.rank = -1;
  v->producer = -1;
  return g->nvalues++;
}

/* Linear scan: graphs are built once; the frontend keeps its own hash map
 * for name resolution during import. */
int gpuc_graph_find_value(const Graph *g, const char *name) {
  for (int i = 0; i < g->nvalues; i++)
    if (strcmp(g->values[i].name, name) == 0) return i;
  return -1;
}

int gpuc_graph_add_node(Graph *g, GpucOp op, const char *name, int nin, int nout) {
  if (g->nnodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
    Node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
    if (!n) return -1;
    g->nodes = n;
    g->cap_nodes = cap;
  }
  Node *n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->name = gpuc_arena_strdup(&g->arena, name, strlen(name));
  n->nin = nin;
  n->nout = nout;
  n->in = gpuc_arena_alloc(&g->arena, sizeof(int) * (size_t)(nin ? nin : 1));
  n->out = gpuc_arena_alloc(&g->arena, sizeof(int) * (size_t)(nout ? nout : 1));
  if (!n->name || !n->in || !n->out) return -1;
  for (int i = 0; i < nin; i++) n->in[i] = -1;
  for (int i = 0; i < nout; i++) n->out[i] = -1;
  return g->nnodes++;
}

int gpuc_graph_remove_nodes(Graph *g, const bool *drop) {
  int kept = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    if (!drop[i]) { g->nodes[kept++] = *n; continue; }
    /* attribute tensors belong to their node alone */
    for (int k = 0; k < n->nattr; k++) { gpuc_tensor_free(n->attrs[k].t); n->attrs[k].t = NULL; }
  }
  int removed = g->nnodes - kept;
  g->nnodes = kept;
  for (int v = 0; v < g->nvalues; v++) g->values[v].producer = -1;
  for (int i = 0; i < kept; i++)
    for (int k = 0; k < g->nodes[i].nout; k++)
      if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = i;
  return removed;
}

void gpuc_graph_count_readers(const Graph *g, int *count, int *last) {
  for (int v = 0; v < g->nvalues; v++) {
    count[v] = 0;
    if (last) last[v] = -1;
  }
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      count[v]++;
      if (last) last[v] = i;
    }
}

/* Kahn's algorithm, stable (keeps file order among ready nodes). */
int gpuc_graph_toposort(Graph *g, GpucErr *e) {
  int nn = g->nnodes;
  if (nn == 0) return 0;
  int *pending = calloc((size_t)nn, sizeof *pending);
  int *order = malloc((size_t)nn * sizeof *order);
  int *users_cnt = calloc((size_t)g->nvalues + 1, sizeof *users_cnt);
  if (!pending || !order || !users_cnt) {
    free(pending); free(order); free(users_cnt);
    return gpuc_err_set(e, "%s: out of memory sorting nodes", g->path);
  }
  /* CSR of value -> consuming nodes */
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int v = g->nodes[i].in[k];
      if (v >= 0 && g->values[v].producer >= 0) { pending[i]++; users_cnt[v + 1]++; }
    }
  for (int v = 0; v < g->nvalues; v++) users_cnt[v + 1] += users_cnt[v];
  int total = users_cnt[g->nvalues];
  int *users = malloc((size_t)(total ? total : 1) * sizeof *users);
  int *fill = calloc((size_t)g->nvalues + 1, sizeof *fill);
  if (!users || !fill) {
    free(pending); free(order); free(users_cnt); free(users); free(fill);
    return gpuc_err_set(e, "%s: out of memory sorting nodes", g->path);
  }
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int v = g->nodes[i].in[k];
      if (v >= 0 && g->values[v].producer >= 0) users[users_cnt[v] + fill[v]++] = i;
    }
  /* ready queue in index order: a simple FIFO seeded in file order */
  int head = 0, tail = 0;
  for (int i = 0; i < nn; i++)
    if (pending[i] == 0) order[tail++] = i;
  while (head < tail) {
    Node *n = &g->nodes[order[head++]];
    for (int k = 0; k < n->nout; k++) {
      int v = n->out[k];
      if (v < 0) continue;
      for (int u = users_cnt[v]; u < users_cnt[v + 1]; u++)
        if (--pending[users[u]] == 0) order[tail++] = users[u];
    }
  }
  int rc = 0;
  if (tail != nn) {
    int bad = 0;
    for (int i = 0; i < nn; i++) if (pending[i]) { bad = i; break; }
    rc = gpuc_err_set(e, "%s: node '%s' (%s): the graph has a cycle through this node",
                      g->path, g->nodes[bad].name, gpuc_op_name(&g->nodes[bad]));
  } else {
    Node *sorted = malloc((size_t)nn * sizeof *sorted);
    if (!sorted) {
      rc = gpuc_err_set(e, "%s: out of memory sorting nodes", g->path);
    } else {
      for (int i = 0; i < nn; i++) sorted[i] = g->nodes[order[i]];
      memcpy(g->nodes, sorted, (size_t)nn * sizeof *sorted);
      free(sorted);
      for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].nout; k++)
          if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = i;
    }
  }
  free(pending); free(order); free(users_cnt); free(users); free(fill);
  return rc;
}

int gpuc_graph_verify(const Graph *g, GpucErr *e) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if ((unsigned)n->op >= GPUC_OP_COUNT)
      return gpuc_err_set(e, "%s: node '%s': bad op index", g->path, n->name);
    for (int k = 0; k < n->nin; k++) {
      int v = n->in[k];
      if (v < -1 || v >= g->nvalues)
        return gpuc_err_set(e, "%s: node '%s': input %d out of range", g->path, n->name, k);
      if (v >= 0 && g->values[v].producer >= i)
        return gpuc_err_set(e, "%s: node '%s': input '%s' is produced later (not topologically sorted)",
                            g->path, n->name, g->values[v].name);
      if (v >= 0 && g->values[v].producer < 0 && !g->values[v].is_input && !g->values[v].is_const)
        return gpuc_err_set(e, "%s: node '%s': input '%s' is never produced", g->path, n->name,
                            g->values[v].name);
    }
    for (int k = 0; k < n->nout; k++) {
      int v = n->out[k];
      if (v < -1 || v >= g->nvalues)
        return gpuc_err_set(e, "%s: node '%s': output %d out of range", g->path, n->name, k);
      if (v >= 0 && g->values[v].producer != i)
        return gpuc_err_set(e, "%s: node '%s': output '%s' has another producer", g->path,
                            n->name, g->values[v].name);
    }
  }
  for (int k = 0; k < g->noutputs; k++) {
    const Value *v = &g->values[g->outputs[k]];
    if (v->producer < 0 && !v->is_input && !v->is_const)
      return gpuc_err_set(e, "%s: graph output '%s' is never produced", g->path, v->name);
  }
  return 0;
}

int gpuc_graph_bind_shape(Graph *g, const char *name, int rank, const int64_t *dims,
                          GpucErr *e) {
  int vi = -1;
  for (int k = 0; k < g->ninputs; k++)
    if (strcmp(g->values[g->inputs[k]].name, name) == 0) vi = g->inputs[k];
  if (vi < 0) return gpuc_err_set(e, "%s: --shape names '%s', which is not a graph input",
                                  g->path, name);
  Value *v = &g->values[vi];
  if (v->t.rank >= 0 && v->t.rank != rank)
    return gpuc_err_set(e, "%s: --shape %s has rank %d, the model says rank %d", g->path,
                        name, rank, v->t.rank);
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return gpuc_err_set(e, "%s: --shape %s: negative dim", g->path, name);
    if (v->t.rank >= 0 && v->t.dims[i] >= 0 && v->t.dims[i] != dims[i])
      return gpuc_err_set(e, "%s: --shape %s: dim %d is %lld in the model, not %lld", g->path,
                          name, i, (long long)v->t.dims[i], (long long)dims[i]);
  }
  if (gpuc_shape_numel(rank, dims) < 0)
    return gpuc_err_set(e, "%s: --shape %s: element count overflows", g->path, name);
  v->t.rank = rank;
  for (int i = 0; i < rank; i++) v->t.dims[i] = dims[i];
  return 0;
}

int gpuc_graph_bind_symbols(Graph *g, GpucErr *e) {
  /* a dim that has a symbol was symbolic in the model: if it is known now,
   * a --shape bound it, and every input dim of that name takes its value */
  for (int a = 0; a < g->ninputs; a++) {
    const Value *va = &g->values[g->inputs[a]];
    for (int i = 0; i < va->t.rank; i++) {
      if (!va->sym[i] || va->t.dims[i] < 0) continue;
      for (int b = 0; b < g->ninputs; b++) {
        Value *vb = &g->values[g->inputs[b]];
        for (int j = 0; j < vb->t.rank; j++) {
          if (!vb->sym[j] || strcmp(vb->sym[j], va->sym[i])) continue;
          if (vb->t.dims[j] < 0) vb->t.dims[j] = va->t.dims[i];
          else if (vb->t.dims[j] != va->t.dims[i])
            return gpuc_err_set(e, "%s: symbolic dim '%s' is bound to %lld by input '%s' and to %lld by input '%s'",
                                g->path, va->sym[i], (long long)va->t.dims[i], va->name,
                                (long long)vb->t.dims[j], vb->name);
        }
      }
    }
  }
  return 0;
}

int gpuc_graph_freeze_input(Graph *g, const char *name, const Tensor *value, GpucErr *e) {
  int slot = -1;
  for (int k = 0; k < g->ninputs; k++)
    if (strcmp(g->values[g->inputs[k]].name, name) == 0) slot = k;
  if (slot < 0) return gpuc_err_set(e, "%s: '%s' is not a graph input", g->path, name);
  Value *v = &g->values[g->inputs[slot]];
  bool ok = value->dt == v->t.dt && (v->t.rank < 0 || v->t.rank == value->rank);
  for (int i = 0; ok && v->t.rank >= 0 && i < value->rank; i++)
    if (v->t.dims[i] >= 0 && v->t.dims[i] != value->dims[i]) ok = false;
  if (!ok) return gpuc_err_set(e, "%s: value for input '%s' does not match its type", g->path, name);
  Tensor *c = gpuc_tensor_clone(value, e);
  if (!c) return -1;
  v->t = *c;
  free(c);
  v->is_const = true;
  v->is_input = false;
  for (int k = slot; k + 1 < g->ninputs; k++) g->inputs[k] = g->inputs[k + 1];
  g->ninputs--;
  return 0;
}

/* ---- attributes ---- */
const Attr *gpuc_attr(const Node *n, const char *name) {
  for (int i = 0; i < n->nattr; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}
int64_t gpuc_attr_i(const Node *n, const char *name, int64_t dflt) {
  const Attr *a = gpuc_attr(n, name);
  return a && a->kind == GPUC_ATTR_INT ? a->i : dflt;
}
float gpuc_attr_f(const Node *n, const char *name, float dflt) {
  const Attr *a = gpuc_attr(n, name);
  if (!a) return dflt;
  if (a->kind == GPUC_ATTR_FLOAT) return a->f;
  if (a->kind == GPUC_ATTR_INT) return (float)a->i;
  return dflt;
}
const char *gpuc_attr_s(const Node *n, const char *name, const char *dflt) {
  const Attr *a = gpuc_attr(n, name);
  return a && a->kind == GPUC_ATTR_STRING ? a->s : dflt;
}
int gpuc_attr_ints(const Node *n, const char *name, const int64_t **v) {
  const Attr *a = gpuc_attr(n, name);
  if (!a || a->kind != GPUC_ATTR_INTS) return -1;
  *v = a->ints;
  return a->n;
}
int gpuc_attr_floats(const Node *n, const char *name, const float **v) {
  const Attr *a = gpuc_attr(n, name);
  if (!a || a->kind != GPUC_ATTR_FLOATS) return -1;
  *v = a->floats;
  return a->n;
}
