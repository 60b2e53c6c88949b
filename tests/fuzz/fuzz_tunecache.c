/* The -O3 autotune cache text (runtime/gpu/tune_cache.h) -> open (magic
 * line, 16 MiB cap), a lookup of each line's key with a small and a large
 * bound, a new entry put, close. */
#include "fuzz_util.h"
#include "tune_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file("autotune.txt", data, size);
  Cache c;
  gpuc_tune_cache_open(&c, path);
  /* the keys the file itself names, up to 16 */
  const uint8_t *p = data, *end = data + size;
  for (int k = 0; k < 16 && p < end; k++) {
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    const uint8_t *tab = memchr(p, '\t', (size_t)((nl ? nl : end) - p));
    if (tab && tab - p < 1024) {
      char key[1024];
      memcpy(key, p, (size_t)(tab - p));
      key[tab - p] = 0;
      long v = gpuc_tune_cache_get(&c, key, 7);
      long w = gpuc_tune_cache_get(&c, key, 1L << 40);
      if (v < -1 || v > 7 || w < -1) abort(); /* out of the range asked for */
    }
    if (!nl) break;
    p = nl + 1;
  }
  gpuc_tune_cache_put(&c, "NVIDIA H200|cudnn 91900|gemm 128x768x768", 3);
  (void)gpuc_tune_cache_get(&c, "NVIDIA H200|cudnn 91900|gemm 128x768x768", 7);
  gpuc_tune_cache_close(&c);
  return 0;
}
