/* RotaryEmbedding-23's geometry, shared by its shape inference
 * (ir/infer_rotary.c), its reference kernel (runtime/ref/ref_rotary.c)
 * and its expansion into primitive ops at import
 * (frontend/onnx_rotary.c). */
#ifndef GPUC_ROTARY_H
#define GPUC_ROTARY_H
#include "ir.h"

typedef struct RotaryGeom {
  int rank;        /* X's: 3 [B, S, H*D] or 4 [B, H, S, D] */
  int64_t B, S, H, D; /* -1 where not known yet (symbolic dims at import) */
  int64_t partial; /* attribute rotary_embedding_dim: 0 rotates the whole head */
  int64_t rot;     /* features rotated per head: partial, or D (-1 if D unknown) */
  bool interleaved; /* pairs (2i, 2i+1) instead of halves (i, i + rot/2) */
  bool has_pos;    /* position_ids given: caches [max_pos, rot/2], else [B, S, rot/2] */
} RotaryGeom;

/* Checks the node's attributes and the shapes of X, cos_cache, sin_cache
 * and position_ids (where known) against each other and fills *r; fails
 * through gpuc_op_fail naming the node and the reason. */
int gpuc_rotary_geom(OpCtx *c, RotaryGeom *r);
/* RotaryHalf (internal, ir/ops.def): checks X, Cos, Sin and the attribute
 * perm, and gives Y's dims (X's, permuted by perm when given); fails
 * through gpuc_op_fail naming the node and the reason. */
int gpuc_rotary_half_shape(OpCtx *c, int64_t dims[GPUC_MAX_RANK]);
/* RotaryHalf node n on X (checked): xs[k] is X's element stride along Y's
 * axis k, X read through n's perm when it has one */
void gpuc_rotary_half_strides(const Node *n, const Tensor *x, int64_t xs[GPUC_MAX_RANK]);
#endif
