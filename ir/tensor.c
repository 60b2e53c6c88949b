/* Host tensors: shape arithmetic with overflow checks, allocation under a
 * cap, and element access through f64/i64 for reference kernels. */
#include "ir.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t gpuc_shape_numel(int rank, const int64_t *dims) {
  if (rank < 0 || rank > GPUC_MAX_RANK) return -1;
  /* The non-zero dims must multiply within int64 too: 0 x 2^62 x 4 holds no
   * elements, but the strides of that shape (and any product of its dims a
   * kernel forms) overflow. */
  int64_t n = 1;
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    if (dims[i] == 0) { empty = true; continue; }
    if (n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  return empty ? 0 : n;
}

bool gpuc_shape_known(const Tensor *t) {
  if (t->rank < 0) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return false;
  return true;
}

int64_t gpuc_numel(const Tensor *t) { return gpuc_shape_numel(t->rank, t->dims); }

size_t gpuc_tensor_bytes(const Tensor *t) {
  int64_t n = gpuc_numel(t);
  return n < 0 ? 0 : (size_t)n * gpuc_dtype_size(t->dt);
}

int gpuc_tensor_alloc(Tensor *t, GpucErr *e) {
  int64_t n = gpuc_numel(t);
  size_t es = gpuc_dtype_size(t->dt);
  if (n < 0 || es == 0)
    return gpuc_err_set(e, "tensor shape unknown, negative or overflowing");
  if (n > GPUC_MAX_TENSOR_BYTES / (int64_t)es) {
    char s[160];
    gpuc_shape_str(t, s, sizeof s);
    return gpuc_err_set(e, "tensor of shape %s (%s) needs %.3g GB, over the %lld MiB limit",
                        s, gpuc_dtype_name(t->dt), (double)n * es / 1e9,
                        (long long)(GPUC_MAX_TENSOR_BYTES >> 20));
  }
  t->data = calloc(n ? (size_t)n : 1, es);
  if (!t->data) return gpuc_err_set(e, "out of host memory (%lld bytes)", (long long)(n * es));
  return 0;
}

Tensor *gpuc_tensor_new(GpucDType dt, int rank, const int64_t *dims, GpucErr *e) {
  if (rank < 0 || rank > GPUC_MAX_RANK) {
    gpuc_err_set(e, "rank %d out of range", rank);
    return NULL;
  }
  Tensor *t = calloc(1, sizeof *t);
  if (!t) { gpuc_err_set(e, "out of host memory"); return NULL; }
  t->dt = dt;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  if (gpuc_tensor_alloc(t, e)) { free(t); return NULL; }
  return t;
}

void gpuc_tensor_free(Tensor *t) {
  if (!t) return;
  free(t->data);
  free(t);
}

Tensor *gpuc_tensor_clone(const Tensor *t, GpucErr *e) {
  Tensor *c = gpuc_tensor_new(t->dt, t->rank, t->dims, e);
  if (c && t->data) memcpy(c->data, t->data, gpuc_tensor_bytes(t));
  return c;
}

void gpuc_shape_str(const Tensor *t, char *buf, size_t n) {
  if (n == 0) return;
  buf[0] = 0;
  if (t->rank < 0) { snprintf(buf, n, "?"); return; }
  if (t->rank == 0) { snprintf(buf, n, "scalar"); return; }
  size_t len = 0;
  for (int i = 0; i < t->rank && len < n; i++) {
    int w = t->dims[i] < 0 ? snprintf(buf + len, n - len, "%s?", i ? "x" : "")
                           : snprintf(buf + len, n - len, "%s%lld", i ? "x" : "",
                                      (long long)t->dims[i]);
    if (w < 0) break;
    len += (size_t)w;
  }
}

double gpuc_get_f64(const Tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dt) {
  case GPUC_DT_F32: return ((const float *)p)[i];
  case GPUC_DT_F16: return gpuc_f16_to_f32(((const uint16_t *)p)[i]);
  case GPUC_DT_BF16: return gpuc_bf16_to_f32(((const uint16_t *)p)[i]);
  case GPUC_DT_F64: return ((const double *)p)[i];
  case GPUC_DT_I8: return ((const int8_t *)p)[i];
  case GPUC_DT_U8: return ((const uint8_t *)p)[i];
  case GPUC_DT_I16: return ((const int16_t *)p)[i];
  case GPUC_DT_U16: return ((const uint16_t *)p)[i];
  case GPUC_DT_I32: return ((const int32_t *)p)[i];
  case GPUC_DT_U32: return ((const uint32_t *)p)[i];
  case GPUC_DT_I64: return (double)((const int64_t *)p)[i];
  case GPUC_DT_U64: return (double)((const uint64_t *)p)[i];
  case GPUC_DT_BOOL: return ((const uint8_t *)p)[i] != 0;
  default: GPUC_ASSERT(!"bad dtype");
  }
  return 0;
}

/* Float to integer conversion as C casts do it, but defined for every input
 * (NaN and out-of-range values saturate instead of being UB). */
static int64_t f64_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}
static uint64_t f64_to_u64(double v) {
  if (v != v || v <= 0) return v <= -1 ? (uint64_t)f64_to_i64(v) : 0;
  if (v >= 1.8446744073709552e19) return UINT64_MAX;
  return (uint64_t)v;
}

void gpuc_set_f64(Tensor *t, int64_t i, double v) {
  void *p = t->data;
  switch (t->dt) {
  case GPUC_DT_F32: ((float *)p)[i] = (float)v; break;
  case GPUC_DT_F16: ((uint16_t *)p)[i] = gpuc_f32_to_f16((float)v); break;
  case GPUC_DT_BF16: ((uint16_t *)p)[i] = gpuc_f32_to_bf16((float)v); break;
  case GPUC_DT_F64: ((double *)p)[i] = v; break;
  case GPUC_DT_I8: ((int8_t *)p)[i] = (int8_t)f64_to_i64(v); break;
  case GPUC_DT_U8: ((uint8_t *)p)[i] = (uint8_t)f64_to_i64(v); break;
  case GPUC_DT_I16: ((int16_t *)p)[i] = (int16_t)f64_to_i64(v); break;
  case GPUC_DT_U16: ((uint16_t *)p)[i] = (uint16_t)f64_to_i64(v); break;
  case GPUC_DT_I32: ((int32_t *)p)[i] = (int32_t)f64_to_i64(v); break;
  case GPUC_DT_U32: ((uint32_t *)p)[i] = (uint32_t)f64_to_i64(v); break;
  case GPUC_DT_I64: ((int64_t *)p)[i] = f64_to_i64(v); break;
  case GPUC_DT_U64: ((uint64_t *)p)[i] = f64_to_u64(v); break;
  case GPUC_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: GPUC_ASSERT(!"bad dtype");
  }
}

int64_t gpuc_get_i64(const Tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dt) {
  case GPUC_DT_I8: return ((const int8_t *)p)[i];
  case GPUC_DT_U8: return ((const uint8_t *)p)[i];
  case GPUC_DT_I16: return ((const int16_t *)p)[i];
  case GPUC_DT_U16: return ((const uint16_t *)p)[i];
  case GPUC_DT_I32: return ((const int32_t *)p)[i];
  case GPUC_DT_U32: return ((const uint32_t *)p)[i];
  case GPUC_DT_I64: return ((const int64_t *)p)[i];
  case GPUC_DT_U64: return (int64_t)((const uint64_t *)p)[i];
  case GPUC_DT_BOOL: return ((const uint8_t *)p)[i] != 0;
  default: return f64_to_i64(gpuc_get_f64(t, i));
  }
}

void gpuc_set_i64(Tensor *t, int64_t i, int64_t v) {
  void *p = t->data;
  switch (t->dt) {
  case GPUC_DT_I8: ((int8_t *)p)[i] = (int8_t)v; break;
  case GPUC_DT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case GPUC_DT_I16: ((int16_t *)p)[i] = (int16_t)v; break;
  case GPUC_DT_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case GPUC_DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case GPUC_DT_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case GPUC_DT_I64: ((int64_t *)p)[i] = v; break;
  case GPUC_DT_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  case GPUC_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: gpuc_set_f64(t, i, (double)v); break;
  }
}

float *gpuc_to_f32(const Tensor *t, GpucErr *e) {
  int64_t n = gpuc_numel(t);
  if (n < 0) { gpuc_err_set(e, "unknown shape"); return NULL; }
  float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  if (!f) { gpuc_err_set(e, "out of host memory"); return NULL; }
  if (t->dt == GPUC_DT_F32) memcpy(f, t->data, (size_t)n * 4);
  else for (int64_t i = 0; i < n; i++) f[i] = (float)gpuc_get_f64(t, i);
  return f;
}

void gpuc_from_f32(Tensor *t, const float *src) {
  int64_t n = gpuc_numel(t);
  if (t->dt == GPUC_DT_F32) memcpy(t->data, src, (size_t)n * 4);
  else for (int64_t i = 0; i < n; i++) gpuc_set_f64(t, i, src[i]);
}

int gpuc_tensor_permute4(const Tensor *src, const int perm[4], Tensor *dst, GpucErr *e) {
  GPUC_ASSERT(src->rank == 4 && src->data);
  int64_t dims[4], ss[4], st[4];
  for (int i = 0; i < 4; i++) dims[i] = src->dims[perm[i]];
  *dst = (Tensor){.dt = src->dt, .rank = 4};
  memcpy(dst->dims, dims, sizeof dims);
  if (gpuc_tensor_alloc(dst, e)) return -1;
  int64_t stride = 1;
  for (int i = 3; i >= 0; i--) { ss[i] = stride; stride *= src->dims[i]; }
  for (int i = 0; i < 4; i++) st[i] = ss[perm[i]]; /* source stride of dst's dim i */
  size_t es = gpuc_dtype_size(src->dt);
  const char *a = src->data;
  char *b = dst->data;
  for (int64_t i0 = 0; i0 < dims[0]; i0++)
    for (int64_t i1 = 0; i1 < dims[1]; i1++)
      for (int64_t i2 = 0; i2 < dims[2]; i2++)
        for (int64_t i3 = 0; i3 < dims[3]; i3++, b += es)
          memcpy(b, a + (size_t)(i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3]) * es, es);
  return 0;
}

bool gpuc_tensor_is_24_sparse(const Tensor *w, int kaxis) {
  if (w->rank != 2 || kaxis < 0 || kaxis > 1 || w->dims[kaxis] % 4 || !w->data) return false;
  int64_t rows = w->dims[0], cols = w->dims[1];
  int64_t K = kaxis == 0 ? rows : cols, other = kaxis == 0 ? cols : rows;
  for (int64_t o = 0; o < other; o++)
    for (int64_t k0 = 0; k0 < K; k0 += 4) {
      int nz = 0;
      for (int j = 0; j < 4; j++) {
        int64_t i = kaxis == 0 ? (k0 + j) * cols + o : o * cols + k0 + j;
        /* half (plans' weights, read at every load): nonzero unless +-0 */
        nz += w->dt == GPUC_DT_F16 ? (((const uint16_t *)w->data)[i] & 0x7fff) != 0 : gpuc_get_f64(w, i) != 0.0;
      }
      if (nz > 2) return false;
    }
  return true;
}
