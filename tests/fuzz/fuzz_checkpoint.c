/* Training checkpoint bytes -> gpuc_checkpoint_load into a trainer of
 * tests/fuzz/tiny_mlp.onnx (versioned, checksummed: the trailing FNV-1a is
 * recomputed first so mutations reach the parser behind it). */
#include "fuzz_util.h"
#include "plan.h" /* gpuc_fnv1a64 */
#include "train.h"

static Trainer *trainer;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  GpucErr e = {0};
  if (!trainer) {
    char model[1024];
    snprintf(model, sizeof model, "%s/tiny_mlp.onnx", fuzz_models_dir());
    trainer = gpuc_trainer_new(model, 4, &e);
    if (!trainer) { fprintf(stderr, "fuzz_checkpoint: %s (set GPUC_FUZZ_MODELS)\n", e.msg); abort(); }
  }
  uint8_t *b = malloc(size + 1);
  if (!b) return 0;
  memcpy(b, data, size);
  if (size >= 8) { /* re-seal: FNV-1a 64 of everything before it */
    uint64_t h = gpuc_fnv1a64(b, size - 8, GPUC_CKPT_FNV_BASIS);
    memcpy(b + size - 8, &h, 8);
  }
  fuzz_file("checkpoint.bin", b, size);
  free(b);
  /* the run resuming: what the seed checkpoints were saved with (the
   * loader refuses a checkpoint of another batch, accumulation or data) */
  TrainState s = {.opt = size && (data[size / 2] & 1) ? GPUC_OPT_ADAMW : GPUC_OPT_SGD, .batch = 4, .accum = 1,
                  .ntrain = 100};
  if (gpuc_checkpoint_load(fuzz_dir(), trainer, &s, &e)) fuzz_refused(&e, "checkpoint load");
  return 0;
}
