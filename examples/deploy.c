/* A deployment program on the public runtime C API alone
 * (gpuc/gpuc_runtime.h, libgpuc_rt.so): no compiler, no ONNX, no internal
 * struct. It loads a plan, lists its inputs and outputs, feeds every input
 * with ones, runs it on a stream-ordered session, and prints the first
 * values of every float32 output.
 *   cc deploy.c $(pkg-config --cflags --libs gpuc_rt)
 * usage: deploy PLAN.gpuc */
#include <gpuc/gpuc_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what) {
  fprintf(stderr, "deploy: %s: %s\n", what, gpuc_last_error());
  return 1;
}

static void print_tensor(const char *role, const gpuc_tensor *t) {
  printf("%s %s: %s [", role, t->name, gpuc_dtype_to_string(t->dtype));
  for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? "x" : "", (long long)t->dims[d]);
  printf("]\n");
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: deploy PLAN.gpuc\n"); return 2; }
  printf("gpuc %s, C API %d\n", gpuc_version(), gpuc_api_version());
  gpuc_plan *plan = NULL;
  gpuc_session *s = NULL;
  if (gpuc_plan_load(argv[1], &plan) != GPUC_OK) return fail("load");
  size_t nin = gpuc_plan_count(plan, GPUC_INPUT), nout = gpuc_plan_count(plan, GPUC_OUTPUT);
  for (size_t i = 0; i < nin + nout; i++) { /* what the plan takes and gives */
    gpuc_tensor t;
    gpuc_io io = i < nin ? GPUC_INPUT : GPUC_OUTPUT;
    if (gpuc_plan_info(plan, io, i < nin ? i : i - nin, &t) == GPUC_OK) print_tensor(i < nin ? "input" : "output", &t);
  }
  if (gpuc_session_new(plan, 0, &s) != GPUC_OK) { gpuc_plan_destroy(plan); return fail("session"); }
  void **bufs = calloc(nin + nout + 1, sizeof *bufs);
  int rc = bufs ? 0 : 1;
  for (size_t i = 0; i < nin && !rc; i++) { /* ones of each input's dtype, bound from host memory */
    gpuc_tensor t;
    if (gpuc_plan_info(plan, GPUC_INPUT, i, &t) != GPUC_OK) { rc = fail("query"); break; }
    size_t n = t.nbytes / (gpuc_dtype_itemsize(t.dtype) ? gpuc_dtype_itemsize(t.dtype) : 1);
    unsigned char *x = bufs[i] = calloc(t.nbytes + 1, 1);
    if (!x) { rc = 1; break; }
    for (size_t k = 0; k < n; k++) {
      if (t.dtype == GPUC_DTYPE_F32) { float one = 1; memcpy(x + 4 * k, &one, 4); }
      else if (t.dtype == GPUC_DTYPE_F16 || t.dtype == GPUC_DTYPE_BF16) { x[2 * k + 1] = t.dtype == GPUC_DTYPE_F16 ? 0x3c : 0x3f; x[2 * k] = t.dtype == GPUC_DTYPE_F16 ? 0 : 0x80; }
      else if (t.dtype == GPUC_DTYPE_I64) { long long one = 1; memcpy(x + 8 * k, &one, 8); }
      else if (t.dtype == GPUC_DTYPE_I32) { int one = 1; memcpy(x + 4 * k, &one, 4); }
      else x[k * gpuc_dtype_itemsize(t.dtype)] = 1;
    }
    if (gpuc_session_bind_input(s, t.name, x, GPUC_MEMORY_HOST, t.dtype, t.ndim, t.dims) != GPUC_OK) rc = fail("bind");
  }
  for (size_t i = 0; i < nout && !rc; i++) { /* outputs land in host buffers at each run */
    gpuc_tensor t;
    if (gpuc_plan_info(plan, GPUC_OUTPUT, i, &t) != GPUC_OK) { rc = fail("query"); break; }
    if (!(bufs[nin + i] = calloc(t.nbytes + 1, 1))) { rc = 1; break; }
    if (gpuc_session_bind_output(s, t.name, bufs[nin + i], GPUC_MEMORY_HOST, t.dtype, t.ndim, t.dims) != GPUC_OK)
      rc = fail("bind");
  }
  if (!rc && gpuc_session_run(s) != GPUC_OK) rc = fail("run");
  for (size_t i = 0; i < nout && !rc; i++) {
    gpuc_tensor t;
    gpuc_plan_info(plan, GPUC_OUTPUT, i, &t);
    printf("%s:", t.name);
    if (t.dtype == GPUC_DTYPE_F32)
      for (size_t k = 0; k < t.nbytes / 4 && k < 8; k++) printf(" %g", (double)((float *)bufs[nin + i])[k]);
    else printf(" (%zu bytes of %s)", t.nbytes, gpuc_dtype_to_string(t.dtype));
    printf("\n");
  }
  double median = 0, p90 = 0;
  if (!rc && gpuc_session_benchmark(s, 10, 100, &median, &p90) == GPUC_OK)
    printf("replay: median %.4f ms, p90 %.4f ms\n", median, p90);
  for (size_t i = 0; bufs && i < nin + nout; i++) free(bufs[i]);
  free(bufs);
  gpuc_session_destroy(s);
  gpuc_plan_destroy(plan);
  return rc;
}
