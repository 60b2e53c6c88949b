/* Geometry of ReverseSequence, MaxUnpool, Col2Im and CenterCropPad, shared
 * by their shape inference (ir/infer_rearrange.c), reference kernels
 * (runtime/ref/ref_rearrange.c) and GPU lowerings (codegen/
 * lower_rearrange.c), so all three agree on every shape. Each plan
 * function validates attributes and shapes and fails through gpuc_op_fail
 * naming the node; the *_plan functions return 0 when the output shape is
 * known, 1 when it depends on data not known yet (import), -1 on error. */
#ifndef GPUC_REARRANGE_H
#define GPUC_REARRANGE_H
#include "infer_util.h"

#define RA_MAX_SP (GPUC_MAX_RANK - 2) /* spatial dims of [N, C, D1..] */

/* ReverseSequence: attributes batch_axis and time_axis, one 0 and one 1. */
int gpuc_revseq_axes(OpCtx *c, int *batch_axis, int *time_axis);

/* MaxUnpool(X [N, C, D..], I, output_shape?): idims, the unpooled shape
 * [N, C, (D - 1) * stride + kernel - pad_b - pad_e] (pads taken as 0 when
 * output_shape is given), which I's values index flat; ydims, Y's shape:
 * output_shape (no dim smaller than idims'), else idims. The unpooled
 * block sits at Y's origin, the rest of Y is 0. */
int gpuc_maxunpool_plan(OpCtx *c, int64_t *ydims, int64_t *idims);

/* Col2Im(input [N, C * prod(block), L], image_shape, block_shape): Y is
 * [N, C, image...]; block b at position l (of blocks[] per dim, L in all)
 * adds to image position l * stride - pad_b + b * dil. */
typedef struct Col2ImPlan {
  int nsp;
  int64_t n, c, kprod, L;
  int64_t image[RA_MAX_SP], block[RA_MAX_SP], blocks[RA_MAX_SP];
  int64_t stride[RA_MAX_SP], dil[RA_MAX_SP], pad_b[RA_MAX_SP], pad_e[RA_MAX_SP];
} Col2ImPlan;
int gpuc_col2im_plan(OpCtx *c, Col2ImPlan *p);

/* CenterCropPad(X, shape, axes?): Y's dims, and per dim the offset with
 * Y[i] = X[i + shift] (shift > 0 crops, < 0 pads; outside X: zero). */
int gpuc_ccp_plan(OpCtx *c, int64_t *ydims, int64_t *shift);
#endif
