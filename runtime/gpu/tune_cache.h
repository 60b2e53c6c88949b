/* The autotune cache (runtime/gpu/autotune.c): a text file, first line
 * CACHE_MAGIC, then lines "key\tvalue" (value a decimal in [0, max]),
 * read whole (at most CACHE_MAX_BYTES) and appended to. Untrusted input:
 * a file without the magic line is treated as empty, a line that does not
 * parse or holds a value out of range is ignored (tests/fuzz/fuzz_tunecache.c). */
#ifndef GPUC_TUNE_CACHE_H
#define GPUC_TUNE_CACHE_H
#include <stdio.h>

#define CACHE_MAGIC "gpuc-autotune 1"
#define CACHE_MAX_BYTES (16u << 20)

typedef struct Cache {
  char *text;                    /* the file, NUL-terminated; lines "key\tvalue" */
  FILE *append;                  /* new entries; NULL: not writable or no cache */
} Cache;

/* Read path (NULL: no cache) and open it for appending, creating its folder. */
void gpuc_tune_cache_open(Cache *c, const char *path);
void gpuc_tune_cache_close(Cache *c);
/* The value of key, or -1 (absent or out of [0, max]). */
long gpuc_tune_cache_get(const Cache *c, const char *key, long max);
/* Remember key = v in the file and in memory. */
void gpuc_tune_cache_put(Cache *c, const char *key, long v);
#endif
