/* IDX (MNIST-format) files through zlib, and the Fashion-MNIST data set.
 * The files are untrusted: only regular files are opened, the decompressed
 * size is capped, and the magic, rank, dims and length must agree. */
#include "train.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAX_BYTES ((int64_t)1 << 30)

static int read_gz(const char *path, uint8_t **buf, int64_t *len, GpucErr *e) {
  *buf = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return gpuc_err_set(e, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return gpuc_err_set(e, "%s: not a regular file", path);
  }
  gzFile gz = gzdopen(fd, "rb");
  if (!gz) { close(fd); return gpuc_err_set(e, "%s: cannot read", path); }
  int64_t cap = 1 << 20, n = 0;
  uint8_t *b = malloc((size_t)cap);
  if (!b) { gzclose(gz); return gpuc_err_set(e, "%s: out of memory", path); }
  for (;;) {
    if (n == cap) {
      if (cap >= IDX_MAX_BYTES) {
        free(b); gzclose(gz);
        return gpuc_err_set(e, "%s: more than %lld bytes decompressed", path, (long long)IDX_MAX_BYTES);
      }
      cap *= 2;
      uint8_t *nb = realloc(b, (size_t)cap);
      if (!nb) { free(b); gzclose(gz); return gpuc_err_set(e, "%s: out of memory", path); }
      b = nb;
    }
    unsigned want = (unsigned)(cap - n > (1 << 30) ? (1 << 30) : cap - n);
    int got = gzread(gz, b + n, want);
    if (got < 0) {
      int zerr;
      const char *msg = gzerror(gz, &zerr);
      gpuc_err_set(e, "%s: corrupt gzip data: %s", path, msg ? msg : "?");
      free(b); gzclose(gz);
      return -1;
    }
    if (got == 0) break;
    n += got;
  }
  gzclose(gz);
  *buf = b;
  *len = n;
  return 0;
}

int gpuc_idx_read(const char *path, int want_rank, int64_t dims[3], uint8_t **data, GpucErr *e) {
  uint8_t *b;
  int64_t len;
  *data = NULL;
  if (read_gz(path, &b, &len, e)) return -1;
  int rc = -1;
  if (len < 4) { gpuc_err_set(e, "%s: not an IDX file (%lld bytes)", path, (long long)len); goto done; }
  if (b[0] != 0 || b[1] != 0 || b[2] != 0x08) {
    gpuc_err_set(e, "%s: not an IDX file of unsigned bytes (bad magic %02x%02x%02x%02x)", path,
                 b[0], b[1], b[2], b[3]);
    goto done;
  }
  if (b[3] != want_rank) {
    gpuc_err_set(e, "%s: IDX rank %d, expected %d", path, b[3], want_rank);
    goto done;
  }
  int64_t hdr = 4 + 4 * (int64_t)want_rank, total = 1;
  if (len < hdr) { gpuc_err_set(e, "%s: truncated IDX header", path); goto done; }
  for (int i = 0; i < want_rank; i++) {
    const uint8_t *p = b + 4 + 4 * i;
    dims[i] = (int64_t)p[0] << 24 | (int64_t)p[1] << 16 | (int64_t)p[2] << 8 | p[3];
    if (dims[i] > 0 && total > IDX_MAX_BYTES / dims[i]) {
      gpuc_err_set(e, "%s: IDX dims too large", path);
      goto done;
    }
    total *= dims[i];
  }
  if (len - hdr != total) {
    gpuc_err_set(e, "%s: IDX dims say %lld bytes of data, the file has %lld", path, (long long)total,
                 (long long)(len - hdr));
    goto done;
  }
  *data = malloc((size_t)(total ? total : 1));
  if (!*data) { gpuc_err_set(e, "%s: out of memory", path); goto done; }
  memcpy(*data, b + hdr, (size_t)total);
  rc = 0;
done:
  free(b);
  return rc;
}

void gpuc_dataset_free(Dataset *d) {
  free(d->x);
  free(d->y);
  memset(d, 0, sizeof *d);
}

/* DIR/PRE-KIND-ubyte.gz, or the uncompressed DIR/PRE-KIND-ubyte when only
 * that exists (zlib reads plain files too). */
static void idx_path(char *buf, size_t n, const char *dir, const char *pre, const char *kind) {
  snprintf(buf, n, "%s/%s-%s-ubyte.gz", dir, pre, kind);
  if (access(buf, F_OK) == 0) return;
  char plain[4096];
  snprintf(plain, sizeof plain, "%s/%s-%s-ubyte", dir, pre, kind);
  if (access(plain, F_OK) == 0) snprintf(buf, n, "%s", plain);
}

int gpuc_dataset_fashion_mnist(const char *dir, bool train, Dataset *d, GpucErr *e) {
  memset(d, 0, sizeof *d);
  char ip[4096], lp[4096];
  const char *pre = train ? "train" : "t10k";
  idx_path(ip, sizeof ip, dir, pre, "images-idx3");
  idx_path(lp, sizeof lp, dir, pre, "labels-idx1");
  int64_t idim[3], ldim[3];
  uint8_t *px = NULL, *lb = NULL;
  if (gpuc_idx_read(ip, 3, idim, &px, e) || gpuc_idx_read(lp, 1, ldim, &lb, e)) {
    free(px);
    return -1;
  }
  int rc = -1;
  if (idim[0] != ldim[0]) {
    gpuc_err_set(e, "%s: %lld images but %s has %lld labels", ip, (long long)idim[0], lp,
                 (long long)ldim[0]);
    goto done;
  }
  if (idim[0] == 0 || idim[1] == 0 || idim[2] == 0) { gpuc_err_set(e, "%s: no images", ip); goto done; }
  d->n = idim[0];
  d->dim = idim[1] * idim[2];
  d->x = malloc(sizeof(float) * (size_t)(d->n * d->dim));
  d->y = malloc(sizeof(int64_t) * (size_t)d->n);
  if (!d->x || !d->y) { gpuc_err_set(e, "%s: out of memory", ip); goto done; }
  for (int64_t i = 0; i < d->n * d->dim; i++) d->x[i] = (float)px[i] / 255.0f;
  for (int64_t i = 0; i < d->n; i++) {
    if (lb[i] > 9) {
      gpuc_err_set(e, "%s: label %d at %lld is not a Fashion-MNIST class (0..9)", lp, lb[i], (long long)i);
      goto done;
    }
    d->y[i] = lb[i];
  }
  rc = 0;
done:
  free(px);
  free(lb);
  if (rc) gpuc_dataset_free(d);
  return rc;
}
