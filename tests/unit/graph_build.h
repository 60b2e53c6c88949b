/* Small graphs built in memory for pass tests, and the check that a
 * rewritten graph computes what the original did on the reference with
 * seeded random inputs. Include after check.h, ref.h and passes.h. */
#ifndef GPUC_TEST_GRAPH_BUILD_H
#define GPUC_TEST_GRAPH_BUILD_H
#include <math.h>
#include <string.h>

#define MAX_IO 8
#define MAX_ATTRS 8

static uint64_t rng = 7;
static inline double urand(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0 * 2 - 1;
}

static inline Graph *graph_new(int64_t opset) {
  Graph *g = gpuc_graph_new("pass-test");
  g->opset = opset;
  g->inputs = gpuc_arena_alloc(&g->arena, sizeof(int) * MAX_IO);
  g->outputs = gpuc_arena_alloc(&g->arena, sizeof(int) * MAX_IO);
  return g;
}

static inline int input(Graph *g, const char *name, int rank, const int64_t *dims) {
  int v = gpuc_graph_add_value(g, name);
  gpuc_set_shape(&g->values[v].t, GPUC_DT_F32, rank, dims);
  g->values[v].is_input = true;
  g->inputs[g->ninputs++] = v;
  return v;
}

static inline void output(Graph *g, int v) {
  g->outputs[g->noutputs++] = v;
  g->values[v].is_output = true;
}

/* a constant of random values (seeded: both builds get the same) */
static inline int constant(Graph *g, int rank, const int64_t *dims, uint64_t seed, double lo, double hi) {
  char name[32];
  snprintf(name, sizeof name, "c%d", g->nvalues);
  int v = gpuc_graph_add_value(g, name);
  GpucErr e;
  Tensor *t = gpuc_tensor_new(GPUC_DT_F32, rank, dims, &e);
  GPUC_ASSERT(t);
  uint64_t keep = rng;
  rng = seed;
  for (int64_t i = 0; i < gpuc_numel(t); i++) gpuc_set_f64(t, i, lo + (hi - lo) * (urand() + 1) / 2);
  rng = keep;
  g->values[v].t = *t;
  free(t);
  g->values[v].is_const = true;
  return v;
}

/* a one-output node; attributes added next (attr_*) go to it */
static inline int node(Graph *g, GpucOp op, int nin, const int *ins) {
  char name[32];
  snprintf(name, sizeof name, "n%d", g->nnodes);
  int ni = gpuc_graph_add_node(g, op, name, nin, 1);
  GPUC_ASSERT(ni >= 0);
  memcpy(g->nodes[ni].in, ins, sizeof(int) * (size_t)nin);
  snprintf(name, sizeof name, "v%d", g->nvalues);
  int v = gpuc_graph_add_value(g, name);
  g->nodes[ni].out[0] = v;
  g->values[v].producer = ni;
  g->nodes[ni].attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * MAX_ATTRS);
  return v;
}
#define NODE(g, op, ...) node(g, op, sizeof((int[]){__VA_ARGS__}) / sizeof(int), (int[]){__VA_ARGS__})

static inline Attr *new_attr(Graph *g, const char *name, GpucAttrKind kind) {
  Node *n = &g->nodes[g->nnodes - 1];
  Attr *a = &n->attrs[n->nattr++];
  a->name = name;
  a->kind = kind;
  return a;
}
static inline void attr_i(Graph *g, const char *name, int64_t v) { new_attr(g, name, GPUC_ATTR_INT)->i = v; }
static inline void attr_f(Graph *g, const char *name, float v) { new_attr(g, name, GPUC_ATTR_FLOAT)->f = v; }
static inline void attr_s(Graph *g, const char *name, const char *v) { new_attr(g, name, GPUC_ATTR_STRING)->s = v; }
static inline void attr_ints(Graph *g, const char *name, int n, const int64_t *v) {
  Attr *a = new_attr(g, name, GPUC_ATTR_INTS);
  a->n = n;
  a->ints = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)n);
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

static inline int transpose(Graph *g, int x, int r, const int64_t *perm) {
  int y = NODE(g, GPUC_OP_TRANSPOSE, x);
  attr_ints(g, "perm", r, perm);
  return y;
}

static inline int count_op(const Graph *g, GpucOp op) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op;
  return c;
}

/* Both graphs on the same random inputs: outputs equal within f32 tolerance. */
static inline void compare(const char *what, Graph *g0, Graph *g1, double tol) {
  GpucErr e = {0};
  Tensor *ins[MAX_IO] = {0}, *o0[MAX_IO] = {0}, *o1[MAX_IO] = {0};
  for (int k = 0; k < g0->ninputs; k++) {
    const Tensor *d = &g0->values[g0->inputs[k]].t;
    ins[k] = gpuc_tensor_new(d->dt, d->rank, d->dims, &e);
    for (int64_t i = 0; i < gpuc_numel(d); i++) gpuc_set_f64(ins[k], i, urand());
  }
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "%s: run: %s", what, e.msg);
  int r1 = r0 == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "%s: run rewritten: %s", what, e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs; k++) {
    int64_t n = gpuc_numel(o0[k]), bad = 0;
    CHECK(n > 0 && n == gpuc_numel(o1[k]) && o0[k]->rank == o1[k]->rank &&
              !memcmp(o0[k]->dims, o1[k]->dims, sizeof(int64_t) * (size_t)o0[k]->rank),
          "%s: output %d shapes differ", what, k);
    for (int64_t i = 0; i < n && n == gpuc_numel(o1[k]); i++) {
      double a = gpuc_get_f64(o1[k], i), w = gpuc_get_f64(o0[k], i);
      bad += !(fabs(a - w) <= tol + tol * fabs(w));
    }
    CHECK(bad == 0, "%s: output %d: %lld of %lld differ", what, k, (long long)bad, (long long)n);
  }
  for (int k = 0; k < MAX_IO; k++) { gpuc_tensor_free(ins[k]); gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
}

#endif
