/* CIFAR-10 binary batches and .npy pairs as training data. Both are
 * untrusted: regular files only, sizes checked before anything is
 * allocated from them. */
#include "train.h"
#include "npy.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CIFAR_RECORD 3073      /* label byte + 3x32x32 pixel bytes */
#define CIFAR_MAX_RECORDS 1000000

void gpuc_dataset_limit(Dataset *d, int64_t n) {
  if (n > 0 && n < d->n) d->n = n; /* the buffers keep their size; only the count shrinks */
}

/* Open path as a regular file; its size in *size. */
static int open_regular(const char *path, int64_t *size, GpucErr *e) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return gpuc_err_set(e, "%s: cannot open: %s", path, strerror(errno)), -1;
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return gpuc_err_set(e, "%s: not a regular file", path), -1;
  }
  *size = st.st_size;
  return fd;
}

/* Append the records of one batch file to d (capacity checked by the caller's size pass). */
static int cifar_append(const char *path, int64_t records, Dataset *d, GpucErr *e) {
  int64_t size;
  int fd = open_regular(path, &size, e);
  if (fd < 0) return -1;
  uint8_t rec[CIFAR_RECORD];
  int rc = 0;
  for (int64_t r = 0; r < records && !rc; r++) {
    size_t got = 0;
    while (got < sizeof rec) {
      ssize_t n = read(fd, rec + got, sizeof rec - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += (size_t)n;
    }
    if (got != sizeof rec) { rc = gpuc_err_set(e, "%s: changed while being read", path); break; }
    if (rec[0] > 9) {
      rc = gpuc_err_set(e, "%s: label %d in record %lld is not a CIFAR-10 class (0..9)", path, rec[0],
                        (long long)r);
      break;
    }
    float *x = d->x + d->n * 3072;
    for (int i = 0; i < 3072; i++) x[i] = (float)rec[1 + i] / 255.0f;
    d->y[d->n++] = rec[0];
  }
  close(fd);
  return rc;
}

int gpuc_dataset_cifar10(const char *dir, bool train, Dataset *d, GpucErr *e) {
  memset(d, 0, sizeof *d);
  char paths[5][4096];
  int nf = train ? 5 : 1;
  int64_t recs[5], total = 0;
  for (int f = 0; f < nf; f++) {
    if (train) snprintf(paths[f], sizeof paths[f], "%s/data_batch_%d.bin", dir, f + 1);
    else snprintf(paths[f], sizeof paths[f], "%s/test_batch.bin", dir);
    int64_t size;
    int fd = open_regular(paths[f], &size, e);
    if (fd < 0) return -1;
    close(fd);
    if (size == 0 || size % CIFAR_RECORD || size / CIFAR_RECORD > CIFAR_MAX_RECORDS)
      return gpuc_err_set(e, "%s: %lld bytes is not a whole number of CIFAR-10 records (%d bytes each, "
                          "at most %d)", paths[f], (long long)size, CIFAR_RECORD, CIFAR_MAX_RECORDS);
    recs[f] = size / CIFAR_RECORD;
    total += recs[f];
  }
  d->dim = 3072;
  d->x = malloc(sizeof(float) * (size_t)(total * 3072));
  d->y = malloc(sizeof(int64_t) * (size_t)total);
  if (!d->x || !d->y) { gpuc_dataset_free(d); return gpuc_err_set(e, "%s: out of memory", dir); }
  for (int f = 0; f < nf; f++)
    if (cifar_append(paths[f], recs[f], d, e)) { gpuc_dataset_free(d); return -1; }
  return 0;
}

int gpuc_dataset_npy(const char *xpath, const char *ypath, Dataset *d, GpucErr *e) {
  memset(d, 0, sizeof *d);
  int64_t size;
  /* regular files only: gpuc_npy_load would block on a FIFO */
  for (int k = 0; k < 2; k++) {
    int fd = open_regular(k ? ypath : xpath, &size, e);
    if (fd < 0) return -1;
    close(fd);
  }
  Tensor *x = gpuc_npy_load(xpath, e), *y = x ? gpuc_npy_load(ypath, e) : NULL;
  int rc = -1;
  if (!x || !y) goto done;
  if (x->dt != GPUC_DT_F32 || x->rank < 2) {
    gpuc_err_set(e, "%s: images must be float32 [N, ...], got %s of rank %d", xpath, gpuc_dtype_name(x->dt),
                 x->rank);
    goto done;
  }
  if ((y->dt != GPUC_DT_I64 && y->dt != GPUC_DT_I32) || y->rank != 1 || y->dims[0] != x->dims[0]) {
    gpuc_err_set(e, "%s: labels must be int64 or int32 [%lld]", ypath, (long long)x->dims[0]);
    goto done;
  }
  if (x->dims[0] == 0) { gpuc_err_set(e, "%s: no images", xpath); goto done; }
  d->n = x->dims[0];
  d->rank = x->rank - 1;
  memcpy(d->shape, x->dims + 1, sizeof(int64_t) * (size_t)d->rank);
  d->dim = gpuc_shape_numel(d->rank, d->shape);
  d->y = malloc(sizeof(int64_t) * (size_t)d->n);
  if (!d->y) { gpuc_err_set(e, "%s: out of memory", ypath); goto done; }
  for (int64_t i = 0; i < d->n; i++) d->y[i] = gpuc_get_i64(y, i);
  d->x = x->data; /* the tensor's buffer is taken over */
  x->data = NULL;
  rc = 0;
done:
  gpuc_tensor_free(x);
  gpuc_tensor_free(y);
  if (rc) gpuc_dataset_free(d);
  return rc;
}
