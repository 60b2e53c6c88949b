/* Shape inference for the reductions (Reduce*, ArgMax, ArgMin), CumSum,
 * Softmax/LogSoftmax/Hardmax and TopK. */
#include "infer_reduce.h"

/* At most this many axes are read from an axes input; more than the rank
 * is always an error (a duplicate), this only bounds the buffer. */
#define MAX_AXES 64

/* ---- Reduce* ----------------------------------------------------------- */

/* Opset from which the op takes axes as input 1 instead of an attribute. */
static int64_t axes_input_opset(const Node *n) {
  return n->op == GPUC_OP_REDUCESUM ? 13 : 18;
}

/* Turn a list of axes into mask[], failing on out-of-range or repeated
 * axes. An empty list reduces everything, or nothing with noop. */
static int axes_to_mask(OpCtx *c, const int64_t *axes, int na, bool noop, int rank,
                        bool mask[GPUC_MAX_RANK]) {
  for (int d = 0; d < GPUC_MAX_RANK; d++) mask[d] = na == 0 && !noop && d < rank;
  for (int i = 0; i < na; i++) {
    if (axes[i] < -rank || axes[i] >= rank)
      return gpuc_op_fail(c, "axes[%d] = %lld is out of range for an input of rank %d", i,
                          (long long)axes[i], rank);
    int d = (int)(axes[i] < 0 ? axes[i] + rank : axes[i]);
    if (mask[d]) return gpuc_op_fail(c, "axis %d is listed twice in axes", d);
    mask[d] = true;
  }
  return 0;
}

int gpuc_reduce_axes(OpCtx *c, bool mask[GPUC_MAX_RANK], bool *known) {
  int rank = c->in[0]->rank;
  int64_t first = axes_input_opset(c->n);
  bool from_input = c->g->opset >= first;
  int64_t axes[MAX_AXES];
  int na = 0;
  *known = true;
  if (from_input) {
    if (gpuc_attr(c->n, "axes"))
      return gpuc_op_fail(c, "axes is input 1 from opset %lld, not an attribute", (long long)first);
    if (gpuc_has_in(c, 1)) {
      const Tensor *a = c->in[1];
      if (a->dt != GPUC_DT_I64 && a->dt != GPUC_DT_I32)
        return gpuc_op_fail(c, "axes input must be int64, not %s", gpuc_dtype_name(a->dt));
      if (a->rank > 1) return gpuc_op_fail(c, "axes input must be 1-D, not rank %d", a->rank);
      if (!a->data) { *known = false; return 0; }
      if ((na = gpuc_read_ints(c, 1, axes, MAX_AXES)) < 0) return -1;
    }
  } else {
    if (gpuc_has_in(c, 1))
      return gpuc_op_fail(c, "axes is an attribute before opset %lld, not an input",
                          (long long)first);
    const int64_t *v;
    int n = gpuc_attr_ints(c->n, "axes", &v);
    if (n > MAX_AXES) return gpuc_op_fail(c, "%d axes given, at most %d", n, MAX_AXES);
    for (int i = 0; i < n; i++) axes[na++] = v[i];
  }
  /* noop_with_empty_axes exists from the opset that made axes an input */
  bool noop = from_input && gpuc_attr_i(c->n, "noop_with_empty_axes", 0) != 0;
  return axes_to_mask(c, axes, na, noop, rank, mask);
}

/* Which dtypes a reduction accepts: every numeric type; Max/Min also bool
 * (opset 20). */
static int check_reduce_dtype(OpCtx *c) {
  GpucDType dt = c->in[0]->dt;
  bool minmax = c->n->op == GPUC_OP_REDUCEMAX || c->n->op == GPUC_OP_REDUCEMIN;
  if (dt == GPUC_DT_UNDEF || (dt == GPUC_DT_BOOL && !minmax))
    return gpuc_op_unsupported(c, "input dtype %s is not supported", gpuc_dtype_name(dt));
  return 0;
}

/* Output shape when the axes input is not known yet (import time). */
static int infer_reduce_unknown_axes(OpCtx *c, bool keepdims) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  if (keepdims) {
    /* same rank; any axis may become 1, those already 1 stay 1 */
    y->dt = x->dt;
    y->rank = x->rank;
    for (int d = 0; d < x->rank; d++) y->dims[d] = x->dims[d] == 1 ? 1 : -1;
    return 0;
  }
  /* without keepdims the rank depends on how many axes there are */
  const Tensor *a = c->in[1];
  int64_t na = a->rank == 0 ? 1 : a->dims[0];
  if (na < 0) return gpuc_infer_unknown(c, 0, x->dt);
  if (na > x->rank)
    return gpuc_op_fail(c, "%lld axes given for an input of rank %d", (long long)na, x->rank);
  if (na == 0) { /* reduce all, or nothing with noop_with_empty_axes */
    if (gpuc_attr_i(c->n, "noop_with_empty_axes", 0)) return gpuc_infer_same(c, 0, 0);
    gpuc_set_shape(y, x->dt, 0, NULL);
    return 0;
  }
  y->dt = x->dt;
  y->rank = x->rank - (int)na;
  for (int d = 0; d < y->rank; d++) y->dims[d] = -1;
  return 0;
}

/* Common inference of every Reduce* op: same dtype; reduced axes become 1
 * (keepdims, default 1) or disappear. */
static int infer_reduce(OpCtx *c) {
  if (check_reduce_dtype(c)) return -1;
  const Tensor *x = c->in[0];
  bool keepdims = gpuc_attr_i(c->n, "keepdims", 1) != 0;
  bool mask[GPUC_MAX_RANK], known;
  if (gpuc_reduce_axes(c, mask, &known)) return -1;
  if (!known) return infer_reduce_unknown_axes(c, keepdims);
  Tensor *y = c->out[0];
  int r = 0;
  for (int d = 0; d < x->rank; d++) {
    if (!mask[d]) y->dims[r++] = x->dims[d];
    else if (keepdims) y->dims[r++] = 1;
  }
  /* gpuc_out_f32 (passes/fp16.c): a half input summed into an f32 output,
   * the fp32 island without a Cast of the whole input */
  y->dt = gpuc_attr_i(c->n, "gpuc_out_f32", 0) == 1 && gpuc_dtype_is_float(x->dt) ? GPUC_DT_F32 : x->dt;
  y->rank = r;
  return 0;
}

int infer_ReduceL1(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceL2(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceLogSum(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceLogSumExp(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceMax(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceMean(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceMin(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceProd(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceSum(OpCtx *c) { return infer_reduce(c); }
int infer_ReduceSumSquare(OpCtx *c) { return infer_reduce(c); }

/* ---- ArgMax / ArgMin --------------------------------------------------- */

/* int64 indices along `axis` (default 0); the axis stays as 1 with keepdims
 * (default 1). The axis must not be empty: there is no index to return. */
static int infer_arg(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (x->dt == GPUC_DT_UNDEF || x->dt == GPUC_DT_BOOL)
    return gpuc_op_unsupported(c, "input dtype %s is not supported", gpuc_dtype_name(x->dt));
  if (x->rank < 1) return gpuc_op_fail(c, "input must have rank >= 1, not a scalar");
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), x->rank, &axis)) return -1;
  if (x->dims[axis] == 0) return gpuc_op_fail(c, "axis %d is empty: no index to return", axis);
  bool keepdims = gpuc_attr_i(c->n, "keepdims", 1) != 0;
  Tensor *y = c->out[0];
  int r = 0;
  for (int d = 0; d < x->rank; d++) {
    if (d != axis) y->dims[r++] = x->dims[d];
    else if (keepdims) y->dims[r++] = 1;
  }
  y->dt = GPUC_DT_I64;
  y->rank = r;
  return 0;
}

int infer_ArgMax(OpCtx *c) { return infer_arg(c); }
int infer_ArgMin(OpCtx *c) { return infer_arg(c); }

/* ---- CumSum ------------------------------------------------------------ */

/* y has x's shape; axis (input 1) is a 0-D or one-element 1-D int tensor. */
int infer_CumSum(OpCtx *c) {
  const Tensor *x = c->in[0], *a = c->in[1];
  if (x->dt == GPUC_DT_UNDEF || x->dt == GPUC_DT_BOOL)
    return gpuc_op_unsupported(c, "input dtype %s is not supported", gpuc_dtype_name(x->dt));
  if (a->dt != GPUC_DT_I32 && a->dt != GPUC_DT_I64)
    return gpuc_op_fail(c, "axis input must be int32 or int64, not %s", gpuc_dtype_name(a->dt));
  if (a->rank > 1 || (a->rank == 1 && a->dims[0] >= 0 && a->dims[0] != 1))
    return gpuc_op_fail(c, "axis input must be a scalar or a one-element 1-D tensor");
  if (x->rank < 1) return gpuc_op_fail(c, "input must have rank >= 1, not a scalar");
  if (a->data) {
    int axis;
    if (gpuc_norm_axis(c, gpuc_get_i64(a, 0), x->rank, &axis)) return -1;
  }
  return gpuc_infer_same(c, 0, 0);
}

/* ---- Softmax, LogSoftmax, Hardmax -------------------------------------- */

/* Products of dims; the caller ensures they are known. */
static int64_t dims_prod(const Tensor *t, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; d++) p *= t->dims[d];
  return p;
}

int gpuc_softmax_view(OpCtx *c, int64_t *outer, int64_t *n, int64_t *inner) {
  const Tensor *x = c->in[0];
  bool coerce_2d = c->g->opset < 13;
  int axis;
  if (x->rank < 1) return gpuc_op_fail(c, "input must have rank >= 1, not a scalar");
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", coerce_2d ? 1 : -1), x->rank, &axis))
    return -1;
  if (!gpuc_shape_known(x)) { *outer = *n = *inner = -1; return 0; }
  *outer = dims_prod(x, 0, axis);
  if (coerce_2d) {
    *n = dims_prod(x, axis, x->rank);
    *inner = 1;
  } else {
    *n = x->dims[axis];
    *inner = dims_prod(x, axis + 1, x->rank);
  }
  return 0;
}

static int infer_softmax(OpCtx *c) {
  GpucDType dt = c->in[0]->dt;
  if (!gpuc_dtype_is_float(dt))
    return gpuc_op_unsupported(c, "input dtype %s is not supported (floats only)",
                               gpuc_dtype_name(dt));
  int64_t outer, n, inner;
  if (gpuc_softmax_view(c, &outer, &n, &inner)) return -1;
  return gpuc_infer_same(c, 0, 0);
}

int infer_Softmax(OpCtx *c) { return infer_softmax(c); }
int infer_LogSoftmax(OpCtx *c) { return infer_softmax(c); }
int infer_Hardmax(OpCtx *c) { return infer_softmax(c); }

/* ---- TopK -------------------------------------------------------------- */

int gpuc_topk_params(OpCtx *c, int *axis, int64_t *k) {
  const Tensor *x = c->in[0];
  if (x->rank < 1) return gpuc_op_fail(c, "input must have rank >= 1, not a scalar");
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", -1), x->rank, axis)) return -1;
  *k = -1;
  if (c->g->opset < 10) { /* k is an attribute */
    if (gpuc_has_in(c, 1)) return gpuc_op_fail(c, "K is an attribute before opset 10, not an input");
    if (!gpuc_attr(c->n, "k")) return gpuc_op_fail(c, "attribute k is missing");
    *k = gpuc_attr_i(c->n, "k", -1);
  } else {
    if (!gpuc_has_in(c, 1)) return gpuc_op_fail(c, "input K is missing (required from opset 10)");
    if (gpuc_attr(c->n, "k")) return gpuc_op_fail(c, "k is input 1 from opset 10, not an attribute");
    const Tensor *kt = c->in[1];
    if (kt->dt != GPUC_DT_I64) return gpuc_op_fail(c, "K must be int64, not %s", gpuc_dtype_name(kt->dt));
    if (kt->rank > 1 || (kt->rank == 1 && kt->dims[0] >= 0 && kt->dims[0] != 1))
      return gpuc_op_fail(c, "K must be a one-element 1-D tensor");
    if (!kt->data) return 0;
    *k = gpuc_get_i64(kt, 0);
  }
  if (*k < 0) return gpuc_op_fail(c, "k = %lld is negative", (long long)*k);
  if (x->dims[*axis] >= 0 && *k > x->dims[*axis])
    return gpuc_op_fail(c, "k = %lld is larger than the axis %d size %lld", (long long)*k, *axis,
                        (long long)x->dims[*axis]);
  return 0;
}

/* Values (x's dtype) and int64 indices: x's shape with dims[axis] = k. */
int infer_TopK(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (x->dt == GPUC_DT_UNDEF || x->dt == GPUC_DT_BOOL)
    return gpuc_op_unsupported(c, "input dtype %s is not supported", gpuc_dtype_name(x->dt));
  int axis;
  int64_t k;
  if (gpuc_topk_params(c, &axis, &k)) return -1;
  Tensor shape = *x;
  shape.data = NULL;
  shape.dims[axis] = k; /* -1 when K is not known yet */
  for (int o = 0; o < 2; o++)
    if (c->out[o]) gpuc_set_shape(c->out[o], o ? GPUC_DT_I64 : x->dt, x->rank, shape.dims);
  return 0;
}
