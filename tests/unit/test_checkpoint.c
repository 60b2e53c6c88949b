/* Checkpoints (train/checkpoint.c) through the writer and the reader, on
 * the bundled MLP:
 *  (a) round trip: every TrainState field, --amp's loss scale, clean-step
 *      run and skipped steps at their limits included, and the parameters
 *      and optimizer state, SGD and AdamW;
 *  (b) states the --amp update kernel cannot leave (a negative, NaN,
 *      infinite or below-1 scale, a clean run at the doubling interval,
 *      counts beyond the steps done, counts without a scale), written by
 *      the writer itself, are refused with a message naming the field, and
 *      the trainer and the state are left as they were;
 *  (c) a version-1 file (made here from a version-2 one: the two counters
 *      dropped, version, size and checksum rewritten) is read with both
 *      counters 0; other versions and a version-1 header cut short are
 *      refused.
 * usage: test_checkpoint MODELS_DIR WORK_DIR. Prints failures, then
 * "N passed, N failed". */
#include "train.h"
#include "plan.h" /* gpuc_fnv1a64 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include "check.h"

static char dir[4096], file[4200];

/* A fresh state of the run the trainer is loaded into. */
static TrainState run_state(GpucOptimizer opt) {
  return (TrainState){.opt = opt, .batch = 64, .accum = 1, .ntrain = 2048};
}

static bool same_state(const TrainState *a, const TrainState *b) {
  return a->opt == b->opt && a->epoch == b->epoch && a->step == b->step && a->rng == b->rng &&
         a->batch == b->batch && a->accum == b->accum && a->ntrain == b->ntrain &&
         a->loss_scale == b->loss_scale && a->amp_clean == b->amp_clean && a->amp_skipped == b->amp_skipped;
}

/* Every parameter and state value set from k, so a restore is visible. */
static void fill(Trainer *t, GpucOptimizer opt, float k) {
  for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
    const Tensor *v;
    gpuc_trainer_param(t, i, &v);
    int64_t n = gpuc_numel(v);
    for (int64_t j = 0; j < n; j++) {
      ((float *)v->data)[j] = k + 0.001f * (float)(j % 97);
      for (int s = 0; s < (opt == GPUC_OPT_ADAMW ? 2 : 1); s++)
        gpuc_trainer_state(t, i, s)[j] = k * (float)(s + 2) - 0.01f * (float)(j % 89);
    }
  }
}

static bool filled(Trainer *t, GpucOptimizer opt, float k) {
  for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
    const Tensor *v;
    gpuc_trainer_param(t, i, &v);
    for (int64_t j = 0; j < gpuc_numel(v); j++) {
      if (((float *)v->data)[j] != k + 0.001f * (float)(j % 97)) return false;
      for (int s = 0; s < (opt == GPUC_OPT_ADAMW ? 2 : 1); s++)
        if (gpuc_trainer_state(t, i, s)[j] != k * (float)(s + 2) - 0.01f * (float)(j % 89)) return false;
    }
  }
  return true;
}

static void test_round_trip(Trainer *t) {
  static const struct { float scale; int64_t step, clean, skipped; } amp[] = {
    {0, 0, 0, 0},                 /* a fresh fp32 run */
    {0, 32, 0, 0},
    {65536, 32, 31, 1},           /* every step counted */
    {1, 5000, GPUC_AMP_GROWTH_STEPS - 1, 3001},
    {GPUC_AMP_MAX_SCALE, 1ll << 40, 0, 1ll << 40},
  };
  for (int o = 0; o < 2; o++)
    for (size_t k = 0; k < sizeof amp / sizeof *amp; k++) {
      GpucErr e = {0};
      TrainState w = run_state((GpucOptimizer)o);
      w.epoch = 3;
      w.step = amp[k].step;
      w.rng = 0x9e3779b97f4a7c15ull * (k + 1);
      w.loss_scale = amp[k].scale;
      w.amp_clean = amp[k].clean;
      w.amp_skipped = amp[k].skipped;
      fill(t, (GpucOptimizer)o, 1.5f + (float)k);
      CHECK(!gpuc_checkpoint_save(dir, t, &w, &e), "save: %s", e.msg);
      fill(t, (GpucOptimizer)o, -7);
      TrainState r = run_state((GpucOptimizer)o);
      CHECK(!gpuc_checkpoint_load(dir, t, &r, &e), "load %s case %zu: %s", o ? "adamw" : "sgd", k, e.msg);
      CHECK(same_state(&w, &r), "%s case %zu: the state read back differs (scale %g clean %lld skipped %lld)",
            o ? "adamw" : "sgd", k, r.loss_scale, (long long)r.amp_clean, (long long)r.amp_skipped);
      CHECK(filled(t, (GpucOptimizer)o, 1.5f + (float)k), "%s case %zu: parameters or optimizer state differ",
            o ? "adamw" : "sgd", k);
    }
}

static void test_refused(Trainer *t) {
  static const struct { float scale; int64_t clean, skipped; const char *word; } bad[] = {
    {-1, 0, 0, "loss scale"},
    {NAN, 0, 0, "loss scale"},
    {INFINITY, 0, 0, "loss scale"},
    {0.5f, 0, 0, "loss scale"},
    {0x1p65f, 0, 0, "loss scale"},
    {65536, GPUC_AMP_GROWTH_STEPS, 0, "clean"},
    {65536, -1, 0, "clean"},
    {65536, 0, 33, "skipped"},      /* 32 steps done */
    {65536, 0, -1, "skipped"},
    {65536, 20, 13, "do not fit"},
    {0, 5, 0, "loss scale 0"},
    {0, 0, 1, "loss scale 0"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    GpucErr e = {0};
    TrainState w = run_state(GPUC_OPT_SGD);
    w.epoch = 1;
    w.step = 32;
    w.loss_scale = bad[k].scale;
    w.amp_clean = bad[k].clean;
    w.amp_skipped = bad[k].skipped;
    fill(t, GPUC_OPT_SGD, 2);
    CHECK(!gpuc_checkpoint_save(dir, t, &w, &e), "save: %s", e.msg);
    fill(t, GPUC_OPT_SGD, 3);
    TrainState r = run_state(GPUC_OPT_SGD), before = r;
    e = (GpucErr){0};
    int rc = gpuc_checkpoint_load(dir, t, &r, &e);
    CHECK(rc != 0 && strstr(e.msg, bad[k].word), "case %zu (scale %g clean %lld skipped %lld): rc %d, '%s'", k,
          bad[k].scale, (long long)bad[k].clean, (long long)bad[k].skipped, rc, e.msg);
    CHECK(same_state(&r, &before) && filled(t, GPUC_OPT_SGD, 3), "case %zu: a refused file changed the trainer", k);
  }
}

/* The checksum of b[0..n-8) into its last 8 bytes. */
static void reseal(unsigned char *b, size_t n) {
  uint64_t h = gpuc_fnv1a64(b, n - 8, GPUC_CKPT_FNV_BASIS);
  memcpy(b + n - 8, &h, 8);
}

static void put_u32(unsigned char *b, uint32_t v) { memcpy(b, &v, 4); }
static void put_u64(unsigned char *b, uint64_t v) { memcpy(b, &v, 8); }

static void test_versions(Trainer *t) {
  GpucErr e = {0};
  TrainState w = run_state(GPUC_OPT_ADAMW);
  w.epoch = 2;
  w.step = 64;
  w.rng = 12345;
  w.loss_scale = 4096;
  w.amp_clean = 17;
  w.amp_skipped = 5;
  fill(t, GPUC_OPT_ADAMW, 4);
  CHECK(!gpuc_checkpoint_save(dir, t, &w, &e), "save: %s", e.msg);
  size_t n;
  unsigned char *b = slurp(file, &n);
  if (!b || n < 200) { CHECK(false, "cannot read %s back", file); free(b); return; }
  /* version 1: the 80-byte header (up to the file size), then the records */
  memmove(b + 80, b + 96, n - 96);
  n -= 16;
  put_u32(b + 8, 1);
  put_u64(b + 72, n);
  reseal(b, n);
  spit(file, b, n);
  fill(t, GPUC_OPT_ADAMW, -1);
  TrainState r = run_state(GPUC_OPT_ADAMW), want = w;
  want.amp_clean = want.amp_skipped = 0;
  CHECK(!gpuc_checkpoint_load(dir, t, &r, &e), "version 1: %s", e.msg);
  CHECK(same_state(&r, &want), "version 1: scale %g clean %lld skipped %lld, want 4096 0 0", r.loss_scale,
        (long long)r.amp_clean, (long long)r.amp_skipped);
  CHECK(filled(t, GPUC_OPT_ADAMW, 4), "version 1: parameters or optimizer state differ");
  /* other versions, and a version-1 header not followed by a whole file */
  static const uint32_t other[] = {0, 3, 0xffffffffu};
  for (size_t k = 0; k < sizeof other / sizeof *other; k++) {
    put_u32(b + 8, other[k]);
    reseal(b, n);
    spit(file, b, n);
    char word[40];
    snprintf(word, sizeof word, "version %u,", other[k]);
    r = run_state(GPUC_OPT_ADAMW);
    CHECK(gpuc_checkpoint_load(dir, t, &r, &e) && strstr(e.msg, word), "version %u: '%s'", other[k], e.msg);
  }
  for (uint32_t v = 1; v <= 2; v++) { /* shorter than the header + checksum of that version */
    put_u32(b + 8, v);
    spit(file, b, v == 1 ? 85 : 100);
    CHECK(gpuc_checkpoint_load(dir, t, &r, &e) && strstr(e.msg, "truncated"), "version %u cut short: '%s'", v,
          e.msg);
  }
  free(b);
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: test_checkpoint MODELS_DIR WORK_DIR\n"); return 2; }
  char model[4096];
  snprintf(model, sizeof model, "%s/mlp.onnx", argv[1]);
  snprintf(dir, sizeof dir, "%s/ck", argv[2]);
  snprintf(file, sizeof file, "%s/checkpoint.bin", dir);
  mkdir(argv[2], 0777);
  GpucErr e = {0};
  Trainer *t = gpuc_trainer_new(model, 64, &e);
  if (!t) { printf("FAIL trainer: %s\n", e.msg); return 1; }
  test_round_trip(t);
  test_refused(t);
  test_versions(t);
  gpuc_trainer_free(t);
  return check_summary();
}
