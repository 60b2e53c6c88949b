/* Block-size-free kernels really are: a plan run with every free kernel
 * (PLAN_TUNE_F_BLOCK_FREE) relaunched at 64, 128, 256, 512 and 1024
 * threads a block must give byte-identical outputs to the plan as read.
 * Needs a GPU; tests/gpu/block_sweep.sh runs it on the bundled models.
 *
 * usage: block_sweep PLAN
 *
 * Inputs are seeded random values (floats in [-1, 1), integers 0..9, the
 * same for every variant). Each variant is the plan read again with the
 * free steps' block and grid (gpuc_plan_items_grid) changed, in a fresh
 * session. A variant whose launch fails (a kernel with too many registers
 * for 1024 threads) is reported as SKIP: -O3 skips such a block too. The
 * first variant is the plan as read, run again: a control, since a plan
 * whose library calls or atomics are not deterministic cannot be judged
 * this way.
 * One line per variant: block, free kernels, OK / DIFF (the first output
 * that differs) / SKIP. Exit status 0 when no variant differs, 1 when one
 * does, 2 on an error or a control that differs. */
#include "session.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Run plan p (owned) on seeded inputs; outputs in order, or NULL with *skip
 * set when a launch failed. */
static Tensor **run_plan(Plan *p, const char *what, int *nout, bool *skip, GpucErr *e) {
  *skip = false;
  GpucSession *s = gpuc_session_create_plan(p, what, 0, e);
  if (!s) return NULL;
  const Plan *q = gpuc_session_plan(s);
  uint64_t seed = 1234;
  Tensor **outs = calloc(q->ntensors + 1, sizeof *outs);
  int n = 0;
  for (uint32_t i = 0; outs && i < q->ntensors; i++) {
    const PlanTensor *t = &q->tensors[i];
    if (t->role != PLAN_ROLE_INPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    Tensor *h = gpuc_tensor_new((GpucDType)t->dt, t->rank, t->dims, e);
    if (!h) goto fail;
    for (int64_t k = 0; k < gpuc_numel(h); k++) {
      uint64_t r = rng_next(&seed);
      if (gpuc_dtype_is_float(h->dt)) gpuc_set_f64(h, k, (double)(r >> 11) / 9007199254740992.0 * 2 - 1);
      else gpuc_set_i64(h, k, (int64_t)(r % (h->dt == GPUC_DT_BOOL ? 2 : 10)));
    }
    int rc = gpuc_session_set_input(s, gpuc_plan_str(q, t->name), h, e);
    gpuc_tensor_free(h);
    if (rc) goto fail;
  }
  if (!outs) { gpuc_err_set(e, "out of memory"); goto fail; }
  if (gpuc_session_replay(s, e)) { *skip = strstr(e->msg, "cuLaunchKernel") != NULL; goto fail; }
  for (uint32_t i = 0; i < q->ntensors; i++) {
    const PlanTensor *t = &q->tensors[i];
    if (t->role != PLAN_ROLE_OUTPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    if (!(outs[n] = gpuc_session_get_output(s, gpuc_plan_str(q, t->name), e))) goto fail;
    n++;
  }
  *nout = n;
  gpuc_session_free(s);
  return outs;
fail:
  for (int k = 0; outs && k < n; k++) gpuc_tensor_free(outs[k]);
  free(outs);
  gpuc_session_free(s);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: block_sweep PLAN\n"); return 2; }
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(argv[1], &e);
  if (!p) { fprintf(stderr, "block_sweep: %s\n", e.msg); return 2; }
  int nfree = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) nfree += (p->tune[i].flags & PLAN_TUNE_F_BLOCK_FREE) != 0;
  int nref = 0;
  bool skip;
  Tensor **ref = run_plan(p, argv[1], &nref, &skip, &e);
  if (!ref) { fprintf(stderr, "block_sweep: %s: %s\n", argv[1], e.msg); return 2; }
  int status = 0;
  static const uint32_t blocks[] = {0 /* as read */, 64, 128, 256, 512, 1024};
  for (size_t b = 0; b < sizeof blocks / sizeof *blocks && nfree; b++) {
    Plan *v = gpuc_plan_read(argv[1], &e);
    if (!v) { fprintf(stderr, "block_sweep: %s\n", e.msg); return 2; }
    for (uint32_t i = 0; i < v->nsteps && blocks[b]; i++) {
      if (!(v->tune[i].flags & PLAN_TUNE_F_BLOCK_FREE)) continue;
      v->steps[i].block[0] = blocks[b];
      v->steps[i].grid[0] = gpuc_plan_items_grid(v->tune[i].items, blocks[b]);
    }
    char lab[32];
    if (blocks[b]) snprintf(lab, sizeof lab, "block %u", blocks[b]);
    else snprintf(lab, sizeof lab, "as read (control)");
    int n = 0;
    GpucErr ev = {0};
    Tensor **outs = run_plan(v, argv[1], &n, &skip, &ev);
    if (!outs) {
      printf("%s %s (%d free kernels): %s %s\n", argv[1], lab, nfree, skip ? "SKIP" : "ERROR", ev.msg);
      if (!skip) status = 2;
      continue;
    }
    int diff = n != nref ? 0 : -1; /* the first output that differs */
    for (int k = 0; k < n && k < nref && diff < 0; k++)
      if (outs[k]->dt != ref[k]->dt || gpuc_tensor_bytes(outs[k]) != gpuc_tensor_bytes(ref[k]) ||
          memcmp(outs[k]->data, ref[k]->data, gpuc_tensor_bytes(ref[k])))
        diff = k;
    if (diff < 0) printf("%s %s (%d free kernels): OK\n", argv[1], lab, nfree);
    else printf("%s %s (%d free kernels): DIFF in output %d%s\n", argv[1], lab, nfree, diff,
                b == 0 ? " (the control: this plan is not deterministic)" : "");
    if (diff >= 0) status = b == 0 ? 2 : status ? status : 1;
    for (int k = 0; k < n; k++) gpuc_tensor_free(outs[k]);
    free(outs);
  }
  if (!nfree) printf("%s: no block-size-free kernels\n", argv[1]);
  for (int k = 0; k < nref; k++) gpuc_tensor_free(ref[k]);
  free(ref);
  return status;
}
