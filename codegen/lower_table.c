/* Dispatch table from ops.def to lower_<Op>, and weak fallbacks for ops
 * whose lowering is not written yet: they fail as "unsupported" with the
 * node named, so the conformance runner counts them as skips. */
#include "codegen.h"

#define OP(E, Name, min_in, max_in, min_out, max_out, flags) \
  __attribute__((weak)) int lower_##Name(LowerCtx *c) {      \
    OpCtx o = {.g = c->g, .n = c->n, .err = c->err};         \
    return gpuc_op_unsupported(&o, "no GPU lowering yet");   \
  }
#include "ops.def"
#undef OP

const GpucLowerFn lower_fns[GPUC_OP_COUNT] = {
#define OP(E, Name, min_in, max_in, min_out, max_out, flags) [GPUC_OP_##E] = lower_##Name,
#include "ops.def"
#undef OP
};
