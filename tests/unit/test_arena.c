/* The arena planner without a GPU: compile bundled models and check, from
 * the finished plan alone, that no two arena tensors whose lifetimes
 * overlap share a byte -- except an output placed exactly over an input
 * that dies at the step writing it (in-place reuse). Lifetimes are worked
 * out here again from the steps, not taken from the planner. A plan broken
 * on purpose must be caught, so the check itself can fail. Also: in-place
 * reuse happens where it should (ResNet's residual convolutions, MobileNet's
 * bias + residual kernel, a Relu) and the arena stays within 1.1x its lower bound.
 * usage: test_arena MODELS_DIR */
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "plan.h"
#include "check.h"
#include "compile_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* first/last step each base tensor is live at (-1: before the first step;
 * nsteps: after the last), worked out from the steps and roles */
static void lifetimes(const Plan *p, int64_t *first, int64_t *last) {
  for (uint32_t t = 0; t < p->ntensors; t++) { first[t] = INT64_MAX; last[t] = -1; }
  for (uint32_t s = 0; s < p->nsteps; s++)
    for (uint32_t a = 0; a < p->steps[s].nargs; a++) {
      uint32_t t = gpuc_plan_base_tensor(p, p->args[p->steps[s].args + a]);
      if (first[t] > (int64_t)s) first[t] = s;
      if (last[t] < (int64_t)s) last[t] = s;
    }
  /* inputs through the whole schedule (a replay without a new upload reads
   * them again: nothing may write their bytes), outputs to the end */
  for (uint32_t t = 0; t < p->ntensors; t++) {
    uint32_t b = gpuc_plan_base_tensor(p, t);
    int role = p->tensors[t].role;
    if (role == PLAN_ROLE_INPUT || role == PLAN_ROLE_INPUT_OUTPUT) { first[b] = -1; last[b] = (int64_t)p->nsteps; }
    if (role == PLAN_ROLE_OUTPUT) last[b] = (int64_t)p->nsteps;
  }
}

static bool live(const Plan *p, const int64_t *last, uint32_t t) {
  return p->tensors[t].mem == PLAN_MEM_ARENA && last[t] >= 0;
}

/* Number of conflicts: pairs of arena tensors overlapping in bytes and in
 * lifetime that are not an exact in-place handover (one's last step is the
 * other's first, same offset and size). *handovers counts those. With
 * `breaker`, instead of counting, the first pair of tensors live at once
 * with different bytes is made to overlap (a broken plan for the check). */
static int arena_conflicts(Plan *p, int *handovers, bool breaker) {
  uint32_t n = p->ntensors;
  int64_t *first = malloc(sizeof(int64_t) * (n + 1)), *last = malloc(sizeof(int64_t) * (n + 1));
  int conflicts = 0;
  *handovers = 0;
  if (!first || !last) { free(first); free(last); return -1; }
  lifetimes(p, first, last);
  for (uint32_t i = 0; i < n; i++) {
    PlanTensor *a = &p->tensors[i];
    if (!live(p, last, i)) continue;
    for (uint32_t j = i + 1; j < n; j++) {
      PlanTensor *b = &p->tensors[j];
      if (!live(p, last, j) || last[i] < first[j] || last[j] < first[i]) continue;
      bool apart = a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset;
      if (breaker) {
        bool boundary = last[i] == first[j] || last[j] == first[i];
        if (apart && (!boundary || a->bytes != b->bytes)) { b->offset = a->offset; goto done; }
        continue;
      }
      if (apart) continue;
      bool exact = a->offset == b->offset && a->bytes == b->bytes;
      if (exact && (last[i] == first[j] || last[j] == first[i])) (*handovers)++;
      else conflicts++;
    }
  }
done:
  free(first);
  free(last);
  return conflicts;
}

/* min_inplace: the in-place handovers the model must get at least */
static void check_model(const char *dir, const char *name, const GpucShapeBind *b, int nb, bool fp16,
                        int min_inplace) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  CompileStats st;
  Plan *p = compile_model(path, b, nb, 90, fp16, &st);
  if (!p) return;
  int handovers = 0, conflicts = arena_conflicts(p, &handovers, false);
  CHECK(conflicts == 0, "%s%s: %d pairs of live tensors share arena bytes", name, fp16 ? " fp16" : "", conflicts);
  CHECK(handovers >= min_inplace && (int)st.inplace_tensors >= min_inplace,
        "%s%s: %d in-place handovers (%u by the planner's count), want at least %d", name, fp16 ? " fp16" : "",
        handovers, st.inplace_tensors, min_inplace);
  CHECK(st.arena_bytes * 10 <= st.lower_bound_bytes * 11, "%s: arena %llu within 1.1x its lower bound %llu", name,
        (unsigned long long)st.arena_bytes, (unsigned long long)st.lower_bound_bytes);
  CHECK(st.arena_bytes <= st.naive_bytes, "%s: arena %llu <= naive sum %llu", name,
        (unsigned long long)st.arena_bytes, (unsigned long long)st.naive_bytes);
  /* the check can fail: two tensors live at once moved onto each other */
  int h2;
  arena_conflicts(p, &h2, true);
  int broken = arena_conflicts(p, &h2, false);
  CHECK(broken > 0, "%s: two live tensors put on the same bytes are caught (%d conflicts)", name, broken);
  gpuc_plan_free(p);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_arena MODELS_DIR\n"); return 2; }
  const char *dir = argv[1];
  GpucShapeBind mlp = {.name = "image", .rank = 2, .dims = {4, 784}};
  GpucShapeBind r50 = {.name = "input", .rank = 4, .dims = {2, 3, 224, 224}};
  /* the residual convolution writes over the shortcut (cuDNN's z = y) */
  check_model(dir, "resnet_block", NULL, 0, false, 1);
  check_model(dir, "resnet_block", NULL, 0, true, 1);
  /* 16 bottlenecks, each a residual convolution over its shortcut */
  check_model(dir, "resnet50", &r50, 1, true, 16);
  /* the bias + residual kernel after a linear bottleneck's convolution */
  check_model(dir, "mobile_block", NULL, 0, false, 1);
  check_model(dir, "mobile_block", NULL, 0, true, 0);
  /* a Relu over a dying Gemm output, in fp32 and fp16 */
  check_model(dir, "small_cnn", NULL, 0, false, 1);
  check_model(dir, "small_cnn", NULL, 0, true, 1);
  check_model(dir, "mlp", &mlp, 1, false, 0);
  return check_summary();
}
