/* The public runtime C API (include/gpuc/gpuc_runtime.h) over the plan
 * reader (plan_io.c) and the GPU session (gpu/session.c): opaque handles,
 * statuses with a per-thread message, device bindings used in place where
 * zero_copy.h allows (a CUDA graph per set of in-place addresses, the
 * last few kept), the others copied on the caller's stream around the
 * graph's launch. */
#include "api_internal.h"
#include "buckets.h"
#include "api_buckets.h"
#include "session_internal.h"
#include "zero_copy.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* gpuc_dtype's numbers are the ABI; they equal GpucDType's today, and a
 * change of either stops the build here. */
#define SAME_DT(E) _Static_assert((int)GPUC_DTYPE_##E == (int)GPUC_DT_##E, "gpuc_dtype " #E);
SAME_DT(F32) SAME_DT(F16) SAME_DT(BF16) SAME_DT(F64) SAME_DT(I8) SAME_DT(U8) SAME_DT(I16) SAME_DT(U16)
SAME_DT(I32) SAME_DT(U32) SAME_DT(I64) SAME_DT(U64) SAME_DT(BOOL) SAME_DT(F8E4M3)
_Static_assert(GPUC_MAX_DIMS == GPUC_MAX_RANK, "GPUC_MAX_DIMS");
_Static_assert(GPUC_DT_COUNT == GPUC_DTYPE_F8E4M3 + 1, "a GpucDType without a gpuc_dtype");
#undef SAME_DT

/* ---- errors ------------------------------------------------------------- */
static _Thread_local char last_error[sizeof(((GpucErr *)0)->msg)];

gpuc_status api_fail(gpuc_status st, const GpucErr *e) {
  snprintf(last_error, sizeof last_error, "%s", e && e->msg[0] ? e->msg : gpuc_status_name(st));
  return e && e->unsupported && st == GPUC_ERR_BAD_INPUT ? GPUC_ERR_UNSUPPORTED : st;
}

gpuc_status api_failf(gpuc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return st;
}

GPUC_API const char *gpuc_last_error(void) { return last_error; }

GPUC_API const char *gpuc_status_name(gpuc_status s) {
  switch (s) {
  case GPUC_OK: return "GPUC_OK";
  case GPUC_ERR_INVALID_ARGUMENT: return "GPUC_ERR_INVALID_ARGUMENT";
  case GPUC_ERR_NOT_FOUND: return "GPUC_ERR_NOT_FOUND";
  case GPUC_ERR_MISMATCH: return "GPUC_ERR_MISMATCH";
  case GPUC_ERR_BAD_INPUT: return "GPUC_ERR_BAD_INPUT";
  case GPUC_ERR_UNSUPPORTED: return "GPUC_ERR_UNSUPPORTED";
  case GPUC_ERR_CUDA: return "GPUC_ERR_CUDA";
  case GPUC_ERR_OUT_OF_MEMORY: return "GPUC_ERR_OUT_OF_MEMORY";
  case GPUC_ERR_STATE: return "GPUC_ERR_STATE";
  }
  return "unknown status";
}

GPUC_API const char *gpuc_version(void) { return GPUC_VERSION; }
GPUC_API int gpuc_api_version(void) { return GPUC_API_VERSION; }

/* ---- dtypes ------------------------------------------------------------- */
static bool dtype_ok(gpuc_dtype dt) { return dt > GPUC_DTYPE_UNDEFINED && dt <= GPUC_DTYPE_F8E4M3; }

GPUC_API size_t gpuc_dtype_itemsize(gpuc_dtype dt) { return dtype_ok(dt) ? gpuc_dtype_size((GpucDType)dt) : 0; }
GPUC_API const char *gpuc_dtype_to_string(gpuc_dtype dt) {
  return dtype_ok(dt) ? gpuc_dtype_name((GpucDType)dt) : "?";
}

/* ---- the CUDA libraries, opened once ------------------------------------
 * cuda_api.c's loaders keep unguarded static state; the API opens them
 * under pthread_once so sessions made in several threads see one result. */
static pthread_once_t libs_once = PTHREAD_ONCE_INIT;
static void open_libs(void) {
  GpucErr e = {0};
  gpuc_load_cuda_driver(&e); /* results (and failures) are kept by the loaders */
  gpuc_load_cublaslt(&e);
  gpuc_load_cudnn(&e);
}
void api_open_libs(void) { pthread_once(&libs_once, open_libs); }

/* ---- plans -------------------------------------------------------------- */
gpuc_status api_plan_wrap(Plan *p, const char *what, bool owned, gpuc_plan *out) {
  memset(out, 0, sizeof *out);
  out->p = p;
  out->owned = owned;
  snprintf(out->what, sizeof out->what, "%s", what);
  out->io[0] = calloc(p->ntensors + 1, sizeof(uint32_t));
  out->io[1] = calloc(p->ntensors + 1, sizeof(uint32_t));
  if (!out->io[0] || !out->io[1]) {
    free(out->io[0]);
    free(out->io[1]);
    return api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  }
  for (uint32_t i = 0; i < p->ntensors; i++) {
    uint8_t r = p->tensors[i].role;
    if (r == PLAN_ROLE_INPUT || r == PLAN_ROLE_INPUT_OUTPUT) out->io[0][out->n[0]++] = i;
    if (r == PLAN_ROLE_OUTPUT || r == PLAN_ROLE_INPUT_OUTPUT) out->io[1][out->n[1]++] = i;
  }
  return GPUC_OK;
}

gpuc_status api_plan_new(Plan *p, const char *what, gpuc_plan **out) {
  gpuc_plan *h = calloc(1, sizeof *h);
  if (!h) { gpuc_plan_free(p); return api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", what); }
  gpuc_status st = api_plan_wrap(p, what, true, h);
  if (st) { gpuc_plan_free(p); free(h); return st; }
  *out = h;
  return GPUC_OK;
}

static void plan_unwrap(gpuc_plan *h) {
  if (h->owned) gpuc_plan_free(h->p);
  free(h->io[0]);
  free(h->io[1]);
}

GPUC_API gpuc_status gpuc_plan_load(const char *path, gpuc_plan **out) {
  if (!path || !out) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_load: %s is NULL", path ? "out" : "path");
  *out = NULL;
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(path, &e);
  if (!p) return api_fail(GPUC_ERR_BAD_INPUT, &e);
  return api_plan_new(p, path, out);
}

GPUC_API gpuc_status gpuc_plan_load_bytes(const void *data, size_t size, gpuc_plan **out) {
  if (!data || !out)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_load_bytes: %s is NULL", data ? "out" : "data");
  *out = NULL;
  GpucErr e = {0};
  Plan *p = gpuc_plan_from_bytes(data, size, "<plan bytes>", &e);
  if (!p) return api_fail(GPUC_ERR_BAD_INPUT, &e);
  return api_plan_new(p, "<plan bytes>", out);
}

GPUC_API gpuc_status gpuc_plan_save(const gpuc_plan *plan, const char *path) {
  if (!plan || !path) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_save: %s is NULL", plan ? "path" : "plan");
  GpucErr e = {0};
  if (gpuc_plan_write(plan->p, path, &e)) return api_fail(GPUC_ERR_BAD_INPUT, &e);
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_plan_save_bytes(const gpuc_plan *plan, void **data, size_t *size) {
  if (!plan || !data || !size)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_save_bytes: %s is NULL",
                     !plan ? "plan" : !data ? "data" : "size");
  *data = NULL;
  *size = 0;
  GpucErr e = {0};
  uint8_t *buf;
  uint64_t n;
  if (gpuc_plan_to_bytes(plan->p, plan->what, &buf, &n, &e)) return api_fail(GPUC_ERR_OUT_OF_MEMORY, &e);
  *data = buf;
  *size = (size_t)n;
  return GPUC_OK;
}

GPUC_API void gpuc_plan_destroy(gpuc_plan *plan) {
  if (!plan || !plan->owned) return; /* a session's view is the session's */
  plan_unwrap(plan);
  free(plan);
}

GPUC_API void gpuc_free(void *data) { free(data); }

/* The plan tensor of entry index of list io, or NULL with the message set. */
static const PlanTensor *io_tensor(const gpuc_plan *plan, gpuc_io io, size_t index, const char *fn) {
  if (!plan) { api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn); return NULL; }
  if (io != GPUC_INPUT && io != GPUC_OUTPUT) { api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: io %d is neither GPUC_INPUT nor GPUC_OUTPUT", fn, (int)io); return NULL; }
  if (index >= plan->n[io]) {
    api_failf(GPUC_ERR_NOT_FOUND, "%s: %s: %s %zu of %u", plan->what, fn, io ? "output" : "input", index, plan->n[io]);
    return NULL;
  }
  return &plan->p->tensors[plan->io[io][index]];
}

GPUC_API size_t gpuc_plan_count(const gpuc_plan *plan, gpuc_io io) {
  return plan && (io == GPUC_INPUT || io == GPUC_OUTPUT) ? plan->n[io] : 0;
}

GPUC_API const char *gpuc_plan_name(const gpuc_plan *plan, gpuc_io io, size_t index) {
  const PlanTensor *t = io_tensor(plan, io, index, "gpuc_plan_name");
  return t ? gpuc_plan_str(plan->p, t->name) : NULL;
}

GPUC_API gpuc_dtype gpuc_plan_dtype(const gpuc_plan *plan, gpuc_io io, size_t index) {
  const PlanTensor *t = io_tensor(plan, io, index, "gpuc_plan_dtype");
  return t ? (gpuc_dtype)t->dt : GPUC_DTYPE_UNDEFINED;
}

GPUC_API int gpuc_plan_ndim(const gpuc_plan *plan, gpuc_io io, size_t index) {
  const PlanTensor *t = io_tensor(plan, io, index, "gpuc_plan_ndim");
  return t ? (int)t->rank : -1;
}

GPUC_API int64_t gpuc_plan_dim(const gpuc_plan *plan, gpuc_io io, size_t index, int axis) {
  const PlanTensor *t = io_tensor(plan, io, index, "gpuc_plan_dim");
  if (!t) return -1;
  if (axis < 0 || axis >= (int)t->rank) {
    api_failf(GPUC_ERR_NOT_FOUND, "%s: gpuc_plan_dim: '%s' has %d dims, no axis %d", plan->what,
              gpuc_plan_str(plan->p, t->name), (int)t->rank, axis);
    return -1;
  }
  return t->dims[axis];
}

GPUC_API int gpuc_plan_index(const gpuc_plan *plan, gpuc_io io, const char *name) {
  if (!plan || !name || (io != GPUC_INPUT && io != GPUC_OUTPUT)) return -1;
  for (uint32_t k = 0; k < plan->n[io]; k++)
    if (!strcmp(gpuc_plan_str(plan->p, plan->p->tensors[plan->io[io][k]].name), name)) return (int)k;
  return -1;
}

GPUC_API gpuc_status gpuc_plan_info(const gpuc_plan *plan, gpuc_io io, size_t index, gpuc_tensor *info) {
  if (!info) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_plan_info: info is NULL");
  const PlanTensor *t = io_tensor(plan, io, index, "gpuc_plan_info");
  if (!t) return io == GPUC_INPUT || io == GPUC_OUTPUT ? (plan ? GPUC_ERR_NOT_FOUND : GPUC_ERR_INVALID_ARGUMENT)
                                                       : GPUC_ERR_INVALID_ARGUMENT;
  memset(info, 0, sizeof *info);
  info->name = gpuc_plan_str(plan->p, t->name);
  info->dtype = (gpuc_dtype)t->dt;
  info->ndim = t->rank;
  for (int d = 0; d < t->rank; d++) info->dims[d] = t->dims[d];
  info->nbytes = (size_t)t->bytes;
  return GPUC_OK;
}

GPUC_API int gpuc_plan_sm(const gpuc_plan *plan) { return plan ? (int)plan->p->hdr.sm : -1; }

/* ---- devices ------------------------------------------------------------ */
/* Devices present; 0 with the reason in why when none. */
static int device_count(GpucErr *why) {
  api_open_libs();
  int n = 0;
  if (gpuc_load_cuda_driver(why)) return 0;
  CUresult r = cu.cuInit(0);
  if (r == CUDA_SUCCESS) r = cu.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS) { gpuc_cu_fail(why, r, "cuInit/cuDeviceGetCount", __FILE__, __LINE__); return 0; }
  if (n == 0) gpuc_err_set(why, "no CUDA device found");
  return n;
}

GPUC_API int gpuc_device_count(void) {
  GpucErr e = {0};
  return device_count(&e);
}

GPUC_API gpuc_status gpuc_device_sm(int device, int *sm) {
  if (!sm) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_device_sm: sm is NULL");
  GpucErr why = {0};
  int n = device_count(&why);
  if (n == 0) return api_failf(GPUC_ERR_CUDA, "no CUDA device %d: %s", device, why.msg);
  if (device < 0 || device >= n) return api_failf(GPUC_ERR_CUDA, "no CUDA device %d (%d present)", device, n);
  CUdevice d;
  int major = 0, minor = 0;
  if (cu.cuDeviceGet(&d, device) != CUDA_SUCCESS ||
      cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) != CUDA_SUCCESS ||
      cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d) != CUDA_SUCCESS)
    return api_failf(GPUC_ERR_CUDA, "CUDA device %d: cannot read its compute capability", device);
  *sm = major * 10 + minor;
  return GPUC_OK;
}

/* ---- sessions ----------------------------------------------------------- */
typedef struct Binding {
  const void *ptr;               /* host pointer, or a CUdeviceptr as a pointer */
  gpuc_memory mem;
  bool bound;
} Binding;

/* A captured graph with some groups at callers' addresses (key: per
 * group of zero_copy.h, the address or 0 for its arena slot). */
enum { GRAPH_SLOTS = 4 };
typedef struct GraphSlot {
  uint64_t *key;                 /* [ngroups] */
  CUgraphExec exec;              /* NULL: empty */
  uint64_t used;                 /* tick of its last run, for LRU */
} GraphSlot;

struct gpuc_session {
  GpucSession *s;
  gpuc_plan view;                /* the session's plan, for queries (not owned) */
  ApiBuckets *bk;                /* a bucket plan's bindings and runs (api_buckets.c), else NULL */
  Binding *bind[2];              /* per input / per output of view */
  CUevent done;                  /* recorded after each run's last copy, on the run's stream: fetch_output,
                                    destroy and the next run wait for it, never for the caller's stream
                                    (which the caller may have destroyed since) */
  bool ran;                      /* done has been recorded */
  GpucZcPlan zc;                 /* which bindings may run in place; entries: inputs, then outputs */
  uint64_t *ptr;                 /* [nio] a run's device-bound addresses (0: host or unbound) */
  uint64_t *key;                 /* [ngroups] a run's in-place address per group (0: arena) */
  uint8_t *in_place;             /* [nio] */
  CUdeviceptr *table;            /* [ntensors] the addresses a capture uses */
  CUdeviceptr *out_at;           /* [noutputs] where the last run left each output (fetch_output) */
  GraphSlot slots[GRAPH_SLOTS];
  uint64_t tick;
  bool copy_all;                 /* GPUC_ZERO_COPY=0 when the session was made: every binding copied */
  gpuc_session_stats stats;
};

/* The session's in-place machinery: the plan's rules, per-run scratch, the
 * graph slots' keys, and where outputs are (their arena slots at first). */
static int in_place_setup(gpuc_session *h, GpucErr *e) {
  const gpuc_plan *v = &h->view;
  if (gpuc_zc_analyze(v->p, v->io[0], v->n[0], v->io[1], v->n[1], &h->zc, e)) return -1;
  uint32_t nio = h->zc.nio, ng = h->zc.ngroups;
  h->ptr = calloc(nio + 1, sizeof *h->ptr);
  h->key = calloc(ng + 1, sizeof *h->key);
  h->in_place = calloc(nio + 1, 1);
  h->table = calloc(v->p->ntensors + 1, sizeof *h->table);
  h->out_at = calloc(v->n[1] + 1, sizeof *h->out_at);
  if (!h->ptr || !h->key || !h->in_place || !h->table || !h->out_at) return -1;
  for (int k = 0; k < GRAPH_SLOTS; k++)
    if (!(h->slots[k].key = calloc(ng + 1, sizeof(uint64_t)))) return -1;
  for (uint32_t k = 0; k < v->n[1]; k++) h->out_at[k] = h->s->tptr[v->io[1][k]];
  const char *env = getenv("GPUC_ZERO_COPY"); /* a diagnostic: 0 copies every device binding, as API 1 did */
  h->copy_all = env && !strcmp(env, "0");
  return 0;
}

static void in_place_free(gpuc_session *h) {
  for (int k = 0; k < GRAPH_SLOTS; k++) {
    if (h->slots[k].exec) cu.cuGraphExecDestroy(h->slots[k].exec);
    free(h->slots[k].key);
  }
  gpuc_zc_free(&h->zc);
  free(h->ptr);
  free(h->key);
  free(h->in_place);
  free(h->table);
  free(h->out_at);
}

/* Session setup and teardown, one at a time: cuda_api.c's loaders,
 * sparse_gemm.c's cuSPARSELt handle and the libraries' handle creation
 * and destruction keep process-wide state without locks. Runs need no
 * lock. */
static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;
void api_session_lock(void) { pthread_mutex_lock(&session_lock); }
void api_session_unlock(void) { pthread_mutex_unlock(&session_lock); }

GPUC_API gpuc_status gpuc_session_new(const gpuc_plan *plan, int device, gpuc_session **out) {
  if (!plan || !out)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_new: %s is NULL", plan ? "out" : "plan");
  *out = NULL;
  api_open_libs();
  int sm = 0;
  gpuc_status dst = gpuc_device_sm(device, &sm); /* session.c checks device 0's; this is the one asked for */
  if (dst) return dst;
  if (sm < (int)plan->p->hdr.sm)
    return api_failf(GPUC_ERR_CUDA, "%s: plan built for sm_%u, CUDA device %d is sm_%d; compile it for this GPU "
                     "(arch \"sm_%d\" or NULL)", plan->what, plan->p->hdr.sm, device, sm, sm);
  GpucErr e = {0};
  /* the session owns its plan (autotuning may rewrite it): a copy through
   * the plan's bytes, checked again on the way in */
  uint8_t *buf;
  uint64_t n;
  if (gpuc_plan_to_bytes(plan->p, plan->what, &buf, &n, &e)) return api_fail(GPUC_ERR_OUT_OF_MEMORY, &e);
  Plan *copy = gpuc_plan_from_bytes(buf, n, plan->what, &e);
  free(buf);
  if (!copy) return api_fail(GPUC_ERR_BAD_INPUT, &e);
  gpuc_session *h = calloc(1, sizeof *h);
  if (!h) { gpuc_plan_free(copy); return api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", plan->what); }
  pthread_mutex_lock(&session_lock);
  h->s = gpuc_session_create_plan(copy, plan->what, device, &e); /* owns copy from here, also on failure */
  CUresult r = h->s ? cu.cuEventCreate(&h->done, CU_EVENT_DISABLE_TIMING) : CUDA_SUCCESS; /* its context is current */
  /* the arena zeroed: an input slot holds zeros until a run copies an input
   * there (one bound in place never is), which gpuc_session_benchmark reads */
  uint64_t arena = h->s ? gpuc_bucket_arena_bytes(h->s->plan) : 0;
  if (arena && r == CUDA_SUCCESS) r = cu.cuMemsetD8Async(h->s->arena, 0, arena, h->s->stream);
  if (h->s && r == CUDA_SUCCESS) r = cu.cuStreamSynchronize(h->s->stream);
  pthread_mutex_unlock(&session_lock);
  /* a failed creation released all it had acquired (session.c): nothing of it is left, *out stays NULL */
  if (!h->s) { free(h); return api_fail(e.out_of_memory ? GPUC_ERR_OUT_OF_MEMORY : GPUC_ERR_CUDA, &e); }
  if (r != CUDA_SUCCESS) {
    if (h->done) cu.cuEventDestroy(h->done);
    h->done = NULL;
    gpuc_cu_fail(&e, r, "cuEventCreate/cuMemsetD8Async", __FILE__, __LINE__);
    gpuc_session_destroy(h);
    return api_fail(GPUC_ERR_CUDA, &e);
  }
  gpuc_status st = api_plan_wrap((Plan *)gpuc_session_plan(h->s), plan->what, false, &h->view);
  if (st) { /* view's lists are freed (not NULL): not gpuc_session_destroy */
    cu.cuEventDestroy(h->done);
    pthread_mutex_lock(&session_lock);
    gpuc_session_free(h->s);
    pthread_mutex_unlock(&session_lock);
    free(h);
    return st;
  }
  h->bind[0] = calloc(h->view.n[0] + 1, sizeof(Binding));
  h->bind[1] = calloc(h->view.n[1] + 1, sizeof(Binding));
  if (!h->bind[0] || !h->bind[1] || in_place_setup(h, &e)) {
    gpuc_session_destroy(h);
    return api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", plan->what);
  }
  if (h->view.p->nbuckets && !(h->bk = api_buckets_new(&h->view, h->s))) {
    gpuc_session_destroy(h);
    return api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", plan->what);
  }
  *out = h;
  return GPUC_OK;
}

GPUC_API void gpuc_session_destroy(gpuc_session *s) {
  if (!s) return;
  /* the last run's copies may still read or write the session's buffers
   * (and its graph the pinned error record): wait for its event, not for
   * its stream, which may be gone */
  if (s->s && cu.cuCtxSetCurrent(s->s->ctx) == CUDA_SUCCESS && s->done) {
    if (s->ran) cu.cuEventSynchronize(s->done);
    cu.cuEventDestroy(s->done);
  }
  in_place_free(s);
  plan_unwrap(&s->view);
  free(s->bind[0]);
  free(s->bind[1]);
  api_buckets_free(s->bk);
  pthread_mutex_lock(&session_lock);
  gpuc_session_free(s->s);
  pthread_mutex_unlock(&session_lock);
  free(s);
}

GPUC_API const gpuc_plan *gpuc_session_plan_of(const gpuc_session *s) { return s ? &s->view : NULL; }

static const char *io_word(gpuc_io io) { return io == GPUC_INPUT ? "input" : "output"; }

/* The entry of name in list io, checked against the caller's dtype and
 * dims; -1 with the status in *st. */
static int match(const gpuc_session *s, gpuc_io io, const char *name, gpuc_dtype dtype, int ndim,
                 const int64_t *dims, const char *fn, gpuc_status *st) {
  int k = gpuc_plan_index(&s->view, io, name);
  if (k < 0) {
    *st = api_failf(GPUC_ERR_NOT_FOUND, "%s: %s: the plan has no %s named '%s'", s->view.what, fn, io_word(io), name);
    return -1;
  }
  const PlanTensor *t = &s->view.p->tensors[s->view.io[io][k]];
  bool same = (int)dtype == (int)t->dt && ndim == (int)t->rank && (ndim == 0 || dims);
  for (int d = 0; same && d < ndim; d++) same = dims[d] == t->dims[d];
  if (!same) {
    char have[200] = "", want[200] = "";
    int m = 0;
    if (ndim < 0 || ndim > GPUC_MAX_DIMS || (ndim > 0 && !dims)) snprintf(have, sizeof have, "rank %d", ndim);
    else
      for (int d = 0; d < ndim; d++)
        m += snprintf(have + m, sizeof have - (size_t)m, "%s%lld", d ? "x" : "[", (long long)dims[d]);
    if (ndim == 0) snprintf(have, sizeof have, "[]");
    else if (m) snprintf(have + m, sizeof have - (size_t)m, "]");
    m = 0;
    for (int d = 0; d < t->rank; d++)
      m += snprintf(want + m, sizeof want - (size_t)m, "%s%lld", d ? "x" : "[", (long long)t->dims[d]);
    if (t->rank == 0) snprintf(want, sizeof want, "[]");
    else snprintf(want + m, sizeof want - (size_t)m, "]");
    *st = api_failf(GPUC_ERR_MISMATCH, "%s: %s '%s' is %s %s, the plan was compiled for %s %s", s->view.what,
                    io_word(io), name, have, gpuc_dtype_to_string(dtype), want, gpuc_dtype_name(t->dt));
    return -1;
  }
  return k;
}

static gpuc_status bind(gpuc_session *s, gpuc_io io, const char *name, const void *data, gpuc_memory mem,
                        gpuc_dtype dtype, int ndim, const int64_t *dims, const char *fn) {
  if (!s || !name || !data)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !s ? "session" : !name ? "name" : "data");
  if (mem != GPUC_MEMORY_HOST && mem != GPUC_MEMORY_DEVICE)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: memory %d is neither GPUC_MEMORY_HOST nor GPUC_MEMORY_DEVICE",
                     fn, (int)mem);
  gpuc_status st = GPUC_OK;
  int k = s->bk ? api_buckets_bind(s->bk, io, name, data, mem, dtype, ndim, dims, fn, &st) /* any shape in range */
                : match(s, io, name, dtype, ndim, dims, fn, &st);
  if (k < 0) return st;
  s->bind[io][k] = (Binding){.ptr = data, .mem = mem, .bound = true};
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_bind_input(gpuc_session *s, const char *name, const void *data, gpuc_memory mem,
                                             gpuc_dtype dtype, int ndim, const int64_t *dims) {
  return bind(s, GPUC_INPUT, name, data, mem, dtype, ndim, dims, "gpuc_session_bind_input");
}

GPUC_API gpuc_status gpuc_session_bind_output(gpuc_session *s, const char *name, void *data, gpuc_memory mem,
                                              gpuc_dtype dtype, int ndim, const int64_t *dims) {
  return bind(s, GPUC_OUTPUT, name, data, mem, dtype, ndim, dims, "gpuc_session_bind_output");
}

GPUC_API gpuc_status gpuc_session_unbind_all(gpuc_session *s) {
  if (!s) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_unbind_all: session is NULL");
  memset(s->bind[0], 0, s->view.n[0] * sizeof(Binding));
  memset(s->bind[1], 0, s->view.n[1] * sizeof(Binding));
  if (s->bk) api_buckets_unbind_all(s->bk);
  return GPUC_OK;
}

#define RUN_TRY(call)                                                                    \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      gpuc_cu_fail(&e, r_, #call, __FILE__, __LINE__);                                   \
      return api_fail(GPUC_ERR_CUDA, &e);                                                \
    }                                                                                    \
  } while (0)

/* The session's graph captured, one session at a time (first run only). */
static gpuc_status captured(gpuc_session *s) {
  if (s->s->graph_ready) return GPUC_OK; /* a session is used by one thread at a time */
  GpucErr e = {0};
  pthread_mutex_lock(&session_lock);
  int rc = gpuc_session_capture(s->s, &e);
  pthread_mutex_unlock(&session_lock);
  if (!rc) s->stats.graph_captures++;
  return rc ? api_fail(GPUC_ERR_CUDA, &e) : GPUC_OK;
}

/* The graph for this run's key: the session's own (nothing in place), a
 * slot's with the same key, or a capture into the least recently used
 * slot (updating its graph in place where CUDA can). */
static gpuc_status graph_for_key(gpuc_session *s, bool any, CUgraphExec *exec) {
  if (!any) {
    gpuc_status st = captured(s);
    *exec = s->s->graph;
    return st;
  }
  size_t kb = s->zc.ngroups * sizeof(uint64_t);
  GraphSlot *victim = &s->slots[0];
  for (int k = 0; k < GRAPH_SLOTS; k++) {
    GraphSlot *g = &s->slots[k];
    if (g->exec && !memcmp(g->key, s->key, kb)) {
      g->used = ++s->tick;
      s->stats.graph_cache_hits++;
      *exec = g->exec;
      return GPUC_OK;
    }
    if (!g->exec ? victim->exec != NULL : victim->exec && g->used < victim->used) victim = g;
  }
  const Plan *p = s->view.p;
  memcpy(s->table, s->s->tptr, p->ntensors * sizeof *s->table);
  for (uint32_t g = 0; g < s->zc.ngroups; g++)
    if (s->key[g])
      for (uint32_t m = s->zc.member_start[g]; m < s->zc.member_start[g + 1]; m++)
        s->table[s->zc.members[m]] = (CUdeviceptr)s->key[g];
  GpucErr e = {0};
  bool updated = false;
  pthread_mutex_lock(&session_lock); /* as the first capture: the libraries' shared state */
  int rc = gpuc_session_capture_at(s->s, s->table, &victim->exec, &updated, &e);
  pthread_mutex_unlock(&session_lock);
  if (rc) { victim->used = 0; return api_fail(GPUC_ERR_CUDA, &e); }
  memcpy(victim->key, s->key, kb);
  victim->used = ++s->tick;
  s->stats.graph_captures++;
  s->stats.graph_updates += updated;
  *exec = victim->exec;
  return GPUC_OK;
}

/* A copy on cs, counted. */
static gpuc_status copy(gpuc_session *s, int kind, uint64_t dst, uint64_t src, uint64_t bytes, CUstream cs) {
  GpucErr e = {0};
  if (kind == 0) {
    RUN_TRY(cu.cuMemcpyHtoDAsync((CUdeviceptr)dst, (const void *)(uintptr_t)src, bytes, cs));
    s->stats.bytes_host_to_device += bytes;
  } else if (kind == 1) {
    RUN_TRY(cu.cuMemcpyDtoHAsync((void *)(uintptr_t)dst, (CUdeviceptr)src, bytes, cs));
    s->stats.bytes_device_to_host += bytes;
  } else {
    RUN_TRY(cu.cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, cs));
    s->stats.bytes_device_to_device += bytes;
  }
  s->stats.copies++;
  return GPUC_OK;
}

/* Which device bindings run in place (zero_copy.h), their graph, the
 * other bindings' copies around its launch, on cs (the context current). */
static gpuc_status enqueue_run(gpuc_session *s, CUstream cs) {
  if (s->bk) return api_buckets_enqueue(s->bk, (void *)cs); /* the bucket the inputs' dims pick, copied */
  const gpuc_plan *v = &s->view;
  const GpucSession *g = s->s;
  uint32_t nin = v->n[0], nio = s->zc.nio;
  for (uint32_t i = 0; i < nio; i++) {
    const Binding *b = i < nin ? &s->bind[0][i] : &s->bind[1][i - nin];
    s->ptr[i] = b->bound && b->mem == GPUC_MEMORY_DEVICE && !s->copy_all ? (uint64_t)(uintptr_t)b->ptr : 0;
  }
  GpucZcRange own[3] = {{g->arena, g->arena + gpuc_bucket_arena_bytes(g->plan)},
                        {g->weights, g->weights + g->plan->weights_size},
                        {g->workspace, g->workspace + g->workspace_bytes}};
  uint32_t n_in_place = gpuc_zc_choose(&s->zc, s->ptr, own, 3, s->key, s->in_place);
  CUgraphExec exec = NULL;
  gpuc_status st = graph_for_key(s, n_in_place > 0, &exec);
  if (st) return st; /* nothing enqueued yet */
  GpucErr e = {0};
  for (uint32_t i = 0; i < nio; i++) { /* where entry i's tensor is in this run's graph */
    uint64_t at = s->key[s->zc.group[i]];
    s->ptr[i] = at ? at : g->tptr[s->zc.tensor[i]];
  }
  for (uint32_t k = 0; k < nin; k++) {
    uint64_t bytes = s->zc.bytes[k], at = s->ptr[k];
    const Binding *b = &s->bind[0][k];
    if (!bytes || s->in_place[k] || (b->mem == GPUC_MEMORY_DEVICE && (uint64_t)(uintptr_t)b->ptr == at)) continue;
    st = copy(s, b->mem == GPUC_MEMORY_HOST ? 0 : 2, at, (uint64_t)(uintptr_t)b->ptr, bytes, cs);
    if (st) return st;
  }
  RUN_TRY(cu.cuGraphLaunch(exec, cs));
  for (uint32_t k = 0; k < v->n[1]; k++) {
    uint32_t i = nin + k;
    uint64_t bytes = s->zc.bytes[i], at = s->ptr[i];
    const Binding *b = &s->bind[1][k];
    s->out_at[k] = (CUdeviceptr)at;
    if (!b->bound || !bytes || s->in_place[i] || (b->mem == GPUC_MEMORY_DEVICE && (uint64_t)(uintptr_t)b->ptr == at))
      continue; /* in place, or the session's own buffer (gpuc_session_buffer): nothing to copy */
    st = copy(s, b->mem == GPUC_MEMORY_HOST ? 1 : 2, (uint64_t)(uintptr_t)b->ptr, at, bytes, cs);
    if (st) return st;
  }
  s->stats.runs++;
  s->stats.in_place_bindings += n_in_place;
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_run_async(gpuc_session *s, void *stream) {
  if (!s) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_run_async: session is NULL");
  const gpuc_plan *v = &s->view;
  for (uint32_t k = 0; k < v->n[0]; k++)
    if (!s->bind[0][k].bound)
      return api_failf(GPUC_ERR_STATE, "%s: input '%s' is not bound (gpuc_session_bind_input)", v->what,
                       gpuc_plan_str(v->p, v->p->tensors[v->io[0][k]].name));
  GpucErr e = {0};
  CUstream cs = (CUstream)stream;
  RUN_TRY(cu.cuCtxSetCurrent(s->s->ctx));
  /* after the last run, whatever stream it was on: its output copies read
   * the buffers this run's input copies write (free on the same stream) */
  if (s->ran) RUN_TRY(cu.cuStreamWaitEvent(cs, s->done, 0));
  gpuc_status st = enqueue_run(s, cs);
  /* also after a failure part way: what was enqueued is waited for */
  CUresult r = cu.cuEventRecord(s->done, cs);
  if (r == CUDA_SUCCESS) s->ran = true;
  else if (!st) {
    gpuc_cu_fail(&e, r, "cuEventRecord", __FILE__, __LINE__);
    return api_fail(GPUC_ERR_CUDA, &e);
  }
  return st;
}

GPUC_API gpuc_status gpuc_session_run(gpuc_session *s) {
  if (!s) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_run: session is NULL");
  gpuc_status st = gpuc_session_run_async(s, s->s->stream);
  if (st) return st;
  GpucErr e = {0};
  if (gpuc_session_sync(s->s, &e)) return api_fail(GPUC_ERR_CUDA, &e); /* the session's own wait and checks */
  if (s->bk && api_buckets_check(s->bk, &e)) return api_fail(GPUC_ERR_BAD_INPUT, &e);
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_fetch_output(gpuc_session *s, const char *name, void *data, size_t size) {
  if (!s || !name || !data)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_fetch_output: %s is NULL",
                     !s ? "session" : !name ? "name" : "data");
  int k = gpuc_plan_index(&s->view, GPUC_OUTPUT, name);
  if (k < 0)
    return api_failf(GPUC_ERR_NOT_FOUND, "%s: gpuc_session_fetch_output: the plan has no output named '%s'",
                     s->view.what, name);
  if (s->bk && s->ran) { /* sliced to the last run's shape */
    GpucErr be = {0};
    CUresult r = cu.cuCtxSetCurrent(s->s->ctx);
    if (r == CUDA_SUCCESS) r = cu.cuEventSynchronize(s->done);
    if (r != CUDA_SUCCESS) return api_fail(GPUC_ERR_CUDA, (gpuc_cu_fail(&be, r, "cuEventSynchronize", __FILE__, __LINE__), &be));
    if (gpuc_session_check(s->s, &be) || api_buckets_check(s->bk, &be)) return api_fail(GPUC_ERR_BAD_INPUT, &be);
  }
  if (s->bk) return api_buckets_fetch(s->bk, (uint32_t)k, data, size);
  uint32_t t = s->view.io[1][k];
  uint64_t bytes = s->view.p->tensors[t].bytes;
  if (size != bytes)
    return api_failf(GPUC_ERR_MISMATCH, "%s: output '%s' is %llu bytes, the buffer %zu", s->view.what, name,
                     (unsigned long long)bytes, size);
  if (!s->ran)
    return api_failf(GPUC_ERR_STATE, "%s: output '%s': the session has not run yet", s->view.what, name);
  GpucErr e = {0};
  RUN_TRY(cu.cuCtxSetCurrent(s->s->ctx));
  RUN_TRY(cu.cuEventSynchronize(s->done));
  if (gpuc_session_check(s->s, &e)) return api_fail(GPUC_ERR_BAD_INPUT, &e); /* bad data a kernel found */
  /* where the last run left it: its arena slot, or the caller's buffer it ran in */
  if (bytes) RUN_TRY(cu.cuMemcpyDtoH(data, s->out_at[k], bytes));
  s->stats.bytes_device_to_host += bytes;
  s->stats.copies += bytes != 0;
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_poll_errors(gpuc_session *s) {
  if (!s) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_poll_errors: session is NULL");
  GpucErr e = {0};
  RUN_TRY(cu.cuCtxSetCurrent(s->s->ctx));
  if (gpuc_session_check(s->s, &e)) return api_fail(GPUC_ERR_BAD_INPUT, &e);
  if (s->bk && api_buckets_check(s->bk, &e)) return api_fail(GPUC_ERR_BAD_INPUT, &e);
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_output_dims(gpuc_session *s, const char *name, int *ndim, int64_t *dims) {
  if (!s || !name || !ndim || !dims)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_output_dims: %s is NULL",
                     !s ? "session" : !name ? "name" : !ndim ? "ndim" : "dims");
  int k = gpuc_plan_index(&s->view, GPUC_OUTPUT, name);
  if (k < 0)
    return api_failf(GPUC_ERR_NOT_FOUND, "%s: gpuc_session_output_dims: the plan has no output named '%s'",
                     s->view.what, name);
  if (s->bk) return api_buckets_output_dims(s->bk, (uint32_t)k, ndim, dims);
  const PlanTensor *t = &s->view.p->tensors[s->view.io[1][k]]; /* one shape: the plan's */
  *ndim = t->rank;
  for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d];
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_buffer(gpuc_session *s, gpuc_io io, const char *name, void **device_ptr) {
  if (!s || !name || !device_ptr)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_buffer: %s is NULL",
                     !s ? "session" : !name ? "name" : "device_ptr");
  if (io != GPUC_INPUT && io != GPUC_OUTPUT)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_buffer: io %d is neither GPUC_INPUT nor GPUC_OUTPUT",
                     (int)io);
  int k = gpuc_plan_index(&s->view, io, name);
  if (k < 0)
    return api_failf(GPUC_ERR_NOT_FOUND, "%s: gpuc_session_buffer: the plan has no %s named '%s'", s->view.what,
                     io_word(io), name);
  if (s->bk) /* each bucket has its own slots in the one arena: bound there, a copy could overlap another's */
    return api_failf(GPUC_ERR_UNSUPPORTED, "%s: gpuc_session_buffer: a bucket plan's buffers move with the bucket "
                     "each run picks; bind buffers of your own", s->view.what);
  *device_ptr = (void *)(uintptr_t)s->s->tptr[s->view.io[io][k]];
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_benchmark(gpuc_session *s, int warmup, int iters, double *median_ms,
                                            double *p90_ms) {
  if (!s) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_benchmark: session is NULL");
  if (iters < 1 || iters > 100000 || warmup < 0 || warmup > 100000)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_benchmark: iters 1..100000 and warmup 0..100000, got %d "
                     "and %d", iters, warmup);
  GpucErr e = {0};
  GpucBench b;
  RUN_TRY(cu.cuCtxSetCurrent(s->s->ctx));
  if (s->ran) RUN_TRY(cu.cuStreamWaitEvent(s->s->stream, s->done, 0)); /* a run_async's on another stream */
  gpuc_status cst = captured(s);
  if (cst) return cst;
  /* the session's own graph at its compiled shape (a bucket plan's: the
   * last run's bucket, the largest before any run), on what its buffers hold */
  GpucSession *timed = s->bk ? api_buckets_bench_session(s->bk, &cst) : s->s;
  if (!timed) return cst;
  int rc = gpuc_session_bench_graph(timed, warmup, iters, &b, NULL, &e);
  if (cu.cuEventRecord(s->done, s->s->stream) == CUDA_SUCCESS) s->ran = true;
  if (rc) return api_fail(GPUC_ERR_CUDA, &e);
  if (median_ms) *median_ms = b.median_ms;
  if (p90_ms) *p90_ms = b.p90_ms;
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_gpu(const gpuc_session *s, char *name, size_t name_size, int *sm) {
  if (!s) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_gpu: session is NULL");
  int v = 0;
  char buf[128];
  gpuc_session_device(s->s, buf, sizeof buf, &v);
  if (name && name_size) snprintf(name, name_size, "%s", buf);
  if (sm) *sm = v;
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_get_stats(const gpuc_session *s, gpuc_session_stats *stats, size_t size) {
  if (!s || !stats)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_get_stats: %s is NULL", s ? "stats" : "session");
  if (size < sizeof(uint64_t) || size % sizeof(uint64_t))
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_get_stats: size %zu is not sizeof(gpuc_session_stats) "
                     "of some API version", size);
  memset(stats, 0, size); /* fields this library does not know stay 0 */
  memcpy(stats, &s->stats, size < sizeof s->stats ? size : sizeof s->stats);
  return GPUC_OK;
}

GPUC_API gpuc_status gpuc_session_reset_stats(gpuc_session *s) {
  if (!s) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_session_reset_stats: session is NULL");
  memset(&s->stats, 0, sizeof s->stats);
  return GPUC_OK;
}

GPUC_API int gpuc_plan_in_place(const gpuc_plan *plan, gpuc_io io, size_t index, const char **why) {
  if (why) *why = NULL;
  if (!io_tensor(plan, io, index, "gpuc_plan_in_place")) return -1;
  GpucZcPlan zp;
  GpucErr e = {0};
  if (gpuc_zc_analyze(plan->p, plan->io[0], plan->n[0], plan->io[1], plan->n[1], &zp, &e)) {
    api_fail(GPUC_ERR_OUT_OF_MEMORY, &e);
    return -1;
  }
  GpucZcWhy w = (GpucZcWhy)zp.why[(io == GPUC_OUTPUT ? plan->n[0] : 0) + index];
  gpuc_zc_free(&zp);
  if (why) *why = gpuc_zc_why_text(w);
  return w == GPUC_ZC_OK;
}
