/* A deployment program: links libgpuc_rt (plan loader + GPU runtime) only,
 * no compiler, no protobuf-c, no ONNX. It loads a plan, feeds every input
 * with ones, runs it, and prints the first values of every output.
 *   cc deploy.c -Iinclude ... -lgpuc_rt -ldl -lm
 * usage: deploy PLAN.gpuc */
#include "gpuc_rt.h"
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: deploy PLAN.gpuc\n"); return 2; }
  GpucErr err = {0};
  GpucSession *s = gpuc_session_create(argv[1], 0, &err);
  if (!s) { fprintf(stderr, "deploy: %s\n", err.msg); return 1; }
  const Plan *p = gpuc_session_plan(s);
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_INPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    Tensor *x = gpuc_tensor_new(t->dt, t->rank, t->dims, &err);
    if (!x) { fprintf(stderr, "deploy: %s\n", err.msg); return 1; }
    for (int64_t k = 0; k < gpuc_numel(x); k++) gpuc_set_f64(x, k, 1.0);
    int rc = gpuc_session_set_input(s, gpuc_plan_str(p, t->name), x, &err);
    gpuc_tensor_free(x);
    if (rc) { fprintf(stderr, "deploy: %s\n", err.msg); return 1; }
  }
  if (gpuc_session_replay(s, &err)) { fprintf(stderr, "deploy: %s\n", err.msg); return 1; }
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_OUTPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    Tensor *y = gpuc_session_get_output(s, gpuc_plan_str(p, t->name), &err);
    if (!y) { fprintf(stderr, "deploy: %s\n", err.msg); return 1; }
    printf("%s:", gpuc_plan_str(p, t->name));
    for (int64_t k = 0; k < gpuc_numel(y) && k < 8; k++) printf(" %g", gpuc_get_f64(y, k));
    printf("\n");
    gpuc_tensor_free(y);
  }
  gpuc_session_free(s);
  return 0;
}
