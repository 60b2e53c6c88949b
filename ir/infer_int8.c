/* Shape inference for the --int8 ops (rows in ir/ops.def, rule in
 * ir/quant_int8.h): QuantizeRows, MatMulInt8, DequantizeRows. */
#include "infer_elementwise.h"
#include "infer_util.h"
#include "quant_int8.h"

/* X float [..., K] -> Xq int8 [..., K], Scale f32 [..., 1]. */
int infer_QuantizeRows(OpCtx *c) {
  static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, ft)) return -1;
  const Tensor *x = c->in[0];
  if (x->rank == 0) return gpuc_op_fail(c, "X is a scalar; rows need at least one dim");
  if (x->rank < 0) {
    if (c->out[0]) gpuc_infer_unknown(c, 0, GPUC_DT_I8);
    if (c->out[1]) gpuc_infer_unknown(c, 1, GPUC_DT_F32);
    return 0;
  }
  int64_t d[GPUC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) d[i] = x->dims[i];
  if (c->out[0]) gpuc_set_shape(c->out[0], GPUC_DT_I8, x->rank, d);
  d[x->rank - 1] = 1;
  if (c->out[1]) gpuc_set_shape(c->out[1], GPUC_DT_F32, x->rank, d);
  return 0;
}

/* Xq int8 [..., K], Wq int8 [N, K] -> Acc int32 [..., N]. */
int infer_MatMulInt8(OpCtx *c) {
  static const GpucDType it[] = {GPUC_DT_I8, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, it) || gpuc_check_dtype(c, 1, it)) return -1;
  const Tensor *x = c->in[0], *w = c->in[1];
  if (w->rank != 2) return gpuc_op_fail(c, "Wq must be 2-D [N, K], is rank %d", w->rank);
  if (x->rank == 0) return gpuc_op_fail(c, "Xq is a scalar");
  if (x->rank < 0) return gpuc_infer_unknown(c, 0, GPUC_DT_I32);
  int64_t k = x->dims[x->rank - 1];
  if (k >= 0 && w->dims[1] >= 0 && k != w->dims[1])
    return gpuc_op_fail(c, "Xq rows of %lld and Wq [%lld, %lld] differ in K", (long long)k, (long long)w->dims[0],
                        (long long)w->dims[1]);
  if (w->dims[1] > GPUC_Q8_MAX_K)
    return gpuc_op_fail(c, "K %lld is past %lld, where int32 sums of int8 products may overflow",
                        (long long)w->dims[1], (long long)GPUC_Q8_MAX_K);
  int64_t d[GPUC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) d[i] = x->dims[i];
  d[x->rank - 1] = w->dims[0];
  gpuc_set_shape(c->out[0], GPUC_DT_I32, x->rank, d);
  return 0;
}

/* The output dtype of DequantizeRows: attribute `to`, a float type. */
GpucDType gpuc_dequantize_rows_dtype(const Node *n) {
  GpucDType dt = gpuc_ew_onnx_dtype(gpuc_attr_i(n, "to", 1));
  return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16 ? dt : GPUC_DT_UNDEF;
}

/* True when t holds n values along its last dim and 1 elsewhere ([N] or
 * [1,..,1,N]). */
static bool row_of(const Tensor *t, int64_t n) {
  if (t->rank < 1) return false;
  for (int i = 0; i + 1 < t->rank; i++)
    if (t->dims[i] != 1) return false;
  return t->dims[t->rank - 1] == n;
}

/* Acc int32 [..., N], XScale f32 [..., 1] (or one value), WScale f32 [N]
 * (or one value), Bias? [N] -> Y [..., N]. */
int infer_DequantizeRows(OpCtx *c) {
  static const GpucDType it[] = {GPUC_DT_I32, GPUC_DT_UNDEF}, f32[] = {GPUC_DT_F32, GPUC_DT_UNDEF},
                         ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, it) || gpuc_check_dtype(c, 1, f32) || gpuc_check_dtype(c, 2, f32)) return -1;
  if (gpuc_has_in(c, 3) && gpuc_check_dtype(c, 3, ft)) return -1;
  GpucDType dt = gpuc_dequantize_rows_dtype(c->n);
  if (dt == GPUC_DT_UNDEF) return gpuc_op_fail(c, "attribute 'to' must be FLOAT, FLOAT16 or BFLOAT16");
  const Tensor *acc = c->in[0], *xs = c->in[1];
  if (acc->rank < 0) return gpuc_infer_unknown(c, 0, dt);
  int r = acc->rank;
  if (r < 1) return gpuc_op_fail(c, "Acc is a scalar");
  /* dims may be unknown (-1) at import: check what is known */
  int64_t n = acc->dims[r - 1];
  bool xs_one = gpuc_shape_known(xs) && gpuc_numel(xs) == 1 && xs->rank <= r;
  bool xs_ok = xs->rank < 0 || xs_one || (xs->rank == r && xs->dims[r - 1] == 1);
  for (int i = 0; xs_ok && !xs_one && xs->rank == r && i + 1 < r; i++)
    xs_ok = xs->dims[i] < 0 || acc->dims[i] < 0 || xs->dims[i] == acc->dims[i];
  if (!xs_ok) return gpuc_op_fail(c, "XScale must be Acc's shape with a last dim of 1, or one value");
  bool ws_one = gpuc_shape_known(c->in[2]) && gpuc_numel(c->in[2]) == 1 && c->in[2]->rank <= r;
  if (n >= 0 && ((gpuc_shape_known(c->in[2]) && !ws_one && !row_of(c->in[2], n)) ||
                 (gpuc_has_in(c, 3) && gpuc_shape_known(c->in[3]) && !row_of(c->in[3], n))))
    return gpuc_op_fail(c, "WScale and Bias must hold Acc's last dim (%lld) of values", (long long)n);
  gpuc_set_shape(c->out[0], dt, r, acc->dims);
  return 0;
}
