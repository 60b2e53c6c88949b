/* L2NormRows (internal, ir/ops.def): shape inference and the geometry its
 * reference kernel and lowering share (ir/l2norm.h). */
#include "l2norm.h"
#include <math.h>

typedef long long ll;

int gpuc_l2norm_geom(OpCtx *c, L2NormGeom *r) {
  const Tensor *x = c->in[0];
  if (!x || !gpuc_dtype_is_float(x->dt) || x->rank < 1)
    return gpuc_op_fail(c, "X must be a float tensor of rank >= 1");
  if (!gpuc_shape_known(x)) return gpuc_op_fail(c, "X's shape must be known");
  r->eps = gpuc_attr_f(c->n, "epsilon", 0.f);
  if (!(r->eps >= 0) || isinf(r->eps)) return gpuc_op_fail(c, "epsilon %g is not a finite value >= 0", r->eps);
  const int64_t *view, *dims;
  int nv = gpuc_attr_ints(c->n, "view", &view), nd = gpuc_attr_ints(c->n, "dims", &dims);
  if (nv < 0 && nd < 0) { /* X as it is stored */
    r->rank = x->rank;
    r->off = 0;
    int64_t st = 1;
    for (int k = x->rank - 1; k >= 0; k--) {
      r->dims[k] = x->dims[k];
      r->xs[k] = st;
      st *= x->dims[k];
    }
  } else {
    if (nd < 1 || nd > GPUC_MAX_RANK || nv != nd + 1)
      return gpuc_op_fail(c, "view must hold an offset and one stride for each of the %d dims", nd);
    r->rank = nd;
    r->off = view[0];
    int64_t last = view[0], xn = gpuc_numel(x);
    if (r->off < 0) return gpuc_op_fail(c, "view offset %lld is negative", (ll)r->off);
    for (int k = 0; k < nd; k++) {
      r->dims[k] = dims[k];
      r->xs[k] = view[k + 1];
      if (dims[k] < 1 || dims[k] > xn || view[k + 1] < 0 || view[k + 1] > xn)
        return gpuc_op_fail(c, "view axis %d: extent %lld, stride %lld do not fit X's %lld elements", k,
                            (ll)dims[k], (ll)view[k + 1], (ll)xn);
      last += (dims[k] - 1) * view[k + 1];
    }
    if (last >= xn)
      return gpuc_op_fail(c, "view reads element %lld of X, which has %lld", (ll)last, (ll)xn);
  }
  r->d = r->dims[r->rank - 1];
  r->rows = 1;
  for (int k = 0; k + 1 < r->rank; k++) r->rows *= r->dims[k];
  const Tensor *s = c->nin > 1 ? c->in[1] : NULL;
  if (s) {
    if (s->dt != x->dt)
      return gpuc_op_fail(c, "Scale is %s, X is %s", gpuc_dtype_name(s->dt), gpuc_dtype_name(x->dt));
    if (!gpuc_shape_known(s) || s->rank > r->rank || (s->rank && s->dims[s->rank - 1] != 1))
      return gpuc_op_fail(c, "Scale must have one value a row (last dim 1) and broadcast to Y");
    for (int k = 0; k < s->rank; k++) {
      int64_t sd = s->dims[k], yd = r->dims[r->rank - s->rank + k];
      if (sd != 1 && sd != yd)
        return gpuc_op_fail(c, "Scale's dim %d (%lld) does not broadcast to %lld", k, (ll)sd, (ll)yd);
    }
  }
  return 0;
}

int infer_L2NormRows(OpCtx *c) {
  L2NormGeom r;
  if (gpuc_l2norm_geom(c, &r)) return -1;
  if (c->out[0]) gpuc_set_shape(c->out[0], c->in[0]->dt, r.rank, r.dims);
  return 0;
}
