/* .npy files: header parsing is strict (every field checked) since the
 * file is user input. */
#include "npy.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *descr; GpucDType dt; } npy_types[] = {
  {"<f4", GPUC_DT_F32}, {"<f2", GPUC_DT_F16}, {"<f8", GPUC_DT_F64}, {"|i1", GPUC_DT_I8},
  {"|u1", GPUC_DT_U8}, {"<i2", GPUC_DT_I16}, {"<u2", GPUC_DT_U16}, {"<i4", GPUC_DT_I32},
  {"<u4", GPUC_DT_U32}, {"<i8", GPUC_DT_I64}, {"<u8", GPUC_DT_U64}, {"|b1", GPUC_DT_BOOL},
};

static const char *skip_ws(const char *p) { while (*p == ' ') p++; return p; }

Tensor *gpuc_npy_load(const char *path, GpucErr *e) {
  FILE *f = fopen(path, "rb");
  if (!f) { gpuc_err_set(e, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
  unsigned char pre[12];
  Tensor *t = NULL;
  char *hdr = NULL;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
    gpuc_err_set(e, "%s: not a .npy file (bad magic)", path);
    goto done;
  }
  size_t hlen;
  if (pre[6] == 1) hlen = pre[8] | (size_t)pre[9] << 8;
  else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 10, 1, 2, f) != 2) { gpuc_err_set(e, "%s: truncated header", path); goto done; }
    hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  } else { gpuc_err_set(e, "%s: unsupported .npy version %d", path, pre[6]); goto done; }
  if (hlen > 65536) { gpuc_err_set(e, "%s: header too long", path); goto done; }
  hdr = calloc(1, hlen + 1);
  if (!hdr || fread(hdr, 1, hlen, f) != hlen) { gpuc_err_set(e, "%s: truncated header", path); goto done; }
  const char *d = strstr(hdr, "'descr':"), *fo = strstr(hdr, "'fortran_order':"),
             *sh = strstr(hdr, "'shape':");
  if (!d || !fo || !sh) { gpuc_err_set(e, "%s: header lacks descr/fortran_order/shape", path); goto done; }
  d = skip_ws(d + 8);
  GpucDType dt = GPUC_DT_UNDEF;
  for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++) {
    size_t l = strlen(npy_types[i].descr);
    if (d[0] == '\'' && !strncmp(d + 1, npy_types[i].descr, l) && d[1 + l] == '\'') dt = npy_types[i].dt;
    /* numpy writes single-byte types as '|i1' but also accepts '<i1' */
    if (d[0] == '\'' && npy_types[i].descr[0] == '|' && d[1] == '<' &&
        !strncmp(d + 2, npy_types[i].descr + 1, l - 1) && d[1 + l] == '\'') dt = npy_types[i].dt;
  }
  if (dt == GPUC_DT_UNDEF) { gpuc_err_set(e, "%s: unsupported dtype in header", path); goto done; }
  fo = skip_ws(fo + 16);
  if (strncmp(fo, "False", 5)) { gpuc_err_set(e, "%s: Fortran-order arrays are not supported", path); goto done; }
  sh = skip_ws(sh + 8);
  if (*sh != '(') { gpuc_err_set(e, "%s: bad shape in header", path); goto done; }
  sh++;
  int64_t dims[GPUC_MAX_RANK];
  int rank = 0;
  for (;;) {
    sh = skip_ws(sh);
    if (*sh == ')') break;
    char *end;
    errno = 0;
    long long v = strtoll(sh, &end, 10);
    if (end == sh || errno || v < 0) { gpuc_err_set(e, "%s: bad shape in header", path); goto done; }
    if (rank == GPUC_MAX_RANK) { gpuc_err_set(e, "%s: rank beyond %d", path, GPUC_MAX_RANK); goto done; }
    dims[rank++] = v;
    sh = skip_ws(end);
    if (*sh == ',') sh++;
    else if (*sh != ')') { gpuc_err_set(e, "%s: bad shape in header", path); goto done; }
  }
  int64_t numel = gpuc_shape_numel(rank, dims);
  if (numel < 0) { gpuc_err_set(e, "%s: shape overflows", path); goto done; }
  /* the data must be in the file before the shape decides an allocation */
  struct stat st;
  long here = ftell(f);
  if (here >= 0 && !fstat(fileno(f), &st) && S_ISREG(st.st_mode) &&
      numel > (st.st_size - here) / (int64_t)gpuc_dtype_size(dt)) {
    gpuc_err_set(e, "%s: data shorter than the shape needs (%lld bytes left in the file)", path,
                 (long long)(st.st_size - here));
    goto done;
  }
  t = gpuc_tensor_new(dt, rank, dims, e);
  if (!t) { gpuc_err_prefix(e, path); goto done; }
  size_t bytes = gpuc_tensor_bytes(t);
  if (fread(t->data, 1, bytes, f) != bytes) {
    gpuc_err_set(e, "%s: data shorter than the shape needs (%zu bytes)", path, bytes);
    gpuc_tensor_free(t);
    t = NULL;
    goto done;
  }
  if (fgetc(f) != EOF) {
    gpuc_err_set(e, "%s: data longer than the shape needs (%zu bytes)", path, bytes);
    gpuc_tensor_free(t);
    t = NULL;
  }
done:
  free(hdr);
  fclose(f);
  return t;
}

int gpuc_npy_save(const char *path, const Tensor *t, GpucErr *e) {
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++)
    if (npy_types[i].dt == t->dt) descr = npy_types[i].descr;
  if (!descr) return gpuc_err_set(e, "%s: dtype %s has no .npy form", path, gpuc_dtype_name(t->dt));
  char shape[400] = "", hdr[512];
  size_t len = 0;
  for (int i = 0; i < t->rank; i++)
    len += (size_t)snprintf(shape + len, sizeof shape - len, "%lld,%s", (long long)t->dims[i],
                            i + 1 < t->rank ? " " : "");
  if (t->rank > 1) shape[len - 1] = 0; /* "(2, 3)" but "(5,)" */
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   descr, shape);
  size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
    return gpuc_err_set(e, "%s: path too long", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return gpuc_err_set(e, "%s: cannot write: %s", path, strerror(errno));
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  size_t hl = (size_t)n + pad + 1;
  pre[8] = (unsigned char)(hl & 0xff);
  pre[9] = (unsigned char)(hl >> 8);
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n;
  for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  size_t bytes = gpuc_tensor_bytes(t);
  ok = ok && (bytes == 0 || fwrite(t->data, 1, bytes, f) == bytes);
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path)) {
    unlink(tmp);
    return gpuc_err_set(e, "%s: write failed", path);
  }
  return 0;
}
