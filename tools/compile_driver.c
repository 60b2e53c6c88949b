/* The compile driver shared by the gpuc command (tools/cmd_compile.c,
 * cmd_eval.c, cmd_test_onnx.c, cmd_run.c's --cpu passes) and the C API
 * (tools/api_compiler.c): request -> import -> passes -> code -> plan, and
 * the parsers of the values of --arch, --mem-limit and --shape. Messages
 * go to GpucErr; nothing here prints a usage error. */
#include "cli.h"
#include "codegen.h"
#include "int8_gemm.h"
#include "passes.h"
#include "session.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int parse_arch(const char *a, int *sm) {
  if (!strcmp(a, "native")) { *sm = 0; return 0; }
  static const int known[] = {80, 86, 87, 89, 90, 100, 120};
  if (strncmp(a, "sm_", 3)) return -1;
  int v = atoi(a + 3);
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (known[i] == v) { *sm = v; return 0; }
  return -1;
}

int parse_size(const char *s, int64_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return -1;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (int64_t)(v * mul);
  return 0;
}

int parse_shape_bind(char *arg, GpucShapeBind *b, GpucErr *e) {
  char *eq = strrchr(arg, '=');
  if (!eq || eq == arg) return gpuc_err_set(e, "--shape wants NAME=DIMS, got '%s'", arg);
  *eq = 0; /* the name is the string itself, cut at '=' */
  b->name = arg;
  b->rank = 0;
  const char *p = eq + 1;
  if (!*p) return gpuc_err_set(e, "--shape %s: no dims", arg);
  if (strstr(p, ".."))
    return gpuc_err_set(e, "--shape %s=%s: a range (LO..HI) is for compiling a plan: gpuc MODEL.onnx --shape %s=%s", arg,
                        p, arg, p);
  while (*p) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0) return gpuc_err_set(e, "--shape %s=%s: bad dim", arg, eq + 1);
    if (b->rank == GPUC_MAX_RANK) return gpuc_err_set(e, "--shape %s: rank over %d", arg, GPUC_MAX_RANK);
    b->dims[b->rank++] = v;
    p = end;
    if (*p == 'x' || *p == 'X' || *p == ',') p++;
    else if (*p) return gpuc_err_set(e, "--shape %s=%s: bad dim separator", arg, eq + 1);
  }
  return 0;
}

int reference_passes(Graph *g, const PassFlags *f, FILE *report_to, GpucErr *e) {
  if (!pass_flags_any(f)) return 0;
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  pass_flags_apply(f, &po);
  po.prune_report = report_to;
  if (gpuc_passes_run(g, &po, e)) return -1;
  if (report_to && po.int8) gpuc_int8_report(g, &po, report_to);
  if (report_to && po.fp8) gpuc_fp8_report(g, &po, report_to);
  return 0;
}

int compile_model(const CompileRequest *r, CompileStats *st, GpucErr *e) {
  double t0 = now_s();
  Graph *g = gpuc_onnx_load(r->model, r->binds, r->nbinds, e);
  if (!g) return -1;
  char note[1024];
  if (gpuc_graph_default_dims(g, note, sizeof note) > 0) { /* no --shape for them: 1, as trtexec */
    if (!r->quiet_defaults) fprintf(stderr, "gpuc: note: %s: %s\n", r->model, note);
    if (gpuc_graph_infer(g, e)) { gpuc_graph_free(g); return -1; }
  }
  int rc = compile_graph(g, r, st, e);
  st->compile_seconds = now_s() - t0; /* the import counts */
  gpuc_graph_free(g);
  return rc;
}

int compile_graph_plan(Graph *g, const CompileRequest *r, CompileStats *st, Plan **out, GpucErr *e) {
  *out = NULL;
  double t0 = now_s();
  int sm = r->sm;
  if (sm == 0) {
    GpucErr ge = {0};
    sm = gpuc_gpu_sm(&ge);
    if (sm < 0)
      return gpuc_err_set(e, "no GPU here (%s): name the target with --arch sm_80|sm_86|sm_89|sm_90|sm_120", ge.msg);
  }
  memset(st, 0, sizeof *st);
  st->nodes_in = g->nnodes;
  for (int i = 0; i < r->nfreeze; i++)
    if (gpuc_graph_freeze_input(g, r->freeze_names[i], r->freeze_values[i], e)) return -1;
  if (r->nfreeze && gpuc_graph_infer(g, e)) return -1;
  PassOptions po;
  gpuc_pass_options_default(&po, r->level < 1 ? 1 : r->level); /* shapes must fold for codegen */
  pass_flags_apply(&r->flags, &po);
  po.prune_report = r->prune_report;
  po.int8_gemm_epilogue = cg_int8_gemm_takes_epilogue; /* the target's int8 GEMM decides where dequantizes go */
  po.sm = sm;
  if (gpuc_passes_run(g, &po, e)) return -1;
  if (!r->quiet) {
    gpuc_int8_report(g, &po, stdout);
    gpuc_fp8_report(g, &po, stdout); /* --int8's layers, or a quantized model's int8 GEMMs */
  }
  CodegenOptions co = {.sm = sm, .fp16 = po.fp16, .bf16 = po.bf16, .level = r->level, .mem_limit = r->mem_limit};
  Plan *p = NULL;
  int rc = gpuc_codegen(g, &co, &p, st, e);
  if (!rc) p->meta.nnodes_onnx = (uint32_t)st->nodes_in;
  st->compile_seconds = now_s() - t0;
  st->sm = sm;
  if (rc) gpuc_plan_free(p);
  else *out = p;
  return rc;
}

int compile_graph(Graph *g, const CompileRequest *r, CompileStats *st, GpucErr *e) {
  Plan *p;
  if (compile_graph_plan(g, r, st, &p, e)) return -1;
  if (r->plan_out) { *r->plan_out = p; return 0; } /* the caller writes it (bucket plans) */
  int rc = gpuc_plan_write(p, r->out, e);
  gpuc_plan_free(p);
  return rc;
}

void default_plan_path(const char *model, char *out, size_t n) {
  size_t l = strlen(model);
  if (l > 5 && !strcmp(model + l - 5, ".onnx")) snprintf(out, n, "%.*s.gpuc", (int)(l - 5), model);
  else snprintf(out, n, "%s.gpuc", model);
}

const char *default_tune_cache(char *buf, size_t n) {
  const char *env = getenv("GPUC_TUNE_CACHE"), *home = getenv("HOME");
  if (env && *env) return env;
  if (home && *home) { snprintf(buf, n, "%s/.cache/gpuc/autotune.txt", home); return buf; }
  return NULL;
}

/* GPUC_GPU_LOCK=FILE: -O3 holds an exclusive flock(2) on FILE while it
 * measures on the GPU (and only then: code generation and NVRTC run
 * unlocked), so processes that share one GPU and the same lock (bench/zoo.py's
 * workers) never time their kernels over each other's. -1 when unset or not
 * lockable (a note, then tuning goes on unlocked). */
static int gpu_lock_take(void) {
  const char *path = getenv("GPUC_GPU_LOCK");
  if (!path || !*path) return -1;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || flock(fd, LOCK_EX) != 0) {
    fprintf(stderr, "gpuc: note: GPUC_GPU_LOCK %s: %s; tuning without the lock\n", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

int autotune_plan_in_memory(Plan **p, const char *what, const char *cache, GpucTuneStats *ts, GpucErr *e) {
  int lock = gpu_lock_take();
  GpucSession *s = gpuc_session_create_plan(*p, what, 0, e); /* owns *p from here */
  *p = NULL;
  uint8_t *buf = NULL;
  uint64_t n = 0;
  int rc = !s || gpuc_session_autotune(s, cache, ts, e) || gpuc_plan_to_bytes(gpuc_session_plan(s), what, &buf, &n, e);
  if (!rc && !(*p = gpuc_plan_from_bytes(buf, n, what, e))) rc = 1;
  free(buf);
  gpuc_session_free(s);
  if (lock >= 0) close(lock); /* releases the flock */
  return rc ? -1 : 0;
}
