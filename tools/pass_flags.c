/* Precision and compression flags shared by compile, run --cpu, eval and
 * the C API (tools/pass_flags.h): their values, checks and pass options.
 * The command line's words are parsed in pass_flags_argv.c. */
#include "pass_flags.h"
#include <stdio.h>
#include <string.h>

int pass_flags_add_int8_skip(PassFlags *f, const char *pattern, GpucErr *e) {
  if (!pattern || !*pattern) return gpuc_err_set(e, "--int8-skip wants a layer-name glob, e.g. 'encoder.*.output.dense'");
  for (const char *p = pattern;; p++) {
    size_t l = strcspn(p, ",");
    if (l == 0) return gpuc_err_set(e, "--int8-skip '%s' holds an empty pattern", pattern);
    if (l >= 511) return gpuc_err_set(e, "--int8-skip: a pattern longer than 510 characters");
    p += l;
    if (!*p) break;
  }
  char *skip = f->int8_skip;
  size_t have = strlen(skip), n = sizeof f->int8_skip;
  if (have + 1 + strlen(pattern) + 1 > n) return gpuc_err_set(e, "--int8-skip: too many patterns");
  snprintf(skip + have, n - have, "%s%s", have ? "," : "", pattern);
  return 0;
}

int pass_flags_set_prune(PassFlags *f, const char *v, GpucErr *e) {
  if (!v || gpuc_prune_parse(v, &f->prune_kind, &f->prune_fraction))
    return gpuc_err_set(e, GPUC_PRUNE_USAGE "; got '%s'", v ? v : "");
  return 0;
}

int pass_flags_validate(const PassFlags *f, GpucErr *e) {
  if (f->fp16 && f->bf16) return gpuc_err_set(e, "--fp16 and --bf16 exclude each other: give one");
  if (f->int8 && f->fp8) return gpuc_err_set(e, "--int8 and --fp8 exclude each other: give one");
  if (f->int8_skip[0] && !f->int8) return gpuc_err_set(e, "--int8-skip keeps layers of an --int8 compile in float; add --int8");
  return 0;
}

void pass_flags_apply(const PassFlags *f, PassOptions *o) {
  o->fp16 = f->fp16;
  o->bf16 = f->bf16;
  o->int8 = f->int8;
  o->fp8 = f->fp8;
  o->int8_skip = f->int8_skip[0] ? f->int8_skip : NULL;
  o->prune_kind = f->prune_kind;
  o->prune_fraction = f->prune_fraction;
}

bool pass_flags_any(const PassFlags *f) { return f->fp16 || f->bf16 || f->int8 || f->fp8 || f->prune_kind; }

const char *pass_flags_label(const PassFlags *f, char *buf, size_t n) {
  snprintf(buf, n, "%s%s%s%s%s", f->fp16 ? ", fp16" : "", f->bf16 ? ", bf16" : "", f->int8 ? ", int8" : "",
           f->fp8 ? ", fp8" : "",
           f->prune_kind == GPUC_PRUNE_24 ? ", 2:4 pruned" : f->prune_kind == GPUC_PRUNE_L1 ? ", l1 pruned" : "");
  return buf;
}
