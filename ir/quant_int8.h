/* The int8 rule of --int8 (passes/quantize_int8.c), in one place: the pass
 * quantizes weights with it at compile time, the reference kernels
 * (runtime/ref/ref_int8.c) quantize activations with it, and the generated
 * kernels (codegen/lower_int8.c) emit the same steps in CUDA, so the GPU's
 * int8 values, and so its int32 accumulations, equal the reference's.
 *
 * Symmetric, over one row (a token's features, or a weight's output
 * channel), all in f32:
 *   absmax = max |x| over the row, from 0 (fmaxf: a NaN is skipped)
 *   scale  = absmax / 127, or 1 when absmax is 0          (x ~ q * scale)
 *   inv    = 127 / absmax, or 0 when absmax is 0
 *   q      = clamp(rint(x * inv), -127, 127)               (round half to even;
 *            fmaxf then fminf, so NaN -> -127; -128 is never used)
 * Two correctly rounded divisions and one multiply (never contracted: no
 * add follows it), so any IEEE f32 machine gets the same bits. */
#ifndef GPUC_QUANT_INT8_H
#define GPUC_QUANT_INT8_H
#include <math.h>
#include <stdint.h>
#include "ir.h"

#define GPUC_Q8_MAX 127
/* int32 holds K * 127 * 127 exactly up to this reduction length. */
#define GPUC_Q8_MAX_K ((int64_t)2147483647 / (127 * 127))

static inline float gpuc_q8_scale(float absmax) { return absmax > 0.0f ? absmax / 127.0f : 1.0f; }
static inline float gpuc_q8_inv(float absmax) { return absmax > 0.0f ? 127.0f / absmax : 0.0f; }
static inline int8_t gpuc_q8(float x, float inv) {
  float r = rintf(x * inv);
  return (int8_t)fminf(fmaxf(r, -127.0f), 127.0f);
}
/* DequantizeRows' output dtype (attribute `to`), GPUC_DT_UNDEF if not a
 * float type (ir/infer_int8.c). */
GpucDType gpuc_dequantize_rows_dtype(const Node *n);
#endif
