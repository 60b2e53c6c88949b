/* Helpers shared by the inference (ir/infer_reduce.c) and the reference
 * kernels (runtime/ref/ref_reduce.c, ref_softmax.c) of the reduction-like
 * ops: which axes a Reduce* node reduces, and how Softmax-style ops view
 * their input. */
#ifndef GPUC_INFER_REDUCE_H
#define GPUC_INFER_REDUCE_H
#include "infer_util.h"

/* The axes a Reduce* node reduces over its input in[0] (rank r):
 * mask[d] is true for a reduced axis. Handles axes as an attribute (before
 * opset 18; ReduceSum: 13) or as input 1, empty axes (reduce all, or none
 * with noop_with_empty_axes) and validates range and duplicates.
 * *known is false when the axes input exists but its values are not known
 * (import time); mask is then unset. Returns -1 with a message on error. */
int gpuc_reduce_axes(OpCtx *c, bool mask[GPUC_MAX_RANK], bool *known);

/* Softmax/LogSoftmax/Hardmax view in[0] as [outer, n, inner] and work along
 * n. Before opset 13 the input is coerced to 2-D at `axis` (default 1):
 * outer = prod(dims[:axis]), n = prod(dims[axis:]), inner = 1. From 13 the
 * op works along one axis (default -1): n = dims[axis]. */
int gpuc_softmax_view(OpCtx *c, int64_t *outer, int64_t *n, int64_t *inner);

/* TopK: the axis and k (k < 0 when not known at import). */
int gpuc_topk_params(OpCtx *c, int *axis, int64_t *k);

#endif
