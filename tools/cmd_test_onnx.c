/* gpuc test-onnx DIR [--cpu]: run an ONNX backend test folder (model.onnx,
 * test_data_set_N/{input,output}_K.pb) and compare every output.
 * Floats: |got - want| <= atol + rtol * |want| (rtol 1e-3, atol 1e-5), NaN
 * must match NaN, infinities must match exactly. Integers and bools: exact.
 * Prints "SKIP <reason>" when the model uses something unsupported. */
#include "cli.h"
#include "ref.h"
#include "session.h"
#include <unistd.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Tolerances: the CPU reference and the fp32 GPU path are held to the ONNX
 * suite's own (rtol 1e-3, atol 1e-5); fp16 plans to what half allows. */
static double RTOL = 1e-3, ATOL = 1e-5;

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted list of test_data_set_* folders. */
static int list_sets(const char *dir, char ***out) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0, cap = 16;
  char **v = malloc(sizeof *v * (size_t)cap);
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "test_data_set_", 14)) continue;
    if (n == cap) v = realloc(v, sizeof *v * (size_t)(cap *= 2));
    v[n++] = strdup(de->d_name);
  }
  closedir(d);
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  *out = v;
  return n;
}

static bool file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* Compare one output; prints a line; returns true on match. */
static bool compare(const char *name, const Tensor *got, const Tensor *want) {
  char a[200], b[200];
  gpuc_shape_str(got, a, sizeof a);
  gpuc_shape_str(want, b, sizeof b);
  if (got->dt != want->dt) {
    printf("  %s: FAIL dtype %s, expected %s\n", name, gpuc_dtype_name(got->dt), gpuc_dtype_name(want->dt));
    return false;
  }
  if (got->rank != want->rank || memcmp(got->dims, want->dims, sizeof(int64_t) * (size_t)got->rank)) {
    printf("  %s: FAIL shape %s, expected %s\n", name, a, b);
    return false;
  }
  int64_t n = gpuc_numel(got), bad = 0, first_bad = -1;
  double max_err = 0;
  bool is_float = gpuc_dtype_is_float(got->dt);
  for (int64_t i = 0; i < n; i++) {
    bool ok;
    if (is_float) {
      double x = gpuc_get_f64(got, i), y = gpuc_get_f64(want, i);
      if (isnan(y) || isnan(x)) ok = isnan(x) && isnan(y);
      else if (isinf(y) || isinf(x)) ok = x == y;
      else {
        double err = fabs(x - y);
        if (err > max_err) max_err = err;
        ok = err <= ATOL + RTOL * fabs(y);
      }
    } else {
      int64_t x = gpuc_get_i64(got, i), y = gpuc_get_i64(want, i);
      if (llabs(x - y) > max_err) max_err = (double)llabs(x - y);
      ok = x == y;
    }
    if (!ok) { bad++; if (first_bad < 0) first_bad = i; }
  }
  if (bad) {
    printf("  %s: FAIL %lld of %lld elements differ (first at %lld: got %.9g, expected %.9g), max abs err %.3g\n",
           name, (long long)bad, (long long)n, (long long)first_bad, gpuc_get_f64(got, first_bad),
           gpuc_get_f64(want, first_bad), max_err);
    return false;
  }
  printf("  %s: ok %s %s, max abs err %.3g\n", name, a, gpuc_dtype_name(got->dt), max_err);
  return true;
}

typedef struct GpuTest { const char *model; int level; bool fp16; } GpuTest;

/* Small integer inputs (<= 64 values) and scalars are almost always
 * shapes, axes, pads or counts that a shape-static plan needs at compile
 * time (as TensorRT needs shape tensors): the GPU test compiles the plan
 * with them frozen to this data set's values. */
static bool freeze_for_gpu(const Tensor *t) {
  /* small integer tensors, and scalars of any type (Range's start/limit/
   * delta, OneHot's depth) */
  return (gpuc_dtype_is_int(t->dt) && gpuc_numel(t) <= 64) || t->rank == 0 ||
         (t->rank == 1 && t->dims[0] == 1 && !gpuc_dtype_is_int(t->dt) && t->dt != GPUC_DT_BOOL);
}

/* Resize/Upsample read scales, sizes and roi at compile time. */
static bool resize_param(const Graph *g, int v) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != GPUC_OP_RESIZE && n->op != GPUC_OP_UPSAMPLE) continue;
    for (int k = 1; k < n->nin; k++) if (n->in[k] == v) return true;
  }
  return false;
}

static bool frozen(const Graph *g, int k, const Tensor *t) {
  return freeze_for_gpu(t) || resize_param(g, g->inputs[k]);
}

/* Compile for this data set, run on the GPU; outs get host tensors. */
static int run_gpu(const GpuTest *gt, const Graph *g, Tensor **ins, Tensor **outs, GpucErr *e) {
  const char *names[GPUC_MAX_IO];
  const Tensor *vals[GPUC_MAX_IO];
  int nf = 0;
  for (int k = 0; k < g->ninputs && nf < GPUC_MAX_IO; k++)
    if (frozen(g, k, ins[k])) { names[nf] = g->values[g->inputs[k]].name; vals[nf++] = ins[k]; }
  char plan[64];
  snprintf(plan, sizeof plan, "/tmp/gpuc_test_%d.gpuc", (int)getpid());
  CompileRequest r = {.model = gt->model, .out = plan, .level = gt->level, .sm = 0, .flags = {.fp16 = gt->fp16},
                      .nfreeze = nf, .freeze_names = names, .freeze_values = vals};
  CompileStats st;
  GpucSession *s = NULL;
  int rc = -1;
  if (compile_model(&r, &st, e) || !(s = gpuc_session_create(plan, 0, e))) goto done;
  for (int k = 0; k < g->ninputs; k++)
    if (!frozen(g, k, ins[k]) && gpuc_session_set_input(s, g->values[g->inputs[k]].name, ins[k], e)) goto done;
  if (gpuc_session_replay(s, e)) goto done;
  for (int k = 0; k < g->noutputs; k++)
    if (!(outs[k] = gpuc_session_get_output(s, g->values[g->outputs[k]].name, e))) goto done;
  rc = 0;
done:
  gpuc_session_free(s);
  unlink(plan);
  return rc;
}

/* ONNX's test data stores bfloat16 tensors as uint16 bit patterns. */
static void bf16_from_u16(Tensor *t, GpucDType want) {
  if (t && t->dt == GPUC_DT_U16 && want == GPUC_DT_BF16) t->dt = GPUC_DT_BF16;
}

static int run_set(const Graph *g, const GpuTest *gpu, const char *setdir, GpucErr *e) {
  int ni = g->ninputs, no = g->noutputs, rc = EXIT_BAD_INPUT;
  Tensor **ins = calloc((size_t)ni + 1, sizeof *ins), **outs = calloc((size_t)no + 1, sizeof *outs),
         **want = calloc((size_t)no + 1, sizeof *want);
  char path[4096];
  bool all_ok = true;
  int npb = 0;
  for (;; npb++) {
    snprintf(path, sizeof path, "%s/input_%d.pb", setdir, npb);
    if (!file_exists(path)) break;
  }
  if (npb != ni) {
    gpuc_err_set(e, "%s: has %d input files, the model has %d inputs", setdir, npb, ni);
    goto done;
  }
  for (int k = 0; k < ni; k++) {
    snprintf(path, sizeof path, "%s/input_%d.pb", setdir, k);
    if (!(ins[k] = gpuc_onnx_load_tensor_pb(path, NULL, e))) goto done;
    bf16_from_u16(ins[k], g->values[g->inputs[k]].t.dt);
  }
  for (int k = 0; k < no; k++) {
    snprintf(path, sizeof path, "%s/output_%d.pb", setdir, k);
    if (!(want[k] = gpuc_onnx_load_tensor_pb(path, NULL, e))) goto done;
  }
  if (gpu ? run_gpu(gpu, g, ins, outs, e) : gpuc_ref_run(g, (const Tensor *const *)ins, outs, e)) goto done;
  for (int k = 0; k < no; k++) {
    bf16_from_u16(want[k], outs[k]->dt);
    all_ok &= compare(g->values[g->outputs[k]].name, outs[k], want[k]);
  }
  rc = all_ok ? EXIT_OK : EXIT_BAD_INPUT;
  if (!all_ok) gpuc_err_set(e, "%s: outputs differ from the expected values", setdir);
done:
  for (int k = 0; k < ni; k++) gpuc_tensor_free(ins[k]);
  for (int k = 0; k < no; k++) { gpuc_tensor_free(outs[k]); gpuc_tensor_free(want[k]); }
  free(ins); free(outs); free(want);
  return rc;
}

int cmd_test_onnx(int argc, char **argv) {
  const char *dir = NULL;
  bool gpu = false, fp16 = false;
  int level = 2;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--cpu")) { gpu = false; continue; }
    if (!strcmp(argv[i], "--gpu")) { gpu = true; continue; }
    if (!strcmp(argv[i], "--fp16")) { fp16 = true; continue; }
    if (!strcmp(argv[i], "-O0") || !strcmp(argv[i], "-O1") || !strcmp(argv[i], "-O2") || !strcmp(argv[i], "-O3")) {
      level = argv[i][2] - '0';
      continue;
    }
    if (argv[i][0] == '-') return usage_error("test-onnx: unknown flag '%s'", argv[i]);
    if (dir) return usage_error("test-onnx: more than one folder given");
    dir = argv[i];
  }
  if (!dir) return usage_error("test-onnx: no test folder given");
  char model[4096];
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(model, NULL, 0, &e);
  if (!g) {
    if (e.unsupported) printf("SKIP %s\n", e.msg);
    return report(&e);
  }
  if (fp16 && !gpu) { gpuc_graph_free(g); return usage_error("test-onnx: --fp16 needs --gpu"); }
  GpuTest gt = {.model = model, .level = level, .fp16 = fp16};
  if (gpu && fp16) { RTOL = 1e-2; ATOL = 1e-3; }
  char **sets;
  int nsets = list_sets(dir, &sets), rc = EXIT_OK;
  if (nsets <= 0) {
    gpuc_graph_free(g);
    gpuc_err_set(&e, "%s: no test_data_set_* folders", dir);
    return report(&e);
  }
  for (int s = 0; s < nsets; s++) {
    char setdir[4096];
    snprintf(setdir, sizeof setdir, "%s/%s", dir, sets[s]);
    printf("%s:\n", sets[s]);
    if (run_set(g, gpu ? &gt : NULL, setdir, &e)) {
      if (e.unsupported) printf("SKIP %s\n", e.msg);
      report(&e);
      rc = EXIT_BAD_INPUT;
    }
    free(sets[s]);
  }
  free(sets);
  gpuc_graph_free(g);
  if (rc == EXIT_OK) printf("PASS %s\n", dir);
  else printf("FAIL %s\n", dir);
  return rc;
}
