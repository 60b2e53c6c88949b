/* .npy read/write (format versions 1.0-3.0, little-endian, C order). */
#ifndef GPUC_NPY_H
#define GPUC_NPY_H
#include "ir.h"
Tensor *gpuc_npy_load(const char *path, GpucErr *e);
/* Written atomically: a temp file in the same folder, then rename. */
int gpuc_npy_save(const char *path, const Tensor *t, GpucErr *e);
#endif
