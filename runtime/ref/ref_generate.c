/* Reference kernels for the generators: Constant ConstantOfShape EyeLike
 * OneHot Range. Output shapes (and their size checks) come from infer_<Op>;
 * the kernels fill the allocated outputs. */
#include "ref_util.h"
#include <string.h>

/* Fill n elements of es bytes at d with the element at s. */
static void fill_elem(char *d, const char *s, int64_t n, size_t es) {
  if (n <= 0) return;
  memcpy(d, s, es);
  /* doubling copies: the filled prefix is the pattern for the rest */
  int64_t done = 1;
  while (done < n) {
    int64_t k = done < n - done ? done : n - done;
    memcpy(d + done * (int64_t)es, d, (size_t)k * es);
    done += k;
  }
}

/* Copy from the node's single value attribute (infer_Constant chose the
 * shape from the same attribute). */
int ref_Constant(OpCtx *c) {
  const Attr *a = &c->n->attrs[0];
  Tensor *y = c->out[0];
  size_t bytes = gpuc_tensor_bytes(y);
  switch (a->kind) {
  case GPUC_ATTR_TENSOR:
    if (bytes != gpuc_tensor_bytes(a->t)) return gpuc_op_fail(c, "value size mismatch");
    if (bytes) memcpy(y->data, a->t->data, bytes);
    break;
  case GPUC_ATTR_FLOAT: *(float *)y->data = a->f; break;
  case GPUC_ATTR_INT: *(int64_t *)y->data = a->i; break;
  case GPUC_ATTR_FLOATS: if (bytes) memcpy(y->data, a->floats, bytes); break;
  case GPUC_ATTR_INTS: if (bytes) memcpy(y->data, a->ints, bytes); break;
  default: return gpuc_op_unsupported(c, "constant attribute '%s' is not supported", a->name);
  }
  return 0;
}

/* Every element = the 'value' attribute's single element (f32 0 without). */
int ref_ConstantOfShape(OpCtx *c) {
  Tensor *y = c->out[0];
  const Attr *a = gpuc_attr(c->n, "value");
  size_t es = gpuc_dtype_size(y->dt);
  char zero[16] = {0};
  const char *v = a && a->kind == GPUC_ATTR_TENSOR && a->t && a->t->data ? a->t->data : zero;
  fill_elem(y->data, v, gpuc_numel(y), es);
  return 0;
}

/* Zeros with ones at [i, i + k]. */
int ref_EyeLike(OpCtx *c) {
  Tensor *y = c->out[0];
  int64_t rows = y->dims[0], cols = y->dims[1], k = gpuc_attr_i(c->n, "k", 0);
  memset(y->data, 0, gpuc_tensor_bytes(y));
  /* rows with a diagonal element: 0 <= i + k < cols (k bounded first so
   * i + k cannot overflow) */
  if (k >= cols || k <= -rows) return 0;
  for (int64_t i = k < 0 ? -k : 0; i < rows && i + k < cols; i++)
    gpuc_set_f64(y, i * cols + i + k, 1.0);
  return 0;
}

/* indices viewed as [outer, inner] around the axis; output
 * [outer, depth, inner] is 'off' except out[o, v, n] = 'on' where
 * v = indices[o, n] (negative + depth). Indices outside [-depth, depth)
 * give an all-off row, as the spec says. Float indices truncate. */
int ref_OneHot(OpCtx *c) {
  const Tensor *ind = c->in[0], *vals = c->in[2];
  Tensor *y = c->out[0];
  int R = y->rank, axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", -1), R, &axis)) return -1;
  if (gpuc_numel(vals) != 2) return gpuc_op_fail(c, "values must have 2 elements");
  int64_t depth = y->dims[axis];
  int64_t outer = gpuc_shape_numel(axis, ind->dims);
  int64_t inner = gpuc_shape_numel(ind->rank - axis, ind->dims + axis);
  size_t es = gpuc_dtype_size(y->dt);
  const char *off = vals->data, *on = off + es;
  fill_elem(y->data, off, gpuc_numel(y), es);
  bool is_float = gpuc_dtype_is_float(ind->dt);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t n = 0; n < inner; n++) {
      int64_t i = o * inner + n, v;
      if (is_float) {
        double f = gpuc_get_f64(ind, i);
        if (!(f > -(double)depth - 1 && f < (double)depth)) continue; /* NaN too */
        v = (int64_t)f;
      } else {
        v = gpuc_get_i64(ind, i);
      }
      if (v < -depth || v >= depth) continue;
      if (v < 0) v += depth;
      memcpy((char *)y->data + ((o * depth + v) * inner + n) * (int64_t)es, on, es);
    }
  return 0;
}

/* out[i] = start + i * delta; the count is the output's length. Integers
 * stay exact (start + i * delta lies between start and limit). */
int ref_Range(OpCtx *c) {
  const Tensor *s = c->in[0], *d = c->in[2];
  Tensor *y = c->out[0];
  int64_t n = y->dims[0];
  if (gpuc_dtype_is_float(y->dt)) {
    double sv = gpuc_get_f64(s, 0), dv = gpuc_get_f64(d, 0);
    for (int64_t i = 0; i < n; i++) gpuc_set_f64(y, i, sv + (double)i * dv);
  } else {
    int64_t sv = gpuc_get_i64(s, 0), dv = gpuc_get_i64(d, 0);
    for (int64_t i = 0; i < n; i++) gpuc_set_i64(y, i, sv + i * dv);
  }
  return 0;
}
