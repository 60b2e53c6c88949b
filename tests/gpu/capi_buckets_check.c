/* A bucket plan (shape ranges) through the C API on a GPU (public headers
 * and libgpuc.so; the CUDA driver API for the program's own buffers):
 *   capi_buckets_check MODEL.onnx OUT_DIR [--fp16] [--buckets LIST] --shape NAME=RANGE...
 *                      --run NAME=DIMS[,NAME=DIMS]... [--refuse NAME=DIMS[,NAME=DIMS]]...
 * 1. compile MODEL for the present GPU with the ranges (gpuc_compile_file,
 *    shapes "input_ids=1..4x16..64", buckets as --buckets), saved to
 *    OUT_DIR/capi_buckets.gpuc;
 * 2. per --run shape (between buckets: padded and sliced), fresh random
 *    inputs (token ids 1..99; an input named *mask* 1s then 0s at the end
 *    of some rows) and the CPU reference on the same inputs
 *    (gpuc_reference_run, same flags: `gpuc run MODEL --cpu`), then in one
 *    session: the bucket gpuc_plan_resolve names; host bindings with
 *    gpuc_session_output_dims' dims and gpuc_session_run; fetch_output;
 *    device buffers of the program's on its own stream with run_async;
 *    each output against the reference (rel L2 <= 1e-4 fp32, <= 1e-2
 *    fp16, no NaN); the time of run_async + sync against the bucket's graph
 *    alone (gpuc_session_benchmark);
 * 3. per --refuse shape: GPUC_ERR_MISMATCH naming the range, then the first
 *    --run shape again, still right (the session stays usable); an output
 *    bound at the wrong dims refused at the run, then usable;
 *    gpuc_session_buffer refused.
 * Prints PASS/FAIL lines, TIME lines, then "N passed, M failed". */
#include <gpuc/gpuc_compiler.h>
#include <cuda.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_check.h"
#define CU(call)                                                                              \
  do {                                                                                        \
    CUresult r_ = (call);                                                                     \
    if (r_ != CUDA_SUCCESS) { printf("FAIL %s = %d at line %d\n", #call, (int)r_, __LINE__); exit(1); } \
  } while (0)
enum { MAXIO = 16 };

/* relative L2 of got against want; INFINITY for a NaN or a size mismatch */
static double rel_l2(const void *got, const gpuc_tensor *want) {
  size_t n = want->nbytes / gpuc_dtype_itemsize(want->dtype);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double a = get(got, want->dtype, i), b = get(want->data, want->dtype, i);
    if (isnan(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return sqrt(num) / (den > 1e-60 ? sqrt(den) : 1e-30);
}

static const char *dims_str(int nd, const int64_t *d, char *buf, size_t n) {
  size_t m = 0;
  buf[0] = 0;
  for (int i = 0; i < nd && m < n; i++) m += (size_t)snprintf(buf + m, n - m, "%s%lld", i ? "x" : "", (long long)d[i]);
  return buf;
}

/* "a=3x20,b=3x20" -> the dims of every plan input (0: all given) */
static int parse_run(const gpuc_plan *p, const char *spec, gpuc_tensor *in, size_t nin) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", spec);
  for (size_t i = 0; i < nin; i++) in[i].ndim = -1;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    char *eq = strchr(tok, '=');
    if (!eq) return -1;
    *eq = 0;
    int k = gpuc_plan_index(p, GPUC_INPUT, tok);
    if (k < 0) return -1;
    int nd = 0;
    for (char *s = eq + 1; *s && nd < GPUC_MAX_DIMS;) {
      in[k].dims[nd++] = strtoll(s, &s, 10);
      if (*s == 'x') s++;
    }
    in[k].ndim = nd;
  }
  for (size_t i = 0; i < nin; i++) if (in[i].ndim < 0) return -1;
  return 0;
}

static uint64_t seed;
static double urand(void) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(seed >> 11) / 9007199254740992.0;
}

/* fresh inputs at in[i]'s dims: floats in [-1, 1), ids in 1..99, masks 1s then 0s */
static void fill(gpuc_tensor *in, size_t nin) {
  for (size_t i = 0; i < nin; i++) {
    size_t n = 1;
    for (int d = 0; d < in[i].ndim; d++) n *= (size_t)in[i].dims[d];
    in[i].nbytes = n * gpuc_dtype_itemsize(in[i].dtype);
    free(in[i].data);
    void *x = in[i].data = malloc(in[i].nbytes + 1);
    bool mask = strstr(in[i].name, "mask") != NULL;
    int64_t cols = in[i].ndim ? in[i].dims[in[i].ndim - 1] : 1;
    for (size_t k = 0; k < n; k++) {
      int64_t row = (int64_t)k / cols, col = (int64_t)k % cols;
      double v = mask ? (col < cols - row % 3 ? 1 : 0) : 1 + floor(urand() * 99);
      if (in[i].dtype == GPUC_DTYPE_F32) ((float *)x)[k] = mask ? (float)v : (float)(urand() * 2 - 1);
      else if (in[i].dtype == GPUC_DTYPE_I64) ((int64_t *)x)[k] = (int64_t)v;
      else if (in[i].dtype == GPUC_DTYPE_I32) ((int32_t *)x)[k] = (int32_t)v;
      else memset((char *)x + k * gpuc_dtype_itemsize(in[i].dtype), 0, gpuc_dtype_itemsize(in[i].dtype));
    }
  }
}

typedef struct Ctx {
  const char *model;
  gpuc_compile_options *ref_opts;
  const gpuc_plan *plan;
  gpuc_session *s;
  size_t nin, nout;
  gpuc_tensor in[MAXIO];
  double tol;
  CUstream st;
} Ctx;

/* The reference's output named like plan output k (NULL if none). */
static const gpuc_tensor *ref_out(const gpuc_tensor *ref, size_t nref, const char *name) {
  for (size_t i = 0; i < nref; i++) if (!strcmp(ref[i].name, name)) return &ref[i];
  return NULL;
}

/* One shape: host run, fetch, device run, time; the worst rel L2 (INFINITY on a failure). */
static double check_shape(Ctx *c, const char *spec, bool timed) {
  fill(c->in, c->nin);
  gpuc_tensor *ref = NULL;
  size_t nref = 0;
  double t0 = now_us();
  gpuc_status st = gpuc_reference_run(c->model, c->ref_opts, c->in, c->nin, &ref, &nref);
  CHECK(st == GPUC_OK, "%s: CPU reference (%.1f s)", spec, (now_us() - t0) * 1e-6);
  if (st) return INFINITY;
  size_t bucket = 0;
  gpuc_tensor resolved[MAXIO];
  CHECK(gpuc_plan_resolve(c->plan, c->in, c->nin, &bucket, resolved) == GPUC_OK, "%s: resolve", spec);
  int bnd;
  int64_t bdims[GPUC_MAX_DIMS];
  char a[128], b[128];
  gpuc_plan_bucket_dims(c->plan, bucket, GPUC_INPUT, 0, &bnd, bdims);
  printf("  %s runs in bucket %zu (%s %s)\n", spec, bucket, c->in[0].name, dims_str(bnd, bdims, a, sizeof a));
  double worst = 0;
  gpuc_session *s = c->s;
  gpuc_session_unbind_all(s);
  for (size_t i = 0; i < c->nin; i++)
    if (gpuc_session_bind_input(s, c->in[i].name, c->in[i].data, GPUC_MEMORY_HOST, c->in[i].dtype, c->in[i].ndim,
                                c->in[i].dims)) { CHECK(0, "%s: bind %s", spec, c->in[i].name); return INFINITY; }
  void *host[MAXIO] = {0};
  CUdeviceptr dout[MAXIO] = {0}, din[MAXIO] = {0};
  const gpuc_tensor *want[MAXIO];
  for (size_t k = 0; k < c->nout; k++) {
    gpuc_tensor t;
    gpuc_plan_info(c->plan, GPUC_OUTPUT, k, &t);
    int nd = 0;
    int64_t dims[GPUC_MAX_DIMS];
    want[k] = ref_out(ref, nref, t.name);
    st = gpuc_session_output_dims(s, t.name, &nd, dims);
    bool same = st == GPUC_OK && want[k] && nd == want[k]->ndim && !memcmp(dims, want[k]->dims, sizeof dims[0] * (size_t)nd) &&
                nd == resolved[k].ndim && !memcmp(dims, resolved[k].dims, sizeof dims[0] * (size_t)nd);
    CHECK(same, "%s: output %s is %s, as the reference's and gpuc_plan_resolve's", spec, t.name, dims_str(nd, dims, a, sizeof a));
    if (!same) return INFINITY;
    host[k] = calloc(1, want[k]->nbytes + 1);
    gpuc_session_bind_output(s, t.name, host[k], GPUC_MEMORY_HOST, t.dtype, nd, dims);
  }
  st = gpuc_session_run(s);
  CHECK(st == GPUC_OK, "%s: gpuc_session_run with host bindings", spec);
  for (size_t k = 0; k < c->nout && !st; k++) {
    double e = rel_l2(host[k], want[k]);
    worst = e > worst ? e : worst;
    CHECK(e <= c->tol, "%s: host output %s [%s] vs gpuc run --cpu: rel L2 %.3g (bound %g)", spec, want[k]->name,
          dims_str(want[k]->ndim, want[k]->dims, b, sizeof b), e, c->tol);
    void *f = malloc(want[k]->nbytes + 1);
    CHECK(gpuc_session_fetch_output(s, want[k]->name, f, want[k]->nbytes) == GPUC_OK &&
          !memcmp(f, host[k], want[k]->nbytes), "%s: fetch_output %s equals the bound copy", spec, want[k]->name);
    if (want[k]->nbytes)
      CHECK(gpuc_session_fetch_output(s, want[k]->name, f, want[k]->nbytes - 1) == GPUC_ERR_MISMATCH,
            "%s: fetch_output with the wrong size refused", spec);
    free(f);
  }
  /* device buffers of the program's, its stream */
  gpuc_session_unbind_all(s);
  for (size_t i = 0; i < c->nin; i++) {
    CU(cuMemAlloc(&din[i], c->in[i].nbytes + 1));
    CU(cuMemcpyHtoDAsync(din[i], c->in[i].data, c->in[i].nbytes, c->st));
    gpuc_session_bind_input(s, c->in[i].name, (void *)(uintptr_t)din[i], GPUC_MEMORY_DEVICE, c->in[i].dtype,
                            c->in[i].ndim, c->in[i].dims);
  }
  for (size_t k = 0; k < c->nout; k++) {
    CU(cuMemAlloc(&dout[k], want[k]->nbytes + 1));
    CU(cuMemsetD8Async(dout[k], 0xff, want[k]->nbytes, c->st)); /* NaN until written */
    gpuc_session_bind_output(s, want[k]->name, (void *)(uintptr_t)dout[k], GPUC_MEMORY_DEVICE, want[k]->dtype,
                             want[k]->ndim, want[k]->dims);
  }
  st = gpuc_session_run_async(s, (void *)c->st);
  CU(cuStreamSynchronize(c->st));
  CHECK(st == GPUC_OK && gpuc_session_poll_errors(s) == GPUC_OK, "%s: run_async with device buffers on the "
        "program's stream", spec);
  for (size_t k = 0; k < c->nout && !st; k++) {
    memset(host[k], 0, want[k]->nbytes);
    CU(cuMemcpyDtoH(host[k], dout[k], want[k]->nbytes));
    double e = rel_l2(host[k], want[k]);
    worst = e > worst ? e : worst;
    CHECK(e <= c->tol, "%s: device output %s vs gpuc run --cpu: rel L2 %.3g (bound %g)", spec, want[k]->name, e,
          c->tol);
  }
  if (timed && !st) { /* run_async + sync per call, against the bucket's graph alone */
    double ms[200];
    int n = 200;
    for (int i = 0; i < 10; i++) gpuc_session_run_async(s, (void *)c->st);
    CU(cuStreamSynchronize(c->st));
    for (int i = 0; i < n; i++) {
      double t = now_us();
      gpuc_session_run_async(s, (void *)c->st);
      CU(cuStreamSynchronize(c->st));
      ms[i] = (now_us() - t) * 1e-3;
    }
    qsort(ms, (size_t)n, sizeof ms[0], cmp_d);
    double g = 0;
    gpuc_status bst = gpuc_session_benchmark(s, 10, 200, &g, NULL);
    printf("TIME %s: bucket %zu, run_async+sync %.4f ms median (pads in, slices out), its graph alone %.4f ms%s\n",
           spec, bucket, ms[n / 2], g, bst ? " (benchmark failed)" : "");
  }
  gpuc_session_unbind_all(s);
  for (size_t i = 0; i < c->nin; i++) cuMemFree(din[i]);
  for (size_t k = 0; k < c->nout; k++) { cuMemFree(dout[k]); free(host[k]); }
  gpuc_tensors_free(ref, nref);
  return worst;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 3) {
    fprintf(stderr, "usage: capi_buckets_check MODEL OUT_DIR [--fp16] [--buckets LIST] --shape NAME=RANGE... "
            "--run NAME=DIMS[,...]... [--refuse NAME=DIMS[,...]]...\n");
    return 2;
  }
  const char *model = argv[1], *outdir = argv[2];
  const char *shapes[16], *buckets[4], *runs[16], *refuse[8];
  size_t nshapes = 0, nbuckets = 0, nruns = 0, nrefuse = 0;
  int fp16 = 0;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--fp16")) fp16 = 1;
    else if (!strcmp(argv[i], "--buckets") && i + 1 < argc && nbuckets < 4) buckets[nbuckets++] = argv[++i];
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc && nshapes < 16) shapes[nshapes++] = argv[++i];
    else if (!strcmp(argv[i], "--run") && i + 1 < argc && nruns < 16) runs[nruns++] = argv[++i];
    else if (!strcmp(argv[i], "--refuse") && i + 1 < argc && nrefuse < 8) refuse[nrefuse++] = argv[++i];
    else { fprintf(stderr, "capi_buckets_check: bad argument '%s'\n", argv[i]); return 2; }
  }
  if (!nruns) { fprintf(stderr, "capi_buckets_check: no --run\n"); return 2; }
  printf("capi_buckets_check %s%s (gpuc %s, C API %d)\n", model, fp16 ? " --fp16" : "", gpuc_version(),
         gpuc_api_version());
  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));

  gpuc_compile_options o;
  gpuc_options_init(&o);
  o.fp16 = fp16;
  o.shapes = shapes;
  o.num_shapes = nshapes;
  o.buckets = buckets;
  o.num_buckets = nbuckets;
  gpuc_plan *plan = NULL;
  double t0 = now_us();
  gpuc_status st = gpuc_compile_file(model, &o, &plan);
  CHECK(st == GPUC_OK, "compile with ranges for the present GPU: %zu buckets (%.1f s)",
        plan ? gpuc_plan_bucket_count(plan) : 0, (now_us() - t0) * 1e-6);
  if (st) { printf("%d passed, %d failed\n", passed, failed); return 1; }
  char path[4096];
  snprintf(path, sizeof path, "%s/capi_buckets.gpuc", outdir);
  gpuc_plan_save(plan, path);
  gpuc_compile_options ro;
  gpuc_options_init(&ro);
  ro.fp16 = fp16;
  Ctx c = {.model = model, .ref_opts = &ro, .plan = plan, .tol = fp16 ? 1e-2 : 1e-4};
  c.nin = gpuc_plan_count(plan, GPUC_INPUT);
  c.nout = gpuc_plan_count(plan, GPUC_OUTPUT);
  if (c.nin > MAXIO || c.nout > MAXIO) { printf("FAIL more than %d inputs or outputs\n", MAXIO); return 1; }
  for (size_t i = 0; i < c.nin; i++) gpuc_plan_info(plan, GPUC_INPUT, i, &c.in[i]);
  seed = (uint64_t)time(NULL);
  printf("seed %llu\n", (unsigned long long)seed);
  CHECK(gpuc_session_new(plan, 0, &c.s) == GPUC_OK, "session on device 0");
  if (!c.s) { printf("%d passed, %d failed\n", passed, failed); return 1; }
  CU(cuStreamCreate(&c.st, CU_STREAM_NON_BLOCKING));
  for (size_t r = 0; r < nruns; r++) {
    if (parse_run(plan, runs[r], c.in, c.nin)) { CHECK(0, "--run %s names every input once", runs[r]); continue; }
    check_shape(&c, runs[r], true);
  }
  /* refusals; the session stays usable */
  for (size_t r = 0; r < nrefuse; r++) {
    gpuc_tensor bad[MAXIO];
    memcpy(bad, c.in, sizeof bad);
    if (parse_run(plan, refuse[r], bad, c.nin)) { CHECK(0, "--refuse %s names every input once", refuse[r]); continue; }
    gpuc_session_unbind_all(c.s);
    void *buf[MAXIO] = {0};
    gpuc_status b = GPUC_OK;
    for (size_t i = 0; i < c.nin && !b; i++) { /* buffers of the refused shape's size: a bind taken is read */
      size_t n = gpuc_dtype_itemsize(bad[i].dtype);
      for (int d = 0; d < bad[i].ndim; d++) n *= (size_t)bad[i].dims[d];
      buf[i] = calloc(1, n + 1);
      b = gpuc_session_bind_input(c.s, bad[i].name, buf[i], GPUC_MEMORY_HOST, bad[i].dtype, bad[i].ndim, bad[i].dims);
    }
    if (!b) b = gpuc_session_run(c.s); /* inputs that disagree, or a size no bucket has: refused at the run */
    const char *m = gpuc_last_error();
    bool refused = b == GPUC_ERR_MISMATCH &&
                   (strstr(m, "outside the range") || strstr(m, "bucket sizes") || strstr(m, "but input"));
    printf("  %s: %s: %s\n", refuse[r], gpuc_status_name(b), m);
    for (size_t i = 0; i < c.nin; i++) free(buf[i]);
    CHECK(refused, "%s refused with GPUC_ERR_MISMATCH naming the range", refuse[r]);
    parse_run(plan, runs[0], c.in, c.nin);
    double e = check_shape(&c, runs[0], false);
    CHECK(e <= c.tol, "after the refusal the session runs %s right (rel L2 %.3g)", runs[0], e);
  }
  { /* an output bound at other dims than the inputs make: refused at the run, then usable */
    parse_run(plan, runs[0], c.in, c.nin);
    fill(c.in, c.nin);
    gpuc_session_unbind_all(c.s);
    for (size_t i = 0; i < c.nin; i++)
      gpuc_session_bind_input(c.s, c.in[i].name, c.in[i].data, GPUC_MEMORY_HOST, c.in[i].dtype, c.in[i].ndim,
                              c.in[i].dims);
    gpuc_tensor t;
    gpuc_plan_info(plan, GPUC_OUTPUT, 0, &t); /* the largest shape: not the run's unless the run is the top */
    void *y = malloc(t.nbytes + 1);
    int nd;
    int64_t dims[GPUC_MAX_DIMS];
    gpuc_session_output_dims(c.s, t.name, &nd, dims);
    bool top = !memcmp(dims, t.dims, sizeof dims[0] * (size_t)nd);
    if (!top) {
      CHECK(gpuc_session_bind_output(c.s, t.name, y, GPUC_MEMORY_HOST, t.dtype, t.ndim, t.dims) == GPUC_OK,
            "an output may be bound at any shape it can have");
      st = gpuc_session_run(c.s);
      CHECK(st == GPUC_ERR_MISMATCH && strstr(gpuc_last_error(), "gpuc_session_output_dims"),
            "a run with output %s bound at the top shape is refused (%s)", t.name, gpuc_last_error());
      double e = check_shape(&c, runs[0], false);
      CHECK(e <= c.tol, "then %s runs right (rel L2 %.3g)", runs[0], e);
    }
    free(y);
    void *p = NULL;
    CHECK(gpuc_session_buffer(c.s, GPUC_INPUT, c.in[0].name, &p) == GPUC_ERR_UNSUPPORTED,
          "gpuc_session_buffer on a bucket plan: GPUC_ERR_UNSUPPORTED");
  }
  gpuc_session_destroy(c.s);
  cuStreamDestroy(c.st);
  gpuc_plan_destroy(plan);
  for (size_t i = 0; i < c.nin; i++) free(c.in[i].data);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
