/* Sessions under bad data and memory pressure, on a GPU (tests/gpu/harden_check.sh):
 *
 *   session_check reuse PLAN GOOD_DIR NAME=BAD.npy
 *     one session: a run on GOOD_DIR/<input>.npy, then with input NAME
 *     replaced by BAD.npy (must fail: the message is printed), then the
 *     good inputs again: must run and give the first run's outputs, byte
 *     for byte (the error record was reset, nothing was corrupted).
 *   session_check cycle PLAN N
 *     create, run and free a session N times; the device's free memory
 *     (cuMemGetInfo, the primary context held throughout) after one warm
 *     cycle, after N/2 and after N must agree within 2 MiB.
 *   session_check exhaust PLAN [MAX] [ROUNDS]
 *     create sessions and keep them until one fails (at most MAX, default
 *     1000): the failure must be a clean out-of-memory error (the "needs N
 *     bytes ... free" refusal, or the allocation's own when the driver's
 *     per-session overhead tips the last one over); then free them all,
 *     ROUNDS times (default 1). Before the rounds, to
 *     tell what the driver keeps from what a failure loses: 32 loads and
 *     unloads of the plan's module, 32 streams made and destroyed, and as
 *     many sessions as fit held and freed without any failing (HOLD), each
 *     with the free memory it did not give back. Verdicts: after HOLD and
 *     after every round the free memory is the same (0 bytes: neither a
 *     failed creation nor a round leaks), and what HOLD left, the driver's
 *     one-time growth for that many live sessions, is at most 16 MiB.
 *   session_check faults PLAN
 *     every point at which session creation acquires something, failed in
 *     turn (gpuc_session_fail_at, session_internal.h): each failure must be
 *     the injected one, and the free memory after it the same as before,
 *     to the byte; then through the C API: gpuc_session_new under an
 *     injected failure returns GPUC_ERR_OUT_OF_MEMORY with *out NULL, and
 *     the next gpuc_session_new succeeds; a session of the plan still runs.
 * Inputs not given are seeded random values (floats in [-1, 1), integers
 * 0 and 1, valid indices for any axis of 2 or more). Prints one line per check ending in ok or FAIL; exit 1 on a
 * failure, 2 on a usage or setup error. */
#include "cuda_api.h"
#include "npy.h"
#include "session_internal.h"
#include "buckets.h"
#include "gpuc/gpuc_runtime.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void verdict(bool ok, const char *fmt, const char *detail) {
  printf(fmt, detail);
  printf("  %s\n", ok ? "ok" : "FAIL");
  fflush(stdout);
  failures += !ok;
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Every input of s: dir/<name>.npy if dir is given and has it, else seeded
 * random values; input `bad_name` from bad_file instead. */
static int set_inputs(GpucSession *s, const char *dir, const char *bad_name, const char *bad_file, GpucErr *e) {
  const Plan *p = gpuc_session_plan(s);
  uint64_t seed = 1234;
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_INPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    const char *name = gpuc_plan_str(p, t->name);
    char path[4096];
    Tensor *h = NULL;
    if (bad_name && !strcmp(name, bad_name)) {
      h = gpuc_npy_load(bad_file, e);
    } else if (dir) {
      snprintf(path, sizeof path, "%s/%s.npy", dir, name);
      h = gpuc_npy_load(path, e);
    } else {
      h = gpuc_tensor_new((GpucDType)t->dt, t->rank, t->dims, e);
      for (int64_t k = 0; h && k < gpuc_numel(h); k++) {
        uint64_t r = rng_next(&seed);
        if (gpuc_dtype_is_float(h->dt)) gpuc_set_f64(h, k, (double)(r >> 11) / 9007199254740992.0 * 2 - 1);
        else gpuc_set_i64(h, k, (int64_t)(r % 2)); /* 0 or 1: an index valid for any axis of 2 or more */
      }
    }
    if (!h) return -1;
    int rc = gpuc_session_set_input(s, name, h, e);
    gpuc_tensor_free(h);
    if (rc) return -1;
  }
  return 0;
}

/* The outputs of the last run, concatenated (malloc'ed), *n bytes. */
static unsigned char *outputs(GpucSession *s, size_t *n, GpucErr *e) {
  const Plan *p = gpuc_session_plan(s);
  unsigned char *all = NULL;
  *n = 0;
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_OUTPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    Tensor *o = gpuc_session_get_output(s, gpuc_plan_str(p, t->name), e);
    if (!o) { free(all); return NULL; }
    size_t b = gpuc_tensor_bytes(o);
    unsigned char *grown = realloc(all, *n + b + 1);
    if (!grown) { gpuc_tensor_free(o); free(all); return NULL; }
    all = grown;
    memcpy(all + *n, o->data, b);
    *n += b;
    gpuc_tensor_free(o);
  }
  return all ? all : malloc(1);
}

static int reuse(const char *plan, const char *good, const char *bad) {
  char name[256];
  const char *eq = strchr(bad, '=');
  if (!eq || (size_t)(eq - bad) >= sizeof name) { fprintf(stderr, "session_check: want NAME=BAD.npy\n"); return 2; }
  memcpy(name, bad, (size_t)(eq - bad));
  name[eq - bad] = 0;
  GpucErr e = {0};
  GpucSession *s = gpuc_session_create(plan, 0, &e);
  if (!s) { fprintf(stderr, "session_check: %s\n", e.msg); return 2; }
  size_t na = 0, nb = 0;
  unsigned char *a = NULL, *b = NULL;
  int rc = set_inputs(s, good, NULL, NULL, &e) || gpuc_session_replay(s, &e) ? -1 : 0;
  if (!rc) a = outputs(s, &na, &e);
  verdict(rc == 0 && a, "reuse %s: good inputs run: %s", rc ? e.msg : plan);
  rc = set_inputs(s, good, name, eq + 1, &e);
  if (rc) { fprintf(stderr, "session_check: %s\n", e.msg); gpuc_session_free(s); free(a); return 2; }
  GpucErr bad_e = {0};
  rc = gpuc_session_replay(s, &bad_e);
  printf("message: %s\n", bad_e.msg);
  verdict(rc != 0 && strstr(bad_e.msg, "node '"), "reuse: %s out of range fails the run, naming the node", name);
  e = (GpucErr){0};
  rc = set_inputs(s, good, NULL, NULL, &e) || gpuc_session_replay(s, &e) ? -1 : 0;
  if (!rc) b = outputs(s, &nb, &e);
  verdict(rc == 0 && b, "reuse: the same session runs good inputs again: %s", rc ? e.msg : "ran");
  verdict(a && b && na == nb && !memcmp(a, b, na), "reuse: %s", "its outputs equal the first run's byte for byte");
  /* a second bad run fails again (the record was reset, not stuck at the first report) */
  set_inputs(s, good, name, eq + 1, &e);
  GpucErr bad2 = {0};
  rc = gpuc_session_replay(s, &bad2);
  verdict(rc != 0 && !strcmp(bad2.msg, bad_e.msg), "reuse: %s", "a second bad run fails with the same message");
  free(a);
  free(b);
  gpuc_session_free(s);
  return 0;
}

static int device_free(size_t *free_b, GpucErr *e) {
  size_t total = 0;
  CU_TRY(e, cu.cuCtxSynchronize()); /* nothing of the last frees still in flight */
  CU_TRY(e, cu.cuMemGetInfo(free_b, &total));
  return 0;
}

static int one_cycle(const char *plan, GpucErr *e) {
  GpucSession *s = gpuc_session_create(plan, 0, e);
  if (!s) return -1;
  int rc = set_inputs(s, NULL, NULL, NULL, e) || gpuc_session_replay(s, e) ? -1 : 0;
  gpuc_session_free(s);
  return rc;
}

/* The primary context held for the whole check, so the measurements see
 * one context whose sessions come and go. */
static int hold_context(CUcontext *ctx, CUdevice *dev, GpucErr *e) {
  if (gpuc_gpu_sm(e) < 0) return -1;
  CU_TRY(e, cu.cuDeviceGet(dev, 0));
  CU_TRY(e, cu.cuDevicePrimaryCtxRetain(ctx, *dev));
  CU_TRY(e, cu.cuCtxSetCurrent(*ctx));
  return 0;
}

#define SLACK (2u << 20)

static int cycle(const char *plan, int n) {
  GpucErr e = {0};
  CUcontext ctx;
  CUdevice dev;
  if (hold_context(&ctx, &dev, &e) || one_cycle(plan, &e)) { fprintf(stderr, "session_check: %s\n", e.msg); return 2; }
  size_t f0 = 0, f1 = 0, f2 = 0;
  if (device_free(&f0, &e)) { fprintf(stderr, "session_check: %s\n", e.msg); return 2; }
  int done = 0;
  for (; done < n; done++) {
    if (one_cycle(plan, &e)) break;
    if (done == n / 2 && device_free(&f1, &e)) break;
  }
  cu.cuCtxSetCurrent(ctx);
  device_free(&f2, &e);
  char line[512];
  snprintf(line, sizeof line, "%d of %d create/run/free cycles of %s; device free after the warm cycle %zu, "
           "after %d %zu, after %d %zu (lost %lld bytes)", done, n, plan, f0, n / 2 + 1, f1, done, f2,
           (long long)f0 - (long long)f2);
  verdict(done == n && f2 + SLACK >= f0 && f2 + SLACK >= f1, "cycle: %s", line);
  if (done < n) printf("error: %s\n", e.msg);
  cu.cuDevicePrimaryCtxRelease(dev);
  return 0;
}

/* Free memory lost by `what` (f0 before, measured now), printed. */
static long long lost_since(size_t f0, const char *what) {
  size_t f = 0;
  GpucErr e = {0};
  if (device_free(&f, &e)) { printf("%s: %s\n", what, e.msg); return -1; }
  printf("  %-58s free %zu, lost %lld bytes\n", what, f, (long long)f0 - (long long)f);
  fflush(stdout);
  return (long long)f0 - (long long)f;
}

/* The driver's part: n loads and unloads of the plan's module, n streams
 * made and destroyed (all held at once, then released). */
static void driver_probes(const char *plan, int n) {
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(plan, &e);
  if (!p) { printf("probe: %s\n", e.msg); return; }
  size_t f0 = 0;
  device_free(&f0, &e);
  CUmodule *m = calloc((size_t)n, sizeof *m);
  CUstream *st = calloc((size_t)n, sizeof *st);
  int sm = gpuc_gpu_sm(&e);
  for (int i = 0; m && i < n; i++)
    if (cu.cuModuleLoadDataEx(&m[i], sm == (int)p->hdr.sm && p->cubin_size ? p->cubin : (const void *)p->ptx, 0,
                              NULL, NULL) != CUDA_SUCCESS) m[i] = NULL;
  char what[96];
  snprintf(what, sizeof what, "probe: %d modules of the plan loaded", n);
  lost_since(f0, what);
  for (int i = 0; m && i < n; i++) if (m[i]) cu.cuModuleUnload(m[i]);
  snprintf(what, sizeof what, "probe: ... and unloaded");
  lost_since(f0, what);
  size_t f1 = 0;
  device_free(&f1, &e);
  for (int i = 0; st && i < n; i++)
    if (cu.cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) st[i] = NULL;
  snprintf(what, sizeof what, "probe: %d streams made", n);
  lost_since(f1, what);
  for (int i = 0; st && i < n; i++) if (st[i]) cu.cuStreamDestroy(st[i]);
  snprintf(what, sizeof what, "probe: ... and destroyed");
  lost_since(f1, what);
  free(m);
  free(st);
  gpuc_plan_free(p);
}

/* Sessions of plan made until one fails (at most max); all freed. The
 * count, and the last error in *last. */
static int fill_and_free(const char *plan, int max, GpucErr *last) {
  GpucSession **held = calloc((size_t)max + 1, sizeof *held);
  int n = 0;
  while (held && n < max) {
    GpucSession *s = gpuc_session_create(plan, 0, last);
    if (!s) break;
    held[n++] = s;
  }
  for (int i = 0; i < n; i++) gpuc_session_free(held[i]);
  free(held);
  return n;
}

#define DRIVER_GROWTH (16u << 20)

static int exhaust(const char *plan, int max, int rounds) {
  GpucErr e = {0};
  CUcontext ctx;
  CUdevice dev;
  if (hold_context(&ctx, &dev, &e) || one_cycle(plan, &e)) { fprintf(stderr, "session_check: %s\n", e.msg); return 2; }
  size_t f0 = 0;
  device_free(&f0, &e);
  printf("exhaust: device free after a warm cycle: %zu\n", f0);
  driver_probes(plan, 32);
  /* HOLD: as many sessions as fit with one to spare, none failing */
  Plan *p = gpuc_plan_read(plan, &e);
  uint64_t need = p ? gpuc_bucket_arena_bytes(p) + p->weights_size + p->meta.workspace_bytes : 0;
  gpuc_plan_free(p);
  size_t fnow = 0;
  device_free(&fnow, &e);
  int k = need ? (int)(fnow / need) - 1 : 0;
  if (k > max) k = max;
  GpucSession **held = calloc((size_t)(k > 0 ? k : 1), sizeof *held);
  int made = 0;
  GpucErr herr = {0};
  for (; held && made < k; made++)
    if (!(held[made] = gpuc_session_create(plan, 0, &herr))) break;
  char what[128];
  snprintf(what, sizeof what, "HOLD: %d sessions held", made);
  lost_since(f0, what);
  for (int i = 0; i < made; i++) gpuc_session_free(held[i]);
  free(held);
  cu.cuCtxSetCurrent(ctx);
  snprintf(what, sizeof what, "HOLD: ... and freed (none failed%s)", made == k ? "" : ": FAILED one");
  long long hold_lost = lost_since(f0, what);
  size_t f_hold = 0;
  device_free(&f_hold, &e);
  verdict(made == k && k > 0, "exhaust: %s", made == k ? "HOLD made every session it asked for" : herr.msg);
  bool same = true;
  for (int r = 1; r <= rounds; r++) {
    GpucErr last = {0};
    int n = fill_and_free(plan, max, &last);
    cu.cuCtxSetCurrent(ctx);
    printf("message: %s\n", last.msg);
    char line[512];
    snprintf(line, sizeof line, "round %d: %d sessions of %s held before creation failed", r, n, plan);
    /* the refusal before allocating (needs vs free), or the allocation's own out-of-memory error when the
     * driver's per-session overhead (not in the plan's bytes) tips the last one over */
    verdict(n > 0 && n < max && last.out_of_memory, "exhaust: %s with an out-of-memory error", line);
    size_t fr = 0;
    device_free(&fr, &e);
    snprintf(what, sizeof what, "round %d: all freed (vs the warm cycle)", r);
    lost_since(f0, what);
    printf("  round %d: free %zu vs after HOLD %zu: %lld bytes\n", r, fr, f_hold, (long long)f_hold - (long long)fr);
    same &= fr == f_hold;
  }
  char line[256];
  snprintf(line, sizeof line, "after HOLD and after each of %d rounds of exhaustion the same free memory (0 bytes lost "
           "by failed creations or by a round)", rounds);
  verdict(same, "exhaust: %s", line);
  snprintf(line, sizeof line, "the driver's one-time growth for %d live sessions (HOLD): %lld bytes, at most %u",
           made, hold_lost, DRIVER_GROWTH);
  verdict(hold_lost >= 0 && hold_lost <= (long long)DRIVER_GROWTH, "exhaust: %s", line);
  /* and the GPU still runs */
  e = (GpucErr){0};
  verdict(one_cycle(plan, &e) == 0, "exhaust: a session runs afterwards: %s", e.msg[0] ? e.msg : "yes");
  cu.cuDevicePrimaryCtxRelease(dev);
  return 0;
}

/* Every failure point of session creation in turn, then the C API. */
static int faults(const char *plan) {
  GpucErr e = {0};
  CUcontext ctx;
  CUdevice dev;
  if (hold_context(&ctx, &dev, &e) || one_cycle(plan, &e)) { fprintf(stderr, "session_check: %s\n", e.msg); return 2; }
  size_t f0 = 0;
  device_free(&f0, &e);
  int points = 0, bad = 0;
  for (int n = 1; n < 10000; n++) {
    gpuc_session_fail_at(n);
    GpucErr fe = {0};
    GpucSession *s = gpuc_session_create(plan, 0, &fe);
    if (s) { /* past the last point: it was made */
      points = n - 1;
      gpuc_session_fail_at(0);
      gpuc_session_free(s);
      break;
    }
    cu.cuCtxSetCurrent(ctx);
    size_t f = 0;
    device_free(&f, &e);
    char want[64];
    snprintf(want, sizeof want, "injected failure at point %d ", n);
    bool ok = strstr(fe.msg, want) && fe.out_of_memory && f == f0;
    bad += !ok;
    printf("  point %3d: free %zu, lost %lld bytes: %s  %s\n", n, f, (long long)f0 - (long long)f, fe.msg,
           ok ? "ok" : "FAIL");
    if (gpuc_session_fail_points() < n) { /* it failed before reaching point n: not the hook's failure */
      gpuc_session_fail_at(0);
      points = n - 1;
      bad++;
      break;
    }
  }
  gpuc_session_fail_at(0);
  char line[256];
  snprintf(line, sizeof line, "%d failure points of %s, each failed creation released all it had acquired "
           "(0 bytes lost)", points, plan);
  verdict(points > 0 && bad == 0, "faults: %s", line);
  /* the C API: a failed gpuc_session_new leaves *out NULL and a later one works */
  static char not_null;
  gpuc_plan *cp = NULL;
  gpuc_session *cs = (gpuc_session *)&not_null; /* the failing call must clear it */
  gpuc_status st = gpuc_plan_load(plan, &cp);
  if (st == GPUC_OK) {
    gpuc_session_fail_at(points > 2 ? points / 2 : 1);
    st = gpuc_session_new(cp, 0, &cs);
    gpuc_session_fail_at(0);
    snprintf(line, sizeof line, "status %s, *out %s: %s", gpuc_status_name(st), cs ? "set" : "NULL", gpuc_last_error());
    verdict(st == GPUC_ERR_OUT_OF_MEMORY && !cs, "faults: C API under an injected failure: %s", line);
    st = gpuc_session_new(cp, 0, &cs);
    verdict(st == GPUC_OK && cs, "faults: C API: the next gpuc_session_new succeeds: %s",
            st == GPUC_OK ? "yes" : gpuc_last_error());
    gpuc_session_destroy(cs);
    gpuc_plan_destroy(cp);
  } else {
    verdict(false, "faults: C API: %s", gpuc_last_error());
  }
  cu.cuCtxSetCurrent(ctx);
  size_t f1 = 0;
  device_free(&f1, &e);
  snprintf(line, sizeof line, "device free before %zu, after %zu (lost %lld bytes)", f0, f1, (long long)f0 - (long long)f1);
  verdict(f1 == f0, "faults: %s", line);
  e = (GpucErr){0};
  verdict(one_cycle(plan, &e) == 0, "faults: a session runs afterwards: %s", e.msg[0] ? e.msg : "yes");
  cu.cuDevicePrimaryCtxRelease(dev);
  return 0;
}

int main(int argc, char **argv) {
  int rc = 2;
  if (argc >= 5 && !strcmp(argv[1], "reuse")) rc = reuse(argv[2], argv[3], argv[4]);
  else if (argc >= 4 && !strcmp(argv[1], "cycle")) rc = cycle(argv[2], atoi(argv[3]) > 0 ? atoi(argv[3]) : 10);
  else if (argc >= 3 && !strcmp(argv[1], "exhaust"))
    rc = exhaust(argv[2], argc > 3 && atoi(argv[3]) > 0 ? atoi(argv[3]) : 1000, argc > 4 && atoi(argv[4]) > 0 ? atoi(argv[4]) : 1);
  else if (argc >= 3 && !strcmp(argv[1], "faults")) rc = faults(argv[2]);
  else fprintf(stderr, "usage: session_check reuse PLAN GOOD_DIR NAME=BAD.npy | cycle PLAN N | exhaust PLAN [MAX] [ROUNDS] | "
                       "faults PLAN\n");
  if (rc) return rc;
  return failures ? 1 : 0;
}
