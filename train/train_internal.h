/* The trainer's state, shared by the CPU loop (train.c) and the GPU
 * executor (train_gpu.c); nothing outside train/ includes this. */
#ifndef GPUC_TRAIN_INTERNAL_H
#define GPUC_TRAIN_INTERNAL_H
#include "train.h"

typedef struct TrainGpu TrainGpu;

struct Trainer {
  Graph *g;                     /* forward + loss + backward, batch bound */
  Graph *eval;                  /* forward only, batch symbolic */
  int64_t batch, dim, classes;
  int in_rank;
  int64_t in_dims[GPUC_MAX_RANK];  /* model input dims, batch excluded at [0] */
  int np;                       /* parameters (with a gradient) */
  int nbuf;                     /* BatchNormalization running statistics after them */
  int *param;                   /* value index in g of each of the np + nbuf tensors */
  int *eval_param;              /* the same tensor in eval */
  float **state[2];             /* optimizer state per parameter (gpuc_trainer_state) */
  float **gsum;                 /* gradient sums over the micro-batches of a step (--accum) */
  TrainGpu *gpu;                /* NULL: the CPU reference runs the steps */
  bool counter;                 /* training-mode Dropout: g's input 2 is the counter (train/dropout.c) */
  int64_t step;                 /* optimizer steps done before the running one */
  float **mask;                 /* --prune: per parameter 1/0 per element (0: pruned), NULL: not pruned */
  bool pruned;                  /* the masks are set */
};

/* ---- training-mode Dropout (train/dropout.c) ----
 * gpuc_dropout_train_mode: each training-mode Dropout of g becomes
 * DropoutTrain reading a new int64 [2] input appended to g's inputs; 1 when
 * it added one, 0 when there was none, -1 on a node it refuses (ratio or
 * training_mode not constant, ratio outside [0, 1)).
 * gpuc_dropout_eval_mode: training-mode Dropout of g becomes inference.
 * gpuc_dropout_counter: what the counter holds for micro-batch k of step
 * t->step: (--seed, t->step * accum + k). */
int gpuc_dropout_train_mode(Graph *g, GpucErr *e);
int gpuc_dropout_eval_mode(Graph *g, GpucErr *e);
void gpuc_dropout_counter(const Trainer *t, const TrainOptions *o, int k, int64_t counter[2]);

/* Image k of d into dst (t->dim values) for position pos of the epoch's
 * order, with the augmentations of o (train/augment.c). */
void gpuc_batch_image(const Trainer *t, const Dataset *d, const TrainOptions *o, int64_t k, int64_t epoch,
                      int64_t pos, float *dst);

/* ---- the GPU executor (train_gpu.c) ----
 * gpu_begin: the parameters, running statistics and optimizer state of the
 * host copies onto the device (at the start of a fit, after a resume), and
 * the step count and --amp loss-scale state of st (scale 0: the initial one).
 * gpu_step: one optimizer step over accum micro-batches (images
 * perm[mb0*B ...]) queued on the stream, no host wait.
 * gpu_loss: the mean loss of the micro-batches since the last call (waits),
 *   the loss scale and the steps skipped so far.
 * gpu_end_epoch: device state back into the host copies (before evaluation,
 * checkpoints and --save).
 * gpu_amp_state: with --amp, the device's loss scale, clean-step run and
 * skipped steps into st (waits; for checkpoints), else st unchanged.
 * gpu_logits: the eval plan on n images. */
int gpu_begin(Trainer *t, const TrainOptions *o, const TrainState *st, GpucErr *e);
int gpu_step(Trainer *t, const Dataset *d, const TrainOptions *o, const int64_t *perm, int64_t mb0,
             int64_t epoch, double lr, GpucErr *e);
int gpu_loss(Trainer *t, double *mean_loss, double *loss_scale, int64_t *skipped, GpucErr *e);
int gpu_end_epoch(Trainer *t, GpucErr *e);
int gpu_amp_state(Trainer *t, TrainState *st, GpucErr *e);
int gpu_logits(Trainer *t, const float *x, int64_t n, Tensor **logits, GpucErr *e);
/* --prune: the host parameters (just pruned) and t->mask onto the device;
 * from then on the optimizer kernels multiply each update by its mask. */
int gpu_set_masks(Trainer *t, GpucErr *e);
void gpu_free(TrainGpu *g);
#endif
