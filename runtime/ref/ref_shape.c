/* Reference kernels for the shape and data-movement ops: Shape Size Reshape
 * Flatten Squeeze Unsqueeze Transpose Concat Split Slice Expand Tile Pad
 * Trilu. They move bytes (element size from the dtype), never values, so
 * every dtype works the same way and nothing goes through double.
 *
 * Shapes were inferred (and checked) by infer_<Op> just before the kernel
 * runs; the kernels rely on the output shapes and recompute only what the
 * shapes do not tell (slice starts, pad offsets, split sizes of unused
 * outputs) through the same planning functions. */
#include "ref_util.h"
#include <stdlib.h>
#include <string.h>

/* Defined in ir/infer_shape.c: 0 known, 1 unknown (not at run time), -1 error. */
int gpuc_slice_plan(OpCtx *c, int64_t *start, int64_t *step, int64_t *count);
int gpuc_pad_plan(OpCtx *c, int64_t *before, int64_t *after, int *mode);
int gpuc_split_plan(OpCtx *c, int *axis, int64_t *sizes);

/* ---- byte movers ---------------------------------------------------------- */

/* Copy one element of es bytes; fixed sizes so the compiler emits one move. */
static inline void copy_elem(char *d, const char *s, size_t es) {
  switch (es) {
  case 1: *d = *s; break;
  case 2: memcpy(d, s, 2); break;
  case 4: memcpy(d, s, 4); break;
  case 8: memcpy(d, s, 8); break;
  default: memcpy(d, s, es); break;
  }
}

/* Fill n elements of es bytes at d with the element at s. */
static void fill_elem(char *d, const char *s, int64_t n, size_t es) {
  for (int64_t i = 0; i < n; i++) copy_elem(d + i * (int64_t)es, s, es);
}

#define VIEW_MAX (2 * GPUC_MAX_RANK)

/* Strided gather: dst is row-major with dims[0..rank); its element at
 * multi-index i is src[off + sum_k i[k] * stride[k]] (strides in elements;
 * 0 repeats, negative walks backwards). The caller guarantees every source
 * index lies inside src. rank may be up to VIEW_MAX (Tile uses 2 * rank). */
static void strided_copy(void *dst, const void *src, int rank, const int64_t *dims,
                         const int64_t *stride, int64_t off, size_t es) {
  for (int k = 0; k < rank; k++)
    if (dims[k] == 0) return;
  const char *s0 = src;
  char *d = dst;
  if (rank == 0) { copy_elem(d, s0 + off * (int64_t)es, es); return; }
  int64_t inner = dims[rank - 1], is = stride[rank - 1], idx[VIEW_MAX] = {0}, base = off;
  for (;;) {
    const char *s = s0 + base * (int64_t)es;
    if (is == 1) memcpy(d, s, (size_t)inner * es);
    else if (is == 0) fill_elem(d, s, inner, es);
    else
      for (int64_t j = 0; j < inner; j++) copy_elem(d + j * (int64_t)es, s + j * is * (int64_t)es, es);
    d += inner * (int64_t)es;
    /* odometer over the outer dims */
    int k = rank - 2;
    for (; k >= 0; k--) {
      base += stride[k];
      if (++idx[k] < dims[k]) break;
      base -= stride[k] * dims[k];
      idx[k] = 0;
    }
    if (k < 0) break;
  }
}

/* Row-major strides in elements of a known shape. */
static void strides_of(const Tensor *t, int64_t *st) { gpuc_strides(t, st); }

static size_t esize(const Tensor *t) { return gpuc_dtype_size(t->dt); }

/* Whole-tensor copy: ops that only relabel the shape. */
static int copy_all(OpCtx *c) {
  size_t n = gpuc_tensor_bytes(c->out[0]);
  if (n != gpuc_tensor_bytes(c->in[0]))
    return gpuc_op_fail(c, "output and input sizes differ (%zu vs %zu bytes)", n,
                        gpuc_tensor_bytes(c->in[0]));
  if (n) memcpy(c->out[0]->data, c->in[0]->data, n);
  return 0;
}

/* ---- Shape, Size ------------------------------------------------------------ */

int ref_Shape(OpCtx *c) {
  const Tensor *x = c->in[0];
  /* the same start normalization as infer_Shape; the length is the output's */
  int64_t r = x->rank, start = gpuc_attr_i(c->n, "start", 0);
  if (start < 0) start += r;
  start = start < 0 ? 0 : start > r ? r : start;
  int64_t len = c->out[0]->dims[0];
  if (start + len > r) return gpuc_op_fail(c, "shape range out of the input's rank");
  for (int64_t i = 0; i < len; i++) ((int64_t *)c->out[0]->data)[i] = x->dims[start + i];
  return 0;
}

int ref_Size(OpCtx *c) {
  *(int64_t *)c->out[0]->data = gpuc_numel(c->in[0]);
  return 0;
}

/* ---- pure relabelling: same bytes, new shape ----------------------------- */

int ref_Reshape(OpCtx *c) { return copy_all(c); }
int ref_Flatten(OpCtx *c) { return copy_all(c); }
int ref_Squeeze(OpCtx *c) { return copy_all(c); }
int ref_Unsqueeze(OpCtx *c) { return copy_all(c); }

/* ---- Transpose, Concat, Split --------------------------------------------- */

/* out[i0..] = x[...] with out dim k = x dim perm[k]: a strided view of x. */
int ref_Transpose(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int r = x->rank;
  int64_t xs[GPUC_MAX_RANK], st[GPUC_MAX_RANK];
  strides_of(x, xs);
  const int64_t *perm;
  int n = gpuc_attr_ints(c->n, "perm", &perm);
  for (int k = 0; k < r; k++) {
    int64_t p = n < 0 ? r - 1 - k : perm[k] < 0 ? perm[k] + r : perm[k];
    if (p < 0 || p >= r || y->dims[k] != x->dims[p]) return gpuc_op_fail(c, "bad perm");
    st[k] = xs[p];
  }
  strided_copy(y->data, x->data, r, y->dims, st, 0, esize(x));
  return 0;
}

/* Each outer index (dims before the axis) gets a contiguous chunk of every
 * input in turn: chunk_k = prod(x_k dims[axis:]). */
int ref_Concat(OpCtx *c) {
  Tensor *y = c->out[0];
  int r = y->rank, axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 1), r, &axis)) return -1;
  int64_t outer = gpuc_shape_numel(axis, y->dims);
  size_t es = esize(y);
  char *d = y->data;
  for (int64_t o = 0; o < outer; o++)
    for (int k = 0; k < c->nin; k++) {
      const Tensor *x = c->in[k];
      size_t chunk = (size_t)gpuc_shape_numel(r - axis, x->dims + axis) * es;
      if (chunk) memcpy(d, (const char *)x->data + (size_t)o * chunk, chunk);
      d += chunk;
    }
  return 0;
}

/* The reverse of Concat; unused outputs (NULL) still advance the source. */
int ref_Split(OpCtx *c) {
  const Tensor *x = c->in[0];
  int axis;
  int64_t *sizes = malloc(sizeof(int64_t) * (size_t)(c->nout + 1));
  if (!sizes) return gpuc_op_fail(c, "out of host memory");
  if (gpuc_split_plan(c, &axis, sizes)) { free(sizes); return -1; }
  size_t es = esize(x);
  int64_t outer = gpuc_shape_numel(axis, x->dims);
  int64_t inner = gpuc_shape_numel(x->rank - axis - 1, x->dims + axis + 1);
  const char *s = x->data;
  for (int64_t o = 0; o < outer; o++)
    for (int k = 0; k < c->nout; k++) {
      size_t chunk = (size_t)(sizes[k] * inner) * es;
      if (c->out[k] && chunk) memcpy((char *)c->out[k]->data + (size_t)o * chunk, s, chunk);
      s += chunk;
    }
  free(sizes);
  return 0;
}

/* Output j's channel c is the concatenation's channel s = (t % group) *
 * (C / group) + t / group, t = starts[j] + c: a run of `inner` elements
 * from the input holding s. */
int ref_ChannelShuffle(OpCtx *c) {
  const Tensor *x = c->in[0];
  int r = x->rank, axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 1), r, &axis)) return -1;
  int64_t group = gpuc_attr_i(c->n, "group", 1), C = 0;
  const int64_t *st;
  if (gpuc_attr_ints(c->n, "starts", &st) != c->nout) return gpuc_op_fail(c, "needs a start per output");
  for (int k = 0; k < c->nin; k++) C += c->in[k]->dims[axis];
  int64_t outer = gpuc_shape_numel(axis, x->dims), inner = gpuc_shape_numel(r - axis - 1, x->dims + axis + 1);
  size_t es = esize(x), run = (size_t)inner * es;
  for (int j = 0; j < c->nout; j++) {
    Tensor *y = c->out[j];
    if (!y) continue;
    int64_t n = y->dims[axis];
    for (int64_t o = 0; o < outer; o++)
      for (int64_t ch = 0; ch < n; ch++) {
        int64_t t = st[j] + ch, s = (t % group) * (C / group) + t / group;
        int k = 0;
        while (s >= c->in[k]->dims[axis]) s -= c->in[k++]->dims[axis];
        const char *src = (const char *)c->in[k]->data + (size_t)((o * c->in[k]->dims[axis] + s) * inner) * es;
        if (run) memcpy((char *)y->data + (size_t)((o * n + ch) * inner) * es, src, run);
      }
  }
  return 0;
}

/* ---- Slice, Expand, Tile ----------------------------------------------------- */

/* out[i] = x[start + i * step] per axis: a strided view of x. */
int ref_Slice(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int r = x->rank;
  int64_t start[GPUC_MAX_RANK], step[GPUC_MAX_RANK], count[GPUC_MAX_RANK], xs[GPUC_MAX_RANK],
      st[GPUC_MAX_RANK], off = 0;
  if (gpuc_slice_plan(c, start, step, count)) return -1;
  strides_of(x, xs);
  for (int k = 0; k < r; k++) {
    if (count[k] != y->dims[k]) return gpuc_op_fail(c, "slice plan disagrees with the output");
    off += start[k] * xs[k];
    st[k] = step[k] * xs[k];
  }
  strided_copy(y->data, x->data, r, y->dims, st, off, esize(x));
  return 0;
}

/* Broadcast x (right-aligned) to the output: stride 0 on dims of size 1. */
int ref_Expand(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int R = y->rank, off = R - x->rank;
  int64_t xs[GPUC_MAX_RANK], st[GPUC_MAX_RANK];
  if (off < 0) return gpuc_op_fail(c, "output rank below the input's");
  strides_of(x, xs);
  for (int k = 0; k < R; k++) {
    int j = k - off;
    if (j >= 0 && x->dims[j] != 1 && x->dims[j] != y->dims[k])
      return gpuc_op_fail(c, "dim %d does not broadcast", k);
    st[k] = j >= 0 && x->dims[j] != 1 ? xs[j] : 0;
  }
  strided_copy(y->data, x->data, R, y->dims, st, 0, esize(x));
  return 0;
}

/* Output axis k of size rep_k * d_k, read row-major, is the pair
 * (rep index, position in d_k): a rank-2r view [rep0, d0, rep1, d1, ...]
 * with strides [0, s0, 0, s1, ...]. */
int ref_Tile(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int r = x->rank;
  int64_t xs[GPUC_MAX_RANK], vd[VIEW_MAX], vs[VIEW_MAX];
  if (gpuc_numel(y) == 0) return 0;
  strides_of(x, xs);
  for (int k = 0; k < r; k++) {
    if (x->dims[k] == 0 || y->dims[k] % x->dims[k])
      return gpuc_op_fail(c, "output dim %d is not a multiple of the input's", k);
    vd[2 * k] = y->dims[k] / x->dims[k];
    vs[2 * k] = 0;
    vd[2 * k + 1] = x->dims[k];
    vs[2 * k + 1] = xs[k];
  }
  strided_copy(y->data, x->data, 2 * r, vd, vs, 0, esize(x));
  return 0;
}

/* ---- Pad -------------------------------------------------------------------- */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP }; /* gpuc_pad_plan's order */

/* Source coordinate along one axis for output position o, or -1 for the
 * constant. The axis keeps [lo, lo + n) of the input after cropping; pb
 * elements are added in front. */
static int64_t pad_source(int64_t o, int64_t pb, int64_t lo, int64_t n, int mode) {
  int64_t x = o - pb;
  if (x >= 0 && x < n) return lo + x;
  switch (mode) {
  case PAD_EDGE: return x < 0 ? lo : lo + n - 1;
  case PAD_WRAP: return lo + ((x % n) + n) % n;
  case PAD_REFLECT: {
    if (n == 1) return lo;
    int64_t p = 2 * (n - 1); /* reflection without repeating the edge */
    x = ((x % p) + p) % p;
    return lo + (x < n ? x : p - x);
  }
  default: return -1;
  }
}

/* The pad value as one element of x's dtype: the constant_value input
 * (opset 11+), else the 'value' attribute (opsets 1-10), else zero. */
static void pad_value(OpCtx *c, char *elem) {
  const Tensor *x = c->in[0];
  memset(elem, 0, 16);
  if (gpuc_has_in(c, 2)) {
    if (gpuc_numel(c->in[2]) >= 1) memcpy(elem, c->in[2]->data, esize(x));
    return;
  }
  Tensor t = {.dt = x->dt, .rank = 0, .data = elem};
  gpuc_set_f64(&t, 0, gpuc_attr_f(c->n, "value", 0.0f));
}

int ref_Pad(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int r = x->rank, mode;
  int64_t before[GPUC_MAX_RANK], after[GPUC_MAX_RANK], xs[GPUC_MAX_RANK];
  if (gpuc_pad_plan(c, before, after, &mode)) return -1;
  size_t es = esize(x);
  char value[16];
  pad_value(c, value);
  if (gpuc_numel(y) == 0) return 0;
  if (r == 0) { copy_elem(y->data, x->data, es); return 0; }
  /* per-axis maps from output position to source offset (elements), -1
   * for the constant; all maps in one buffer of sum(out dims) */
  int64_t total = 0, *map[GPUC_MAX_RANK];
  for (int k = 0; k < r; k++) total += y->dims[k];
  int64_t *buf = malloc(sizeof(int64_t) * (size_t)total), *p = buf;
  if (!buf) return gpuc_op_fail(c, "out of host memory");
  strides_of(x, xs);
  for (int k = 0; k < r; k++) {
    int64_t lo = before[k] < 0 ? -before[k] : 0, pb = before[k] > 0 ? before[k] : 0;
    int64_t n = x->dims[k] - lo - (after[k] < 0 ? -after[k] : 0);
    if (y->dims[k] != n + pb + (after[k] > 0 ? after[k] : 0)) {
      free(buf);
      return gpuc_op_fail(c, "pad plan disagrees with the output");
    }
    map[k] = p;
    p += y->dims[k];
    for (int64_t o = 0; o < y->dims[k]; o++) {
      int64_t src = pad_source(o, pb, lo, n, mode);
      map[k][o] = src < 0 ? -1 : src * xs[k];
    }
  }
  /* walk the output rows: the outer dims decide the row's source base (or
   * that the whole row is constant); the last axis is mapped per element */
  int64_t idx[GPUC_MAX_RANK] = {0}, inner = y->dims[r - 1];
  const int64_t *last = map[r - 1];
  char *d = y->data;
  const char *s0 = x->data;
  for (;;) {
    int64_t base = 0;
    bool constant = false;
    for (int k = 0; k < r - 1; k++) {
      if (map[k][idx[k]] < 0) { constant = true; break; }
      base += map[k][idx[k]];
    }
    if (constant) fill_elem(d, value, inner, es);
    else
      for (int64_t j = 0; j < inner; j++)
        copy_elem(d + j * (int64_t)es, last[j] < 0 ? value : s0 + (base + last[j]) * (int64_t)es,
                  es);
    d += inner * (int64_t)es;
    int k = r - 2;
    for (; k >= 0; k--) {
      if (++idx[k] < y->dims[k]) break;
      idx[k] = 0;
    }
    if (k < 0) break;
  }
  free(buf);
  return 0;
}

/* ---- Trilu ---------------------------------------------------------------- */

/* Copy, then zero what is outside the band: upper keeps j >= i + k, lower
 * keeps j <= i + k, for every matrix in the last two dims. All-zero bytes
 * are zero in every dtype. */
int ref_Trilu(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int r = x->rank;
  int64_t rows = x->dims[r - 2], cols = x->dims[r - 1];
  int64_t k = gpuc_has_in(c, 1) ? gpuc_get_i64(c->in[1], 0) : 0;
  bool upper = gpuc_attr_i(c->n, "upper", 1) != 0;
  size_t es = esize(x);
  if (copy_all(c)) return -1;
  int64_t mats = rows > 0 && cols > 0 ? gpuc_numel(x) / (rows * cols) : 0;
  /* beyond +-(rows + cols) every k behaves the same; bounding it keeps
   * i + k from overflowing */
  int64_t lim = rows + cols;
  k = k > lim ? lim : k < -lim ? -lim : k;
  char *base = y->data;
  for (int64_t m = 0; m < mats; m++)
    for (int64_t i = 0; i < rows; i++) {
      char *row = base + ((m * rows + i) * cols) * (int64_t)es;
      int64_t lo, hi; /* zero columns [lo, hi) */
      if (upper) { lo = 0; hi = i + k; }
      else { lo = i + k + 1; hi = cols; }
      lo = lo < 0 ? 0 : lo > cols ? cols : lo;
      hi = hi < 0 ? 0 : hi > cols ? cols : hi;
      if (hi > lo) memset(row + lo * (int64_t)es, 0, (size_t)(hi - lo) * es);
    }
  return 0;
}
