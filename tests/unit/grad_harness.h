/* The gradient-check harness shared by test_grad*.c: build a tiny f64
 * graph per case (constants, one node, attributes), loss = ReduceSum(op
 * output * R) for a fixed random R, differentiate with gpuc_autodiff and
 * compare each gradient element with central finite differences on the CPU
 * reference. Functions are static inline: each test uses a subset. */
#ifndef GPUC_GRAD_HARNESS_H
#define GPUC_GRAD_HARNESS_H
#include "autodiff.h"
#include "ref.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"


static uint64_t rng = 2024;
static inline double rnd_u(void) { /* uniform [-1, 1) */
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static Graph *G;
static const char *case_name;
static bool away_from_zero;   /* for Relu: keep inputs off the kink */

static inline int cval(const char *name, GpucDType dt, int rank, const int64_t *dims) {
  int v = gpuc_graph_add_value(G, name);
  GPUC_ASSERT(v >= 0);
  Value *val = &G->values[v];
  gpuc_set_shape(&val->t, dt, rank, dims);
  GpucErr e = {0};
  GPUC_ASSERT(!gpuc_tensor_alloc(&val->t, &e));
  int64_t n = gpuc_numel(&val->t);
  for (int64_t i = 0; i < n; i++) {
    double x = rnd_u();
    if (away_from_zero) x = x < 0 ? x - 0.2 : x + 0.2;
    gpuc_set_f64(&val->t, i, x);
  }
  val->is_const = true;
  val->is_param = gpuc_dtype_is_float(dt);
  return v;
}

static inline int cints(const char *name, int n, const int64_t *x) {
  int64_t d = n;
  int v = cval(name, GPUC_DT_I64, 1, &d);
  for (int i = 0; i < n; i++) gpuc_set_i64(&G->values[v].t, i, x[i]);
  return v;
}

static int last_node;
static inline int node(GpucOp op, const char *name, int nin, const int *ins) {
  int ni = gpuc_graph_add_node(G, op, name, nin, 1);
  GPUC_ASSERT(ni >= 0);
  Node *n = &G->nodes[ni];
  n->attrs = gpuc_arena_alloc(&G->arena, sizeof(Attr) * 8);
  for (int k = 0; k < nin; k++) n->in[k] = ins[k];
  char vn[128];
  snprintf(vn, sizeof vn, "%s.out", name);
  int v = gpuc_graph_add_value(G, vn);
  G->nodes[ni].out[0] = v;
  G->values[v].producer = ni;
  last_node = ni;
  return v;
}
static inline Attr *attr(const char *name, GpucAttrKind k) {
  Node *n = &G->nodes[last_node];
  Attr *a = &n->attrs[n->nattr++];
  memset(a, 0, sizeof *a);
  a->name = name;
  a->kind = k;
  return a;
}
static inline void attr_i(const char *name, int64_t v) { attr(name, GPUC_ATTR_INT)->i = v; }
static inline void attr_f(const char *name, float v) { attr(name, GPUC_ATTR_FLOAT)->f = v; }
static inline void attr_s(const char *name, const char *s) { attr(name, GPUC_ATTR_STRING)->s = s; }
static inline void attr_ints(const char *name, int n, const int64_t *v) {
  Attr *a = attr(name, GPUC_ATTR_INTS);
  a->n = n;
  a->ints = gpuc_arena_alloc(&G->arena, sizeof(int64_t) * (size_t)(n ? n : 1));
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

static inline void begin(const char *name) {
  case_name = name;
  G = gpuc_graph_new(name);
  G->opset = 17;
  away_from_zero = false;
}

static inline double loss_of(const Graph *g, GpucErr *e, bool *ok) {
  Tensor *outs[64] = {0};
  GPUC_ASSERT(g->noutputs <= 64);
  *ok = !gpuc_ref_run(g, NULL, outs, e);
  if (!*ok) return 0;
  double l = gpuc_get_f64(outs[0], 0);
  for (int k = 0; k < g->noutputs; k++) gpuc_tensor_free(outs[k]);
  return l;
}

/* y: the op's output. Builds loss = ReduceSum(y * R), differentiates, checks. */
static inline void finish(int y) {
  GpucErr e = {0};
  if (gpuc_graph_infer(G, &e)) {
    CHECK(false, "%s: infer: %s", case_name, e.msg);
    gpuc_graph_free(G);
    return;
  }
  bool save = away_from_zero;
  away_from_zero = false;
  const Tensor *yt = &G->values[y].t;
  int r = cval("R", GPUC_DT_F64, yt->rank, yt->dims);
  away_from_zero = save;
  G->values[r].is_param = false;
  int ins[2] = {y, r};
  int p = node(GPUC_OP_MUL, "loss_mul", 2, ins);
  int loss = node(GPUC_OP_REDUCESUM, "loss_sum", 1, &p);
  attr_i("keepdims", 0);
  G->outputs = gpuc_arena_alloc(&G->arena, sizeof(int));
  G->outputs[0] = loss;
  G->noutputs = 1;
  G->values[loss].is_output = true;
  int nv0 = G->nvalues;
  if (gpuc_graph_infer(G, &e) || gpuc_autodiff(G, loss, &e)) {
    CHECK(false, "%s: autodiff: %s", case_name, e.msg);
    gpuc_graph_free(G);
    return;
  }
  Tensor *outs[64] = {0};
  GPUC_ASSERT(G->noutputs <= 64);
  if (gpuc_ref_run(G, NULL, outs, &e)) {
    CHECK(false, "%s: run: %s", case_name, e.msg);
    gpuc_graph_free(G);
    return;
  }
  int checked = 0;
  for (int k = 1; k < G->noutputs; k++) {
    const char *gname = G->values[G->outputs[k]].name;
    char pname[256];
    snprintf(pname, sizeof pname, "%.*s", (int)(strlen(gname) - 5), gname);
    int pv = gpuc_graph_find_value(G, pname);
    GPUC_ASSERT(pv >= 0 && pv < nv0);
    if (!strcmp(pname, "R")) continue; /* the loss's own weights: checked too, but skip */
    Tensor *pt = &G->values[pv].t;
    CHECK(outs[k]->rank == pt->rank && gpuc_numel(outs[k]) == gpuc_numel(pt),
          "%s: grad of %s has the wrong shape", case_name, pname);
    if (gpuc_numel(outs[k]) != gpuc_numel(pt)) continue;
    const double eps = 1e-6;
    double worst = 0;
    int64_t worst_i = 0;
    double worst_a = 0, worst_fd = 0;
    for (int64_t i = 0; i < gpuc_numel(pt); i++) {
      double x = gpuc_get_f64(pt, i);
      bool ok1, ok2;
      gpuc_set_f64(pt, i, x + eps);
      double lp = loss_of(G, &e, &ok1);
      gpuc_set_f64(pt, i, x - eps);
      double lm = loss_of(G, &e, &ok2);
      gpuc_set_f64(pt, i, x);
      if (!ok1 || !ok2) { CHECK(false, "%s: run: %s", case_name, e.msg); break; }
      double fd = (lp - lm) / (2 * eps), a = gpuc_get_f64(outs[k], i);
      double err = fabs(a - fd) / fmax(1.0, fmax(fabs(a), fabs(fd)));
      if (err > worst || isnan(err)) { worst = isnan(err) ? INFINITY : err; worst_i = i; worst_a = a; worst_fd = fd; }
    }
    CHECK(worst <= 1e-6, "%s: d loss / d %s[%lld]: autodiff %.10g, finite differences %.10g",
          case_name, pname, (long long)worst_i, worst_a, worst_fd);
    checked++;
  }
  CHECK(checked > 0, "%s: no parameter gradient checked", case_name);
  for (int k = 0; k < G->noutputs; k++) gpuc_tensor_free(outs[k]);
  gpuc_graph_free(G);
}

static const GpucDType F = GPUC_DT_F64;
#endif
