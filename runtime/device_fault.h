/* Data-dependent errors found on the GPU: what generated kernels and the
 * runtime agree on.
 *
 * A kernel that reads an index (Gather, ScatterND...) or a label (the
 * losses) from a runtime tensor cannot fail the way the CPU reference
 * does, so it never touches memory out of range and reports the first bad
 * value in a record in device memory: the module's global `gpuc_fault`,
 * GPUC_FAULT_WORDS u64s:
 *   [0] step + 1 of the reporting kernel (0: no error); set by atomicCAS
 *       from 0, so the first report wins and later ones leave it alone
 *   [1] GpucFaultKind   [2] the bad value   [3] its position (element of
 *       the indices / labels)   [4] the bound   [5] the axis (or -1)
 * Codegen emits the record and its report function once per module, only
 * when a lowering asks for it (cg_fault_report, codegen/lower_util.h). The
 * runtime (runtime/gpu/device_fault_gpu.c) copies the record into pinned
 * host memory at the end of every replay, reads it after the run, and
 * turns it into the reference's message (gpuc_fault_message). Steps run
 * in order on one stream, so the first failing step wins, as on the CPU;
 * within a step, which of several bad values is named may differ. */
#ifndef GPUC_DEVICE_FAULT_H
#define GPUC_DEVICE_FAULT_H
#include "plan.h"

#define GPUC_FAULT_SYMBOL "gpuc_fault"
#define GPUC_FAULT_WORDS 6

typedef enum GpucFaultKind {
  GPUC_FAULT_INDEX = 1,      /* an index outside [-bound, bound) on axis [5] */
  GPUC_FAULT_INDEX_NOAXIS,   /* the same, the reference names no axis (GatherGrad) */
  GPUC_FAULT_LABEL,          /* a loss label outside [0, bound), not ignore_index */
  GPUC_FAULT_LABEL_GRAD,     /* the same in the loss's gradient */
  GPUC_FAULT_INF,            /* DynamicQuantizeLinear of an infinite value */
  GPUC_FAULT_SEQ_LEN,        /* ReverseSequence, LSTM/GRU/RNN: sequence_lens[pos] = value outside [0, bound] */
  GPUC_FAULT_FLAT_INDEX,     /* MaxUnpool: a flat output index outside [0, bound) */
  GPUC_FAULT_KIND_COUNT_
} GpucFaultKind;

/* The CUDA text codegen puts once before the first kernel that reports:
 * the record and `gpuc_fault_report(step, kind, value, pos, bound, axis)`. */
extern const char gpuc_fault_cuda_src[];

/* The reference's message for record rec of plan p (`what` names the plan
 * file): "what: node 'NAME' (Op): index V (element P of the indices) out
 * of range [-B, B) for axis A". -1 with it in e; 0 if rec holds no error. */
int gpuc_fault_message(const Plan *p, const char *what, const uint64_t rec[GPUC_FAULT_WORDS], GpucErr *e);
/* Whether the module's PTX (n bytes, NUL-terminated or not) declares the
 * record: a line `[.visible|.extern|.weak] .global ... gpuc_fault[...]`.
 * The runtime asks the driver for the record only then: looking up a
 * symbol a module lacks fails the call (CUDA_ERROR_NOT_FOUND), which
 * compute-sanitizer's memcheck counts as an error of the program. */
bool gpuc_fault_in_ptx(const char *ptx, size_t n);
#endif
