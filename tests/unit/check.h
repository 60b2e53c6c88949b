/* What the unit tests share: CHECK counts passes and failures (a failure
 * prints file, line and the message), the closing summary ctest reads, and
 * whole-file reads/writes for tests that corrupt files. */
#ifndef GPUC_TEST_CHECK_H
#define GPUC_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int passed, failed;
#define CHECK(cond, ...)                                                                 \
  do {                                                                                   \
    if (cond) passed++;                                                                  \
    else { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
  } while (0)

/* "N passed, N failed" and the exit status */
static inline int check_summary(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

/* The whole file, malloc'ed (NULL if unreadable); *n its length. */
static inline unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
  *n = b ? fread(b, 1, (size_t)len, f) : 0;
  fclose(f);
  return b;
}

static inline void spit(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(b, 1, n, f);
  fclose(f);
}
#endif
