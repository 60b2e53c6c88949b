/* A main for the fuzz targets without libFuzzer: each argument is a file
 * (run once) or a folder (every file in it, sorted), passed to
 * LLVMFuzzerTestOneInput. Built with the normal compiler for ctest's
 * fuzz_regress (tests/fuzz/corpus and tests/hostile/fuzz replayed on
 * every build) and usable to reproduce a finding under gdb. Prints
 * "<target>: N inputs" and exits 0 if none crashed (a crash ends it). */
#include "fuzz_util.h"
#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
  size_t got = b && n > 0 ? fread(b, 1, (size_t)n, f) : 0;
  fclose(f);
  if (!b) return -1;
  LLVMFuzzerTestOneInput(b, got);
  free(b);
  return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  int count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st)) { fprintf(stderr, "replay: %s: not found\n", argv[i]); return 2; }
    if (!S_ISDIR(st.st_mode)) { if (run_file(argv[i])) return 2; count++; continue; }
    DIR *d = opendir(argv[i]);
    if (!d) return 2;
    char **names = NULL;
    size_t nn = 0;
    for (struct dirent *de; (de = readdir(d));) {
      if (de->d_name[0] == '.') continue;
      names = realloc(names, (nn + 1) * sizeof *names);
      names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp);
    for (size_t k = 0; k < nn; k++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
      if (run_file(path)) return 2;
      count++;
      free(names[k]);
    }
    free(names);
  }
  printf("%s: %d inputs\n", argv[0], count);
  return 0;
}
