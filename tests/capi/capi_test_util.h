/* What the C API's CI tests share (capi_test.c, capi_buckets_test.c): the
 * public compiler header only, a pass/fail count whose failures print the
 * line, the message and the library's last error, a call that must fail
 * with a status and a word of its message, and a whole file read into
 * memory (NULL when it cannot be read). */
#ifndef GPUC_TESTS_CAPI_TEST_UTIL_H
#define GPUC_TESTS_CAPI_TEST_UTIL_H
#include <gpuc/gpuc_compiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (cond) passed++;                                                     \
    else {                                                                  \
      failed++;                                                             \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                           \
      printf(__VA_ARGS__);                                                  \
      printf(" (last error: %s)\n", gpuc_last_error());                     \
    }                                                                       \
  } while (0)
/* a call that must fail with status st and a message containing word */
#define EXPECT_FAIL(call, st, word)                                                                  \
  do {                                                                                               \
    gpuc_status got_ = (call);                                                                       \
    CHECK(got_ == (st) && strstr(gpuc_last_error(), (word)), "%s: got %s, want %s with '%s'", #call, \
          gpuc_status_name(got_), gpuc_status_name(st), (word));                                     \
  } while (0)

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long l = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = l >= 0 ? malloc((size_t)l + 1) : NULL;
  if (b && fread(b, 1, (size_t)l, f) != (size_t)l) { free(b); b = NULL; }
  fclose(f);
  *n = l >= 0 ? (size_t)l : 0;
  return b;
}
#endif
