/* Bucket plans in the public C API (api_buckets.h): the plan queries for
 * ranges and buckets, the shape rule of a run (runtime/buckets.c's
 * selection, as `gpuc run` uses it), and a session's runs: bound inputs
 * copied padded into the chosen bucket's buffers, its CUDA graph, bound
 * outputs copied sliced out, on the run's stream as the strided copies
 * gpuc_bucket_copies walks (the host's padding walks the same ones). */
#include "api_buckets.h"
#include "buckets.h"
#include "session_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plan tensor of input/output k of plan's list io (checked by callers). */
static const PlanTensor *tensor_of(const gpuc_plan *plan, gpuc_io io, uint32_t k) {
  return &plan->p->tensors[plan->io[io][k]];
}
static const char *name_of(const gpuc_plan *plan, gpuc_io io, uint32_t k) {
  return gpuc_plan_str(plan->p, tensor_of(plan, io, k)->name);
}
static const char *io_word(gpuc_io io) { return io == GPUC_INPUT ? "input" : "output"; }

/* "[8x128]" into buf. */
static const char *dims_text(int rank, const int64_t *dims, char *buf, size_t n) {
  size_t m = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < rank && m < n; d++) m += (size_t)snprintf(buf + m, n - m, "%s%lld", d ? "x" : "", (long long)dims[d]);
  if (m < n) snprintf(buf + m, n - m, "]");
  return buf;
}

/* ---- the shape rule ------------------------------------------------------ */
gpuc_status api_bucket_shape(const gpuc_plan *plan, const int *in_rank, const int64_t (*in_dims)[GPUC_MAX_RANK],
                             ApiRunShape *out) {
  const Plan *p = plan->p;
  uint32_t n = plan->n[GPUC_INPUT];
  Tensor *ts = calloc(n + 1, sizeof *ts);
  const Tensor **tp = calloc(n + 1, sizeof *tp);
  const char **names = calloc(n + 1, sizeof *names);
  if (!ts || !tp || !names) {
    free(ts); free(tp); free(names);
    return api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", plan->what);
  }
  for (uint32_t i = 0; i < n; i++) { /* headers only: the rule reads dtype, rank and dims */
    ts[i].dt = (GpucDType)tensor_of(plan, GPUC_INPUT, i)->dt;
    ts[i].rank = in_rank[i];
    memcpy(ts[i].dims, in_dims[i], sizeof ts[i].dims);
    tp[i] = &ts[i];
    names[i] = name_of(plan, GPUC_INPUT, i);
  }
  GpucErr e = {0};
  int rc = gpuc_bucket_actual(p, n, names, tp, out->actual, &e);
  if (!rc && p->nbuckets) rc = (out->bucket = gpuc_bucket_select(p, out->actual, &e)) < 0 ? -1 : 0;
  else out->bucket = 0;
  free(ts); free(tp); free(names);
  if (rc) {
    gpuc_err_prefix(&e, plan->what);
    return api_fail(GPUC_ERR_MISMATCH, &e);
  }
  return GPUC_OK;
}

/* Output/input k's dims at run shape r (a one-shape plan: the plan's). */
static int dims_at(const gpuc_plan *plan, gpuc_io io, uint32_t k, const ApiRunShape *r, int64_t *dims) {
  const PlanTensor *t = tensor_of(plan, io, k);
  if (!plan->p->nbuckets) {
    memcpy(dims, t->dims, sizeof t->dims[0] * (size_t)t->rank);
    return t->rank;
  }
  return gpuc_bucket_io_dims(plan->p, name_of(plan, io, k), io == GPUC_OUTPUT, r->actual, dims);
}

/* ---- plan queries (gpuc_runtime.h, API 2) -------------------------------- */
static const PlanTensor *query_tensor(const gpuc_plan *plan, gpuc_io io, size_t index, const char *fn,
                                      gpuc_status *st) {
  if (!plan) { *st = api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn); return NULL; }
  if (io != GPUC_INPUT && io != GPUC_OUTPUT) {
    *st = api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: io %d is neither GPUC_INPUT nor GPUC_OUTPUT", fn, (int)io);
    return NULL;
  }
  if (index >= plan->n[io]) {
    *st = api_failf(GPUC_ERR_NOT_FOUND, "%s: %s: %s %zu of %u", plan->what, fn, io_word(io), index, plan->n[io]);
    return NULL;
  }
  return tensor_of(plan, io, (uint32_t)index);
}

GPUC_API size_t gpuc_plan_bucket_count(const gpuc_plan *plan) {
  if (!plan) return 0;
  return plan->p->nbuckets ? plan->p->nbuckets : 1;
}

GPUC_API gpuc_status gpuc_plan_dim_range(const gpuc_plan *plan, gpuc_io io, size_t index, int axis, int64_t *min,
                                         int64_t *max, gpuc_dim_kind *kind) {
  gpuc_status st = GPUC_OK;
  const PlanTensor *t = query_tensor(plan, io, index, "gpuc_plan_dim_range", &st);
  if (!t) return st;
  if (axis < 0 || axis >= t->rank)
    return api_failf(GPUC_ERR_NOT_FOUND, "%s: gpuc_plan_dim_range: '%s' has %d dims, no axis %d", plan->what,
                     gpuc_plan_str(plan->p, t->name), (int)t->rank, axis);
  const Plan *p = plan->p;
  int a = p->nbuckets ? gpuc_bucket_axis_of(p, gpuc_plan_str(p, t->name), io == GPUC_OUTPUT, axis) : -1;
  int64_t lo = t->dims[axis], hi = t->dims[axis];
  gpuc_dim_kind k = GPUC_DIM_FIXED;
  if (a >= 0) {
    lo = p->axes[a].lo;
    hi = p->axes[a].hi;
    k = (p->axes[a].flags & PLAN_AXIS_F_BATCH)    ? GPUC_DIM_BATCH
      : (p->axes[a].flags & PLAN_AXIS_F_MASKED)   ? GPUC_DIM_MASKED
                                                  : GPUC_DIM_BUCKET_SIZES;
  }
  if (min) *min = lo;
  if (max) *max = hi;
  if (kind) *kind = k;
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_plan_bucket_dims(const gpuc_plan *plan, size_t bucket, gpuc_io io, size_t index, int *ndim,
                                           int64_t *dims) {
  gpuc_status st = GPUC_OK;
  const PlanTensor *t = query_tensor(plan, io, index, "gpuc_plan_bucket_dims", &st);
  if (!t) return st;
  if (!ndim || !dims) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_bucket_dims: %s is NULL", ndim ? "dims" : "ndim");
  size_t nb = gpuc_plan_bucket_count(plan);
  if (bucket >= nb)
    return api_failf(GPUC_ERR_NOT_FOUND, "%s: gpuc_plan_bucket_dims: bucket %zu of %zu", plan->what, bucket, nb);
  ApiRunShape r = {0};
  if (plan->p->nbuckets) memcpy(r.actual, plan->p->buckets[bucket].size, sizeof r.actual);
  *ndim = dims_at(plan, io, (uint32_t)index, &r, dims);
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_plan_resolve(const gpuc_plan *plan, const gpuc_tensor *inputs, size_t num_inputs,
                                       size_t *bucket, gpuc_tensor *outputs) {
  if (!plan || (!inputs && num_inputs))
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_resolve: %s is NULL", plan ? "inputs" : "plan");
  uint32_t n = plan->n[GPUC_INPUT];
  int *rank = calloc(n + 1, sizeof *rank);
  int64_t(*dims)[GPUC_MAX_RANK] = calloc(n + 1, sizeof *dims);
  if (!rank || !dims) { free(rank); free(dims); return api_failf(GPUC_ERR_OUT_OF_MEMORY, "out of memory"); }
  for (uint32_t i = 0; i < n; i++) rank[i] = -1;
  gpuc_status st = GPUC_OK;
  for (size_t j = 0; j < num_inputs && !st; j++) {
    const gpuc_tensor *x = &inputs[j];
    int k = x->name ? gpuc_plan_index(plan, GPUC_INPUT, x->name) : -1;
    if (k < 0) st = api_failf(GPUC_ERR_NOT_FOUND, "%s: gpuc_plan_resolve: the plan has no input named '%s'",
                              plan->what, x->name ? x->name : "(NULL)");
    else if (rank[k] >= 0) st = api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_resolve: input '%s' given twice", x->name);
    else if (x->ndim < 0 || x->ndim > GPUC_MAX_DIMS)
      st = api_failf(GPUC_ERR_MISMATCH, "%s: input '%s' has rank %d", plan->what, x->name, x->ndim);
    else if ((int)x->dtype != (int)tensor_of(plan, GPUC_INPUT, (uint32_t)k)->dt)
      st = api_failf(GPUC_ERR_MISMATCH, "%s: input '%s' is %s, the plan was compiled for %s", plan->what, x->name,
                     gpuc_dtype_to_string(x->dtype), gpuc_dtype_name(tensor_of(plan, GPUC_INPUT, (uint32_t)k)->dt));
    else {
      rank[k] = x->ndim;
      memcpy(dims[k], x->dims, sizeof dims[k]);
    }
  }
  for (uint32_t i = 0; i < n && !st; i++)
    if (rank[i] < 0)
      st = api_failf(GPUC_ERR_STATE, "%s: gpuc_plan_resolve: input '%s' not given", plan->what,
                     name_of(plan, GPUC_INPUT, i));
  ApiRunShape r = {0};
  if (!st && !plan->p->nbuckets) { /* one shape: the inputs are the plan's */
    for (uint32_t i = 0; i < n && !st; i++) {
      const PlanTensor *t = tensor_of(plan, GPUC_INPUT, i);
      bool same = rank[i] == t->rank;
      for (int d = 0; same && d < t->rank; d++) same = dims[i][d] == t->dims[d];
      char a[200], b[200];
      if (!same)
        st = api_failf(GPUC_ERR_MISMATCH, "%s: input '%s' is %s, the plan was compiled for %s", plan->what,
                       name_of(plan, GPUC_INPUT, i), dims_text(rank[i], dims[i], a, sizeof a),
                       dims_text(t->rank, t->dims, b, sizeof b));
    }
  } else if (!st) {
    st = api_bucket_shape(plan, rank, (const int64_t(*)[GPUC_MAX_RANK])dims, &r);
  }
  free(rank);
  free(dims);
  if (st) return st;
  if (bucket) *bucket = (size_t)r.bucket;
  for (uint32_t k = 0; outputs && k < plan->n[GPUC_OUTPUT]; k++) {
    const PlanTensor *t = tensor_of(plan, GPUC_OUTPUT, k);
    gpuc_tensor *o = &outputs[k];
    memset(o, 0, sizeof *o);
    o->name = gpuc_plan_str(plan->p, t->name);
    o->dtype = (gpuc_dtype)t->dt;
    o->ndim = dims_at(plan, GPUC_OUTPUT, k, &r, o->dims);
    uint64_t b = gpuc_dtype_size(t->dt);
    for (int d = 0; d < o->ndim; d++) b *= (uint64_t)o->dims[d];
    o->nbytes = (size_t)b;
  }
  return GPUC_OK;
}

/* ---- a session's runs ---------------------------------------------------- */
typedef struct Bound {
  const void *ptr;               /* host pointer or CUdeviceptr */
  gpuc_memory mem;
  bool bound;
  int rank;
  int64_t dims[GPUC_MAX_RANK];
} Bound;

struct ApiBuckets {
  const gpuc_plan *view;
  GpucSession *g;
  Bound *in, *out;               /* [n inputs], [n outputs] */
  int *rank;                     /* scratch for the shape rule */
  int64_t (*dims)[GPUC_MAX_RANK];
  ApiRunShape last;              /* the last run's */
  bool ran;
};

ApiBuckets *api_buckets_new(const gpuc_plan *view, GpucSession *g) {
  ApiBuckets *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->view = view;
  b->g = g;
  b->in = calloc(view->n[0] + 1, sizeof *b->in);
  b->out = calloc(view->n[1] + 1, sizeof *b->out);
  b->rank = calloc(view->n[0] + 1, sizeof *b->rank);
  b->dims = calloc(view->n[0] + 1, sizeof *b->dims);
  if (!b->in || !b->out || !b->rank || !b->dims) { api_buckets_free(b); return NULL; }
  return b;
}

void api_buckets_free(ApiBuckets *b) {
  if (!b) return;
  free(b->in);
  free(b->out);
  free(b->rank);
  free(b->dims);
  free(b);
}

int api_buckets_bind(ApiBuckets *b, gpuc_io io, const char *name, const void *data, gpuc_memory mem,
                     gpuc_dtype dtype, int ndim, const int64_t *dims, const char *fn, gpuc_status *st) {
  const gpuc_plan *v = b->view;
  const Plan *p = v->p;
  int k = gpuc_plan_index(v, io, name);
  if (k < 0) {
    *st = api_failf(GPUC_ERR_NOT_FOUND, "%s: %s: the plan has no %s named '%s'", v->what, fn, io_word(io), name);
    return -1;
  }
  const PlanTensor *t = tensor_of(v, io, (uint32_t)k);
  if (ndim < 0 || ndim > GPUC_MAX_DIMS || (ndim > 0 && !dims)) {
    *st = api_failf(GPUC_ERR_MISMATCH, "%s: %s '%s' is of rank %d, the plan's has rank %d", v->what, io_word(io),
                    name, ndim, (int)t->rank);
    return -1;
  }
  char have[200], lo_t[200], hi_t[200];
  if ((int)dtype != (int)t->dt || ndim != t->rank) {
    *st = api_failf(GPUC_ERR_MISMATCH, "%s: %s '%s' is %s %s, the plan takes %s of rank %d", v->what, io_word(io),
                    name, dims_text(ndim, dims, have, sizeof have), gpuc_dtype_to_string(dtype),
                    gpuc_dtype_name(t->dt), (int)t->rank);
    return -1;
  }
  if (io == GPUC_INPUT) { /* the CLI's check of one input: ranges and fixed dims (axes shared with others: at run) */
    Tensor x = {.dt = (GpucDType)dtype, .rank = ndim};
    memcpy(x.dims, dims, sizeof x.dims[0] * (size_t)ndim);
    const Tensor *xs[1] = {&x};
    const char *names[1] = {name};
    int64_t actual[GPUC_PLAN_MAX_AXES];
    GpucErr e = {0};
    if (gpuc_bucket_actual(p, 1, names, xs, actual, &e) && !strstr(e.msg, "no input gives")) {
      gpuc_err_prefix(&e, v->what);
      *st = api_fail(GPUC_ERR_MISMATCH, &e);
      return -1;
    }
  } else { /* an output: a shape it can have, each dim within its axis's range */
    int64_t lo[GPUC_MAX_RANK], hi[GPUC_MAX_RANK];
    for (int d = 0; d < ndim; d++)
      gpuc_plan_dim_range(v, io, (size_t)k, d, &lo[d], &hi[d], NULL);
    for (int d = 0; d < ndim; d++)
      if (dims[d] < lo[d] || dims[d] > hi[d]) {
        *st = api_failf(GPUC_ERR_MISMATCH, "%s: output '%s' is %s, outside what the plan makes (%s..%s); "
                        "gpuc_session_output_dims gives a run's", v->what, name, dims_text(ndim, dims, have, sizeof have),
                        dims_text(ndim, lo, lo_t, sizeof lo_t), dims_text(ndim, hi, hi_t, sizeof hi_t));
        return -1;
      }
  }
  Bound *s = io == GPUC_INPUT ? &b->in[k] : &b->out[k];
  *s = (Bound){.ptr = data, .mem = mem, .bound = true, .rank = ndim};
  memcpy(s->dims, dims, sizeof s->dims[0] * (size_t)ndim);
  return k;
}

void api_buckets_unbind_all(ApiBuckets *b) {
  memset(b->in, 0, b->view->n[0] * sizeof *b->in);
  memset(b->out, 0, b->view->n[1] * sizeof *b->out);
}

/* The shape of a run on the inputs bound now (all bound: the caller checked). */
static gpuc_status bound_shape(ApiBuckets *b, ApiRunShape *r) {
  for (uint32_t i = 0; i < b->view->n[0]; i++) {
    b->rank[i] = b->in[i].rank;
    memcpy(b->dims[i], b->in[i].dims, sizeof b->dims[i]);
  }
  return api_bucket_shape(b->view, b->rank, (const int64_t(*)[GPUC_MAX_RANK])b->dims, r);
}

/* The device's copies of one walk: memory on either side may be the
 * host's or the device's; a zero fill is always on the device (padding
 * an input into a bucket's buffer). */
typedef struct DevCopy {
  uint64_t dst, src;
  bool dst_host, src_host;
  CUstream cs;
  CUresult r;
  const char *call;
} DevCopy;

static CUresult copy_1d(bool dh, uint64_t dst, bool sh, uint64_t src, uint64_t n, CUstream cs) {
  if (!dh && sh) return cu.cuMemcpyHtoDAsync((CUdeviceptr)dst, (const void *)(uintptr_t)src, n, cs);
  if (dh && !sh) return cu.cuMemcpyDtoHAsync((void *)(uintptr_t)dst, (CUdeviceptr)src, n, cs);
  if (!dh && !sh) return cu.cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, cs);
  memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n); /* not reached: one side is the bucket's */
  return CUDA_SUCCESS;
}

static int dev_copy(void *ctx, const GpucBucketCopy *c) {
  DevCopy *d = ctx;
  uint64_t dst = d->dst + c->dst_off;
  if (c->kind == GPUC_BUCKET_ZERO) {
    d->call = "cuMemsetD2D8Async";
    d->r = c->rows == 1 ? cu.cuMemsetD8Async((CUdeviceptr)dst, 0, c->width, d->cs)
                        : cu.cuMemsetD2D8Async((CUdeviceptr)dst, c->dst_pitch, 0, c->width, c->rows, d->cs);
    return d->r == CUDA_SUCCESS ? 0 : -1;
  }
  bool from_dst = c->kind == GPUC_BUCKET_FROM_DST, sh = from_dst ? d->dst_host : d->src_host;
  uint64_t src = (from_dst ? d->dst : d->src) + c->src_off;
  if (c->rows == 1 || c->dst_pitch > INT32_MAX || c->src_pitch > INT32_MAX) { /* past cuMemcpy2D's pitch limit: by rows */
    d->call = "cuMemcpy*Async";
    for (uint64_t i = 0; i < c->rows; i++)
      if ((d->r = copy_1d(d->dst_host, dst + i * c->dst_pitch, sh, src + i * c->src_pitch, c->width, d->cs)))
        return -1;
    return 0;
  }
  CUDA_MEMCPY2D m;
  memset(&m, 0, sizeof m);
  m.srcMemoryType = sh ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  if (sh) m.srcHost = (const void *)(uintptr_t)src;
  else m.srcDevice = (CUdeviceptr)src;
  m.srcPitch = c->src_pitch;
  m.dstMemoryType = d->dst_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  if (d->dst_host) m.dstHost = (void *)(uintptr_t)dst;
  else m.dstDevice = (CUdeviceptr)dst;
  m.dstPitch = c->dst_pitch;
  m.WidthInBytes = c->width;
  m.Height = c->rows;
  d->call = "cuMemcpy2DAsync";
  d->r = cu.cuMemcpy2DAsync(&m, d->cs);
  return d->r == CUDA_SUCCESS ? 0 : -1;
}

/* Copy a tensor of dims sd at src into dims dd at dst (padded or sliced). */
static gpuc_status walk_copy(const Plan *p, const char *name, bool output, const PlanTensor *t, const int64_t *sd,
                             const int64_t *dd, uint64_t src, bool src_host, uint64_t dst, bool dst_host,
                             CUstream cs) {
  bool rep[GPUC_MAX_RANK];
  gpuc_bucket_repeat_dims(p, name, output, t->rank, rep);
  DevCopy d = {.dst = dst, .src = src, .dst_host = dst_host, .src_host = src_host, .cs = cs};
  if (gpuc_bucket_copies(t->rank, sd, dd, rep, gpuc_dtype_size(t->dt), dev_copy, &d)) {
    GpucErr e = {0};
    gpuc_cu_fail(&e, d.r, d.call, __FILE__, __LINE__);
    gpuc_err_prefix(&e, name);
    return api_fail(GPUC_ERR_CUDA, &e);
  }
  return GPUC_OK;
}

/* Bucket k's session with its graph captured (under the API's lock, as
 * every capture). */
static GpucSession *bucket_session(ApiBuckets *b, int k, gpuc_status *st) {
  GpucSession *bs = gpuc_buckets_session(b->g, (uint32_t)k);
  if (!bs) { *st = api_failf(GPUC_ERR_STATE, "%s: bucket %d has no session", b->view->what, k); return NULL; }
  if (bs->graph_ready) return bs;
  GpucErr e = {0};
  api_session_lock();
  int rc = gpuc_session_capture(bs, &e);
  api_session_unlock();
  if (rc) { *st = api_fail(GPUC_ERR_CUDA, &e); return NULL; }
  return bs;
}

gpuc_status api_buckets_enqueue(ApiBuckets *b, void *stream) {
  const gpuc_plan *v = b->view;
  const Plan *p = v->p;
  CUstream cs = (CUstream)stream;
  ApiRunShape r;
  gpuc_status st = bound_shape(b, &r);
  if (st) return st;
  int64_t dd[GPUC_MAX_RANK], sd[GPUC_MAX_RANK];
  char a[200], c[200];
  for (uint32_t k = 0; k < v->n[1]; k++) { /* bound outputs must be the size this run makes */
    const Bound *o = &b->out[k];
    int rank = dims_at(v, GPUC_OUTPUT, k, &r, dd);
    if (o->bound && memcmp(o->dims, dd, sizeof dd[0] * (size_t)rank))
      return api_failf(GPUC_ERR_MISMATCH, "%s: output '%s' is bound as %s, the inputs bound now make it %s "
                       "(gpuc_session_output_dims)", v->what, name_of(v, GPUC_OUTPUT, k),
                       dims_text(rank, o->dims, a, sizeof a), dims_text(rank, dd, c, sizeof c));
  }
  GpucSession *bs = bucket_session(b, r.bucket, &st);
  if (!bs) return st;
  const Plan *bp = gpuc_plan_bucket(p, (uint32_t)r.bucket);
  const int64_t *size = p->buckets[r.bucket].size;
  for (uint32_t k = 0; k < v->n[0]; k++) {
    const char *name = name_of(v, GPUC_INPUT, k);
    const PlanTensor *t = tensor_of(v, GPUC_INPUT, k);
    int ti = gpuc_plan_io_index(bp, name, false);
    if (ti < 0 || gpuc_bucket_io_dims(p, name, false, size, dd) < 0)
      return api_failf(GPUC_ERR_BAD_INPUT, "%s: bucket %d has no input '%s'", v->what, r.bucket, name);
    const Bound *in = &b->in[k];
    st = walk_copy(p, name, false, t, in->dims, dd, (uint64_t)(uintptr_t)in->ptr, in->mem == GPUC_MEMORY_HOST,
                   bs->tptr[ti], false, cs);
    if (st) return st;
  }
  GpucErr e = {0};
  if (gpuc_session_launch_on(bs, (void *)cs, &e)) return api_fail(GPUC_ERR_CUDA, &e);
  b->last = r;
  b->ran = true;
  for (uint32_t k = 0; k < v->n[1]; k++) {
    const Bound *o = &b->out[k];
    if (!o->bound) continue;
    const char *name = name_of(v, GPUC_OUTPUT, k);
    const PlanTensor *t = tensor_of(v, GPUC_OUTPUT, k);
    int to = gpuc_plan_io_index(bp, name, true);
    if (to < 0 || gpuc_bucket_io_dims(p, name, true, size, sd) < 0)
      return api_failf(GPUC_ERR_BAD_INPUT, "%s: bucket %d has no output '%s'", v->what, r.bucket, name);
    st = walk_copy(p, name, true, t, sd, o->dims, bs->tptr[to], false, (uint64_t)(uintptr_t)o->ptr,
                   o->mem == GPUC_MEMORY_HOST, cs);
    if (st) return st;
  }
  return GPUC_OK;
}

gpuc_status api_buckets_fetch(ApiBuckets *b, uint32_t k, void *data, size_t size) {
  const gpuc_plan *v = b->view;
  const Plan *p = v->p;
  const char *name = name_of(v, GPUC_OUTPUT, k);
  const PlanTensor *t = tensor_of(v, GPUC_OUTPUT, k);
  if (!b->ran) return api_failf(GPUC_ERR_STATE, "%s: output '%s': the session has not run yet", v->what, name);
  int64_t dd[GPUC_MAX_RANK], sd[GPUC_MAX_RANK];
  int rank = dims_at(v, GPUC_OUTPUT, k, &b->last, dd);
  uint64_t bytes = gpuc_dtype_size(t->dt);
  for (int d = 0; d < rank; d++) bytes *= (uint64_t)dd[d];
  char a[200];
  if (size != bytes)
    return api_failf(GPUC_ERR_MISMATCH, "%s: output '%s' of the last run is %s, %llu bytes; the buffer is %zu", v->what,
                     name, dims_text(rank, dd, a, sizeof a), (unsigned long long)bytes, size);
  GpucSession *bs = gpuc_buckets_session(b->g, (uint32_t)b->last.bucket);
  const Plan *bp = gpuc_plan_bucket(p, (uint32_t)b->last.bucket);
  int to = gpuc_plan_io_index(bp, name, true);
  if (!bs || to < 0 || gpuc_bucket_io_dims(p, name, true, p->buckets[b->last.bucket].size, sd) < 0)
    return api_failf(GPUC_ERR_BAD_INPUT, "%s: bucket %d has no output '%s'", v->what, b->last.bucket, name);
  if (!bytes) return GPUC_OK;
  gpuc_status st = walk_copy(p, name, true, t, sd, dd, bs->tptr[to], false, (uint64_t)(uintptr_t)data, true,
                             b->g->stream);
  if (st) return st;
  GpucErr e = {0};
  CUresult r = cu.cuStreamSynchronize(b->g->stream);
  if (r != CUDA_SUCCESS) return api_fail(GPUC_ERR_CUDA, (gpuc_cu_fail(&e, r, "cuStreamSynchronize", __FILE__, __LINE__), &e));
  return GPUC_OK;
}

int api_buckets_check(ApiBuckets *b, GpucErr *e) {
  for (uint32_t i = 0; i < b->view->p->nbuckets; i++) {
    GpucSession *bs = gpuc_buckets_session(b->g, i);
    if (bs && bs != b->g && gpuc_session_check(bs, e)) return -1; /* the container's: the caller checks */
  }
  return 0;
}

GpucSession *api_buckets_bench_session(ApiBuckets *b, gpuc_status *st) {
  return bucket_session(b, b->ran ? b->last.bucket : (int)b->view->p->nbuckets - 1, st);
}

gpuc_status api_buckets_output_dims(ApiBuckets *b, uint32_t k, int *ndim, int64_t *dims) {
  const gpuc_plan *v = b->view;
  bool all = true;
  for (uint32_t i = 0; i < v->n[0]; i++) all &= b->in[i].bound;
  ApiRunShape r;
  if (all) {
    gpuc_status st = bound_shape(b, &r);
    if (st) return st;
  } else if (b->ran) {
    r = b->last;
  } else {
    return api_failf(GPUC_ERR_STATE, "%s: output '%s': its dims follow the inputs' (bind every input, or run once)",
                     v->what, name_of(v, GPUC_OUTPUT, k));
  }
  *ndim = dims_at(v, GPUC_OUTPUT, k, &r, dims);
  return GPUC_OK;
}
