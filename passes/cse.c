/* Common-subexpression elimination. Two nodes compute the same thing when
 * they have the same op, read the same values in the same slots (absent
 * optional inputs included), have as many outputs and carry equal
 * attributes (compared by name, whatever their order; floats bitwise, so
 * 0.0 and -0.0 differ). The later node's consumers then read the earlier
 * node's outputs and the later node goes.
 *
 * Small identical constants are merged first: exporters emit one constant
 * per use (PyTorch writes a scalar 2.0 for every `x * 2`), which hides the
 * nodes that read them from each other.
 *
 * One walk in topological order with a hash table of the nodes kept so far:
 * a node's inputs are renamed to the surviving values before it is hashed,
 * so a chain of duplicates collapses in one pass. Cost: linear in nodes,
 * inputs and attribute bytes.
 *
 * Not merged: nodes with random outputs (two draws are not one draw), and
 * a duplicate whose output is a graph output, or that uses an optional
 * output the earlier node leaves unused (it would have nothing to read). */
#include "passes.h"
#include <stdlib.h>
#include <string.h>

/* Constants above this are not hashed: weights are rarely duplicated, and
 * hashing every weight byte would make the pass cost what the model weighs. */
#define CSE_CONST_MAX_BYTES 4096

/* ---- hashing ------------------------------------------------------------ */

#define FNV_BASIS 0xcbf29ce484222325ull

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ull; }
  return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) {
  /* the terminating NUL delimits strings in a list: {"ab","c"} != {"a","bc"} */
  return s ? fnv(h, s, strlen(s) + 1) : fnv(h, "", 0);
}

/* dtype, shape and (when known) bytes; shapes of tensors hashed here are known */
static uint64_t hash_tensor(uint64_t h, const Tensor *t) {
  h = fnv(h, &t->dt, sizeof t->dt);
  h = fnv(h, &t->rank, sizeof t->rank);
  if (t->rank > 0) h = fnv(h, t->dims, sizeof(int64_t) * (size_t)t->rank);
  return t->data ? fnv(h, t->data, gpuc_tensor_bytes(t)) : h;
}

static bool same_tensor(const Tensor *a, const Tensor *b) {
  if (a->dt != b->dt || a->rank != b->rank) return false;
  if (a->rank > 0 && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank)) return false;
  if (!a->data || !b->data) return a->data == b->data;
  return !memcmp(a->data, b->data, gpuc_tensor_bytes(a));
}

/* Only the fields of the attribute's kind: the others are not zeroed by
 * every pass that makes attributes. */
static uint64_t hash_attr(const Attr *a) {
  uint64_t h = fnv_str(FNV_BASIS, a->name);
  h = fnv(h, &a->kind, sizeof a->kind);
  switch (a->kind) {
  case GPUC_ATTR_FLOAT: return fnv(h, &a->f, sizeof a->f);
  case GPUC_ATTR_INT: return fnv(h, &a->i, sizeof a->i);
  case GPUC_ATTR_STRING: return fnv_str(h, a->s);
  case GPUC_ATTR_TENSOR: return a->t ? hash_tensor(h, a->t) : h;
  case GPUC_ATTR_FLOATS: return fnv(fnv(h, &a->n, sizeof a->n), a->floats, sizeof(float) * (size_t)a->n);
  case GPUC_ATTR_INTS: return fnv(fnv(h, &a->n, sizeof a->n), a->ints, sizeof(int64_t) * (size_t)a->n);
  case GPUC_ATTR_STRINGS:
    h = fnv(h, &a->n, sizeof a->n);
    for (int k = 0; k < a->n; k++) h = fnv_str(h, a->strings[k]);
    return h;
  }
  return h;
}

/* memcmp wants pointers even for zero bytes; empty lists may have none */
static bool same_mem(const void *a, const void *b, size_t n) {
  return n == 0 || !memcmp(a, b, n);
}

static bool same_str(const char *a, const char *b) {
  return a && b ? !strcmp(a, b) : a == b;
}

static bool same_attr(const Attr *a, const Attr *b) {
  if (a->kind != b->kind || !same_str(a->name, b->name)) return false;
  switch (a->kind) {
  case GPUC_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
  case GPUC_ATTR_INT: return a->i == b->i;
  case GPUC_ATTR_STRING: return same_str(a->s, b->s);
  case GPUC_ATTR_TENSOR: return a->t && b->t ? same_tensor(a->t, b->t) : a->t == b->t;
  case GPUC_ATTR_FLOATS:
    return a->n == b->n && same_mem(a->floats, b->floats, sizeof(float) * (size_t)a->n);
  case GPUC_ATTR_INTS:
    return a->n == b->n && same_mem(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n);
  case GPUC_ATTR_STRINGS:
    if (a->n != b->n) return false;
    for (int k = 0; k < a->n; k++)
      if (!same_str(a->strings[k], b->strings[k])) return false;
    return true;
  }
  return false;
}

/* Attribute names are unique within a node (the frontend checks), so equal
 * counts and a match by name for each of a's give a one-to-one match. */
static bool same_attrs(const Node *a, const Node *b) {
  if (a->nattr != b->nattr) return false;
  for (int i = 0; i < a->nattr; i++) {
    const Attr *other = gpuc_attr(b, a->attrs[i].name);
    if (!other || !same_attr(&a->attrs[i], other)) return false;
  }
  return true;
}

static uint64_t hash_node(const Node *n) {
  uint64_t h = fnv(FNV_BASIS, &n->op, sizeof n->op);
  h = fnv(h, &n->nin, sizeof n->nin);
  h = fnv(h, n->in, sizeof(int) * (size_t)n->nin);
  h = fnv(h, &n->nout, sizeof n->nout);
  /* a sum, so that attribute order does not matter */
  uint64_t attrs = 0;
  for (int k = 0; k < n->nattr; k++) attrs += hash_attr(&n->attrs[k]);
  return fnv(h, &attrs, sizeof attrs);
}

static bool same_node(const Graph *g, int i, int j) {
  const Node *a = &g->nodes[i], *b = &g->nodes[j];
  return a->op == b->op && a->nin == b->nin && a->nout == b->nout &&
         same_mem(a->in, b->in, sizeof(int) * (size_t)a->nin) && same_attrs(a, b);
}

static bool same_const(const Graph *g, int v, int w) {
  return same_tensor(&g->values[v].t, &g->values[w].t);
}

/* ---- an open-addressing table of node or value indices ------------------ */

typedef struct Table {
  int *idx;                     /* -1 = empty */
  uint64_t *hash;
  size_t mask;
} Table;

/* Room for n entries at most half full, so probes stay short and end. */
static int table_init(Table *t, int n) {
  size_t cap = 16;
  while (cap < 2 * (size_t)n) cap *= 2;
  t->idx = malloc(cap * sizeof *t->idx);
  t->hash = malloc(cap * sizeof *t->hash);
  t->mask = cap - 1;
  if (!t->idx || !t->hash) return -1;
  memset(t->idx, 0xff, cap * sizeof *t->idx);
  return 0;
}

static void table_free(Table *t) {
  free(t->idx);
  free(t->hash);
}

/* The slot of an entry equal to key, or the empty slot where key belongs. */
static size_t table_find(const Table *t, uint64_t h, const Graph *g, int key,
                         bool (*eq)(const Graph *, int, int)) {
  size_t s = h & t->mask;
  while (t->idx[s] >= 0 && !(t->hash[s] == h && eq(g, t->idx[s], key))) s = (s + 1) & t->mask;
  return s;
}

/* ---- what may be merged ------------------------------------------------- */

/* Dropout draws a mask in training mode, as the reference kernel decides
 * it: from opset 12 a training_mode input that is not a known false, before
 * opset 7 is_test = 0. RandomNormal, RandomUniform, their *Like forms,
 * Multinomial and Bernoulli belong here once ops.def has them. */
static bool is_random(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_DROPOUT) return false;
  if (g->opset < 12) return g->opset < 7 && gpuc_attr_i(n, "is_test", 0) == 0;
  if (n->nin < 3 || n->in[2] < 0) return false;
  const Value *mode = &g->values[n->in[2]];
  if (!mode->is_const || !mode->t.data) return true;
  for (int64_t i = 0; i < gpuc_numel(&mode->t); i++)
    if (gpuc_get_i64(&mode->t, i) != 0) return true;
  return false;
}

/* b's consumers can read a's outputs instead: each output b uses, a has,
 * and none of b's is a graph output (its name is part of the model's API). */
static bool can_replace(const Graph *g, const Node *a, const Node *b) {
  for (int k = 0; k < b->nout; k++) {
    if (b->out[k] < 0) continue;
    if (a->out[k] < 0 || g->values[b->out[k]].is_output) return false;
  }
  return true;
}

static bool small_const(const Value *v) {
  return v->is_const && v->t.data && !v->is_input && !v->is_output && gpuc_shape_known(&v->t) &&
         gpuc_tensor_bytes(&v->t) <= CSE_CONST_MAX_BYTES;
}

/* ---- the pass ----------------------------------------------------------- */

/* repl[v] = the first small constant with v's dtype, shape and bytes. */
static int merge_constants(Graph *g, int *repl) {
  Table t;
  if (table_init(&t, g->nvalues)) { table_free(&t); return -1; }
  for (int v = 0; v < g->nvalues; v++) {
    if (!small_const(&g->values[v])) continue;
    uint64_t h = hash_tensor(FNV_BASIS, &g->values[v].t);
    size_t s = table_find(&t, h, g, v, same_const);
    if (t.idx[s] >= 0) { repl[v] = t.idx[s]; continue; }
    t.idx[s] = v;
    t.hash[s] = h;
  }
  table_free(&t);
  return 0;
}

/* Returns the number of nodes merged away (merged constants not counted). */
int pass_cse(Graph *g, const PassOptions *o, GpucErr *e) {
  int *repl = malloc(((size_t)g->nvalues + 1) * sizeof *repl);
  bool *drop = calloc((size_t)g->nnodes + 1, 1);
  Table t = {0};
  if (!repl || !drop || table_init(&t, g->nnodes)) goto oom;
  for (int v = 0; v < g->nvalues; v++) repl[v] = v;
  if (merge_constants(g, repl)) goto oom;
  int merged = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) n->in[k] = repl[n->in[k]];
    if (is_random(g, n)) continue;
    uint64_t h = hash_node(n);
    size_t s = table_find(&t, h, g, i, same_node);
    if (t.idx[s] < 0) { t.idx[s] = i; t.hash[s] = h; continue; }
    const Node *a = &g->nodes[t.idx[s]];
    if (!can_replace(g, a, n)) continue;
    for (int k = 0; k < n->nout; k++)
      if (n->out[k] >= 0) repl[n->out[k]] = a->out[k];
    drop[i] = true;
    merged++;
  }
  if (merged) gpuc_graph_remove_nodes(g, drop);
  free(repl);
  free(drop);
  table_free(&t);
  return merged;
oom:
  free(repl);
  free(drop);
  table_free(&t);
  return gpuc_err_set(e, "%s: out of memory", g->path);
}
