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
} Dataset;

/* IDX files (MNIST format), gzip'ed or not; untrusted: magic, rank, dims
 * and sizes are checked against the decompressed length. */
int gpuc_idx_read(const char *path, int want_rank, int64_t dims[3], uint8_t **data, GpucErr *e);
/* DIR/{train,t10k}-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz */
int gpuc_dataset_fashion_mnist(const char *dir, bool train, Dataset *d, GpucErr *e);
void gpuc_dataset_free(Dataset *d);

typedef struct TrainOptions {
  int epochs;
  int64_t batch;
  double lr, momentum, weight_decay;
  uint64_t seed;
  int log_every;                /* steps between progress lines */
  FILE *log;                    /* progress and accuracy lines; NULL: quiet */
} TrainOptions;

typedef struct TrainResult {
  double last_loss, test_accuracy, seconds;
  int64_t steps;
} TrainResult;

/* A model prepared for training: the loss (SoftmaxCrossEntropyLoss over the
 * model's single float output, labels as a new int64 input), the backward
 * graph, and the parameters it updates. */
typedef struct Trainer Trainer;
Trainer *gpuc_trainer_new(const char *model_path, int64_t batch, GpucErr *e);
void gpuc_trainer_free(Trainer *t);
int gpuc_trainer_fit(Trainer *t, const Dataset *train, const Dataset *test, const TrainOptions *o,
                     TrainResult *r, GpucErr *e);
/* Accuracy (argmax of the model's output) on d with the current weights. */
int gpuc_trainer_evaluate(Trainer *t, const Dataset *d, double *accuracy, GpucErr *e);
/* The trained parameters: count, then name/tensor of the i-th. */
int gpuc_trainer_nparams(const Trainer *t);
const char *gpuc_trainer_param(const Trainer *t, int i, const Tensor **value);
#endif
