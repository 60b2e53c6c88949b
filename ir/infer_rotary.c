/* Shape inference of RotaryEmbedding-23 (ONNX, default domain):
 *   Y = RotaryEmbedding(X, cos_cache, sin_cache, position_ids?)
 * X 4-D [B, H, S, D] or 3-D [B, S, H*D] (then attribute num_heads gives
 * H); Y has X's shape and dtype. With position_ids [B, S] (int64) the
 * caches are [max_pos, rot/2] and gathered by them, else [B, S, rot/2].
 * rot = rotary_embedding_dim, or D when it is 0; the first rot features of
 * each head are rotated, the rest pass through. Every inconsistency the
 * shapes known here show is an error naming the node; frontend/onnx_rotary.c
 * then replaces the node by primitive ops, so the checks run at import. */
#include "infer_util.h"
#include "rotary.h"
#include <string.h>

#define ROT_DIM_LIMIT (1LL << 40) /* attribute values past any real tensor */

/* expected dim e of cache `name` (-1: any), dim d of tensor t */
static int check_dim(OpCtx *c, const char *name, const Tensor *t, int d, int64_t e, const char *what) {
  if (e < 0 || t->dims[d] < 0 || t->dims[d] == e) return 0;
  return gpuc_op_fail(c, "%s has %lld in dim %d, expected %lld (%s)", name, (long long)t->dims[d], d,
                      (long long)e, what);
}

int gpuc_rotary_geom(OpCtx *c, RotaryGeom *r) {
  const Tensor *x = c->in[0];
  if (c->g->opset < 23)
    return gpuc_op_fail(c, "RotaryEmbedding is an opset 23 op; the model imports opset %lld",
                        (long long)c->g->opset);
  /* RotaryEmbedding-23 has three int attributes: anything else is a model error, not ignored */
  for (int k = 0; k < c->n->nattr; k++) {
    const Attr *a = &c->n->attrs[k];
    if (strcmp(a->name, "interleaved") && strcmp(a->name, "num_heads") && strcmp(a->name, "rotary_embedding_dim"))
      return gpuc_op_fail(c, "unknown attribute '%s' (RotaryEmbedding-23 has interleaved, num_heads, "
                          "rotary_embedding_dim)", a->name);
    if (a->kind != GPUC_ATTR_INT) return gpuc_op_fail(c, "attribute %s must be an int", a->name);
  }
  int64_t inter = gpuc_attr_i(c->n, "interleaved", 0), heads = gpuc_attr_i(c->n, "num_heads", 0);
  int64_t partial = gpuc_attr_i(c->n, "rotary_embedding_dim", 0);
  if (inter != 0 && inter != 1) return gpuc_op_fail(c, "attribute interleaved is %lld, not 0 or 1", (long long)inter);
  if (heads < 0 || heads > ROT_DIM_LIMIT)
    return gpuc_op_fail(c, "attribute num_heads is %lld, not a head count", (long long)heads);
  if (partial < 0 || partial > ROT_DIM_LIMIT)
    return gpuc_op_fail(c, "attribute rotary_embedding_dim is %lld, not a feature count", (long long)partial);
  if (partial % 2) return gpuc_op_fail(c, "attribute rotary_embedding_dim is %lld, not even", (long long)partial);
  static const GpucDType floats[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, floats)) return -1;
  *r = (RotaryGeom){.rank = x->rank, .partial = partial, .interleaved = inter, .has_pos = gpuc_has_in(c, 3)};
  if (x->rank == 4) { /* [B, H, S, D] */
    /* num_heads is not read: ONNX's definition (and torch.onnx.ops) ignores it for 4-D X */
    r->B = x->dims[0], r->H = x->dims[1], r->S = x->dims[2], r->D = x->dims[3];
  } else if (x->rank == 3) { /* [B, S, H*D] */
    if (!heads)
      return gpuc_op_fail(c, "a 3-D X [batch, seq, hidden] needs attribute num_heads (> 0)");
    int64_t hidden = x->dims[2];
    if (hidden >= 0 && hidden % heads)
      return gpuc_op_fail(c, "hidden size %lld does not divide into num_heads %lld", (long long)hidden,
                          (long long)heads);
    r->B = x->dims[0], r->S = x->dims[1], r->H = heads, r->D = hidden >= 0 ? hidden / heads : -1;
  } else {
    return gpuc_op_fail(c, "X has rank %d; it must be 4-D [batch, heads, seq, head_size] or 3-D "
                        "[batch, seq, hidden]", x->rank);
  }
  r->rot = partial ? partial : r->D;
  if (r->D >= 0 && partial > r->D)
    return gpuc_op_fail(c, "rotary_embedding_dim %lld is larger than the head size %lld", (long long)partial,
                        (long long)r->D);
  if (!partial && r->D >= 0 && r->D % 2)
    return gpuc_op_fail(c, "the head size %lld is odd: a full rotation needs an even one", (long long)r->D);
  int64_t half = r->rot >= 0 ? r->rot / 2 : -1;
  /* caches: [max_pos, rot/2] with position_ids, else [B, S, rot/2]; both alike */
  static const char *cname[2] = {"cos_cache", "sin_cache"};
  for (int k = 1; k <= 2; k++) {
    const Tensor *t = c->in[k];
    const char *nm = cname[k - 1];
    if (t->dt != x->dt)
      return gpuc_op_fail(c, "%s is %s, X %s: they must have one dtype", nm, gpuc_dtype_name(t->dt),
                          gpuc_dtype_name(x->dt));
    int want = r->has_pos ? 2 : 3;
    if (t->rank != want)
      return gpuc_op_fail(c, "%s has rank %d; %s", nm, t->rank,
                          r->has_pos ? "with position_ids it must be 2-D [max_position_id + 1, rotary_dim / 2]"
                                     : "without position_ids it must be 3-D [batch, seq, rotary_dim / 2]");
    if (check_dim(c, nm, t, want - 1, half, "rotary_dim / 2")) return -1;
    if (!r->has_pos && (check_dim(c, nm, t, 0, r->B, "X's batch") || check_dim(c, nm, t, 1, r->S, "X's sequence")))
      return -1;
  }
  const Tensor *cs = c->in[1], *sn = c->in[2];
  for (int d = 0; d < cs->rank; d++)
    if (cs->dims[d] >= 0 && sn->dims[d] >= 0 && cs->dims[d] != sn->dims[d])
      return gpuc_op_fail(c, "cos_cache and sin_cache differ in dim %d (%lld vs %lld)", d,
                          (long long)cs->dims[d], (long long)sn->dims[d]);
  if (r->has_pos) {
    const Tensor *p = c->in[3];
    if (p->dt != GPUC_DT_I64)
      return gpuc_op_fail(c, "position_ids is %s, it must be int64", gpuc_dtype_name(p->dt));
    if (p->rank != 2) return gpuc_op_fail(c, "position_ids has rank %d; it must be 2-D [batch, seq]", p->rank);
    if (check_dim(c, "position_ids", p, 0, r->B, "X's batch") || check_dim(c, "position_ids", p, 1, r->S, "X's sequence"))
      return -1;
    int64_t max_pos = cs->dims[0];
    for (int64_t i = 0; p->data && max_pos >= 0 && i < gpuc_numel(p); i++) {
      int64_t v = gpuc_get_i64(p, i);
      if (v < 0 || v >= max_pos)
        return gpuc_op_fail(c, "position_ids[%lld] is %lld, outside the caches' %lld positions", (long long)i,
                            (long long)v, (long long)max_pos);
    }
  }
  return 0;
}

int infer_RotaryEmbedding(OpCtx *c) {
  RotaryGeom r;
  if (gpuc_rotary_geom(c, &r)) return -1;
  return gpuc_infer_same(c, 0, 0);
}

/* RotaryHalf(X, Cos, Sin) {perm?} (internal, ir/ops.def): Y has X's dtype
 * and shape, X's read through Transpose `perm` when given (a permutation
 * that keeps the last axis last); X float with an even, known last dim;
 * Cos and Sin of X's dtype, broadcasting (numpy) to Y's shape. */
int gpuc_rotary_half_shape(OpCtx *c, int64_t dims[GPUC_MAX_RANK]) {
  for (int k = 0; k < 3; k++)
    if (!c->in[k]) return gpuc_op_fail(c, "input %d is missing", k);
  const Tensor *x = c->in[0];
  int r = x->rank;
  if (!gpuc_dtype_is_float(x->dt) || r < 1) return gpuc_op_fail(c, "X must be a float tensor of rank >= 1");
  const int64_t *perm;
  int np = gpuc_attr_ints(c->n, "perm", &perm);
  if (np < 0) np = 0; /* absent: X as it is */
  bool seen[GPUC_MAX_RANK] = {0};
  if (np && np != r) return gpuc_op_fail(c, "perm has %d entries, X has rank %d", np, r);
  for (int d = 0; d < r; d++) {
    int64_t p = np ? perm[d] : d;
    if (p < 0 || p >= r || seen[p]) return gpuc_op_fail(c, "perm is not a permutation of X's axes");
    seen[p] = true;
    dims[d] = x->dims[p];
  }
  if (np && perm[r - 1] != r - 1) return gpuc_op_fail(c, "perm moves the last axis");
  if (dims[r - 1] >= 0 && dims[r - 1] % 2)
    return gpuc_op_fail(c, "X's last dim %lld is odd: no halves to rotate", (long long)dims[r - 1]);
  for (int k = 1; k < 3; k++) {
    const Tensor *t = c->in[k];
    if (t->dt != x->dt)
      return gpuc_op_fail(c, "input %d is %s, X is %s", k, gpuc_dtype_name(t->dt), gpuc_dtype_name(x->dt));
    if (t->rank > r) return gpuc_op_fail(c, "input %d has a higher rank than X", k);
    for (int d = 0; d < t->rank; d++) {
      int64_t td = t->dims[d], yd = dims[r - t->rank + d];
      if (td >= 0 && yd >= 0 && td != 1 && td != yd)
        return gpuc_op_fail(c, "input %d's dim %d (%lld) does not broadcast to %lld", k, d, (long long)td,
                            (long long)yd);
    }
  }
  return 0;
}

void gpuc_rotary_half_strides(const Node *n, const Tensor *x, int64_t xs[GPUC_MAX_RANK]) {
  const int64_t *perm;
  int r = x->rank, np = gpuc_attr_ints(n, "perm", &perm);
  int64_t st = 1;
  for (int a = r - 1; a >= 0; a--) { /* X's axis a is Y's axis k where perm[k] == a */
    for (int k = 0; k < r; k++)
      if ((np == r ? perm[k] : k) == a) xs[k] = st;
    st *= x->dims[a];
  }
}

int infer_RotaryHalf(OpCtx *c) {
  int64_t dims[GPUC_MAX_RANK];
  if (gpuc_rotary_half_shape(c, dims)) return -1;
  if (c->out[0]) gpuc_set_shape(c->out[0], c->in[0]->dt, c->in[0]->rank, dims);
  return 0;
}
