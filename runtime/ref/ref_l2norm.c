/* L2NormRows (internal, ir/ops.def; passes/fuse_l2norm.c makes it): for
 * each row of Y's last axis, y = x / max(||x||_2, epsilon) * scale, X read
 * through the node's view (ir/l2norm.h). Sums and the quotient in double,
 * one rounding to Y's dtype on store. */
#include "ref.h"
#include "ref_util.h"
#include "l2norm.h"
#include <math.h>
#include <stdlib.h>

int ref_L2NormRows(OpCtx *c) {
  const Tensor *x = c->in[0], *s = c->nin > 1 ? c->in[1] : NULL;
  Tensor *y = c->out[0];
  L2NormGeom r;
  if (gpuc_l2norm_geom(c, &r)) return -1;
  if (r.rows == 0 || r.d == 0) return 0;
  int64_t *smap = s ? ref_bcast_map(s, y) : NULL;
  if (s && !smap) return gpuc_op_fail(c, "out of host memory");
  for (int64_t row = 0; row < r.rows; row++) {
    int64_t rest = row, xo = r.off; /* X's offset of the row's first element */
    for (int k = r.rank - 2; k >= 0; k--) { xo += (rest % r.dims[k]) * r.xs[k]; rest /= r.dims[k]; }
    int64_t step = r.xs[r.rank - 1];
    double sq = 0;
    for (int64_t j = 0; j < r.d; j++) sq += ref_ld(x, xo + j * step) * ref_ld(x, xo + j * step);
    double n = fmax(sqrt(sq), r.eps), sc = s ? gpuc_get_f64(s, smap[row * r.d]) : 1.0;
    for (int64_t j = 0; j < r.d; j++) ref_st(y, row * r.d + j, ref_ld(x, xo + j * step) / n * sc);
  }
  free(smap);
  return 0;
}
