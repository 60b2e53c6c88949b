/* Reference kernels for Gather GatherElements GatherND ScatterElements
 * ScatterND. Every index is read, wrapped (negative counts from the back)
 * and range-checked before it addresses memory; an index out of range is an
 * error naming its position, never a read or write out of bounds.
 * Elements move as bytes; only scatter reductions do arithmetic. */
#include "ref_util.h"
#include <math.h>
#include <string.h>

static inline void copy_elem(char *d, const char *s, size_t es) {
  switch (es) {
  case 1: *d = *s; break;
  case 2: memcpy(d, s, 2); break;
  case 4: memcpy(d, s, 4); break;
  case 8: memcpy(d, s, 8); break;
  default: memcpy(d, s, es); break;
  }
}

/* Index value i of t, wrapped into [0, dim); -1 with a message if outside
 * [-dim, dim). */
static int64_t get_index(OpCtx *c, const Tensor *t, int64_t i, int64_t dim, int axis) {
  int64_t v = gpuc_get_i64(t, i);
  if (v < -dim || v >= dim) {
    gpuc_op_fail(c, "index %lld (element %lld of the indices) out of range [%lld, %lld) for axis %d",
                 (long long)v, (long long)i, (long long)-dim, (long long)dim, axis);
    return -1;
  }
  return v < 0 ? v + dim : v;
}

/* Advance a row-major multi-index over dims; false when it wraps around. */
static bool next_index(int64_t *idx, const int64_t *dims, int rank) {
  for (int k = rank - 1; k >= 0; k--) {
    if (++idx[k] < dims[k]) return true;
    idx[k] = 0;
  }
  return false;
}

/* ---- Gather ----------------------------------------------------------------- */

/* data viewed as [outer, D, inner]: out[o, n, :] = data[o, indices[n], :]. */
int ref_Gather(OpCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1];
  Tensor *y = c->out[0];
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), x->rank, &axis)) return -1;
  int64_t D = x->dims[axis], N = gpuc_numel(ind);
  int64_t outer = gpuc_shape_numel(axis, x->dims);
  int64_t inner = gpuc_shape_numel(x->rank - axis - 1, x->dims + axis + 1);
  size_t es = gpuc_dtype_size(x->dt), row = (size_t)inner * es;
  for (int64_t n = 0; n < N; n++) /* all indices first: nothing moves on a bad one */
    if (get_index(c, ind, n, D, axis) < 0) return -1;
  char *d = y->data;
  const char *s = x->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t n = 0; n < N; n++) {
      int64_t v = get_index(c, ind, n, D, axis);
      if (row) memcpy(d, s + (size_t)(o * D + v) * row, row);
      d += row;
    }
  return 0;
}

/* out[i] = data[i with i[axis] replaced by indices[i]]. */
int ref_GatherElements(OpCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1];
  Tensor *y = c->out[0];
  int r = x->rank, axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  int64_t xs[GPUC_MAX_RANK], idx[GPUC_MAX_RANK] = {0}, N = gpuc_numel(ind);
  for (int k = 0; k < r; k++)
    if (k != axis && ind->dims[k] > x->dims[k]) return gpuc_op_fail(c, "indices exceed data");
  gpuc_strides(x, xs);
  size_t es = gpuc_dtype_size(x->dt);
  for (int64_t n = 0; n < N; n++, next_index(idx, ind->dims, r)) {
    int64_t v = get_index(c, ind, n, x->dims[axis], axis);
    if (v < 0) return -1;
    int64_t off = 0;
    for (int k = 0; k < r; k++) off += (k == axis ? v : idx[k]) * xs[k];
    copy_elem((char *)y->data + n * (int64_t)es, (const char *)x->data + off * (int64_t)es, es);
  }
  return 0;
}

/* Offset (elements) into a tensor of dims[0..m) with strides st picked by
 * the m index values starting at element `at` of ind; -1 on a bad one. */
static int64_t tuple_offset(OpCtx *c, const Tensor *ind, int64_t at, int m, const int64_t *dims,
                            const int64_t *st, int axis0) {
  int64_t off = 0;
  for (int j = 0; j < m; j++) {
    int64_t v = get_index(c, ind, at + j, dims[j], axis0 + j);
    if (v < 0) return -1;
    off += v * st[j];
  }
  return off;
}

/* GatherND: per batch (first b dims), each m-tuple of indices picks a slice
 * data[batch, i0, .., im-1, ...] of prod(data dims[b+m:]) elements. */
int ref_GatherND(OpCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1];
  Tensor *y = c->out[0];
  int r = x->rank, q = ind->rank, b = (int)gpuc_attr_i(c->n, "batch_dims", 0);
  int m = (int)ind->dims[q - 1];
  int64_t xs[GPUC_MAX_RANK];
  gpuc_strides(x, xs);
  int64_t batches = gpuc_shape_numel(b, x->dims);
  int64_t per_batch = gpuc_shape_numel(q - 1 - b, ind->dims + b); /* tuples per batch */
  int64_t slice = gpuc_shape_numel(r - b - m, x->dims + b + m);
  int64_t xbatch = gpuc_shape_numel(r - b, x->dims + b);
  size_t es = gpuc_dtype_size(x->dt), bytes = (size_t)slice * es;
  for (int k = 0; k < b; k++)
    if (ind->dims[k] != x->dims[k]) return gpuc_op_fail(c, "batch dims differ");
  char *d = y->data;
  for (int64_t bi = 0; bi < batches; bi++)
    for (int64_t t = 0; t < per_batch; t++) {
      int64_t off = tuple_offset(c, ind, (bi * per_batch + t) * m, m, x->dims + b, xs + b, b);
      if (off < 0) return -1;
      if (bytes) memcpy(d, (const char *)x->data + (size_t)(bi * xbatch + off) * es, bytes);
      d += bytes;
    }
  return 0;
}

/* ---- scatter ------------------------------------------------------------- */

typedef enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } Reduction;

static int get_reduction(OpCtx *c, Reduction *red) {
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  const char *s = gpuc_attr_s(c->n, "reduction", "none");
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, names[i])) { *red = (Reduction)i; return 0; }
  return gpuc_op_fail(c, "unknown reduction '%s'", s);
}

/* y[yi] = red(y[yi], u[ui]). Floats combine in f64 (NaN propagates through
 * max/min as in numpy); integers wrap like the C types (done in uint64 to
 * stay defined); u64 compares unsigned; bools become or (add, max) / and
 * (mul, min) through the != 0 store. */
static void combine(Tensor *y, int64_t yi, const Tensor *u, int64_t ui, Reduction red) {
  size_t es = gpuc_dtype_size(y->dt);
  if (red == RED_NONE) {
    copy_elem((char *)y->data + yi * (int64_t)es, (const char *)u->data + ui * (int64_t)es, es);
    return;
  }
  if (gpuc_dtype_is_float(y->dt)) {
    double a = gpuc_get_f64(y, yi), b = gpuc_get_f64(u, ui), v;
    switch (red) {
    case RED_ADD: v = a + b; break;
    case RED_MUL: v = a * b; break;
    case RED_MAX: v = isnan(a) || isnan(b) ? NAN : a > b ? a : b; break;
    default: v = isnan(a) || isnan(b) ? NAN : a < b ? a : b; break;
    }
    gpuc_set_f64(y, yi, v);
    return;
  }
  uint64_t a = (uint64_t)gpuc_get_i64(y, yi), b = (uint64_t)gpuc_get_i64(u, ui), v;
  bool is_u64 = y->dt == GPUC_DT_U64;
  switch (red) {
  case RED_ADD: v = a + b; break;
  case RED_MUL: v = a * b; break;
  case RED_MAX: v = (is_u64 ? a > b : (int64_t)a > (int64_t)b) ? a : b; break;
  default: v = (is_u64 ? a < b : (int64_t)a < (int64_t)b) ? a : b; break;
  }
  gpuc_set_i64(y, yi, (int64_t)v);
}

/* Output starts as a copy of data. */
static void copy_data(OpCtx *c) {
  size_t n = gpuc_tensor_bytes(c->in[0]);
  if (n) memcpy(c->out[0]->data, c->in[0]->data, n);
}

/* out = data; then for each position i of indices:
 * out[i with i[axis] = indices[i]] = red(that, updates[i]), in order. */
int ref_ScatterElements(OpCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1], *upd = c->in[2];
  Tensor *y = c->out[0];
  int r = x->rank, axis;
  Reduction red = RED_NONE;
  if (get_reduction(c, &red)) return -1;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  for (int k = 0; k < r; k++)
    if ((k != axis && ind->dims[k] > x->dims[k]) || ind->dims[k] != upd->dims[k])
      return gpuc_op_fail(c, "indices, updates and data shapes disagree");
  int64_t xs[GPUC_MAX_RANK], idx[GPUC_MAX_RANK] = {0}, N = gpuc_numel(ind);
  gpuc_strides(x, xs);
  for (int64_t n = 0; n < N; n++) /* all indices first: the output stays whole */
    if (get_index(c, ind, n, x->dims[axis], axis) < 0) return -1;
  copy_data(c);
  for (int64_t n = 0; n < N; n++, next_index(idx, ind->dims, r)) {
    int64_t v = get_index(c, ind, n, x->dims[axis], axis), off = 0;
    for (int k = 0; k < r; k++) off += (k == axis ? v : idx[k]) * xs[k];
    combine(y, off, upd, n, red);
  }
  return 0;
}

/* out = data; for each k-tuple n of indices, the slice out[tuple, ...] of
 * prod(data dims[k:]) elements combines with updates[n, ...]. */
int ref_ScatterND(OpCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1], *upd = c->in[2];
  Tensor *y = c->out[0];
  int r = x->rank, q = ind->rank, k = (int)ind->dims[q - 1];
  Reduction red = RED_NONE;
  if (get_reduction(c, &red)) return -1;
  int64_t xs[GPUC_MAX_RANK];
  gpuc_strides(x, xs);
  int64_t N = gpuc_shape_numel(q - 1, ind->dims), slice = gpuc_shape_numel(r - k, x->dims + k);
  if (gpuc_numel(upd) != N * slice) return gpuc_op_fail(c, "updates have the wrong size");
  for (int64_t n = 0; n < N; n++)
    if (tuple_offset(c, ind, n * k, k, x->dims, xs, 0) < 0) return -1;
  copy_data(c);
  for (int64_t n = 0; n < N; n++) {
    int64_t off = tuple_offset(c, ind, n * k, k, x->dims, xs, 0);
    if (red == RED_NONE) {
      size_t es = gpuc_dtype_size(x->dt);
      if (slice)
        memcpy((char *)y->data + off * (int64_t)es,
               (const char *)upd->data + n * slice * (int64_t)es, (size_t)slice * es);
      continue;
    }
    for (int64_t s = 0; s < slice; s++) combine(y, off + s, upd, n * slice + s, red);
  }
  return 0;
}
