/* --data KIND:PATH, shared by gpuc train and gpuc eval: the check of the
 * spec (a usage error) and the loading of its splits (train/ loaders; the
 * files are untrusted). */
#include "cli.h"
#include "train.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int parse_normalize(const char *v, double *mean, double *std) {
  char *end;
  errno = 0;
  *mean = strtod(v, &end);
  bool ok = end != v && *end == ',' && !errno;
  if (ok) {
    const char *s2 = end + 1;
    *std = strtod(s2, &end);
    ok = end != s2 && !*end && !errno;
  }
  if (!ok || !isfinite(*mean) || !isfinite(*std) || *std <= 0 || fabs(*mean) > 1e6 || *std > 1e6)
    return usage_error("--normalize wants MEAN,STD with STD > 0, got '%s'", v);
  return 0;
}

void normalize_data(Dataset *d, double mean, double std) {
  for (int64_t i = 0; i < d->n * d->dim; i++) d->x[i] = (float)((d->x[i] - mean) / std);
}

int check_data_spec(const char *cmd, const char *d) {
  static const char *kinds[] = {"fashion-mnist:", "mnist:", "cifar10:", "npy:"};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    size_t n = strlen(kinds[k]);
    if (strncmp(d, kinds[k], n) || !d[n]) continue;
    if (k < 3) return 0;
    int commas = 0;
    for (const char *p = d + n; *p; p++) commas += *p == ',';
    if ((commas == 1 || commas == 3) && !strstr(d, ",,") && d[strlen(d) - 1] != ',') return 0;
    return usage_error("%s: --data npy:X.npy,Y.npy[,XTEST.npy,YTEST.npy], got '%s'", cmd, d);
  }
  return usage_error("%s: --data wants fashion-mnist:DIR, mnist:DIR, cifar10:DIR or npy:X.npy,Y.npy, "
                     "got '%s'", cmd, d);
}

/* The test set is optional only for npy (two more files). Without tr only
 * the test split is read; npy with two files is then that split. */
int load_data(const char *spec, Dataset *tr, Dataset *te, bool *has_test, GpucErr *e) {
  *has_test = true;
  if (!strncmp(spec, "fashion-mnist:", 14) || !strncmp(spec, "mnist:", 6)) {
    const char *dir = strchr(spec, ':') + 1;
    return (tr && gpuc_dataset_fashion_mnist(dir, true, tr, e)) || gpuc_dataset_fashion_mnist(dir, false, te, e)
               ? -1 : 0;
  }
  if (!strncmp(spec, "cifar10:", 8))
    return (tr && gpuc_dataset_cifar10(spec + 8, true, tr, e)) || gpuc_dataset_cifar10(spec + 8, false, te, e)
               ? -1 : 0;
  /* npy:X,Y[,XTEST,YTEST] */
  char buf[4096], *f[5] = {0};
  if (snprintf(buf, sizeof buf, "%s", spec + 4) >= (int)sizeof buf)
    return gpuc_err_set(e, "--data: the file names are too long");
  int n = 0;
  for (char *p = buf; p && n < 5; n++) {
    f[n] = p;
    if ((p = strchr(p, ','))) *p++ = 0;
  }
  if (!tr) return n == 4 ? gpuc_dataset_npy(f[2], f[3], te, e) : gpuc_dataset_npy(f[0], f[1], te, e);
  *has_test = n == 4;
  if (gpuc_dataset_npy(f[0], f[1], tr, e)) return -1;
  return *has_test ? gpuc_dataset_npy(f[2], f[3], te, e) : 0;
}
