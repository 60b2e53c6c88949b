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

/* Copy the leading corner of src into dst (dims may differ either way):
 * past src's end a dim repeats src's last index when rep[d], else zeros. */
static void copy_corner(uint8_t *dst, const uint8_t *src, int d, int rank, const int64_t *dd, const int64_t *sd,
                        const uint64_t *dstride, const uint64_t *sstride, const bool *rep, size_t es) {
  int64_t n = dd[d] < sd[d] ? dd[d] : sd[d];
  if (d == rank - 1) {
    memcpy(dst, src, (size_t)n * es);
    for (int64_t i = n; i < dd[d]; i++) {
      if (rep[d] && sd[d] > 0) memcpy(dst + (size_t)i * es, src + (size_t)(sd[d] - 1) * es, es);
      else memset(dst + (size_t)i * es, 0, es);
    }
    return;
  }
  for (int64_t i = 0; i < dd[d]; i++) {
    uint8_t *to = dst + (uint64_t)i * dstride[d];
    if (i < n) copy_corner(to, src + (uint64_t)i * sstride[d], d + 1, rank, dd, sd, dstride, sstride, rep, es);
    else if (rep[d] && sd[d] > 0)
      copy_corner(to, src + (uint64_t)(sd[d] - 1) * sstride[d], d + 1, rank, dd, sd, dstride, sstride, rep, es);
    else memset(to, 0, dstride[d]);
  }
}

/* x reshaped to `dims` by copy_corner; batch axes of `name` repeat. */
static Tensor *resize(const Plan *p, const char *name, bool output, const Tensor *x, const int64_t *dims, GpucErr *e) {
  Tensor *y = gpuc_tensor_new(x->dt, x->rank, dims, e);
  if (!y) return NULL;
  if (gpuc_numel(y) == 0) return y;
  uint64_t ds[GPUC_MAX_RANK], ss[GPUC_MAX_RANK];
  bool rep[GPUC_MAX_RANK];
  size_t es = gpuc_dtype_size(x->dt);
  uint64_t a = es, b = es;
  for (int d = x->rank - 1; d >= 0; d--) {
    ds[d] = a; ss[d] = b;
    a *= (uint64_t)dims[d]; b *= (uint64_t)x->dims[d];
    int ax = axis_of(p, name, output, d);
    rep[d] = ax >= 0 && (p->axes[ax].flags & PLAN_AXIS_F_BATCH);
  }
  if (x->rank == 0) memcpy(y->data, x->data, es);
  else if (gpuc_numel(x) > 0) copy_corner(y->data, x->data, 0, x->rank, dims, x->dims, ds, ss, rep, es);
  else memset(y->data, 0, (size_t)gpuc_numel(y) * es);
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
