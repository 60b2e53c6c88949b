/* Geometry shared by the NN-family shape inference (ir/infer_nn.c) and the
 * reference kernels (runtime/ref/ref_conv.c, ref_pool.c, ref_resize.c): both
 * sides call the same functions so the kernel computes exactly the shape
 * inference promised. Every function validates attributes and shapes and
 * fails through gpuc_op_fail with a reason. */
#ifndef GPUC_INFER_NN_H
#define GPUC_INFER_NN_H
#include "infer_util.h"

#define NN_MAX_SP (GPUC_MAX_RANK - 2) /* spatial dims of an [N, C, D1..] tensor */
/* Largest single dim or attribute value (kernel, stride, pad...) accepted;
 * beyond it products of a few values could overflow int64. */
#define NN_DIM_LIMIT ((int64_t)1 << 40)

/* A sliding window over the spatial dims of an [N, C, D1..Dn] tensor.
 * For Conv/pools `in` is X's spatial shape and `out` Y's; for ConvTranspose
 * `in` is X's and `out` Y's too, but the window runs from Y to X. Unknown
 * dims (import time) are -1; pads are -1 when they depend on unknown dims. */
typedef struct NnWindow {
  int nsp;                             /* number of spatial dims, >= 1 */
  int64_t n, c_in, c_out, group;       /* batch, channels in/out, groups */
  int64_t in[NN_MAX_SP], out[NN_MAX_SP];
  int64_t k[NN_MAX_SP];                /* kernel extent (taps, not dilated) */
  int64_t stride[NN_MAX_SP], dil[NN_MAX_SP];
  int64_t pad_b[NN_MAX_SP], pad_e[NN_MAX_SP]; /* begin/end padding */
  bool ceil_mode;                      /* pools only */
} NnWindow;

/* Conv: X [N, C, D..], W [M, C/group, k..], optional B [M]. */
int nn_conv_window(OpCtx *c, NnWindow *w);
/* ConvTranspose: X [N, C, D..], W [C, M/group, k..], optional B [M].
 * pad_e may be negative: the output then extends past the last tap. */
int nn_convt_window(OpCtx *c, NnWindow *w);
/* AveragePool / MaxPool: X [N, C, D..], kernel_shape required. */
int nn_pool_window(OpCtx *c, NnWindow *w);
/* ConvGradInput / ConvGradWeight (X, W, dY): the forward Conv's window,
 * dY checked against it (ir/infer_train_nn.c). */
int nn_conv_grad_window(OpCtx *c, NnWindow *w);
/* MaxPool with attribute layout 1 (passes/layout_nhwc.c): X, Y [N,H,W,C],
 * 2-D, no Indices; nn_pool_window then describes the NCHW view. */
bool nn_pool_nhwc(const OpCtx *c);

/* Resize / Upsample parameters. */
typedef enum { NN_RS_NEAREST, NN_RS_LINEAR, NN_RS_CUBIC } NnResizeMode;
typedef enum {
  NN_CT_HALF_PIXEL, NN_CT_HALF_PIXEL_SYMMETRIC, NN_CT_PYTORCH_HALF_PIXEL,
  NN_CT_ALIGN_CORNERS, NN_CT_ASYMMETRIC, NN_CT_TF_HALF_PIXEL_FOR_NN,
  NN_CT_TF_CROP_AND_RESIZE
} NnCoordMode;
typedef enum {
  NN_NR_ROUND_PREFER_FLOOR, NN_NR_ROUND_PREFER_CEIL, NN_NR_FLOOR, NN_NR_CEIL,
  NN_NR_SIMPLE /* Upsample and Resize-10: truncate, or ceil when downsampling */
} NnNearestMode;

typedef struct NnResize {
  int rank;
  int64_t out[GPUC_MAX_RANK];          /* -1 when scales/sizes are unknown */
  double scale[GPUC_MAX_RANK];         /* coordinate scale per axis (out/in) */
  double length[GPUC_MAX_RANK];        /* resized length in * scale, unfloored */
  double roi_start[GPUC_MAX_RANK], roi_end[GPUC_MAX_RANK];
  NnResizeMode mode;
  NnCoordMode coord;
  NnNearestMode nearest;
  double cubic_a, extrapolation;
  bool exclude_outside, antialias;
} NnResize;

/* Fill p for a Resize or Upsample node. Returns 0 when the output shape is
 * known, 1 when it depends on data not known yet (import), -1 on error. */
int nn_resize_params(OpCtx *c, NnResize *p);

/* Most multiply-adds (or window taps) one reference kernel call may do:
 * an untrusted model with a huge padded kernel would otherwise run for
 * days rather than fail. About 30 s of Conv at reference speed. */
#define NN_MAX_WORK 1e12

/* Bytes one intermediate buffer of a reference kernel may use. */
#define NN_SCRATCH_BYTES ((int64_t)64 << 20)

/* Resize taps of one axis: output index o reads idx/w[first[o] ..
 * first[o+1]); outside[o] marks tf_crop_and_resize extrapolation. At most
 * max_taps taps in all. */
typedef struct NnAxisTaps {
  int64_t *first, *idx;
  double *w;
  bool *outside;
} NnAxisTaps;
int nn_resize_taps(OpCtx *c, const NnResize *p, int d, int64_t in, int64_t max_taps, NnAxisTaps *t);
void nn_free_taps(NnAxisTaps *t);

/* GroupNormalization's num_groups, checked against X [N, C, ...] (C a
 * multiple of it); shared with the reference and the lowering. */
int gpuc_group_norm_groups(OpCtx *c, int64_t *groups);

#endif
