/* Device-side data errors (runtime/device_fault.h), checked without a GPU:
 * - tests/models/index_ops.onnx compiles for sm_80 and sm_90 with the
 *   error record in the module, a report call in every kernel whose
 *   indices are runtime data and none in the one whose indices are a
 *   constant; the plan round-trips;
 * - for each op, one index out of range: the message the runtime builds
 *   from the record the kernel writes (same step, value, position, bound,
 *   axis) is the CPU reference's message, word for word after the path;
 * - a constant index out of range fails the compile with that message;
 * - the module scan that decides whether the runtime looks the record up
 *   (gpuc_fault_in_ptx), and the host side of session creation's failure
 *   paths: the injection hook counts and fails the n-th point only, and
 *   out-of-memory errors carry the flag the C API maps to
 *   GPUC_ERR_OUT_OF_MEMORY (what the driver gives back after a failure is
 *   checked on a GPU: tests/gpu/leak_check.sh).
 * The kernels themselves run in tests/gpu/harden_check.sh.
 * usage: test_device_fault MODELS_DIR WORK_DIR */
#include "check.h"
#include "compile_model.h"
#include "device_fault.h"
#include "session_internal.h"
#include "ref.h"
#include <string.h>

/* The text from ": node '" on: what the CPU and GPU messages share. */
static const char *after_path(const char *msg) {
  const char *p = strstr(msg, ": node '");
  return p ? p : msg;
}

/* PTX of the kernel `name`: from its .entry to the next one. */
static char *kernel_ptx(const char *ptx, const char *name) {
  char head[160];
  snprintf(head, sizeof head, ".entry %s(", name);
  const char *a = strstr(ptx, head);
  if (!a) return NULL;
  const char *b = strstr(a + 1, ".entry ");
  size_t n = b ? (size_t)(b - a) : strlen(a);
  char *s = malloc(n + 1);
  memcpy(s, a, n);
  s[n] = 0;
  return s;
}

static void check_module(const Plan *p, int sm) {
  CHECK(p->ptx && strstr(p->ptx, ".b8 " GPUC_FAULT_SYMBOL "[48]"), "sm_%d: the module holds the 48-byte record", sm);
  static const char *const reporting[] = {"k0_Gather", "k1_GatherElements", "k2_GatherND", "k3_ScatterElements_2",
                                          "k4_ScatterND_2"};
  for (size_t i = 0; i < sizeof reporting / sizeof *reporting; i++) {
    char *k = kernel_ptx(p->ptx, reporting[i]);
    CHECK(k && strstr(k, "gpuc_fault_report"), "sm_%d: %s calls gpuc_fault_report", sm, reporting[i]);
    free(k);
  }
  char *k = kernel_ptx(p->ptx, "k5_Gather");
  CHECK(k && !strstr(k, "gpuc_fault_report"), "sm_%d: the constant-index Gather reports nothing", sm);
  free(k);
  CHECK(p->cubin && p->cubin_size > 0, "sm_%d: CUBIN built", sm);
}

/* The last step covering node `name` (a scatter's copy comes first). */
static long step_of(const Plan *p, const char *name) {
  long s = -1;
  for (uint32_t i = 0; i < p->nsteps; i++)
    if (!strcmp(gpuc_plan_str(p, p->steps[i].nodes), name)) s = (long)i;
  return s;
}

typedef struct BadIndex {
  int input;         /* graph input holding the index */
  int64_t pos, value, bound, axis;
  const char *node;
} BadIndex;

static void set_good_inputs(Tensor **in) {
  static const int64_t gi[] = {0, 3, -1}, gnd[] = {0, 1, 3, 5}, se[] = {0, 1, 2, 3, 0, 1}, snd[] = {0, 3};
  for (int64_t i = 0; i < gpuc_numel(in[0]); i++) gpuc_set_f64(in[0], i, 0.25 * (double)i - 2);
  for (int i = 0; i < 3; i++) gpuc_set_i64(in[1], i, gi[i]);
  for (int i = 0; i < 8; i++) gpuc_set_i64(in[2], i, (i * 5) % 6);
  for (int i = 0; i < 4; i++) gpuc_set_i64(in[3], i, gnd[i]);
  for (int i = 0; i < 6; i++) gpuc_set_i64(in[4], i, se[i]);
  for (int i = 0; i < 6; i++) gpuc_set_f64(in[5], i, 10 + i);
  for (int i = 0; i < 2; i++) gpuc_set_i64(in[6], i, snd[i]);
  for (int i = 0; i < 12; i++) gpuc_set_f64(in[7], i, -10 - i);
}

static void check_messages(const char *path, const Plan *p) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g && g->ninputs == 8, "load %s: %s", path, e.msg);
  if (!g || g->ninputs != 8) { gpuc_graph_free(g); return; }
  Tensor *in[8], *out[8] = {0};
  for (int k = 0; k < 8; k++) {
    const Tensor *d = &g->values[g->inputs[k]].t;
    in[k] = gpuc_tensor_new(d->dt, d->rank, d->dims, &e);
    GPUC_ASSERT(in[k]);
  }
  set_good_inputs(in);
  CHECK(gpuc_ref_run(g, (const Tensor *const *)in, out, &e) == 0, "good indices run: %s", e.msg);
  for (int k = 0; k < 8; k++) { gpuc_tensor_free(out[k]); out[k] = NULL; }
  static const BadIndex bad[] = {
    {1, 1, 7, 4, 0, "gather"},      {2, 5, -7, 6, 1, "gather_el"}, {3, 3, 6, 6, 1, "gather_nd"},
    {4, 2, 4, 4, 0, "scatter_el"},  {6, 1, -5, 4, 0, "scatter_nd"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const BadIndex *b = &bad[i];
    set_good_inputs(in);
    gpuc_set_i64(in[b->input], b->pos, b->value);
    GpucErr cpu = {0}, gpu = {0};
    int rc = gpuc_ref_run(g, (const Tensor *const *)in, out, &cpu);
    for (int k = 0; k < 8; k++) { gpuc_tensor_free(out[k]); out[k] = NULL; }
    CHECK(rc != 0 && strstr(cpu.msg, b->node), "%s: the reference refuses index %lld: %s", b->node,
          (long long)b->value, cpu.msg);
    long step = step_of(p, b->node);
    CHECK(step >= 0, "%s: has a step", b->node);
    /* the record the kernel writes (lower_gather.c's emit_index) */
    uint64_t rec[GPUC_FAULT_WORDS] = {(uint64_t)step + 1, GPUC_FAULT_INDEX, (uint64_t)b->value, (uint64_t)b->pos,
                                      (uint64_t)b->bound, (uint64_t)b->axis};
    CHECK(gpuc_fault_message(p, "model.gpuc", rec, &gpu) == -1, "%s: the record is an error", b->node);
    CHECK(!strcmp(after_path(cpu.msg), after_path(gpu.msg)), "%s: GPU message '%s' is the reference's '%s'",
          b->node, gpu.msg, cpu.msg);
    CHECK(!strncmp(gpu.msg, "model.gpuc: node '", 18), "%s: the message names the plan: %s", b->node, gpu.msg);
  }
  for (int k = 0; k < 8; k++) gpuc_tensor_free(in[k]);
  /* no error, and records a plan cannot have */
  uint64_t none[GPUC_FAULT_WORDS] = {0}, far[GPUC_FAULT_WORDS] = {100000, GPUC_FAULT_INDEX, 1, 2, 3, 4},
           odd[GPUC_FAULT_WORDS] = {1, 999, 0, 0, 0, 0};
  GpucErr x = {0};
  CHECK(gpuc_fault_message(p, "m", none, &x) == 0, "an empty record is no error");
  CHECK(gpuc_fault_message(p, "m", far, &x) == -1 && strstr(x.msg, "step 99999"), "a step past the plan: %s",
        x.msg);
  CHECK(gpuc_fault_message(p, "m", odd, &x) == -1 && strstr(x.msg, "unknown kind 999"), "an unknown kind: %s",
        x.msg);
  gpuc_graph_free(g);
}

/* gather_c's constant indices made out of range: the compile fails with
 * the reference's message for them. */
static void check_constant_index(const char *path) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  int gc = -1;
  for (int v = 0; v < g->nvalues; v++)
    if (!strcmp(g->values[v].name, "gc")) gc = v;
  CHECK(gc >= 0 && g->values[gc].is_const, "gc is a constant");
  if (gc >= 0) gpuc_set_i64(&g->values[gc].t, 1, 6);
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  CHECK(gpuc_passes_run(g, &po, &e) == 0, "passes: %s", e.msg);
  CodegenOptions co = {.sm = 90, .level = 2};
  Plan *p = NULL;
  int rc = gpuc_codegen(g, &co, &p, NULL, &e);
  CHECK(rc != 0 && strstr(e.msg, "node 'gather_c' (Gather): index 6 (element 1 of the indices) out of range [-6, 6) "
                                 "for axis 1"), "constant index 6 refused at compile time: %s", e.msg);
  gpuc_plan_free(p);
  gpuc_graph_free(g);
}

/* gpuc_fault_in_ptx: the runtime looks the record up only in a module
 * that declares it (a failing lookup is an error to compute-sanitizer).
 * Declarations as NVRTC writes them and as PTX allows, and near misses. */
static void check_ptx_scan(const Plan *with_record, const char *gn_convnet) {
  CHECK(gpuc_fault_in_ptx(with_record->ptx, with_record->ptx_size), "index_ops' PTX declares the record");
  Plan *none = compile_model(gn_convnet, NULL, 0, 90, false, NULL); /* no index or label read at run time */
  CHECK(none && none->ptx && !strstr(none->ptx, GPUC_FAULT_SYMBOL), "dynops_gn_convnet compiles without the record");
  if (none) CHECK(!gpuc_fault_in_ptx(none->ptx, none->ptx_size), "its PTX is not taken for one that has it");
  gpuc_plan_free(none);
  static const struct { const char *ptx; bool has; } cases[] = {
    {".version 8.8\n.target sm_90\n.global .align 8 .b8 gpuc_fault[48];\n", true},
    {"\t.visible .global .align 8 .u64 gpuc_fault[6];", true},
    {".extern .global .align 8 .b8 gpuc_fault[48];\n", true},
    {".global .u64 gpuc_fault;\n", true},
    {"// .global .align 8 .b8 gpuc_fault[48];\n", false},
    {".global .align 8 .b8 gpuc_faults[48];\n", false},
    {".global .align 8 .b8 my_gpuc_fault[48];\n", false},
    {".shared .align 8 .b8 gpuc_fault[48];\n", false},
    {".func gpuc_fault(\n.param .b64 gpuc_fault_param_0\n)\n", false},
    {"\tld.global.u64 %rd1, [gpuc_fault];\n", false},
    {"", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    CHECK(gpuc_fault_in_ptx(cases[i].ptx, strlen(cases[i].ptx) + 1) == cases[i].has, "PTX case %zu: %s", i,
          cases[i].has ? "declared" : "not a declaration");
  /* the size bounds the scan: a declaration past n bytes is not seen */
  const char *cut = ".version 8.8\n.global .align 8 .b8 gpuc_fault[48];\n";
  CHECK(!gpuc_fault_in_ptx(cut, 13) && gpuc_fault_in_ptx(cut, strlen(cut)), "the scan stops at n bytes");
  CHECK(!gpuc_fault_in_ptx(NULL, 0), "no PTX: no record");
}

/* The failure-injection hook and the out-of-memory flag, on the host. */
static void check_failure_hook(void) {
  GpucErr e = {0};
  gpuc_session_fail_at(0);
  bool any = false;
  for (int i = 0; i < 50; i++) any |= gpuc_session_inject("x", &e);
  CHECK(!any && gpuc_session_fail_points() == 0, "off: no point fails, none counted");
  gpuc_session_fail_at(3);
  bool got[5];
  for (int i = 0; i < 5; i++) got[i] = gpuc_session_inject(i == 2 ? "cuMemAlloc (arena)" : "other", &e);
  CHECK(!got[0] && !got[1] && got[2] && !got[3] && !got[4], "fail_at(3): the third point fails, no other");
  CHECK(strstr(e.msg, "injected failure at point 3 (cuMemAlloc (arena))") && e.out_of_memory,
        "its message names the point, and it is an out-of-memory error: %s", e.msg);
  CHECK(gpuc_session_fail_points() == 5, "points passed are counted: %d", gpuc_session_fail_points());
  gpuc_session_fail_at(0);
  /* the flag: set by an out-of-memory failure, kept by a prefix, cleared by the next error */
  GpucErr f = {0};
  gpuc_cu_fail(&f, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc", "x.c", 1);
  CHECK(f.out_of_memory, "CUDA_ERROR_OUT_OF_MEMORY sets out_of_memory: %s", f.msg);
  gpuc_err_prefix(&f, "bucket 1");
  CHECK(f.out_of_memory && !strncmp(f.msg, "bucket 1: ", 10), "a prefix keeps it");
  gpuc_cu_fail(&f, CUDA_ERROR_INVALID_VALUE, "cuMemcpyHtoD", "x.c", 2);
  CHECK(!f.out_of_memory, "another CUDA error clears it");
  gpuc_cublas_fail(&f, CUBLAS_STATUS_ALLOC_FAILED, "cublasLtCreate", "x.c", 3);
  CHECK(f.out_of_memory, "cuBLASLt's allocation failure sets it");
  gpuc_cudnn_fail(&f, CUDNN_STATUS_ALLOC_FAILED, "cudnnCreate", "x.c", 4);
  CHECK(f.out_of_memory, "cuDNN's allocation failure sets it");
  gpuc_err_set(&f, "plain");
  CHECK(!f.out_of_memory, "gpuc_err_set clears it");
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: test_device_fault MODELS_DIR WORK_DIR\n"); return 2; }
  check_failure_hook();
  char path[4096], a[4200], b[4200];
  snprintf(path, sizeof path, "%s/index_ops.onnx", argv[1]);
  for (int sm = 80; sm <= 90; sm += 10) {
    Plan *p = compile_model(path, NULL, 0, sm, false, NULL);
    if (!p) continue;
    check_module(p, sm);
    snprintf(a, sizeof a, "%s/index_ops_%d_a.gpuc", argv[2], sm);
    snprintf(b, sizeof b, "%s/index_ops_%d_b.gpuc", argv[2], sm);
    Plan *q = plan_round_trip(p, a, b, "index_ops");
    if (q) {
      check_module(q, sm); /* the record survives in the module read back */
      if (sm == 90) check_messages(path, q);
    }
    if (sm == 90) {
      char gn[4096];
      snprintf(gn, sizeof gn, "%s/dynops_gn_convnet.onnx", argv[1]);
      check_ptx_scan(p, gn);
    }
    gpuc_plan_free(q);
    gpuc_plan_free(p);
  }
  check_constant_index(path);
  return check_summary();
}
