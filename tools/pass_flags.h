/* The precision and compression flags of the graph passes, parsed in one
 * place for every command that transforms a model: compile (`gpuc
 * MODEL.onnx`), `gpuc run MODEL.onnx --cpu` (the reference then runs the
 * transformed graph) and `gpuc eval`. A new pass flag is a field here, a
 * case in pass_flags_parse, a line in pass_flags_apply (and, where it
 * excludes another, a check in pass_flags_check): all three commands take
 * it from then on. */
#ifndef GPUC_PASS_FLAGS_H
#define GPUC_PASS_FLAGS_H
#include "passes.h"

typedef struct PassFlags {
  bool fp16;                     /* --fp16: half storage, fp32 islands */
  bool bf16;                     /* --bf16: the same with bfloat16 storage */
  bool int8;                     /* --int8: Linear layers on int8 GEMMs */
  bool fp8;                      /* --fp8: Linear layers on FP8 (e4m3) GEMMs, sm_89+ */
  char int8_skip[4096];          /* --int8-skip globs, comma-separated; "" for none */
  int prune_kind;                /* --prune: GPUC_PRUNE_* (passes.h) */
  double prune_fraction;         /*   l1:FRACTION */
} PassFlags;

/* The flag at argv[*i] (its value, if it takes one, at argv[*i + 1];
 * tools/pass_flags_argv.c):
 * 1 when it is a pass flag (then *i points at its last word), 0 when it is
 * not, -1 after printing a usage error. */
int pass_flags_parse(PassFlags *f, int argc, char **argv, int *i);
/* Flags that exclude each other: a usage error printed, EXIT_USAGE; or 0. */
int pass_flags_check(const PassFlags *f);
/* What the two above do, with the reason in e instead of printed (the C
 * API's options; pass_flags.c): --int8-skip PATTERN appended (globs
 * separated by commas, none empty), --prune VALUE, the exclusions. 0 or -1. */
int pass_flags_add_int8_skip(PassFlags *f, const char *pattern, GpucErr *e);
int pass_flags_set_prune(PassFlags *f, const char *value, GpucErr *e);
int pass_flags_validate(const PassFlags *f, GpucErr *e);
/* The flags into the pass options (after gpuc_pass_options_default). */
void pass_flags_apply(const PassFlags *f, PassOptions *o);
/* Whether any pass flag is set. */
bool pass_flags_any(const PassFlags *f);
/* ", bf16" and the like for summaries: "" without flags. */
const char *pass_flags_label(const PassFlags *f, char *buf, size_t n);
/* The usage words, for the usage text: "[--fp16|--bf16]". */
#define PASS_FLAGS_USAGE "[--fp16|--bf16] [--int8 [--int8-skip GLOB[,GLOB]]...|--fp8] [--prune l1:FRACTION|2:4]"
#endif
