/* Shape inference for indexing ops: Gather GatherElements GatherND
 * ScatterElements ScatterND. Index values are checked by the reference
 * kernels (they are data); here only shapes, ranks and dtypes. */
#include "infer_util.h"
#include <string.h>

/* Indices must be integers (ONNX allows int32/int64; any integer works). */
static int check_indices(OpCtx *c, int i) {
  if (!gpuc_dtype_is_int(c->in[i]->dt))
    return gpuc_op_fail(c, "indices (input %d) must be integers, are %s", i,
                        gpuc_dtype_name(c->in[i]->dt));
  return 0;
}

/* Two dims that must agree: the known one wins; fail if both are known and
 * differ. */
static int merge_dim(OpCtx *c, int64_t a, int64_t b, int64_t *out, const char *what, int d) {
  if (a >= 0 && b >= 0 && a != b)
    return gpuc_op_fail(c, "%s dim %d is %lld, expected %lld", what, d, (long long)a, (long long)b);
  *out = a >= 0 ? a : b;
  return 0;
}

static int set_out(OpCtx *c, GpucDType dt, int rank, const int64_t *dims) {
  if (rank > GPUC_MAX_RANK)
    return gpuc_op_fail(c, "output rank %d is beyond the supported %d", rank, GPUC_MAX_RANK);
  gpuc_set_shape(c->out[0], dt, rank, dims);
  return 0;
}

/* Gather(data[r], indices[q], axis) -> data[:axis] + indices + data[axis+1:]. */
int infer_Gather(OpCtx *c) {
  const Tensor *x = c->in[0], *idx = c->in[1];
  int r = x->rank, q = idx->rank, axis;
  if (check_indices(c, 1)) return -1;
  if (r < 1) return gpuc_op_fail(c, "cannot gather from a scalar");
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  if (r - 1 + q > GPUC_MAX_RANK)
    return gpuc_op_fail(c, "output rank %d is beyond the supported %d", r - 1 + q, GPUC_MAX_RANK);
  int64_t dims[GPUC_MAX_RANK];
  int k = 0;
  for (int d = 0; d < axis; d++) dims[k++] = x->dims[d];
  for (int d = 0; d < q; d++) dims[k++] = idx->dims[d];
  for (int d = axis + 1; d < r; d++) dims[k++] = x->dims[d];
  return set_out(c, x->dt, k, dims);
}

/* GatherElements(data[r], indices[r], axis) -> indices' shape. Off the
 * axis, indices dims may not exceed data dims (they index data directly). */
int infer_GatherElements(OpCtx *c) {
  const Tensor *x = c->in[0], *idx = c->in[1];
  int r = x->rank, axis;
  if (check_indices(c, 1)) return -1;
  if (r < 1) return gpuc_op_fail(c, "cannot gather from a scalar");
  if (idx->rank != r)
    return gpuc_op_fail(c, "indices have rank %d, data has rank %d", idx->rank, r);
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  for (int d = 0; d < r; d++)
    if (d != axis && x->dims[d] >= 0 && idx->dims[d] > x->dims[d])
      return gpuc_op_fail(c, "indices dim %d (%lld) exceeds data dim (%lld)", d,
                          (long long)idx->dims[d], (long long)x->dims[d]);
  return set_out(c, x->dt, r, idx->dims);
}

/* GatherND(data[r], indices[q], batch_dims b): m = indices.shape[-1] picks
 * m leading (post-batch) dims of data; output = indices.shape[:-1] +
 * data.shape[b+m:]. The first b dims of data and indices must agree. */
int infer_GatherND(OpCtx *c) {
  const Tensor *x = c->in[0], *idx = c->in[1];
  int r = x->rank, q = idx->rank;
  int64_t b = gpuc_attr_i(c->n, "batch_dims", 0);
  if (check_indices(c, 1)) return -1;
  if (r < 1 || q < 1) return gpuc_op_fail(c, "data and indices need rank >= 1");
  if (b < 0 || b >= q || b >= r)
    return gpuc_op_fail(c, "batch_dims %lld must be below both ranks (%d, %d)", (long long)b, r, q);
  int64_t m = idx->dims[q - 1];
  if (m < 0) return gpuc_infer_unknown(c, 0, x->dt);
  if (m < 1 || m > r - b)
    return gpuc_op_fail(c, "indices' last dim %lld must be in [1, %lld]", (long long)m,
                        (long long)(r - b));
  int R = q - 1 + r - (int)b - (int)m;
  if (R > GPUC_MAX_RANK)
    return gpuc_op_fail(c, "output rank %d is beyond the supported %d", R, GPUC_MAX_RANK);
  int64_t dims[GPUC_MAX_RANK];
  int k = 0;
  for (int d = 0; d < q - 1; d++) {
    dims[k] = idx->dims[d];
    if (d < b && merge_dim(c, idx->dims[d], x->dims[d], &dims[k], "indices' batch", d)) return -1;
    k++;
  }
  for (int d = (int)(b + m); d < r; d++) dims[k++] = x->dims[d];
  return set_out(c, x->dt, k, dims);
}

/* reduction attribute of the scatter ops (opset 16: add, mul; 18: max, min) */
static int check_reduction(OpCtx *c) {
  static const char *const ok[] = {"none", "add", "mul", "max", "min"};
  const char *s = gpuc_attr_s(c->n, "reduction", "none");
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, ok[i])) return 0;
  return gpuc_op_fail(c, "unknown reduction '%s'", s);
}

/* updates must have data's dtype */
static int check_updates(OpCtx *c) {
  if (c->in[2]->dt != c->in[0]->dt)
    return gpuc_op_fail(c, "updates are %s, data is %s", gpuc_dtype_name(c->in[2]->dt),
                        gpuc_dtype_name(c->in[0]->dt));
  return 0;
}

/* ScatterElements(data[r], indices[r], updates = indices' shape, axis)
 * -> data's shape. */
int infer_ScatterElements(OpCtx *c) {
  const Tensor *x = c->in[0], *idx = c->in[1], *upd = c->in[2];
  int r = x->rank, axis;
  if (check_indices(c, 1) || check_updates(c) || check_reduction(c)) return -1;
  if (r < 1) return gpuc_op_fail(c, "cannot scatter into a scalar");
  if (idx->rank != r || upd->rank != r)
    return gpuc_op_fail(c, "data, indices and updates need the same rank (%d, %d, %d)", r,
                        idx->rank, upd->rank);
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  for (int d = 0; d < r; d++) {
    int64_t m;
    if (merge_dim(c, upd->dims[d], idx->dims[d], &m, "updates (shaped as indices)", d)) return -1;
    if (d != axis && x->dims[d] >= 0 && idx->dims[d] > x->dims[d])
      return gpuc_op_fail(c, "indices dim %d (%lld) exceeds data dim (%lld)", d,
                          (long long)idx->dims[d], (long long)x->dims[d]);
  }
  return gpuc_infer_same(c, 0, 0);
}

/* ScatterND(data[r], indices[q], updates): k = indices.shape[-1] <= r,
 * updates.shape = indices.shape[:-1] + data.shape[k:] -> data's shape. */
int infer_ScatterND(OpCtx *c) {
  const Tensor *x = c->in[0], *idx = c->in[1], *upd = c->in[2];
  int r = x->rank, q = idx->rank;
  if (check_indices(c, 1) || check_updates(c) || check_reduction(c)) return -1;
  if (q < 1) return gpuc_op_fail(c, "indices need rank >= 1");
  int64_t k = idx->dims[q - 1];
  if (k > r)
    return gpuc_op_fail(c, "indices' last dim %lld exceeds the data rank %d", (long long)k, r);
  if (k >= 0) {
    int ur = q - 1 + r - (int)k;
    if (upd->rank != ur)
      return gpuc_op_fail(c, "updates have rank %d, expected %d", upd->rank, ur);
    for (int d = 0; d < ur; d++) {
      int64_t want = d < q - 1 ? idx->dims[d] : x->dims[k + d - (q - 1)], m;
      if (merge_dim(c, upd->dims[d], want, &m, "updates", d)) return -1;
    }
  }
  return gpuc_infer_same(c, 0, 0);
}
