/* TensorProto -> Tensor, for initializers, Constant attributes, and the .pb
 * files of the ONNX test data. Includes external data, confined to the
 * model's folder. */
#include "frontend_internal.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

GpucDType gpuc_onnx_dtype(int32_t onnx_type) {
  switch (onnx_type) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: return GPUC_DT_F32;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: return GPUC_DT_U8;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: return GPUC_DT_I8;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: return GPUC_DT_U16;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: return GPUC_DT_I16;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return GPUC_DT_I32;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return GPUC_DT_I64;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return GPUC_DT_BOOL;
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: return GPUC_DT_F16;
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return GPUC_DT_F64;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return GPUC_DT_U32;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: return GPUC_DT_U64;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return GPUC_DT_BF16;
  default: return GPUC_DT_UNDEF;
  }
}

const char *gpuc_onnx_dtype_name(int32_t t) {
  static const char *names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16",
                                "INT32", "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE",
                                "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  return t >= 0 && t < (int32_t)(sizeof names / sizeof *names) ? names[t] : "unknown";
}

int gpuc_read_file(const char *path, int64_t max_bytes, uint8_t **buf, size_t *len, GpucErr *e) {
  *buf = NULL;
  *len = 0;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
   * writer forever; the S_ISREG check below then refuses it. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return gpuc_err_set(e, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return gpuc_err_set(e, "%s: not a regular file", path);
  }
  if (st.st_size > max_bytes) {
    close(fd);
    return gpuc_err_set(e, "%s: file is %lld bytes, over the %lld byte limit", path,
                        (long long)st.st_size, (long long)max_bytes);
  }
  size_t n = (size_t)st.st_size;
  uint8_t *b = malloc(n ? n : 1);
  if (!b) { close(fd); return gpuc_err_set(e, "%s: out of memory reading file", path); }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r <= 0) { free(b); close(fd); return gpuc_err_set(e, "%s: read error", path); }
    got += (size_t)r;
  }
  close(fd);
  *buf = b;
  *len = n;
  return 0;
}

/* Resolve external data `location` inside the model folder and read
 * [offset, offset+length) of it (exactly `bytes` bytes) into out's data,
 * allocated only once the file is known to hold them: a few bytes of
 * hostile model must not buy a large allocation. */
static int read_external(const Onnx__TensorProto *tp, const char *model_dir, const char *what,
                         Tensor *out, size_t bytes, GpucErr *e) {
  const char *loc = NULL;
  int64_t offset = 0, length = -1;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *kv = tp->external_data[i];
    if (!kv->key || !kv->value) continue;
    char *endp;
    if (!strcmp(kv->key, "location")) loc = kv->value;
    else if (!strcmp(kv->key, "offset") || !strcmp(kv->key, "length")) {
      errno = 0;
      long long v = strtoll(kv->value, &endp, 10);
      if (errno || *endp || endp == kv->value || v < 0)
        return gpuc_err_set(e, "%s: external data %s '%s' is not a non-negative integer", what,
                            kv->key, kv->value);
      if (!strcmp(kv->key, "offset")) offset = v; else length = v;
    }
  }
  if (!model_dir) return gpuc_err_set(e, "%s: external data is only allowed in a model file", what);
  if (!loc || !*loc) return gpuc_err_set(e, "%s: external data has no location", what);
  if (loc[0] == '/' || strstr(loc, "..") || strchr(loc, '\\'))
    return gpuc_err_set(e, "%s: external data location '%s' leaves the model's folder", what, loc);
  if (length >= 0 && (uint64_t)length != bytes)
    return gpuc_err_set(e, "%s: external data length %lld, but the dims need %zu bytes", what,
                        (long long)length, bytes);
  char full[PATH_MAX];
  if (snprintf(full, sizeof full, "%s/%s", model_dir, loc) >= (int)sizeof full)
    return gpuc_err_set(e, "%s: external data path too long", what);
  /* Refuse links anywhere: O_NOFOLLOW for the last component, and a
   * realpath check that the file is inside the model folder. */
  int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY); /* FIFOs: see gpuc_read_file */
  if (fd < 0)
    return gpuc_err_set(e, "%s: external data '%s': %s", what, loc,
                        errno == ELOOP ? "is a symbolic link" : strerror(errno));
  char rdir[PATH_MAX], rfile[PATH_MAX];
  if (!realpath(model_dir, rdir) || !realpath(full, rfile) ||
      strncmp(rfile, rdir, strlen(rdir)) != 0 || rfile[strlen(rdir)] != '/') {
    close(fd);
    return gpuc_err_set(e, "%s: external data location '%s' leaves the model's folder", what, loc);
  }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return gpuc_err_set(e, "%s: external data '%s' is not a regular file", what, loc);
  }
  if ((uint64_t)offset > (uint64_t)st.st_size || bytes > (uint64_t)(st.st_size - offset)) {
    close(fd);
    return gpuc_err_set(e, "%s: external data '%s' offset %lld + %zu bytes is past its end (%lld bytes)",
                        what, loc, (long long)offset, bytes, (long long)st.st_size);
  }
  if (gpuc_tensor_alloc(out, e)) { close(fd); return gpuc_err_prefix(e, what); }
  char *dst = out->data;
  size_t got = 0;
  while (got < bytes) {
    ssize_t r = pread(fd, dst + got, bytes - got, offset + (off_t)got);
    if (r <= 0) {
      close(fd);
      free(out->data);
      out->data = NULL;
      return gpuc_err_set(e, "%s: read error in external data", what);
    }
    got += (size_t)r;
  }
  close(fd);
  return 0;
}

#define COUNT_CHECK(n_field)                                                             \
  do {                                                                                   \
    if ((int64_t)(n_field) != numel)                                                     \
      return gpuc_err_set(e, "%s: has %zu values, but its dims %s need %lld", what,      \
                          (size_t)(n_field), shp, (long long)numel);                     \
  } while (0)

int gpuc_tensor_from_proto(const Onnx__TensorProto *tp, const char *model_dir,
                           const char *what, Tensor *out, GpucErr *e) {
  memset(out, 0, sizeof *out);
  GpucDType dt = gpuc_onnx_dtype(tp->data_type);
  if (dt == GPUC_DT_UNDEF)
    return gpuc_err_unsupported(e, "%s: element type %s (%d) is not supported", what,
                                gpuc_onnx_dtype_name(tp->data_type), tp->data_type);
  if (tp->n_dims > GPUC_MAX_RANK)
    return gpuc_err_set(e, "%s: rank %zu is beyond the supported %d", what, tp->n_dims,
                        GPUC_MAX_RANK);
  if (tp->segment) return gpuc_err_unsupported(e, "%s: segmented tensors are not supported", what);
  out->dt = dt;
  out->rank = (int)tp->n_dims;
  for (size_t i = 0; i < tp->n_dims; i++) {
    if (tp->dims[i] < 0)
      return gpuc_err_set(e, "%s: negative dim %lld", what, (long long)tp->dims[i]);
    out->dims[i] = tp->dims[i];
  }
  int64_t numel = gpuc_numel(out);
  if (numel < 0) return gpuc_err_set(e, "%s: element count overflows int64", what);
  char shp[160];
  gpuc_shape_str(out, shp, sizeof shp);
  size_t es = gpuc_dtype_size(dt);
  if (numel > GPUC_MAX_TENSOR_BYTES / (int64_t)es) /* refused with its size, nothing allocated */
    return gpuc_tensor_alloc(out, e) ? gpuc_err_prefix(e, what) : 0;
  size_t bytes = (size_t)numel * es;
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return read_external(tp, model_dir, what, out, bytes, e);
  /* Inline data: its size must match the dims before anything is allocated. */
  size_t typed = 0;
  switch (dt) {
  case GPUC_DT_F32: typed = tp->n_float_data; break;
  case GPUC_DT_F64: typed = tp->n_double_data; break;
  case GPUC_DT_I64: typed = tp->n_int64_data; break;
  case GPUC_DT_U32: case GPUC_DT_U64: typed = tp->n_uint64_data; break;
  default: typed = tp->n_int32_data; break; /* half types' bit patterns, I32 and narrower, BOOL */
  }
  if (tp->has_raw_data && tp->raw_data.len != bytes)
    return gpuc_err_set(e, "%s: raw_data has %zu bytes, but dims %s of %s need %zu", what,
                        tp->raw_data.len, shp, gpuc_dtype_name(dt), bytes);
  if (!tp->has_raw_data && numel > 0 && typed != (size_t)numel) {
    size_t have = tp->n_float_data + tp->n_double_data + tp->n_int64_data + tp->n_uint64_data +
                  tp->n_int32_data;
    if (have == 0) return gpuc_err_set(e, "%s: has no data for its %lld elements", what, (long long)numel);
    return gpuc_err_set(e, "%s: has %zu values in its typed data field, but dims %s need %lld", what,
                        have, shp, (long long)numel);
  }
  if (gpuc_tensor_alloc(out, e)) return gpuc_err_prefix(e, what);
  if (tp->has_raw_data) {
    if (bytes) memcpy(out->data, tp->raw_data.data, bytes);
    if (dt == GPUC_DT_BOOL) /* normalize bools to 0/1 */
      for (size_t i = 0; i < bytes; i++) ((uint8_t *)out->data)[i] = ((uint8_t *)out->data)[i] != 0;
  } else if (numel > 0) {
    switch (dt) {
    case GPUC_DT_F32: memcpy(out->data, tp->float_data, bytes); break;
    case GPUC_DT_F64: memcpy(out->data, tp->double_data, bytes); break;
    case GPUC_DT_I64: memcpy(out->data, tp->int64_data, bytes); break;
    case GPUC_DT_U32: case GPUC_DT_U64:
      for (int64_t i = 0; i < numel; i++) gpuc_set_i64(out, i, (int64_t)tp->uint64_data[i]);
      break;
    case GPUC_DT_F16: case GPUC_DT_BF16:
      /* half types are stored as their bit patterns in int32_data */
      for (int64_t i = 0; i < numel; i++) ((uint16_t *)out->data)[i] = (uint16_t)tp->int32_data[i];
      break;
    default: /* I32, I16, I8, U16, U8, BOOL */
      for (int64_t i = 0; i < numel; i++) gpuc_set_i64(out, i, tp->int32_data[i]);
      break;
    }
  }
  return 0;
}

Tensor *gpuc_onnx_load_tensor_pb(const char *path, char **name_out, GpucErr *e) {
  uint8_t *buf;
  size_t len;
  if (name_out) *name_out = NULL;
  if (gpuc_read_file(path, GPUC_MODEL_MAX_BYTES, &buf, &len, e)) return NULL;
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, buf);
  free(buf);
  if (!tp) {
    gpuc_err_set(e, "%s: not a valid TensorProto file (truncated or corrupt)", path);
    return NULL;
  }
  Tensor *t = calloc(1, sizeof *t);
  char what[1200];
  snprintf(what, sizeof what, "%s: tensor '%s'", path, tp->name ? tp->name : "");
  if (!t || gpuc_tensor_from_proto(tp, NULL, what, t, e)) {
    if (!t) gpuc_err_set(e, "%s: out of memory", path);
    free(t);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return NULL;
  }
  if (name_out) *name_out = strdup(tp->name ? tp->name : "");
  onnx__tensor_proto__free_unpacked(tp, NULL);
  return t;
}
