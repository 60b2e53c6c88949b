/* Device buffers bound in place (the public API's zero-copy bindings,
 * runtime/api_runtime.c): which inputs and outputs of a plan may run at a
 * caller's address instead of their arena slot, and, per run, which bound
 * addresses do. Plain C on the plan alone (no CUDA), so CI tests it.
 *
 * A CUDA graph has every address baked in at capture, so a run whose
 * in-place addresses differ from its graph's captures another one (the
 * API keeps the last few; runtime/api_runtime.c). What moves is a group:
 * an input or output tensor and every tensor that is a view of it
 * (PLAN_MEM_ALIAS chains ending there). Other tensors that share the
 * slot's bytes at other times (the arena reuses it before an output is
 * written, or hands a dead operand's bytes to an in-place result) stay in
 * the arena: they never held the I/O's value, and a kernel that ran in
 * place reads and writes element for element, which two buffers serve as
 * well as one.
 *
 * Static rules (gpuc_zc_analyze), per input/output:
 *   - its bytes are in the arena (an output the compiler folded to a
 *     constant lives in the weights: copied);
 *   - no tensor of its group is an address a library descriptor took at
 *     load (a cuBLASLt epilogue's bias row, an FP8 GEMM's scale vectors, a
 *     2:4 GEMM's operands in cuSPARSELt's plan): those are not captured
 *     per run;
 *   - no view in the group is larger than the tensor (the caller's buffer
 *     holds the tensor's bytes, no more);
 *   - an input's group is written by no library step (GEMM/conv outputs):
 *     a run must leave the caller's input as it was.
 * Run rules (gpuc_zc_choose), per bound device address, inputs first:
 *   - aligned to GPUC_ZC_ALIGN (256 bytes: what the arena gives every
 *     tensor, and cuBLASLt's default alignment assumption when the
 *     session chose its algorithms; generated kernels' vector accesses
 *     need at most 16);
 *   - outside the session's own memory (arena, weights, workspace: the
 *     session's own buffer of that tensor is its home address anyway);
 *   - its group not already taken by an earlier binding (an input that is
 *     also an output: the other one is copied);
 *   - not overlapping another in-place range unless both are inputs
 *     (the graph writes outputs while it reads inputs);
 *   - stable: the entry's first device binding, or an address bound to it
 *     in one of its last GPUC_ZC_HISTORY runs; a new address is copied
 *     once and used in place when it comes again, so a caller whose
 *     buffers change every run (outputs kept in a list) pays copies, not a
 *     capture per run.
 * Anything not in place is copied exactly as before (host bindings
 * always). */
#ifndef GPUC_ZERO_COPY_H
#define GPUC_ZERO_COPY_H
#include "plan.h"

#define GPUC_ZC_ALIGN 256u
#define GPUC_ZC_HISTORY 4

typedef enum GpucZcWhy {
  GPUC_ZC_OK = 0,
  GPUC_ZC_WEIGHTS,               /* a constant in the weights (folded output) */
  GPUC_ZC_BAKED,                 /* a library descriptor holds its address */
  GPUC_ZC_VIEW_LARGER,           /* a view of it spans more bytes than it */
  GPUC_ZC_WRITTEN_INPUT,         /* an input some step writes */
  GPUC_ZC_WHY_COUNT_
} GpucZcWhy;

/* What the plan allows, per entry of the I/O list (inputs, then outputs,
 * in the order the caller gave). */
typedef struct GpucZcPlan {
  uint32_t nio, nin;             /* entries; the first nin are inputs */
  uint32_t *tensor;              /* [nio] plan tensor of each entry */
  uint64_t *bytes;               /* [nio] its bytes */
  uint8_t *why;                  /* [nio] GpucZcWhy */
  uint32_t *group;               /* [nio] its group (entries sharing a base share one) */
  uint32_t ngroups;
  uint32_t *member_start;        /* [ngroups + 1] into members */
  uint32_t *members;             /* plan tensors of each group (the base and its views) */
  /* per entry, its last GPUC_ZC_HISTORY device addresses (0: none yet) */
  uint64_t (*history)[GPUC_ZC_HISTORY];
} GpucZcPlan;

/* The analysis of plan p for the I/O list given as tensor indices (ins,
 * then outs); -1 with a message when out of memory. */
int gpuc_zc_analyze(const Plan *p, const uint32_t *ins, uint32_t nin, const uint32_t *outs, uint32_t nout,
                    GpucZcPlan *zp, GpucErr *e);
void gpuc_zc_free(GpucZcPlan *zp);
/* One line saying why an entry is copied, for docs and messages. */
const char *gpuc_zc_why_text(GpucZcWhy why);

/* A byte range [lo, hi) of the session's own device memory. */
typedef struct GpucZcRange {
  uint64_t lo, hi;
} GpucZcRange;

/* One run's choice. ptr[i]: entry i's bound device address, 0 when it is
 * host-bound or not bound. own: the session's memory. Writes key[g] (the
 * address group g runs at, 0: its arena slot) and in_place[i] (entry i
 * needs no copy), then records the run's addresses in the history.
 * Returns how many entries run in place. */
uint32_t gpuc_zc_choose(GpucZcPlan *zp, const uint64_t *ptr, const GpucZcRange *own, uint32_t nown, uint64_t *key,
                        uint8_t *in_place);
#endif
