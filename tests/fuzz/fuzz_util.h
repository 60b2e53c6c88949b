/* What the libFuzzer targets share (tests/fuzz/fuzz_*.c, docs/FUZZING.md).
 * The loaders under test take paths, so each input is written to a file
 * in a private folder (in /dev/shm when there is one) and loaded from
 * there; nothing is kept between inputs. A target returns 0 whatever the
 * loader decides: what it must never do is crash, hang, leak or trip a
 * sanitizer, and a refusal must come with a message (checked here: an
 * empty message aborts, which libFuzzer reports as a crash). */
#ifndef GPUC_FUZZ_UTIL_H
#define GPUC_FUZZ_UTIL_H
#include "ir.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir_path[256];

/* at exit: the folder's files (flat: the targets make no subfolders), then the folder */
static inline void fuzz_dir_remove(void) {
  DIR *d = opendir(fuzz_dir_path);
  if (!d) return;
  char path[600];
  for (struct dirent *de; (de = readdir(d));) {
    if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2]))) continue;
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, de->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(fuzz_dir_path);
}

/* The folder for this process's files, made on first use, removed at exit. */
static inline const char *fuzz_dir(void) {
  if (!fuzz_dir_path[0]) {
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/gpuc-fuzz.XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(fuzz_dir_path)) { perror("gpuc fuzz: mkdtemp"); abort(); }
    atexit(fuzz_dir_remove);
  }
  return fuzz_dir_path;
}

/* dir/name, written with the bytes; the path in a static buffer. */
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t size) {
  static char path[2][512];
  static int which;
  char *p = path[which ^= 1];
  snprintf(p, sizeof path[0], "%s/%s", fuzz_dir(), name);
  FILE *f = fopen(p, "wb");
  if (!f) { perror(p); abort(); }
  if (size && fwrite(data, 1, size, f) != size) { perror(p); abort(); }
  fclose(f);
  return p;
}

/* A refusal without a message is a finding. */
static inline void fuzz_refused(const GpucErr *e, const char *what) {
  if (e->msg[0]) return;
  fprintf(stderr, "gpuc fuzz: %s refused the input without a message\n", what);
  abort();
}

/* The folder of tiny_mlp.onnx (checkpoints need a model to restore into). */
static inline const char *fuzz_models_dir(void) {
  const char *d = getenv("GPUC_FUZZ_MODELS");
#ifdef GPUC_FUZZ_MODELS_DIR
  if (!d) d = GPUC_FUZZ_MODELS_DIR;
#endif
  return d ? d : "tests/fuzz";
}
#endif
