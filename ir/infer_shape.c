/* Shape inference for the shape, data-movement and generator ops:
 * Shape Size Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice
 * Expand Tile Pad Trilu Constant ConstantOfShape EyeLike OneHot Range.
 *
 * Data-dependent arguments (a target shape, axes, starts, pads, repeats...)
 * are attributes in old opsets and inputs in newer ones. Either form is
 * accepted whatever the opset (the input wins), so models whose exporter
 * mixed the two still load; the ONNX checker is the place for strictness.
 * At import an input argument may be unknown: the output then gets unknown
 * dims, or an unknown rank when even the rank depends on it.
 *
 * Nothing here allocates tensor data: outputs get dtype and shape only. */
#include "infer_util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Argument normalization shared with the reference kernels
 * (runtime/ref/ref_shape.c declares the same prototypes). Each returns 0
 * when everything is known, 1 when some argument is unknown (import only),
 * -1 with a message on bad input. */
int gpuc_slice_plan(OpCtx *c, int64_t *start, int64_t *step, int64_t *count);
int gpuc_pad_plan(OpCtx *c, int64_t *before, int64_t *after, int *mode);
int gpuc_split_plan(OpCtx *c, int *axis, int64_t *sizes);

/* ---- helpers ------------------------------------------------------------ */

/* Where an integer-list argument came from. */
enum { ARG_ABSENT, ARG_UNKNOWN, ARG_KNOWN };

/* Read an integer-list argument: input `in` when present (in >= 0), else
 * the INTS attribute `attr` (when non-NULL). At most `max` values go to buf.
 * *state says which case holds; *n is the count when known, and when the
 * values are unknown the length if the input's shape tells it (else -1). */
static int read_arg(OpCtx *c, int in, const char *attr, int64_t *buf, int max, int *n,
                    int *state) {
  *n = -1;
  *state = ARG_ABSENT;
  if (in >= 0 && gpuc_has_in(c, in)) {
    const Tensor *t = c->in[in];
    if (!gpuc_dtype_is_int(t->dt))
      return gpuc_op_fail(c, "input %d must be an integer tensor, is %s", in,
                          gpuc_dtype_name(t->dt));
    if (t->rank > 1) return gpuc_op_fail(c, "input %d must be 0-D or 1-D, has rank %d", in, t->rank);
    int64_t len = t->rank == 0 ? 1 : t->dims[0];
    if (len > max)
      return gpuc_op_fail(c, "input %d has %lld values, at most %d allowed", in, (long long)len,
                          max);
    if (!t->data) {
      *state = ARG_UNKNOWN;
      *n = (int)len; /* -1 when unknown */
      return 0;
    }
    int k = gpuc_read_ints(c, in, buf, max);
    if (k < 0) return -1;
    *n = k;
    *state = ARG_KNOWN;
    return 0;
  }
  const int64_t *v;
  int k = attr ? gpuc_attr_ints(c->n, attr, &v) : -1;
  if (k < 0) return 0;
  if (k > max)
    return gpuc_op_fail(c, "attribute '%s' has %d values, at most %d allowed", attr, k, max);
  if (k) memcpy(buf, v, sizeof(int64_t) * (size_t)k);
  *n = k;
  *state = ARG_KNOWN;
  return 0;
}

/* Normalize n axes against rank (in place) and reject repeats. */
static int norm_axes(OpCtx *c, int64_t *axes, int n, int rank) {
  bool seen[GPUC_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    if (axes[i] < -rank || axes[i] >= rank)
      return gpuc_op_fail(c, "axis %lld out of range for rank %d", (long long)axes[i], rank);
    if (axes[i] < 0) axes[i] += rank;
    if (seen[axes[i]]) return gpuc_op_fail(c, "axis %lld given twice", (long long)axes[i]);
    seen[axes[i]] = true;
  }
  return 0;
}

/* Product of dims[lo..hi) with -1 for unknown and -2 on overflow. */
static int64_t dims_product(const int64_t *dims, int lo, int hi) {
  int64_t p = 1;
  bool unknown = false;
  for (int i = lo; i < hi; i++) {
    if (dims[i] < 0) { unknown = true; continue; }
    if (__builtin_mul_overflow(p, dims[i], &p)) return -2;
  }
  if (p == 0) return 0; /* a zero dim decides it even next to unknown dims */
  return unknown ? -1 : p;
}

/* Once out[o] has a fully known shape, make sure it is representable: the
 * element count must fit int64 and the bytes the single-tensor cap (the
 * graph driver checks the same after every node; checking here gives ops
 * that build sizes from data, such as ConstantOfShape, Expand, Tile, Range,
 * Pad and OneHot, a message in their own terms, also inside the executor). */
static int check_size(OpCtx *c, int o) {
  Tensor *t = c->out[o];
  if (!t || !gpuc_shape_known(t)) return 0;
  char s[200];
  gpuc_shape_str(t, s, sizeof s);
  int64_t n = gpuc_numel(t);
  if (n < 0) return gpuc_op_fail(c, "output shape %s has more elements than int64 holds", s);
  int64_t es = (int64_t)gpuc_dtype_size(t->dt);
  if (es > 0 && n > GPUC_MAX_TENSOR_BYTES / es)
    return gpuc_op_fail(c, "output of shape %s (%s) would need %.3g GB, over the %lld MiB limit",
                        s, gpuc_dtype_name(t->dt), (double)n * (double)es / 1e9,
                        (long long)(GPUC_MAX_TENSOR_BYTES >> 20));
  return 0;
}

static int set_out(OpCtx *c, int o, GpucDType dt, int rank, const int64_t *dims) {
  if (rank > GPUC_MAX_RANK)
    return gpuc_op_fail(c, "output rank %d is beyond the supported %d", rank, GPUC_MAX_RANK);
  if (o < c->nout && c->out[o]) gpuc_set_shape(c->out[o], dt, rank, dims);
  return check_size(c, o);
}

/* An input that must hold exactly one value (a scalar or a 1-element 1-D). */
static int check_single(OpCtx *c, int i, const char *what) {
  const Tensor *t = c->in[i];
  if (t->rank > 1 || (t->rank == 1 && t->dims[0] >= 0 && t->dims[0] != 1))
    return gpuc_op_fail(c, "%s (input %d) must be a single value", what, i);
  return 0;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* ---- Shape, Size ----------------------------------------------------- */

/* Shape(x, start, end) -> int64[len]. Opset 15 added start/end; negative
 * values count from the back and both clamp to [0, rank]. */
int infer_Shape(OpCtx *c) {
  int r = c->in[0]->rank;
  int64_t start = gpuc_attr_i(c->n, "start", 0), end = gpuc_attr_i(c->n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = clamp64(start, 0, r);
  end = clamp64(end, 0, r);
  int64_t len = end > start ? end - start : 0;
  /* data stays NULL: the executor computes it from the input's shape */
  return set_out(c, 0, GPUC_DT_I64, 1, &len);
}

int infer_Size(OpCtx *c) { return set_out(c, 0, GPUC_DT_I64, 0, NULL); }

/* ---- Reshape, Flatten, Squeeze, Unsqueeze ---------------------------- */

/* Reshape(x, shape): 0 copies the input dim at that position (unless
 * allowzero=1, then it is a real 0); one -1 takes the remaining count. */
int infer_Reshape(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t shp[GPUC_MAX_RANK];
  int n, st;
  if (read_arg(c, 1, "shape", shp, GPUC_MAX_RANK, &n, &st)) return -1;
  if (st == ARG_ABSENT) return gpuc_op_fail(c, "needs a target shape (input 1)");
  if (gpuc_has_in(c, 1) && c->in[1]->rank != 1)
    return gpuc_op_fail(c, "the shape input must be 1-D, has rank %d", c->in[1]->rank);
  if (st == ARG_UNKNOWN) {
    if (n < 0) return gpuc_infer_unknown(c, 0, x->dt);
    int64_t dims[GPUC_MAX_RANK];
    for (int i = 0; i < n; i++) dims[i] = -1;
    return set_out(c, 0, x->dt, n, dims);
  }
  bool allowzero = gpuc_attr_i(c->n, "allowzero", 0) != 0;
  int neg = -1;
  bool has_zero = false;
  int64_t dims[GPUC_MAX_RANK];
  for (int i = 0; i < n; i++) {
    int64_t v = shp[i];
    if (v < -1) return gpuc_op_fail(c, "target shape has invalid dim %lld", (long long)v);
    if (v == -1) {
      if (neg >= 0) return gpuc_op_fail(c, "target shape has more than one -1");
      neg = i;
    } else if (v == 0 && !allowzero) {
      if (i >= x->rank)
        return gpuc_op_fail(c, "target shape has 0 (copy) at position %d, the input has rank %d",
                            i, x->rank);
      v = x->dims[i];
    } else if (v == 0) {
      has_zero = true;
    }
    dims[i] = v;
  }
  if (allowzero && has_zero && neg >= 0)
    return gpuc_op_fail(c, "allowzero=1 with both 0 and -1 in the target shape");
  /* product of the dims other than the -1 */
  int64_t known = 1;
  bool unknown = false;
  for (int i = 0; i < n; i++) {
    if (i == neg) continue;
    if (dims[i] < 0) { unknown = true; continue; }
    if (__builtin_mul_overflow(known, dims[i], &known))
      return gpuc_op_fail(c, "target shape overflows int64 elements");
  }
  int64_t total = gpuc_shape_known(x) ? gpuc_numel(x) : -1;
  char xs[200];
  gpuc_shape_str(x, xs, sizeof xs);
  if (neg >= 0) {
    dims[neg] = -1;
    if (total >= 0 && !unknown) {
      if (known == 0)
        return gpuc_op_fail(c, "cannot infer the -1 dim of a zero-sized target shape (input %s)",
                            xs);
      if (total % known)
        return gpuc_op_fail(c, "cannot reshape %s (%lld elements) with -1: %lld does not divide it",
                            xs, (long long)total, (long long)known);
      dims[neg] = total / known;
    }
  } else if (total >= 0 && !unknown && total != known) {
    return gpuc_op_fail(c, "cannot reshape %s (%lld elements) to %lld elements", xs,
                        (long long)total, (long long)known);
  }
  return set_out(c, 0, x->dt, n, dims);
}

/* Flatten(x, axis) -> [prod(dims[:axis]), prod(dims[axis:])], axis in [-r, r]. */
int infer_Flatten(OpCtx *c) {
  const Tensor *x = c->in[0];
  int r = x->rank;
  int64_t axis = gpuc_attr_i(c->n, "axis", 1);
  if (axis < -r || axis > r)
    return gpuc_op_fail(c, "axis %lld out of range for rank %d", (long long)axis, r);
  if (axis < 0) axis += r;
  int64_t dims[2] = {dims_product(x->dims, 0, (int)axis), dims_product(x->dims, (int)axis, r)};
  if (dims[0] == -2 || dims[1] == -2) return gpuc_op_fail(c, "input shape overflows int64");
  return set_out(c, 0, x->dt, 2, dims);
}

/* Squeeze(x, axes): axes attribute before opset 13, input after. Without
 * axes (or with an empty list, as onnxruntime does) every 1 goes. */
int infer_Squeeze(OpCtx *c) {
  const Tensor *x = c->in[0];
  int r = x->rank;
  int64_t axes[GPUC_MAX_RANK];
  int n, st;
  if (read_arg(c, 1, "axes", axes, GPUC_MAX_RANK, &n, &st)) return -1;
  if (st == ARG_UNKNOWN) return gpuc_infer_unknown(c, 0, x->dt);
  bool drop[GPUC_MAX_RANK] = {false};
  if (st == ARG_KNOWN && n > 0) {
    if (norm_axes(c, axes, n, r)) return -1;
    for (int i = 0; i < n; i++) {
      int64_t d = x->dims[axes[i]];
      if (d >= 0 && d != 1)
        return gpuc_op_fail(c, "cannot squeeze axis %lld of size %lld", (long long)axes[i],
                            (long long)d);
      drop[axes[i]] = true;
    }
  } else {
    for (int i = 0; i < r; i++) {
      if (x->dims[i] < 0) return gpuc_infer_unknown(c, 0, x->dt); /* might be 1 */
      drop[i] = x->dims[i] == 1;
    }
  }
  int64_t dims[GPUC_MAX_RANK];
  int k = 0;
  for (int i = 0; i < r; i++)
    if (!drop[i]) dims[k++] = x->dims[i];
  return set_out(c, 0, x->dt, k, dims);
}

/* Unsqueeze(x, axes): axes index the output (rank r + len(axes)). */
int infer_Unsqueeze(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t axes[GPUC_MAX_RANK];
  int n, st;
  if (read_arg(c, 1, "axes", axes, GPUC_MAX_RANK, &n, &st)) return -1;
  if (st == ARG_ABSENT) return gpuc_op_fail(c, "needs axes");
  if (st == ARG_UNKNOWN) {
    if (n < 0) return gpuc_infer_unknown(c, 0, x->dt);
    if (x->rank + n > GPUC_MAX_RANK)
      return gpuc_op_fail(c, "output rank %d is beyond the supported %d", x->rank + n,
                          GPUC_MAX_RANK);
    int64_t dims[GPUC_MAX_RANK];
    for (int i = 0; i < x->rank + n; i++) dims[i] = -1;
    return set_out(c, 0, x->dt, x->rank + n, dims);
  }
  int R = x->rank + n;
  if (R > GPUC_MAX_RANK)
    return gpuc_op_fail(c, "output rank %d is beyond the supported %d", R, GPUC_MAX_RANK);
  if (norm_axes(c, axes, n, R)) return -1;
  bool ins[GPUC_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) ins[axes[i]] = true;
  int64_t dims[GPUC_MAX_RANK];
  for (int i = 0, k = 0; i < R; i++) dims[i] = ins[i] ? 1 : x->dims[k++];
  return set_out(c, 0, x->dt, R, dims);
}

/* ---- Transpose, Concat, Split ---------------------------------------- */

/* Transpose(x, perm): out dim i = in dim perm[i]; default reverses. */
int infer_Transpose(OpCtx *c) {
  const Tensor *x = c->in[0];
  int r = x->rank;
  const int64_t *perm;
  int n = gpuc_attr_ints(c->n, "perm", &perm);
  int64_t p[GPUC_MAX_RANK];
  if (n < 0) {
    for (int i = 0; i < r; i++) p[i] = r - 1 - i;
  } else {
    if (n != r) return gpuc_op_fail(c, "perm has %d entries, the input has rank %d", n, r);
    memcpy(p, perm, sizeof(int64_t) * (size_t)n);
    if (norm_axes(c, p, n, r)) return -1;
  }
  int64_t dims[GPUC_MAX_RANK];
  for (int i = 0; i < r; i++) dims[i] = x->dims[p[i]];
  return set_out(c, 0, x->dt, r, dims);
}

/* Concat(x0, x1, ..., axis): same rank and dtype, dims equal off the axis. */
int infer_Concat(OpCtx *c) {
  if (c->nin < 1) return gpuc_op_fail(c, "needs at least one input");
  for (int k = 0; k < c->nin; k++)
    if (!c->in[k]) return gpuc_op_fail(c, "input %d is missing", k);
  const Tensor *x = c->in[0];
  int r = x->rank, axis;
  /* opset 1 had a default axis of 1; from opset 4 it is required */
  const Attr *a = gpuc_attr(c->n, "axis");
  if (!a && c->g && c->g->opset >= 4) return gpuc_op_fail(c, "needs the 'axis' attribute");
  if (r == 0) return gpuc_op_fail(c, "cannot concatenate scalars");
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 1), r, &axis)) return -1;
  int64_t dims[GPUC_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] = 0;
  for (int k = 0; k < c->nin; k++) {
    const Tensor *t = c->in[k];
    if (t->dt != x->dt)
      return gpuc_op_fail(c, "input %d is %s, input 0 is %s", k, gpuc_dtype_name(t->dt),
                          gpuc_dtype_name(x->dt));
    if (t->rank != r)
      return gpuc_op_fail(c, "input %d has rank %d, input 0 has rank %d", k, t->rank, r);
    for (int d = 0; d < r; d++) {
      int64_t v = t->dims[d];
      if (d == axis) {
        if (v < 0 || dims[d] < 0) dims[d] = -1;
        else if (__builtin_add_overflow(dims[d], v, &dims[d]))
          return gpuc_op_fail(c, "concatenated dim overflows int64");
      } else if (v >= 0) {
        if (dims[d] >= 0 && dims[d] != v)
          return gpuc_op_fail(c, "input %d has dim %d = %lld, expected %lld", k, d,
                              (long long)v, (long long)dims[d]);
        dims[d] = v;
      }
    }
  }
  return set_out(c, 0, x->dt, r, dims);
}

/* Split sizes along the axis for every output (sizes has c->nout entries;
 * -1 where unknown). Sources, in order: the split input (opset 1 and 13+),
 * the split attribute (opsets 2-12), num_outputs (opset 18: ceil-sized
 * chunks, the last one smaller), else equal parts over the outputs. */
int gpuc_split_plan(OpCtx *c, int *axis_out, int64_t *sizes) {
  const Tensor *x = c->in[0];
  int nout = c->nout, axis;
  if (x->rank == 0) return gpuc_op_fail(c, "cannot split a scalar");
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), x->rank, &axis)) return -1;
  *axis_out = axis;
  int64_t dim = x->dims[axis];
  for (int k = 0; k < nout; k++) sizes[k] = -1;
  /* explicit sizes */
  const int64_t *sattr = NULL;
  int nattr = gpuc_attr_ints(c->n, "split", &sattr);
  /* an empty split input (some exporters write one) means "not given" */
  bool split_in = gpuc_has_in(c, 1) && !(c->in[1]->rank == 1 && c->in[1]->dims[0] == 0);
  if (split_in || nattr >= 0) {
    int n;
    if (split_in) {
      const Tensor *s = c->in[1];
      if (!gpuc_dtype_is_int(s->dt) || s->rank != 1)
        return gpuc_op_fail(c, "the split input must be a 1-D integer tensor");
      if (s->dims[0] >= 0 && s->dims[0] != nout)
        return gpuc_op_fail(c, "split has %lld sizes for %d outputs", (long long)s->dims[0], nout);
      if (!s->data) return 1;
      n = (int)s->dims[0];
    } else {
      n = nattr;
    }
    if (n != nout) return gpuc_op_fail(c, "split has %d sizes for %d outputs", n, nout);
    int64_t sum = 0;
    for (int k = 0; k < n; k++) {
      sizes[k] = split_in ? gpuc_get_i64(c->in[1], k) : sattr[k];
      if (sizes[k] < 0) return gpuc_op_fail(c, "split size %lld is negative", (long long)sizes[k]);
      if (__builtin_add_overflow(sum, sizes[k], &sum))
        return gpuc_op_fail(c, "split sizes overflow int64");
    }
    if (dim >= 0 && sum != dim)
      return gpuc_op_fail(c, "split sizes add up to %lld, the axis has %lld", (long long)sum,
                          (long long)dim);
    return 0;
  }
  const Attr *na = gpuc_attr(c->n, "num_outputs");
  if (na && (na->kind != GPUC_ATTR_INT || na->i != nout))
    return gpuc_op_fail(c, "num_outputs is %lld, the node has %d outputs",
                        (long long)(na->kind == GPUC_ATTR_INT ? na->i : -1), nout);
  if (dim < 0) return 1;
  if (na) {
    int64_t chunk = dim / nout + (dim % nout != 0);
    int64_t last = dim - chunk * (nout - 1);
    if (last < 0)
      return gpuc_op_fail(c, "cannot split %lld into %d chunks of %lld", (long long)dim, nout,
                          (long long)chunk);
    for (int k = 0; k < nout; k++) sizes[k] = k == nout - 1 ? last : chunk;
    return 0;
  }
  if (dim % nout)
    return gpuc_op_fail(c, "cannot split %lld equally into %d outputs", (long long)dim, nout);
  for (int k = 0; k < nout; k++) sizes[k] = dim / nout;
  return 0;
}

int infer_Split(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t *sizes = malloc(sizeof(int64_t) * (size_t)(c->nout + 1));
  if (!sizes) return gpuc_op_fail(c, "out of host memory");
  int axis = 0;
  int rc = gpuc_split_plan(c, &axis, sizes);
  for (int k = 0; rc >= 0 && k < c->nout; k++) {
    int64_t dims[GPUC_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = sizes[k];
    if (set_out(c, k, x->dt, x->rank, dims)) rc = -1;
  }
  free(sizes);
  return rc < 0 ? -1 : 0;
}

/* ChannelShuffle(X0, X1, ...) (internal, ir/ops.def): the inputs as
 * Concat's along `axis`; output j is that, shuffled, from channel
 * starts[j] on, sizes[j] channels. */
int infer_ChannelShuffle(OpCtx *c) {
  for (int k = 0; k < c->nin; k++)
    if (!c->in[k]) return gpuc_op_fail(c, "input %d is missing", k);
  const Tensor *x = c->in[0];
  int r = x->rank, axis;
  if (r == 0) return gpuc_op_fail(c, "cannot shuffle scalars");
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 1), r, &axis)) return -1;
  int64_t dims[GPUC_MAX_RANK], C = 0;
  memcpy(dims, x->dims, sizeof dims);
  for (int k = 0; k < c->nin; k++) {
    const Tensor *t = c->in[k];
    if (t->dt != x->dt || t->rank != r) return gpuc_op_fail(c, "input %d differs in dtype or rank from input 0", k);
    for (int d = 0; d < r; d++)
      if (d != axis && t->dims[d] != x->dims[d]) return gpuc_op_fail(c, "input %d differs off the axis", k);
    if (t->dims[axis] < 0) C = -1;
    else if (C >= 0) C += t->dims[axis];
  }
  int64_t group = gpuc_attr_i(c->n, "group", 0);
  const int64_t *st, *sz;
  int ns = gpuc_attr_ints(c->n, "starts", &st), nz = gpuc_attr_ints(c->n, "sizes", &sz);
  if (group < 1) return gpuc_op_fail(c, "needs a positive 'group'");
  if (ns != c->nout || nz != c->nout) return gpuc_op_fail(c, "needs a start and a size per output");
  if (C >= 0 && C % group) return gpuc_op_fail(c, "%lld channels in %lld groups", (long long)C, (long long)group);
  for (int j = 0; j < c->nout; j++) {
    if (st[j] < 0 || sz[j] < 0 || (C >= 0 && st[j] + sz[j] > C))
      return gpuc_op_fail(c, "output %d: channels [%lld, +%lld) outside the %lld", j, (long long)st[j],
                          (long long)sz[j], (long long)C);
    dims[axis] = sz[j];
    if (set_out(c, j, x->dt, r, dims)) return -1;
  }
  return 0;
}

/* ---- Slice ------------------------------------------------------------ */

/* Per input axis: first index, step and element count. Untouched axes get
 * start 0, step 1, count = dim. Opsets 1-9 take starts/ends/axes as
 * attributes; 10+ take inputs starts, ends, axes, steps. Negative starts and
 * ends count from the back; starts clamp to [0, dim] ([0, dim-1] for
 * negative steps) and ends to [0, dim] ([-1, dim-1]), so INT64_MAX/MIN ends
 * mean "to the end". Where the dim or an argument is unknown the count is
 * -1 (and 1 is returned if an argument was unknown). */
int gpuc_slice_plan(OpCtx *c, int64_t *start, int64_t *step, int64_t *count) {
  const Tensor *x = c->in[0];
  int r = x->rank;
  for (int d = 0; d < r; d++) { start[d] = 0; step[d] = 1; count[d] = x->dims[d]; }
  int64_t sv[GPUC_MAX_RANK], ev[GPUC_MAX_RANK], av[GPUC_MAX_RANK], tv[GPUC_MAX_RANK];
  int ns, ne, na, nt, ss, se, sa, stt;
  bool inputs = gpuc_has_in(c, 1) || gpuc_has_in(c, 2);
  if (inputs && !(gpuc_has_in(c, 1) && gpuc_has_in(c, 2)))
    return gpuc_op_fail(c, "needs both starts and ends");
  if (read_arg(c, inputs ? 1 : -1, "starts", sv, GPUC_MAX_RANK, &ns, &ss) ||
      read_arg(c, inputs ? 2 : -1, "ends", ev, GPUC_MAX_RANK, &ne, &se) ||
      read_arg(c, inputs ? 3 : -1, "axes", av, GPUC_MAX_RANK, &na, &sa) ||
      read_arg(c, inputs ? 4 : -1, NULL, tv, GPUC_MAX_RANK, &nt, &stt))
    return -1;
  if (ss == ARG_ABSENT || se == ARG_ABSENT) return gpuc_op_fail(c, "needs starts and ends");
  /* the lengths must agree whenever they are known */
  int lens[4] = {ns, ne, sa == ARG_ABSENT ? -1 : na, stt == ARG_ABSENT ? -1 : nt}, len = -1;
  for (int i = 0; i < 4; i++) {
    if (lens[i] < 0) continue;
    if (len >= 0 && lens[i] != len)
      return gpuc_op_fail(c, "starts, ends, axes and steps have different lengths");
    len = lens[i];
  }
  if (sa == ARG_UNKNOWN) { /* which axes are sliced is unknown */
    for (int d = 0; d < r; d++) count[d] = -1;
    return 1;
  }
  if (sa == ARG_ABSENT) {
    if (len > r) return gpuc_op_fail(c, "%d starts for rank %d", len, r);
    for (int i = 0; i < len; i++) av[i] = i;
    na = len;
  }
  if (na >= 0 && norm_axes(c, av, na, r)) return -1;
  if (ss == ARG_UNKNOWN || se == ARG_UNKNOWN || stt == ARG_UNKNOWN) {
    if (na < 0) { for (int d = 0; d < r; d++) count[d] = -1; }
    else for (int i = 0; i < na; i++) count[av[i]] = -1;
    return 1;
  }
  for (int i = 0; i < na; i++) {
    int a = (int)av[i];
    int64_t s = sv[i], e = ev[i], t = stt == ARG_KNOWN ? tv[i] : 1, d = x->dims[a];
    if (t == 0) return gpuc_op_fail(c, "step on axis %d is 0", a);
    if (d < 0) { count[a] = -1; continue; }
    if (d == 0) { start[a] = 0; step[a] = 1; count[a] = 0; continue; }
    /* a step longer than the dim selects at most one element either way;
     * bounding it keeps start + i*step far from overflow */
    if (t > d) t = d;
    if (t < -d) t = -d;
    if (s < 0) s += d; /* no overflow: d >= 0 */
    if (e < 0) e += d;
    int64_t n;
    if (t > 0) {
      s = clamp64(s, 0, d);
      e = clamp64(e, 0, d);
      n = e > s ? (e - s - 1) / t + 1 : 0;
    } else {
      s = clamp64(s, 0, d - 1);
      e = clamp64(e, -1, d - 1);
      n = s > e ? (s - e - 1) / -t + 1 : 0;
    }
    start[a] = n ? s : 0;
    step[a] = t;
    count[a] = n;
  }
  return 0;
}

int infer_Slice(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t start[GPUC_MAX_RANK], step[GPUC_MAX_RANK], count[GPUC_MAX_RANK];
  if (gpuc_slice_plan(c, start, step, count) < 0) return -1;
  return set_out(c, 0, x->dt, x->rank, count);
}

/* ---- Expand, Tile, Pad, Trilu ---------------------------------------- */

/* Expand(x, shape): numpy broadcast of x's shape with `shape` (both ways:
 * a 1 in shape keeps x's dim). */
int infer_Expand(OpCtx *c) {
  const Tensor *x = c->in[0];
  int64_t shp[GPUC_MAX_RANK];
  int n, st;
  if (c->in[1]->rank != 1)
    return gpuc_op_fail(c, "the shape input must be 1-D, has rank %d", c->in[1]->rank);
  if (read_arg(c, 1, NULL, shp, GPUC_MAX_RANK, &n, &st)) return -1;
  int R = n > x->rank ? n : x->rank;
  int64_t dims[GPUC_MAX_RANK];
  if (st == ARG_UNKNOWN) {
    if (n < 0) return gpuc_infer_unknown(c, 0, x->dt);
    for (int i = 0; i < R; i++) dims[i] = -1;
    return set_out(c, 0, x->dt, R, dims);
  }
  for (int i = 0; i < R; i++) {
    int ix = i - (R - x->rank), is = i - (R - n);
    int64_t a = ix >= 0 ? x->dims[ix] : 1, b = is >= 0 ? shp[is] : 1;
    if (b < 0) return gpuc_op_fail(c, "target shape has negative dim %lld", (long long)b);
    if (a == 1) dims[i] = b;
    else if (b == 1 || a == b) dims[i] = a;
    else if (a < 0) dims[i] = b; /* a must be 1 or b */
    else
      return gpuc_op_fail(c, "cannot expand dim %d of size %lld to %lld", i, (long long)a,
                          (long long)b);
  }
  return set_out(c, 0, x->dt, R, dims);
}

/* Tile(x, repeats): out dim i = dim i * repeats[i]. */
int infer_Tile(OpCtx *c) {
  const Tensor *x = c->in[0];
  int r = x->rank;
  int64_t rep[GPUC_MAX_RANK], dims[GPUC_MAX_RANK];
  int n, st;
  if (c->in[1]->rank != 1)
    return gpuc_op_fail(c, "repeats must be 1-D, has rank %d", c->in[1]->rank);
  if (read_arg(c, 1, NULL, rep, GPUC_MAX_RANK, &n, &st)) return -1;
  if (n >= 0 && n != r)
    return gpuc_op_fail(c, "repeats has %d values, the input has rank %d", n, r);
  for (int i = 0; i < r; i++) {
    if (st != ARG_KNOWN) { dims[i] = -1; continue; }
    if (rep[i] < 0) return gpuc_op_fail(c, "repeats[%d] = %lld is negative", i, (long long)rep[i]);
    if (rep[i] == 0) dims[i] = 0;
    else if (x->dims[i] < 0) dims[i] = -1;
    else if (__builtin_mul_overflow(x->dims[i], rep[i], &dims[i]))
      return gpuc_op_fail(c, "dim %d (%lld) times %lld overflows int64", i, (long long)x->dims[i],
                          (long long)rep[i]);
  }
  return set_out(c, 0, x->dt, r, dims);
}

/* Elements of an axis of `dim` left after negative pads crop it. */
static int64_t pad_kept(int64_t dim, int64_t b, int64_t e) {
  return dim + (b < 0 ? b : 0) + (e < 0 ? e : 0);
}

static const char *const pad_modes[] = {"constant", "reflect", "edge", "wrap"};

/* Pads per axis: before[d], after[d] (negative values crop). Opset 1 has
 * the 'paddings' attribute, 2-10 'pads', 11+ the pads input and, from 18,
 * the axes input that says which axes the pads are for. mode: index into
 * pad_modes. Fails on crops larger than the dim, on reflect/edge/wrap
 * padding of an empty axis, and on overflowing sizes. */
int gpuc_pad_plan(OpCtx *c, int64_t *before, int64_t *after, int *mode) {
  const Tensor *x = c->in[0];
  int r = x->rank;
  const char *m = gpuc_attr_s(c->n, "mode", "constant");
  *mode = -1;
  for (int i = 0; i < 4; i++)
    if (!strcmp(m, pad_modes[i])) *mode = i;
  if (*mode < 0) return gpuc_op_fail(c, "unknown mode '%s'", m);
  for (int d = 0; d < r; d++) before[d] = after[d] = 0;
  int64_t pads[2 * GPUC_MAX_RANK], axes[GPUC_MAX_RANK];
  int np, sp, na, sa;
  if (read_arg(c, 1, gpuc_attr(c->n, "pads") ? "pads" : "paddings", pads, 2 * GPUC_MAX_RANK,
               &np, &sp) ||
      read_arg(c, 3, NULL, axes, GPUC_MAX_RANK, &na, &sa))
    return -1;
  if (sp == ARG_ABSENT) return gpuc_op_fail(c, "needs pads");
  if (gpuc_has_in(c, 1) && c->in[1]->rank != 1)
    return gpuc_op_fail(c, "pads must be 1-D, has rank %d", c->in[1]->rank);
  if (sp == ARG_UNKNOWN || sa == ARG_UNKNOWN) return 1;
  if (sa == ARG_ABSENT) {
    na = r;
    for (int d = 0; d < r; d++) axes[d] = d;
  } else if (norm_axes(c, axes, na, r)) {
    return -1;
  }
  if (np != 2 * na)
    return gpuc_op_fail(c, "pads has %d values, expected %d (2 per axis)", np, 2 * na);
  for (int i = 0; i < na; i++) {
    before[axes[i]] = pads[i];
    after[axes[i]] = pads[na + i];
  }
  for (int d = 0; d < r; d++) {
    int64_t dim = x->dims[d], b = before[d], e = after[d], kept, out;
    if (dim < 0) continue;
    /* crop first (negative pads), then pad what is left */
    if (b < -dim || e < -dim || (b < 0 ? b : 0) + (e < 0 ? e : 0) < -dim)
      return gpuc_op_fail(c, "pads %lld, %lld on axis %d crop more than its %lld elements",
                          (long long)b, (long long)e, d, (long long)dim);
    kept = pad_kept(dim, b, e);
    if (kept == 0 && *mode != 0 && (b > 0 || e > 0))
      return gpuc_op_fail(c, "mode '%s' cannot pad axis %d, which has no elements", m, d);
    if (__builtin_add_overflow(kept, b > 0 ? b : 0, &out) ||
        __builtin_add_overflow(out, e > 0 ? e : 0, &out))
      return gpuc_op_fail(c, "padded axis %d overflows int64", d);
  }
  return 0;
}

int infer_Pad(OpCtx *c) {
  const Tensor *x = c->in[0];
  int r = x->rank, mode;
  int64_t before[GPUC_MAX_RANK], after[GPUC_MAX_RANK], dims[GPUC_MAX_RANK];
  if (gpuc_has_in(c, 2)) {
    const Tensor *v = c->in[2];
    if (v->dt != x->dt)
      return gpuc_op_fail(c, "constant_value is %s, the input is %s", gpuc_dtype_name(v->dt),
                          gpuc_dtype_name(x->dt));
    if (check_single(c, 2, "constant_value")) return -1;
  }
  int rc = gpuc_pad_plan(c, before, after, &mode);
  if (rc < 0) return -1;
  /* in the order the plan checked for overflow: crop, then pad */
  for (int d = 0; d < r; d++)
    dims[d] = rc == 1 || x->dims[d] < 0 ? -1
              : pad_kept(x->dims[d], before[d], after[d]) + (before[d] > 0 ? before[d] : 0) +
                    (after[d] > 0 ? after[d] : 0);
  return set_out(c, 0, x->dt, r, dims);
}

/* Trilu(x, k): same shape; the last two dims are the matrices. */
int infer_Trilu(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (x->rank < 2) return gpuc_op_fail(c, "needs rank >= 2, has %d", x->rank);
  if (gpuc_has_in(c, 1)) {
    if (!gpuc_dtype_is_int(c->in[1]->dt)) return gpuc_op_fail(c, "k must be an integer");
    if (check_single(c, 1, "k")) return -1;
  }
  return gpuc_infer_same(c, 0, 0);
}

/* ---- generators ------------------------------------------------------- */

/* Constant nodes become constant values in the frontend; this only runs
 * for a node that reaches the IR some other way. */
int infer_Constant(OpCtx *c) {
  const Node *n = c->n;
  if (n->nattr != 1) return gpuc_op_fail(c, "needs exactly one value attribute, has %d", n->nattr);
  const Attr *a = &n->attrs[0];
  int64_t len = a->n;
  if (!strcmp(a->name, "value") && a->kind == GPUC_ATTR_TENSOR) {
    if (!a->t || !a->t->data) return gpuc_op_fail(c, "the 'value' tensor has no data");
    return set_out(c, 0, a->t->dt, a->t->rank, a->t->dims);
  }
  if (!strcmp(a->name, "value_float") && a->kind == GPUC_ATTR_FLOAT)
    return set_out(c, 0, GPUC_DT_F32, 0, NULL);
  if (!strcmp(a->name, "value_int") && a->kind == GPUC_ATTR_INT)
    return set_out(c, 0, GPUC_DT_I64, 0, NULL);
  if (!strcmp(a->name, "value_floats") && a->kind == GPUC_ATTR_FLOATS)
    return set_out(c, 0, GPUC_DT_F32, 1, &len);
  if (!strcmp(a->name, "value_ints") && a->kind == GPUC_ATTR_INTS)
    return set_out(c, 0, GPUC_DT_I64, 1, &len);
  return gpuc_op_unsupported(c, "constant attribute '%s' is not supported", a->name);
}

/* The dtype of ConstantOfShape's 'value' attribute (f32 when absent). */
static int cos_value_dtype(OpCtx *c, GpucDType *dt) {
  const Attr *a = gpuc_attr(c->n, "value");
  *dt = GPUC_DT_F32;
  if (!a) return 0;
  if (a->kind != GPUC_ATTR_TENSOR || !a->t || !a->t->data || gpuc_numel(a->t) != 1)
    return gpuc_op_fail(c, "the 'value' attribute must be a tensor of one element");
  *dt = a->t->dt;
  return 0;
}

/* ConstantOfShape(shape) -> tensor of that shape filled with 'value'. */
int infer_ConstantOfShape(OpCtx *c) {
  GpucDType dt;
  if (cos_value_dtype(c, &dt)) return -1;
  const Tensor *s = c->in[0];
  if (s->rank != 1) return gpuc_op_fail(c, "the shape input must be 1-D, has rank %d", s->rank);
  int64_t dims[GPUC_MAX_RANK];
  int n, st;
  if (read_arg(c, 0, NULL, dims, GPUC_MAX_RANK, &n, &st)) return -1;
  if (st == ARG_UNKNOWN) {
    if (n < 0) return gpuc_infer_unknown(c, 0, dt);
    for (int i = 0; i < n; i++) dims[i] = -1;
    return set_out(c, 0, dt, n, dims);
  }
  for (int i = 0; i < n; i++)
    if (dims[i] < 0) return gpuc_op_fail(c, "shape has negative dim %lld", (long long)dims[i]);
  return set_out(c, 0, dt, n, dims);
}

/* ONNX TensorProto.DataType codes (the 'dtype' attribute of EyeLike). */
static GpucDType onnx_code_dtype(int64_t code) {
  switch (code) {
  case 1: return GPUC_DT_F32;
  case 2: return GPUC_DT_U8;
  case 3: return GPUC_DT_I8;
  case 4: return GPUC_DT_U16;
  case 5: return GPUC_DT_I16;
  case 6: return GPUC_DT_I32;
  case 7: return GPUC_DT_I64;
  case 9: return GPUC_DT_BOOL;
  case 10: return GPUC_DT_F16;
  case 11: return GPUC_DT_F64;
  case 12: return GPUC_DT_U32;
  case 13: return GPUC_DT_U64;
  case 16: return GPUC_DT_BF16;
  default: return GPUC_DT_UNDEF;
  }
}

/* EyeLike(x, dtype, k): 2-D, x's shape, ones on diagonal k. */
int infer_EyeLike(OpCtx *c) {
  const Tensor *x = c->in[0];
  if (x->rank != 2) return gpuc_op_fail(c, "needs a 2-D input, has rank %d", x->rank);
  GpucDType dt = x->dt;
  const Attr *a = gpuc_attr(c->n, "dtype");
  if (a) {
    dt = a->kind == GPUC_ATTR_INT ? onnx_code_dtype(a->i) : GPUC_DT_UNDEF;
    if (dt == GPUC_DT_UNDEF)
      return gpuc_op_unsupported(c, "dtype %lld is not supported",
                                 (long long)(a->kind == GPUC_ATTR_INT ? a->i : -1));
  }
  return set_out(c, 0, dt, 2, x->dims);
}

/* OneHot(indices, depth, values[off, on], axis): indices' shape with depth
 * inserted at axis (default -1, the end), values' dtype. */
int infer_OneHot(OpCtx *c) {
  const Tensor *x = c->in[0], *depth = c->in[1], *vals = c->in[2];
  int R = x->rank + 1, axis;
  if (R > GPUC_MAX_RANK)
    return gpuc_op_fail(c, "output rank %d is beyond the supported %d", R, GPUC_MAX_RANK);
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", -1), R, &axis)) return -1;
  if (x->dt == GPUC_DT_BOOL || depth->dt == GPUC_DT_BOOL)
    return gpuc_op_fail(c, "indices and depth must be numbers");
  if (check_single(c, 1, "depth")) return -1;
  if (vals->rank != 1 || (vals->dims[0] >= 0 && vals->dims[0] != 2))
    return gpuc_op_fail(c, "values must be 1-D with 2 elements (off, on)");
  int64_t d = -1;
  if (depth->data) {
    double v = gpuc_get_f64(depth, 0);
    if (!(v >= 1) || v >= 9.2e18)
      return gpuc_op_fail(c, "depth %g must be a positive count", v);
    d = (int64_t)v; /* float depth truncates, as in onnxruntime */
  }
  int64_t dims[GPUC_MAX_RANK];
  for (int i = 0, k = 0; i < R; i++) dims[i] = i == axis ? d : x->dims[k++];
  return set_out(c, 0, vals->dt, R, dims);
}

/* Number of elements of Range(start, limit, delta) =
 * max(ceil((limit - start) / delta), 0). Integers are counted exactly;
 * floats as onnxruntime does (difference in the input type, quotient in
 * double). Fails on delta 0, non-finite values and counts past int64. */
static int range_count(OpCtx *c, int64_t *n) {
  const Tensor *s = c->in[0], *l = c->in[1], *d = c->in[2];
  if (gpuc_dtype_is_float(s->dt)) {
    double sv = gpuc_get_f64(s, 0), lv = gpuc_get_f64(l, 0), dv = gpuc_get_f64(d, 0);
    if (!isfinite(sv) || !isfinite(lv) || !isfinite(dv))
      return gpuc_op_fail(c, "start, limit and delta must be finite");
    if (dv == 0) return gpuc_op_fail(c, "delta is 0");
    double diff = s->dt == GPUC_DT_F64 ? lv - sv : (double)((float)lv - (float)sv);
    double q = ceil(diff / dv);
    if (!(q < 9.2e18)) return gpuc_op_fail(c, "Range of %g elements is too large", q);
    *n = q > 0 ? (int64_t)q : 0;
    return 0;
  }
  int64_t sv = gpuc_get_i64(s, 0), lv = gpuc_get_i64(l, 0), dv = gpuc_get_i64(d, 0), diff;
  if (dv == 0) return gpuc_op_fail(c, "delta is 0");
  if (__builtin_sub_overflow(lv, sv, &diff))
    return gpuc_op_fail(c, "limit - start overflows int64");
  /* ceil(diff / dv) without overflow: C division truncates toward zero */
  if (dv > 0) *n = diff > 0 ? (diff - 1) / dv + 1 : 0;
  else *n = diff < 0 ? (diff + 1) / dv + 1 : 0;
  return 0;
}

/* Range(start, limit, delta): 1-D, the inputs' dtype. */
int infer_Range(OpCtx *c) {
  GpucDType dt = c->in[0]->dt;
  static const char *names[] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; i++) {
    if (c->in[i]->dt != dt)
      return gpuc_op_fail(c, "%s is %s, start is %s", names[i], gpuc_dtype_name(c->in[i]->dt),
                          gpuc_dtype_name(dt));
    if (check_single(c, i, names[i])) return -1;
  }
  if (dt == GPUC_DT_BOOL || dt == GPUC_DT_U64)
    return gpuc_op_unsupported(c, "dtype %s is not supported", gpuc_dtype_name(dt));
  int64_t n = -1;
  if (c->in[0]->data && c->in[1]->data && c->in[2]->data && range_count(c, &n)) return -1;
  return set_out(c, 0, dt, 1, &n);
}
