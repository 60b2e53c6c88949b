/* -O3's text cache of timing results (tune_cache.h). Untrusted: the
 * file may be anything; a line that does not parse is ignored. */
#include "tune_cache.h"
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void gpuc_tune_cache_open(Cache *c, const char *path) {
  memset(c, 0, sizeof *c);
  c->text = calloc(1, CACHE_MAX_BYTES + 1); /* NULL: no cache at all */
  if (!path || !c->text) return;
  FILE *f = fopen(path, "rb");
  if (f) {
    size_t n = fread(c->text, 1, CACHE_MAX_BYTES - 4096, f); /* room left for this run's entries */
    c->text[n] = 0;
    if (strncmp(c->text, CACHE_MAGIC "\n", strlen(CACHE_MAGIC) + 1)) c->text[0] = 0; /* not ours */
    fclose(f);
  }
  /* the folder, then the file (with its magic line if new) */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *q = dir + 1; *q; q++)
    if (*q == '/') { *q = 0; mkdir(dir, 0777); *q = '/'; }
  bool fresh = !c->text[0];
  c->append = fopen(path, fresh ? "wb" : "ab");
  if (c->append && fresh) fprintf(c->append, "%s\n", CACHE_MAGIC);
}

void gpuc_tune_cache_close(Cache *c) {
  if (c->append) fclose(c->append);
  free(c->text);
}

/* The value of key, or -1 (absent or out of [0, max]). */
long gpuc_tune_cache_get(const Cache *c, const char *key, long max) {
  if (!c->text) return -1;
  size_t kl = strlen(key);
  for (const char *l = c->text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, key, kl) || l[kl] != '\t') continue;
    char *end;
    errno = 0;
    long v = strtol(l + kl + 1, &end, 10);
    if (!errno && end != l + kl + 1 && (*end == '\n' || !*end) && v >= 0 && v <= max) return v;
  }
  return -1;
}

void gpuc_tune_cache_put(Cache *c, const char *key, long v) {
  if (c->append) { fprintf(c->append, "%s\t%ld\n", key, v); fflush(c->append); }
  /* and in memory, so the same shape later in this plan is not timed again */
  size_t n = c->text ? strlen(c->text) : 0;
  if (c->text && n + strlen(key) + 24 < CACHE_MAX_BYTES) snprintf(c->text + n, CACHE_MAX_BYTES - n, "%s\t%ld\n", key, v);
}

