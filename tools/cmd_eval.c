/* gpuc eval MODEL.onnx|PLAN.gpuc --data KIND:PATH [--cpu] [--fp16|--bf16]
 *           [--batch B] [--limit N] [--normalize MEAN,STD] [--arch sm_XX] [-O0|-O2]
 * The test split of a labelled data set through a classifier: the mean
 * softmax cross-entropy and the argmax accuracy, scored by the trainer's
 * gpuc_score_logits, so what a compression costs on real data reads the
 * same as `gpuc train`'s test accuracy. On the GPU a model is compiled with
 * the pass flags (tools/pass_flags.h) for a batch of B (500 unless given;
 * a batch the exporter fixed is rebound), or a plan is loaded as it is; --cpu runs the reference on the graph the same passes leave
 * (no flags: the model as imported, the graph `gpuc train --cpu` scores;
 * -O2 given: the graph the -O2 passes make, which a plan is compiled from).
 * The model takes one float input [batch, ...] with as many values per
 * image as the data has, and its first output is [batch, classes]. */
#include "cli.h"
#include "passes.h"
#include "ref.h"
#include "session.h"
#include "train.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct EvalArgs {
  const char *model, *data;
  bool cpu;
  PassFlags flags;
  bool any_flag;
  bool level_given;             /* -O0/-O2 on the command line */
  long long batch, limit;       /* 0: 500 (a plan: its own) / all */
  double norm_mean, norm_std;   /* --normalize as given to train; std 0: none */
  int sm, level;
} EvalArgs;

/* What runs a batch: the reference on a graph, or a session on a plan. */
typedef struct Evaluator {
  Graph *g;
  GpucSession *s;
  const char *in_name, *out_name;
  Tensor x;                     /* f32 [B, ...]: one batch, owned */
  int64_t per_image;            /* values per image */
} Evaluator;

static int parse_count(const char *flag, const char *v, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end || errno || n < 1 || n > hi)
    return usage_error("eval: %s wants an integer in [1, %lld], got '%s'", flag, hi, v);
  *out = n;
  return 0;
}

static int parse_args(int argc, char **argv, EvalArgs *a) {
  *a = (EvalArgs){.level = 2};
  for (int i = 0, pf; i < argc; i++) {
    const char *f = argv[i];
    if (!strcmp(f, "--cpu")) a->cpu = true;
    else if (!strcmp(f, "-O0") || !strcmp(f, "-O2")) a->level = f[2] - '0', a->level_given = true;
    else if ((pf = pass_flags_parse(&a->flags, argc, argv, &i)) != 0) {
      if (pf < 0) return EXIT_USAGE;
      a->any_flag = true;
    } else if (!strcmp(f, "--data") || !strcmp(f, "--batch") || !strcmp(f, "--limit") || !strcmp(f, "--arch") ||
               !strcmp(f, "--normalize")) {
      if (i + 1 >= argc) return usage_error("eval: %s needs a value", f);
      const char *v = argv[++i];
      if (!strcmp(f, "--data")) a->data = v;
      else if (!strcmp(f, "--batch") && parse_count(f, v, 65536, &a->batch)) return EXIT_USAGE;
      else if (!strcmp(f, "--limit") && parse_count(f, v, INT64_MAX, &a->limit)) return EXIT_USAGE;
      else if (!strcmp(f, "--normalize") && parse_normalize(v, &a->norm_mean, &a->norm_std)) return EXIT_USAGE;
      else if (!strcmp(f, "--arch") && (parse_arch(v, &a->sm) || a->sm == 0))
        return usage_error("eval: --arch wants sm_80, sm_86, sm_87, sm_89, sm_90, sm_100 or sm_120, got '%s'", v);
    } else if (f[0] == '-') return usage_error("eval: unknown option '%s'", f);
    else if (a->model) return usage_error("eval: one model only ('%s' and '%s')", a->model, f);
    else a->model = f;
  }
  if (!a->model) return usage_error("eval: no model given");
  if (!a->data) return usage_error("eval: --data KIND:PATH is required");
  int rc = check_data_spec("eval", a->data);
  if (rc || (rc = pass_flags_check(&a->flags))) return rc;
  if (is_plan_file(a->model)) {
    if (a->cpu) return usage_error("eval: a plan runs on the GPU; give the .onnx model for --cpu");
    if (a->any_flag) return usage_error("eval: --fp16/--bf16 apply when compiling; give the .onnx model");
    if (a->sm) return usage_error("eval: --arch applies when compiling; give the .onnx model");
  } else if (a->cpu && a->sm) {
    return usage_error("eval: --arch is for the GPU; --cpu runs the reference on the host");
  }
  return 0;
}

/* The batch input x [B, ...] for the evaluator, from the model's input
 * dims (dims[0] <= 0: a symbolic batch). */
static int batch_input(Evaluator *ev, const char *path, int rank, const int64_t *dims, int64_t batch,
                       GpucErr *e) {
  if (rank < 1) return gpuc_err_set(e, "%s: the input is a scalar; eval wants [batch, ...]", path);
  ev->per_image = 1;
  for (int d = 1; d < rank; d++) {
    if (dims[d] <= 0)
      return gpuc_err_set(e, "%s: input dim %d is symbolic; eval binds the batch dim only", path, d);
    ev->per_image *= dims[d];
  }
  int64_t xd[GPUC_MAX_RANK];
  memcpy(xd, dims, sizeof(int64_t) * (size_t)rank);
  xd[0] = batch;
  Tensor *x = gpuc_tensor_new(GPUC_DT_F32, rank, xd, e);
  if (!x) return -1;
  ev->x = *x;
  free(x); /* the struct only: ev->x owns the data now */
  return 0;
}

/* The model with its one float input's batch dim bound to B: a batch the
 * exporter fixed (often 1) is made symbolic first, as the trainer does; a
 * model whose other shapes depend on it fails the inference. */
static Graph *load_bound(const char *path, int64_t B, GpucErr *e) {
  Graph *g = gpuc_onnx_load(path, NULL, 0, e);
  if (!g) return NULL;
  if (g->ninputs != 1 || g->values[g->inputs[0]].t.dt != GPUC_DT_F32 || g->values[g->inputs[0]].t.rank < 1 ||
      g->noutputs < 1) {
    gpuc_err_set(e, "%s: eval wants a classifier with one f32 input [batch, ...] and [batch, classes] as its first "
                    "output", path);
    gpuc_graph_free(g);
    return NULL;
  }
  Value *x = &g->values[g->inputs[0]];
  int64_t dims[GPUC_MAX_RANK];
  memcpy(dims, x->t.dims, sizeof dims);
  dims[0] = B;
  if (x->t.dims[0] >= 0 && x->t.dims[0] != B) {
    x->t.dims[0] = -1;
    if (gpuc_graph_infer(g, e)) { gpuc_graph_free(g); return NULL; }
  }
  if (gpuc_graph_bind_shape(g, x->name, x->t.rank, dims, e) || gpuc_graph_infer(g, e)) {
    gpuc_graph_free(g);
    return NULL;
  }
  return g;
}

/* --cpu: the reference on the graph the passes leave with the flags. */
static int open_cpu(const EvalArgs *a, Evaluator *ev, int64_t B, GpucErr *e) {
  if (!(ev->g = load_bound(a->model, B, e))) return -1;
  const Tensor *x = &ev->g->values[ev->g->inputs[0]].t;
  if (batch_input(ev, a->model, x->rank, x->dims, B, e)) return -1;
  /* no flags: the model as imported, unless -O2 asks for the graph the
   * compiler makes (what a plan compiled with -O2 runs) */
  if (!a->any_flag && (!a->level_given || a->level == 0)) return 0;
  PassOptions po;
  gpuc_pass_options_default(&po, a->level < 1 ? 1 : a->level);
  pass_flags_apply(&a->flags, &po);
  po.prune_report = stdout; /* --prune's sparsity per layer, as a compile prints it */
  if (gpuc_passes_run(ev->g, &po, e)) return -1;
  if (po.int8) gpuc_int8_report(ev->g, &po, stdout);
  return 0;
}

/* The GPU: a plan as given (its batch), or the model compiled with the
 * flags for batch *B into a temporary plan. */
static int open_gpu(const EvalArgs *a, Evaluator *ev, int64_t *B, char *tmp, size_t ntmp, GpucErr *e) {
  const char *plan = a->model;
  if (!is_plan_file(a->model)) {
    Graph *g = load_bound(a->model, *B, e);
    if (!g) return -1;
    const char *dir = getenv("TMPDIR");
    snprintf(tmp, ntmp, "%s/gpuc-eval-%ld.gpuc", dir && *dir ? dir : "/tmp", (long)getpid());
    CompileRequest r = {.model = a->model, .out = tmp, .level = a->level, .sm = a->sm, .flags = a->flags,
                        .prune_report = stdout};
    CompileStats st;
    int rc = compile_graph(g, &r, &st, e);
    gpuc_graph_free(g);
    if (rc) return -1;
    plan = tmp;
  }
  if (!(ev->s = gpuc_session_create(plan, 0, e))) return -1;
  const Plan *p = gpuc_session_plan(ev->s);
  const PlanTensor *in = NULL;
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role == PLAN_ROLE_INPUT || t->role == PLAN_ROLE_INPUT_OUTPUT) {
      if (in) return gpuc_err_set(e, "%s: eval wants a plan with one input", plan);
      in = t;
    }
    if ((t->role == PLAN_ROLE_OUTPUT || t->role == PLAN_ROLE_INPUT_OUTPUT) && !ev->out_name)
      ev->out_name = gpuc_plan_str(p, t->name);
  }
  if (!in || !ev->out_name || in->dt != GPUC_DT_F32 || in->rank < 1)
    return gpuc_err_set(e, "%s: eval wants a plan with one f32 input [batch, ...] and an output", plan);
  ev->in_name = gpuc_plan_str(p, in->name);
  int64_t dims[GPUC_MAX_RANK];
  for (uint32_t d = 0; d < in->rank; d++) dims[d] = in->dims[d];
  if (a->batch > 0 && a->batch != dims[0])
    return gpuc_err_set(e, "%s: the plan's batch is %lld; --batch %lld cannot apply (compile the model again)",
                        plan, (long long)dims[0], a->batch);
  *B = dims[0];
  return batch_input(ev, plan, (int)in->rank, dims, *B, e);
}

/* One batch (ev->x filled) -> the first output [B, classes]. */
static Tensor *run_batch(Evaluator *ev, GpucErr *e) {
  if (ev->s) {
    if (gpuc_session_set_input(ev->s, ev->in_name, &ev->x, e) || gpuc_session_replay(ev->s, e)) return NULL;
    return gpuc_session_get_output(ev->s, ev->out_name, e);
  }
  const Tensor *in[1] = {&ev->x};
  Tensor **out = calloc((size_t)ev->g->noutputs, sizeof *out);
  if (!out) { gpuc_err_set(e, "out of memory"); return NULL; }
  Tensor *y = NULL;
  if (!gpuc_ref_run(ev->g, in, out, e)) { y = out[0]; out[0] = NULL; }
  for (int k = 0; k < ev->g->noutputs; k++) gpuc_tensor_free(out[k]);
  free(out);
  return y;
}

/* Every image of d in batches of B (the last padded with zeros). */
static int score(Evaluator *ev, const char *path, const Dataset *d, int64_t B, int64_t *correct, double *loss,
                 GpucErr *e) {
  if (d->dim != ev->per_image)
    return gpuc_err_set(e, "%s: the model takes %lld values per image, the data has %lld", path,
                        (long long)ev->per_image, (long long)d->dim);
  float *x = ev->x.data;
  int64_t classes = -1;
  for (int64_t s = 0; s < d->n; s += B) {
    int64_t b = d->n - s < B ? d->n - s : B;
    memcpy(x, d->x + s * d->dim, sizeof(float) * (size_t)(b * d->dim));
    if (b < B) memset(x + b * d->dim, 0, sizeof(float) * (size_t)((B - b) * d->dim));
    Tensor *y = run_batch(ev, e);
    if (!y) return -1;
    if (y->rank != 2 || y->dims[0] != B || !gpuc_dtype_is_float(y->dt)) {
      gpuc_tensor_free(y);
      return gpuc_err_set(e, "%s: the first output is not [batch, classes] float", path);
    }
    if (classes < 0) {
      classes = y->dims[1];
      for (int64_t i = 0; i < d->n; i++)
        if (d->y[i] < 0 || d->y[i] >= classes) {
          gpuc_tensor_free(y);
          return gpuc_err_set(e, "%s: label %lld of image %lld is outside the model's %lld classes", path,
                              (long long)d->y[i], (long long)i, (long long)classes);
        }
    }
    gpuc_score_logits(y, d->y + s, b, classes, correct, loss);
    gpuc_tensor_free(y);
  }
  return 0;
}

int cmd_eval(int argc, char **argv) {
  EvalArgs a;
  int prc = parse_args(argc, argv, &a);
  if (prc) return prc;
  GpucErr e = {0};
  Dataset te = {0};
  Evaluator ev = {0};
  bool has_test;
  char tmp[4200] = "";
  int64_t B = a.batch > 0 ? a.batch : 500, correct = 0;
  double loss = 0;
  int rc = EXIT_BAD_INPUT;
  if (load_data(a.data, NULL, &te, &has_test, &e)) goto fail;
  gpuc_dataset_limit(&te, a.limit);
  if (a.norm_std > 0) normalize_data(&te, a.norm_mean, a.norm_std);
  if (te.n < 1) { gpuc_err_set(&e, "%s: the test split has no images", a.data); goto fail; }
  if (a.cpu ? open_cpu(&a, &ev, B, &e) : open_gpu(&a, &ev, &B, tmp, sizeof tmp, &e)) {
    if (!a.cpu && !ev.s)
      gpuc_err_prefix(&e, is_plan_file(a.model) ? "eval on the GPU" : "eval on the GPU (--cpu runs the reference)");
    goto fail;
  }
  char label[64];
  pass_flags_label(&a.flags, label, sizeof label);
  char passes[40] = ""; /* --cpu -O2 without flags (with flags the label says them) */
  if (a.cpu && !a.any_flag && a.level_given && a.level > 0)
    snprintf(passes, sizeof passes, " after the -O%d passes", a.level);
  printf("evaluating %s on the %s%s%s: %lld test images, batch %lld\n", a.model,
         a.cpu ? "CPU reference" : "GPU", label, passes, (long long)te.n, (long long)B);
  if (score(&ev, a.model, &te, B, &correct, &loss, &e)) goto fail;
  printf("test loss %.6f\n", loss / (double)te.n);
  printf("test accuracy %.2f%% (%lld images)\n", 100.0 * (double)correct / (double)te.n, (long long)te.n);
  rc = EXIT_OK;
fail:
  if (rc) report(&e);
  if (*tmp) unlink(tmp);
  gpuc_session_free(ev.s);
  gpuc_graph_free(ev.g);
  free(ev.x.data);
  gpuc_dataset_free(&te);
  return rc;
}
