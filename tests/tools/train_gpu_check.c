/* The training graph on the GPU against the CPU reference, output by output.
 *
 * usage: train_gpu_check MODEL.onnx BATCH [--fp16]
 *
 * Builds the training graph (gpuc_trainer_new + gpuc_trainer_graph: inputs
 * images, labels and, with training-mode Dropout, the counter (seed,
 * step); outputs loss, one gradient per parameter, then the
 * BatchNormalization running statistics; the Dropout masks are made extra
 * outputs here), compiles it for the present GPU
 * (after the fp16 pass with --fp16), writes the plan to a temporary file and
 * loads it with gpuc_session_create. Two runs with different seeds (uniform
 * 0..1 images, labels 0..classes-1, counter (seed, 1000 + run)) go to the GPU session and to
 * gpuc_ref_run on the same graph (with --fp16 the fp16 graph: both sides
 * store the same tensors in half, so a ReLU mask or a max-pool choice that
 * flips when the inputs round to half flips on both; against the fp32
 * graph such flips alone exceed 2e-2 on mlp's fc1 gradients). The
 * reference always starts from the same initializers (nothing is written
 * back), so run 2 also catches state leaking between GPU runs (and a
 * counter the plan would not read from its input). Every output is compared:
 *   fp32: max abs err <= 1e-3 * max(1, max|ref|) and rel L2 <= 1e-4
 *   fp16: rel L2 <= 2e-2
 *   bool (Dropout masks, one generator on both sides): equal
 * rel L2 = ||gpu - ref||_2 / max(||ref||_2, 1e-6); a NaN or inf on either
 * side fails. One line per output: name, max abs err, rel L2, PASS/FAIL.
 * Exit status 0 when everything passes, 1 on any failure, 2 on an error. */
#include "codegen.h"
#include "passes.h"
#include "ref.h"
#include "session.h"
#include "train.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng;
static double rnd01(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static int die(const char *what, const GpucErr *e) {
  fprintf(stderr, "train_gpu_check: %s: %s\n", what, e->msg);
  return 2;
}

/* Classes: the C of the loss's scores [N, C]. */
static int64_t classes(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == GPUC_OP_SOFTMAXCROSSENTROPYLOSS) {
      const Tensor *s = &g->values[g->nodes[i].in[0]].t;
      return s->rank >= 2 ? s->dims[1] : -1;
    }
  return -1;
}

/* The mask output of every DropoutTrain node becomes a graph output too,
 * so the two generators are compared element by element. */
static int expose_masks(Graph *g) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++)
    n += g->nodes[i].op == GPUC_OP_DROPOUTTRAIN && g->nodes[i].nout > 1 && g->nodes[i].out[1] >= 0;
  if (!n) return 0;
  int *outs = gpuc_arena_alloc(&g->arena, sizeof(int) * (size_t)(g->noutputs + n));
  if (!outs) return -1;
  memcpy(outs, g->outputs, sizeof(int) * (size_t)g->noutputs);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *nd = &g->nodes[i];
    if (nd->op != GPUC_OP_DROPOUTTRAIN || nd->nout < 2 || nd->out[1] < 0) continue;
    outs[g->noutputs++] = nd->out[1];
    g->values[nd->out[1]].is_output = true;
  }
  g->outputs = outs;
  return 0;
}

/* Compare one output; prints its line and returns true when it passes. */
static bool compare(const char *name, const Tensor *gpu, const Tensor *ref, bool fp16) {
  int64_t n = gpuc_numel(ref);
  if (!gpu || gpuc_numel(gpu) != n) {
    printf("  %-44s FAIL (missing or %lld elements, the reference has %lld)\n", name,
           gpu ? (long long)gpuc_numel(gpu) : -1LL, (long long)n);
    return false;
  }
  double maxerr = 0, maxref = 0, d2 = 0, r2 = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; i++) {
    double a = gpuc_get_f64(gpu, i), b = gpuc_get_f64(ref, i);
    if (!isfinite(a) || !isfinite(b)) finite = false;
    double d = fabs(a - b);
    if (d > maxerr) maxerr = d;
    if (fabs(b) > maxref) maxref = fabs(b);
    d2 += (a - b) * (a - b);
    r2 += b * b;
  }
  double rel = sqrt(d2) / fmax(sqrt(r2), 1e-6);
  bool ok = finite && (ref->dt == GPUC_DT_BOOL ? maxerr == 0
                       : fp16 ? rel <= 2e-2 : maxerr <= 1e-3 * fmax(1.0, maxref) && rel <= 1e-4);
  printf("  %-44s max abs err %.3e (max|ref| %.3e)  rel L2 %.3e  %s%s\n", name, maxerr, maxref, rel,
         ok ? "PASS" : "FAIL", finite ? "" : " (NaN/inf)");
  return ok;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "--fp16"))) {
    fprintf(stderr, "usage: train_gpu_check MODEL.onnx BATCH [--fp16]\n");
    return 2;
  }
  const char *model = argv[1];
  int64_t batch = atoll(argv[2]);
  bool fp16 = argc == 4;
  if (batch <= 0) { fprintf(stderr, "train_gpu_check: BATCH must be positive\n"); return 2; }
  GpucErr e = {0};
  /* the graph compiled and run by the reference; the fp16 pass rewrites it
   * in place (this program is the trainer's only user) */
  Trainer *tr = gpuc_trainer_new(model, batch, &e);
  if (!tr) return die(model, &e);
  Graph *gc = (Graph *)gpuc_trainer_graph(tr);
  const Graph *gr = gc;
  if (expose_masks(gc)) { fprintf(stderr, "train_gpu_check: out of memory\n"); return 2; }
  if (fp16) {
    PassOptions po;
    gpuc_pass_options_default(&po, 2);
    po.fp16 = true;
    if (pass_fp16(gc, &po, &e) < 0) return die("fp16 pass", &e);
  }
  int sm = gpuc_gpu_sm(&e);
  if (sm < 0) return die("GPU", &e);
  CodegenOptions co = {.sm = sm, .level = 2, .fp16 = fp16};
  Plan *plan = NULL;
  CompileStats st;
  if (gpuc_codegen(gc, &co, &plan, &st, &e)) return die("codegen", &e);
  uint32_t modes[3] = {0};
  for (uint32_t i = 0; i < plan->nconvs; i++) if (plan->convs[i].mode < 3) modes[plan->convs[i].mode]++;
  printf("%s batch %lld %s: sm_%d, %u steps (%u kernels, %u gemms, convs: %u forward, %u backward data, "
         "%u backward filter)\n", model, (long long)batch, fp16 ? "fp16" : "fp32", sm, plan->nsteps,
         plan->nkernels, plan->ngemms, modes[0], modes[1], modes[2]);
  char path[] = "/tmp/train_gpu_check_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) { fprintf(stderr, "train_gpu_check: cannot create a temporary file\n"); return 2; }
  close(fd);
  int rc = gpuc_plan_write(plan, path, &e);
  gpuc_plan_free(plan);
  if (rc) { unlink(path); return die("plan write", &e); }
  GpucSession *s = gpuc_session_create(path, 0, &e);
  unlink(path);
  if (!s) return die("session", &e);

  if (gr->ninputs != 2 && gr->ninputs != 3) {
    fprintf(stderr, "train_gpu_check: the training graph has %d inputs\n", gr->ninputs);
    return 2;
  }
  const Value *vx = &gr->values[gr->inputs[0]], *vy = &gr->values[gr->inputs[1]];
  const Value *vc = gr->ninputs == 3 ? &gr->values[gr->inputs[2]] : NULL;
  int64_t C = classes(gr);
  if (C <= 0) { fprintf(stderr, "train_gpu_check: no SoftmaxCrossEntropyLoss in the graph\n"); return 2; }
  int failures = 0;
  for (int run = 1; run <= 2; run++) {
    rng = 0x5eed0000ull + (uint64_t)run * 7919;
    Tensor *x = gpuc_tensor_new(vx->t.dt, vx->t.rank, vx->t.dims, &e);
    Tensor *y = x ? gpuc_tensor_new(vy->t.dt, vy->t.rank, vy->t.dims, &e) : NULL;
    if (!x || !y) return die("inputs", &e);
    for (int64_t i = 0; i < gpuc_numel(x); i++) gpuc_set_f64(x, i, rnd01());
    for (int64_t i = 0; i < gpuc_numel(y); i++) gpuc_set_i64(y, i, (int64_t)(rnd01() * (double)C) % C);
    int64_t cv[2] = {(int64_t)rng, 1000 + run};
    Tensor ct = {.dt = GPUC_DT_I64, .rank = 1, .dims = {2}, .data = cv};
    Tensor **ref = calloc((size_t)gr->noutputs + 1, sizeof *ref);
    const Tensor *ins[3] = {x, y, &ct};
    if (!ref || gpuc_ref_run(gr, ins, ref, &e)) return die("reference run", &e);
    if (gpuc_session_set_input(s, vx->name, x, &e) || gpuc_session_set_input(s, vy->name, y, &e) ||
        (vc && gpuc_session_set_input(s, vc->name, &ct, &e)))
      return die("set input", &e);
    if (gpuc_session_replay(s, &e)) return die("GPU run", &e);
    printf("run %d (seed %llu): %d outputs\n", run, (unsigned long long)(0x5eed0000ull + (uint64_t)run * 7919),
           gr->noutputs);
    for (int k = 0; k < gr->noutputs; k++) {
      const char *name = gr->values[gr->outputs[k]].name;
      GpucErr ge = {0};
      Tensor *g = gpuc_session_get_output(s, name, &ge);
      if (!g) printf("  %-44s FAIL (%s)\n", name, ge.msg);
      if (!g || !compare(name, g, ref[k], fp16)) failures++;
      gpuc_tensor_free(g);
      gpuc_tensor_free(ref[k]);
    }
    free(ref);
    gpuc_tensor_free(x);
    gpuc_tensor_free(y);
  }
  printf("%s batch %lld %s: %s (%d failures)\n", model, (long long)batch, fp16 ? "fp16" : "fp32",
         failures ? "FAIL" : "PASS", failures);
  gpuc_session_free(s);
  gpuc_trainer_free(tr);
  return failures ? 1 : 0;
}
