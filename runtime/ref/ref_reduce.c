/* Reference kernels of the reductions (Reduce*, ArgMax, ArgMin), CumSum and
 * TopK.
 *
 * Reduce*: the input is split into kept and reduced axes (merged where
 * contiguous). Each output element reduces the same pattern of input
 * offsets shifted by a base offset; the values are gathered in chunks into
 * a small buffer (double for floats, int64 for integers) and folded into an
 * accumulator. Floats accumulate in double; integer Sum/Prod/Max/Min/L1/
 * SumSquare are exact in 64-bit (wrapping like the narrower C types would).
 */
#include "ref_util.h"
#include "infer_reduce.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 1024

typedef enum {
  R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_MAX, R_MEAN, R_MIN, R_PROD, R_SUM, R_SUMSQ
} RedOp;

/* Element loads through the widest type, with the dtype switch outside the
 * loop: n values from x at off, off+stride, ... */
static void load_f64(const Tensor *x, int64_t off, int64_t stride, int64_t n, double *buf) {
  switch (x->dt) {
  case GPUC_DT_F32: {
    const float *p = (const float *)x->data + off;
    for (int64_t i = 0; i < n; i++) buf[i] = p[i * stride];
    break;
  }
  case GPUC_DT_F64: {
    const double *p = (const double *)x->data + off;
    for (int64_t i = 0; i < n; i++) buf[i] = p[i * stride];
    break;
  }
  default:
    for (int64_t i = 0; i < n; i++) buf[i] = gpuc_get_f64(x, off + i * stride);
  }
}

static void load_i64(const Tensor *x, int64_t off, int64_t stride, int64_t n, int64_t *buf) {
  for (int64_t i = 0; i < n; i++) buf[i] = gpuc_get_i64(x, off + i * stride);
}

/* Smallest and largest value of an integer (or bool) dtype, as int64 bit
 * patterns (u64's largest is all ones, i.e. -1). */
static void int_limits(GpucDType dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
  case GPUC_DT_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
  case GPUC_DT_U8: *lo = 0; *hi = UINT8_MAX; break;
  case GPUC_DT_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
  case GPUC_DT_U16: *lo = 0; *hi = UINT16_MAX; break;
  case GPUC_DT_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
  case GPUC_DT_U32: *lo = 0; *hi = UINT32_MAX; break;
  case GPUC_DT_U64: *lo = 0; *hi = -1; break;
  case GPUC_DT_BOOL: *lo = 0; *hi = 1; break;
  default: *lo = INT64_MIN; *hi = INT64_MAX; break;
  }
}

/* a > b in the dtype's order (u64 compares unsigned). */
static inline bool int_gt(int64_t a, int64_t b, bool u64) {
  return u64 ? (uint64_t)a > (uint64_t)b : a > b;
}

/* ---- reduction geometry ------------------------------------------------ */

typedef struct {
  int nk, nr;                       /* kept and reduced (merged) axes */
  int64_t kdim[GPUC_MAX_RANK], kstr[GPUC_MAX_RANK];
  int64_t rdim[GPUC_MAX_RANK], rstr[GPUC_MAX_RANK];
  int64_t nout, nred;               /* output elements; inputs per output */
  int64_t *tab, ntab;               /* offsets of the reduced sub-block, all
                                       but its innermost axis */
  int64_t inner, istr;              /* innermost reduced axis: size, stride */
} RedGeom;

/* Append axis (dim, stride) to a list, merging it into the previous one
 * when the two are contiguous (prev stride == dim * stride). */
static void push_axis(int64_t *dims, int64_t *strides, int *n, int64_t dim, int64_t stride) {
  if (*n > 0 && strides[*n - 1] == dim * stride) {
    dims[*n - 1] *= dim;
    strides[*n - 1] = stride;
    return;
  }
  dims[*n] = dim;
  strides[*n] = stride;
  (*n)++;
}

/* Split x's axes by mask; build the offset table of one reduced block. */
static int geom_init(OpCtx *c, const Tensor *x, const bool *mask, RedGeom *g) {
  memset(g, 0, sizeof *g);
  int64_t str[GPUC_MAX_RANK];
  gpuc_strides(x, str);
  g->nout = g->nred = 1;
  for (int d = 0; d < x->rank; d++) {
    if (mask[d]) g->nred *= x->dims[d];
    else g->nout *= x->dims[d];
    if (x->dims[d] == 1) continue; /* size-1 axes move nothing */
    if (mask[d]) push_axis(g->rdim, g->rstr, &g->nr, x->dims[d], str[d]);
    else push_axis(g->kdim, g->kstr, &g->nk, x->dims[d], str[d]);
  }
  g->inner = g->nr ? g->rdim[g->nr - 1] : 1;
  g->istr = g->nr ? g->rstr[g->nr - 1] : 0;
  g->ntab = g->inner ? g->nred / g->inner : 0;
  g->tab = malloc(sizeof *g->tab * (size_t)(g->ntab + 1));
  if (!g->tab) return gpuc_op_fail(c, "out of host memory");
  int64_t idx[GPUC_MAX_RANK] = {0}, off = 0;
  for (int64_t t = 0; t < g->ntab; t++) { /* odometer over all but the innermost */
    g->tab[t] = off;
    for (int d = g->nr - 2; d >= 0; d--) {
      off += g->rstr[d];
      if (++idx[d] < g->rdim[d]) break;
      off -= g->rstr[d] * idx[d];
      idx[d] = 0;
    }
  }
  return 0;
}

/* Base input offset of output element o (row-major over the kept axes). */
static int64_t geom_base(const RedGeom *g, int64_t o) {
  int64_t off = 0;
  for (int d = g->nk - 1; d >= 0; d--) {
    off += (o % g->kdim[d]) * g->kstr[d];
    o /= g->kdim[d];
  }
  return off;
}

/* Walks the reduced block of one output element in chunks. */
typedef struct {
  const RedGeom *g;
  int64_t base, t, j; /* table entry and position along the innermost axis */
} Walk;

static int64_t walk_next_f(Walk *w, const Tensor *x, double *buf) {
  const RedGeom *g = w->g;
  int64_t n = 0;
  while (n < CHUNK && w->t < g->ntab) {
    int64_t m = g->inner - w->j;
    if (m > CHUNK - n) m = CHUNK - n;
    load_f64(x, w->base + g->tab[w->t] + w->j * g->istr, g->istr, m, buf + n);
    n += m;
    if ((w->j += m) == g->inner) { w->j = 0; w->t++; }
  }
  return n;
}

static int64_t walk_next_i(Walk *w, const Tensor *x, int64_t *buf) {
  const RedGeom *g = w->g;
  int64_t n = 0;
  while (n < CHUNK && w->t < g->ntab) {
    int64_t m = g->inner - w->j;
    if (m > CHUNK - n) m = CHUNK - n;
    load_i64(x, w->base + g->tab[w->t] + w->j * g->istr, g->istr, m, buf + n);
    n += m;
    if ((w->j += m) == g->inner) { w->j = 0; w->t++; }
  }
  return n;
}

/* ---- float reductions (f16/bf16/f32/f64, computed in double) ----------- */

static double reduce_one_f(RedOp op, const Tensor *x, const RedGeom *g, int64_t base,
                           double *buf) {
  Walk w = {g, base, 0, 0};
  double s = 0, p = 1, mx = -INFINITY, mn = INFINITY;
  bool nan = false;
  int64_t n;
  while ((n = walk_next_f(&w, x, buf)) > 0) {
    switch (op) {
    case R_SUM: case R_MEAN: case R_LOGSUM:
      for (int64_t i = 0; i < n; i++) s += buf[i];
      break;
    case R_L1:
      for (int64_t i = 0; i < n; i++) s += fabs(buf[i]);
      break;
    case R_L2: case R_SUMSQ:
      for (int64_t i = 0; i < n; i++) s += buf[i] * buf[i];
      break;
    case R_PROD:
      for (int64_t i = 0; i < n; i++) p *= buf[i];
      break;
    case R_MAX: case R_LOGSUMEXP: /* LogSumExp: first pass finds the max */
      for (int64_t i = 0; i < n; i++) {
        if (buf[i] > mx) mx = buf[i];
        nan |= isnan(buf[i]);
      }
      break;
    case R_MIN:
      for (int64_t i = 0; i < n; i++) {
        if (buf[i] < mn) mn = buf[i];
        nan |= isnan(buf[i]);
      }
      break;
    }
  }
  switch (op) {
  case R_SUM: case R_L1: case R_SUMSQ: return s;
  case R_MEAN: return g->nred ? s / (double)g->nred : NAN;
  case R_LOGSUM: return log(s);
  case R_L2: return sqrt(s);
  case R_PROD: return p;
  case R_MAX: return nan ? NAN : mx;
  case R_MIN: return nan ? NAN : mn;
  case R_LOGSUMEXP: {
    if (nan) return NAN;
    /* log(sum(exp(x - shift))) + shift with shift = max when finite:
     * no overflow; all -inf (or empty) gives -inf, any +inf gives +inf. */
    double shift = isfinite(mx) ? mx : 0;
    Walk w2 = {g, base, 0, 0};
    while ((n = walk_next_f(&w2, x, buf)) > 0)
      for (int64_t i = 0; i < n; i++) s += exp(buf[i] - shift);
    return log(s) + shift;
  }
  }
  return 0;
}

/* ---- integer reductions: exact in 64 bits where the result is an integer */

static void reduce_one_i(RedOp op, const Tensor *x, const RedGeom *g, int64_t base,
                         int64_t *buf, Tensor *y, int64_t o) {
  Walk w = {g, base, 0, 0};
  bool u64 = x->dt == GPUC_DT_U64;
  int64_t lo, hi, n;
  int_limits(x->dt, &lo, &hi);
  uint64_t s = 0, p = 1; /* unsigned: wraps instead of overflowing */
  int64_t mx = lo, mn = hi;
  while ((n = walk_next_i(&w, x, buf)) > 0) {
    switch (op) {
    case R_SUM: case R_MEAN: case R_LOGSUM:
      for (int64_t i = 0; i < n; i++) s += (uint64_t)buf[i];
      break;
    case R_L1:
      for (int64_t i = 0; i < n; i++)
        s += buf[i] < 0 && !u64 ? 0 - (uint64_t)buf[i] : (uint64_t)buf[i];
      break;
    case R_L2: case R_SUMSQ:
      for (int64_t i = 0; i < n; i++) s += (uint64_t)buf[i] * (uint64_t)buf[i];
      break;
    case R_PROD:
      for (int64_t i = 0; i < n; i++) p *= (uint64_t)buf[i];
      break;
    case R_MAX: case R_LOGSUMEXP:
      for (int64_t i = 0; i < n; i++) if (int_gt(buf[i], mx, u64)) mx = buf[i];
      break;
    case R_MIN:
      for (int64_t i = 0; i < n; i++) if (int_gt(mn, buf[i], u64)) mn = buf[i];
      break;
    }
  }
  double sd = u64 ? (double)s : (double)(int64_t)s; /* the sum as a number */
  switch (op) {
  case R_SUM: case R_L1: case R_SUMSQ: gpuc_set_i64(y, o, (int64_t)s); return;
  case R_PROD: gpuc_set_i64(y, o, (int64_t)p); return;
  case R_MAX: gpuc_set_i64(y, o, mx); return;
  case R_MIN: gpuc_set_i64(y, o, mn); return;
  case R_MEAN: /* integer division, truncating like numpy's cast of the mean */
    if (g->nred == 0) gpuc_set_i64(y, o, 0);
    else if (u64) gpuc_set_i64(y, o, (int64_t)(s / (uint64_t)g->nred));
    else gpuc_set_i64(y, o, (int64_t)s / g->nred);
    return;
  case R_L2: gpuc_set_f64(y, o, sqrt(sd)); return;
  case R_LOGSUM: gpuc_set_f64(y, o, log(sd)); return;
  case R_LOGSUMEXP: {
    if (g->nred == 0) { gpuc_set_f64(y, o, -INFINITY); return; }
    double m = u64 ? (double)(uint64_t)mx : (double)mx, acc = 0;
    Walk w2 = {g, base, 0, 0};
    while ((n = walk_next_i(&w2, x, buf)) > 0)
      for (int64_t i = 0; i < n; i++)
        acc += exp((u64 ? (double)(uint64_t)buf[i] : (double)buf[i]) - m);
    gpuc_set_f64(y, o, log(acc) + m);
    return;
  }
  }
}

static int ref_reduce(OpCtx *c, RedOp op) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  bool mask[GPUC_MAX_RANK], known;
  if (gpuc_reduce_axes(c, mask, &known)) return -1;
  GPUC_ASSERT(known);
  RedGeom g;
  if (geom_init(c, x, mask, &g)) return -1;
  GPUC_ASSERT(g.nout == gpuc_numel(y));
  bool is_float = gpuc_dtype_is_float(x->dt);
  void *buf = malloc(CHUNK * 8);
  if (!buf) { free(g.tab); return gpuc_op_fail(c, "out of host memory"); }
  for (int64_t o = 0; o < g.nout; o++) {
    int64_t base = geom_base(&g, o);
    if (is_float) gpuc_set_f64(y, o, reduce_one_f(op, x, &g, base, buf));
    else reduce_one_i(op, x, &g, base, buf, y, o);
  }
  free(buf);
  free(g.tab);
  return 0;
}

int ref_ReduceL1(OpCtx *c) { return ref_reduce(c, R_L1); }
int ref_ReduceL2(OpCtx *c) { return ref_reduce(c, R_L2); }
int ref_ReduceLogSum(OpCtx *c) { return ref_reduce(c, R_LOGSUM); }
int ref_ReduceLogSumExp(OpCtx *c) { return ref_reduce(c, R_LOGSUMEXP); }
int ref_ReduceMax(OpCtx *c) { return ref_reduce(c, R_MAX); }
int ref_ReduceMean(OpCtx *c) { return ref_reduce(c, R_MEAN); }
int ref_ReduceMin(OpCtx *c) { return ref_reduce(c, R_MIN); }
int ref_ReduceProd(OpCtx *c) { return ref_reduce(c, R_PROD); }
int ref_ReduceSum(OpCtx *c) { return ref_reduce(c, R_SUM); }
int ref_ReduceSumSquare(OpCtx *c) { return ref_reduce(c, R_SUMSQ); }

/* ---- [outer, n, inner] view along one axis ------------------------------ */

static void axis_view(const Tensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank; d++) *inner *= x->dims[d];
  *n = x->dims[axis];
}

/* ---- ArgMax / ArgMin ---------------------------------------------------- */

/* The first extreme index along the axis (the last with select_last_index).
 * NaN counts as the extreme, like numpy. */
static int ref_arg(OpCtx *c, bool is_max) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), x->rank, &axis)) return -1;
  bool last = gpuc_attr_i(c->n, "select_last_index", 0) != 0;
  int64_t outer, n, inner;
  axis_view(x, axis, &outer, &n, &inner);
  GPUC_ASSERT(n > 0 || outer * inner == 0);
  bool is_float = gpuc_dtype_is_float(x->dt), u64 = x->dt == GPUC_DT_U64;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * n * inner + i, best = 0;
      if (is_float) {
        double bv = gpuc_get_f64(x, base);
        for (int64_t k = 1; k < n; k++) {
          double v = gpuc_get_f64(x, base + k * inner);
          bool take = isnan(bv) ? last && isnan(v)
                      : isnan(v) || (is_max ? v > bv : v < bv) || (last && v == bv);
          if (take) { best = k; bv = v; }
        }
      } else {
        int64_t bv = gpuc_get_i64(x, base);
        for (int64_t k = 1; k < n; k++) {
          int64_t v = gpuc_get_i64(x, base + k * inner);
          bool take = is_max ? int_gt(v, bv, u64) : int_gt(bv, v, u64);
          if (take || (last && v == bv)) { best = k; bv = v; }
        }
      }
      ((int64_t *)y->data)[o * inner + i] = best;
    }
  return 0;
}

int ref_ArgMax(OpCtx *c) { return ref_arg(c, true); }
int ref_ArgMin(OpCtx *c) { return ref_arg(c, false); }

/* ---- CumSum --------------------------------------------------------------- */

/* Running sums along the axis; exclusive leaves out the element itself,
 * reverse runs from the end. Floats in double, integers wrap in 64 bits. */
int ref_CumSum(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int axis;
  if (gpuc_norm_axis(c, gpuc_get_i64(c->in[1], 0), x->rank, &axis)) return -1;
  bool exclusive = gpuc_attr_i(c->n, "exclusive", 0) != 0;
  bool reverse = gpuc_attr_i(c->n, "reverse", 0) != 0;
  int64_t outer, n, inner;
  axis_view(x, axis, &outer, &n, &inner);
  bool is_float = gpuc_dtype_is_float(x->dt);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double sf = 0;
      uint64_t si = 0;
      for (int64_t t = 0; t < n; t++) {
        int64_t k = reverse ? n - 1 - t : t;
        int64_t at = (o * n + k) * inner + i;
        if (is_float) {
          double v = gpuc_get_f64(x, at);
          if (!exclusive) sf += v;
          gpuc_set_f64(y, at, sf);
          if (exclusive) sf += v;
        } else {
          uint64_t v = (uint64_t)gpuc_get_i64(x, at);
          if (!exclusive) si += v;
          gpuc_set_i64(y, at, (int64_t)si);
          if (exclusive) si += v;
        }
      }
    }
  return 0;
}

/* ---- TopK ------------------------------------------------------------------ */

typedef struct {
  double f;      /* key for floats */
  int64_t i;     /* key for integers (u64 with the sign bit flipped) */
  int64_t idx;   /* position along the axis */
} TopItem;

/* NaN sorts above every number; equal keys keep the lower index first. */
static int cmp_f(const TopItem *a, const TopItem *b) {
  bool an = isnan(a->f), bn = isnan(b->f);
  if (an || bn) return an == bn ? 0 : an ? 1 : -1;
  return a->f < b->f ? -1 : a->f > b->f;
}
static int cmp_i(const TopItem *a, const TopItem *b) { return a->i < b->i ? -1 : a->i > b->i; }
static int by_idx(const TopItem *a, const TopItem *b) { return a->idx < b->idx ? -1 : a->idx > b->idx; }

static int top_largest_f(const void *p, const void *q) {
  int r = cmp_f(q, p);
  return r ? r : by_idx(p, q);
}
static int top_smallest_f(const void *p, const void *q) {
  int r = cmp_f(p, q);
  return r ? r : by_idx(p, q);
}
static int top_largest_i(const void *p, const void *q) {
  int r = cmp_i(q, p);
  return r ? r : by_idx(p, q);
}
static int top_smallest_i(const void *p, const void *q) {
  int r = cmp_i(p, q);
  return r ? r : by_idx(p, q);
}

/* The k largest (or smallest) along the axis, in order (sorted=0 leaves
 * the order to the implementation; sorted order is a valid choice). */
int ref_TopK(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *vals = c->out[0], *idxs = c->out[1];
  int axis;
  int64_t k;
  if (gpuc_topk_params(c, &axis, &k)) return -1;
  bool largest = gpuc_attr_i(c->n, "largest", 1) != 0;
  bool is_float = gpuc_dtype_is_float(x->dt), u64 = x->dt == GPUC_DT_U64;
  int (*cmp)(const void *, const void *) =
      is_float ? (largest ? top_largest_f : top_smallest_f)
               : (largest ? top_largest_i : top_smallest_i);
  int64_t outer, n, inner;
  axis_view(x, axis, &outer, &n, &inner);
  TopItem *items = malloc(sizeof *items * (size_t)(n ? n : 1));
  if (!items) return gpuc_op_fail(c, "out of host memory");
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      for (int64_t t = 0; t < n; t++) {
        int64_t at = (o * n + t) * inner + i;
        items[t].idx = t;
        if (is_float) items[t].f = gpuc_get_f64(x, at);
        else {
          int64_t v = gpuc_get_i64(x, at);
          items[t].i = u64 ? (int64_t)((uint64_t)v ^ ((uint64_t)1 << 63)) : v;
        }
      }
      qsort(items, (size_t)n, sizeof *items, cmp);
      for (int64_t t = 0; t < k; t++) {
        int64_t src = (o * n + items[t].idx) * inner + i, dst = (o * k + t) * inner + i;
        if (is_float) gpuc_set_f64(vals, dst, gpuc_get_f64(x, src));
        else gpuc_set_i64(vals, dst, gpuc_get_i64(x, src));
        if (idxs) ((int64_t *)idxs->data)[dst] = items[t].idx;
      }
    }
  free(items);
  return 0;
}
