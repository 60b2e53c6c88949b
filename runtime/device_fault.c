/* The device error record's CUDA text and its message (device_fault.h).
 * The record is untrusted as far as indexing goes: a step number outside
 * the plan is reported as such, never used to index. */
#include "device_fault.h"
#include <stdio.h>
#include <string.h>

/* extern "C": the runtime finds the record by this name with
 * cuModuleGetGlobal, and the block-size-free check (items_check.c) ends
 * the previous kernel's text at an `extern "C"`. The winner's fields are
 * written after its CAS; they are read only after the whole run. */
const char gpuc_fault_cuda_src[] =
    "/* data-dependent errors: the first report wins (runtime/device_fault.h) */\n"
    "extern \"C\" {\n"
    "__device__ unsigned long long gpuc_fault[6];\n"
    "static __device__ __noinline__ void gpuc_fault_report(unsigned int step, unsigned int kind, long long value,\n"
    "                                                      long long pos, long long bound, long long axis) {\n"
    "  if (atomicCAS(&gpuc_fault[0], 0ULL, (unsigned long long)step + 1ULL) != 0ULL) return;\n"
    "  gpuc_fault[1] = kind;\n"
    "  gpuc_fault[2] = (unsigned long long)value;\n"
    "  gpuc_fault[3] = (unsigned long long)pos;\n"
    "  gpuc_fault[4] = (unsigned long long)bound;\n"
    "  gpuc_fault[5] = (unsigned long long)axis;\n"
    "}\n"
    "}\n";

/* The op of kernel step s: its kernel is named k<node>_<Op>[_<n>] (codegen). */
static void step_op(const Plan *p, const PlanStep *s, char *op, size_t n) {
  snprintf(op, n, "?");
  if (s->kind != PLAN_STEP_KERNEL || s->index >= p->nkernels) return;
  const char *name = gpuc_plan_str(p, p->kernels[s->index].name);
  const char *u = strchr(name, '_');
  if (!u) return;
  size_t len = strcspn(u + 1, "_");
  if (len == 0 || len >= n) return;
  memcpy(op, u + 1, len);
  op[len] = 0;
}

int gpuc_fault_message(const Plan *p, const char *what, const uint64_t rec[GPUC_FAULT_WORDS], GpucErr *e) {
  if (rec[0] == 0) return 0;
  uint64_t step = rec[0] - 1;
  long long v = (long long)rec[2], pos = (long long)rec[3], bound = (long long)rec[4], axis = (long long)rec[5];
  if (step >= p->nsteps)
    return gpuc_err_set(e, "%s: a kernel reported a data error (kind %llu) from step %llu, which the plan does "
                        "not have", what, (unsigned long long)rec[1], (unsigned long long)step);
  const PlanStep *s = &p->steps[step];
  char op[64], reason[256];
  step_op(p, s, op, sizeof op);
  switch (rec[1]) {
  case GPUC_FAULT_INDEX:
    snprintf(reason, sizeof reason, "index %lld (element %lld of the indices) out of range [%lld, %lld) for axis %lld",
             v, pos, -bound, bound, axis);
    break;
  case GPUC_FAULT_INDEX_NOAXIS:
    snprintf(reason, sizeof reason, "index %lld (element %lld of the indices) out of range [%lld, %lld)", v, pos,
             -bound, bound);
    break;
  case GPUC_FAULT_LABEL:
    snprintf(reason, sizeof reason, "label %lld at position %lld is outside [0, %lld) and is not ignore_index", v,
             pos, bound);
    break;
  case GPUC_FAULT_LABEL_GRAD:
    snprintf(reason, sizeof reason, "label %lld at position %lld is outside [0, %lld)", v, pos, bound);
    break;
  case GPUC_FAULT_INF:
    snprintf(reason, sizeof reason, "input holds an infinite value; no finite scale covers it");
    break;
  case GPUC_FAULT_SEQ_LEN: /* the words of ref_rearrange.c and ref_rnn.c */
    snprintf(reason, sizeof reason, "sequence length %lld (element %lld of sequence_lens) is outside [0, %lld]", v,
             pos, bound);
    break;
  case GPUC_FAULT_FLAT_INDEX:
    snprintf(reason, sizeof reason, "index %lld (element %lld of I) is outside [0, %lld)", v, pos, bound);
    break;
  default:
    snprintf(reason, sizeof reason, "a data error of unknown kind %llu", (unsigned long long)rec[1]);
    break;
  }
  return gpuc_err_set(e, "%s: node '%s' (%s): %s", what, gpuc_plan_str(p, s->nodes), op, reason);
}

/* One PTX line [s, end): its directives (tokens starting with '.', with
 * their numbers, as in `.global .align 8 .b8 gpuc_fault[48];`) must
 * include .global, and the first other token, cut at '[', ';' or '=',
 * must be GPUC_FAULT_SYMBOL. */
static bool global_line_declares(const char *s, const char *end) {
  bool global = false;
  while (s < end) {
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    const char *t = s;
    while (s < end && *s != ' ' && *s != '\t' && *s != '[' && *s != ';' && *s != '=') s++;
    if (s == t) return false;
    if (*t == '.') {
      global |= (size_t)(s - t) == 7 && !memcmp(t, ".global", 7);
      continue;
    }
    if (*t >= '0' && *t <= '9') continue; /* a directive's number: `.align 8` */
    size_t len = strlen(GPUC_FAULT_SYMBOL);
    return global && (size_t)(s - t) == len && !memcmp(t, GPUC_FAULT_SYMBOL, len);
  }
  return false;
}

bool gpuc_fault_in_ptx(const char *ptx, size_t n) {
  if (!ptx) return false;
  const char *end = memchr(ptx, 0, n);
  if (!end) end = ptx + n;
  for (const char *s = ptx; s < end;) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *e = nl ? nl : end;
    if (global_line_declares(s, e)) return true;
    s = nl ? nl + 1 : end;
  }
  return false;
}
