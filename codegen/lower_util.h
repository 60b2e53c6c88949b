/* Helpers for lowerings: generic kernel shapes every op family reuses. */
#ifndef GPUC_LOWER_UTIL_H
#define GPUC_LOWER_UTIL_H
#include "codegen.h"
#include "infer_util.h"
#include "device_fault.h"

/* OpCtx view of a LowerCtx (inputs and outputs included), for
 * gpuc_op_fail and the shared shape helpers of ir/ (windows, axes...). */
#define LOWER_OPCTX(c)                                                                     \
  (&(OpCtx){.g = (c)->g, .n = (c)->n, .nin = (c)->nin, .nout = (c)->nout, .in = (c)->in, \
            .out = (Tensor **)(c)->out, .err = (c)->err})
#define lower_fail(c, ...) gpuc_op_fail(LOWER_OPCTX(c), __VA_ARGS__)
#define lower_unsupported(c, ...) gpuc_op_unsupported(LOWER_OPCTX(c), __VA_ARGS__)

/* Wider vectors mean fewer threads: a copy kernel keeps at least this
 * many items (two blocks of 256 on each of an H200's 132 SMs) before it
 * moves wider words. On the H200, RotaryHalf in 16-byte vectors at
 * LLaMA batch 1 (4096 threads, 16 blocks) made the plan 5% slower. */
enum { CG_MIN_VEC_ITEMS = 2 * 256 * 132 };
/* CG_MIN_VEC_ITEMS, or GPUC_MIN_VEC_ITEMS from the environment (the host
 * tests set 1 so their small cases take the vector kernels) */
int64_t cg_min_vec_items(void);

/* The type elementwise math runs in for dtype dt: "double" for f64,
 * "long long" for integers (exact), "float" for f32/f16/bf16 and bool. */
const char *cg_compute_type(GpucDType dt);
bool is_flt(GpucDType dt); /* f32, f16, bf16 or f64 */
/* Expression reading element `idx` (a C expression) of argument `arg` of
 * dtype dt as compute type ct: handles __half/bf16 loads. */
void cg_load(StrBuf *b, const char *ct, GpucDType dt, const char *arg, const char *idx);
/* Expression storing compute-type value `val` as dtype dt. */
void cg_store(StrBuf *b, GpucDType dt, const char *dst, const char *idx, const char *ct, const char *val);

/* One thread per output element of out[0]: x0..x{n-1} are the present
 * inputs (numpy-broadcast to the output shape) loaded as type `ct`, and
 * `expr` (an expression in x0.., of type ct or convertible) is stored into
 * out[0]. `pre` is optional code placed before the expression (may be
 * NULL). Inputs listed in `which` (indices into c->in) are used, in order. */
int cg_elementwise(LowerCtx *c, const int *which, int nwhich, const char *ct, const char *pre,
                   const char *expr);
/* The tensor-core helpers (mma16816<T>, pack2<T>, ldsm_x4*, cp_async16,
 * cp_async_commit/wait), put into the module once (codegen/lower_attention.c). */
void mma_helpers(StrBuf *b);
/* Element strides, per dim of a rank-yrank shape, of a row-major tensor of
 * dims tdims[0..trank) broadcast to it (numpy, right-aligned): 0 where it
 * has no such dim or a dim of 1. */
void cg_bcast_strides(int trank, const int64_t *tdims, int yrank, int64_t *st);
/* Unsigned integer type of dt's width: what byte-moving kernels copy. */
const char *cg_bits_type(GpucDType dt);
/* Bit pattern of the element at p (of dt's width), for baked literals. */
unsigned long long cg_elem_bits(GpucDType dt, const void *p);
/* Byte copy of in[i] into out[o] (same element count and dtype). */
int cg_copy(LowerCtx *c, uint32_t src, uint32_t dst, uint64_t bytes);
/* A float literal that round-trips (e.g. "1.00000001e-05f"). */
void cg_float_lit(char *buf, size_t n, double v, const char *ct);
/* Data-dependent errors (runtime/device_fault.h): puts the device error
 * record and gpuc_fault_report() into the module (once), and returns the
 * step number the next launch gets. Call it just before emitting the
 * kernel that reports, after any earlier launch of the node; the kernel
 * calls `gpuc_fault_report(step, GPUC_FAULT_*, value, pos, bound, axis)`
 * where the reference would fail, and never touches memory out of range. */
unsigned cg_fault_step(LowerCtx *c);
/* BatchNormalization in training mode (codegen/lower_train_nn.c); its
 * inference mode stays in lower_norm.c, which dispatches here. */
int lower_bn_training(LowerCtx *c);
/* FusedConv's activation (ir/conv_act.h; input: its in_activation) of
 * float variable v as a float expression into buf; -1 for an unknown code
 * (codegen/lower_dwconv.c). */
int cg_conv_act_expr(char *buf, size_t cap, const Node *n, bool input, const char *v);
/* An NHWC depthwise FusedConv as one generated kernel with bias, residual
 * and activation (codegen/lower_dwconv.c): 0 done, 1 not its case (the
 * caller uses cuDNN), -1 error. pb: begin pads, st / dil: strides and
 * dilations of the two spatial dims. */
int cg_dwconv_nhwc(LowerCtx *c, const int64_t *pb, const int64_t *st, const int64_t *dil);
/* An NHWC grouped FusedConv with 2..32 channels a group, as one generated
 * kernel (codegen/lower_gconv.c); returns and arguments as cg_dwconv_nhwc. */
int cg_gconv_nhwc(LowerCtx *c, const int64_t *pb, const int64_t *st, const int64_t *dil);
/* The conv row kernels' end (lower_dwconv.c, lower_gconv.c): output pixel
 * t's V channels at offset o from float acc[t][0..V) (+ Z's), activation
 * `act` of v, one vector store; closes the pixel loop, the item loop and
 * the kernel. */
void cg_conv_rows_store(StrBuf *b, const char *t, int V, bool z, const char *act);
/* A conv kernel's re-laid-out weights and bias as plan weights named
 * "<node>.<wname>" / "<node>.<bname>" in *tw / *tb; frees both tensors'
 * data. 0, or -1 (out of memory, reported). */
int cg_conv_weights(LowerCtx *c, Tensor *wt, const char *wname, Tensor *bt, const char *bname, uint32_t *tw,
                    uint32_t *tb);
/* A conv kernel's arguments (x, weights tw, bias tb, [z,] y): their count. */
int cg_conv_args(const LowerCtx *c, uint32_t tw, uint32_t tb, bool z, uint32_t args[5]);
/* An NHWC GlobalAveragePool [N,H,W,C] -> [N,1,1,C] (codegen/lower_se.c). */
int cg_gap_nhwc(LowerCtx *c);
/* InstanceNormalization c->n (inputs X [N,C,S..], scale, B; no output)
 * on the split path (codegen/lower_norm.c): only its statistics kernels,
 * which leave y = x * a[r] + b[r] (r = the plane, n * C + c) to the
 * caller, a and b in f32 scratch tensors *ta, *tb of *rows elements (an
 * elementwise group's first term, codegen/lower_fused.c). 1: not the split
 * path (nothing emitted), -1 error. */
int cg_instance_norm_stats(LowerCtx *c, int64_t *rows, uint32_t *ta, uint32_t *tb);
/* An NHWC 1x1 FusedConv (stride 1, no pads, one group, no residual, half)
 * as one cuBLASLt GEMM with the bias (and Relu) in its epilogue
 * (codegen/lower_se.c): 0 done, 1 not its case, -1 error. */
int cg_conv1x1_nhwc_gemm(LowerCtx *c, const int64_t *pb, const int64_t *pe, const int64_t *st, const int64_t *dil);
/* The taps of a pooling window inside X (codegen/lower_pool.c): loops,
 * bounds and "i64 off"; returns the innermost indentation. */
struct NnWindow;
int cg_window_taps(StrBuf *b, const struct NnWindow *w, const int64_t *rs, int64_t mul);
#endif
