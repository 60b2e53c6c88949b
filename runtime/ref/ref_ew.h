/* The elementwise engine shared by ref_unary.c, ref_binary.c and
 * ref_cast.c (defined in ref_binary.c).
 *
 * Kernels work on rows of at most EW_BLOCK elements: ew_for_rows walks the
 * output in row-major order, with the broadcast inputs' element offsets, and
 * a row function loads the inputs into a compute buffer, computes, and
 * stores. Compute domains: double for float dtypes (f16/bf16/f32 values are
 * exact in double, and + - * / of two f32 rounded back to f32 equals the f32
 * operation), int64 for integers and bool (u64 as its bit pattern: ops that
 * care about the sign take an 'uns' flag). */
#ifndef GPUC_REF_EW_H
#define GPUC_REF_EW_H
#include "ref_util.h"
#include "infer_elementwise.h"

#define EW_BLOCK 512

/* One row: n output elements from element out_off; input k's elements are
 * at in_off[k] + i * in_step[k] (in_step is 0 for an input broadcast along
 * the row, else 1). */
typedef void (*EwRowFn)(void *ud, int64_t n, int64_t out_off, const int64_t *in_off,
                        const int64_t *in_step);

/* Call fn over all of out, ins[0..nin) broadcast to out's shape (numpy).
 * Fails with a message if an input does not broadcast, or out of memory. */
int ew_for_rows(OpCtx *c, int nin, const Tensor *const *ins, const Tensor *out, EwRowFn fn,
                void *ud);

/* Row loads (n elements from off with step 0 or 1) and stores (n elements
 * from off). */
void ew_load_f(const Tensor *t, int64_t off, int64_t step, int64_t n, double *buf);
void ew_load_i(const Tensor *t, int64_t off, int64_t step, int64_t n, int64_t *buf);
/* double -> t->dt: f16/bf16 rounded once (to nearest even) from the double;
 * integers by C truncation toward zero, saturating at the int64 range and
 * wrapping into narrower types; NaN -> 0; bool: v != 0. */
void ew_store_f(Tensor *t, int64_t off, int64_t n, const double *buf);
/* int64 -> t->dt: narrower integers wrap; bool: v != 0; floats from the
 * signed value, or the unsigned one when uns (buf holds u64 bit patterns). */
void ew_store_i(Tensor *t, int64_t off, int64_t n, const int64_t *buf, bool uns);

static inline bool ew_is_float(GpucDType dt) { return gpuc_dtype_is_float(dt); }
#endif
