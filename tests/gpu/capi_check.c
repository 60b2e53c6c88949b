/* The C API on a GPU, as a program that owns its CUDA memory and streams
 * uses it (public headers and libgpuc.so only; the CUDA driver API for its
 * own buffers):
 *   capi_check MODEL.onnx OUT_DIR [--fp16] [--iters N] [NAME=DIMS]...
 * 1. compile MODEL for the present GPU through gpuc_compile_file and save
 *    the plan to OUT_DIR/capi_check.gpuc (for `gpuc bench`);
 * 2. seeded random inputs, the CPU reference (gpuc_reference_run, same
 *    flags) as the expectation;
 * 3. device buffers from cuMemAlloc in the primary context, bound by name,
 *    run with gpuc_session_run_async on a stream of the program's, outputs
 *    written by the run into the program's device buffers; then host
 *    bindings with gpuc_session_run, gpuc_session_fetch_output, the same
 *    plan in two sessions on two threads and two streams at once; each
 *    checked against the reference (relative L2 <= 1e-5 in fp32, <= 1e-2
 *    with --fp16, as tests/gpu/bundled_vs_cpu.py);
 * 4. zero-copy (device buffers bound in place): a fresh session's host-bound
 *    run, then device-bound inputs and outputs must give the same bits,
 *    with gpuc_session_get_stats showing no byte copied and one capture;
 *    two buffer sets alternating (A, B, A, B, ...) stay bit-identical, the
 *    captures and cache hits reported (B's first run is copied: a new
 *    address), the last runs copying nothing; a buffer off 256 bytes is
 *    copied (its bytes counted) and still right; fetch_output after an
 *    in-place run reads the program's buffer;
 * 5. error paths of a live session (unknown name, wrong dtype/shape/size,
 *    unbound input, bad device);
 * 6. time: the graph alone (gpuc_session_benchmark, `gpuc bench`'s
 *    number) against run_async + cuStreamSynchronize per call, and the host
 *    time of run_async alone.
 * Prints PASS/FAIL lines, then "N passed, M failed" and a TIME line. */
#include <gpuc/gpuc_compiler.h>
#include <cuda.h>
#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <unistd.h>
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

/* A crash prints where it happened (built with exported symbols;
 * capi_check.sh prefers gdb's backtrace where gdb exists), then dies of
 * the same signal. Only async-signal-safe calls, and backtrace() was
 * called once at start so its unwinder is loaded. */
static void on_crash(int sig) {
  static const char msg[] = "FAIL crashed (signal); backtrace:\n";
  if (write(2, msg, sizeof msg - 1) < 0) {}
  void *frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void catch_crashes(void) {
  void *warm[1];
  backtrace(warm, 1);
  int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], on_crash);
}

static double rel_l2(const void *got, const void *want, gpuc_dtype dt, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double a = get(got, dt, i), b = get(want, dt, i);
    num += (a - b) * (a - b);
    den += b * b;
  }
  return sqrt(num) / (den > 1e-60 ? sqrt(den) : 1e-30);
}

typedef struct Model {
  const gpuc_plan *plan;
  size_t nin, nout;
  gpuc_tensor in[16], out[16];   /* host inputs; reference outputs */
  double tol;
} Model;

/* One run with device buffers on stream st; returns the worst rel L2.
 * Every fill goes on st too: the plain cuMemcpyHtoD/cuMemsetD8 run on the
 * legacy stream, which a non-blocking stream does not wait for. */
static double device_run(gpuc_session *s, const Model *m, CUstream st, const char *what) {
  CUdeviceptr din[16], dout[16];
  for (size_t i = 0; i < m->nin; i++) {
    CU(cuMemAlloc(&din[i], m->in[i].nbytes + 1));
    CU(cuMemcpyHtoDAsync(din[i], m->in[i].data, m->in[i].nbytes, st));
    gpuc_status r = gpuc_session_bind_input(s, m->in[i].name, (void *)(uintptr_t)din[i], GPUC_MEMORY_DEVICE,
                                            m->in[i].dtype, m->in[i].ndim, m->in[i].dims);
    if (r) { printf("FAIL %s: bind %s: %s\n", what, m->in[i].name, gpuc_last_error()); return INFINITY; }
  }
  for (size_t i = 0; i < m->nout; i++) {
    CU(cuMemAlloc(&dout[i], m->out[i].nbytes + 1));
    CU(cuMemsetD8Async(dout[i], 0xff, m->out[i].nbytes, st)); /* NaN until the run writes it */
    gpuc_tensor t;
    gpuc_plan_info(m->plan, GPUC_OUTPUT, i, &t);
    gpuc_status r = gpuc_session_bind_output(s, t.name, (void *)(uintptr_t)dout[i], GPUC_MEMORY_DEVICE, t.dtype, t.ndim,
                                             t.dims);
    if (r) { printf("FAIL %s: bind %s: %s\n", what, t.name, gpuc_last_error()); return INFINITY; }
  }
  if (gpuc_session_run_async(s, (void *)st)) { printf("FAIL %s: run_async: %s\n", what, gpuc_last_error()); return INFINITY; }
  CU(cuStreamSynchronize(st));
  if (gpuc_session_poll_errors(s)) { printf("FAIL %s: poll_errors: %s\n", what, gpuc_last_error()); return INFINITY; }
  double worst = 0;
  for (size_t i = 0; i < m->nout; i++) {
    void *h = malloc(m->out[i].nbytes + 1);
    CU(cuMemcpyDtoH(h, dout[i], m->out[i].nbytes));
    double e = rel_l2(h, m->out[i].data, m->out[i].dtype, m->out[i].nbytes / gpuc_dtype_itemsize(m->out[i].dtype));
    if (!(e <= worst)) worst = e;
    free(h);
    CU(cuMemFree(dout[i]));
  }
  for (size_t i = 0; i < m->nin; i++) CU(cuMemFree(din[i]));
  gpuc_session_unbind_all(s);
  return worst;
}

/* Device copies of the inputs and room for the outputs, `pad` bytes into
 * each allocation (0: cuMemAlloc's alignment), filled on st. */
typedef struct DevSet {
  CUdeviceptr base_in[16], base_out[16], in[16], out[16];
} DevSet;

static void devset_new(DevSet *d, const Model *m, size_t pad, CUstream st) {
  for (size_t i = 0; i < m->nin; i++) {
    CU(cuMemAlloc(&d->base_in[i], m->in[i].nbytes + pad + 1));
    d->in[i] = d->base_in[i] + pad;
    CU(cuMemcpyHtoDAsync(d->in[i], m->in[i].data, m->in[i].nbytes, st));
  }
  for (size_t i = 0; i < m->nout; i++) {
    CU(cuMemAlloc(&d->base_out[i], m->out[i].nbytes + pad + 1));
    d->out[i] = d->base_out[i] + pad;
  }
  CU(cuStreamSynchronize(st));
}

static void devset_free(DevSet *d, const Model *m) {
  for (size_t i = 0; i < m->nin; i++) CU(cuMemFree(d->base_in[i]));
  for (size_t i = 0; i < m->nout; i++) CU(cuMemFree(d->base_out[i]));
}

/* Bind d, fill its outputs with NaN bytes, run on st and wait; 0 on success. */
static int devset_run(gpuc_session *s, const Model *m, const DevSet *d, CUstream st) {
  for (size_t i = 0; i < m->nin; i++)
    if (gpuc_session_bind_input(s, m->in[i].name, (void *)(uintptr_t)d->in[i], GPUC_MEMORY_DEVICE, m->in[i].dtype,
                                m->in[i].ndim, m->in[i].dims))
      return -1;
  for (size_t i = 0; i < m->nout; i++) {
    CU(cuMemsetD8Async(d->out[i], 0xff, m->out[i].nbytes, st));
    if (gpuc_session_bind_output(s, m->out[i].name, (void *)(uintptr_t)d->out[i], GPUC_MEMORY_DEVICE,
                                 m->out[i].dtype, m->out[i].ndim, m->out[i].dims))
      return -1;
  }
  if (gpuc_session_run_async(s, (void *)st)) return -1;
  CU(cuStreamSynchronize(st));
  return gpuc_session_poll_errors(s) ? -1 : 0;
}

/* Whether the plan gives the same bits run after run (zero_copy_checks
 * finds out): then outputs are compared bit for bit, else by rel L2. */
static bool zc_exact = true;

/* How many of d's outputs differ from want's bytes (host copies). */
static int devset_differs(const Model *m, const DevSet *d, void *const *want) {
  int bad = 0;
  for (size_t i = 0; i < m->nout; i++) {
    void *h = malloc(m->out[i].nbytes + 1);
    CU(cuMemcpyDtoH(h, d->out[i], m->out[i].nbytes));
    if (zc_exact) bad += memcmp(h, want[i], m->out[i].nbytes) != 0;
    else bad += !(rel_l2(h, want[i], m->out[i].dtype, m->out[i].nbytes / gpuc_dtype_itemsize(m->out[i].dtype)) <= 1e-6);
    free(h);
  }
  return bad;
}

static gpuc_session_stats stats_of(gpuc_session *s) {
  gpuc_session_stats t;
  memset(&t, 0, sizeof t);
  if (gpuc_session_get_stats(s, &t, sizeof t)) printf("FAIL gpuc_session_get_stats: %s\n", gpuc_last_error());
  return t;
}

static unsigned long long copied(const gpuc_session_stats *t) {
  return (unsigned long long)(t->bytes_host_to_device + t->bytes_device_to_host + t->bytes_device_to_device);
}

static void print_stats(const char *what, const gpuc_session_stats *t) {
  printf("STATS %s: runs %llu, copied H2D %llu D2H %llu D2D %llu bytes (%llu copies), in place %llu bindings, "
         "captures %llu (%llu by cuGraphExecUpdate), graph cache hits %llu\n", what, (unsigned long long)t->runs,
         (unsigned long long)t->bytes_host_to_device, (unsigned long long)t->bytes_device_to_host,
         (unsigned long long)t->bytes_device_to_device, (unsigned long long)t->copies,
         (unsigned long long)t->in_place_bindings, (unsigned long long)t->graph_captures,
         (unsigned long long)t->graph_updates, (unsigned long long)t->graph_cache_hits);
}

/* Section 4: zero-copy on a session of its own. */
static void zero_copy_checks(const Model *m, CUstream st) {
  gpuc_session *s = NULL;
  CHECK(gpuc_session_new(m->plan, 0, &s) == GPUC_OK, "zero-copy: a fresh session");
  if (!s) return;
  size_t can = 0; /* entries the plan lets run in place */
  for (size_t i = 0; i < m->nin; i++) can += gpuc_plan_in_place(m->plan, GPUC_INPUT, i, NULL) == 1;
  for (size_t i = 0; i < m->nout; i++) {
    const char *why = "";
    int r = gpuc_plan_in_place(m->plan, GPUC_OUTPUT, i, &why);
    can += r == 1;
    if (r != 1) printf("note: output %s: %s\n", m->out[i].name, why);
  }
  /* the host-bound run: the reference bits */
  void *want[16];
  for (size_t i = 0; i < m->nin; i++)
    gpuc_session_bind_input(s, m->in[i].name, m->in[i].data, GPUC_MEMORY_HOST, m->in[i].dtype, m->in[i].ndim,
                            m->in[i].dims);
  for (size_t i = 0; i < m->nout; i++) {
    want[i] = calloc(1, m->out[i].nbytes + 1);
    gpuc_session_bind_output(s, m->out[i].name, want[i], GPUC_MEMORY_HOST, m->out[i].dtype, m->out[i].ndim,
                             m->out[i].dims);
  }
  CHECK(gpuc_session_run(s) == GPUC_OK, "zero-copy: host-bound run");
  gpuc_session_stats t = stats_of(s);
  CHECK(t.runs == 1 && t.bytes_device_to_device == 0 && t.in_place_bindings == 0 && t.graph_captures == 1,
        "host-bound run: %llu runs, no device binding, one capture (%llu)", (unsigned long long)t.runs,
        (unsigned long long)t.graph_captures);
  double e = 0;
  for (size_t i = 0; i < m->nout; i++) {
    double ei = rel_l2(want[i], m->out[i].data, m->out[i].dtype, m->out[i].nbytes / gpuc_dtype_itemsize(m->out[i].dtype));
    if (!(ei <= e)) e = ei;
  }
  CHECK(e <= m->tol, "zero-copy: the host-bound run against the reference: rel L2 %.3g", e);
  { /* bits are the test where the plan is deterministic (a library's split-K
     * atomics would not be): a second host-bound run says */
    void *again[16];
    for (size_t i = 0; i < m->nout; i++) {
      again[i] = calloc(1, m->out[i].nbytes + 1);
      gpuc_session_bind_output(s, m->out[i].name, again[i], GPUC_MEMORY_HOST, m->out[i].dtype, m->out[i].ndim,
                               m->out[i].dims);
    }
    gpuc_session_run(s);
    zc_exact = true;
    for (size_t i = 0; i < m->nout; i++) {
      zc_exact &= !memcmp(again[i], want[i], m->out[i].nbytes);
      free(again[i]);
    }
    printf("zero-copy: two host-bound runs give the same bits: %s\n", zc_exact ? "yes" : "no (compared by rel L2 <= 1e-6)");
  }
  gpuc_session_unbind_all(s);

  /* device inputs and outputs, in place */
  DevSet A, B, off;
  devset_new(&A, m, 0, st);
  devset_new(&B, m, 0, st);
  gpuc_session_reset_stats(s);
  CHECK(devset_run(s, m, &A, st) == 0, "zero-copy: device-bound run");
  t = stats_of(s);
  print_stats("first device-bound run", &t);
  CHECK(devset_differs(m, &A, want) == 0, "device-bound inputs and outputs give the host-bound run's %s",
        zc_exact ? "bits" : "outputs (rel L2 <= 1e-6)");
  CHECK(t.in_place_bindings == can && (can < m->nin + m->nout || copied(&t) == 0) && t.graph_captures == 1,
        "device-bound run: %llu of %zu bindings in place (the plan allows %zu), %llu bytes copied, %llu capture",
        (unsigned long long)t.in_place_bindings, m->nin + m->nout, can, copied(&t),
        (unsigned long long)t.graph_captures);
  for (size_t i = 0; i < m->nout; i++) { /* fetch_output reads where the run left it */
    void *f = malloc(m->out[i].nbytes + 1);
    CHECK(gpuc_session_fetch_output(s, m->out[i].name, f, m->out[i].nbytes) == GPUC_OK &&
          !memcmp(f, want[i], m->out[i].nbytes), "fetch_output %s after an in-place run", m->out[i].name);
    free(f);
  }
  /* two buffer sets alternating */
  gpuc_session_reset_stats(s);
  int bad = 0, runs = 12;
  unsigned long long tail_copied = 0;
  for (int k = 0; k < runs; k++) {
    gpuc_session_stats before = stats_of(s);
    const DevSet *d = k % 2 ? &B : &A;
    if (devset_run(s, m, d, st)) { bad++; printf("run %d: %s\n", k, gpuc_last_error()); continue; }
    bad += devset_differs(m, d, want);
    gpuc_session_stats after = stats_of(s);
    if (k >= runs - 4) tail_copied += copied(&after) - copied(&before);
  }
  t = stats_of(s);
  print_stats("A/B alternating, 12 runs", &t);
  CHECK(bad == 0, "A/B alternating: every run gives the host-bound run's bits (%d differ)", bad);
  CHECK(t.graph_captures <= 3 && (can < m->nin + m->nout || tail_copied == 0),
        "A/B alternating: %llu re-captures (B's first run copied, then in place), the last 4 runs copied %llu bytes",
        (unsigned long long)t.graph_captures, tail_copied);
  printf("RECAPTURES A/B alternating: %llu captures, %llu of them by cuGraphExecUpdate, %llu cache hits in %d runs\n",
         (unsigned long long)t.graph_captures, (unsigned long long)t.graph_updates,
         (unsigned long long)t.graph_cache_hits, runs);
  { /* what a new address set costs: a third set, copied once, then captured */
    DevSet C;
    devset_new(&C, m, 0, st);
    devset_run(s, m, &C, st);
    gpuc_session_stats before = stats_of(s);
    double t0 = now_us();
    int rc = devset_run(s, m, &C, st);
    double t1 = now_us();
    rc |= devset_run(s, m, &C, st);
    double t2 = now_us();
    gpuc_session_stats after = stats_of(s);
    CHECK(rc == 0 && devset_differs(m, &C, want) == 0 && after.graph_captures == before.graph_captures + 1,
          "a third buffer set: captured on its second run, right");
    printf("TIME a run that captures a new address set (%s) %.1f us; the next run (cached) %.1f us\n",
           after.graph_updates > before.graph_updates ? "cuGraphExecUpdate" : "instantiated", t1 - t0, t2 - t1);
    devset_free(&C, m);
  }
  /* buffers 16 bytes off cuMemAlloc's alignment: copied, still right */
  devset_new(&off, m, 16, st);
  gpuc_session_reset_stats(s);
  int r1 = devset_run(s, m, &off, st), r2 = devset_run(s, m, &off, st);
  t = stats_of(s);
  print_stats("buffers off 256 bytes, 2 runs", &t);
  size_t io_bytes = 0;
  for (size_t i = 0; i < m->nin; i++) io_bytes += m->in[i].nbytes;
  for (size_t i = 0; i < m->nout; i++) io_bytes += m->out[i].nbytes;
  CHECK(r1 == 0 && r2 == 0 && devset_differs(m, &off, want) == 0 && t.in_place_bindings == 0 &&
        t.bytes_device_to_device == 2 * io_bytes, "misaligned buffers are copied (%llu bytes of %zu) and right",
        (unsigned long long)t.bytes_device_to_device, 2 * io_bytes);
  gpuc_session_destroy(s); /* before the buffers: it waits for its work */
  devset_free(&A, m);
  devset_free(&B, m);
  devset_free(&off, m);
  for (size_t i = 0; i < m->nout; i++) free(want[i]);
}

typedef struct Worker {
  const Model *m;
  CUcontext ctx;
  double err;
  int runs;
} Worker;

/* A session of its own on a stream of its own, several runs. */
static void *worker(void *arg) {
  Worker *w = arg;
  CU(cuCtxSetCurrent(w->ctx));
  gpuc_session *s = NULL;
  w->err = INFINITY;
  if (gpuc_session_new(w->m->plan, 0, &s)) { printf("FAIL thread session: %s\n", gpuc_last_error()); return NULL; }
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  w->err = 0;
  for (int k = 0; k < w->runs; k++) {
    double e = device_run(s, w->m, st, "thread");
    if (!(e <= w->err)) w->err = e;
  }
  /* the stream goes first on purpose: the session must not touch the
   * stream of its last run after the caller destroyed it */
  CU(cuStreamDestroy(st));
  gpuc_session_destroy(s);
  return NULL;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* to a log file too: every line out before a crash */
  if (!getenv("CAPI_CHECK_NO_HANDLER")) catch_crashes(); /* capi_check.sh sets it under gdb */
  if (argc < 3) { fprintf(stderr, "usage: capi_check MODEL.onnx OUT_DIR [--fp16] [--iters N] [NAME=DIMS]...\n"); return 2; }
  const char *model = argv[1], *outdir = argv[2];
  const char *shapes[16];
  size_t nshapes = 0;
  int fp16 = 0, iters = 1000;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--fp16")) fp16 = 1;
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (nshapes < 16) shapes[nshapes++] = argv[i];
  }
  if (iters < 10) iters = 10;
  printf("capi_check %s%s (gpuc %s, C API %d)\n", model, fp16 ? " --fp16" : "", gpuc_version(), gpuc_api_version());
  /* the program's own CUDA: the primary context, as the CUDA runtime (PyTorch) uses */
  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  int sm = 0;
  CHECK(gpuc_device_count() >= 1 && gpuc_device_sm(0, &sm) == GPUC_OK && sm >= 70, "device 0 is sm_%d", sm);

  gpuc_compile_options o;
  gpuc_options_init(&o);
  o.fp16 = fp16;
  o.shapes = shapes;
  o.num_shapes = nshapes;
  gpuc_plan *plan = NULL;
  double t0 = now_us();
  gpuc_status st = gpuc_compile_file(model, &o, &plan); /* arch NULL: this GPU */
  CHECK(st == GPUC_OK, "compile for the present GPU (%.1f s)", (now_us() - t0) * 1e-6);
  if (st) { printf("%d passed, %d failed\n", passed, failed); return 1; }
  CHECK(gpuc_plan_sm(plan) == sm, "plan for sm_%d", gpuc_plan_sm(plan));
  char path[4096];
  snprintf(path, sizeof path, "%s/capi_check.gpuc", outdir);
  CHECK(gpuc_plan_save(plan, path) == GPUC_OK, "saved %s", path);

  Model m = {.plan = plan, .tol = fp16 ? 1e-2 : 1e-5};
  m.nin = gpuc_plan_count(plan, GPUC_INPUT);
  m.nout = gpuc_plan_count(plan, GPUC_OUTPUT);
  if (m.nin > 16 || m.nout > 16) { printf("FAIL more than 16 inputs or outputs\n"); return 1; }
  uint64_t seed = (uint64_t)time(NULL); /* fresh inputs every run */
  printf("seed %llu\n", (unsigned long long)seed);
  for (size_t i = 0; i < m.nin; i++) {
    gpuc_plan_info(plan, GPUC_INPUT, i, &m.in[i]);
    void *d = m.in[i].data = malloc(m.in[i].nbytes + 1);
    size_t n = m.in[i].nbytes / gpuc_dtype_itemsize(m.in[i].dtype);
    for (size_t k = 0; k < n; k++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(seed >> 11) / 9007199254740992.0;
      if (m.in[i].dtype == GPUC_DTYPE_F32) ((float *)d)[k] = (float)(u * 2 - 1);
      else if (m.in[i].dtype == GPUC_DTYPE_I64) ((int64_t *)d)[k] = (int64_t)(u * 10);
      else if (m.in[i].dtype == GPUC_DTYPE_I32) ((int32_t *)d)[k] = (int32_t)(u * 10);
      else ((uint8_t *)d)[k * gpuc_dtype_itemsize(m.in[i].dtype)] = 0; /* zeros of the other dtypes */
    }
  }
  gpuc_tensor *ref = NULL;
  size_t nref = 0;
  t0 = now_us();
  st = gpuc_reference_run(model, &o, m.in, m.nin, &ref, &nref);
  CHECK(st == GPUC_OK && nref == m.nout, "CPU reference (%.1f s)", (now_us() - t0) * 1e-6);
  if (st) { printf("%d passed, %d failed\n", passed, failed); return 1; }
  for (size_t i = 0; i < m.nout; i++) { /* the plan's outputs, in its order, with the reference's data */
    gpuc_tensor t;
    gpuc_plan_info(plan, GPUC_OUTPUT, i, &t);
    size_t k = 0;
    while (k < nref && strcmp(ref[k].name, t.name)) k++;
    CHECK(k < nref && ref[k].dtype == t.dtype && ref[k].nbytes == t.nbytes, "reference output %s is the plan's "
          "(%s, %zu bytes)", t.name, gpuc_dtype_to_string(t.dtype), t.nbytes);
    if (k == nref || ref[k].nbytes != t.nbytes) { printf("%d passed, %d failed\n", passed, failed); return 1; }
    m.out[i] = ref[k];
  }

  /* device buffers, the program's stream */
  gpuc_session *s = NULL;
  CHECK(gpuc_session_new(plan, 0, &s) == GPUC_OK, "session on device 0");
  if (!s) { printf("%d passed, %d failed\n", passed, failed); return 1; }
  char name[128];
  gpuc_session_gpu(s, name, sizeof name, NULL);
  printf("GPU: %s\n", name);
  CUstream ust;
  CU(cuStreamCreate(&ust, CU_STREAM_NON_BLOCKING));
  double e = device_run(s, &m, ust, "device");
  CHECK(e <= m.tol, "device buffers on the program's stream: rel L2 %.3g (tolerance %g)", e, m.tol);
  e = device_run(s, &m, NULL, "legacy stream");
  CHECK(e <= m.tol, "device buffers on the legacy default stream (NULL): rel L2 %.3g", e);

  /* host bindings, synchronous run, fetch */
  void *hout[16];
  for (size_t i = 0; i < m.nin; i++)
    CHECK(gpuc_session_bind_input(s, m.in[i].name, m.in[i].data, GPUC_MEMORY_HOST, m.in[i].dtype, m.in[i].ndim,
                                  m.in[i].dims) == GPUC_OK, "bind host input %s", m.in[i].name);
  for (size_t i = 0; i < m.nout; i++) {
    hout[i] = calloc(1, m.out[i].nbytes + 1);
    CHECK(gpuc_session_bind_output(s, m.out[i].name, hout[i], GPUC_MEMORY_HOST, m.out[i].dtype, m.out[i].ndim,
                                   m.out[i].dims) == GPUC_OK, "bind host output %s", m.out[i].name);
  }
  CHECK(gpuc_session_run(s) == GPUC_OK, "gpuc_session_run");
  for (size_t i = 0; i < m.nout; i++) {
    size_t n = m.out[i].nbytes / gpuc_dtype_itemsize(m.out[i].dtype);
    e = rel_l2(hout[i], m.out[i].data, m.out[i].dtype, n);
    CHECK(e <= m.tol, "host-bound output %s: rel L2 %.3g", m.out[i].name, e);
    void *f = malloc(m.out[i].nbytes + 1);
    CHECK(gpuc_session_fetch_output(s, m.out[i].name, f, m.out[i].nbytes) == GPUC_OK &&
          !memcmp(f, hout[i], m.out[i].nbytes), "fetch_output %s equals the bound copy", m.out[i].name);
    free(f);
  }
  { /* a run on a stream the program destroys at once (legal: its work
     * completes): fetch_output waits for the run, never the dead stream */
    CUstream tmp;
    CU(cuStreamCreate(&tmp, CU_STREAM_NON_BLOCKING));
    gpuc_status r = gpuc_session_run_async(s, (void *)tmp);
    CU(cuStreamDestroy(tmp));
    CHECK(r == GPUC_OK, "run_async on a stream destroyed right after");
    for (size_t i = 0; i < m.nout; i++) {
      void *f = malloc(m.out[i].nbytes + 1);
      gpuc_status fr = gpuc_session_fetch_output(s, m.out[i].name, f, m.out[i].nbytes);
      e = fr ? INFINITY : rel_l2(f, m.out[i].data, m.out[i].dtype, m.out[i].nbytes / gpuc_dtype_itemsize(m.out[i].dtype));
      CHECK(fr == GPUC_OK && e <= m.tol, "fetch_output %s after its stream was destroyed: rel L2 %.3g", m.out[i].name, e);
      free(f);
    }
  }
  zero_copy_checks(&m, ust);
  /* error paths of a live session */
  const gpuc_tensor *x = &m.in[0];
  CHECK(gpuc_session_bind_input(s, "no such input", x->data, GPUC_MEMORY_HOST, x->dtype, x->ndim, x->dims) ==
            GPUC_ERR_NOT_FOUND && strstr(gpuc_last_error(), "no such input"), "unknown input name: %s", gpuc_last_error());
  gpuc_dtype other = x->dtype == GPUC_DTYPE_F64 ? GPUC_DTYPE_F32 : GPUC_DTYPE_F64;
  CHECK(gpuc_session_bind_input(s, x->name, x->data, GPUC_MEMORY_HOST, other, x->ndim, x->dims) == GPUC_ERR_MISMATCH,
        "wrong dtype: %s", gpuc_last_error());
  int64_t dims[GPUC_MAX_DIMS];
  memcpy(dims, x->dims, sizeof dims);
  dims[0] += 1;
  CHECK(gpuc_session_bind_input(s, x->name, x->data, GPUC_MEMORY_HOST, x->dtype, x->ndim, dims) == GPUC_ERR_MISMATCH,
        "wrong shape: %s", gpuc_last_error());
  CHECK(gpuc_session_bind_input(s, x->name, x->data, GPUC_MEMORY_HOST, x->dtype, x->ndim + 1, x->dims) ==
            GPUC_ERR_MISMATCH, "wrong rank: %s", gpuc_last_error());
  CHECK(gpuc_session_bind_input(s, x->name, x->data, (gpuc_memory)7, x->dtype, x->ndim, x->dims) ==
            GPUC_ERR_INVALID_ARGUMENT, "bad memory kind: %s", gpuc_last_error());
  CHECK(gpuc_session_fetch_output(s, m.out[0].name, hout[0], m.out[0].nbytes - 1) == GPUC_ERR_MISMATCH,
        "fetch into a short buffer: %s", gpuc_last_error());
  gpuc_session_unbind_all(s);
  CHECK(gpuc_session_run(s) == GPUC_ERR_STATE && strstr(gpuc_last_error(), x->name), "run with an unbound input: %s",
        gpuc_last_error());
  gpuc_session *s99 = NULL;
  CHECK(gpuc_session_new(plan, 99, &s99) == GPUC_ERR_CUDA && !s99, "device 99: %s", gpuc_last_error());

  /* two more sessions of the plan, two threads, two streams, at once */
  Worker w[2] = {{.m = &m, .ctx = ctx, .runs = 20}, {.m = &m, .ctx = ctx, .runs = 20}};
  pthread_t th[2];
  for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, worker, &w[k]);
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  CHECK(w[0].err <= m.tol && w[1].err <= m.tol, "two sessions on two threads, 20 runs each: rel L2 %.3g, %.3g",
        w[0].err, w[1].err);

  /* time: the graph alone vs a call from the program */
  double med = 0, p90 = 0;
  CHECK(gpuc_session_benchmark(s, 50, iters, &med, &p90) == GPUC_OK, "benchmark: median %.4f ms, p90 %.4f ms", med, p90);
  CUdeviceptr din[16], dout[16];
  for (size_t i = 0; i < m.nin; i++) {
    CU(cuMemAlloc(&din[i], m.in[i].nbytes + 1));
    CU(cuMemcpyHtoDAsync(din[i], m.in[i].data, m.in[i].nbytes, ust));
    gpuc_session_bind_input(s, m.in[i].name, (void *)(uintptr_t)din[i], GPUC_MEMORY_DEVICE, m.in[i].dtype,
                            m.in[i].ndim, m.in[i].dims);
  }
  for (size_t i = 0; i < m.nout; i++) {
    CU(cuMemAlloc(&dout[i], m.out[i].nbytes + 1));
    gpuc_session_bind_output(s, m.out[i].name, (void *)(uintptr_t)dout[i], GPUC_MEMORY_DEVICE, m.out[i].dtype,
                             m.out[i].ndim, m.out[i].dims);
  }
  double *call = malloc(sizeof(double) * (size_t)iters), *enq = malloc(sizeof(double) * (size_t)iters);
  for (int k = 0; k < 50; k++) { gpuc_session_run_async(s, (void *)ust); CU(cuStreamSynchronize(ust)); }
  int bad = 0;
  for (int k = 0; k < iters; k++) {
    double a = now_us();
    bad |= gpuc_session_run_async(s, (void *)ust) != GPUC_OK;
    double b = now_us();
    CU(cuStreamSynchronize(ust));
    double c = now_us();
    enq[k] = b - a;
    call[k] = c - a;
  }
  CHECK(!bad, "%d timed run_async calls", iters);
  /* the graph alone, the same way (launch + sync, wall clock), for the copies' share */
  double *bare = malloc(sizeof(double) * (size_t)iters);
  gpuc_session_unbind_all(s);
  for (size_t i = 0; i < m.nin; i++) { /* inputs written into the session's buffers: no copies at run time */
    void *buf;
    gpuc_session_buffer(s, GPUC_INPUT, m.in[i].name, &buf);
    CU(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)buf, din[i], m.in[i].nbytes, ust));
    gpuc_session_bind_input(s, m.in[i].name, buf, GPUC_MEMORY_DEVICE, m.in[i].dtype, m.in[i].ndim, m.in[i].dims);
  }
  for (int k = 0; k < iters; k++) {
    double a = now_us();
    gpuc_session_run_async(s, (void *)ust);
    CU(cuStreamSynchronize(ust));
    bare[k] = now_us() - a;
  }
  {
    gpuc_session_stats t = stats_of(s);
    print_stats("the session after the timed runs", &t);
  }
  qsort(call, (size_t)iters, sizeof *call, cmp_d);
  qsort(enq, (size_t)iters, sizeof *enq, cmp_d);
  qsort(bare, (size_t)iters, sizeof *bare, cmp_d);
  printf("TIME graph (gpuc_session_benchmark = gpuc bench) median %.2f us; run_async+sync with device bindings median "
         "%.2f us (p90 %.2f); the same with inputs in the session's buffers %.2f us; run_async host time median "
         "%.2f us; overhead over the graph %.2f us\n", med * 1e3, call[iters / 2], call[iters * 9 / 10],
         bare[iters / 2], enq[iters / 2], call[iters / 2] - med * 1e3);
  for (size_t i = 0; i < m.nin; i++) CU(cuMemFree(din[i]));
  for (size_t i = 0; i < m.nout; i++) { CU(cuMemFree(dout[i])); free(hout[i]); }
  free(call);
  free(enq);
  free(bare);
  CU(cuStreamDestroy(ust)); /* before the session, as the worker does */
  gpuc_session_destroy(s);
  for (size_t i = 0; i < m.nin; i++) free(m.in[i].data);
  gpuc_tensors_free(ref, nref);
  gpuc_plan_destroy(plan);
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
