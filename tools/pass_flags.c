/* Precision and compression flags shared by compile, run --cpu and eval
 * (tools/pass_flags.h). */
#include "pass_flags.h"
#include "cli.h"
#include <stdio.h>
#include <string.h>

/* --int8-skip PATTERN: comma-separated globs appended to skip (size n);
 * no empty globs ("a,,b", ",a", "a,"). 0, or -1 after a usage error. */
static int parse_int8_skip(const char *pattern, char *skip, size_t n) {
  if (!pattern || !*pattern) return usage_error("--int8-skip wants a layer-name glob, e.g. 'encoder.*.output.dense'");
  for (const char *p = pattern;; p++) {
    size_t l = strcspn(p, ",");
    if (l == 0) return usage_error("--int8-skip '%s' holds an empty pattern", pattern);
    if (l >= 511) return usage_error("--int8-skip: a pattern longer than 510 characters");
    p += l;
    if (!*p) break;
  }
  size_t have = strlen(skip);
  if (have + 1 + strlen(pattern) + 1 > n) return usage_error("--int8-skip: too many patterns");
  snprintf(skip + have, n - have, "%s%s", have ? "," : "", pattern);
  return 0;
}

int pass_flags_parse(PassFlags *f, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  if (!strcmp(a, "--fp16")) { f->fp16 = true; return 1; }
  if (!strcmp(a, "--bf16")) { f->bf16 = true; return 1; }
  if (!strcmp(a, "--int8")) { f->int8 = true; return 1; }
  if (!strcmp(a, "--int8-skip")) {
    const char *v = *i + 1 < argc ? argv[++*i] : NULL;
    return parse_int8_skip(v, f->int8_skip, sizeof f->int8_skip) ? -1 : 1;
  }
  if (!strcmp(a, "--prune")) {
    const char *v = *i + 1 < argc ? argv[++*i] : "";
    if (gpuc_prune_parse(v, &f->prune_kind, &f->prune_fraction)) {
      usage_error(GPUC_PRUNE_USAGE "; got '%s'", v);
      return -1;
    }
    return 1;
  }
  return 0;
}

int pass_flags_check(const PassFlags *f) {
  if (f->fp16 && f->bf16) return usage_error("--fp16 and --bf16 exclude each other: give one");
  if (f->int8_skip[0] && !f->int8) return usage_error("--int8-skip keeps layers of an --int8 compile in float; add --int8");
  return 0;
}

void pass_flags_apply(const PassFlags *f, PassOptions *o) {
  o->fp16 = f->fp16;
  o->bf16 = f->bf16;
  o->int8 = f->int8;
  o->int8_skip = f->int8_skip[0] ? f->int8_skip : NULL;
  o->prune_kind = f->prune_kind;
  o->prune_fraction = f->prune_fraction;
}

bool pass_flags_any(const PassFlags *f) { return f->fp16 || f->bf16 || f->int8 || f->prune_kind; }

const char *pass_flags_label(const PassFlags *f, char *buf, size_t n) {
  snprintf(buf, n, "%s%s%s%s", f->fp16 ? ", fp16" : "", f->bf16 ? ", bf16" : "", f->int8 ? ", int8" : "",
           f->prune_kind == GPUC_PRUNE_24 ? ", 2:4 pruned" : f->prune_kind == GPUC_PRUNE_L1 ? ", l1 pruned" : "");
  return buf;
}
