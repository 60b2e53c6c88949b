/* Shape/dtype inference for the quantization ops (QuantizeLinear,
 * DequantizeLinear, DynamicQuantizeLinear) and the losses
 * (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss).
 *
 * At import dims may be -1: a check compares two dims only when both are
 * known, and outputs take whichever of two equal-by-contract dims is known. */
#include "infer_util.h"
#include <string.h>

/* Both dims known and different: a definite inconsistency. */
static bool dims_conflict(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

/* Of two dims that must be equal, the known one (or -1). */
static int64_t dim_merge(int64_t a, int64_t b) { return a >= 0 ? a : b; }

/* ---- quantization ---------------------------------------------------------- */

/* ONNX TensorProto.DataType codes accepted by QuantizeLinear's output_dtype
 * (opset 21); 0 means "not given". */
static GpucDType onnx_qtype(int64_t code) {
  switch (code) {
  case 2: return GPUC_DT_U8;
  case 3: return GPUC_DT_I8;
  case 4: return GPUC_DT_U16;
  case 5: return GPUC_DT_I16;
  default: return GPUC_DT_UNDEF;
  }
}

static bool is_qint(GpucDType dt) {
  return dt == GPUC_DT_U8 || dt == GPUC_DT_I8 || dt == GPUC_DT_U16 || dt == GPUC_DT_I16;
}

/* Checks shared by QuantizeLinear and DequantizeLinear: input 0 is the data
 * x, input 1 the scale, input 2 the optional zero point.
 *   per-tensor: scale is a scalar (or a 1-D tensor of one element);
 *   per-axis (opset 13+): scale is 1-D of x.dims[axis] elements.
 * The zero point, when given, has as many elements as the scale. */
static int check_qparams(OpCtx *c) {
  const Tensor *x = c->in[0], *s = c->in[1];
  if (gpuc_attr_i(c->n, "block_size", 0) != 0)
    return gpuc_op_unsupported(c, "blocked quantization (block_size) is not supported");
  if (!gpuc_dtype_is_float(s->dt))
    return gpuc_op_fail(c, "scale must be a float tensor, got %s", gpuc_dtype_name(s->dt));
  if (s->rank > 1)
    return gpuc_op_fail(c, "scale must be a scalar or 1-D, got rank %d", s->rank);
  if (gpuc_has_in(c, 2)) {
    const Tensor *z = c->in[2];
    if (z->rank > 1)
      return gpuc_op_fail(c, "zero point must be a scalar or 1-D, got rank %d", z->rank);
    int64_t zn = z->rank == 0 ? 1 : z->dims[0], sn = s->rank == 0 ? 1 : s->dims[0];
    if (dims_conflict(zn, sn))
      return gpuc_op_fail(c, "zero point has %lld elements, scale has %lld", (long long)zn,
                          (long long)sn);
  }
  if (s->rank == 0 || s->dims[0] == 1) return 0;  /* per-tensor */
  if (s->dims[0] < 0) return 0;                    /* decided at run time */
  /* per-axis */
  if (c->g && c->g->opset < 13)
    return gpuc_op_fail(c, "a per-axis scale (%lld elements) needs opset 13, model has %lld",
                        (long long)s->dims[0], (long long)c->g->opset);
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 1), x->rank, &axis)) return -1;
  if (dims_conflict(x->dims[axis], s->dims[0]))
    return gpuc_op_fail(c, "scale has %lld elements, input dim %d (axis) is %lld",
                        (long long)s->dims[0], axis, (long long)x->dims[axis]);
  return 0;
}

/* y = saturate(round(x / scale) + zero_point): y has x's shape and the zero
 * point's dtype (uint8 when absent, or output_dtype when given). */
int infer_QuantizeLinear(OpCtx *c) {
  const Tensor *x = c->in[0];
  static const GpucDType xt[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64,
                                 GPUC_DT_I32, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, xt)) return -1;
  if (check_qparams(c)) return -1;
  GpucDType yt = GPUC_DT_U8;
  int64_t code = gpuc_attr_i(c->n, "output_dtype", 0);
  if (code != 0) {
    yt = onnx_qtype(code);
    if (yt == GPUC_DT_UNDEF)
      return gpuc_op_unsupported(c, "output_dtype %lld is not supported", (long long)code);
  }
  if (gpuc_has_in(c, 2)) {
    GpucDType zt = c->in[2]->dt;
    if (!is_qint(zt))
      return gpuc_op_unsupported(c, "zero point dtype %s is not supported", gpuc_dtype_name(zt));
    if (code != 0 && zt != yt)
      return gpuc_op_fail(c, "output_dtype (%s) differs from the zero point's dtype (%s)",
                          gpuc_dtype_name(yt), gpuc_dtype_name(zt));
    yt = zt;
  }
  if (c->out[0]) gpuc_set_shape(c->out[0], yt, x->rank, x->dims);
  return 0;
}

/* y = (x - zero_point) * scale: y has x's shape and the scale's dtype. */
int infer_DequantizeLinear(OpCtx *c) {
  const Tensor *x = c->in[0];
  static const GpucDType xt[] = {GPUC_DT_U8, GPUC_DT_I8, GPUC_DT_U16, GPUC_DT_I16,
                                 GPUC_DT_I32, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, xt)) return -1;
  if (gpuc_has_in(c, 2) && c->in[2]->dt != x->dt)
    return gpuc_op_fail(c, "zero point is %s, input is %s", gpuc_dtype_name(c->in[2]->dt),
                        gpuc_dtype_name(x->dt));
  if (check_qparams(c)) return -1;
  if (c->out[0]) gpuc_set_shape(c->out[0], c->in[1]->dt, x->rank, x->dims);
  return 0;
}

/* x (f32) -> y (u8, x's shape), y_scale (f32 scalar), y_zero_point (u8 scalar). */
int infer_DynamicQuantizeLinear(OpCtx *c) {
  const Tensor *x = c->in[0];
  static const GpucDType xt[] = {GPUC_DT_F32, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, xt)) return -1;
  if (c->out[0]) gpuc_set_shape(c->out[0], GPUC_DT_U8, x->rank, x->dims);
  if (c->nout > 1 && c->out[1]) gpuc_set_shape(c->out[1], GPUC_DT_F32, 0, NULL);
  if (c->nout > 2 && c->out[2]) gpuc_set_shape(c->out[2], GPUC_DT_U8, 0, NULL);
  return 0;
}

/* ---- losses ------------------------------------------------------------------ */

/* Shared by both losses. scores/input [N, C, d1..dk] (k >= 0), labels/target
 * [N, d1..dk] int32/int64, optional weights [C] of the scores' dtype.
 * reduction "none" gives [N, d1..dk], "sum"/"mean" a scalar. */
static int infer_loss(OpCtx *c) {
  const Tensor *x = c->in[0], *t = c->in[1];
  static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64,
                                 GPUC_DT_UNDEF};
  static const GpucDType it[] = {GPUC_DT_I32, GPUC_DT_I64, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, ft) || gpuc_check_dtype(c, 1, it)) return -1;
  const char *red = gpuc_attr_s(c->n, "reduction", "mean");
  bool none = !strcmp(red, "none");
  if (!none && strcmp(red, "sum") && strcmp(red, "mean"))
    return gpuc_op_fail(c, "reduction '%s' is not one of none, sum, mean", red);
  const Attr *ii = gpuc_attr(c->n, "ignore_index");
  if (ii && ii->kind != GPUC_ATTR_INT)
    return gpuc_op_fail(c, "attribute ignore_index must be an integer");
  if (x->rank < 2)
    return gpuc_op_fail(c, "input must be [N, C, d1..dk] (rank >= 2), got rank %d", x->rank);
  if (t->rank != x->rank - 1)
    return gpuc_op_fail(c, "labels must have rank %d (input rank - 1), got %d", x->rank - 1,
                        t->rank);
  int64_t ldims[GPUC_MAX_RANK];
  for (int d = 0; d < t->rank; d++) {
    int xd = d == 0 ? 0 : d + 1;  /* labels skip the class dim */
    if (dims_conflict(t->dims[d], x->dims[xd]))
      return gpuc_op_fail(c, "labels dim %d is %lld, input dim %d is %lld", d,
                          (long long)t->dims[d], xd, (long long)x->dims[xd]);
    ldims[d] = dim_merge(t->dims[d], x->dims[xd]);
  }
  if (gpuc_has_in(c, 2)) {
    const Tensor *w = c->in[2];
    if (w->dt != x->dt)
      return gpuc_op_fail(c, "weights are %s, input is %s", gpuc_dtype_name(w->dt),
                          gpuc_dtype_name(x->dt));
    if (w->rank != 1) return gpuc_op_fail(c, "weights must be 1-D [C], got rank %d", w->rank);
    if (dims_conflict(w->dims[0], x->dims[1]))
      return gpuc_op_fail(c, "weights have %lld elements, input has C = %lld",
                          (long long)w->dims[0], (long long)x->dims[1]);
  }
  if (c->out[0]) {
    if (none) gpuc_set_shape(c->out[0], x->dt, t->rank, ldims);
    else gpuc_set_shape(c->out[0], x->dt, 0, NULL);
  }
  return 0;
}

/* Outputs: loss, and optionally log_prob with the scores' shape. */
int infer_SoftmaxCrossEntropyLoss(OpCtx *c) {
  if (infer_loss(c)) return -1;
  if (c->nout > 1 && c->out[1]) gpuc_infer_same(c, 1, 0);
  return 0;
}

int infer_NegativeLogLikelihoodLoss(OpCtx *c) { return infer_loss(c); }
