/* Training data files: the first byte picks the reader, the rest is the
 * file (or files):
 *   0: IDX (gzip'ed or not), rank 3 images   1: IDX rank 1 labels
 *   2: a CIFAR-10 batch (test_batch.bin)
 *   3: an .npy pair for `--data npy:X,Y`: the rest split at its middle
 *      byte... X the first half, Y the second. */
#include "fuzz_util.h"
#include "train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  GpucErr e = {0};
  const uint8_t *rest = data + 1;
  size_t n = size - 1;
  Dataset d;
  switch (data[0] % 4) {
  case 0:
  case 1: {
    int64_t dims[3] = {0, 0, 0};
    uint8_t *px = NULL;
    const char *path = fuzz_file("data.idx", rest, n);
    if (gpuc_idx_read(path, data[0] % 4 == 0 ? 3 : 1, dims, &px, &e)) fuzz_refused(&e, "idx");
    free(px);
    break;
  }
  case 2: {
    fuzz_file("test_batch.bin", rest, n);
    if (gpuc_dataset_cifar10(fuzz_dir(), false, &d, &e)) fuzz_refused(&e, "cifar10");
    else gpuc_dataset_free(&d);
    break;
  }
  default: {
    size_t half = n / 2;
    char x[512];
    snprintf(x, sizeof x, "%s", fuzz_file("x.npy", rest, half));
    const char *y = fuzz_file("y.npy", rest + half, n - half);
    if (gpuc_dataset_npy(x, y, &d, &e)) fuzz_refused(&e, "npy data");
    else gpuc_dataset_free(&d);
    break;
  }
  }
  return 0;
}
