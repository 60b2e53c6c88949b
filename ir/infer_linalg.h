/* Helpers shared by the inference (ir/infer_linalg.c) and the reference
 * kernels (runtime/ref/ref_linalg.c, ref_einsum.c) of MatMul, MatMulInteger,
 * Gemm and Einsum. */
#ifndef GPUC_INFER_LINALG_H
#define GPUC_INFER_LINALG_H
#include "infer_util.h"

/* numpy matmul shape of a @ b into y's rank/dims (dtype untouched): 1-D a
 * is [1,K] and 1-D b is [K,1] with that 1 dropped from the result; batch
 * dims broadcast. Fails on rank 0 or an inner-dim mismatch. */
int gpuc_matmul_shape(OpCtx *c, const Tensor *a, const Tensor *b, Tensor *y);

/* Einsum, parsed against the input shapes. Labels are numbered: first the
 * broadcast ellipsis dims (0..nell), then the letters in ASCII order. */
#define GPUC_EINSUM_MAX_LABELS (52 + GPUC_MAX_RANK)
typedef struct GpucEinsum {
  int nin;
  int nlab;                              /* labels used */
  int nell;                              /* dims the ellipsis stands for */
  int64_t dim[GPUC_EINSUM_MAX_LABELS];   /* size of each label, -1 unknown */
  int (*in_lab)[GPUC_MAX_RANK];          /* [nin]: label of each input axis */
  int out_rank;
  int out_lab[GPUC_MAX_RANK];            /* label of each output axis */
} GpucEinsum;

/* Parse and check the equation against the inputs (count, ranks, label
 * sizes). On success the caller frees with gpuc_einsum_free. */
int gpuc_einsum_parse(OpCtx *c, GpucEinsum *es);
void gpuc_einsum_free(GpucEinsum *es);

/* Attention (ir/infer_attention.c). Its geometry: sizes, and per tensor
 * (0 Q, 1 K, 2 V, 3 Y) the element offset and the element strides of its
 * b, h and s axes (d is contiguous). By default Q, K, V and Y are stored
 * [B,H,S,D], or [B,S,H,D] where attribute bshd says so. With attributes
 * `view` (12 ints: offset, stride_b, stride_h, stride_s of Q, K, V) and
 * `dims` (6 ints: B, H, Sq, Sk, D, Dv) Q, K and V are strided views of
 * whatever tensors the node reads (passes/attention_views.c: slices of one
 * [B,S,3,H,D] QKV GEMM output, no copies), each checked to lie inside its
 * tensor. Attribute `y_perm` (4 ints, last 3) stores Y as that permutation
 * of [B,H,Sq,Dv] (it overrides bshd[3]). -1 when the ranks, sizes or
 * views do not fit together. */
typedef struct GpucAttnGeom {
  int64_t B, H, Sq, Sk, D, Dv;
  int64_t Hk; /* K and V heads: H, or a divisor of H (grouped-query heads: head h reads K/V head h / (H / Hk)) */
  bool bshd[4];
  int64_t off[4];
  int64_t st[4][3];
  int ydims_perm[4]; /* Y's stored axes as logical axes (0 b, 1 h, 2 s, 3 d) */
  int64_t mask_period; /* attribute mask_period: batch b reads mask batch b % P; 0: none (plain broadcast) */
} GpucAttnGeom;
int gpuc_attention_geom(const Node *n, const Tensor *q, const Tensor *k, const Tensor *v, GpucAttnGeom *a);
/* the mask's element strides over [B,H,Sq,Sk] (0 where it broadcasts) */
void gpuc_attention_mask_strides(const Tensor *mask, int64_t st[4]);
/* What the GPU kernels (codegen/lower_attention.c) handle, so
 * passes/fuse_attention.c fuses only what can be lowered: f32/f16/bf16 Q,
 * K, V of static shapes, head sizes D and Dv in 1..GPUC_ATTN_MAX_HEAD, and
 * a float mask (any float dtype, or NULL) that broadcasts to [B,H,Sq,Sk]. */
#define GPUC_ATTN_MAX_HEAD 128
bool gpuc_attention_lowerable(const GpucAttnGeom *a, const Tensor *q, const Tensor *k, const Tensor *v,
                              const Tensor *mask);

#endif
