/* The training graphs compile to GPU plans without a GPU: for mlp.onnx,
 * small_cnn.onnx, small_bn_cnn.onnx and mlp_dropout.onnx,
 * gpuc_trainer_new + gpuc_trainer_graph give forward + loss + backward
 * (+ BatchNormalization in training mode, DropoutTrain with its counter
 * input "gpuc.step", an int64 [2] input tensor of the plan);
 * gpuc_codegen lowers every node and NVRTC compiles the module for sm_80,
 * sm_89, sm_90 and sm_120, in fp32 and after the fp16 pass. The CNN plans
 * hold cuDNN backward-data (mode 1) and backward-filter (mode 2) steps,
 * every training op's node is covered by some step, and the plan survives
 * write -> read -> write byte-exact. A plan whose conv has mode 3 is
 * refused by the reader.
 * usage: test_train_codegen MODELS_DIR WORKDIR */
#include "codegen.h"
#include "passes.h"
#include "plan.h"
#include "train.h"
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool training_op(GpucOp op) {
  switch (op) {
  case GPUC_OP_CONVGRADINPUT: case GPUC_OP_CONVGRADWEIGHT: case GPUC_OP_MAXPOOLGRAD:
  case GPUC_OP_AVERAGEPOOLGRAD: case GPUC_OP_BATCHNORMGRAD: case GPUC_OP_BATCHNORMALIZATION:
  case GPUC_OP_SOFTMAXCROSSENTROPYLOSSGRAD: case GPUC_OP_GATHERGRAD: case GPUC_OP_DROPOUTTRAIN:
    return true;
  default:
    return false;
  }
}

/* Some step's node label names node n (labels list ONNX node names). */
static bool covered(const Plan *p, const char *name) {
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const char *l = gpuc_plan_str(p, p->steps[i].nodes);
    size_t k = strlen(name);
    for (const char *s = strstr(l, name); s; s = strstr(s + 1, name))
      if ((s == l || s[-1] == ' ' || s[-1] == ',') && (s[k] == 0 || s[k] == ' ' || s[k] == ','))
        return true;
  }
  return false;
}

/* Compile the training graph of model for sm; fp16 applies the fp16 pass
 * to a trainer of its own (the pass rewrites the graph in place). */
static Plan *compile(const char *model, int64_t batch, int sm, bool fp16) {
  GpucErr e = {0};
  Trainer *t = gpuc_trainer_new(model, batch, &e);
  CHECK(t != NULL, "%s: trainer: %s", model, e.msg);
  if (!t) return NULL;
  /* the trainer owns the graph; this test is its only user */
  Graph *g = (Graph *)gpuc_trainer_graph(t);
  if (fp16) {
    PassOptions po;
    gpuc_pass_options_default(&po, 2);
    po.fp16 = true;
    int rc = pass_fp16(g, &po, &e);
    CHECK(rc >= 0, "%s: fp16 pass: %s", model, e.msg);
    if (rc < 0) { gpuc_trainer_free(t); return NULL; }
  }
  CodegenOptions co = {.sm = sm, .level = 2, .fp16 = fp16};
  Plan *p = NULL;
  CompileStats st;
  int rc = gpuc_codegen(g, &co, &p, &st, &e);
  CHECK(rc == 0 && p, "%s sm_%d%s: codegen: %s", model, sm, fp16 ? " fp16" : "", e.msg);
  if (p) {
    CHECK(p->cubin_size > 0 && p->ptx_size > 1, "%s sm_%d: PTX and CUBIN present", model, sm);
    for (int i = 0; i < g->nnodes; i++)
      if (training_op(g->nodes[i].op))
        CHECK(covered(p, g->nodes[i].name), "%s: node '%s' (%s) has no step", model,
              g->nodes[i].name, gpuc_op_name(&g->nodes[i]));
  }
  gpuc_trainer_free(t);
  return p;
}

/* The Dropout counter is an input of the plan: the trainer writes it. */
static bool has_counter(const Plan *p) {
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (!strcmp(gpuc_plan_str(p, t->name), "gpuc.step"))
      return t->role == PLAN_ROLE_INPUT && t->dt == GPUC_DT_I64 && t->rank == 1 && t->dims[0] == 2;
  }
  return false;
}

static int count_mode(const Plan *p, uint32_t mode) {
  int n = 0;
  for (uint32_t i = 0; i < p->nconvs; i++) n += p->convs[i].mode == mode;
  return n;
}

/* Set conv 0's mode to 3 in the written plan at path a (fixing the
 * checksum) and expect the reader to refuse it as a corrupt conv. */
static void check_mode3_refused(const char *a, const char *bad) {
  size_t n = 0;
  unsigned char *c = slurp(a, &n);
  CHECK(c != NULL, "read %s", a);
  if (!c) return;
  PlanHeader h;
  memcpy(&h, c, sizeof h);
  bool done = false;
  for (uint32_t i = 0; i < h.nsections && !done; i++) {
    PlanSection sec;
    memcpy(&sec, c + sizeof h + i * sizeof sec, sizeof sec);
    if (sec.id != PLAN_SEC_CONVS || sec.size < sizeof(PlanConv)) continue;
    PlanConv cv;
    memcpy(&cv, c + sec.offset, sizeof cv);
    cv.mode = 3;
    memcpy(c + sec.offset, &cv, sizeof cv);
    done = true;
  }
  CHECK(done, "the plan has a conv section");
  h.checksum = 0;
  memcpy(c, &h, sizeof h);
  h.checksum = gpuc_fnv1a64(c, n, GPUC_FNV_INIT);
  memcpy(c, &h, sizeof h);
  spit(bad, c, n);
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(bad, &e);
  CHECK(p == NULL, "a conv of mode 3 was accepted");
  CHECK(strstr(e.msg, "conv") != NULL, "mode 3 refused with '%s'", e.msg);
  gpuc_plan_free(p);
  free(c);
}

static void round_trip(const Plan *p, const char *a, const char *b) {
  GpucErr e = {0};
  CHECK(gpuc_plan_write(p, a, &e) == 0, "write: %s", e.msg);
  Plan *q = gpuc_plan_read(a, &e);
  CHECK(q != NULL, "read back: %s", e.msg);
  if (!q) return;
  CHECK(q->nconvs == p->nconvs && q->nsteps == p->nsteps &&
        (p->nconvs == 0 || !memcmp(q->convs, p->convs, sizeof(PlanConv) * p->nconvs)),
        "convs survive the round trip");
  CHECK(gpuc_plan_write(q, b, &e) == 0, "rewrite: %s", e.msg);
  size_t na = 0, nb = 0;
  unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
  CHECK(ba && bb && na == nb && !memcmp(ba, bb, na), "write -> read -> write is byte-exact");
  free(ba);
  free(bb);
  gpuc_plan_free(q);
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: test_train_codegen MODELS_DIR WORKDIR\n"); return 2; }
  static const char *models[] = {"mlp", "small_cnn", "small_bn_cnn", "mlp_dropout"};
  static const int archs[] = {80, 89, 90, 120};
  char path[4096], a[4096], b[4096], bad[4096];
  snprintf(a, sizeof a, "%s/train_a.gpuc", argv[2]);
  snprintf(b, sizeof b, "%s/train_b.gpuc", argv[2]);
  snprintf(bad, sizeof bad, "%s/train_bad.gpuc", argv[2]);
  for (int m = 0; m < 4; m++) {
    bool convs = m == 1 || m == 2, dropout = m == 3;
    snprintf(path, sizeof path, "%s/%s.onnx", argv[1], models[m]);
    for (int fp16 = 0; fp16 < 2; fp16++)
      for (int i = 0; i < 4; i++) {
        Plan *p = compile(path, 32, archs[i], fp16);
        if (!p) continue;
        if (dropout) CHECK(has_counter(p), "%s: no int64 [2] input 'gpuc.step'", models[m]);
        if (convs) {
          CHECK(count_mode(p, 1) > 0, "%s: no backward-data conv", models[m]);
          CHECK(count_mode(p, 2) > 0, "%s: no backward-filter conv", models[m]);
        }
        if (archs[i] == 90) round_trip(p, a, b);
        if (convs && archs[i] == 90 && !fp16) check_mode3_refused(a, bad);
        gpuc_plan_free(p);
      }
    printf("%s: compiled\n", models[m]);
  }
  return check_summary();
}
