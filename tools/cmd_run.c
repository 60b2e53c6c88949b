/* gpuc run MODEL.onnx --cpu [-O0|-O1|-O2] [--fp16|--bf16] [--int8 [--int8-skip GLOB]...] [--prune l1:F|2:4]
 *                          [--input NAME=FILE]... [--out DIR] [--shape ...]
 * Inputs not given are filled with seeded random values (a note says so),
 * which needs their shapes to be known. With a pass flag (tools/pass_flags.h)
 * the reference runs the graph the -O2 passes leave with that flag (half
 * storage rounds where the compiled plan would), to check a GPU plan
 * compiled with the same flags against. -O1/-O2 alone run that level's
 * passes in fp32 (to check the rewrites against -O0 or PyTorch). */
#include "cli.h"
#include "npy.h"
#include "passes.h"
#include "ref.h"
#include "session.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

Tensor *load_tensor_file(const char *path, GpucErr *e) {
  size_t l = strlen(path);
  if (l > 4 && !strcmp(path + l - 4, ".npy")) return gpuc_npy_load(path, e);
  if (l > 3 && !strcmp(path + l - 3, ".pb")) return gpuc_onnx_load_tensor_pb(path, NULL, e);
  gpuc_err_set(e, "%s: input files must be .npy or .pb (ONNX TensorProto)", path);
  return NULL;
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static Tensor *random_input(const Graph *g, const Value *v, uint64_t *seed, GpucErr *e) {
  if (!gpuc_shape_known(&v->t)) {
    gpuc_err_set(e, "%s: input '%s' has symbolic dims: give --input %s=FILE or --shape %s=DIMS",
                 g->path, v->name, v->name, v->name);
    return NULL;
  }
  Tensor *t = gpuc_tensor_new(v->t.dt, v->t.rank, v->t.dims, e);
  if (!t) { /* the allocator's message names neither the model nor the input */
    char what[600];
    snprintf(what, sizeof what, "%s: input '%s'", g->path, v->name);
    gpuc_err_prefix(e, what);
    return NULL;
  }
  int64_t n = gpuc_numel(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rng_next(seed);
    if (gpuc_dtype_is_float(t->dt)) gpuc_set_f64(t, i, (double)(r >> 11) / 9007199254740992.0 * 2 - 1);
    else gpuc_set_i64(t, i, (int64_t)(r % (t->dt == GPUC_DT_BOOL ? 2 : 10)));
  }
  return t;
}

static int write_output(const char *outdir, const char *name, const Tensor *t, GpucErr *e) {
  print_tensor_summary(name, t);
  if (!outdir) return 0;
  char path[4096], safe[256];
  size_t j = 0;
  for (const char *p = name; *p && j + 1 < sizeof safe; p++)
    safe[j++] = (*p == '/' || *p == '\\' || (*p == '.' && p == name)) ? '_' : *p;
  safe[j] = 0;
  snprintf(path, sizeof path, "%s/%s.npy", outdir, safe);
  return gpuc_npy_save(path, t, e);
}

/* mkdir -p */
static int make_outdir(const char *outdir, GpucErr *e) {
  if (!outdir) return 0;
  char path[4096];
  if (snprintf(path, sizeof path, "%s", outdir) >= (int)sizeof path)
    return gpuc_err_set(e, "%s: output folder path too long", outdir);
  for (char *p = path + 1; ; p++) {
    bool end = *p == 0;
    if (*p == '/' || end) {
      *p = 0;
      if (mkdir(path, 0777) && errno != EEXIST)
        return gpuc_err_set(e, "%s: cannot create output folder: %s", outdir, strerror(errno));
      if (end) break;
      *p = '/';
    }
  }
  return 0;
}

/* --cpu: the symbolic dims of the inputs --input gives take the files'
 * sizes (so random inputs sharing a dim's name match them); what is left
 * unbound defaults to 1, as when compiling, with a note. */
static int bind_from_files(Graph *g, int ninputs, const char **in_names, const char **in_files, GpucErr *e) {
  for (int k = 0; k < ninputs; k++)
    for (int j = 0; j < g->ninputs; j++) {
      Value *v = &g->values[g->inputs[j]];
      if (strcmp(v->name, in_names[k]) || gpuc_shape_known(&v->t)) continue;
      Tensor *t = load_tensor_file(in_files[k], e);
      if (!t) return -1;
      bool fits = v->t.rank < 0 || v->t.rank == t->rank; /* else the run names the mismatch */
      int rc = fits ? gpuc_graph_bind_shape(g, v->name, t->rank, t->dims, e) : 0;
      gpuc_tensor_free(t);
      if (rc) return -1;
    }
  if (gpuc_graph_bind_symbols(g, e)) return -1;
  bool unbound = false;
  for (int j = 0; j < g->ninputs; j++) {
    const Value *v = &g->values[g->inputs[j]];
    bool given = false;
    for (int k = 0; k < ninputs; k++) given |= !strcmp(v->name, in_names[k]);
    unbound |= !given && !gpuc_shape_known(&v->t);
  }
  char note[1024];
  if (unbound && gpuc_graph_default_dims(g, note, sizeof note) > 0)
    fprintf(stderr, "gpuc: note: %s: %s\n", g->path, note);
  return gpuc_graph_infer(g, e);
}

/* gpuc run PLAN: inputs by name into the session, outputs back. */
static int run_plan(const char *plan, int ninputs, const char **in_names, const char **in_files,
                    const char *outdir, const GpucShapeBind *binds, int nbinds) {
  GpucErr e = {0};
  GpucSession *s = gpuc_session_create(plan, 0, &e);
  if (!s) return report(&e);
  const Plan *p = gpuc_session_plan(s);
  int rc = EXIT_BAD_INPUT;
  uint64_t seed = 1234;
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_INPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    const char *name = gpuc_plan_str(p, t->name);
    Tensor *h = NULL;
    for (int k = 0; k < ninputs; k++)
      if (!strcmp(in_names[k], name) && !(h = load_tensor_file(in_files[k], &e))) goto done;
    if (!h) {
      Value v = {.name = name, .t = {.dt = t->dt, .rank = t->rank}};
      if (plan_input_dims(p, name, binds, nbinds, v.t.dims, &e)) goto done; /* --shape: in a bucket plan's range */
      Graph g = {.path = plan};
      if (!(h = random_input(&g, &v, &seed, &e))) goto done;
      fprintf(stderr, "gpuc: note: input '%s' not given, using seeded random values\n", name);
    }
    int r = gpuc_session_set_input(s, name, h, &e);
    gpuc_tensor_free(h);
    if (r) goto done;
  }
  for (int k = 0; k < ninputs; k++) {
    bool found = false;
    for (uint32_t i = 0; i < p->ntensors; i++)
      if ((p->tensors[i].role == PLAN_ROLE_INPUT || p->tensors[i].role == PLAN_ROLE_INPUT_OUTPUT) &&
          !strcmp(gpuc_plan_str(p, p->tensors[i].name), in_names[k])) found = true;
    if (!found) { gpuc_err_set(&e, "%s: --input names '%s', which is not an input of the plan", plan, in_names[k]); goto done; }
  }
  if (gpuc_session_replay(s, &e) || make_outdir(outdir, &e)) goto done;
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_OUTPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    Tensor *o = gpuc_session_get_output(s, gpuc_plan_str(p, t->name), &e);
    if (!o) goto done;
    int r = write_output(outdir, gpuc_plan_str(p, t->name), o, &e);
    gpuc_tensor_free(o);
    if (r) goto done;
  }
  rc = EXIT_OK;
done:
  if (rc) report(&e);
  gpuc_session_free(s);
  return rc;
}

int cmd_run(int argc, char **argv) {
  const char *model = NULL, *outdir = NULL;
  bool cpu = false;
  int level = 0; /* -O1/-O2: passes of that level on the reference */
  GpucShapeBind binds[64];
  int nbinds = 0, ninputs = 0;
  const char *in_names[256], *in_files[256];
  PassFlags flags = {0};
  for (int i = 0, pf; i < argc; i++) {
    if (!strcmp(argv[i], "--cpu")) cpu = true;
    else if (!strcmp(argv[i], "-O0") || !strcmp(argv[i], "-O1") || !strcmp(argv[i], "-O2")) level = argv[i][2] - '0';
    else if ((pf = pass_flags_parse(&flags, argc, argv, &i)) != 0) {
      if (pf < 0) return EXIT_USAGE;
    }
    else if (!strcmp(argv[i], "--out")) {
      if (i + 1 >= argc) return usage_error("--out needs a folder");
      outdir = argv[++i];
    } else if (!strcmp(argv[i], "--input")) {
      if (i + 1 >= argc) return usage_error("--input needs NAME=FILE");
      char *a = argv[++i], *eq = strchr(a, '=');
      if (!eq || eq == a || !eq[1]) return usage_error("--input wants NAME=FILE, got '%s'", a);
      if (ninputs == 256) return usage_error("too many --input flags");
      *eq = 0; /* NAME is the argv string cut at '=' */
      in_names[ninputs] = a;
      in_files[ninputs++] = eq + 1;
    } else if (!strcmp(argv[i], "--shape")) {
      if (i + 1 >= argc) return usage_error("--shape needs NAME=DIMS");
      if (nbinds == 64) return usage_error("too many --shape flags");
      if (parse_shape_arg(argv[++i], &binds[nbinds++])) return EXIT_USAGE;
    } else if (argv[i][0] == '-') return usage_error("run: unknown flag '%s'", argv[i]);
    else if (!model) model = argv[i];
    else return usage_error("run: more than one model given");
  }
  if (!model) return usage_error("run: no model given");
  if (pass_flags_check(&flags)) return EXIT_USAGE;
  if (is_plan_file(model)) {
    if (pass_flags_any(&flags)) return usage_error("run: --fp16/--bf16/--int8/--fp8/--prune apply when compiling (or with MODEL.onnx --cpu), not to a plan");
    if (cpu) return usage_error("run: a plan runs on the GPU; give the .onnx model for --cpu");
    return run_plan(model, ninputs, in_names, in_files, outdir, binds, nbinds);
  }
  if (!cpu) return usage_error("run: MODEL.onnx runs with --cpu; for the GPU compile it first: gpuc %s -o PLAN.gpuc", model);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(model, binds, nbinds, &e);
  if (!g) return report(&e);
  PassOptions po;
  gpuc_pass_options_default(&po, level);
  /* -O1/-O2 without a pass flag: that level's passes, in fp32 (a pass flag
   * runs the -O2 passes with it, as before) */
  bool plain_level = level > 0 && !pass_flags_any(&flags);
  if (bind_from_files(g, ninputs, in_names, in_files, &e) || reference_passes(g, &flags, stderr, &e) ||
      (plain_level && gpuc_passes_run(g, &po, &e))) {
    gpuc_graph_free(g);
    return report(&e);
  }
  int rc = EXIT_BAD_INPUT;
  Tensor **ins = calloc((size_t)g->ninputs + 1, sizeof *ins);
  Tensor **outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
  for (int k = 0; k < ninputs; k++) {
    int slot = -1;
    for (int j = 0; j < g->ninputs; j++)
      if (!strcmp(g->values[g->inputs[j]].name, in_names[k])) slot = j;
    if (slot < 0) { gpuc_err_set(&e, "%s: --input names '%s', which is not a graph input", model, in_names[k]); goto done; }
    if (ins[slot]) { gpuc_err_set(&e, "%s: input '%s' given twice", model, in_names[k]); goto done; }
    if (!(ins[slot] = load_tensor_file(in_files[k], &e))) goto done;
  }
  uint64_t seed = 1234;
  for (int j = 0; j < g->ninputs; j++) {
    if (ins[j]) continue;
    const Value *v = &g->values[g->inputs[j]];
    if (!(ins[j] = random_input(g, v, &seed, &e))) goto done;
    fprintf(stderr, "gpuc: note: input '%s' not given, using seeded random values\n", v->name);
  }
  if (gpuc_ref_run(g, (const Tensor *const *)ins, outs, &e)) goto done;
  if (make_outdir(outdir, &e)) goto done;
  for (int k = 0; k < g->noutputs; k++)
    if (write_output(outdir, g->values[g->outputs[k]].name, outs[k], &e)) goto done;
  rc = EXIT_OK;
done:
  if (rc) report(&e);
  for (int j = 0; j < g->ninputs; j++) gpuc_tensor_free(ins[j]);
  for (int j = 0; j < g->noutputs; j++) gpuc_tensor_free(outs[j]);
  free(ins);
  free(outs);
  gpuc_graph_free(g);
  return rc;
}
