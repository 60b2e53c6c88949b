/* Shape inference of the internal Attention op (ir/ops.def), and the limits
 * of its GPU kernel, which passes/fuse_attention.c checks before fusing so
 * that codegen/lower_attention.c never meets a node it cannot run. */
#include "infer_linalg.h"

static bool dims_eq(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

/* Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv], mask? broadcast to
 * [B,H,Sq,Sk] -> Y [B,H,Sq,Dv] of Q's dtype. */
int infer_Attention(OpCtx *c) {
  static const GpucDType flt[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};
  for (int i = 0; i < 4; i++)
    if (gpuc_check_dtype(c, i, flt)) return -1;
  const Tensor *q = c->in[0], *k = c->in[1], *v = c->in[2];
  if (k->dt != q->dt || v->dt != q->dt)
    return gpuc_op_fail(c, "Q, K and V must have one dtype (got %s, %s, %s)", gpuc_dtype_name(q->dt),
                        gpuc_dtype_name(k->dt), gpuc_dtype_name(v->dt));
  if (q->rank != 4 || k->rank != 4 || v->rank != 4)
    return gpuc_op_fail(c, "Q, K and V must be 4-D (got ranks %d, %d, %d)", q->rank, k->rank, v->rank);
  for (int d = 0; d < 2; d++)
    if (!dims_eq(q->dims[d], k->dims[d]) || !dims_eq(q->dims[d], v->dims[d]))
      return gpuc_op_fail(c, "Q, K and V differ in dimension %d", d);
  if (!dims_eq(q->dims[3], k->dims[3])) return gpuc_op_fail(c, "Q and K differ in head size");
  if (!dims_eq(k->dims[2], v->dims[2])) return gpuc_op_fail(c, "K and V differ in length");
  Tensor *y = c->out[0];
  int64_t dims[4] = {q->dims[0], q->dims[1], q->dims[2], v->dims[3]};
  gpuc_set_shape(y, q->dt, 4, dims);
  if (gpuc_has_in(c, 3)) {
    const Tensor *m = c->in[3];
    if (m->rank > 4) return gpuc_op_fail(c, "mask has rank %d, at most 4", m->rank);
    int64_t sd[4] = {q->dims[0], q->dims[1], q->dims[2], k->dims[2]};
    for (int d = 0; d < m->rank; d++) {
      int64_t md = m->dims[d], want = sd[4 - m->rank + d];
      if (md >= 0 && md != 1 && want >= 0 && md != want)
        return gpuc_op_fail(c, "mask dimension %d is %lld, does not broadcast to %lld", d,
                            (long long)md, (long long)want);
    }
  }
  return 0;
}

bool gpuc_attention_lowerable(const Tensor *q, const Tensor *k, const Tensor *v, const Tensor *mask) {
  GpucDType dt = q->dt;
  if (dt != GPUC_DT_F32 && dt != GPUC_DT_F16 && dt != GPUC_DT_BF16) return false;
  if (k->dt != dt || v->dt != dt || q->rank != 4 || k->rank != 4 || v->rank != 4) return false;
  if (!gpuc_shape_known(q) || !gpuc_shape_known(k) || !gpuc_shape_known(v)) return false;
  for (int d = 0; d < 2; d++)
    if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d]) return false;
  int64_t D = q->dims[3], Dv = v->dims[3], Sk = k->dims[2];
  if (k->dims[3] != D || v->dims[2] != Sk) return false;
  if (D < 1 || D > GPUC_ATTN_MAX_HEAD || Dv < 1 || Dv > GPUC_ATTN_MAX_HEAD || Sk < 1 || q->dims[2] < 1)
    return false;
  /* grid (B*H, Sq/16) */
  if (q->dims[0] * q->dims[1] > INT32_MAX || q->dims[2] > (int64_t)65535 * 16) return false;
  if (!mask) return true;
  if (mask->dt != GPUC_DT_F32 && mask->dt != GPUC_DT_F16 && mask->dt != GPUC_DT_BF16) return false;
  if (!gpuc_shape_known(mask) || mask->rank > 4) return false;
  int64_t full[4] = {q->dims[0], q->dims[1], q->dims[2], Sk};
  for (int d = 0; d < mask->rank; d++) {
    int64_t md = mask->dims[d];
    if (md != 1 && md != full[4 - mask->rank + d]) return false;
  }
  return true;
}
