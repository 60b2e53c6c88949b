/* FusedConv's attribute `activation`: the function applied to conv + bias
 * (+ Z) before the store. 0 and 1 are cuDNN's (its fused call takes Relu);
 * the others come from passes/fuse_conv.c's activation fusion into NHWC
 * depthwise convolutions (codegen/lower_dwconv.c), whose kernel applies
 * them in registers. Where cuDNN runs such a convolution instead, one
 * generated kernel adds the bias and applies the activation after it.
 * Clip takes attributes act_min / act_max (floats; Relu6 is Clip(0, 6)).
 * Attribute `in_activation` (the same codes; Clip's bounds in_act_min /
 * in_act_max) is applied to X's elements before the convolution: the
 * padding is of the activated input, so it stays zero. The depthwise
 * kernel applies it as it loads X; elsewhere one kernel writes the
 * activated X first.
 * The reference (runtime/ref/ref_conv.c) and the kernels use the formulas
 * below; the elementwise ops they replace compute the same functions. */
#ifndef GPUC_CONV_ACT_H
#define GPUC_CONV_ACT_H
#include <math.h>

enum {
  GPUC_FCONV_ACT_NONE = 0,
  GPUC_FCONV_ACT_RELU = 1,
  GPUC_FCONV_ACT_CLIP = 2,      /* min(max(v, act_min), act_max) */
  GPUC_FCONV_ACT_HARDSWISH = 3, /* v * clamp(v / 6 + 1/2, 0, 1) */
  GPUC_FCONV_ACT_SILU = 4,      /* v * sigmoid(v) */
  GPUC_FCONV_ACT_GELU = 5,      /* v * Phi(v), Phi by erf */
  GPUC_FCONV_ACT_MISH = 6,      /* v * tanh(softplus(v)), softplus without overflow */
  GPUC_FCONV_ACT_COUNT
};

static inline double gpuc_conv_act_ref(int act, double v, double lo, double hi) {
  switch (act) {
  case GPUC_FCONV_ACT_RELU: return v < 0 ? 0 : v;
  case GPUC_FCONV_ACT_CLIP: return v < lo ? lo : v > hi ? hi : v;
  case GPUC_FCONV_ACT_HARDSWISH: return v * fmax(0.0, fmin(1.0, v / 6 + 0.5));
  case GPUC_FCONV_ACT_SILU: return v >= 0 ? v / (1 + exp(-v)) : v * exp(v) / (1 + exp(v));
  case GPUC_FCONV_ACT_GELU: return 0.5 * v * (1 + erf(v * 0.7071067811865476));
  case GPUC_FCONV_ACT_MISH: return v * tanh(v > 0 ? v + log1p(exp(-v)) : log1p(exp(v)));
  default: return v;
  }
}
#endif
