/* The public compiler C API (include/gpuc/gpuc_compiler.h): options into
 * the command line's CompileRequest and PassFlags (the same checks and
 * messages: tools/pass_flags.c, tools/compile_driver.c), then the same
 * compile and reference paths as `gpuc MODEL.onnx` and `gpuc run --cpu`.
 * One compile or reference run at a time per process (a lock): the
 * compiler's NVRTC loader and pass code were written for one thread. */
#include "api_internal.h"
#include "cli.h"
#include "ref.h"
#include "session.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t compiler_lock = PTHREAD_MUTEX_INITIALIZER;

GPUC_API void gpuc_options_init(gpuc_compile_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->opt_level = 2;
}

/* The options as the command line would have them. shape_text holds the
 * strings parse_shape_bind cuts (binds point into it); free it after. */
typedef struct Request {
  CompileRequest r;
  GpucShapeBind *binds;
  char **shape_text;
  size_t nshapes;
  ShapeRange *ranges;            /* a shape with a range ("1..64x3x224x224"): every shape as one, for the buckets */
  bool ranged;
  const char **bucket_lists;     /* options->buckets (API 2) */
  int nlists;
} Request;

static void request_free(Request *q) {
  for (size_t i = 0; i < q->nshapes; i++) free(q->shape_text[i]);
  free(q->shape_text);
  free(q->binds);
  free(q->ranges);
}

/* The options' size when the caller was built against API 1 (no buckets). */
#define OPTIONS_V1_SIZE offsetof(gpuc_compile_options, buckets)

/* 0, or a status with the message set. */
static gpuc_status request_from(const gpuc_compile_options *o, Request *q) {
  memset(q, 0, sizeof *q);
  q->r.level = 2;
  q->r.quiet = true;
  if (!o) return GPUC_OK;
  if (o->struct_size != sizeof *o && o->struct_size != OPTIONS_V1_SIZE)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT,
                     "gpuc_compile_options.struct_size is %zu, this library's is %zu: initialize the options with "
                     "gpuc_options_init (a program built for another API version needs its gpuc)",
                     o->struct_size, sizeof *o);
  if (o->opt_level < 0 || o->opt_level > 3)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "opt_level %d: -O0..-O3 are 0..3", o->opt_level);
  q->r.level = o->opt_level;
  GpucErr e = {0};
  PassFlags *f = &q->r.flags;
  f->fp16 = o->fp16 != 0;
  f->bf16 = o->bf16 != 0;
  f->int8 = o->int8 != 0;
  f->fp8 = o->fp8 != 0;
  if (o->int8_skip && pass_flags_add_int8_skip(f, o->int8_skip, &e)) return api_fail(GPUC_ERR_INVALID_ARGUMENT, &e);
  if (o->prune && pass_flags_set_prune(f, o->prune, &e)) return api_fail(GPUC_ERR_INVALID_ARGUMENT, &e);
  if (pass_flags_validate(f, &e)) return api_fail(GPUC_ERR_INVALID_ARGUMENT, &e);
  if (o->arch && parse_arch(o->arch, &q->r.sm))
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "arch '%.40s': --arch wants native or sm_80|sm_86|sm_89|sm_90|sm_120",
                     o->arch);
  if (o->mem_limit < 0)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "mem_limit %lld: a number of bytes, or 0 for none",
                     (long long)o->mem_limit);
  q->r.mem_limit = o->mem_limit;
  if (o->num_shapes && !o->shapes) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "num_shapes is %zu but shapes is NULL", o->num_shapes);
  if (o->num_shapes > 4096) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "num_shapes %zu: at most 4096", o->num_shapes);
  if (o->struct_size == sizeof *o && o->num_buckets) { /* --buckets */
    if (!o->buckets || o->num_buckets > 16)
      return api_failf(GPUC_ERR_INVALID_ARGUMENT, "num_buckets is %zu: 1..16 lists, and buckets not NULL", o->num_buckets);
    for (size_t i = 0; i < o->num_buckets; i++)
      if (!o->buckets[i] || !*o->buckets[i])
        return api_failf(GPUC_ERR_INVALID_ARGUMENT, "buckets[%zu]: sizes like \"1,8,32\", \"seq=16,128\" or "
                         "\"1x16,8x64\"", i);
    q->bucket_lists = (const char **)o->buckets;
    q->nlists = (int)o->num_buckets;
  }
  if (!o->num_shapes) {
    if (q->nlists) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "buckets need a range in a shape, like x=1..64x3x224x224");
    return GPUC_OK;
  }
  if (o->num_shapes > 64) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "num_shapes %zu: at most 64", o->num_shapes);
  q->binds = calloc(o->num_shapes, sizeof *q->binds);
  q->shape_text = calloc(o->num_shapes, sizeof *q->shape_text);
  q->ranges = calloc(o->num_shapes, sizeof *q->ranges);
  if (!q->binds || !q->shape_text || !q->ranges) return api_failf(GPUC_ERR_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < o->num_shapes; i++) {
    if (!o->shapes[i]) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "shapes[%zu] is NULL", i);
    q->ranged |= strstr(o->shapes[i], "..") != NULL;
  }
  for (size_t i = 0; i < o->num_shapes; i++) { /* as the command: with a range, every --shape is a ShapeRange */
    if (!(q->shape_text[i] = strdup(o->shapes[i]))) return api_failf(GPUC_ERR_OUT_OF_MEMORY, "out of memory");
    q->nshapes = i + 1;
    if (q->ranged ? parse_shape_range(q->shape_text[i], &q->ranges[i], &e)
                  : parse_shape_bind(q->shape_text[i], &q->binds[i], &e))
      return api_fail(GPUC_ERR_INVALID_ARGUMENT, &e);
    if (q->ranged) q->binds[i] = q->ranges[i].bind;
  }
  if (q->nlists && !q->ranged)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "buckets need a range in a shape, like x=1..64x3x224x224");
  q->r.binds = q->binds;
  q->r.nbinds = (int)o->num_shapes;
  return GPUC_OK;
}

/* -O3 of one bucket (compile_buckets_plan's tune step) in memory, under
 * the session lock as the one-shape -O3 below; without a GPU the bucket
 * keeps -O2's choices, as a one-shape plan does here. */
static int tune_in_memory(Plan **p, const char *what, const char *cache, GpucErr *e) {
  GpucErr ge = {0};
  GpucTuneStats ts;
  api_session_lock();
  int rc = gpuc_gpu_sm(&ge) < 0 ? 0 : autotune_plan_in_memory(p, what, cache, &ts, e);
  api_session_unlock();
  return rc;
}

/* A bucket plan (shapes with ranges): the buckets compiled one after
 * another in this process (no fork inside a caller's program), each tuned
 * at -O3. Bytes go through a temporary file: the compiler reads the model
 * once per bucket. */
static int compile_ranged(const char *path, const void *bytes, size_t size, Request *q, Plan **p, GpucErr *e) {
  char tmp[4200] = "";
  if (!path) {
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmp, sizeof tmp, "%s/gpuc-api-model.XXXXXX", dir);
    int fd = mkstemp(tmp);
    if (fd < 0) return gpuc_err_set(e, "<onnx bytes>: a temporary file in %s for the buckets' compiles: %s", dir, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    bool ok = f && fwrite(bytes, 1, size, f) == size;
    if (f ? fclose(f) : close(fd)) ok = false;
    if (!ok) { unlink(tmp); return gpuc_err_set(e, "<onnx bytes>: cannot write %s", tmp); }
    path = tmp;
  }
  q->r.model = path;
  char cachebuf[4096];
  const char *cache = q->r.level >= 3 ? default_tune_cache(cachebuf, sizeof cachebuf) : NULL;
  int rc = compile_buckets_plan(&q->r, q->ranges, (int)q->nshapes, q->bucket_lists, q->nlists, tune_in_memory, cache,
                                1, p, e);
  if (*tmp) unlink(tmp);
  return rc;
}

/* The model from a file (path) or bytes, with the request's shapes. */
static Graph *load(const char *path, const void *bytes, size_t size, const GpucShapeBind *b, int nb, GpucErr *e) {
  return path ? gpuc_onnx_load(path, b, nb, e) : gpuc_onnx_load_bytes(bytes, size, "<onnx bytes>", b, nb, e);
}

static gpuc_status compile(const char *path, const void *bytes, size_t size, const gpuc_compile_options *o,
                           gpuc_plan **out) {
  const char *what = path ? path : "<onnx bytes>";
  Request q;
  gpuc_status st = request_from(o, &q);
  if (st) { request_free(&q); return st; }
  api_open_libs();
  pthread_mutex_lock(&compiler_lock);
  GpucErr e = {0};
  Plan *p = NULL;
  CompileStats cs;
  if (q.ranged) {
    st = compile_ranged(path, bytes, size, &q, &p, &e) ? (strstr(e.msg, "no GPU here") ? GPUC_ERR_CUDA : GPUC_ERR_BAD_INPUT)
                                                      : GPUC_OK;
    pthread_mutex_unlock(&compiler_lock);
    request_free(&q);
    if (st) { gpuc_plan_free(p); return api_fail(st, &e); }
    return api_plan_new(p, what, out);
  }
  Graph *g = load(path, bytes, size, q.r.binds, q.r.nbinds, &e);
  if (!g) st = GPUC_ERR_BAD_INPUT;
  else if (compile_graph_plan(g, &q.r, &cs, &p, &e)) st = strstr(e.msg, "no GPU here") ? GPUC_ERR_CUDA : GPUC_ERR_BAD_INPUT;
  gpuc_graph_free(g);
  if (!st && q.r.level >= 3) { /* -O3 as the command does it: on the GPU when there is one */
    GpucErr ge = {0};
    char cachebuf[4096];
    GpucTuneStats ts;
    api_session_lock(); /* its session is set up like the API's: one at a time */
    if (gpuc_gpu_sm(&ge) >= 0 && autotune_plan_in_memory(&p, what, default_tune_cache(cachebuf, sizeof cachebuf),
                                                         &ts, &e)) {
      gpuc_err_prefix(&e, "-O3 autotuning");
      st = GPUC_ERR_CUDA;
    }
    api_session_unlock();
  }
  pthread_mutex_unlock(&compiler_lock);
  request_free(&q);
  if (st) { gpuc_plan_free(p); return api_fail(st, &e); }
  return api_plan_new(p, what, out);
}

GPUC_API gpuc_status gpuc_compile_file(const char *onnx_path, const gpuc_compile_options *o, gpuc_plan **out) {
  if (!onnx_path || !out)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_compile_file: %s is NULL", onnx_path ? "out" : "onnx_path");
  *out = NULL;
  return compile(onnx_path, NULL, 0, o, out);
}

GPUC_API gpuc_status gpuc_compile_bytes(const void *onnx, size_t size, const gpuc_compile_options *o, gpuc_plan **out) {
  if (!onnx || !out) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_compile_bytes: %s is NULL", onnx ? "out" : "onnx");
  *out = NULL;
  return compile(NULL, onnx, size, o, out);
}

/* ---- the CPU reference -------------------------------------------------- */
GPUC_API void gpuc_tensors_free(gpuc_tensor *t, size_t n) {
  if (!t) return;
  for (size_t i = 0; i < n; i++) {
    free((char *)t[i].name);
    free(t[i].data);
  }
  free(t);
}

/* A new array describing the graph's values ids[0..n) (names copied; data
 * moved from vals[i] when vals is given, else NULL). */
static gpuc_status describe(const Graph *g, const int *ids, int n, Tensor **vals, gpuc_tensor **out) {
  gpuc_tensor *t = calloc((size_t)n + 1, sizeof *t);
  if (!t) return api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", g->path);
  for (int i = 0; i < n; i++) {
    const Value *v = &g->values[ids[i]];
    const Tensor *x = vals ? vals[i] : &v->t;
    t[i].name = strdup(v->name);
    if (!t[i].name) { gpuc_tensors_free(t, (size_t)n); return api_failf(GPUC_ERR_OUT_OF_MEMORY, "out of memory"); }
    t[i].dtype = (gpuc_dtype)x->dt;
    t[i].ndim = x->rank < 0 ? 0 : x->rank;
    for (int d = 0; d < t[i].ndim; d++) t[i].dims[d] = x->dims[d];
    int64_t numel = gpuc_numel(x);
    t[i].nbytes = numel < 0 ? 0 : (size_t)numel * gpuc_dtype_size(x->dt);
    if (vals) { t[i].data = vals[i]->data; vals[i]->data = NULL; }
  }
  *out = t;
  return GPUC_OK;
}

/* The graph with shapes bound: the options' shapes, and where a graph
 * input still has symbolic dims and the caller gave that input, its dims. */
static Graph *load_for(const char *path, const void *bytes, size_t size, Request *q, const gpuc_tensor *in,
                       size_t nin, GpucErr *e) {
  Graph *g = load(path, bytes, size, q->r.binds, q->r.nbinds, e);
  if (!g || !in) return g;
  GpucShapeBind *extra = calloc((size_t)q->r.nbinds + nin + 1, sizeof *extra);
  if (!extra) { gpuc_graph_free(g); gpuc_err_set(e, "out of memory"); return NULL; }
  int n = q->r.nbinds;
  if (n) memcpy(extra, q->r.binds, (size_t)n * sizeof *extra);
  int added = 0;
  for (int j = 0; j < g->ninputs; j++) {
    const Value *v = &g->values[g->inputs[j]];
    if (gpuc_shape_known(&v->t)) continue;
    for (size_t k = 0; k < nin; k++)
      if (in[k].name && !strcmp(in[k].name, v->name) && in[k].ndim >= 0 && in[k].ndim <= GPUC_MAX_DIMS) {
        extra[n] = (GpucShapeBind){.name = in[k].name, .rank = in[k].ndim};
        memcpy(extra[n].dims, in[k].dims, sizeof in[k].dims);
        n++;
        added++;
        break;
      }
  }
  if (added) {
    gpuc_graph_free(g);
    g = load(path, bytes, size, extra, n, e);
  }
  free(extra);
  return g;
}

static gpuc_status reference(const char *path, const void *bytes, size_t size, const gpuc_compile_options *o,
                             const gpuc_tensor *in, size_t nin, gpuc_tensor **outputs, size_t *nout) {
  if ((nin && !in) || !outputs || !nout)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_reference_run: %s is NULL",
                     !outputs ? "outputs" : !nout ? "num_outputs" : "inputs");
  *outputs = NULL;
  *nout = 0;
  const char *what = path ? path : "<onnx bytes>";
  for (size_t k = 0; k < nin; k++) {
    if (!in[k].name) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: inputs[%zu].name is NULL", what, k);
    if (!in[k].data && in[k].nbytes)
      return api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: input '%s': data is NULL", what, in[k].name);
  }
  Request q;
  gpuc_status st = request_from(o, &q);
  if (st) { request_free(&q); return st; }
  pthread_mutex_lock(&compiler_lock);
  GpucErr e = {0};
  Graph *g = load_for(path, bytes, size, &q, in, nin, &e);
  Tensor **ins = NULL, **outs = NULL;
  if (!g) { st = api_fail(GPUC_ERR_BAD_INPUT, &e); goto done; }
  if (reference_passes(g, &q.r.flags, NULL, &e)) { st = api_fail(GPUC_ERR_BAD_INPUT, &e); goto done; }
  ins = calloc((size_t)g->ninputs + 1, sizeof *ins);
  outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
  if (!ins || !outs) { st = api_failf(GPUC_ERR_OUT_OF_MEMORY, "%s: out of memory", what); goto done; }
  for (size_t k = 0; k < nin; k++) {
    int slot = -1;
    for (int j = 0; j < g->ninputs; j++)
      if (!strcmp(g->values[g->inputs[j]].name, in[k].name)) slot = j;
    if (slot < 0) { st = api_failf(GPUC_ERR_NOT_FOUND, "%s: the model has no graph input named '%s'", what, in[k].name); goto done; }
    if (ins[slot]) { st = api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: input '%s' given twice", what, in[k].name); goto done; }
    const Tensor *want = &g->values[g->inputs[slot]].t;
    bool same = (int)in[k].dtype == (int)want->dt && in[k].ndim == want->rank;
    for (int d = 0; same && d < want->rank; d++) same = in[k].dims[d] == want->dims[d];
    if (!same) {
      Tensor have = {.dt = (GpucDType)in[k].dtype, .rank = in[k].ndim};
      if (have.rank < 0 || have.rank > GPUC_MAX_RANK) have.rank = 0;
      memcpy(have.dims, in[k].dims, sizeof have.dims);
      char a[200], b[200];
      gpuc_shape_str(&have, a, sizeof a);
      gpuc_shape_str(want, b, sizeof b);
      st = api_failf(GPUC_ERR_MISMATCH, "%s: input '%s' is %s %s, the model wants %s %s", what, in[k].name, a,
                     gpuc_dtype_to_string(in[k].dtype), b, gpuc_dtype_name(want->dt));
      goto done;
    }
    if (!(ins[slot] = gpuc_tensor_new(want->dt, want->rank, want->dims, &e))) { st = api_fail(GPUC_ERR_OUT_OF_MEMORY, &e); goto done; }
    size_t need = (size_t)gpuc_numel(ins[slot]) * gpuc_dtype_size(want->dt);
    if (in[k].nbytes != need) {
      st = api_failf(GPUC_ERR_MISMATCH, "%s: input '%s': nbytes is %zu, its shape and dtype need %zu", what,
                     in[k].name, in[k].nbytes, need);
      goto done;
    }
    if (need) memcpy(ins[slot]->data, in[k].data, need);
  }
  for (int j = 0; j < g->ninputs; j++)
    if (!ins[j]) {
      st = api_failf(GPUC_ERR_INVALID_ARGUMENT, "%s: input '%s' not given", what, g->values[g->inputs[j]].name);
      goto done;
    }
  if (gpuc_ref_run(g, (const Tensor *const *)ins, outs, &e)) { st = api_fail(GPUC_ERR_BAD_INPUT, &e); goto done; }
  if (!(st = describe(g, g->outputs, g->noutputs, outs, outputs))) *nout = (size_t)g->noutputs;
done:
  pthread_mutex_unlock(&compiler_lock);
  if (g) {
    for (int j = 0; ins && j < g->ninputs; j++) gpuc_tensor_free(ins[j]);
    for (int j = 0; outs && j < g->noutputs; j++) gpuc_tensor_free(outs[j]);
  }
  free(ins);
  free(outs);
  gpuc_graph_free(g);
  request_free(&q);
  return st;
}

GPUC_API gpuc_status gpuc_reference_run(const char *onnx_path, const gpuc_compile_options *o, const gpuc_tensor *inputs,
                                        size_t num_inputs, gpuc_tensor **outputs, size_t *num_outputs) {
  if (!onnx_path) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_reference_run: onnx_path is NULL");
  return reference(onnx_path, NULL, 0, o, inputs, num_inputs, outputs, num_outputs);
}

GPUC_API gpuc_status gpuc_reference_run_bytes(const void *onnx, size_t size, const gpuc_compile_options *o,
                                              const gpuc_tensor *inputs, size_t num_inputs, gpuc_tensor **outputs,
                                              size_t *num_outputs) {
  if (!onnx) return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_reference_run_bytes: onnx is NULL");
  return reference(NULL, onnx, size, o, inputs, num_inputs, outputs, num_outputs);
}

GPUC_API gpuc_status gpuc_model_inputs(const char *onnx_path, const gpuc_compile_options *o, gpuc_tensor **inputs,
                                       size_t *num_inputs) {
  if (!onnx_path || !inputs || !num_inputs)
    return api_failf(GPUC_ERR_INVALID_ARGUMENT, "gpuc_model_inputs: %s is NULL",
                     !onnx_path ? "onnx_path" : !inputs ? "inputs" : "num_inputs");
  *inputs = NULL;
  *num_inputs = 0;
  Request q;
  gpuc_status st = request_from(o, &q);
  if (st) { request_free(&q); return st; }
  pthread_mutex_lock(&compiler_lock);
  GpucErr e = {0};
  Graph *g = load(onnx_path, NULL, 0, q.r.binds, q.r.nbinds, &e);
  if (!g) st = api_fail(GPUC_ERR_BAD_INPUT, &e);
  else if (!(st = describe(g, g->inputs, g->ninputs, NULL, inputs))) *num_inputs = (size_t)g->ninputs;
  pthread_mutex_unlock(&compiler_lock);
  gpuc_graph_free(g);
  request_free(&q);
  return st;
}
