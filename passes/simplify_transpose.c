/* Transpose simplification: local rewrite rules run to a fixed point, so
 * that Transposes meet and cancel (the algebraic-simplifier shape of XLA
 * and TVM). The NHWC pass (layout_nhwc.c) leaves a region through a
 * Transpose [0,3,1,2]; a ConvNeXt block then permutes the same value back
 * with its own Transpose [0,2,3,1] for a LayerNorm over channels, and the
 * pair was run as two full copies of the activation.
 *
 * Rules (each alone in tests/unit/test_simplify_transpose.c):
 *   compose   Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2[i]])
 *             (the inner one stays while others read it)
 *   plain     a Transpose whose elements, walked up through Reshapes and
 *             Transposes (passes/view_walk.c), are some x's in x's own
 *             order -> Reshape(x) (torchvision ViT's patches: the NHWC
 *             conv's to_nchw Transpose, a Reshape and the model's
 *             Transpose back to [B,S,C] move nothing)
 *   permuted  a Transpose whose elements, walked up through a chain of
 *             single-reader Reshapes and two or more Transposes, are some
 *             x's in a dense permuted order -> Reshape(Transpose(Reshape(x),
 *             q)): one copy where there were two or more (CoAtNet's
 *             attention output: Transpose [0,1,3,2], Reshape to NCHW, the
 *             NHWC region's Transpose in = x's heads moved next to each
 *             other, [0,2,1,3], which attention_views then writes in place)
 *   identity  Transpose(x, [0,1,..]) -> x for every reader; when it writes
 *             a graph output (whose name stays), x's producer writes that
 *             output instead if the Transpose is x's only reader
 *   sink      op(Transpose(x, p), ..) -> Transpose(op'(x, ..), p) where
 *             the Transpose's output has that one reader, and where it
 *             pays: the op's output reaches another Transpose through a
 *             chain of single-reader sinkable ops, or the op reads two
 *             Transposes of the same perm (two become one). op is
 *             - elementwise of the Transpose's shape (no broadcasting up):
 *               every other input a constant of rank <= r (re-laid-out:
 *               padded with leading 1s, permuted by p's inverse), one
 *               element, or a Transpose by p of the same shape (read
 *               through);
 *             - Softmax / LogSoftmax (opset >= 13) over axis a -> axis p[a];
 *             - LayerNormalization over axes a.. that p leaves in place
 *               (p[i] == i for i >= a), Y its only output read.
 *   flat norm Reshape(InstanceNormalization(Reshape(Transpose(x, p),
 *             [N, 1, M]), s, b), Transpose's shape) with p[0] == 0 and
 *             one-element s, b -> Transpose(Reshape(InstanceNormalization(
 *             Reshape(x, [N, 1, M]), s, b), x's shape), p), each value read
 *             once, where the output reaches a Transpose as sink's does:
 *             GroupNorm with one group as the TorchScript exporter writes
 *             it (PoolFormer's norms, between the NHWC region's
 *             Transposes out and back in). Its statistics are over all of
 *             a sample's elements, so any order of them gives the same
 *             mean and variance (up to the summation's rounding: the one
 *             rule that is not pure data movement).
 * Every other rule is exact (data movement only). Dead Transposes go at the end.
 * Runs at -O2 after layout_nhwc (and fuse_attention, which matches
 * Transposes of its own). */
#include "passes.h"
#include "view_walk.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int r;
  int p[GPUC_MAX_RANK];
} Perm;

/* The perm of Transpose n over a known-rank input (absent: reversed). */
static bool node_perm(const Graph *g, const Node *n, Perm *p) {
  if (n->op != GPUC_OP_TRANSPOSE || n->nin < 1 || n->in[0] < 0 || n->out[0] < 0) return false;
  int r = g->values[n->in[0]].t.rank;
  if (r < 1 || r > GPUC_MAX_RANK) return false;
  const int64_t *v;
  int np = gpuc_attr_ints(n, "perm", &v);
  if (np >= 0 && np != r) return false;
  bool seen[GPUC_MAX_RANK] = {0};
  p->r = r;
  for (int i = 0; i < r; i++) {
    int64_t a = np < 0 ? r - 1 - i : v[i] < 0 ? v[i] + r : v[i];
    if (a < 0 || a >= r || seen[a]) return false;
    seen[a] = true;
    p->p[i] = (int)a;
  }
  return true;
}

static bool identity(const Perm *p) {
  for (int i = 0; i < p->r; i++)
    if (p->p[i] != i) return false;
  return true;
}

static bool same_perm(const Perm *a, const Perm *b) {
  return a->r == b->r && !memcmp(a->p, b->p, sizeof(int) * (size_t)a->r);
}

static bool same_dims(const Tensor *a, const Tensor *b) {
  return a->rank == b->rank && gpuc_shape_known(a) &&
         !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

static int oom(Graph *g, GpucErr *e) { return gpuc_err_set(e, "%s: simplify_transpose: out of memory", g->path); }

static int set_perm(Graph *g, Node *n, const Perm *p, GpucErr *e) {
  Attr *a = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  int64_t *v = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)p->r);
  if (!a || !v) return oom(g, e);
  for (int i = 0; i < p->r; i++) v[i] = p->p[i];
  *a = (Attr){.name = "perm", .kind = GPUC_ATTR_INTS, .n = p->r, .ints = v};
  n->attrs = a;
  n->nattr = 1;
  return 0;
}

/* Constant c (rank <= p.r) as the constant c' with Transpose(c', p) equal
 * to c padded with leading 1s: c' = transpose(pad(c), inverse(p)). A new
 * value; one element stays c. */
static int relaid_const(Graph *g, int c, const Perm *p, GpucErr *e) {
  const Tensor *src = &g->values[c].t;
  if (gpuc_numel(src) <= 1) return c;
  int r = p->r, lead = r - src->rank;
  int64_t pd[GPUC_MAX_RANK], dims[GPUC_MAX_RANK], sstride[GPUC_MAX_RANK], st[GPUC_MAX_RANK];
  for (int i = 0; i < r; i++) pd[i] = i < lead ? 1 : src->dims[i - lead];
  int64_t s = 1;
  for (int i = r - 1; i >= 0; i--) { sstride[i] = s; s *= pd[i]; }
  int inv[GPUC_MAX_RANK];
  for (int i = 0; i < r; i++) inv[p->p[i]] = i;
  for (int i = 0; i < r; i++) { dims[i] = pd[inv[i]]; st[i] = sstride[inv[i]]; }
  char name[512];
  snprintf(name, sizeof name, "%s.perm", g->values[c].name);
  int w = gpuc_graph_add_value(g, name);
  if (w < 0) return oom(g, e);
  Value *nv = &g->values[w];
  src = &g->values[c].t; /* adding values may move the array */
  gpuc_set_shape(&nv->t, src->dt, r, dims);
  if (gpuc_tensor_alloc(&nv->t, e)) return -1;
  nv->is_const = true;
  size_t es = gpuc_dtype_size(src->dt);
  int64_t n = gpuc_numel(&nv->t), idx[GPUC_MAX_RANK] = {0};
  const char *a = src->data;
  char *b = nv->t.data;
  for (int64_t i = 0; i < n; i++, b += es) {
    int64_t off = 0;
    for (int d = 0; d < r; d++) off += idx[d] * st[d];
    memcpy(b, a + (size_t)off * es, es);
    for (int d = r - 1; d >= 0 && ++idx[d] == dims[d]; d--) idx[d] = 0;
  }
  return w;
}

typedef struct {
  Graph *g;
  int *readers; /* per value: node input slots reading it */
  int *reader;  /* per value: the last node reading it */
  bool training;
  GpucErr *e;
} Ctx;

static int recount(Ctx *c) {
  free(c->readers);
  free(c->reader);
  size_t n = (size_t)c->g->nvalues + 1;
  c->readers = malloc(sizeof(int) * n);
  c->reader = malloc(sizeof(int) * n);
  if (!c->readers || !c->reader) return oom(c->g, c->e);
  gpuc_graph_count_readers(c->g, c->readers, c->reader);
  return 0;
}

/* v is read by exactly one node and is no graph output: that node, or -1 */
static int sole_reader(const Ctx *c, int v) {
  return c->readers[v] == 1 && !c->g->values[v].is_output ? c->reader[v] : -1;
}

/* The Transpose producing v, or -1 (its perm in *p) */
static int transpose_of(const Graph *g, int v, Perm *p) {
  int t = v >= 0 ? g->values[v].producer : -1;
  return t >= 0 && node_perm(g, &g->nodes[t], p) ? t : -1;
}

/* Can node n, reading y = Transpose(x, p) at slot k, run on x with its
 * output transposed by p instead? *merges: it reads a second Transpose by
 * p that the rewrite reads through. */
static bool sinkable(const Graph *g, const Node *n, int k, const Perm *p, bool training, bool *merges) {
  int y = n->in[k], r = p->r;
  const Tensor *yt = &g->values[y].t;
  *merges = false;
  if (k != 0 && !(gpuc_ops[n->op].flags & GPUC_OPF_ELEMWISE)) return false;
  if (n->nout < 1 || n->out[0] < 0 || !gpuc_shape_known(yt)) return false;
  for (int j = 1; j < n->nout; j++)
    if (n->out[j] >= 0) return false;
  const Tensor *zt = &g->values[n->out[0]].t;
  if (!same_dims(zt, yt)) return false;
  if (n->op == GPUC_OP_SOFTMAX || n->op == GPUC_OP_LOGSOFTMAX) return g->opset >= 13;
  if (n->op == GPUC_OP_LAYERNORMALIZATION) {
    int64_t a = gpuc_attr_i(n, "axis", -1);
    if (a < 0) a += r;
    if (a < 0 || a >= r) return false;
    for (int i = (int)a; i < r; i++)
      if (p->p[i] != i) return false;
    return true;
  }
  if (!(gpuc_ops[n->op].flags & GPUC_OPF_ELEMWISE) || n->op == GPUC_OP_DROPOUT) return false;
  for (int j = 0; j < n->nin; j++) {
    int v = n->in[j];
    if (j == k || v < 0) continue;
    const Value *o = &g->values[v];
    Perm q;
    /* a parameter being trained stays the one tensor the optimizer updates */
    if (o->is_const && o->t.data && o->t.rank <= r && !(training && o->is_param)) continue;
    if (gpuc_numel(&o->t) == 1 && o->t.rank <= r) continue;
    if (v == y) continue; /* the same Transpose twice (x * x) */
    if (transpose_of(g, v, &q) >= 0 && same_perm(&q, p) && same_dims(&o->t, yt)) { *merges = true; continue; }
    return false;
  }
  return true;
}

/* Does z lead, through single-reader sinkable nodes, to a Transpose? */
static bool reaches_transpose(const Ctx *c, int z, const Perm *p) {
  for (int depth = 0; depth < 32; depth++) {
    int m = sole_reader(c, z);
    if (m < 0) return false;
    const Node *n = &c->g->nodes[m];
    if (n->op == GPUC_OP_TRANSPOSE) return true;
    int k = 0;
    while (k < n->nin && n->in[k] != z) k++;
    bool merges;
    if (k == n->nin || !sinkable(c->g, n, k, p, c->training, &merges)) return false;
    if (merges) return true;
    z = n->out[0];
  }
  return false;
}

/* Node i, read by nobody now, made an Identity of nothing so reader
 * counts no longer see it; dead code removes it. */
static void husk(Graph *g, int i) {
  Node *n = &g->nodes[i];
  if (n->out[0] >= 0 && g->values[n->out[0]].producer == i) g->values[n->out[0]].producer = -1;
  n->op = GPUC_OP_IDENTITY;
  n->in[0] = -1;
  n->out[0] = -1;
  n->nattr = 0;
}

/* op(Transpose(x, p) at slot k, ..) -> Transpose(op'(x, ..), p) */
static int sink(Ctx *c, int t, int ni, int k, const Perm *p) {
  Graph *g = c->g;
  int x = g->nodes[t].in[0], y = g->nodes[t].out[0], z = g->nodes[ni].out[0];
  char name[512];
  snprintf(name, sizeof name, "%s.unperm", g->values[z].name);
  int z0 = gpuc_graph_add_value(g, name);
  if (z0 < 0) return oom(g, c->e);
  Tensor zt = g->values[z].t;
  zt.data = NULL;
  for (int i = 0; i < p->r; i++) zt.dims[p->p[i]] = g->values[z].t.dims[i];
  g->values[z0].t = zt;
  bool ew = gpuc_ops[g->nodes[ni].op].flags & GPUC_OPF_ELEMWISE;
  for (int j = 0; j < g->nodes[ni].nin; j++) {
    int v = g->nodes[ni].in[j];
    Perm q;
    if (v < 0) continue;
    if (j == k || v == y) { g->nodes[ni].in[j] = x; continue; }
    if (!ew) continue; /* LayerNorm's Scale and B: over axes p leaves alone */
    const Value *o = &g->values[v];
    if (o->is_const && o->t.data) {
      int w = relaid_const(g, v, p, c->e);
      if (w < 0) return -1;
      g->nodes[ni].in[j] = w;
    } else if (gpuc_numel(&o->t) != 1) {
      int u = transpose_of(g, v, &q);
      GPUC_ASSERT(u >= 0 && same_perm(&q, p));
      g->nodes[ni].in[j] = g->nodes[u].in[0];
    }
  }
  if (g->nodes[ni].op == GPUC_OP_SOFTMAX || g->nodes[ni].op == GPUC_OP_LOGSOFTMAX) {
    Node *n = &g->nodes[ni];
    int64_t a = gpuc_attr_i(n, "axis", -1);
    if (a < 0) a += p->r;
    Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 1));
    if (!attrs) return oom(g, c->e);
    int na = 0;
    for (int j = 0; j < n->nattr; j++)
      if (strcmp(n->attrs[j].name, "axis")) attrs[na++] = n->attrs[j];
    attrs[na++] = (Attr){.name = "axis", .kind = GPUC_ATTR_INT, .i = p->p[a]};
    n->attrs = attrs;
    n->nattr = na;
  }
  snprintf(name, sizeof name, "%s.perm", g->nodes[ni].name);
  int nt = gpuc_graph_add_node(g, GPUC_OP_TRANSPOSE, name, 1, 1);
  if (nt < 0) return oom(g, c->e);
  Node *tn = &g->nodes[nt];
  tn->in[0] = z0;
  tn->out[0] = z;
  if (set_perm(g, tn, p, c->e)) return -1;
  g->nodes[ni].out[0] = z0;
  g->values[z0].producer = ni;
  g->values[z].producer = nt;
  husk(g, t);
  return 1;
}

/* The value whose elements in its own row-major order are Transpose t's
 * output (walking up through data movement), or -1 */
/* Transpose t's output y read as it is stored: false when its shape is
 * unknown or empty; n its element count */
static bool output_view(const Graph *g, int t, int *y, GpucView *v, int64_t *n) {
  *y = g->nodes[t].out[0];
  const Tensor *yt = &g->values[*y].t;
  *n = gpuc_numel(yt);
  if (!gpuc_shape_known(yt) || *n < 1) return false;
  gpuc_view_row_major(v, yt);
  return true;
}

static int plain_source(const Graph *g, int t) {
  int y;
  int64_t n;
  GpucView v;
  if (!output_view(g, t, &y, &v, &n)) return -1;
  int cur = y;
  for (int guard = 0; guard < 32; guard++) {
    cur = gpuc_view_step(g, cur, &v, true);
    if (cur < 0) return -1;
    if (gpuc_numel(&g->values[cur].t) == n && gpuc_view_is_plain(&v, n)) return cur;
  }
  return -1;
}

/* Transpose t -> Reshape(x, t's output shape) */
static int as_reshape(Ctx *c, int t, int x) {
  Graph *g = c->g;
  /* a copy of t's output shape: adding a value may move g->values */
  const Tensor yt = g->values[g->nodes[t].out[0]].t;
  char name[512];
  snprintf(name, sizeof name, "%s.shape", g->nodes[t].name);
  int s = gpuc_graph_add_value(g, name);
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
  if (s < 0 || !in) return oom(g, c->e);
  int64_t r = yt.rank;
  gpuc_set_shape(&g->values[s].t, GPUC_DT_I64, 1, &r);
  if (gpuc_tensor_alloc(&g->values[s].t, c->e)) return -1;
  for (int a = 0; a < yt.rank; a++) gpuc_set_i64(&g->values[s].t, a, yt.dims[a]);
  g->values[s].is_const = true;
  Node *n = &g->nodes[t];
  in[0] = x;
  in[1] = s;
  n->op = GPUC_OP_RESHAPE;
  n->in = in;
  n->nin = 2;
  n->nattr = 0;
  return 1;
}

/* A new i64 constant [rank] holding dims (a Reshape's shape). */
static int shape_const(Graph *g, const char *base, const char *what, int rank, const int64_t *dims, GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", base, what);
  return pass_shape_const(g, name, rank, dims, e);
}

/* The flat-norm chain read from Transpose t (see the rules above): the
 * last Reshape's node, the first's in *r1; -1 when there is none. */
static int flat_norm_chain(const Ctx *c, int t, const Perm *p, int *r1) {
  const Graph *g = c->g;
  int y = g->nodes[t].out[0];
  const Tensor *yt = &g->values[y].t;
  if (pass_env_on("GPUC_NO_FLAT_NORM")) return -1; /* GPU A/B runs: the rewrite off */
  if (p->p[0] != 0 || !gpuc_shape_known(yt) || yt->rank < 2) return -1;
  int a = sole_reader(c, y);
  if (a < 0 || g->nodes[a].op != GPUC_OP_RESHAPE || g->nodes[a].in[0] != y || g->nodes[a].out[0] < 0) return -1;
  int av = g->nodes[a].out[0];
  const Tensor *at = &g->values[av].t;
  if (at->rank != 3 || !gpuc_shape_known(at) || at->dims[0] != yt->dims[0] || at->dims[1] != 1) return -1;
  int b = sole_reader(c, av);
  if (b < 0) return -1;
  const Node *nb = &g->nodes[b];
  if (nb->op != GPUC_OP_INSTANCENORMALIZATION || nb->nin < 3 || nb->in[0] != av || nb->out[0] < 0) return -1;
  for (int k = 1; k < nb->nout; k++)
    if (nb->out[k] >= 0) return -1;
  for (int k = 1; k < 3; k++)
    if (nb->in[k] < 0 || gpuc_numel(&g->values[nb->in[k]].t) != 1) return -1;
  int d = sole_reader(c, nb->out[0]);
  if (d < 0) return -1;
  const Node *nd = &g->nodes[d];
  if (nd->op != GPUC_OP_RESHAPE || nd->in[0] != nb->out[0] || nd->out[0] < 0 ||
      !same_dims(&g->values[nd->out[0]].t, yt))
    return -1;
  *r1 = a;
  return d;
}

/* The chain r1 .. r2 runs on Transpose t's input x; Transpose(., p) after
 * it writes r2's output z. */
static int sink_flat_norm(Ctx *c, int t, int r1, int r2, const Perm *p) {
  Graph *g = c->g;
  int x = g->nodes[t].in[0], z = g->nodes[r2].out[0];
  Tensor at = g->values[g->nodes[r1].out[0]].t, xt = g->values[x].t;
  int s1 = shape_const(g, g->nodes[r1].name, "flat", at.rank, at.dims, c->e);
  int s2 = s1 < 0 ? -1 : shape_const(g, g->nodes[r2].name, "unperm", xt.rank, xt.dims, c->e);
  if (s2 < 0) return -1;
  char name[512];
  snprintf(name, sizeof name, "%s.unperm", g->values[z].name);
  int z0 = gpuc_graph_add_value(g, name);
  if (z0 < 0) return oom(g, c->e);
  g->values[z0].t = g->values[z].t;
  g->values[z0].t.data = NULL;
  for (int i = 0; i < xt.rank; i++) g->values[z0].t.dims[i] = xt.dims[i];
  snprintf(name, sizeof name, "%s.perm", g->nodes[r2].name);
  int nt = gpuc_graph_add_node(g, GPUC_OP_TRANSPOSE, name, 1, 1);
  if (nt < 0) return oom(g, c->e);
  Node *a = &g->nodes[r1], *d = &g->nodes[r2], *tn = &g->nodes[nt];
  a->in[0] = x;
  a->in[1] = s1;
  d->in[1] = s2;
  d->out[0] = z0;
  g->values[z0].producer = r2;
  tn->in[0] = z0;
  tn->out[0] = z;
  g->values[z].producer = nt;
  if (set_perm(g, tn, p, c->e)) return -1;
  husk(g, t);
  return 1;
}

/* The view v, its unit axes dropped and neighbours that are contiguous
 * with each other merged, is a dense permutation of a row-major block of
 * numel elements: the block's shape in zd (v's axes by falling stride),
 * q with axis i of v = axis q[i] of that block; false otherwise. */
static bool dense_permutation(const GpucView *v, int64_t numel, int *rank, int64_t *zd, int *q) {
  int64_t n[GPUC_VIEW_MAX_AXES], st[GPUC_VIEW_MAX_AXES];
  int r = 0;
  if (v->off != 0) return false;
  for (int a = 0; a < v->rank; a++) {
    if (v->n[a] == 1) continue;
    if (r > 0 && st[r - 1] == v->st[a] * v->n[a]) { n[r - 1] *= v->n[a]; st[r - 1] = v->st[a]; continue; }
    n[r] = v->n[a];
    st[r++] = v->st[a];
  }
  if (r > GPUC_MAX_RANK) return false;
  int order[GPUC_MAX_RANK]; /* v's axes by falling stride */
  for (int a = 0; a < r; a++) order[a] = a;
  for (int a = 1; a < r; a++)
    for (int b = a; b > 0 && st[order[b]] > st[order[b - 1]]; b--) {
      int t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  int64_t want = 1;
  for (int k = r - 1; k >= 0; k--) {
    if (st[order[k]] != want) return false;
    want *= n[order[k]];
  }
  if (want != numel) return false;
  for (int k = 0; k < r; k++) { zd[k] = n[order[k]]; q[order[k]] = k; }
  *rank = r;
  return true;
}

/* The permuted rule's source for Transpose t: x, with the block shape zd
 * [*rank] and perm q (see dense_permutation), or -1. The chain from x to
 * t's output holds two or more Transposes (t included) and its values
 * between are read only by the chain. */
static int permuted_source(const Ctx *c, int t, int *rank, int64_t *zd, int *q) {
  const Graph *g = c->g;
  int y;
  int64_t n;
  GpucView v, at; /* at: the view at the furthest source */
  if (!output_view(g, t, &y, &v, &n)) return -1;
  int cur = y, transposes = 0, found = -1;
  for (int guard = 0; guard < 32; guard++) {
    if (cur != y && sole_reader(c, cur) < 0) break;
    int p = g->values[cur].producer;
    if (p < 0) break;
    transposes += g->nodes[p].op == GPUC_OP_TRANSPOSE;
    if ((cur = gpuc_view_step(g, cur, &v, true)) < 0) break;
    if (transposes >= 2 && gpuc_numel(&g->values[cur].t) == n && dense_permutation(&v, n, rank, zd, q)) {
      found = cur;
      at = v;
    }
  }
  return found >= 0 && dense_permutation(&at, n, rank, zd, q) ? found : -1;
}

/* Transpose t -> Reshape(Transpose(Reshape(x, zd), q), t's shape) (the
 * inner Reshape only where x's shape is not zd) */
static int as_permuted(Ctx *c, int t, int x, int rank, const int64_t *zd, const int *q) {
  Graph *g = c->g;
  char base[480];
  snprintf(base, sizeof base, "%s", g->nodes[t].name);
  const Tensor *xt = &g->values[x].t;
  bool reshape_x = xt->rank != rank;
  for (int a = 0; a < rank && !reshape_x; a++) reshape_x = xt->dims[a] != zd[a];
  GpucDType dt = xt->dt;
  char name[512];
  int z = x;
  if (reshape_x) {
    int s = shape_const(g, base, "block_shape", rank, zd, c->e);
    snprintf(name, sizeof name, "%s.block", base);
    int zv = s < 0 ? -1 : gpuc_graph_add_value(g, name);
    int rn = zv < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_RESHAPE, name, 2, 1);
    if (rn < 0) return s < 0 ? -1 : oom(g, c->e);
    gpuc_set_shape(&g->values[zv].t, dt, rank, zd);
    Node *r = &g->nodes[rn];
    r->in[0] = x;
    r->in[1] = s;
    r->out[0] = zv;
    g->values[zv].producer = rn;
    z = zv;
  }
  snprintf(name, sizeof name, "%s.permuted", base);
  int tv = gpuc_graph_add_value(g, name);
  if (tv < 0 || pass_add_transpose(g, name, z, tv, q, rank) < 0) return oom(g, c->e);
  int64_t td[GPUC_MAX_RANK];
  for (int a = 0; a < rank; a++) td[a] = zd[q[a]];
  gpuc_set_shape(&g->values[tv].t, dt, rank, td);
  return as_reshape(c, t, tv);
}

/* One rule at Transpose t, if any applies: 1 changed, 0 none, -1 error. */
static int rewrite_at(Ctx *c, int t, bool permuted) {
  Graph *g = c->g;
  Perm p, q;
  if (!node_perm(g, &g->nodes[t], &p)) return 0;
  int x = g->nodes[t].in[0], y = g->nodes[t].out[0];
  int inner = transpose_of(g, x, &q);
  if (inner >= 0 && q.r == p.r) { /* compose */
    Perm pq = {.r = p.r};
    for (int i = 0; i < p.r; i++) pq.p[i] = q.p[p.p[i]];
    g->nodes[t].in[0] = g->nodes[inner].in[0];
    if (sole_reader(c, x) == t) husk(g, inner);
    return set_perm(g, &g->nodes[t], &pq, c->e) ? -1 : 1;
  }
  if (identity(&p)) {
    int px = g->values[x].producer;
    if (g->values[y].is_output && px >= 0 && sole_reader(c, x) == t) { /* x's producer writes y */
      Node *pn = &g->nodes[px];
      for (int k = 0; k < pn->nout; k++)
        if (pn->out[k] == x) pn->out[k] = y;
      g->values[y].producer = px;
      husk(g, t);
      return 1;
    }
    if (g->values[y].is_output || c->readers[y] == 0) return 0;
    for (int i = 0; i < g->nnodes; i++)
      for (int k = 0; k < g->nodes[i].nin; k++)
        if (g->nodes[i].in[k] == y) g->nodes[i].in[k] = x;
    return 1;
  }
  int src = plain_source(g, t);
  if (src >= 0) return as_reshape(c, t, src);
  int prank, pq[GPUC_MAX_RANK];
  int64_t pzd[GPUC_MAX_RANK];
  if (permuted && (src = permuted_source(c, t, &prank, pzd, pq)) >= 0) return as_permuted(c, t, src, prank, pzd, pq);
  int r1, r2 = flat_norm_chain(c, t, &p, &r1);
  if (r2 >= 0 && reaches_transpose(c, g->nodes[r2].out[0], &p)) return sink_flat_norm(c, t, r1, r2, &p);
  int ni = sole_reader(c, y);
  if (ni < 0) return 0;
  const Node *n = &g->nodes[ni];
  int k = 0;
  while (k < n->nin && n->in[k] != y) k++;
  bool merges;
  if (k == n->nin || !sinkable(g, n, k, &p, c->training, &merges)) return 0;
  if (!merges && !reaches_transpose(c, n->out[0], &p)) return 0;
  return sink(c, t, ni, k, &p);
}

int pass_simplify_transpose(Graph *g, const PassOptions *o, GpucErr *e) {
  Ctx c = {.g = g, .training = o->training, .e = e};
  int changes = 0;
  bool permuted = !pass_env_on("GPUC_NO_PERMUTED_TRANSPOSE"); /* the rule off: a GPU A/B */
  for (int round = 0; round < 1000; round++) {
    int changed = 0;
    for (int t = 0; t < g->nnodes; t++) {
      if (g->nodes[t].op != GPUC_OP_TRANSPOSE) continue;
      if (recount(&c)) goto fail;
      int rc = rewrite_at(&c, t, permuted);
      if (rc < 0) goto fail;
      changed += rc;
    }
    if (!changed) break;
    changes += changed;
    if (gpuc_graph_toposort(g, e)) goto fail;
  }
  free(c.readers);
  free(c.reader);
  if (changes && (pass_dead_code(g, o, e) < 0 || gpuc_graph_infer(g, e))) return -1;
  return changes;
fail:
  free(c.readers);
  free(c.reader);
  return -1;
}
