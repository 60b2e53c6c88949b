/* A GELU written out as elementwise ops -> one Gelu node (ir/ops.def), so
 * that fuse_matmul_act can put it in the GEMM's epilogue and the fusion
 * groups see one op instead of eight.
 *
 * Exporters spell GELU many ways: the tanh form
 *   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
 * (GPT-2's gelu_new; x^3 as Pow(x, 3) or Mul(x, Mul(x, x)), 0.5 applied
 * first or last, sqrt(2/pi) multiplied in or the sum expanded), and the erf
 * form x * 0.5 * (1 + erf(x / sqrt 2)) (Div by sqrt 2 or Mul by 1/sqrt 2).
 * So a candidate is recognized by what it computes, not by its spelling:
 * around each Tanh or Erf, a region of Add/Sub/Mul/Div/Pow/Neg/Sqrt/Tanh/
 * Erf nodes with one root value x and scalar constants is evaluated in
 * double at 21 points in [-6, 6]; when it equals GELU's tanh or erf form
 * there within 1e-5 (relative above 1), it becomes Gelu(x) with
 * approximate "tanh" or "none". The two forms differ by up to 4.7e-4, so the
 * test tells them apart; the float32 constants exporters write (0.044715f,
 * sqrt(2/pi) rounded) are within 1e-7. A polynomial that only agrees at
 * 21 points would need degree 20+; the region holds at most 12 nodes of
 * which Tanh/Erf are the only non-rational ones, so agreement at the points
 * is agreement of the functions for every spelling exporters write.
 *
 * Conditions: every value inside the region is read only by the region
 * and is no graph output (only the GELU's result leaves it); every node's
 * output has x's shape and dtype (no broadcasting inside); the constants
 * are one-element floats. Runs at -O2 before fuse_matmul_act. */
#include "passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_REGION = 12, MAX_ROOTS = 16, NPOINTS = 21 };

static bool region_op(GpucOp op) {
  switch (op) {
  case GPUC_OP_ADD: case GPUC_OP_SUB: case GPUC_OP_MUL: case GPUC_OP_DIV: case GPUC_OP_POW:
  case GPUC_OP_NEG: case GPUC_OP_SQRT: case GPUC_OP_TANH: case GPUC_OP_ERF:
    return true;
  default:
    return false;
  }
}

/* a one-element float constant: its value in *x */
static bool scalar(const Graph *g, int v, double *x) {
  const Value *c = &g->values[v];
  if (!c->is_const || !c->t.data || !gpuc_dtype_is_float(c->t.dt) || gpuc_numel(&c->t) != 1) return false;
  *x = gpuc_get_f64(&c->t, 0);
  return true;
}

static bool same_type(const Tensor *a, const Tensor *b) {
  if (a->dt != b->dt || a->rank != b->rank || !gpuc_shape_known(a) || !gpuc_shape_known(b)) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

typedef struct {
  int node[MAX_REGION]; /* node indices, sorted (topological order) */
  int n;
} Region;

static bool has(const Region *r, int i) {
  for (int k = 0; k < r->n; k++)
    if (r->node[k] == i) return true;
  return false;
}

/* The nodes between root x and value v: every path up from v through
 * region ops ends at x or at a scalar constant. False when some path
 * leaves (another input, a non-region op) or the region grows too big. */
static bool collect(const Graph *g, int v, int x, Region *r) {
  double c;
  if (v == x || scalar(g, v, &c)) return true;
  int p = g->values[v].producer;
  if (p < 0 || !region_op(g->nodes[p].op) || g->nodes[p].nout != 1) return false;
  if (has(r, p)) return true;
  if (r->n == MAX_REGION || !same_type(&g->values[v].t, &g->values[x].t)) return false;
  r->node[r->n++] = p;
  for (int k = 0; k < g->nodes[p].nin; k++)
    if (g->nodes[p].in[k] < 0 || !collect(g, g->nodes[p].in[k], x, r)) return false;
  return true;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Only the region's last node's output leaves it. */
static bool closed(const Graph *g, const Region *r, const int *readers) {
  for (int k = 0; k + 1 < r->n; k++) {
    int v = g->nodes[r->node[k]].out[0], inside = 0;
    if (g->values[v].is_output) return false;
    for (int j = 0; j < r->n; j++) {
      const Node *n = &g->nodes[r->node[j]];
      for (int s = 0; s < n->nin; s++) inside += n->in[s] == v;
    }
    if (inside != readers[v]) return false;
  }
  return true;
}

/* The region at x = t; its nodes' outputs in val[] (per region slot). */
static double eval(const Graph *g, const Region *r, int x, double t) {
  double val[MAX_REGION] = {0};
  for (int k = 0; k < r->n; k++) {
    const Node *n = &g->nodes[r->node[k]];
    double a[2] = {0, 0};
    for (int s = 0; s < n->nin && s < 2; s++) {
      int v = n->in[s];
      if (v == x) { a[s] = t; continue; }
      if (scalar(g, v, &a[s])) continue;
      for (int j = 0; j < k; j++)
        if (g->nodes[r->node[j]].out[0] == v) a[s] = val[j];
    }
    switch (n->op) {
    case GPUC_OP_ADD: val[k] = a[0] + a[1]; break;
    case GPUC_OP_SUB: val[k] = a[0] - a[1]; break;
    case GPUC_OP_MUL: val[k] = a[0] * a[1]; break;
    case GPUC_OP_DIV: val[k] = a[0] / a[1]; break;
    case GPUC_OP_POW: val[k] = pow(a[0], a[1]); break;
    case GPUC_OP_NEG: val[k] = -a[0]; break;
    case GPUC_OP_SQRT: val[k] = sqrt(a[0]); break;
    case GPUC_OP_TANH: val[k] = tanh(a[0]); break;
    case GPUC_OP_ERF: val[k] = erf(a[0]); break;
    default: return NAN;
    }
  }
  return val[r->n - 1];
}

static double gelu_form(double x, int tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + erf(x * 0.7071067811865476));
}

/* 1 tanh form, 0 erf form, -1 neither */
static int which_gelu(const Graph *g, const Region *r, int x) {
  for (int form = 1; form >= 0; form--) {
    bool ok = true;
    for (int i = 0; i < NPOINTS && ok; i++) {
      double t = -6.0 + 12.0 * i / (NPOINTS - 1), want = gelu_form(t, form), got = eval(g, r, x, t);
      ok = fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want)); /* false for NaN too */
    }
    if (ok) return form;
  }
  return -1;
}

/* The candidate roots above anchor node a: the non-constant values its
 * region-op ancestors read, nearest first (breadth first). */
static int roots_of(const Graph *g, int a, int roots[MAX_ROOTS]) {
  int n = 0, head = 0;
  int queue[MAX_ROOTS];
  queue[0] = a;
  int nq = 1;
  while (head < nq && n < MAX_ROOTS) {
    const Node *nd = &g->nodes[queue[head++]];
    for (int s = 0; s < nd->nin && n < MAX_ROOTS; s++) {
      int v = nd->in[s];
      double c;
      if (v < 0 || scalar(g, v, &c)) continue;
      bool seen = false;
      for (int k = 0; k < n; k++) seen |= roots[k] == v;
      if (seen) continue;
      roots[n++] = v;
      int p = g->values[v].producer;
      if (p >= 0 && region_op(g->nodes[p].op) && nq < MAX_ROOTS) queue[nq++] = p;
    }
  }
  return n;
}

/* Try the regions around Tanh/Erf node a: ends are a and up to four
 * region-op readers below it (its sole readers, one after another), the
 * farthest first; roots the values above it. On a match node `end`
 * becomes Gelu(root) and the rest of the region is marked in drop. */
static int match(Graph *g, int a, const int *readers, const int *reader, bool *drop, GpucErr *e) {
  int ends[5], nends = 0, v = g->nodes[a].out[0];
  ends[nends++] = a;
  while (nends < 5 && v >= 0 && readers[v] == 1 && !g->values[v].is_output) {
    int rd = reader[v];
    if (!region_op(g->nodes[rd].op) || g->nodes[rd].nout != 1) break;
    ends[nends++] = rd;
    v = g->nodes[rd].out[0];
  }
  int roots[MAX_ROOTS], nroots = roots_of(g, a, roots);
  for (int ei = nends - 1; ei >= 0; ei--) {
    int end = ends[ei];
    for (int ri = 0; ri < nroots; ri++) {
      int x = roots[ri];
      if (!gpuc_dtype_is_float(g->values[x].t.dt)) continue;
      Region r = {.n = 0};
      if (!collect(g, g->nodes[end].out[0], x, &r) || !has(&r, a)) continue;
      bool taken = false;
      for (int k = 0; k < r.n; k++) taken |= drop[r.node[k]];
      if (taken) continue;
      qsort(r.node, (size_t)r.n, sizeof(int), cmp_int);
      if (r.node[r.n - 1] != end || !closed(g, &r, readers)) continue;
      int form = which_gelu(g, &r, x);
      if (form < 0) continue;
      int *in = gpuc_arena_alloc(&g->arena, sizeof(int));
      Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr));
      if (!in || !at) return gpuc_err_set(e, "%s: out of memory", g->path);
      in[0] = x;
      *at = (Attr){.name = "approximate", .kind = GPUC_ATTR_STRING, .s = form ? "tanh" : "none"};
      /* the last node becomes the Gelu, in its place: x comes before it */
      Node *n = &g->nodes[end];
      n->op = GPUC_OP_GELU;
      n->in = in;
      n->nin = 1;
      n->attrs = at;
      n->nattr = 1;
      for (int k = 0; k + 1 < r.n; k++) drop[r.node[k]] = true;
      return 1;
    }
  }
  return 0;
}

int pass_fuse_gelu(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0; /* a backward reads the forward's values by name */
  int nn = g->nnodes, changes = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!readers || !reader || !drop) {
    free(readers); free(reader); free(drop);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < nn; i++) {
    GpucOp op = g->nodes[i].op;
    if ((op != GPUC_OP_TANH && op != GPUC_OP_ERF) || drop[i] || g->nodes[i].nout != 1) continue;
    int r = match(g, i, readers, reader, drop, e);
    if (r < 0) { free(readers); free(reader); free(drop); return -1; }
    changes += r;
  }
  gpuc_graph_remove_nodes(g, drop);
  free(readers); free(reader); free(drop);
  return changes;
}
