/* The pass flags' command-line words (tools/pass_flags.h): argv into
 * PassFlags through pass_flags.c's setters, their messages printed as usage
 * errors. */
#include "cli.h"
#include "pass_flags.h"
#include <string.h>

int pass_flags_parse(PassFlags *f, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  GpucErr e = {0};
  if (!strcmp(a, "--fp16")) { f->fp16 = true; return 1; }
  if (!strcmp(a, "--bf16")) { f->bf16 = true; return 1; }
  if (!strcmp(a, "--int8")) { f->int8 = true; return 1; }
  if (!strcmp(a, "--fp8")) { f->fp8 = true; return 1; }
  if (!strcmp(a, "--int8-skip")) {
    const char *v = *i + 1 < argc ? argv[++*i] : NULL;
    if (pass_flags_add_int8_skip(f, v, &e)) { usage_error("%s", e.msg); return -1; }
    return 1;
  }
  if (!strcmp(a, "--prune")) {
    const char *v = *i + 1 < argc ? argv[++*i] : "";
    if (pass_flags_set_prune(f, v, &e)) { usage_error("%s", e.msg); return -1; }
    return 1;
  }
  return 0;
}

int pass_flags_check(const PassFlags *f) {
  GpucErr e = {0};
  return pass_flags_validate(f, &e) ? usage_error("%s", e.msg) : 0;
}
