/* The gpuc command: argument parsing helpers and one function per
 * subcommand. Exit codes: 0 success, 1 bad input or unsupported model,
 * 2 usage error. */
#ifndef GPUC_CLI_H
#define GPUC_CLI_H
#include "frontend.h"
#include "pass_flags.h"

enum { EXIT_OK = 0, EXIT_BAD_INPUT = 1, EXIT_USAGE = 2 };

int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_test_onnx(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);

/* Compiling a model to a plan (shared by the compile command and
 * test-onnx --gpu). sm 0 = the present GPU. */
#include "codegen.h"
typedef struct CompileRequest {
  const char *model, *out;
  const GpucShapeBind *binds;
  int nbinds;
  int level, sm;
  PassFlags flags;               /* --fp16, --bf16, ... (tools/pass_flags.h) */
  int64_t mem_limit;
  bool quiet;                    /* no --int8/--fp8 layer reports on stdout (the C API) */
  FILE *prune_report;            /* --prune's per-layer sparsity lines go here, or NULL */
  /* graph inputs compiled in as constants (test-onnx --gpu) */
  int nfreeze;
  const char **freeze_names;
  const Tensor **freeze_values;
  Plan **plan_out;               /* set: the plan is handed back here, not written (bucket plans) */
  bool quiet_defaults;           /* no note for dims defaulted to 1 (the buckets after the first) */
} CompileRequest;
int compile_model(const CompileRequest *r, CompileStats *st, GpucErr *e);
/* The same from a loaded graph (r->model and binds unused; the graph is
 * rewritten, the caller frees it). */
int compile_graph(Graph *g, const CompileRequest *r, CompileStats *st, GpucErr *e);
/* The same into a new plan in memory (*out; NULL on failure), not a file. */
int compile_graph_plan(Graph *g, const CompileRequest *r, CompileStats *st, Plan **out, GpucErr *e);
/* What `gpuc run MODEL.onnx --cpu` does to the graph before the reference
 * runs it: with any pass flag, the -O2 passes with those flags (their
 * layer reports to report_to, unless NULL). */
int reference_passes(Graph *g, const PassFlags *f, FILE *report_to, GpucErr *e);
void default_plan_path(const char *model, char *out, size_t n);
/* -O3's cache: $GPUC_TUNE_CACHE, else ~/.cache/gpuc/autotune.txt (in buf),
 * else NULL. */
const char *default_tune_cache(char *buf, size_t n);
/* -O3 on the present GPU (device 0): *p tuned (runtime/gpu/autotune.c) and
 * replaced by the tuned plan; on failure *p is NULL (freed). */
struct GpucTuneStats;
int autotune_plan_in_memory(Plan **p, const char *what, const char *cache, struct GpucTuneStats *ts, GpucErr *e);
int parse_arch(const char *a, int *sm);
int parse_size(const char *s, int64_t *out);
/* --int8-skip PATTERN (may repeat; a PATTERN may list globs separated by
 * commas): appends the globs to skip[n] (comma-separated). Returns 0, or
 * prints a usage error and returns EXIT_USAGE. */
bool is_plan_file(const char *path);
Tensor *load_tensor_file(const char *path, GpucErr *e);

/* --data KIND:PATH (tools/data_arg.c): the spec's check (a usage error
 * naming cmd, or 0) and its splits; tr NULL reads the test split only. */
struct Dataset;
int check_data_spec(const char *cmd, const char *spec);
int load_data(const char *spec, struct Dataset *tr, struct Dataset *te, bool *has_test, GpucErr *e);
/* --normalize MEAN,STD (a usage error or 0), and (x - mean) / std on every
 * pixel of a set: train and eval must see the same pixels. */
int parse_normalize(const char *v, double *mean, double *std);
void normalize_data(struct Dataset *d, double mean, double std);

/* --shape NAME=1..64x3x224x224: a bind whose dims are each range's top,
 * the range's bottoms in lo, the ranged dims' bits in `ranged`
 * (tools/compile_buckets.c). Returns 0 or prints a usage error. */
typedef struct ShapeRange {
  GpucShapeBind bind;
  int64_t lo[GPUC_MAX_RANK];
  unsigned ranged;
} ShapeRange;
int parse_shape_range(char *arg, ShapeRange *r, GpucErr *e);
/* One plan for the ranges (bucket plans) into *out: compiles each bucket
 * with base's flags (progress on stdout unless base->quiet), `jobs` at a
 * time in child processes (0: GPUC_JOBS or the CPUs; 1: in this process,
 * what the C API uses), then at -O3 tune(plan, what, tune_cache) on each
 * (the CLI through a file, printing; the C API in memory). */
typedef int (*BucketTuneFn)(Plan **p, const char *what, const char *cache, GpucErr *e);
int compile_buckets_plan(const CompileRequest *base, const ShapeRange *sr, int nsr, const char **bucket_lists,
                         int nlists, BucketTuneFn tune, const char *tune_cache, int jobs, Plan **out, GpucErr *e);
/* The shape `gpuc run/bench PLAN --shape ...` gives input `name`: its own
 * --shape, else the plan's with each ranged dim sized by the --shape of
 * an input sharing its axis (a bucket plan; the top of the range if none). */
int plan_input_dims(const Plan *p, const char *name, const GpucShapeBind *binds, int nbinds, int64_t *dims,
                    GpucErr *e);
/* -O3 on the plan file at path (tools/cmd_compile.c); prints what it chose. */
int autotune_plan(const char *path, const char *cache);
/* "NAME=1x3x224x224" -> bind (arg is cut at '=': b->name points into it).
 * parse_shape_bind: 0 or -1 with the reason in e; parse_shape_arg: 0 or a
 * usage error printed (EXIT_USAGE). */
int parse_shape_bind(char *arg, GpucShapeBind *b, GpucErr *e);
int parse_shape_arg(char *arg, GpucShapeBind *b);
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "gpuc: <msg>" for a failed load/run and return EXIT_BAD_INPUT. */
int report(const GpucErr *e);
/* One-line summary: name, shape, dtype, min/max/mean (NaN-aware). */
void print_tensor_summary(const char *name, const Tensor *t);
#endif
