/* Shared between the elementwise shape inference (ir/infer_elementwise.c)
 * and its reference kernels (runtime/ref/ref_unary.c, ref_binary.c,
 * ref_cast.c): the few op semantics both sides must agree on. */
#ifndef GPUC_INFER_ELEMENTWISE_H
#define GPUC_INFER_ELEMENTWISE_H
#include "ir.h"

/* How input i broadcasts under numpy rules. Usually in[i] itself; before
 * opset 7 two legacy forms are rewritten into an equivalent shape:
 *  - binary ops with broadcast=1 and axis=a: B's dims are aligned to A's
 *    starting at dim a, so B gets trailing 1s up to rank(A) - a;
 *  - PRelu-6: a 1-D slope of size C (!= 1) is per channel (dim 1 of X), so
 *    it becomes [C, 1, ..., 1].
 * Returns in[i] or tmp (which then shares in[i]'s data); NULL with a
 * message when the legacy attributes do not fit the shapes. */
const Tensor *gpuc_ew_bcast_view(OpCtx *c, int i, Tensor *tmp);

/* ONNX TensorProto element type (Cast's 'to') to a gpuc dtype; UNDEF for
 * types gpuc does not have (string, complex, float8...). */
GpucDType gpuc_ew_onnx_dtype(int64_t onnx_type);

/* Gelu's attribute approximate: 0 for "none" (the erf form), 1 for
 * "tanh", -1 for anything else. */
int gpuc_gelu_tanh(const Node *n);

/* BitShift's attribute direction (required): 1 for "LEFT", 0 for
 * "RIGHT", -1 for anything else or none. */
int gpuc_bitshift_left(const Node *n);

#endif
