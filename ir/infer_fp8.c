/* Shape inference for the --fp8 ops (rows in ir/ops.def): QuantizeRowsF8,
 * MatMulF8. */
#include "infer_elementwise.h"
#include "infer_util.h"
#include "quant_int8.h"

/* X float [..., K] -> Xq f8e4m3 [..., K], Scale f32 [..., 1]. */
int infer_QuantizeRowsF8(OpCtx *c) {
  static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, ft)) return -1;
  const Tensor *x = c->in[0];
  if (x->rank == 0) return gpuc_op_fail(c, "X is a scalar; rows need at least one dim");
  if (x->rank < 0) {
    if (c->out[0]) gpuc_infer_unknown(c, 0, GPUC_DT_F8E4M3);
    if (c->out[1]) gpuc_infer_unknown(c, 1, GPUC_DT_F32);
    return 0;
  }
  int64_t d[GPUC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) d[i] = x->dims[i];
  if (c->out[0]) gpuc_set_shape(c->out[0], GPUC_DT_F8E4M3, x->rank, d);
  d[x->rank - 1] = 1;
  if (c->out[1]) gpuc_set_shape(c->out[1], GPUC_DT_F32, x->rank, d);
  return 0;
}

/* Xq [..., K], Wq [N, K], XScale [..., 1], WScale [N], Bias? [N] -> Y [..., N]. */
int infer_MatMulF8(OpCtx *c) {
  static const GpucDType f8[] = {GPUC_DT_F8E4M3, GPUC_DT_UNDEF}, f32[] = {GPUC_DT_F32, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, f8) || gpuc_check_dtype(c, 1, f8) || gpuc_check_dtype(c, 2, f32) ||
      gpuc_check_dtype(c, 3, f32))
    return -1;
  GpucDType dt = gpuc_dequantize_rows_dtype(c->n);
  if (dt == GPUC_DT_UNDEF) return gpuc_op_fail(c, "attribute 'to' must be FLOAT, FLOAT16 or BFLOAT16");
  const Tensor *x = c->in[0], *w = c->in[1], *ws = c->in[3];
  if (w->rank != 2) return gpuc_op_fail(c, "Wq must be 2-D [N, K], is rank %d", w->rank);
  if (x->rank == 0) return gpuc_op_fail(c, "Xq is a scalar");
  if (gpuc_shape_known(ws) && gpuc_numel(ws) != w->dims[0])
    return gpuc_op_fail(c, "WScale holds %lld values, Wq has %lld output channels", (long long)gpuc_numel(ws),
                        (long long)w->dims[0]);
  if (gpuc_has_in(c, 4)) {
    const Tensor *b = c->in[4];
    if (b->dt != dt) return gpuc_op_fail(c, "Bias is %s, Y is %s", gpuc_dtype_name(b->dt), gpuc_dtype_name(dt));
    if (gpuc_shape_known(b) && gpuc_numel(b) != w->dims[0])
      return gpuc_op_fail(c, "Bias holds %lld values, not N = %lld", (long long)gpuc_numel(b), (long long)w->dims[0]);
  }
  if (x->rank < 0) return gpuc_infer_unknown(c, 0, dt);
  int64_t k = x->dims[x->rank - 1];
  if (k >= 0 && w->dims[1] >= 0 && k != w->dims[1])
    return gpuc_op_fail(c, "Xq rows of %lld and Wq [%lld, %lld] differ in K", (long long)k, (long long)w->dims[0],
                        (long long)w->dims[1]);
  const Tensor *xs = c->in[2];
  if (gpuc_shape_known(xs) && gpuc_shape_known(x) && gpuc_numel(xs) * (k > 0 ? k : 1) != gpuc_numel(x))
    return gpuc_op_fail(c, "XScale holds %lld values, not one per row of Xq", (long long)gpuc_numel(xs));
  int64_t d[GPUC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) d[i] = x->dims[i];
  d[x->rank - 1] = w->dims[0];
  gpuc_set_shape(c->out[0], dt, x->rank, d);
  return 0;
}
