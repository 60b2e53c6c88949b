/* Shape inference of ReverseSequence-10, MaxUnpool-11, Col2Im-18 and
 * CenterCropPad-18, and the plan functions of ir/rearrange.h. */
#include "rearrange.h"
#include <string.h>

typedef long long ll;
#define DIM_LIMIT ((int64_t)1 << 40) /* attribute values and computed dims */

static const GpucDType FLOATS[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};
static const GpucDType I64[] = {GPUC_DT_I64, GPUC_DT_UNDEF};
static const GpucDType I32_64[] = {GPUC_DT_I32, GPUC_DT_I64, GPUC_DT_UNDEF};

/* INTS attribute `name` of n values in [lo, DIM_LIMIT], default dflt. */
static int ints_attr(OpCtx *c, const char *name, int n, int64_t dflt, int64_t lo, int64_t *dst, bool required) {
  const int64_t *v;
  int cnt = gpuc_attr_ints(c->n, name, &v);
  if (cnt < 0) {
    if (gpuc_attr(c->n, name)) return gpuc_op_fail(c, "attribute %s must be a list of ints", name);
    if (required) return gpuc_op_fail(c, "attribute %s is required", name);
    for (int i = 0; i < n; i++) dst[i] = dflt;
    return 0;
  }
  if (cnt != n) return gpuc_op_fail(c, "attribute %s has %d values, expected %d", name, cnt, n);
  for (int i = 0; i < n; i++) {
    if (v[i] < lo || v[i] > DIM_LIMIT)
      return gpuc_op_fail(c, "attribute %s[%d] = %lld is out of range [%lld, %lld]", name, i, (ll)v[i], (ll)lo,
                          (ll)DIM_LIMIT);
    dst[i] = v[i];
  }
  return 0;
}

/* A known 1-D int64 input of exactly n values in [lo, DIM_LIMIT] into dst;
 * 1 when its values are not known yet. */
static int shape_input(OpCtx *c, int i, const char *what, int n, int64_t lo, int64_t *dst) {
  const Tensor *t = c->in[i];
  if (t->rank != 1 || (t->dims[0] >= 0 && t->dims[0] != n))
    return gpuc_op_fail(c, "%s must be 1-D with %d values, got rank %d (%lld values)", what, n, t->rank,
                        (ll)(t->rank == 1 ? t->dims[0] : -1));
  if (!t->data) return 1;
  for (int k = 0; k < n; k++) {
    int64_t v = gpuc_get_i64(t, k);
    if (v < lo || v > DIM_LIMIT)
      return gpuc_op_fail(c, "%s[%d] = %lld is out of range [%lld, %lld]", what, k, (ll)v, (ll)lo, (ll)DIM_LIMIT);
    dst[k] = v;
  }
  return 0;
}

/* The output of rank/dims must not exceed the tensor size limit. */
static int set_out(OpCtx *c, GpucDType dt, int rank, const int64_t *dims) {
  bool known = true;
  for (int d = 0; d < rank; d++) known &= dims[d] >= 0;
  int64_t n = known ? gpuc_shape_numel(rank, dims) : 0;
  if (n < 0 || (n > 0 && (int64_t)gpuc_dtype_size(dt) > GPUC_MAX_TENSOR_BYTES / n))
    return n < 0 ? gpuc_op_fail(c, "output shape overflows int64")
                 : gpuc_op_fail(c, "output of %lld elements exceeds the tensor size limit", (ll)n);
  gpuc_set_shape(c->out[0], dt, rank, dims);
  return 0;
}

/* ---- ReverseSequence ----------------------------------------------------- */

int gpuc_revseq_axes(OpCtx *c, int *batch_axis, int *time_axis) {
  int64_t b = gpuc_attr_i(c->n, "batch_axis", 1), t = gpuc_attr_i(c->n, "time_axis", 0);
  if (!((b == 0 && t == 1) || (b == 1 && t == 0)))
    return gpuc_op_fail(c, "batch_axis and time_axis must be 0 and 1 (either way), got %lld and %lld", (ll)b, (ll)t);
  *batch_axis = (int)b;
  *time_axis = (int)t;
  return 0;
}

/* X [.., ..] (rank >= 2, axes 0 and 1 are batch and time), sequence_lens
 * int64 [batch]: Y like X. */
int infer_ReverseSequence(OpCtx *c) {
  int ba, ta;
  const Tensor *x = c->in[0], *len = c->in[1];
  if (!len) return gpuc_op_fail(c, "sequence_lens is required");
  if (gpuc_revseq_axes(c, &ba, &ta) || gpuc_check_dtype(c, 1, I64)) return -1;
  if (x->rank < 2) return gpuc_op_fail(c, "input must have rank >= 2, got %d", x->rank);
  if (len->rank != 1 || (len->dims[0] >= 0 && x->dims[ba] >= 0 && len->dims[0] != x->dims[ba]))
    return gpuc_op_fail(c, "sequence_lens must be 1-D with one length per batch entry (%lld)", (ll)x->dims[ba]);
  return gpuc_infer_same(c, 0, 0);
}

/* ---- MaxUnpool ----------------------------------------------------------- */

int gpuc_maxunpool_plan(OpCtx *c, int64_t *ydims, int64_t *idims) {
  const Tensor *x = c->in[0], *ind = c->in[1];
  int r = x->rank, nsp = r - 2;
  if (r < 3 || nsp > RA_MAX_SP) return gpuc_op_fail(c, "X must be [N, C, D1, ...] with 1 to %d spatial dims, got rank %d", RA_MAX_SP, r);
  if (ind->rank != r) return gpuc_op_fail(c, "I must have X's rank %d, got %d", r, ind->rank);
  for (int d = 0; d < r; d++)
    if (x->dims[d] >= 0 && ind->dims[d] >= 0 && x->dims[d] != ind->dims[d])
      return gpuc_op_fail(c, "I's dim %d is %lld, X's is %lld", d, (ll)ind->dims[d], (ll)x->dims[d]);
  int64_t k[RA_MAX_SP], st[RA_MAX_SP], pads[2 * RA_MAX_SP];
  if (ints_attr(c, "kernel_shape", nsp, 1, 1, k, true) || ints_attr(c, "strides", nsp, 1, 1, st, false) ||
      ints_attr(c, "pads", 2 * nsp, 0, 0, pads, false))
    return -1;
  bool given = gpuc_has_in(c, 2);
  if (given) { /* output_shape disambiguates the size: pads are not used */
    if (gpuc_check_dtype(c, 2, I64)) return -1;
    memset(pads, 0, sizeof pads);
  }
  idims[0] = x->dims[0];
  idims[1] = x->dims[1];
  for (int i = 0; i < nsp; i++) {
    int64_t in = x->dims[2 + i];
    if (in < 0) { idims[2 + i] = -1; continue; }
    if (in > 0 && in - 1 > DIM_LIMIT / st[i])
      return gpuc_op_fail(c, "spatial dim %d: input %lld times stride %lld is too large", i, (ll)in, (ll)st[i]);
    int64_t o = (in - 1) * st[i] + k[i] - pads[i] - pads[nsp + i];
    if (o < 0 || o > DIM_LIMIT)
      return gpuc_op_fail(c, "spatial dim %d: output size %lld from input %lld, kernel %lld, stride %lld, pads %lld+%lld is invalid",
                          i, (ll)o, (ll)in, (ll)k[i], (ll)st[i], (ll)pads[i], (ll)pads[nsp + i]);
    idims[2 + i] = o;
  }
  if (!given) {
    memcpy(ydims, idims, sizeof(int64_t) * (size_t)r);
    return 0;
  }
  int rc = shape_input(c, 2, "output_shape", r, 0, ydims);
  if (rc) return rc;
  for (int d = 0; d < r; d++)
    if (idims[d] >= 0 && (d < 2 ? ydims[d] != idims[d] : ydims[d] < idims[d]))
      return gpuc_op_fail(c, "output_shape[%d] = %lld is %s X's unpooled size %lld", d, (ll)ydims[d],
                          d < 2 ? "not" : "smaller than", (ll)idims[d]);
  return 0;
}

int infer_MaxUnpool(OpCtx *c) {
  if (!c->in[1]) return gpuc_op_fail(c, "I is required");
  if (gpuc_check_dtype(c, 0, FLOATS) || gpuc_check_dtype(c, 1, I64)) return -1;
  int64_t yd[GPUC_MAX_RANK], id[GPUC_MAX_RANK];
  int rc = gpuc_maxunpool_plan(c, yd, id);
  if (rc < 0) return -1;
  if (rc > 0) return gpuc_infer_unknown(c, 0, c->in[0]->dt);
  return set_out(c, c->in[0]->dt, c->in[0]->rank, yd);
}

/* ---- Col2Im -------------------------------------------------------------- */

int gpuc_col2im_plan(OpCtx *c, Col2ImPlan *p) {
  const Tensor *x = c->in[0], *im = c->in[1], *bl = c->in[2];
  memset(p, 0, sizeof *p);
  if (x->rank != 3) return gpuc_op_fail(c, "input must be [N, C * prod(block_shape), L], got rank %d", x->rank);
  if (im->rank != 1 || im->dims[0] < 1 || im->dims[0] > RA_MAX_SP)
    return gpuc_op_fail(c, "image_shape must be 1-D with 1 to %d values", RA_MAX_SP);
  int nsp = p->nsp = (int)im->dims[0];
  int64_t pads[2 * RA_MAX_SP];
  if (ints_attr(c, "strides", nsp, 1, 1, p->stride, false) || ints_attr(c, "dilations", nsp, 1, 1, p->dil, false) ||
      ints_attr(c, "pads", 2 * nsp, 0, 0, pads, false))
    return -1;
  int rc1 = shape_input(c, 1, "image_shape", nsp, 1, p->image);
  int rc2 = shape_input(c, 2, "block_shape", nsp, 1, p->block);
  if (rc1 < 0 || rc2 < 0) return -1;
  if (rc1 || rc2) return 1;
  (void)bl;
  p->n = x->dims[0];
  p->kprod = 1;
  p->L = 1;
  for (int i = 0; i < nsp; i++) {
    p->pad_b[i] = pads[i];
    p->pad_e[i] = pads[nsp + i];
    int64_t span = p->dil[i] * (p->block[i] - 1) + 1, padded = p->image[i] + p->pad_b[i] + p->pad_e[i];
    if (p->block[i] > DIM_LIMIT / p->dil[i] || span > padded)
      return gpuc_op_fail(c, "dim %d: block %lld (dilation %lld) does not fit the padded image %lld", i,
                          (ll)p->block[i], (ll)p->dil[i], (ll)padded);
    p->blocks[i] = (padded - span) / p->stride[i] + 1;
    if (p->kprod > DIM_LIMIT / p->block[i] || p->L > DIM_LIMIT / p->blocks[i])
      return gpuc_op_fail(c, "block_shape or image_shape too large");
    p->kprod *= p->block[i];
    p->L *= p->blocks[i];
  }
  int64_t ck = x->dims[1], l = x->dims[2];
  if (ck >= 0 && ck % p->kprod != 0)
    return gpuc_op_fail(c, "input dim 1 (%lld) is not a multiple of prod(block_shape) = %lld", (ll)ck, (ll)p->kprod);
  if (l >= 0 && l != p->L)
    return gpuc_op_fail(c, "input dim 2 (%lld) must be the number of blocks, %lld", (ll)l, (ll)p->L);
  p->c = ck < 0 ? -1 : ck / p->kprod;
  return 0;
}

int infer_Col2Im(OpCtx *c) {
  if (!c->in[1] || !c->in[2]) return gpuc_op_fail(c, "image_shape and block_shape are required");
  if (gpuc_check_dtype(c, 0, FLOATS) || gpuc_check_dtype(c, 1, I64) || gpuc_check_dtype(c, 2, I64)) return -1;
  Col2ImPlan p;
  int rc = gpuc_col2im_plan(c, &p);
  if (rc < 0) return -1;
  if (rc > 0) return gpuc_infer_unknown(c, 0, c->in[0]->dt);
  int64_t yd[GPUC_MAX_RANK] = {p.n, p.c};
  memcpy(yd + 2, p.image, sizeof(int64_t) * (size_t)p.nsp);
  return set_out(c, c->in[0]->dt, p.nsp + 2, yd);
}

/* ---- CenterCropPad ------------------------------------------------------- */

int gpuc_ccp_plan(OpCtx *c, int64_t *ydims, int64_t *shift) {
  const Tensor *x = c->in[0], *sh = c->in[1];
  int r = x->rank;
  if (r < 1) return gpuc_op_fail(c, "input must have rank >= 1");
  int64_t axes[GPUC_MAX_RANK], want[GPUC_MAX_RANK];
  const int64_t *av;
  int na = gpuc_attr_ints(c->n, "axes", &av);
  bool seen[GPUC_MAX_RANK] = {false};
  if (na < 0) {
    if (gpuc_attr(c->n, "axes")) return gpuc_op_fail(c, "attribute axes must be a list of ints");
    na = r;
    for (int i = 0; i < r; i++) axes[i] = i;
  } else {
    if (na > r) return gpuc_op_fail(c, "%d axes for an input of rank %d", na, r);
    for (int i = 0; i < na; i++) {
      int a;
      if (gpuc_norm_axis(c, av[i], r, &a)) return -1;
      if (seen[a]) return gpuc_op_fail(c, "axis %d appears twice in axes", a);
      seen[a] = true;
      axes[i] = a;
    }
  }
  int rc = shape_input(c, 1, "shape", na, 0, want);
  if (rc) return rc;
  (void)sh;
  for (int d = 0; d < r; d++) { ydims[d] = x->dims[d]; shift[d] = 0; }
  bool unknown = false;
  for (int i = 0; i < na; i++) {
    int a = (int)axes[i];
    int64_t dim = x->dims[a];
    ydims[a] = want[i];
    if (dim < 0) { unknown = true; continue; }
    /* crop: start (dim - want) / 2; pad: X starts at (want - dim) / 2 (floor) */
    shift[a] = want[i] <= dim ? (dim - want[i]) / 2 : -((want[i] - dim) / 2);
  }
  return unknown ? 1 : 0;
}

int infer_CenterCropPad(OpCtx *c) {
  if (!c->in[1]) return gpuc_op_fail(c, "shape is required");
  if (gpuc_check_dtype(c, 1, I32_64)) return -1;
  int64_t yd[GPUC_MAX_RANK], shift[GPUC_MAX_RANK];
  int rc = gpuc_ccp_plan(c, yd, shift);
  if (rc < 0) return -1;
  if (rc > 0) {
    /* the shape is known but not a dim of X: the rank still is */
    if (c->in[1]->data) return set_out(c, c->in[0]->dt, c->in[0]->rank, yd);
    return gpuc_infer_unknown(c, 0, c->in[0]->dt);
  }
  return set_out(c, c->in[0]->dt, c->in[0]->rank, yd);
}
