/* Precision and compression flags shared by compile, run --cpu and eval
 * (tools/pass_flags.h). */
#include "pass_flags.h"
#include "cli.h"
#include <stdio.h>
#include <string.h>

int pass_flags_parse(PassFlags *f, int argc, char **argv, int *i) {
  (void)argc;
  const char *a = argv[*i];
  if (!strcmp(a, "--fp16")) { f->fp16 = true; return 1; }
  if (!strcmp(a, "--bf16")) { f->bf16 = true; return 1; }
  return 0;
}

int pass_flags_check(const PassFlags *f) {
  if (f->fp16 && f->bf16) return usage_error("--fp16 and --bf16 exclude each other: give one");
  return 0;
}

void pass_flags_apply(const PassFlags *f, PassOptions *o) {
  o->fp16 = f->fp16;
  o->bf16 = f->bf16;
}

const char *pass_flags_label(const PassFlags *f, char *buf, size_t n) {
  snprintf(buf, n, "%s%s", f->fp16 ? ", fp16" : "", f->bf16 ? ", bf16" : "");
  return buf;
}
