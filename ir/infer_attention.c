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

/* Y's stored axis order (logical 0 b, 1 h, 2 s, 3 d) from y_perm or
 * bshd[3], and its strides and stored dims */
static int y_layout(const Node *n, GpucAttnGeom *a) {
  const int64_t *p;
  int np = gpuc_attr_ints(n, "y_perm", &p);
  int perm[4] = {0, 1, 2, 3};
  if (np >= 0) {
    if (np != 4 || p[3] != 3) return -1;
    bool seen[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
      if (p[i] < 0 || p[i] > 2 || seen[p[i]]) return -1;
      seen[p[i]] = true;
      perm[i] = (int)p[i];
    }
  } else if (a->bshd[3]) {
    perm[1] = 2;
    perm[2] = 1;
  }
  int64_t l[4] = {a->B, a->H, a->Sq, a->Dv}, st[4], s = 1;
  for (int i = 3; i >= 0; i--) {
    st[perm[i]] = s;
    s *= l[perm[i]];
  }
  for (int i = 0; i < 4; i++) a->ydims_perm[i] = perm[i];
  a->off[3] = 0;
  for (int i = 0; i < 3; i++) a->st[3][i] = st[i];
  return 0;
}

/* the last element a view reaches lies inside t: off + sum (n-1) stride +
 * (d-1) < numel(t), every term without overflow */
static bool view_inside(const Tensor *t, int64_t off, const int64_t st[3], const int64_t n[3], int64_t d) {
  if (!gpuc_shape_known(t) || off < 0) return false;
  int64_t last = off + d - 1, term;
  for (int i = 0; i < 3; i++) {
    if (st[i] < 0 || __builtin_mul_overflow(st[i], n[i] - 1, &term) || __builtin_add_overflow(last, term, &last))
      return false;
  }
  return last < gpuc_numel(t);
}

/* attributes view and dims (above); 0 or -1 */
static int strided_views(const Node *n, const Tensor *in[3], GpucAttnGeom *a) {
  const int64_t *v, *d;
  if (gpuc_attr_ints(n, "view", &v) != 12 || gpuc_attr_ints(n, "dims", &d) != 6) return -1;
  for (int i = 0; i < 6; i++)
    if (d[i] < 1) return -1;
  a->B = d[0]; a->H = d[1]; a->Sq = d[2]; a->Sk = d[3]; a->D = d[4]; a->Dv = d[5];
  a->Hk = a->H; /* views are made only for K/V with Q's head count */
  for (int i = 0; i < 3; i++) {
    int64_t ext[3] = {a->B, a->H, i == 0 ? a->Sq : a->Sk};
    a->off[i] = v[4 * i];
    for (int j = 0; j < 3; j++) a->st[i][j] = v[4 * i + 1 + j];
    if (!view_inside(in[i], a->off[i], a->st[i], ext, i == 2 ? a->Dv : a->D)) return -1;
  }
  return 0;
}

int gpuc_attention_geom(const Node *n, const Tensor *q, const Tensor *k, const Tensor *v, GpucAttnGeom *a) {
  const int64_t *flags;
  int nf = gpuc_attr_ints(n, "bshd", &flags);
  if (nf >= 0 && nf != 4) return -1;
  for (int i = 0; i < 4; i++) a->bshd[i] = nf == 4 && flags[i] != 0;
  a->mask_period = gpuc_attr_i(n, "mask_period", 0);
  const int64_t *unused;
  if (gpuc_attr_ints(n, "view", &unused) >= 0) {
    const Tensor *in[3] = {q, k, v};
    if (strided_views(n, in, a)) return -1;
    return y_layout(n, a);
  }
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
  strides(lq, a->bshd[0], a->st[0]);
  strides(lk, a->bshd[1], a->st[1]);
  strides(lv, a->bshd[2], a->st[2]);
  a->off[0] = a->off[1] = a->off[2] = 0;
  return y_layout(n, a);
}

/* Q [B,H,Sq,D], K [B,Hk,Sk,D], V [B,Hk,Sk,Dv] (Hk divides H), mask? broadcast to
 * [B,H,Sq,Sk] -> Y [B,H,Sq,Dv] of Q's dtype; with attribute bshd[i] set,
 * tensor i (Q, K, V, Y) is stored [B,S,H,D] instead; with view and dims,
 * Q, K and V are strided views; y_perm permutes Y's stored axes; with
 * mask_period P the mask is [P,1|H,1|Sq,1|Sk] and batch b reads mask
 * batch b mod P (windows merged into the batch, window fastest: Swin). */
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
    return gpuc_op_fail(c, "Q, K and V are not 4-D with one batch and head size and K/V heads dividing Q's, "
                           "or their views (attributes view, dims, y_perm) do not lie inside them");
  int64_t l[4] = {a.B, a.H, a.Sq, a.Dv}, dims[4];
  for (int i = 0; i < 4; i++) dims[i] = l[a.ydims_perm[i]];
  gpuc_set_shape(c->out[0], q->dt, 4, dims);
  int64_t period = a.mask_period;
  if (period && !gpuc_has_in(c, 3)) return gpuc_op_fail(c, "mask_period %lld without a mask", (long long)period);
  if (gpuc_has_in(c, 3)) {
    const Tensor *m = c->in[3];
    if (m->rank > 4) return gpuc_op_fail(c, "mask has rank %d, at most 4", m->rank);
    int64_t sd[4] = {a.B, a.H, a.Sq, a.Sk};
    if (period) { /* mask [P,...]: batch b reads mask batch b mod P */
      if (period < 0 || m->rank != 4 || (m->dims[0] >= 0 && m->dims[0] != period) || (a.B >= 0 && a.B % period))
        return gpuc_op_fail(c, "mask_period %lld needs a 4-D mask of %lld batches dividing the batch %lld",
                            (long long)period, (long long)period, (long long)a.B);
      sd[0] = period;
    }
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
  int64_t full[4] = {a->B, a->H, a->Sq, a->Sk}, period = a->mask_period;
  if (period) {
    if (period < 1 || mask->rank != 4 || mask->dims[0] != period || a->B % period) return false;
    full[0] = period;
  }
  for (int d = 0; d < mask->rank; d++) {
    int64_t md = mask->dims[d];
    if (md != 1 && md != full[4 - mask->rank + d]) return false;
  }
  return true;
}
