/* Conv kernels shared between the forward (ref_conv.c) and the training ops
 * (ref_train_nn.c), and visible to tests/unit/test_conv_grad.c.
 *
 * Layouts, as ONNX Conv: X [N, C, in..], W [M, C/group, k..], dY [N, M, out..];
 * NnWindow (infer_nn.h) holds the geometry, offsets fit in int32 (the caller
 * checks prod(in), prod(out) <= INT32_MAX). */
#ifndef GPUC_REF_CONV_H
#define GPUC_REF_CONV_H
#include "ref_util.h"
#include "infer_nn.h"

/* Fast path, im2col + ref_sgemm / ref_dgemm, per image and group:
 *   dW_g[Mg, Cg*K] = sum_n dY_g[Mg, P] x col(X_g)[Cg*K, P]^T
 *   col[Cg*K, P]   = W_g[Mg, Cg*K]^T x dY_g[Mg, P]; dX_g = col2im(col)
 * dX / dW are overwritten. f32 sums in f32 (blocked), f64 in f64.
 * Return -1 only when out of host memory. */
int ref_conv_grad_input_f32(const NnWindow *w, const float *wt, const float *dy, float *dx);
int ref_conv_grad_input_f64(const NnWindow *w, const double *wt, const double *dy, double *dx);
int ref_conv_grad_weight_f32(const NnWindow *w, const float *x, const float *dy, float *dw);
int ref_conv_grad_weight_f64(const NnWindow *w, const double *x, const double *dy, double *dw);

/* Plain loops (any float dtype, sums in f64): the fallback, and the
 * reference the fast path is tested against. Return -1 when out of memory. */
int ref_conv_grad_input_loops(const NnWindow *w, const Tensor *wt, const Tensor *dy, Tensor *dx);
int ref_conv_grad_weight_loops(const NnWindow *w, const Tensor *x, const Tensor *dy, Tensor *dw);
#endif
