/* Device memory a session asks for, checked against what the GPU has free
 * before it allocates: a plan compiled for a batch the GPU cannot hold
 * fails at session creation with the bytes it needs and the bytes free,
 * not with a bare "out of memory" from the first allocation that misses. */
#include "session_internal.h"
#include <stdio.h>

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }

int gpuc_session_fits(GpucSession *s, const char *what, uint64_t bytes, const char *parts, GpucErr *e) {
  size_t free_b = 0, total_b = 0;
  CU_TRY(e, cu.cuMemGetInfo(&free_b, &total_b));
  if (bytes <= free_b) return 0;
  gpuc_err_set(e, "%s: the plan needs %llu bytes (%.2f GiB) of device memory (%s), the GPU (%s) has %llu "
                      "bytes (%.2f GiB) free of %llu: compile for a smaller batch (--shape) or check it with "
                      "--mem-limit", what, (unsigned long long)bytes, gib(bytes), parts, s->devname,
                      (unsigned long long)free_b, gib(free_b), (unsigned long long)total_b);
  if (e) e->out_of_memory = true;
  return -1;
}

/* GPUC_DEBUG_TENSORS=1: every tensor's device range on stderr, so a
 * sanitizer's "Address 0x..." can be named (tests/gpu/sanitize.sh,
 * leak_check.sh). Arena tensors whose lifetimes do not overlap share
 * bytes: an address may name several; the kernels' argument lists and the
 * library outputs say which one a kernel read and who wrote it. */
void gpuc_session_print_tensors(const GpucSession *s, FILE *f) {
  const Plan *p = s->plan;
  static const char *const mem[] = {"arena", "weights", "alias"};
  fprintf(f, "gpuc: tensors of %s: arena 0x%llx (%llu bytes), weights 0x%llx, workspace 0x%llx (%zu bytes)\n",
          s->what ? s->what : "the plan", (unsigned long long)s->arena, (unsigned long long)p->meta.arena_bytes,
          (unsigned long long)s->weights, (unsigned long long)s->workspace, s->workspace_bytes);
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    fprintf(f, "gpuc: tensor %u %s 0x%llx %llu %s\n", i, gpuc_plan_str(p, t->name), (unsigned long long)s->tptr[i],
            (unsigned long long)t->bytes, t->mem < 3 ? mem[t->mem] : "?");
  }
  /* who writes what: each kernel's arguments, and the tensors a library
   * call writes (a GEMM's Y; a convolution's Y, dX or dW) with every alias
   * of them, so a sanitizer report in a kernel can be traced to the
   * producer of the bytes it read */
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *st = &p->steps[i];
    if (st->kind != PLAN_STEP_KERNEL) continue;
    fprintf(f, "gpuc: kernel %s args", gpuc_plan_str(p, p->kernels[st->index].name));
    for (uint32_t k = 0; k < st->nargs; k++) fprintf(f, " %u", p->args[st->args + k]);
    fprintf(f, "\n");
  }
  for (uint32_t i = 0; i < p->ntensors; i++) {
    uint32_t root = i; /* an alias points backwards (validated): its root is a real tensor */
    while (p->tensors[root].mem == PLAN_MEM_ALIAS && p->tensors[root].offset < root) root = (uint32_t)p->tensors[root].offset;
    const char *by = NULL;
    for (uint32_t k = 0; k < p->ngemms && !by; k++) if (p->gemms[k].y == root) by = "cuBLASLt";
    for (uint32_t k = 0; k < p->nconvs && !by; k++)
      if (gpuc_plan_conv_output(&p->convs[k]) == root) by = "cuDNN";
    if (by) fprintf(f, "gpuc: library output %u %s %s\n", i, gpuc_plan_str(p, p->tensors[i].name), by);
  }
}

uint32_t gpuc_plan_conv_output(const PlanConv *c) {
  return c->mode == PLAN_CONV_BWD_DATA ? c->x : c->mode == PLAN_CONV_BWD_FILTER ? c->w : c->y;
}

/* Why the copies: on the H200, initcheck reports every read of a cuBLASLt
 * GEMM's output as uninitialized (docs/SANITIZER.md: a generated kernel
 * reading one GEMM's output is reported; the same bytes uploaded from the
 * host are not), hundreds of thousands a BERT run, which overflow the
 * tool's error buffer and hide whatever else there is. A device-to-device
 * copy is a write initcheck does see. The bytes the library wrote are
 * what goes back, so outputs are unchanged; only a library failing to
 * write part of its output could be hidden, which is the blind spot
 * anyway. Diagnostic only: it adds two copies per library call. */
int gpuc_session_mark_setup(GpucSession *s, GpucErr *e) {
  const char *v = getenv("GPUC_INITCHECK_MARK_LIBRARY");
  if (!v || *v != '1' || s->shared) return 0;
  const Plan *p = s->plan;
  uint64_t most = 0;
  for (uint32_t k = 0; k < p->ngemms; k++) most = p->tensors[p->gemms[k].y].bytes > most ? p->tensors[p->gemms[k].y].bytes : most;
  for (uint32_t k = 0; k < p->nconvs; k++) {
    uint64_t b = p->tensors[gpuc_plan_conv_output(&p->convs[k])].bytes;
    most = b > most ? b : most;
  }
  if (!most) return 0;
  if (gpuc_session_fits(s, s->what, most, "GPUC_INITCHECK_MARK_LIBRARY's scratch", e)) return -1;
  CUresult r = cu.cuMemAlloc(&s->mark_scratch, most);
  if (r != CUDA_SUCCESS) return gpuc_cu_fail(e, r, "cuMemAlloc (GPUC_INITCHECK_MARK_LIBRARY)", __FILE__, __LINE__);
  return 0;
}

int gpuc_session_mark_library_output(GpucSession *s, uint32_t tensor, GpucErr *e) {
  uint64_t n = s->plan->tensors[tensor].bytes;
  if (!s->mark_scratch || !n) return 0;
  CU_TRY(e, cu.cuMemcpyDtoDAsync(s->mark_scratch, s->tptr[tensor], n, s->stream));
  CU_TRY(e, cu.cuMemcpyDtoDAsync(s->tptr[tensor], s->mark_scratch, n, s->stream));
  return 0;
}

static int fail_at, fail_points; /* session_internal.h: the failure-injection hook */

void gpuc_session_fail_at(int n) {
  fail_at = n > 0 ? n : 0;
  fail_points = 0;
}

int gpuc_session_fail_points(void) { return fail_points; }

bool gpuc_session_inject(const char *what, GpucErr *e) {
  if (!fail_at) return false;
  if (++fail_points != fail_at) return false;
  gpuc_err_set(e, "session creation: injected failure at point %d (%s): out of memory", fail_at, what);
  if (e) e->out_of_memory = true;
  return true;
}
