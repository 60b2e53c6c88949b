/* Optimizer updates and learning-rate schedules for the host trainer. They
 * follow PyTorch's definitions (torch.optim.SGD, torch.optim.AdamW) so a
 * run can be compared with a PyTorch one; tests/unit/test_optim.c checks
 * them against values computed by hand. */
#include "train.h"
#include <math.h>

void gpuc_sgd_step(float *p, float *v, const float *g, int64_t n, float lr, float momentum, float wd) {
  for (int64_t j = 0; j < n; j++) {
    v[j] = momentum * v[j] + g[j] + wd * p[j];
    p[j] -= lr * v[j];
  }
}

void gpuc_adamw_step(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                     float b2, float eps, float wd, int64_t t) {
  /* the bias corrections in double: b2^t is 1 - 1e-3 t for small t, where
   * float would lose most digits of 1 - b2^t */
  double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
  float step = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2), decay = 1.0f - lr * wd;
  for (int64_t j = 0; j < n; j++) {
    p[j] *= decay; /* decoupled weight decay, before the moment update */
    m[j] = b1 * m[j] + (1.0f - b1) * g[j];
    v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
    p[j] -= step * m[j] / (sqrtf(v[j]) / bc2_sqrt + eps);
  }
}

double gpuc_lr_at(GpucSchedule sched, double lr, int64_t s, int64_t total, int64_t spe, int64_t warmup,
                  int step_size) {
  if (s < warmup) return lr * (double)(s + 1) / (double)warmup;
  switch (sched) {
  case GPUC_SCHED_CONSTANT: return lr;
  case GPUC_SCHED_STEP: {
    int64_t epoch = spe > 0 ? s / spe : 0;
    return lr * pow(0.1, (double)(epoch / (step_size > 0 ? step_size : 1)));
  }
  case GPUC_SCHED_COSINE: {
    int64_t span = total - warmup;
    if (span <= 0) return lr;
    return lr * 0.5 * (1.0 + cos(M_PI * (double)(s - warmup) / (double)span));
  }
  }
  return lr;
}
