/* Gradient rules for the ops of transformers and MLPs (beyond grad_rules.c):
 * elementwise math (Div, Neg, Sqrt, Exp, Log, Pow, Erf), Softmax/LogSoftmax,
 * ReduceMean, shape and data movement (Transpose, Concat, Slice, Gather,
 * Unsqueeze/Squeeze, Expand, Where), LayerNormalization, Dropout and the
 * trainer's DropoutTrain (training mode, the forward mask reused) and N-D
 * MatMul (gpuc_grad_matmul_nd, called by grad_MatMul for ranks other than
 * 2-by-2).
 *
 * Everything is written with ordinary ops of the table except the scatter-add
 * of Gather's gradient: the internal op GatherGrad(dy, indices, shape). */
#include "autodiff.h"
#include "dropout_rng.h"
#include "infer_elementwise.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TRY(x) do { if ((x) < 0) return -1; } while (0)

static GpucDType dt_of(GradCtx *c, int v) { return gc_t(c, v)->dt; }

/* ---- elementwise math --------------------------------------------------------- */

int grad_Neg(GradCtx *c) {
  TRY(c->dx[0] = gc_emit1(c, GPUC_OP_NEG, c->dy[0]));
  return 0;
}

/* y = a / b: da = dy / b, db = -dy * y / b (both unbroadcast) */
int grad_Div(GradCtx *c) {
  int a = gc_in(c, 0), b = gc_in(c, 1), y = gc_out(c, 0), dy = c->dy[0];
  if (c->need[0]) {
    int t = gc_emit2(c, GPUC_OP_DIV, dy, b);
    TRY(t);
    TRY(c->dx[0] = gc_unbroadcast(c, t, a));
  }
  if (c->need[1]) {
    int t = gc_emit2(c, GPUC_OP_MUL, dy, y);
    TRY(t);
    TRY(t = gc_emit2(c, GPUC_OP_DIV, t, b));
    TRY(t = gc_emit1(c, GPUC_OP_NEG, t));
    TRY(c->dx[1] = gc_unbroadcast(c, t, b));
  }
  return 0;
}

/* dx = dy * 0.5 / y */
int grad_Sqrt(GradCtx *c) {
  int y = gc_out(c, 0), h = gc_scalar(c, dt_of(c, y), 0.5);
  TRY(h);
  int t = gc_emit2(c, GPUC_OP_MUL, c->dy[0], h);
  TRY(t);
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_DIV, t, y));
  return 0;
}

/* dx = dy * y */
int grad_Exp(GradCtx *c) {
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, c->dy[0], gc_out(c, 0)));
  return 0;
}

/* dx = dy / x */
int grad_Log(GradCtx *c) {
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_DIV, c->dy[0], gc_in(c, 0)));
  return 0;
}

/* y = a ^ b: da = dy * b * a^(b-1); db = dy * y * log(a) (only when the
 * exponent is itself differentiated, e.g. not a constant). An exponent of
 * another dtype is cast to the base's first. */
int grad_Pow(GradCtx *c) {
  int a = gc_in(c, 0), b = gc_in(c, 1), y = gc_out(c, 0), dy = c->dy[0];
  GpucDType dt = dt_of(c, a);
  if (c->need[0]) {
    int bb = b;
    if (dt_of(c, b) != dt) TRY(bb = gc_emit2(c, GPUC_OP_CASTLIKE, b, a));
    int one = gc_scalar(c, dt, 1.0);
    TRY(one);
    int bm1 = gc_emit2(c, GPUC_OP_SUB, bb, one);
    TRY(bm1);
    int p = gc_emit2(c, GPUC_OP_POW, a, bm1);
    TRY(p);
    TRY(p = gc_emit2(c, GPUC_OP_MUL, p, bb));
    TRY(p = gc_emit2(c, GPUC_OP_MUL, dy, p));
    TRY(c->dx[0] = gc_unbroadcast(c, p, a));
  }
  if (c->need[1]) {
    if (dt_of(c, b) != dt) return gc_fail(c, "exponent of another dtype than the base");
    int l = gc_emit1(c, GPUC_OP_LOG, a);
    TRY(l);
    int t = gc_emit2(c, GPUC_OP_MUL, dy, y);
    TRY(t);
    TRY(t = gc_emit2(c, GPUC_OP_MUL, t, l));
    TRY(c->dx[1] = gc_unbroadcast(c, t, b));
  }
  return 0;
}

/* dx = dy * 2/sqrt(pi) * exp(-x^2) */
int grad_Erf(GradCtx *c) {
  int x = gc_in(c, 0);
  int k = gc_scalar(c, dt_of(c, x), 1.1283791670955126); /* 2 / sqrt(pi) */
  TRY(k);
  int t = gc_emit2(c, GPUC_OP_MUL, x, x);
  TRY(t);
  TRY(t = gc_emit1(c, GPUC_OP_NEG, t));
  TRY(t = gc_emit1(c, GPUC_OP_EXP, t));
  TRY(t = gc_emit2(c, GPUC_OP_MUL, t, k));
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, c->dy[0], t));
  return 0;
}

/* Gelu: dx = dy * gelu'(x). Erf form: Phi(x) + x phi(x), with
 * Phi = 0.5 (1 + erf(x / sqrt 2)) and phi = exp(-x^2 / 2) / sqrt(2 pi).
 * Tanh form, u = k (x + a x^3), t = tanh(u):
 * 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2). */
int grad_Gelu(GradCtx *c) {
  int x = gc_in(c, 0);
  GpucDType dt = dt_of(c, x);
  int half = gc_scalar(c, dt, 0.5), one = gc_scalar(c, dt, 1.0);
  TRY(half);
  TRY(one);
  int x2 = gc_emit2(c, GPUC_OP_MUL, x, x);
  TRY(x2);
  int d; /* gelu'(x) */
  if (gpuc_gelu_tanh(gc_node(c)) == 1) {
    int k = gc_scalar(c, dt, 0.7978845608028654), a = gc_scalar(c, dt, 0.044715);
    int a3 = gc_scalar(c, dt, 3 * 0.044715);
    TRY(k);
    TRY(a);
    TRY(a3);
    int u = gc_emit2(c, GPUC_OP_MUL, x2, a); /* a x^2 */
    TRY(u);
    TRY(u = gc_emit2(c, GPUC_OP_ADD, u, one));
    TRY(u = gc_emit2(c, GPUC_OP_MUL, u, x));
    TRY(u = gc_emit2(c, GPUC_OP_MUL, u, k));
    int t = gc_emit1(c, GPUC_OP_TANH, u);
    TRY(t);
    int p = gc_emit2(c, GPUC_OP_ADD, t, one); /* 1 + t */
    TRY(p);
    TRY(p = gc_emit2(c, GPUC_OP_MUL, p, half));
    int q = gc_emit2(c, GPUC_OP_MUL, t, t); /* 1 - t^2 */
    TRY(q);
    TRY(q = gc_emit2(c, GPUC_OP_SUB, one, q));
    int r = gc_emit2(c, GPUC_OP_MUL, x2, a3); /* k (1 + 3 a x^2) */
    TRY(r);
    TRY(r = gc_emit2(c, GPUC_OP_ADD, r, one));
    TRY(r = gc_emit2(c, GPUC_OP_MUL, r, k));
    TRY(q = gc_emit2(c, GPUC_OP_MUL, q, r));
    TRY(q = gc_emit2(c, GPUC_OP_MUL, q, x));
    TRY(q = gc_emit2(c, GPUC_OP_MUL, q, half));
    TRY(d = gc_emit2(c, GPUC_OP_ADD, p, q));
  } else {
    int rs2 = gc_scalar(c, dt, 0.7071067811865476), rs2pi = gc_scalar(c, dt, 0.3989422804014327);
    TRY(rs2);
    TRY(rs2pi);
    int e = gc_emit2(c, GPUC_OP_MUL, x, rs2); /* Phi */
    TRY(e);
    TRY(e = gc_emit1(c, GPUC_OP_ERF, e));
    TRY(e = gc_emit2(c, GPUC_OP_ADD, e, one));
    TRY(e = gc_emit2(c, GPUC_OP_MUL, e, half));
    int p = gc_emit2(c, GPUC_OP_MUL, x2, half); /* x phi */
    TRY(p);
    TRY(p = gc_emit1(c, GPUC_OP_NEG, p));
    TRY(p = gc_emit1(c, GPUC_OP_EXP, p));
    TRY(p = gc_emit2(c, GPUC_OP_MUL, p, rs2pi));
    TRY(p = gc_emit2(c, GPUC_OP_MUL, p, x));
    TRY(d = gc_emit2(c, GPUC_OP_ADD, e, p));
  }
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, c->dy[0], d));
  return 0;
}

/* ---- softmax --------------------------------------------------------------- */

/* The axes a softmax normalizes over: {axis} from opset 13, axis..rank-1
 * (the flattened 2-D view) before. */
static int softmax_axes(GradCtx *c, int64_t *axes) {
  int rank = gc_t(c, gc_in(c, 0))->rank;
  if (rank < 1) return gc_fail(c, "input rank unknown or 0");
  bool v13 = c->g->opset >= 13;
  int64_t axis = gpuc_attr_i(gc_node(c), "axis", v13 ? -1 : 1);
  if (axis < -rank || axis >= rank) return gc_fail(c, "axis out of range");
  if (axis < 0) axis += rank;
  int na = 0;
  if (v13) axes[na++] = axis;
  else for (int64_t d = axis; d < rank; d++) axes[na++] = d;
  return na;
}

/* dx = y * (dy - sum(dy * y)) */
int grad_Softmax(GradCtx *c) {
  int64_t axes[GPUC_MAX_RANK];
  int na = softmax_axes(c, axes);
  TRY(na);
  int y = gc_out(c, 0), dy = c->dy[0];
  int t = gc_emit2(c, GPUC_OP_MUL, dy, y);
  TRY(t);
  TRY(t = gc_reduce_sum(c, t, na, axes, true));
  TRY(t = gc_emit2(c, GPUC_OP_SUB, dy, t));
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, y, t));
  return 0;
}

/* dx = dy - exp(y) * sum(dy) */
int grad_LogSoftmax(GradCtx *c) {
  int64_t axes[GPUC_MAX_RANK];
  int na = softmax_axes(c, axes);
  TRY(na);
  int y = gc_out(c, 0), dy = c->dy[0];
  int s = gc_reduce_sum(c, dy, na, axes, true);
  TRY(s);
  int p = gc_emit1(c, GPUC_OP_EXP, y);
  TRY(p);
  TRY(p = gc_emit2(c, GPUC_OP_MUL, p, s));
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_SUB, dy, p));
  return 0;
}

/* ---- reductions ------------------------------------------------------------ */

/* ReduceSum's gradient (same axes/keepdims handling) divided by the count */
int grad_ReduceMean(GradCtx *c) {
  const Tensor *tx = gc_t(c, gc_in(c, 0)), *ty = gc_t(c, gc_out(c, 0));
  if (!gpuc_shape_known(tx) || !gpuc_shape_known(ty))
    return gc_fail(c, "shapes must be known");
  int64_t nx = gpuc_numel(tx), ny = gpuc_numel(ty);
  double scale = ny > 0 && nx > 0 ? (double)ny / (double)nx : 0.0;
  GpucDType dt = tx->dt;
  TRY(grad_ReduceSum(c));
  if (scale == 1.0) return 0;
  int s = gc_scalar(c, dt, scale);
  TRY(s);
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, c->dx[0], s));
  return 0;
}

/* ---- shape and data movement -------------------------------------------------- */

int grad_Transpose(GradCtx *c) {
  int rank = gc_t(c, gc_in(c, 0))->rank;
  if (rank < 0) return gc_fail(c, "input rank unknown");
  const int64_t *p;
  int np = gpuc_attr_ints(gc_node(c), "perm", &p);
  int64_t inv[GPUC_MAX_RANK];
  if (np <= 0) for (int d = 0; d < rank; d++) inv[d] = rank - 1 - d;
  else {
    if (np != rank) return gc_fail(c, "perm has %d entries for rank %d", np, rank);
    for (int d = 0; d < rank; d++) inv[d] = -1;
    for (int d = 0; d < rank; d++) {
      if (p[d] < 0 || p[d] >= rank || inv[p[d]] >= 0) return gc_fail(c, "bad perm");
      inv[p[d]] = d;
    }
  }
  TRY(c->dx[0] = gc_emit1(c, GPUC_OP_TRANSPOSE, c->dy[0]));
  TRY(gc_attr_ints(c, "perm", rank, inv));
  return 0;
}

/* Slice(x, [start], [end], [axis]) with step 1, for the graph's opset. */
static int slice1(GradCtx *c, int x, int64_t start, int64_t end, int64_t axis) {
  if (c->g->opset >= 10) {
    int s = gc_ints(c, 1, &start), e = gc_ints(c, 1, &end), a = gc_ints(c, 1, &axis);
    if (s < 0 || e < 0 || a < 0) return -1;
    int ins[4] = {x, s, e, a};
    return gc_emit(c, GPUC_OP_SLICE, 4, ins);
  }
  int r = gc_emit1(c, GPUC_OP_SLICE, x);
  if (r < 0 || gc_attr_ints(c, "starts", 1, &start) || gc_attr_ints(c, "ends", 1, &end) ||
      gc_attr_ints(c, "axes", 1, &axis))
    return -1;
  return r;
}

/* each input gets its slab of dy along axis */
int grad_Concat(GradCtx *c) {
  const Node *n = gc_node(c);
  int nin = n->nin, rank = gc_t(c, gc_out(c, 0))->rank;
  if (rank < 1) return gc_fail(c, "output rank unknown");
  int64_t axis = gpuc_attr_i(n, "axis", 0);
  if (axis < -rank || axis >= rank) return gc_fail(c, "axis out of range");
  if (axis < 0) axis += rank;
  int64_t off = 0;
  for (int k = 0; k < nin; k++) {
    int x = gc_in(c, k);
    if (x < 0) continue;
    int64_t d = gc_t(c, x)->dims[axis];
    if (gc_t(c, x)->rank != rank || d < 0) return gc_fail(c, "input %d: extent along axis unknown", k);
    if (c->need[k]) TRY(c->dx[k] = slice1(c, c->dy[0], off, off + d, axis));
    off += d;
  }
  return 0;
}

/* A constant 0-D/1-D integer input, or an ints attribute (older opsets). */
static int const_ints(GradCtx *c, int slot, const char *attr, int64_t *buf, int max) {
  int v = gc_in(c, slot);
  if (v >= 0) {
    const Tensor *t = gc_t(c, v);
    if (!t->data || t->rank > 1) return gc_fail(c, "input %d must be a constant", slot);
    int64_t n = gpuc_numel(t);
    if (n > max) return gc_fail(c, "input %d has too many values", slot);
    for (int64_t i = 0; i < n; i++) buf[i] = gpuc_get_i64(t, i);
    return (int)n;
  }
  if (!attr) return 0;
  const int64_t *p;
  int n = gpuc_attr_ints(gc_node(c), attr, &p);
  if (n < 0) return 0;
  if (n > max) return gc_fail(c, "attribute %s has too many values", attr);
  for (int i = 0; i < n; i++) buf[i] = p[i];
  return n;
}

/* Slice(x, [start], [end], [axis], [step]) for opset 10+. */
static int slice_step(GradCtx *c, int x, int64_t start, int64_t end, int64_t axis, int64_t step) {
  int s = gc_ints(c, 1, &start), e = gc_ints(c, 1, &end), a = gc_ints(c, 1, &axis), t = gc_ints(c, 1, &step);
  if (s < 0 || e < 0 || a < 0 || t < 0) return -1;
  int ins[5] = {x, s, e, a, t};
  return gc_emit(c, GPUC_OP_SLICE, 5, ins);
}

/* Spread dy's L entries along axis a to stride st (st - 1 zeros after each):
 * Unsqueeze(a + 1), Pad that axis to st, Reshape to L * st. */
static int interleave(GradCtx *c, int v, int a, int64_t st) {
  const Tensor *t = gc_t(c, v);
  int rank = t->rank;
  if (rank + 1 > GPUC_MAX_RANK) return gc_fail(c, "rank too large for a strided slice gradient");
  int64_t dims[GPUC_MAX_RANK], ax = a + 1;
  memcpy(dims, t->dims, sizeof(int64_t) * (size_t)rank);
  int u;
  if (c->g->opset >= 13) {
    int av = gc_ints(c, 1, &ax);
    if (av < 0 || (u = gc_emit2(c, GPUC_OP_UNSQUEEZE, v, av)) < 0) return -1;
  } else if ((u = gc_emit1(c, GPUC_OP_UNSQUEEZE, v)) < 0 || gc_attr_ints(c, "axes", 1, &ax)) {
    return -1;
  }
  int64_t pads[2 * GPUC_MAX_RANK] = {0};
  pads[rank + 1 + a + 1] = st - 1;
  int p = gc_ints(c, 2 * (rank + 1), pads);
  if (p < 0 || (u = gc_emit2(c, GPUC_OP_PAD, u, p)) < 0) return -1;
  dims[a] *= st;
  int sh = gc_ints(c, rank, dims);
  return sh < 0 ? -1 : gc_emit2(c, GPUC_OP_RESHAPE, u, sh);
}

/* dx = dy put back at the sliced positions, zeros elsewhere. Step 1: one
 * Pad. Other constant steps, per axis: a negative step reverses dy (Slice
 * with step -1), a step > 1 interleaves zeros, then the same Pad. */
int grad_Slice(GradCtx *c) {
  int x = gc_in(c, 0);
  const Tensor *tx = gc_t(c, x);
  int rank = tx->rank;
  if (!gpuc_shape_known(tx)) return gc_fail(c, "input shape must be known");
  int64_t xd[GPUC_MAX_RANK];
  memcpy(xd, tx->dims, sizeof(int64_t) * (size_t)rank);
  bool v10 = c->g->opset >= 10;
  int64_t st[GPUC_MAX_RANK], en[GPUC_MAX_RANK], ax[GPUC_MAX_RANK], sp[GPUC_MAX_RANK];
  int ns = const_ints(c, v10 ? 1 : 99, v10 ? NULL : "starts", st, GPUC_MAX_RANK);
  TRY(ns);
  int ne = const_ints(c, v10 ? 2 : 99, v10 ? NULL : "ends", en, GPUC_MAX_RANK);
  TRY(ne);
  int na = const_ints(c, v10 ? 3 : 99, "axes", ax, GPUC_MAX_RANK);
  TRY(na);
  int nst = v10 ? const_ints(c, 4, NULL, sp, GPUC_MAX_RANK) : 0;
  TRY(nst);
  if (ns != ne || (na && na != ns) || (nst && nst != ns)) return gc_fail(c, "starts/ends/axes/steps differ in length");
  int64_t pads[2 * GPUC_MAX_RANK] = {0};
  bool seen[GPUC_MAX_RANK] = {0};
  int cur = c->dy[0];
  for (int i = 0; i < ns; i++) {
    int64_t a = na ? ax[i] : i, step = nst ? sp[i] : 1;
    if (a < -rank || a >= rank) return gc_fail(c, "axis out of range");
    if (a < 0) a += rank;
    if (seen[a]) return gc_fail(c, "axis %lld repeated", (long long)a);
    seen[a] = true;
    if (step == 0) return gc_fail(c, "step 0");
    int64_t dim = xd[a], s = st[i], e = en[i], L, lo;
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = s < 0 ? 0 : s > dim ? dim : s;
      e = e < 0 ? 0 : e > dim ? dim : e;
      L = e > s ? (e - s + step - 1) / step : 0;
      lo = s;
    } else {
      s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
      L = s > e ? (s - e - step - 1) / -step : 0;
      lo = L ? s + (L - 1) * step : 0;
    }
    int64_t span = L;
    if (L > 0 && step < 0)
      TRY(cur = slice_step(c, cur, -1, INT64_MIN, a, -1));
    if (L > 1 && (step > 1 || step < -1)) {
      int64_t as = step < 0 ? -step : step;
      TRY(cur = interleave(c, cur, (int)a, as));
      span = L * as > dim - lo ? dim - lo : L * as;
      if (span < L * as) TRY(cur = slice_step(c, cur, 0, span, a, 1));
    }
    pads[a] = lo;
    pads[rank + a] = dim - lo - span;
  }
  int r;
  if (c->g->opset >= 11) {
    int p = gc_ints(c, 2 * rank, pads);
    TRY(p);
    TRY(r = gc_emit2(c, GPUC_OP_PAD, cur, p));
  } else {
    TRY(r = gc_emit1(c, GPUC_OP_PAD, cur));
    TRY(gc_attr_ints(c, "pads", 2 * rank, pads));
  }
  c->dx[0] = r;
  return 0;
}

/* dtable = GatherGrad(dy, indices, Shape(table)): scatter-add of the rows */
int grad_Gather(GradCtx *c) {
  int x = gc_in(c, 0);
  int rank = gc_t(c, x)->rank;
  if (rank < 1) return gc_fail(c, "data rank unknown or 0");
  int64_t axis = gpuc_attr_i(gc_node(c), "axis", 0);
  if (axis < -rank || axis >= rank) return gc_fail(c, "axis out of range");
  if (axis < 0) axis += rank;
  int s = gc_shape_of(c, x);
  TRY(s);
  TRY(c->dx[0] = gc_emit3(c, GPUC_OP_GATHERGRAD, c->dy[0], gc_in(c, 1), s));
  TRY(gc_attr_i(c, "axis", axis));
  return 0;
}

static int reshape_back(GradCtx *c) {
  int s = gc_shape_of(c, gc_in(c, 0));
  TRY(s);
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_RESHAPE, c->dy[0], s));
  return 0;
}

int grad_Unsqueeze(GradCtx *c) { return c->need[0] ? reshape_back(c) : 0; }
int grad_Squeeze(GradCtx *c) { return c->need[0] ? reshape_back(c) : 0; }

int grad_Expand(GradCtx *c) {
  if (c->need[0]) TRY(c->dx[0] = gc_unbroadcast(c, c->dy[0], gc_in(c, 0)));
  return 0;
}

/* dX = Where(cond, dy, 0), dY = Where(cond, 0, dy), each unbroadcast */
int grad_Where(GradCtx *c) {
  int cond = gc_in(c, 0), dy = c->dy[0];
  int zero = gc_scalar(c, dt_of(c, dy), 0.0);
  TRY(zero);
  for (int k = 1; k < 3; k++) {
    if (!c->need[k]) continue;
    int t = k == 1 ? gc_emit3(c, GPUC_OP_WHERE, cond, dy, zero) : gc_emit3(c, GPUC_OP_WHERE, cond, zero, dy);
    TRY(t);
    TRY(c->dx[k] = gc_unbroadcast(c, t, gc_in(c, k)));
  }
  return 0;
}

/* ---- normalization ------------------------------------------------------------- */

/* Statistics recomputed from X over the normalized axes [axis, rank):
 *   xhat = (x - mean) * rstd,  g = dy * scale
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dscale = unbroadcast(dy * xhat),  dbias = unbroadcast(dy) */
int grad_LayerNormalization(GradCtx *c) {
  const Node *n = gc_node(c);
  int x = gc_in(c, 0), scale = gc_in(c, 1), bias = gc_in(c, 2), dy = c->dy[0];
  const Tensor *tx = gc_t(c, x);
  int rank = tx->rank;
  if (!gpuc_shape_known(tx)) return gc_fail(c, "input shape must be known");
  int64_t axis = gpuc_attr_i(n, "axis", -1);
  if (axis < -rank || axis >= rank) return gc_fail(c, "axis out of range");
  if (axis < 0) axis += rank;
  double eps = gpuc_attr_f(n, "epsilon", 1e-5f);
  GpucDType dt = tx->dt;
  int64_t axes[GPUC_MAX_RANK], m = 1;
  int na = 0;
  for (int64_t d = axis; d < rank; d++) { axes[na++] = d; m *= tx->dims[d]; }
  if (m <= 0) return gc_fail(c, "empty normalized shape");
  int invm = gc_scalar(c, dt, 1.0 / (double)m), ceps = gc_scalar(c, dt, eps), one = gc_scalar(c, dt, 1.0);
  TRY(invm); TRY(ceps); TRY(one);
  int mu = gc_reduce_sum(c, x, na, axes, true);
  TRY(mu);
  TRY(mu = gc_emit2(c, GPUC_OP_MUL, mu, invm));
  int xc = gc_emit2(c, GPUC_OP_SUB, x, mu);
  TRY(xc);
  int var = gc_emit2(c, GPUC_OP_MUL, xc, xc);
  TRY(var);
  TRY(var = gc_reduce_sum(c, var, na, axes, true));
  TRY(var = gc_emit2(c, GPUC_OP_MUL, var, invm));
  int rstd = gc_emit2(c, GPUC_OP_ADD, var, ceps);
  TRY(rstd);
  TRY(rstd = gc_emit1(c, GPUC_OP_SQRT, rstd));
  TRY(rstd = gc_emit2(c, GPUC_OP_DIV, one, rstd));
  int xhat = gc_emit2(c, GPUC_OP_MUL, xc, rstd);
  TRY(xhat);
  if (c->need[0]) {
    int g = gc_emit2(c, GPUC_OP_MUL, dy, scale);
    TRY(g);
    int a = gc_reduce_sum(c, g, na, axes, true);
    TRY(a);
    TRY(a = gc_emit2(c, GPUC_OP_MUL, a, invm));
    int b = gc_emit2(c, GPUC_OP_MUL, g, xhat);
    TRY(b);
    TRY(b = gc_reduce_sum(c, b, na, axes, true));
    TRY(b = gc_emit2(c, GPUC_OP_MUL, b, invm));
    TRY(b = gc_emit2(c, GPUC_OP_MUL, xhat, b));
    int t = gc_emit2(c, GPUC_OP_SUB, g, a);
    TRY(t);
    TRY(t = gc_emit2(c, GPUC_OP_SUB, t, b));
    TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, t, rstd));
  }
  if (c->need[1]) {
    int t = gc_emit2(c, GPUC_OP_MUL, dy, xhat);
    TRY(t);
    TRY(c->dx[1] = gc_unbroadcast(c, t, scale));
  }
  if (bias >= 0 && c->need[2]) TRY(c->dx[2] = gc_unbroadcast(c, dy, bias));
  return 0;
}

/* ---- dropout ----------------------------------------------------------------- */

/* dx = Where(mask, dy, 0) * scale, with the forward node's mask output
 * (added when the node had none). */
static int dropout_dx(GradCtx *c, double scale) {
  int mask;
  TRY(mask = gc_second_output(c, "mask", GPUC_DT_BOOL));
  int dy = c->dy[0];
  GpucDType dt = dt_of(c, dy);
  int zero = gc_scalar(c, dt, 0.0), s = gc_scalar(c, dt, scale);
  TRY(zero); TRY(s);
  int t = gc_emit3(c, GPUC_OP_WHERE, mask, dy, zero);
  TRY(t);
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, t, s));
  return 0;
}

int gpuc_dropout_mode(const Graph *g, const Node *n, bool *training, double *ratio, char *why, size_t nwhy) {
  const char *bad = NULL;
  *training = false;
  *ratio = 0.5;
  if (g->opset < 12) {
    *ratio = gpuc_attr_f(n, "ratio", 0.5f);
    *training = g->opset < 7 && gpuc_attr_i(n, "is_test", 0) == 0;
  } else {
    const Tensor *tt = n->nin > 2 && n->in[2] >= 0 ? &g->values[n->in[2]].t : NULL;
    const Tensor *rt = n->nin > 1 && n->in[1] >= 0 ? &g->values[n->in[1]].t : NULL;
    if (tt && (!tt->data || gpuc_numel(tt) != 1)) bad = "training_mode must be a constant with one value";
    else if (tt) *training = gpuc_get_i64(tt, 0) != 0;
    if (rt && rt->data && gpuc_numel(rt) == 1) *ratio = gpuc_get_f64(rt, 0);
    else if (rt && *training) bad = "ratio must be a constant with one value in training mode";
  }
  if (!bad && *training && *ratio != 0 && g->opset < 10)
    bad = "training-mode Dropout before opset 10 is not trained";
  if (bad) snprintf(why, nwhy, "%s", bad);
  return bad ? -1 : 0;
}

/* Inference mode (or ratio 0): identity. Training mode: dx = Where(mask,
 * dy, 0) / (1 - ratio). */
int grad_Dropout(GradCtx *c) {
  bool training;
  double ratio;
  char why[160];
  if (gpuc_dropout_mode(c->g, gc_node(c), &training, &ratio, why, sizeof why)) return gc_fail(c, "%s", why);
  if (!training || ratio == 0) { c->dx[0] = c->dy[0]; return 0; }
  if (!(ratio >= 0 && ratio <= 1)) return gc_fail(c, "ratio %g is outside [0, 1]", ratio);
  return dropout_dx(c, ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0);
}

/* DropoutTrain (the trainer's Dropout, a fresh mask per step): the same
 * rule on its own mask output, so the backward uses the forward's draw. */
int grad_DropoutTrain(GradCtx *c) {
  double ratio = gpuc_attr_f(gc_node(c), "ratio", 0.5f);
  if (!(ratio >= 0 && ratio < 1)) return gc_fail(c, "ratio %g is outside [0, 1)", ratio);
  return dropout_dx(c, gpuc_dropout_scale(ratio));
}

/* ---- N-D MatMul ------------------------------------------------------------------- */

/* Reshape v to (rank, dims) (known). */
static int reshape_to(GradCtx *c, int v, int rank, const int64_t *dims) {
  int s = gc_ints(c, rank, dims);
  return s < 0 ? -1 : gc_emit2(c, GPUC_OP_RESHAPE, v, s);
}

static int swap_last2(GradCtx *c, int v, int rank) {
  int64_t perm[GPUC_MAX_RANK];
  for (int d = 0; d < rank; d++) perm[d] = d;
  perm[rank - 2] = rank - 1;
  perm[rank - 1] = rank - 2;
  int r = gc_emit1(c, GPUC_OP_TRANSPOSE, v);
  if (r < 0 || gc_attr_ints(c, "perm", rank, perm)) return -1;
  return r;
}

/* A [..., M, K] @ B [..., K, N] (1-D operands promoted as numpy does):
 * dA = dY @ B^T, dB = A^T @ dY, each reduced over broadcast batch dims. */
int gpuc_grad_matmul_nd(GradCtx *c) {
  int A = gc_in(c, 0), B = gc_in(c, 1), Y = gc_out(c, 0), dy = c->dy[0];
  Tensor ta = *gc_t(c, A), tb = *gc_t(c, B), ty = *gc_t(c, Y);
  if (!gpuc_shape_known(&ta) || !gpuc_shape_known(&tb) || !gpuc_shape_known(&ty))
    return gc_fail(c, "MatMul shapes must be known");
  if (ta.rank < 1 || tb.rank < 1) return gc_fail(c, "MatMul of a scalar");
  int A2 = A, B2 = B, dy2 = dy;
  /* promoted shapes */
  int64_t ad[GPUC_MAX_RANK], bd[GPUC_MAX_RANK], yd[GPUC_MAX_RANK];
  int ra = ta.rank, rb = tb.rank, ry = ty.rank;
  memcpy(ad, ta.dims, sizeof(int64_t) * (size_t)ra);
  memcpy(bd, tb.dims, sizeof(int64_t) * (size_t)rb);
  memcpy(yd, ty.dims, sizeof(int64_t) * (size_t)ry);
  if (ra == 1) { ad[1] = ad[0]; ad[0] = 1; ra = 2; TRY(A2 = reshape_to(c, A, 2, ad)); }
  if (rb == 1) { bd[1] = 1; rb = 2; TRY(B2 = reshape_to(c, B, 2, bd)); }
  if (ta.rank == 1 || tb.rank == 1) {
    /* Y' = [batch..., M, N] */
    int64_t bat = (ra > rb ? ra : rb) - 2;
    if (bat + 2 > GPUC_MAX_RANK) return gc_fail(c, "rank too large");
    int64_t full[GPUC_MAX_RANK];
    for (int d = 0; d < bat; d++) full[d] = yd[d];
    full[bat] = ad[ra - 2];
    full[bat + 1] = bd[rb - 1];
    ry = (int)bat + 2;
    memcpy(yd, full, sizeof(int64_t) * (size_t)ry);
    TRY(dy2 = reshape_to(c, dy, ry, yd));
  }
  if (c->need[0]) {
    int bt = swap_last2(c, B2, rb);
    TRY(bt);
    int t = gc_emit2(c, GPUC_OP_MATMUL, dy2, bt);
    TRY(t);
    TRY(t = gc_unbroadcast(c, t, A2));
    if (A2 != A) TRY(t = reshape_to(c, t, ta.rank, ta.dims));
    c->dx[0] = t;
  }
  if (c->need[1]) {
    int at = swap_last2(c, A2, ra);
    TRY(at);
    int t = gc_emit2(c, GPUC_OP_MATMUL, at, dy2);
    TRY(t);
    TRY(t = gc_unbroadcast(c, t, B2));
    if (B2 != B) TRY(t = reshape_to(c, t, tb.rank, tb.dims));
    c->dx[1] = t;
  }
  return 0;
}
