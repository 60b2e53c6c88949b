/* An Attention's mask split into a causal part and a padding row, found
 * by what the mask computes, not by node names.
 *
 * Attention with causal = 1 and causal_fill F (ir/ops.def; F = -inf when
 * absent) scores key j of query i as
 *   scale q.k + F      for j > i (the mask is not read there),
 *   scale q.k + R[j]   for j <= i, R the mask input [B or 1, H or 1, 1, Sk],
 * so the kernels skip the key blocks above the diagonal and read one mask
 * row per batch instead of [B,1,Sq,Sk] (codegen/lower_attention_stream.c
 * stages it per key block). A mask M broadcast to [B,H,Sq,Sk] becomes
 * that when M[i,j] is provably R[j] on and below the diagonal and F above
 * it: the same numbers, so the rewrite is exact, rows whose keys are all
 * masked included. Axes in right-aligned broadcasting: -2 is the query's,
 * -1 the key's. The forms:
 *   const  a constant, 0 on and below the diagonal, <= -1e30 above: no
 *          mask, F = -inf (every row keeps key 0 at score + 0, so the keys
 *          above weigh exp(<= -1e30) = 0 whatever their fill);
 *   where  Where(C, X, Y), C = T or And(T, P) (either order, through
 *          Expands), T the constant bool "j <= i", P bool and X not varying
 *          along the query axis, Y a constant scalar <= -1e30: F = Y,
 *          R = Where(P, X, Y) or X; and the dual, C = U or Or(U, Q), U
 *          "j > i", X the constant: F = X, R = Where(Q, X, Y) or Y.
 *          transformers' masks as both exporters write them:
 *          Where(And(causal, padding), 0, -inf) (TorchScript) or
 *          Where(And(causal, padding), 0, float min) (dynamo, opset 20);
 *   add    Add(A, P), A a const-form triangle, P not varying along the
 *          query axis with values known to lie in [lo, hi] (value_range):
 *          R = P (0 + p = p); above, A + P is -inf where A is -inf (F =
 *          -inf); for a finite A (float min + float min is -inf, + 0 is
 *          float min: not one number) only when P masks no key as hard
 *          (lo > -1e29, hi <= 1e29): every row's max is then > -1e29 +
 *          score and the keys above weigh 0 either way (F = -inf);
 *   min    Min(A, P): R = P when hi <= 0; above min(A, p) = A when
 *          lo >= A (one fill), -inf when A is, else as for add.
 * Fully masked rows (left padding: query i whose keys 0..i are all
 * padding): with the float-min mask every key of the row holds float min
 * exactly (score + float min rounds to it), so its softmax is uniform
 * over all Sk keys, the keys above the diagonal included. F = float min
 * keeps that: the reference adds F above the diagonal as the mask did, and
 * the rows kernel scores the keys above the diagonal too when a row's max
 * after key i is <= F / 2 (in half, float min rounds to -inf like the mask
 * constant it came from: passes/fp16.c rounds F). With F = -inf such rows
 * are -inf everywhere (NaN, 0 with nan_to_zero) before and after.
 * The kernels' causal offset is 0 (j > i): a decode step's mask (Sq < Sk,
 * keys up to i + Sk - Sq) does not match "j <= i" and stays a mask. */
#include "causal_mask.h"
#include "infer_linalg.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HARD_FILL (-1e30) /* a fill at most this is a masked key (PyTorch's float min, -inf) */

static const Node *producer(const Graph *g, int v, GpucOp op) {
  if (v < 0) return NULL;
  int p = g->values[v].producer;
  return p >= 0 && g->nodes[p].op == op ? &g->nodes[p] : NULL;
}

static int skip_expand(const Graph *g, int v) {
  const Node *ex;
  while ((ex = producer(g, v, GPUC_OP_EXPAND))) v = ex->in[0];
  return v;
}

/* v, or what the Expands that made it read, when its values do not vary
 * along the query axis (-2): rank < 2, or dim 1 there; else -1 */
static int row_value(const Graph *g, int v) {
  for (;;) {
    const Tensor *t = &g->values[v].t;
    if (t->rank >= 0 && gpuc_shape_known(t) && (t->rank < 2 || t->dims[t->rank - 2] == 1)) return v;
    const Node *ex = producer(g, v, GPUC_OP_EXPAND);
    if (!ex) return -1;
    v = ex->in[0];
  }
}

static bool const_scalar(const Graph *g, int v, double *x) {
  const Value *val = &g->values[v];
  if (!val->is_const || !val->t.data || !gpuc_dtype_is_float(val->t.dt) || gpuc_numel(&val->t) != 1) return false;
  *x = gpuc_get_f64(&val->t, 0);
  return true;
}

enum { TRI_KEEP, TRI_DROP, TRI_FLOAT }; /* bool j <= i; bool j > i; float 0 on/below, <= -1e30 above */

/* v a constant of rank >= 2, leading dims 1, last two [Sq,Sk], of the
 * kind; for TRI_FLOAT *fill: the one value above the diagonal, NAN when
 * they differ, -inf when there is none */
static bool tri_const(const Graph *g, int v, int64_t Sq, int64_t Sk, int kind, double *fill) {
  const Value *val = &g->values[v];
  const Tensor *t = &val->t;
  if (!val->is_const || !t->data || t->rank < 2 || t->dims[t->rank - 2] != Sq || t->dims[t->rank - 1] != Sk)
    return false;
  for (int d = 0; d < t->rank - 2; d++)
    if (t->dims[d] != 1) return false;
  if ((kind == TRI_FLOAT) != gpuc_dtype_is_float(t->dt) || (kind != TRI_FLOAT && t->dt != GPUC_DT_BOOL)) return false;
  double f = -INFINITY;
  bool first = true;
  for (int64_t i = 0; i < Sq; i++)
    for (int64_t j = 0; j < Sk; j++) {
      double x = gpuc_get_f64(t, i * Sk + j);
      if (kind != TRI_FLOAT) {
        if ((x != 0) != ((j <= i) == (kind == TRI_KEEP))) return false;
      } else if (j <= i ? x != 0 : !(x <= HARD_FILL)) {
        return false;
      } else if (j > i) {
        if (first) f = x;
        else if (x != f) f = NAN;
        first = false;
      }
    }
  if (fill) *fill = f;
  return true;
}

/* C computes (j <= i) AND P (keep) or (j > i) OR P (!keep), P not varying
 * along the query axis: *p = P (a row value), or -1 for the triangle alone */
static bool causal_bool(const Graph *g, int c, int64_t Sq, int64_t Sk, bool keep, int *p) {
  int kind = keep ? TRI_KEEP : TRI_DROP;
  c = skip_expand(g, c);
  if (tri_const(g, c, Sq, Sk, kind, NULL)) { *p = -1; return true; }
  const Node *n = producer(g, c, keep ? GPUC_OP_AND : GPUC_OP_OR);
  for (int side = 0; n && side < 2; side++) {
    int r = row_value(g, n->in[1 - side]);
    if (r >= 0 && tri_const(g, skip_expand(g, n->in[side]), Sq, Sk, kind, NULL)) { *p = r; return true; }
  }
  return false;
}

/* every value v can hold lies in [lo, hi], no NaN, |x| <= FLT_MAX:
 * constants, Where of known values, Casts of bools, ops that move or
 * broadcast values, Add/Sub/Mul of known values; false when unknown */
static bool value_range(const Graph *g, int v, double *lo, double *hi, int depth) {
  const Value *val = &g->values[v];
  if (val->is_const && val->t.data) {
    int64_t n = gpuc_numel(&val->t);
    if (n < 1) return false;
    *lo = INFINITY; *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
      double x = gpuc_get_f64(&val->t, i);
      if (!(fabs(x) <= FLT_MAX)) return false;
      if (x < *lo) *lo = x;
      if (x > *hi) *hi = x;
    }
    return true;
  }
  if (val->producer < 0 || depth > 32) return false;
  const Node *n = &g->nodes[val->producer];
  double l0, h0, l1, h1;
  switch (n->op) {
  case GPUC_OP_WHERE:
    if (!value_range(g, n->in[1], &l0, &h0, depth + 1) || !value_range(g, n->in[2], &l1, &h1, depth + 1)) return false;
    *lo = fmin(l0, l1); *hi = fmax(h0, h1);
    return true;
  case GPUC_OP_CAST:
    if (g->values[n->in[0]].t.dt == GPUC_DT_BOOL) { *lo = 0; *hi = 1; return true; }
    /* widening only: f16/bf16 would round float min to -inf */
    if (val->t.dt != GPUC_DT_F32 && val->t.dt != GPUC_DT_F64) return false;
    return value_range(g, n->in[0], lo, hi, depth + 1);
  case GPUC_OP_EXPAND: case GPUC_OP_RESHAPE: case GPUC_OP_UNSQUEEZE: case GPUC_OP_SQUEEZE:
  case GPUC_OP_FLATTEN: case GPUC_OP_TRANSPOSE: case GPUC_OP_IDENTITY: case GPUC_OP_SLICE:
  case GPUC_OP_GATHER: case GPUC_OP_GATHERND:
    return value_range(g, n->in[0], lo, hi, depth + 1);
  case GPUC_OP_ADD: case GPUC_OP_SUB: case GPUC_OP_MUL: {
    if (!value_range(g, n->in[0], &l0, &h0, depth + 1) || !value_range(g, n->in[1], &l1, &h1, depth + 1)) return false;
    double c[4];
    if (n->op == GPUC_OP_ADD) { c[0] = l0 + l1; c[1] = h0 + h1; c[2] = c[0]; c[3] = c[1]; }
    else if (n->op == GPUC_OP_SUB) { c[0] = l0 - h1; c[1] = h0 - l1; c[2] = c[0]; c[3] = c[1]; }
    else { c[0] = l0 * l1; c[1] = l0 * h1; c[2] = h0 * l1; c[3] = h0 * h1; }
    *lo = fmin(fmin(c[0], c[1]), fmin(c[2], c[3]));
    *hi = fmax(fmax(c[0], c[1]), fmax(c[2], c[3]));
    return fabs(*lo) <= FLT_MAX && fabs(*hi) <= FLT_MAX; /* else it may overflow to inf in f32 */
  }
  default:
    return false;
  }
}

/* the split of a mask: F, and R = r, or Where(wc, wx, wy) to be made when
 * wc >= 0; r = wc = -1: no mask */
typedef struct {
  double fill;
  int r, wc, wx, wy;
} Split;

static bool split_where(const Graph *g, const Node *w, int64_t Sq, int64_t Sk, Split *s) {
  double f;
  int p;
  /* Where(T [and P], X, fill): F = fill, R = Where(P, X, fill) or X */
  if (const_scalar(g, w->in[2], &f) && f <= HARD_FILL && causal_bool(g, w->in[0], Sq, Sk, true, &p)) {
    int x = row_value(g, w->in[1]);
    if (x < 0) return false;
    *s = (Split){.fill = f, .r = p < 0 ? x : -1, .wc = p, .wx = x, .wy = w->in[2]};
    return true;
  }
  /* Where(U [or Q], fill, Y): F = fill, R = Where(Q, fill, Y) or Y */
  if (const_scalar(g, w->in[1], &f) && f <= HARD_FILL && causal_bool(g, w->in[0], Sq, Sk, false, &p)) {
    int y = row_value(g, w->in[2]);
    if (y < 0) return false;
    *s = (Split){.fill = f, .r = p < 0 ? y : -1, .wc = p, .wx = w->in[1], .wy = y};
    return true;
  }
  return false;
}

/* Add(A, P) / Min(A, P) in either order (the header's add and min) */
static bool split_add_min(const Graph *g, const Node *n, int64_t Sq, int64_t Sk, Split *s) {
  for (int side = 0; side < 2; side++) {
    double fa, lo, hi;
    int p = row_value(g, n->in[1 - side]);
    if (p < 0 || !tri_const(g, skip_expand(g, n->in[side]), Sq, Sk, TRI_FLOAT, &fa) ||
        !value_range(g, p, &lo, &hi, 0))
      continue;
    bool soft = lo > -1e29 && hi <= 1e29; /* P masks no key as hard as the triangle */
    double f;
    if (n->op == GPUC_OP_ADD) {
      if (isinf(fa) || soft) f = -INFINITY;
      else continue;
    } else {
      if (hi > 0) continue; /* min(0, p) would not be p */
      if (isinf(fa)) f = -INFINITY;
      else if (!isnan(fa) && lo >= fa) f = fa;
      else if (soft) f = -INFINITY;
      else continue;
    }
    *s = (Split){.fill = f, .r = p, .wc = -1};
    return true;
  }
  return false;
}

static bool split_mask(const Graph *g, int m, int64_t Sq, int64_t Sk, Split *s) {
  m = skip_expand(g, m);
  if (tri_const(g, m, Sq, Sk, TRI_FLOAT, NULL)) {
    *s = (Split){.fill = -INFINITY, .r = -1, .wc = -1};
    return true;
  }
  const Node *n = producer(g, m, GPUC_OP_WHERE);
  if (n) return split_where(g, n, Sq, Sk, s);
  n = producer(g, m, GPUC_OP_ADD);
  if (!n) n = producer(g, m, GPUC_OP_MIN);
  return n && n->nin == 2 && split_add_min(g, n, Sq, Sk, s);
}

/* t broadcasts to [B,H,1,Sk] */
static bool row_fits(const Tensor *t, const int64_t full[4]) {
  if (t->rank < 0 || t->rank > 4 || !gpuc_shape_known(t)) return false;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] != 1 && t->dims[d] != full[4 - t->rank + d]) return false;
  return true;
}

static bool all_zero(const Graph *g, int v) {
  const Value *val = &g->values[v];
  if (!val->is_const || !val->t.data) return false;
  for (int64_t i = 0; i < gpuc_numel(&val->t); i++)
    if (gpuc_get_f64(&val->t, i) != 0) return false;
  return true;
}

/* causal = 1 and, for a finite fill, causal_fill on node i (a copy of its
 * attributes with those added) */
static int set_causal(Graph *g, int i, double fill, GpucErr *e) {
  Node *n = &g->nodes[i];
  int add = isinf(fill) ? 1 : 2;
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr) * (size_t)(n->nattr + add));
  if (!at) return gpuc_err_set(e, "%s: out of memory", g->path);
  memcpy(at, n->attrs, sizeof(Attr) * (size_t)n->nattr);
  at[n->nattr] = (Attr){.name = "causal", .kind = GPUC_ATTR_INT, .i = 1};
  if (add == 2) at[n->nattr + 1] = (Attr){.name = "causal_fill", .kind = GPUC_ATTR_FLOAT, .f = (float)fill};
  n->attrs = at;
  n->nattr += add;
  return 0;
}

int gpuc_causal_memo_init(CausalMemo *m, int cap) {
  m->n = 0;
  m->cap = cap;
  m->mask = malloc(sizeof(int) * ((size_t)cap + 1));
  m->rest = malloc(sizeof(int) * ((size_t)cap + 1));
  m->fill = malloc(sizeof(double) * ((size_t)cap + 1));
  if (m->mask && m->rest && m->fill) return 0;
  gpuc_causal_memo_free(m);
  return -1;
}

void gpuc_causal_memo_free(CausalMemo *m) {
  free(m->mask); free(m->rest); free(m->fill);
  m->mask = m->rest = NULL;
  m->fill = NULL;
}

/* R's value: r, or a new Where(wc, wx, wy) named after the mask's Where;
 * -1: no mask (none, or all zeros), -2: out of memory */
static int make_rest(Graph *g, int m, const Split *s, GpucErr *e) {
  if (s->wc < 0) return s->r >= 0 && all_zero(g, s->r) ? -1 : s->r;
  char name[512];
  int w0 = g->values[skip_expand(g, m)].producer;
  snprintf(name, sizeof name, "%s/padding", g->nodes[w0].name);
  int w = gpuc_graph_add_node(g, GPUC_OP_WHERE, name, 3, 1);
  snprintf(name, sizeof name, "%s/padding_output", g->values[m].name);
  int v = w < 0 ? -1 : gpuc_graph_add_value(g, name);
  if (v < 0) {
    gpuc_err_set(e, "%s: out of memory", g->path);
    return -2;
  }
  Node *wn = &g->nodes[w];
  wn->in[0] = s->wc; wn->in[1] = s->wx; wn->in[2] = s->wy;
  wn->out[0] = v;
  g->values[v].producer = w;
  return v;
}

int gpuc_attention_causal_mask(Graph *g, int i, CausalMemo *memo, GpucErr *e) {
  Node *n = &g->nodes[i];
  if (n->nin < 4 || n->in[3] < 0 || gpuc_attr_i(n, "causal", 0)) return 0;
  GpucAttnGeom a;
  if (gpuc_attention_geom(n, &g->values[n->in[0]].t, &g->values[n->in[1]].t, &g->values[n->in[2]].t, &a))
    return 0;
  if (a.mask_period) return 0; /* a per-window mask (passes/fuse_attention.c), not a causal one */
  int m = n->in[3], k = 0;
  while (k < memo->n && memo->mask[k] != m) k++;
  if (k == memo->n) {
    Split s;
    int64_t full[4] = {a.B, a.H, 1, a.Sk};
    if (!split_mask(g, m, a.Sq, a.Sk, &s)) return 0;
    /* R, or each input of the Where that makes it, one row per batch */
    int parts[3] = {s.r, s.wc, s.wc >= 0 ? s.wx : -1};
    for (int q = 0; q < 3; q++)
      if (parts[q] >= 0 && !row_fits(&g->values[parts[q]].t, full)) return 0;
    if (s.wc >= 0 && !row_fits(&g->values[s.wy].t, full)) return 0;
    if (memo->n == memo->cap) return 0;
    int r = make_rest(g, m, &s, e);
    if (r < -1) return -1;
    memo->mask[k] = m;
    memo->rest[k] = r;
    memo->fill[k] = s.fill;
    memo->n++;
  }
  if (set_causal(g, i, memo->fill[k], e)) return -1;
  n = &g->nodes[i];
  n->in[3] = memo->rest[k];
  if (n->in[3] < 0) n->nin = 3;
  return 1;
}
