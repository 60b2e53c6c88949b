/* BatchNormalization in training (train/train.c) on the bundled
 * small_bn_cnn.onnx (Conv-BN-Relu-MaxPool, Conv-BN-Relu, GAP, Gemm; the
 * BN nodes exported in inference mode):
 *  (a) after one step of one batch, bn1's running statistics equal
 *      0.9 * initial + 0.1 * the batch statistics of conv1's output,
 *      computed here with a direct convolution in f64 (biased variance,
 *      as ONNX defines it); relative tolerance 1e-4;
 *  (b) 60 steps on four synthetic textures bring the loss below half
 *      the first step's;
 *  (c) evaluation uses the running statistics: the logits of one image do
 *      not depend on the batch it is in, equal those of the model file with
 *      the trained parameters and statistics copied in (run separately by
 *      gpuc_ref_run), and change when a running mean changes.
 * usage: test_train_bn MODELS_DIR. Prints failures, then "N passed, N failed". */
#include "train.h"
#include "frontend.h"
#include "ref.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"


enum { HW = 28, PIX = HW * HW, C1 = 8 };
static uint64_t rng = 7;
static float rnd01(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(rng >> 40) / (float)(1 << 24);
}

/* Four textures a 3x3 Conv tells apart after global pooling (classes 0..3
 * of the model's 10): horizontal stripes, vertical stripes, a checkerboard,
 * flat; each + uniform noise. */
static void make_set(Dataset *d, int64_t n) {
  memset(d, 0, sizeof *d);
  d->n = n;
  d->dim = PIX;
  d->x = malloc(sizeof(float) * (size_t)(n * PIX));
  d->y = malloc(sizeof(int64_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    int64_t k = i % 4;
    d->y[i] = k;
    for (int p = 0; p < PIX; p++) {
      int r = p / HW, c = p % HW;
      int on = k == 0 ? r & 1 : k == 1 ? c & 1 : k == 2 ? (r + c) & 1 : 0;
      d->x[i * PIX + p] = 0.6f * (float)on + 0.4f * rnd01();
    }
  }
}

static const Tensor *param(Trainer *t, const char *name) {
  for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
    const Tensor *v;
    if (!strcmp(gpuc_trainer_param(t, i, &v), name)) return v;
  }
  fprintf(stderr, "no tensor '%s' in the trainer\n", name);
  exit(1);
}

static TrainOptions options(int64_t batch, int64_t max_steps, int epochs) {
  TrainOptions o = {.epochs = epochs, .batch = batch, .accum = 1, .max_steps = max_steps,
                    .opt = GPUC_OPT_SGD, .lr = 0.05, .momentum = 0.9, .sched = GPUC_SCHED_CONSTANT,
                    .step_size = 30, .seed = 1, .log_every = 1000};
  return o;
}

/* (a) conv1 (3x3, pad 1, no bias) of all images in f64, per-channel mean and
 * biased variance over N*H*W. */
static void conv1_stats(const Dataset *d, const float *w, double *mean, double *var) {
  double *y = malloc(sizeof(double) * (size_t)(d->n * C1 * PIX));
  for (int64_t n = 0; n < d->n; n++)
    for (int m = 0; m < C1; m++)
      for (int r = 0; r < HW; r++)
        for (int c = 0; c < HW; c++) {
          double acc = 0;
          for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
              int rr = r + i - 1, cc = c + j - 1;
              if (rr >= 0 && rr < HW && cc >= 0 && cc < HW)
                acc += (double)w[m * 9 + i * 3 + j] * d->x[n * PIX + rr * HW + cc];
            }
          y[(n * C1 + m) * PIX + r * HW + c] = acc;
        }
  for (int m = 0; m < C1; m++) {
    double s = 0, ss = 0, cnt = (double)d->n * PIX;
    for (int64_t n = 0; n < d->n; n++)
      for (int p = 0; p < PIX; p++) s += y[(n * C1 + m) * PIX + p];
    mean[m] = s / cnt;
    for (int64_t n = 0; n < d->n; n++)
      for (int p = 0; p < PIX; p++) {
        double dv = y[(n * C1 + m) * PIX + p] - mean[m];
        ss += dv * dv;
      }
    var[m] = ss / cnt;
  }
  free(y);
}

static void test_running_stats(const char *model) {
  GpucErr e = {0};
  const int64_t B = 16;
  Trainer *t = gpuc_trainer_new(model, B, &e);
  if (!t) { CHECK(false, "trainer: %s", e.msg); return; }
  Dataset d;
  make_set(&d, B); /* one batch: the step sees every image, in some order */
  float w[C1 * 9], m0[C1], v0[C1];
  memcpy(w, param(t, "conv1.weight")->data, sizeof w);
  memcpy(m0, param(t, "bn1.running_mean")->data, sizeof m0);
  memcpy(v0, param(t, "bn1.running_var")->data, sizeof v0);
  double bm[C1], bv[C1];
  conv1_stats(&d, w, bm, bv);
  TrainOptions o = options(B, 1, 1);
  TrainResult r;
  CHECK(!gpuc_trainer_fit(t, &d, NULL, &o, &r, &e) && r.steps == 1, "fit: %s", e.msg);
  const float *m1 = param(t, "bn1.running_mean")->data, *v1 = param(t, "bn1.running_var")->data;
  for (int c = 0; c < C1; c++) {
    double em = 0.9 * m0[c] + 0.1 * bm[c], ev = 0.9 * v0[c] + 0.1 * bv[c];
    CHECK(fabs(m1[c] - em) <= 1e-4 * (fabs(em) + 1e-3), "bn1 running_mean[%d] %.7g, expected %.7g", c, m1[c], em);
    CHECK(fabs(v1[c] - ev) <= 1e-4 * fabs(ev), "bn1 running_var[%d] %.7g, expected %.7g", c, v1[c], ev);
  }
  /* bn2's moved too (its input depends on the step's weights: not recomputed) */
  const Tensor *m2 = param(t, "bn2.running_mean");
  bool moved = false;
  Graph *file = gpuc_onnx_load(model, NULL, 0, &e);
  int fi = file ? gpuc_graph_find_value(file, "bn2.running_mean") : -1;
  if (fi >= 0)
    moved = memcmp(file->values[fi].t.data, m2->data, gpuc_tensor_bytes(m2)) != 0;
  CHECK(moved, "bn2.running_mean unchanged after a step");
  gpuc_graph_free(file);
  gpuc_dataset_free(&d);
  gpuc_trainer_free(t);
}

/* (b) and (c) on one trainer. */
static void test_loss_and_eval(const char *model) {
  GpucErr e = {0};
  const int64_t B = 20;
  Dataset d;
  make_set(&d, 200);
  TrainResult r1, r2;
  TrainOptions o1 = options(B, 1, 1), o2 = options(B, 0, 6);
  Trainer *t1 = gpuc_trainer_new(model, B, &e), *t = t1 ? gpuc_trainer_new(model, B, &e) : NULL;
  if (!t) { CHECK(false, "trainer: %s", e.msg); gpuc_trainer_free(t1); gpuc_dataset_free(&d); return; }
  CHECK(!gpuc_trainer_fit(t1, &d, NULL, &o1, &r1, &e), "fit 1 step: %s", e.msg);
  CHECK(!gpuc_trainer_fit(t, &d, NULL, &o2, &r2, &e) && r2.steps == 60, "fit 60 steps: %s", e.msg);
  CHECK(r2.last_loss < 0.5 * r1.last_loss, "loss %.4f after 60 steps, %.4f at the first",
        r2.last_loss, r1.last_loss);
  printf("loss: first step %.4f, step 60 %.4f\n", r1.last_loss, r2.last_loss);
  gpuc_trainer_free(t1);

  /* (c) image 0 alone and within the first 10: the same logits */
  Tensor *alone = NULL, *batch = NULL, *ref = NULL, *moved = NULL;
  CHECK(!gpuc_trainer_logits(t, d.x, 1, &alone, &e) && !gpuc_trainer_logits(t, d.x, 10, &batch, &e),
        "logits: %s", e.msg);
  Graph *file = gpuc_onnx_load(model, NULL, 0, &e);
  CHECK(file != NULL, "load: %s", e.msg);
  if (alone && batch && file) {
    const float *a = alone->data, *b = batch->data;
    for (int k = 0; k < 10; k++)
      CHECK(fabsf(a[k] - b[k]) <= 1e-5f * (1 + fabsf(b[k])), "logit %d alone %.7g, in a batch %.7g", k, a[k], b[k]);
    /* the file with the trainer's tensors copied in, in inference mode */
    for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
      const Tensor *v;
      const char *name = gpuc_trainer_param(t, i, &v);
      int fi = gpuc_graph_find_value(file, name);
      if (fi >= 0) memcpy(file->values[fi].t.data, v->data, gpuc_tensor_bytes(v));
      CHECK(fi >= 0, "'%s' not in the file", name);
    }
    Tensor x = {.dt = GPUC_DT_F32, .rank = 4, .dims = {1, 1, HW, HW}, .data = d.x};
    const Tensor *in[1] = {&x};
    Tensor *out[1] = {NULL};
    CHECK(!gpuc_ref_run(file, in, out, &e), "run: %s", e.msg);
    ref = out[0];
    for (int k = 0; ref && k < 10; k++)
      CHECK(fabsf(a[k] - ((float *)ref->data)[k]) <= 1e-5f * (1 + fabsf(a[k])),
            "logit %d: trainer %.7g, file + trained tensors %.7g", k, a[k], ((float *)ref->data)[k]);
    /* a running mean moved by 1: the logits follow */
    float *rm = (float *)param(t, "bn2.running_mean")->data;
    for (int c = 0; c < 16; c++) rm[c] += 1.0f;
    CHECK(!gpuc_trainer_logits(t, d.x, 1, &moved, &e), "logits: %s", e.msg);
    float diff = 0;
    for (int k = 0; moved && k < 10; k++) diff += fabsf(((float *)moved->data)[k] - a[k]);
    CHECK(diff > 1e-3f, "logits ignore bn2.running_mean (total change %g)", diff);
  }
  double acc;
  CHECK(!gpuc_trainer_evaluate(t, &d, &acc, &e), "evaluate: %s", e.msg);
  gpuc_tensor_free(alone); gpuc_tensor_free(batch); gpuc_tensor_free(ref); gpuc_tensor_free(moved);
  gpuc_graph_free(file);
  gpuc_dataset_free(&d);
  gpuc_trainer_free(t);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_train_bn MODELS_DIR\n"); return 2; }
  char model[4096];
  snprintf(model, sizeof model, "%s/small_bn_cnn.onnx", argv[1]);
  test_running_stats(model);
  test_loss_and_eval(model);
  printf("train_bn: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
