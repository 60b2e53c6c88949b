/* Shape/dtype inference for the quantized-operator ops other tools write
 * (onnxruntime's quantize_static QOperator format and quantize_dynamic's
 * convolutions): QLinearMatMul, QLinearConv (opset 10) and ConvInteger.
 *
 *   QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) -> y
 *     a/b u8 or i8 with numpy matmul shapes; y has y_zp's dtype;
 *   QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp?, B?) -> y
 *     Conv's shape; w_scale/w_zp per tensor or per output channel [M];
 *     B int32 [M]; y has y_zp's dtype (x's when y_zp is absent);
 *   ConvInteger(x, w, x_zp?, w_zp?) -> int32, Conv's shape.
 *
 * Scales are f32 (opset 21's f16/bf16 scales and float8 data are refused
 * as unsupported). Per-row a_scale/y_scale ([M]) and per-column b_scale
 * ([N]) are the 1-D forms ONNX allows for QLinearMatMul. */
#include "infer_linalg.h"
#include "infer_nn.h"

static const GpucDType q8[] = {GPUC_DT_U8, GPUC_DT_I8, GPUC_DT_UNDEF};

/* Input i is an f32 scale (or a zero point of dtype zdt when zdt is given)
 * with 1 value or `n` values (n < 0: unknown, any 1-D accepted). */
static int check_param(OpCtx *c, int i, const char *what, GpucDType zdt, int64_t n) {
  if (!gpuc_has_in(c, i)) return 0;
  const Tensor *t = c->in[i];
  if (zdt == GPUC_DT_UNDEF && t->dt != GPUC_DT_F32)
    return gpuc_op_unsupported(c, "%s of %s (f32 scales only)", what, gpuc_dtype_name(t->dt));
  if (zdt != GPUC_DT_UNDEF && t->dt != zdt)
    return gpuc_op_fail(c, "%s is %s but its data is %s", what, gpuc_dtype_name(t->dt), gpuc_dtype_name(zdt));
  if (t->rank > 1) return gpuc_op_fail(c, "%s must be a scalar or 1-D, not rank %d", what, t->rank);
  if (t->rank == 1 && t->dims[0] >= 0 && t->dims[0] != 1 && n >= 0 && t->dims[0] != n)
    return gpuc_op_fail(c, "%s has %lld values, expected 1 or %lld", what, (long long)t->dims[0], (long long)n);
  return 0;
}

/* The output's dtype: y_zero_point's (input zi), else dflt. */
static int out_dtype(OpCtx *c, int zi, GpucDType dflt, GpucDType *dt) {
  *dt = dflt;
  if (!gpuc_has_in(c, zi)) return 0;
  if (gpuc_check_dtype(c, zi, q8)) return -1;
  *dt = c->in[zi]->dt;
  return 0;
}

int infer_QLinearMatMul(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[3];
  if (gpuc_check_dtype(c, 0, q8) || gpuc_check_dtype(c, 3, q8)) return -1;
  int64_t m = a->rank >= 2 ? a->dims[a->rank - 2] : 1, n = b->rank >= 2 ? b->dims[b->rank - 1] : 1;
  if (check_param(c, 1, "a_scale", GPUC_DT_UNDEF, m) || check_param(c, 2, "a_zero_point", a->dt, m) ||
      check_param(c, 4, "b_scale", GPUC_DT_UNDEF, n) || check_param(c, 5, "b_zero_point", b->dt, n) ||
      check_param(c, 6, "y_scale", GPUC_DT_UNDEF, m))
    return -1;
  if (!gpuc_has_in(c, 1) || !gpuc_has_in(c, 4) || !gpuc_has_in(c, 6))
    return gpuc_op_fail(c, "a_scale, b_scale and y_scale are required");
  GpucDType dt;
  if (out_dtype(c, 7, GPUC_DT_U8, &dt) || check_param(c, 7, "y_zero_point", dt, m)) return -1;
  if (gpuc_matmul_shape(c, a, b, c->out[0])) return -1;
  c->out[0]->dt = dt;
  return 0;
}

/* Conv's window over in[xi] and in[wi]: a view of the node with X and W
 * alone (the Conv helper would read input 2 as a bias). */
static int window(OpCtx *c, int xi, int wi, NnWindow *w) {
  const Tensor *in[2] = {c->in[xi], c->in[wi]};
  OpCtx v = *c;
  v.in = in;
  v.nin = 2;
  return nn_conv_window(&v, w);
}

static void window_out(OpCtx *c, const NnWindow *w, GpucDType dt) {
  int64_t dims[GPUC_MAX_RANK];
  dims[0] = w->n;
  dims[1] = w->c_out;
  for (int i = 0; i < w->nsp; i++) dims[2 + i] = w->out[i];
  gpuc_set_shape(c->out[0], dt, w->nsp + 2, dims);
}

int infer_ConvInteger(OpCtx *c) {
  if (gpuc_check_dtype(c, 0, q8) || gpuc_check_dtype(c, 1, q8)) return -1;
  if (c->in[0]->rank < 0 || c->in[1]->rank < 0) return gpuc_infer_unknown(c, 0, GPUC_DT_I32);
  int64_t m = c->in[1]->rank >= 1 ? c->in[1]->dims[0] : -1;
  if (check_param(c, 2, "x_zero_point", c->in[0]->dt, 1) || check_param(c, 3, "w_zero_point", c->in[1]->dt, m))
    return -1;
  NnWindow w;
  if (window(c, 0, 1, &w)) return -1;
  window_out(c, &w, GPUC_DT_I32);
  return 0;
}

int infer_QLinearConv(OpCtx *c) {
  if (gpuc_check_dtype(c, 0, q8) || gpuc_check_dtype(c, 3, q8)) return -1;
  if (c->in[0]->rank < 0 || c->in[3]->rank < 0) return gpuc_infer_unknown(c, 0, c->in[0]->dt);
  int64_t m = c->in[3]->rank >= 1 ? c->in[3]->dims[0] : -1;
  if (check_param(c, 1, "x_scale", GPUC_DT_UNDEF, 1) || check_param(c, 2, "x_zero_point", c->in[0]->dt, 1) ||
      check_param(c, 4, "w_scale", GPUC_DT_UNDEF, m) || check_param(c, 5, "w_zero_point", c->in[3]->dt, m) ||
      check_param(c, 6, "y_scale", GPUC_DT_UNDEF, 1))
    return -1;
  if (!gpuc_has_in(c, 1) || !gpuc_has_in(c, 4) || !gpuc_has_in(c, 6))
    return gpuc_op_fail(c, "x_scale, w_scale and y_scale are required");
  GpucDType dt;
  if (out_dtype(c, 7, c->in[0]->dt, &dt) || check_param(c, 7, "y_zero_point", dt, 1)) return -1;
  if (gpuc_has_in(c, 8)) {
    const Tensor *b = c->in[8];
    if (b->dt != GPUC_DT_I32) return gpuc_op_fail(c, "B is %s, not int32", gpuc_dtype_name(b->dt));
    if (b->rank != 1 || (b->dims[0] >= 0 && m >= 0 && b->dims[0] != m))
      return gpuc_op_fail(c, "B must be 1-D with one value per output channel (%lld)", (long long)m);
  }
  NnWindow w;
  if (window(c, 0, 3, &w)) return -1;
  window_out(c, &w, dt);
  return 0;
}
