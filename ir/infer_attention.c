/* Shape inference of the internal Attention op (ir/ops.def), its geometry
 * (shared by the reference kernel and the lowering), and the limits of its
 * GPU kernels, which passes/fuse_attention.c checks before fusing so that
 * codegen/lower_attention.c never meets a node it cannot run. */
#include "infer_linalg.h"

/* The tensor's [b, h, s, d] sizes from its stored dims */
static void logical(const Tensor *t, bool bshd, int64_t out[4]) {
  out[0] = t->dims[0];
  out[1] = t->dims[bshd ? 2 : 1];
  out[2] = t->dims[bshd ? 1 : 2];
  out[3] = t->dims[3];
}

/* element strides of b, h and s; d is contiguous */
static void strides(const int64_t l[4], bool bshd, int64_t st[3]) {
  st[0] = l[1] * l[2] * l[3];
  st[1] = bshd ? l[3] : l[2] * l[3];
  st[2] = bshd ? l[1] * l[3] : l[3];
}

static bool dims_eq(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

int gpuc_attention_geom(const Node *n, const Tensor *q, const Tensor *k, const Tensor *v, GpucAttnGeom *a) {
  const int64_t *flags;
  int nf = gpuc_attr_ints(n, "bshd", &flags);
  if (nf >= 0 && nf != 4) return -1;
  for (int i = 0; i < 4; i++) a->bshd[i] = nf == 4 && flags[i] != 0;
  if (q->rank != 4 || k->rank != 4 || v->rank != 4) return -1;
  int64_t lq[4], lk[4], lv[4];
  logical(q, a->bshd[0], lq);
  logical(k, a->bshd[1], lk);
  logical(v, a->bshd[2], lv);
  if (!dims_eq(lq[0], lk[0]) || !dims_eq(lq[0], lv[0]) || !dims_eq(lk[1], lv[1])) return -1;
  /* grouped-query heads: K and V have H / G heads, G >= 1 */
  if (lq[1] >= 0 && lk[1] >= 0 && lq[1] != lk[1] && (lk[1] < 1 || lq[1] % lk[1])) return -1;
  if (!dims_eq(lq[3], lk[3]) || !dims_eq(lk[2], lv[2])) return -1;
  a->B = lq[0]; a->H = lq[1]; a->Sq = lq[2]; a->D = lq[3]; a->Sk = lk[2]; a->Dv = lv[3];
  a->Hk = lk[1];
  int64_t ly[4] = {a->B, a->H, a->Sq, a->Dv};
  strides(lq, a->bshd[0], a->st[0]);
  strides(lk, a->bshd[1], a->st[1]);
  strides(lv, a->bshd[2], a->st[2]);
  strides(ly, a->bshd[3], a->st[3]);
  return 0;
}

/* Q [B,H,Sq,D], K [B,Hk,Sk,D], V [B,Hk,Sk,Dv] (Hk divides H), mask? broadcast to
 * [B,H,Sq,Sk] -> Y [B,H,Sq,Dv] of Q's dtype; with attribute bshd[i] set,
 * tensor i (Q, K, V, Y) is stored [B,S,H,D] instead. */
int infer_Attention(OpCtx *c) {
  static const GpucDType flt[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};
  for (int i = 0; i < 4; i++)
    if (gpuc_check_dtype(c, i, flt)) return -1;
  const Tensor *q = c->in[0], *k = c->in[1], *v = c->in[2];
  if (k->dt != q->dt || v->dt != q->dt)
    return gpuc_op_fail(c, "Q, K and V must have one dtype (got %s, %s, %s)", gpuc_dtype_name(q->dt),
                        gpuc_dtype_name(k->dt), gpuc_dtype_name(v->dt));
  GpucAttnGeom a;
  if (gpuc_attention_geom(c->n, q, k, v, &a))
    return gpuc_op_fail(c, "Q, K and V are not 4-D with one batch and head size, and K/V heads dividing Q's");
  int64_t dims[4] = {a.B, a.H, a.Sq, a.Dv};
  if (a.bshd[3]) { dims[1] = a.Sq; dims[2] = a.H; }
  gpuc_set_shape(c->out[0], q->dt, 4, dims);
  if (gpuc_has_in(c, 3)) {
    const Tensor *m = c->in[3];
    if (m->rank > 4) return gpuc_op_fail(c, "mask has rank %d, at most 4", m->rank);
    int64_t sd[4] = {a.B, a.H, a.Sq, a.Sk};
    for (int d = 0; d < m->rank; d++) {
      int64_t md = m->dims[d], want = sd[4 - m->rank + d];
      if (md >= 0 && md != 1 && want >= 0 && md != want)
        return gpuc_op_fail(c, "mask dimension %d is %lld, does not broadcast to %lld", d,
                            (long long)md, (long long)want);
    }
  }
  return 0;
}

void gpuc_attention_mask_strides(const Tensor *m, int64_t st[4]) {
  int64_t s = 1;
  for (int d = 3; d >= 0; d--) {
    int md = d - (4 - m->rank);
    if (md < 0 || m->dims[md] == 1) { st[d] = 0; continue; }
    st[d] = s;
    s *= m->dims[md];
  }
}

bool gpuc_attention_lowerable(const GpucAttnGeom *a, const Tensor *q, const Tensor *k, const Tensor *v,
                              const Tensor *mask) {
  GpucDType dt = q->dt;
  if (dt != GPUC_DT_F32 && dt != GPUC_DT_F16 && dt != GPUC_DT_BF16) return false;
  if (k->dt != dt || v->dt != dt) return false;
  if (!gpuc_shape_known(q) || !gpuc_shape_known(k) || !gpuc_shape_known(v)) return false;
  if (a->D < 1 || a->D > GPUC_ATTN_MAX_HEAD || a->Dv < 1 || a->Dv > GPUC_ATTN_MAX_HEAD || a->Sk < 1 || a->Sq < 1)
    return false;
  /* grid (B*H, Sq/16) */
  if (a->B * a->H > INT32_MAX || a->Sq > (int64_t)65535 * 16) return false;
  if (!mask) return true;
  if (mask->dt != GPUC_DT_F32 && mask->dt != GPUC_DT_F16 && mask->dt != GPUC_DT_BF16) return false;
  if (!gpuc_shape_known(mask) || mask->rank > 4) return false;
  int64_t full[4] = {a->B, a->H, a->Sq, a->Sk};
  for (int d = 0; d < mask->rank; d++) {
    int64_t md = mask->dims[d];
    if (md != 1 && md != full[4 - mask->rank + d]) return false;
  }
  return true;
}
