/* Mutation fuzzing of the two loaders that read untrusted files, with a
 * fixed seed so a failure reproduces:
 *   - ONNX models: the bundled models, mutated (bit flips, byte stores,
 *     truncation, a duplicated or deleted chunk), loaded and, when they
 *     load, run through the -O2 passes;
 *   - plans: a plan compiled from the bundled MLP for sm_90 (NVRTC, no
 *     GPU), mutated the same way, then re-sealed with a correct checksum so
 *     the mutation reaches the header, section and index checks, and read;
 *   - training checkpoints of the MLP, mutated, re-sealed (the trailing
 *     FNV-1a), and loaded into a trainer.
 * A mutant may be accepted or refused; what must never happen is a crash,
 * a hang, a sanitizer report, or a refusal without a message. The ASan/UBSan
 * run of the suite is where this test earns its keep.
 * usage: test_fuzz MODELS_DIR WORKDIR [ITERATIONS] */
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "plan.h"
#include "train.h"
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static uint64_t rng = 0x5eed;
static uint64_t next(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One random mutation of src into a fresh buffer (caller frees). Mostly
 * small edits, so the result stays close enough to valid to get deep. */
static unsigned char *mutate(const unsigned char *src, size_t n, size_t *out_n) {
  unsigned char *b = malloc(n * 2 + 16);
  memcpy(b, src, n);
  size_t len = n;
  int edits = 1 + (int)(next() % 4);
  for (int k = 0; k < edits && len > 0; k++) {
    size_t at = (size_t)(next() % len);
    switch (next() % 6) {
    case 0: b[at] ^= (unsigned char)(1u << (next() % 8)); break;          /* bit flip */
    case 1: b[at] = (unsigned char)next(); break;                        /* random byte */
    case 2: b[at] = (unsigned char[]){0, 0x7f, 0x80, 0xff}[next() % 4]; break; /* edge byte */
    case 3: len = at; break;                                             /* truncate */
    case 4: {                                                            /* delete a chunk */
      size_t span = 1 + (size_t)(next() % 64);
      if (at + span > len) span = len - at;
      memmove(b + at, b + at + span, len - at - span);
      len -= span;
      break;
    }
    default: {                                                           /* duplicate a chunk */
      size_t span = 1 + (size_t)(next() % 64);
      if (at + span > len) span = len - at;
      if (len + span > n * 2 + 16) break;
      memmove(b + at + span, b + at, len - at);
      len += span;
      break;
    }
    }
  }
  *out_n = len;
  return b;
}

static void fuzz_model(const char *model, const GpucShapeBind *bind, const char *work, int iters) {
  size_t n;
  unsigned char *src = slurp(model, &n);
  CHECK(src && n > 0, "read %s", model);
  if (!src) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/mutant.onnx", work);
  int loaded = 0, refused = 0, silent = 0;
  for (int i = 0; i < iters; i++) {
    size_t m;
    unsigned char *b = mutate(src, n, &m);
    spit(path, b, m);
    free(b);
    GpucErr e = {0};
    /* with the batch bound, folding and the fusion passes get to work */
    Graph *g = gpuc_onnx_load(path, bind, bind ? 1 : 0, &e);
    if (!g) {
      refused++;
      silent += e.msg[0] == 0;
      continue;
    }
    loaded++;
    PassOptions o;
    gpuc_pass_options_default(&o, 2);
    GpucErr pe = {0};
    if (gpuc_passes_run(g, &o, &pe)) silent += pe.msg[0] == 0;
    gpuc_graph_free(g);
  }
  free(src);
  printf("%s: %d mutants, %d loaded, %d refused\n", model, iters, loaded, refused);
  CHECK(silent == 0, "%s: %d refusals without a message", model, silent);
  CHECK(refused > 0, "%s: no mutant was refused (is the mutator mutating?)", model);
}

static void fuzz_plan(const char *models, const char *work, int iters) {
  char model[4096], path[4096];
  snprintf(model, sizeof model, "%s/mlp.onnx", models);
  GpucShapeBind bind = {.name = "image", .rank = 2, .dims = {4, 784}};
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(model, &bind, 1, &e);
  CHECK(g != NULL, "load %s: %s", model, e.msg);
  if (!g) return;
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  CodegenOptions co = {.sm = 90, .level = 2};
  Plan *p = NULL;
  CompileStats st;
  int rc = gpuc_passes_run(g, &po, &e) || gpuc_codegen(g, &co, &p, &st, &e);
  gpuc_graph_free(g);
  CHECK(rc == 0 && p, "compile %s: %s", model, e.msg);
  if (!p) return;
  snprintf(path, sizeof path, "%s/fuzz.gpuc", work);
  CHECK(gpuc_plan_write(p, path, &e) == 0, "write: %s", e.msg);
  gpuc_plan_free(p);
  size_t n;
  unsigned char *src = slurp(path, &n);
  CHECK(src && n > sizeof(PlanHeader), "read back %s", path);
  if (!src || n <= sizeof(PlanHeader)) { free(src); return; }
  snprintf(path, sizeof path, "%s/mutant.gpuc", work);
  int accepted = 0, refused = 0, silent = 0;
  for (int i = 0; i < iters; i++) {
    size_t m;
    unsigned char *b = mutate(src, n, &m);
    if (m >= sizeof(PlanHeader) && next() % 8) { /* re-seal most mutants */
      PlanHeader h;
      memcpy(&h, b, sizeof h);
      h.checksum = 0;
      memcpy(b, &h, sizeof h);
      h.checksum = gpuc_fnv1a64(b, m, GPUC_FNV_INIT);
      memcpy(b, &h, sizeof h);
    }
    spit(path, b, m);
    free(b);
    GpucErr pe = {0};
    Plan *q = gpuc_plan_read(path, &pe);
    if (q) { accepted++; gpuc_plan_free(q); }
    else { refused++; silent += pe.msg[0] == 0; }
  }
  free(src);
  printf("plan: %d mutants, %d accepted, %d refused\n", iters, accepted, refused);
  CHECK(silent == 0, "plan: %d refusals without a message", silent);
  CHECK(refused > iters / 2, "plan: only %d of %d mutants refused", refused, iters);
}

static void fuzz_checkpoint(const char *models, const char *work, int iters) {
  char model[4096], dir[4096], path[4200];
  snprintf(model, sizeof model, "%s/mlp.onnx", models);
  GpucErr e = {0};
  Trainer *t = gpuc_trainer_new(model, 4, &e);
  CHECK(t != NULL, "trainer for %s: %s", model, e.msg);
  if (!t) return;
  const TrainState base = {.opt = GPUC_OPT_SGD, .epoch = 1, .step = 10, .rng = 5, .batch = 4, .accum = 1,
                           .ntrain = 100};
  snprintf(dir, sizeof dir, "%s/ckpt", work);
  CHECK(gpuc_checkpoint_save(dir, t, &base, &e) == 0, "save: %s", e.msg);
  snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
  size_t n;
  unsigned char *src = slurp(path, &n);
  CHECK(src && n > 8, "read back %s", path);
  if (!src || n <= 8) { free(src); gpuc_trainer_free(t); return; }
  int accepted = 0, refused = 0, silent = 0;
  for (int i = 0; i < iters; i++) {
    size_t m;
    unsigned char *b = mutate(src, n, &m);
    if (m > 8 && next() % 8) { /* re-seal most mutants */
      uint64_t h = gpuc_fnv1a64(b, m - 8, GPUC_CKPT_FNV_BASIS);
      memcpy(b + m - 8, &h, 8);
    }
    spit(path, b, m);
    free(b);
    TrainState s = base;
    GpucErr le = {0};
    if (gpuc_checkpoint_load(dir, t, &s, &le) == 0) accepted++;
    else { refused++; silent += le.msg[0] == 0; }
  }
  free(src);
  gpuc_trainer_free(t);
  printf("checkpoint: %d mutants, %d accepted, %d refused\n", iters, accepted, refused);
  CHECK(silent == 0, "checkpoint: %d refusals without a message", silent);
  CHECK(refused > iters / 2, "checkpoint: only %d of %d mutants refused", refused, iters);
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: test_fuzz MODELS_DIR WORKDIR [ITERATIONS]\n"); return 2; }
  int iters = argc > 3 ? atoi(argv[3]) : 400;
  if (iters < 1) iters = 1;
  static const struct { const char *file; GpucShapeBind bind; bool bound; } models[] = {
      {"mlp.onnx", {.name = "image", .rank = 2, .dims = {4, 784}}, true},
      {"small_cnn.onnx", {0}, false},
      {"ffn_block.onnx", {.name = "x", .rank = 3, .dims = {2, 16, 64}}, true},
      {"shape_chain.onnx", {.name = "x", .rank = 4, .dims = {2, 3, 4, 5}}, true},
      {"mobile_block.onnx", {0}, false}};
  char path[4096];
  for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
    snprintf(path, sizeof path, "%s/%s", argv[1], models[k].file);
    fuzz_model(path, models[k].bound ? &models[k].bind : NULL, argv[2], iters);
  }
  fuzz_plan(argv[1], argv[2], iters * 4);
  fuzz_checkpoint(argv[1], argv[2], iters * 2);
  return check_summary();
}
