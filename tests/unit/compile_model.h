/* The unit tests' compile of a model to a plan, no GPU needed: load (the
 * binds fix symbolic dims), the -O2 passes (fp16, bf16, int8 as asked), codegen with
 * NVRTC for sm_<sm>. A failing stage is a CHECK failure naming the model,
 * and the result is NULL. st may be NULL. Include check.h first. */
#ifndef GPUC_TEST_COMPILE_MODEL_H
#define GPUC_TEST_COMPILE_MODEL_H
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include <stdlib.h>
#include <string.h>

/* Which precision rewrites the passes and codegen apply (all off: fp32). */
typedef struct CompilePrecision { bool fp16, bf16, int8; } CompilePrecision;

/* dir/file loaded with the binds; NULL after a CHECK failure naming it. */
static inline Graph *load_model(const char *dir, const char *file, const GpucShapeBind *b, int nb) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  return g;
}

/* PassOptions of level with the precision rewrites of pr. */
static inline void pass_options_as(PassOptions *po, int level, CompilePrecision pr) {
  gpuc_pass_options_default(po, level);
  po->fp16 = pr.fp16;
  po->bf16 = pr.bf16;
  po->int8 = pr.int8;
}

static inline Plan *compile_model_as(const char *path, const GpucShapeBind *b, int nb, int sm, CompilePrecision pr,
                                     CompileStats *st) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return NULL;
  PassOptions po;
  pass_options_as(&po, 2, pr);
  Plan *p = NULL;
  int rc = gpuc_passes_run(g, &po, &e);
  CHECK(rc == 0, "passes on %s: %s", path, e.msg);
  if (rc == 0) {
    CodegenOptions co = {.sm = sm, .level = 2, .fp16 = pr.fp16, .bf16 = pr.bf16};
    CHECK(gpuc_codegen(g, &co, &p, st, &e) == 0 && p, "codegen %s%s%s%s sm_%d: %s", path, pr.fp16 ? " --fp16" : "",
          pr.bf16 ? " --bf16" : "", pr.int8 ? " --int8" : "", sm, e.msg);
  }
  gpuc_graph_free(g);
  return p;
}

/* p written to a, read back and written again to b: the GEMM descriptors
 * and the file's bytes must survive (CHECK failures name `what`). The plan
 * read back, for the caller to patch and free, or NULL. */
static inline Plan *plan_round_trip(Plan *p, const char *a, const char *b, const char *what) {
  GpucErr e = {0};
  CHECK(gpuc_plan_write(p, a, &e) == 0, "write: %s", e.msg);
  Plan *q = gpuc_plan_read(a, &e);
  CHECK(q != NULL, "an %s plan reads back: %s", what, e.msg);
  if (!q) return NULL;
  CHECK(q->ngemms == p->ngemms && (!p->ngemms || !memcmp(q->gemms, p->gemms, p->ngemms * sizeof(PlanGemm))),
        "%s GEMM descriptors survive the round trip", what);
  CHECK(gpuc_plan_write(q, b, &e) == 0, "rewrite: %s", e.msg);
  size_t na = 0, nb = 0;
  unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
  CHECK(ba && bb && na == nb && !memcmp(ba, bb, na), "%s plan: write -> read -> write is byte-exact", what);
  free(ba);
  free(bb);
  return q;
}

static inline Plan *compile_model(const char *path, const GpucShapeBind *b, int nb, int sm, bool fp16,
                                  CompileStats *st) {
  return compile_model_as(path, b, nb, sm, (CompilePrecision){.fp16 = fp16}, st);
}
#endif
