/* Helpers shared by the shape-inference functions (ir/infer_*.c) and the
 * reference kernels. Conventions: dims == -1 is unknown; an infer function
 * must accept unknown dims (propagate -1) and fail only on a definite
 * inconsistency. When a data-dependent input (a shape, axes, k...) is not
 * known at compile time, set the output rank to -1 (gpuc_infer_unknown). */
#ifndef GPUC_INFER_UTIL_H
#define GPUC_INFER_UTIL_H
#include "ir.h"

/* out[o] = dtype dt, rank/dims unknown */
int gpuc_infer_unknown(OpCtx *c, int o, GpucDType dt);
/* out[o] takes in[i]'s dtype and shape */
int gpuc_infer_same(OpCtx *c, int o, int i);
/* Broadcast in[first..first+count) (absent inputs skipped) into *out's
 * rank/dims (numpy rules). Fails on definite mismatch. */
int gpuc_infer_broadcast(OpCtx *c, int first, int count, Tensor *out);
/* Normalize axis into [0, rank); fails naming the attribute otherwise. */
int gpuc_norm_axis(OpCtx *c, int64_t axis, int rank, int *out);
/* True if input i is present. */
static inline bool gpuc_has_in(const OpCtx *c, int i) {
  return i < c->nin && c->in[i] != NULL;
}
/* True if input i is present and its values are known. */
static inline bool gpuc_in_known(const OpCtx *c, int i) {
  return gpuc_has_in(c, i) && c->in[i]->data != NULL;
}
/* Read a known 0-D/1-D integer input into buf (at most max values).
 * Returns the count, or -1 with a message. */
int gpuc_read_ints(OpCtx *c, int i, int64_t *buf, int max);
/* Require input i to have one of the listed dtypes (terminated by UNDEF). */
int gpuc_check_dtype(OpCtx *c, int i, const GpucDType *allowed);
/* Row-major strides of a known shape */
void gpuc_strides(const Tensor *t, int64_t *strides);

#endif
