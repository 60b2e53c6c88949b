/* Bucket selection, padding and slicing on the host (buckets.h). */
#include "buckets.h"
#include <stdlib.h>
#include <string.h>

static const PlanTensor *io_tensor(const Plan *p, const char *name, bool output) {
  int i = gpuc_plan_io_index(p, name, output);
  return i < 0 ? NULL : &p->tensors[i];
}

/* The axis input/output `name`'s dim d follows, or -1. */
static int axis_of(const Plan *p, const char *name, bool output, int d) {
  for (uint32_t k = 0; k < p->ndimuse; k++) {
    const PlanDimUse *u = &p->dimuse[k];
    if (u->dim == d && u->is_output == output && !strcmp(gpuc_plan_str(p, u->name), name)) return u->axis;
  }
  return -1;
}

int gpuc_bucket_axis_of(const Plan *p, const char *name, bool output, int d) { return axis_of(p, name, output, d); }

static const char *axis_name(const Plan *p, uint32_t a) { return gpuc_plan_str(p, p->axes[a].name); }

int gpuc_bucket_io_dims(const Plan *p, const char *name, bool output, const int64_t sizes[GPUC_PLAN_MAX_AXES],
                        int64_t dims[GPUC_MAX_RANK]) {
  const PlanTensor *t = io_tensor(p, name, output);
  if (!t) return -1;
  for (int d = 0; d < t->rank; d++) {
    int a = axis_of(p, name, output, d);
    dims[d] = a >= 0 ? sizes[a] : t->dims[d];
  }
  return t->rank;
}

int gpuc_bucket_actual(const Plan *p, uint32_t n, const char *const *names, const Tensor *const *inputs,
                       int64_t actual[GPUC_PLAN_MAX_AXES], GpucErr *e) {
  const char *from[GPUC_PLAN_MAX_AXES] = {0};
  for (uint32_t a = 0; a < GPUC_PLAN_MAX_AXES; a++) actual[a] = 0;
  for (uint32_t i = 0; i < n; i++) {
    const PlanTensor *t = io_tensor(p, names[i], false);
    const Tensor *x = inputs[i];
    if (!t) return gpuc_err_set(e, "the plan has no input named '%s'", names[i]);
    if (x->dt != t->dt || x->rank != t->rank)
      return gpuc_err_set(e, "input '%s' is %s of rank %d, the plan takes %s of rank %d", names[i],
                          gpuc_dtype_name(x->dt), x->rank, gpuc_dtype_name((GpucDType)t->dt), t->rank);
    for (int d = 0; d < t->rank; d++) {
      int a = p->nbuckets ? axis_of(p, names[i], false, d) : -1;
      if (a < 0) {
        if (x->dims[d] != t->dims[d])
          return gpuc_err_set(e, "input '%s' dim %d is %lld, the plan was compiled for %lld there", names[i], d,
                              (long long)x->dims[d], (long long)t->dims[d]);
        continue;
      }
      const PlanAxis *ax = &p->axes[a];
      if (x->dims[d] < ax->lo || x->dims[d] > ax->hi)
        return gpuc_err_set(e, "input '%s' dim %d ('%s') is %lld, outside the range %lld..%lld the plan was compiled "
                            "for; recompile with a wider --shape range", names[i], d, axis_name(p, (uint32_t)a),
                            (long long)x->dims[d], (long long)ax->lo, (long long)ax->hi);
      if (from[a] && actual[a] != x->dims[d])
        return gpuc_err_set(e, "input '%s' dim %d ('%s') is %lld, but input '%s' has %lld there", names[i], d,
                            axis_name(p, (uint32_t)a), (long long)x->dims[d], from[a], (long long)actual[a]);
      actual[a] = x->dims[d];
      from[a] = names[i];
    }
  }
  for (uint32_t a = 0; a < p->naxes; a++)
    if (!from[a]) return gpuc_err_set(e, "no input gives the size of '%s'", axis_name(p, a));
  return 0;
}

int gpuc_bucket_select(const Plan *p, const int64_t actual[GPUC_PLAN_MAX_AXES], GpucErr *e) {
  int best = -1;
  double best_vol = 0;
  for (uint32_t a = 0; a < p->naxes; a++)
    if (actual[a] < p->axes[a].lo || actual[a] > p->axes[a].hi)
      return gpuc_err_set(e, "'%s' is %lld, outside the range %lld..%lld the plan was compiled for", axis_name(p, a),
                          (long long)actual[a], (long long)p->axes[a].lo, (long long)p->axes[a].hi);
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    const int64_t *s = p->buckets[i].size;
    bool fits = true;
    double vol = 1;
    for (uint32_t a = 0; a < p->naxes && fits; a++) {
      bool pad = p->axes[a].flags & (PLAN_AXIS_F_BATCH | PLAN_AXIS_F_MASKED);
      fits = pad ? s[a] >= actual[a] : s[a] == actual[a];
      vol *= (double)s[a];
    }
    if (fits && (best < 0 || vol < best_vol)) { best = (int)i; best_vol = vol; }
  }
  if (best >= 0) return best;
  for (uint32_t a = 0; a < p->naxes; a++) { /* only an axis that cannot be padded leaves no bucket */
    if (p->axes[a].flags & (PLAN_AXIS_F_BATCH | PLAN_AXIS_F_MASKED)) continue;
    char sizes[400] = "";
    size_t n = 0;
    for (uint32_t i = 0; i < p->nbuckets && n < sizeof sizes; i++) {
      bool seen = false;
      for (uint32_t j = 0; j < i; j++) seen |= p->buckets[j].size[a] == p->buckets[i].size[a];
      if (!seen) n += (size_t)snprintf(sizes + n, sizeof sizes - n, "%s%lld", n ? ", " : "", (long long)p->buckets[i].size[a]);
    }
    gpuc_err_set(e, "'%s' is %lld: it cannot be padded safely (it is not a leading batch dim, and the model has no "
                 "attention-mask input that carries it), so it runs only at the bucket sizes %s", axis_name(p, a),
                 (long long)actual[a], sizes);
    return -1;
  }
  gpuc_err_set(e, "internal: no bucket holds the shape");
  return -1;
}

/* The copies of the corner walk (buckets.h): dst's block at dim d, given
 * src's block there; c is the innermost dim where the two differ, so the
 * dims past c are equal and a row of dim c is `inner` contiguous bytes in
 * both. Offsets are bytes from dst's / src's start. */
typedef struct Walk {
  int c;
  const int64_t *dd, *sd;
  const bool *rep;
  uint64_t ds[GPUC_MAX_RANK], ss[GPUC_MAX_RANK], inner;
  GpucBucketCopyFn fn;
  void *ctx;
} Walk;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int emit(const Walk *w, int kind, uint64_t doff, uint64_t soff, uint64_t dpitch, uint64_t spitch,
                uint64_t width, uint64_t rows) {
  if (!width || !rows) return 0;
  GpucBucketCopy c = {.kind = kind, .dst_off = doff, .src_off = soff, .dst_pitch = dpitch, .src_pitch = spitch,
                      .width = width, .rows = rows};
  return w->fn(w->ctx, &c);
}

/* Rows n.. of dim d past src's end: the last row repeated (copies from
 * dst itself, doubling the repeated run each time) or zeros. */
static int pad_rows(const Walk *w, int d, uint64_t doff, int64_t n) {
  int64_t want = w->dd[d];
  uint64_t row = w->ds[d];
  if (want <= n) return 0;
  if (!w->rep[d] || n == 0)
    return emit(w, GPUC_BUCKET_ZERO, doff + (uint64_t)n * row, 0, 0, 0, (uint64_t)(want - n) * row, 1);
  for (int64_t have = 1; n - 1 + have < want;) { /* rows n-1 .. n-1+have all equal row n-1 */
    int64_t k = min64(have, want - (n - 1 + have));
    if (emit(w, GPUC_BUCKET_FROM_DST, doff + (uint64_t)(n - 1 + have) * row, doff + (uint64_t)(n - 1) * row, 0, 0,
             (uint64_t)k * row, 1))
      return -1;
    have += k;
  }
  return 0;
}

static int walk(const Walk *w, int d, uint64_t doff, uint64_t soff) {
  int64_t n = min64(w->dd[d], w->sd[d]);
  if (d == w->c) { /* only when c is dim 0: its rows are contiguous */
    if (emit(w, GPUC_BUCKET_FROM_SRC, doff, soff, 0, 0, (uint64_t)n * w->inner, 1)) return -1;
  } else if (d == w->c - 1) { /* n rows of dim d, each a run of dim c's rows: one 2-D copy */
    int c = w->c;
    int64_t m = min64(w->dd[c], w->sd[c]);
    if (emit(w, GPUC_BUCKET_FROM_SRC, doff, soff, w->ds[d], w->ss[d], (uint64_t)m * w->inner, (uint64_t)n)) return -1;
    if (w->dd[c] > m && n > 0) {
      if (w->rep[c] && m > 0) {
        for (int64_t j = m; j < w->dd[c]; j++)
          if (emit(w, GPUC_BUCKET_FROM_DST, doff + (uint64_t)j * w->inner, doff + (uint64_t)(m - 1) * w->inner,
                   w->ds[d], w->ds[d], w->inner, (uint64_t)n))
            return -1;
      } else if (emit(w, GPUC_BUCKET_ZERO, doff + (uint64_t)m * w->inner, 0, w->ds[d], 0,
                      (uint64_t)(w->dd[c] - m) * w->inner, (uint64_t)n)) {
        return -1;
      }
    }
  } else {
    for (int64_t i = 0; i < n; i++)
      if (walk(w, d + 1, doff + (uint64_t)i * w->ds[d], soff + (uint64_t)i * w->ss[d])) return -1;
  }
  return pad_rows(w, d, doff, n);
}

int gpuc_bucket_copies(int rank, const int64_t *src_dims, const int64_t *dst_dims, const bool *repeat, size_t es,
                       GpucBucketCopyFn fn, void *ctx) {
  Walk w = {.c = -1, .dd = dst_dims, .sd = src_dims, .rep = repeat, .fn = fn, .ctx = ctx};
  uint64_t a = es, b = es;
  for (int d = rank - 1; d >= 0; d--) {
    w.ds[d] = a;
    w.ss[d] = b;
    a *= (uint64_t)dst_dims[d];
    b *= (uint64_t)src_dims[d];
    if (w.c < 0 && dst_dims[d] != src_dims[d]) { w.c = d; w.inner = w.ds[d]; }
  }
  if (w.c < 0) return emit(&w, GPUC_BUCKET_FROM_SRC, 0, 0, 0, 0, a, 1); /* the same dims: one copy */
  return walk(&w, 0, 0, 0);
}

/* The host's copies: memcpy / memset row by row. */
typedef struct HostCopy {
  uint8_t *dst;
  const uint8_t *src;
} HostCopy;

static int host_copy(void *ctx, const GpucBucketCopy *c) {
  const HostCopy *h = ctx;
  for (uint64_t r = 0; r < c->rows; r++) {
    uint8_t *to = h->dst + c->dst_off + r * c->dst_pitch;
    if (c->kind == GPUC_BUCKET_ZERO) memset(to, 0, c->width);
    else memcpy(to, (c->kind == GPUC_BUCKET_FROM_DST ? h->dst : h->src) + c->src_off + r * c->src_pitch, c->width);
  }
  return 0;
}

void gpuc_bucket_repeat_dims(const Plan *p, const char *name, bool output, int rank, bool rep[GPUC_MAX_RANK]) {
  for (int d = 0; d < rank; d++) {
    int ax = axis_of(p, name, output, d);
    rep[d] = ax >= 0 && (p->axes[ax].flags & PLAN_AXIS_F_BATCH);
  }
}

/* x reshaped to `dims` by the corner walk; batch axes of `name` repeat. */
static Tensor *resize(const Plan *p, const char *name, bool output, const Tensor *x, const int64_t *dims, GpucErr *e) {
  Tensor *y = gpuc_tensor_new(x->dt, x->rank, dims, e);
  if (!y) return NULL;
  if (gpuc_numel(y) == 0) return y;
  bool rep[GPUC_MAX_RANK];
  gpuc_bucket_repeat_dims(p, name, output, x->rank, rep);
  HostCopy h = {y->data, x->data};
  gpuc_bucket_copies(x->rank, x->dims, dims, rep, gpuc_dtype_size(x->dt), host_copy, &h);
  return y;
}

Tensor *gpuc_bucket_pad(const Plan *p, const char *name, const Tensor *x, const int64_t sizes[GPUC_PLAN_MAX_AXES],
                        GpucErr *e) {
  int64_t dims[GPUC_MAX_RANK];
  int r = gpuc_bucket_io_dims(p, name, false, sizes, dims);
  if (r < 0) { gpuc_err_set(e, "the plan has no input named '%s'", name); return NULL; }
  if (r != x->rank) { gpuc_err_set(e, "input '%s' has rank %d, the plan takes rank %d", name, x->rank, r); return NULL; }
  for (int d = 0; d < r; d++)
    if (x->dims[d] > dims[d]) {
      gpuc_err_set(e, "input '%s' dim %d is %lld, more than the bucket's %lld", name, d, (long long)x->dims[d],
                   (long long)dims[d]);
      return NULL;
    }
  return resize(p, name, false, x, dims, e);
}

Tensor *gpuc_bucket_slice(const Plan *p, const char *name, const Tensor *y, const int64_t actual[GPUC_PLAN_MAX_AXES],
                          GpucErr *e) {
  int64_t dims[GPUC_MAX_RANK];
  int r = gpuc_bucket_io_dims(p, name, true, actual, dims);
  if (r < 0) { gpuc_err_set(e, "the plan has no output named '%s'", name); return NULL; }
  if (r != y->rank) { gpuc_err_set(e, "output '%s' has rank %d, the plan's has %d", name, y->rank, r); return NULL; }
  for (int d = 0; d < r; d++)
    if (y->dims[d] < dims[d]) {
      gpuc_err_set(e, "output '%s' dim %d is %lld, less than the actual %lld", name, d, (long long)y->dims[d],
                   (long long)dims[d]);
      return NULL;
    }
  return resize(p, name, true, y, dims, e);
}

uint64_t gpuc_bucket_arena_bytes(const Plan *p) {
  uint64_t m = p->meta.arena_bytes;
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    uint64_t b = gpuc_plan_bucket(p, i)->meta.arena_bytes;
    if (b > m) m = b;
  }
  return m;
}
