/* Image augmentation at batch assembly (--augment flip,crop), shared by
 * the CPU loop and the GPU executor. The choice for an image depends only
 * on (seed, epoch, position in the epoch), so a resumed run draws the same
 * augmentations with no extra checkpoint state. Images are [C, H, W]. */
#include "train_internal.h"
#include <string.h>

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void gpuc_batch_image(const Trainer *t, const Dataset *d, const TrainOptions *o, int64_t k, int64_t epoch,
                      int64_t pos, float *dst) {
  const float *src = d->x + k * t->dim;
  if (!o->augment) { memcpy(dst, src, sizeof(float) * (size_t)t->dim); return; }
  int64_t C = t->in_dims[1], H = t->in_dims[2], W = t->in_dims[3];
  uint64_t r = mix(o->seed ^ mix((uint64_t)epoch * 0x9E3779B97F4A7C15ull + (uint64_t)pos + 1));
  bool flip = (o->augment & GPUC_AUG_FLIP) && (r & 1);
  int64_t p = o->augment & GPUC_AUG_CROP ? o->crop_pad : 0;
  /* a window of H x W from the image zero-padded by p on each side */
  int64_t dy = p ? (int64_t)((r >> 8) % (uint64_t)(2 * p + 1)) - p : 0;
  int64_t dx = p ? (int64_t)((r >> 24) % (uint64_t)(2 * p + 1)) - p : 0;
  for (int64_t c = 0; c < C; c++)
    for (int64_t y = 0; y < H; y++) {
      float *row = dst + (c * H + y) * W;
      int64_t sy = y + dy;
      for (int64_t x = 0; x < W; x++) {
        int64_t sx = (flip ? W - 1 - x : x) + dx;
        row[x] = sy >= 0 && sy < H && sx >= 0 && sx < W ? src[(c * H + sy) * W + sx] : 0.0f;
      }
    }
}
