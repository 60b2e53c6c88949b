/* L2NormRows' geometry (internal op, ir/ops.def), shared by its shape
 * inference (ir/infer_l2norm.c), its reference kernel
 * (runtime/ref/ref_l2norm.c) and its lowering (codegen/lower_l2norm.c),
 * so all three read X the same way. */
#ifndef GPUC_L2NORM_H
#define GPUC_L2NORM_H
#include "ir.h"

typedef struct L2NormGeom {
  int rank;                      /* Y's */
  int64_t dims[GPUC_MAX_RANK];   /* Y's */
  int64_t off;                   /* X's element offset of Y's element 0 */
  int64_t xs[GPUC_MAX_RANK];     /* X's element stride along Y's axis k */
  int64_t rows, d;               /* Y viewed [rows, d]: d is Y's last dim */
  double eps;
} L2NormGeom;

/* Checks X (float, shape known), Scale (X's dtype, broadcasting to Y with
 * last dim 1), epsilon (finite, >= 0) and view/dims (every element of the
 * view inside X) and fills *r; fails through gpuc_op_fail naming the node
 * and the reason. */
int gpuc_l2norm_geom(OpCtx *c, L2NormGeom *r);
#endif
