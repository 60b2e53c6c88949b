/* Shape inference of the internal training ops of the transformer rules
 * (passes/grad_rules_tf.c). */
#include "infer_util.h"

/* GatherGrad(dy, indices, shape [R] int64) -> `shape`, dy's dtype. dy has
 * shape[:axis] + indices.shape + shape[axis+1:]. */
int infer_GatherGrad(OpCtx *c) {
  static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64,
                                 GPUC_DT_UNDEF};
  static const GpucDType it[] = {GPUC_DT_I32, GPUC_DT_I64, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, ft) || gpuc_check_dtype(c, 1, it)) return -1;
  const Tensor *dy = c->in[0], *ind = c->in[1], *s = c->in[2];
  if (s->dt != GPUC_DT_I64 || s->rank != 1) return gpuc_op_fail(c, "shape must be a 1-D int64");
  int64_t dims[GPUC_MAX_RANK];
  int r;
  if (s->data) {
    if ((r = gpuc_read_ints(c, 2, dims, GPUC_MAX_RANK)) < 0) return -1;
    for (int d = 0; d < r; d++)
      if (dims[d] < 0) return gpuc_op_fail(c, "shape has negative dim %lld", (long long)dims[d]);
  } else {
    if (s->dims[0] < 0) return gpuc_infer_unknown(c, 0, dy->dt);
    if (s->dims[0] > GPUC_MAX_RANK) return gpuc_op_fail(c, "shape has too many dims");
    r = (int)s->dims[0];
    for (int d = 0; d < r; d++) dims[d] = -1;
  }
  if (r < 1) return gpuc_op_fail(c, "data must have rank >= 1");
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  if (dy->rank >= 0 && ind->rank >= 0) {
    if (dy->rank != r - 1 + ind->rank)
      return gpuc_op_fail(c, "dy has rank %d, expected %d", dy->rank, r - 1 + ind->rank);
    for (int d = 0; d < dy->rank; d++) {
      int64_t want = d < axis ? dims[d] : d < axis + ind->rank ? ind->dims[d - axis]
                                                                : dims[d - ind->rank + 1];
      if (want >= 0 && dy->dims[d] >= 0 && want != dy->dims[d])
        return gpuc_op_fail(c, "dy dim %d is %lld, expected %lld", d, (long long)dy->dims[d],
                            (long long)want);
    }
  }
  gpuc_set_shape(c->out[0], dy->dt, r, dims);
  return 0;
}

/* DropoutTrain(X float, counter int64 [2]) -> Y like X, mask? bool of X's
 * shape. The ratio attribute must be in [0, 1): 1 would scale by 1/0. */
int infer_DropoutTrain(OpCtx *c) {
  static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64,
                                 GPUC_DT_UNDEF};
  static const GpucDType it[] = {GPUC_DT_I64, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, ft) || gpuc_check_dtype(c, 1, it)) return -1;
  const Tensor *x = c->in[0], *k = c->in[1];
  if (gpuc_shape_known(k) && gpuc_numel(k) != 2)
    return gpuc_op_fail(c, "counter must hold 2 values (seed, step), it has %lld", (long long)gpuc_numel(k));
  const Attr *r = gpuc_attr(c->n, "ratio");
  if (!r || r->kind != GPUC_ATTR_FLOAT) return gpuc_op_fail(c, "needs a float attribute ratio");
  if (!(r->f >= 0 && r->f < 1)) return gpuc_op_fail(c, "ratio %g is outside [0, 1)", (double)r->f);
  if (c->out[0]) gpuc_set_shape(c->out[0], x->dt, x->rank, x->dims);
  if (c->nout > 1 && c->out[1]) gpuc_set_shape(c->out[1], GPUC_DT_BOOL, x->rank, x->dims);
  return 0;
}
