/* --augment at batch assembly (train/augment.c): no augmentation copies;
 * flip mirrors each row or leaves the image; crop is the image shifted by
 * (dy, dx) in [-P, P]^2 with zeros shifted in; the draw depends only on
 * (seed, epoch, position), so it repeats exactly. */
#include "check.h"
#include "train_internal.h"
#include <string.h>

enum { C = 1, H = 28, W = 28, N = 64 };

/* Is out the image in shifted by (dy, dx) (and mirrored first if flip)? */
static bool shifted(const float *in, const float *out, int dy, int dx, bool flip) {
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        int sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
        float want = sy >= 0 && sy < H && sx >= 0 && sx < W ? in[(c * H + sy) * W + sx] : 0.0f;
        if (out[(c * H + y) * W + x] != want) return false;
      }
  return true;
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_augment MODELS_DIR\n"); return 2; }
  char path[4096];
  snprintf(path, sizeof path, "%s/small_cnn.onnx", argv[1]);
  GpucErr e = {0};
  Trainer *t = gpuc_trainer_new(path, 8, &e);
  CHECK(t != NULL, "trainer: %s", e.msg);
  if (!t) return check_summary();
  static float x[N * C * H * W], out[C * H * W], again[C * H * W];
  static int64_t y[N];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f + 0.001f; /* no zeros */
  Dataset d = {.n = N, .dim = C * H * W, .x = x, .y = y};
  TrainOptions o = {.seed = 5};
  gpuc_batch_image(t, &d, &o, 3, 1, 0, out);
  CHECK(!memcmp(out, x + 3 * C * H * W, sizeof out), "no --augment: not a plain copy");
  /* flip: each image as it is or mirrored, both seen */
  o.augment = GPUC_AUG_FLIP;
  int same = 0, mirrored = 0, other = 0;
  for (int p = 0; p < N; p++) {
    const float *in = x + p * C * H * W;
    gpuc_batch_image(t, &d, &o, p, 2, p, out);
    if (shifted(in, out, 0, 0, false)) same++;
    else if (shifted(in, out, 0, 0, true)) mirrored++;
    else other++;
  }
  CHECK(other == 0 && same >= 10 && mirrored >= 10, "flip: %d kept, %d mirrored, %d other", same, mirrored, other);
  /* crop with padding 2: a shift in [-2, 2]^2, several distinct ones */
  o.augment = GPUC_AUG_CROP;
  o.crop_pad = 2;
  bool seen[5][5] = {{false}};
  int distinct = 0, bad = 0;
  for (int p = 0; p < N; p++) {
    const float *in = x + p * C * H * W;
    gpuc_batch_image(t, &d, &o, p, 3, p, out);
    bool found = false;
    for (int dy = -2; dy <= 2 && !found; dy++)
      for (int dx = -2; dx <= 2 && !found; dx++)
        if (shifted(in, out, dy, dx, false)) {
          found = true;
          if (!seen[dy + 2][dx + 2]) { seen[dy + 2][dx + 2] = true; distinct++; }
        }
    bad += !found;
  }
  CHECK(bad == 0 && distinct >= 8, "crop: %d images not a shift, %d distinct shifts", bad, distinct);
  /* the same (seed, epoch, position) draws the same; another epoch differs somewhere */
  o.augment = GPUC_AUG_CROP | GPUC_AUG_FLIP;
  int differ = 0;
  for (int p = 0; p < N; p++) {
    gpuc_batch_image(t, &d, &o, p, 4, p, out);
    gpuc_batch_image(t, &d, &o, p, 4, p, again);
    CHECK(!memcmp(out, again, sizeof out), "position %d: the draw does not repeat", p);
    gpuc_batch_image(t, &d, &o, p, 5, p, again);
    differ += memcmp(out, again, sizeof out) != 0;
  }
  CHECK(differ >= N / 2, "epochs 4 and 5 drew the same for %d of %d images", N - differ, N);
  gpuc_trainer_free(t);
  return check_summary();
}
