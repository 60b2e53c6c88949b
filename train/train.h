/* Training on the CPU reference (issue 5, first slice): data sets, the
 * training loop (forward + backward graph from passes/autodiff.c run by
 * gpuc_ref_run), SGD with momentum and weight decay on the host, and test
 * accuracy. */
#ifndef GPUC_TRAIN_H
#define GPUC_TRAIN_H
#include "ir.h"
#include <stdio.h>

/* A labelled image set, pixels normalized to [0, 1]. */
typedef struct Dataset {
  int64_t n, dim;               /* images, values per image */
  float *x;                     /* n * dim */
  int64_t *y;                   /* n labels */
  int rank;                     /* per-image shape when it must match the model's (npy); 0: any */
  int64_t shape[GPUC_MAX_RANK]; /*   with dim values in all */
} Dataset;

/* IDX files (MNIST format), gzip'ed or not; untrusted: magic, rank, dims
 * and sizes are checked against the decompressed length. */
int gpuc_idx_read(const char *path, int want_rank, int64_t dims[3], uint8_t **data, GpucErr *e);
/* DIR/{train,t10k}-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz */
int gpuc_dataset_fashion_mnist(const char *dir, bool train, Dataset *d, GpucErr *e);
void gpuc_dataset_free(Dataset *d);
/* DIR/data_batch_1..5.bin (train) or DIR/test_batch.bin: records of one
 * label byte + 3072 pixel bytes (CHW 3x32x32), pixels/255. */
int gpuc_dataset_cifar10(const char *dir, bool train, Dataset *d, GpucErr *e);
/* X: f32 [N, ...] (per-image shape kept in d->shape), Y: i64 or i32 [N]. */
int gpuc_dataset_npy(const char *xpath, const char *ypath, Dataset *d, GpucErr *e);
/* Keep the first n images (n < d->n). */
void gpuc_dataset_limit(Dataset *d, int64_t n);

/* Optimizers and learning-rate schedules (train/optim.c), pure functions
 * over one parameter tensor so they can be checked by hand. */
typedef enum { GPUC_OPT_SGD, GPUC_OPT_ADAMW } GpucOptimizer;
typedef enum { GPUC_SCHED_CONSTANT, GPUC_SCHED_STEP, GPUC_SCHED_COSINE } GpucSchedule;
/* SGD with momentum, PyTorch's form: v = m v + (g + wd p); p -= lr v */
void gpuc_sgd_step(float *p, float *v, const float *g, int64_t n, float lr, float momentum, float wd);
/* AdamW as torch.optim.AdamW: p *= 1 - lr wd; m = b1 m + (1-b1) g;
 * v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
 * t is the 1-based step count. */
void gpuc_adamw_step(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                     float b2, float eps, float wd, int64_t t);
/* The learning rate of 0-based optimizer step s of a run of total steps,
 * spe steps per epoch: linear warmup over the first warmup steps (s+1)/warmup,
 * then constant, x0.1 every step_size epochs, or cosine to 0 at the end. */
double gpuc_lr_at(GpucSchedule sched, double lr, int64_t s, int64_t total, int64_t spe, int64_t warmup,
                  int step_size);

typedef struct TrainOptions {
  int epochs;                   /* total, counting those a resumed checkpoint already did */
  int64_t batch;                /* images per micro-batch (the graph's batch) */
  int accum;                    /* micro-batches per optimizer step, gradients averaged */
  int64_t max_steps;            /* optimizer steps per epoch at most; 0: all */
  GpucOptimizer opt;
  double lr, momentum, weight_decay, beta1, beta2, eps;
  GpucSchedule sched;
  int64_t warmup;               /* steps */
  int step_size;                /* epochs, for GPUC_SCHED_STEP */
  uint64_t seed;
  int log_every;                /* steps between progress lines */
  FILE *log;                    /* progress and accuracy lines; NULL: quiet */
  const char *checkpoint_dir;   /* checkpoint.bin written after every epoch; NULL: none */
  const char *resume_dir;       /* checkpoint.bin loaded before training; NULL: fresh start */
  const char *const *freeze;    /* parameters whose names contain one of these are not updated */
  int nfreeze;
  int augment;                  /* GPUC_AUG_* bits: images [C,H,W] only */
  int crop_pad;                 /* GPUC_AUG_CROP: pixels of zero padding around the random crop */
  int prune_kind;               /* GPUC_PRUNE_* (passes.h): prune the Conv/Linear weights once, */
  double prune_fraction;        /*   (l1: this fraction of each) */
  int64_t prune_after;          /*   before optimizer step prune_after + 1 (0: at the start), then
                                     keep each pruned weight's zeros through every update */
} TrainOptions;
enum { GPUC_AUG_FLIP = 1, GPUC_AUG_CROP = 2 };

typedef struct TrainResult {
  double last_loss, test_accuracy, seconds;
  int64_t steps;                /* this run's */
  double loss_scale;            /* --amp at the end: the scale (0: no --amp) */
  int64_t amp_skipped;          /*   and the steps skipped since training began */
} TrainResult;

/* A model prepared for training: the loss (SoftmaxCrossEntropyLoss over the
 * model's single float output, labels as a new int64 input), the backward
 * graph, and the parameters it updates. */
typedef struct Trainer Trainer;
Trainer *gpuc_trainer_new(const char *model_path, int64_t batch, GpucErr *e);
void gpuc_trainer_free(Trainer *t);
/* Train on the GPU from here on (train/train_gpu.c): the training graph
 * compiled for sm_<sm> (0: the present GPU), with amp as half storage and
 * compute with fp32 master weights and a dynamic loss scale (with bf16:
 * bfloat16 storage, no loss scale). The device
 * bytes a step needs (both plans, optimizer state for the optimizer and
 * accum given, masters, batches) are counted before anything is allocated:
 * above mem_limit (> 0) it returns GPUC_TRAIN_TOO_BIG with the account in
 * the message. Compile and count need no GPU; the rest does. */
typedef struct TrainGpuOptions {
  bool amp;
  bool bf16;                    /* with amp: bf16 half copies and no loss scale (--amp bf16) */
  int sm;
  int level;                    /* >= 2: elementwise fusion of the training graph */
  int64_t mem_limit;
  bool adamw;                   /* two state tensors per parameter, else one */
  int accum;
  bool prune;                   /* --prune: a mask per parameter (counted for every one) */
} TrainGpuOptions;
#define GPUC_TRAIN_TOO_BIG (-2)
int gpuc_trainer_use_gpu(Trainer *t, const TrainGpuOptions *o, FILE *log, GpucErr *e);
/* The training graph: inputs (images, labels, and with training-mode
 * Dropout the counter int64 [2] = (seed, micro-batch index) its masks
 * depend on); outputs loss, one gradient per parameter (in parameter
 * order), then the new BatchNormalization running statistics. The batch
 * is bound. */
const Graph *gpuc_trainer_graph(const Trainer *t);
int gpuc_trainer_fit(Trainer *t, const Dataset *train, const Dataset *test, const TrainOptions *o,
                     TrainResult *r, GpucErr *e);
/* Scoring a classifier's output, shared by the trainer's test accuracy and
 * gpuc eval: logits y [n, classes] (any float dtype) against labels (each
 * in [0, classes): the caller checks); adds the argmax hits to *correct
 * and, when loss_sum is not NULL, the summed softmax cross-entropy
 * (computed in double) to *loss_sum. */
void gpuc_score_logits(const Tensor *y, const int64_t *labels, int64_t n, int64_t classes, int64_t *correct,
                       double *loss_sum);
/* Accuracy (argmax of the model's output) on d with the current weights. */
int gpuc_trainer_evaluate(Trainer *t, const Dataset *d, double *accuracy, GpucErr *e);
/* The model's output [n, classes] on n images x (n * the per-image size)
 * in inference mode: current weights, BatchNormalization with the running
 * statistics. The caller frees *logits. */
int gpuc_trainer_logits(Trainer *t, const float *x, int64_t n, Tensor **logits, GpucErr *e);
/* Checkpoints (train/checkpoint.c): the training state at an epoch
 * boundary, written atomically to DIR/checkpoint.bin; loading checks every
 * field against the trainer (the file is untrusted). */
typedef struct TrainState {
  GpucOptimizer opt;
  int64_t epoch;                /* epochs completed */
  int64_t step;                 /* optimizer steps completed, --amp's skipped ones included (the
                                   schedule's position; AdamW's t is step - amp_skipped) */
  uint64_t rng;                 /* shuffle generator state */
  int64_t batch, accum, ntrain; /* the data order depends on them: must match on resume */
  /* --amp's dynamic loss scale: the scale (0: never trained with --amp),
   * the clean steps in a row since it last changed (it doubles when they
   * reach GPUC_AMP_GROWTH_STEPS) and the steps skipped for a non-finite
   * gradient (counted in step, not in AdamW's t) */
  float loss_scale;
  int64_t amp_clean, amp_skipped;
} TrainState;
#define GPUC_AMP_GROWTH_STEPS 2000
/* The scale stops doubling here, so a run whose gradients never overflow
 * (all zero, say) keeps a finite scale its checkpoints can carry. */
#define GPUC_AMP_MAX_SCALE 0x1p64f
/* The checksum is FNV-1a 64 with the standard offset basis (the plan
 * file's gpuc_fnv1a64, seeded differently). */
#define GPUC_CKPT_FNV_BASIS 0xcbf29ce484222325ull
int gpuc_checkpoint_save(const char *dir, Trainer *t, const TrainState *s, GpucErr *e);
int gpuc_checkpoint_load(const char *dir, Trainer *t, TrainState *s, GpucErr *e);
/* Optimizer state buffers of parameter i: SGD uses slot 0 (velocity),
 * AdamW slots 0 and 1 (first and second moments). */
float *gpuc_trainer_state(Trainer *t, int i, int slot);

/* The tensors the trainer owns: count, then name/tensor of the i-th. The
 * parameters come first, then the BatchNormalization running statistics
 * (updated by the forward pass in training mode, not by the optimizer;
 * their optimizer state stays zero). --save and checkpoints carry both. */
int gpuc_trainer_nparams(const Trainer *t);
const char *gpuc_trainer_param(const Trainer *t, int i, const Tensor **value);
#endif
