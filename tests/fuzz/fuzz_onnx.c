/* ONNX model bytes -> load (protobuf-c, validation, function inlining,
 * shape inference) -> the -O2 passes -> codegen (every lowering's CUDA
 * text and the plan, without the NVRTC compile: CodegenOptions.skip_nvrtc).
 * Symbolic input dims are bound to 2 so folding and codegen get to run. */
#include "fuzz_util.h"
#include "codegen.h"
#include "frontend.h"
#include "passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file("model.onnx", data, size);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  if (!g) { fuzz_refused(&e, "onnx load"); return 0; }
  /* bind every input's unknown dims to 2, and load again with the binds */
  GpucShapeBind binds[16];
  int nb = 0;
  for (int k = 0; k < g->ninputs && nb < 16; k++) {
    const Value *v = &g->values[g->inputs[k]];
    if (v->t.rank < 0 || v->t.rank > GPUC_MAX_RANK || gpuc_shape_known(&v->t)) continue;
    GpucShapeBind *b = &binds[nb++];
    memset(b, 0, sizeof *b);
    b->name = strdup(v->name);
    b->rank = v->t.rank;
    for (int d = 0; d < v->t.rank; d++) b->dims[d] = v->t.dims[d] >= 0 ? v->t.dims[d] : 2;
  }
  if (nb) {
    gpuc_graph_free(g);
    e = (GpucErr){0};
    g = gpuc_onnx_load(path, binds, nb, &e);
    for (int i = 0; i < nb; i++) free((char *)binds[i].name);
    if (!g) { fuzz_refused(&e, "onnx load with binds"); return 0; }
  }
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  if (gpuc_passes_run(g, &po, &e)) { fuzz_refused(&e, "passes"); gpuc_graph_free(g); return 0; }
  CodegenOptions co = {.sm = 90, .level = 2, .skip_nvrtc = true};
  Plan *p = NULL;
  if (gpuc_codegen(g, &co, &p, NULL, &e)) fuzz_refused(&e, "codegen");
  if (getenv("GPUC_FUZZ_STAGES")) /* how far the input got (the replay's -v) */
    fprintf(stderr, "%s: %s\n", p ? "codegen ok" : "codegen refused", p ? "" : e.msg);
  gpuc_plan_free(p);
  gpuc_graph_free(g);
  return 0;
}
