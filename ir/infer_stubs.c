/* TEMPORARY during bring-up: weak fallbacks so the build links while op
 * families are written. Removed once every row of ops.def has inference. */
#include "ir.h"
#define OP(E, Name, min_in, max_in, min_out, max_out, flags) \
  __attribute__((weak)) int infer_##Name(OpCtx *c) { return gpuc_op_unsupported(c, "no shape inference yet"); }
#include "ops.def"
#undef OP
