/* The host optimizers and schedules against values worked out by hand
 * (SGD, schedules) or by the formulas of torch.optim.AdamW evaluated in
 * double precision (AdamW, two steps). */
#include "check.h"
#include "train.h"
#include "train_gpu_src.h"
#include "codegen.h"
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdio.h>

static void near(const char *what, double got, double want, double tol) {
  CHECK(fabs(got - want) <= tol * fmax(1.0, fabs(want)), "%s: got %.9g, want %.9g", what, got, want);
}

static void test_sgd(void) {
  float p[2] = {1, -2}, v[2] = {0.5f, 0}, g[2] = {0.1f, 0.2f};
  /* v = 0.9 v + g + 0.01 p; p -= 0.1 v */
  gpuc_sgd_step(p, v, g, 2, 0.1f, 0.9f, 0.01f);
  near("sgd v0", v[0], 0.56, 1e-6);
  near("sgd v1", v[1], 0.18, 1e-6);
  near("sgd p0", p[0], 0.944, 1e-6);
  near("sgd p1", p[1], -2.018, 1e-6);
  /* no momentum, no decay: plain p -= lr g */
  float q[1] = {3}, w[1] = {7}, h[1] = {2};
  gpuc_sgd_step(q, w, h, 1, 0.5f, 0, 0);
  near("sgd plain", q[0], 2.0, 1e-7);
}

static void test_adamw(void) {
  float p[2] = {1, -2}, m[2] = {0, 0}, v[2] = {0, 0};
  float g1[2] = {0.1f, -0.3f}, g2[2] = {0.2f, 0.1f};
  /* step 1: decay p by 1 - lr wd = 0.999, then the bias-corrected step is lr
   * times the sign of g (m/sqrt(v) = +-1 after correction) */
  gpuc_adamw_step(p, m, v, g1, 2, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  near("adamw t1 m0", m[0], 0.01, 1e-6);
  near("adamw t1 v1", v[1], 9e-5, 1e-5);
  near("adamw t1 p0", p[0], 0.989000001, 1e-6);
  near("adamw t1 p1", p[1], -1.988, 1e-6);
  gpuc_adamw_step(p, m, v, g2, 2, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 2);
  near("adamw t2 m0", m[0], 0.029, 1e-6);
  near("adamw t2 m1", m[1], -0.017, 1e-6);
  near("adamw t2 v0", v[0], 4.999e-5, 1e-5);
  near("adamw t2 v1", v[1], 9.991e-5, 1e-5);
  near("adamw t2 p0", p[0], 0.978359181, 1e-6);
  near("adamw t2 p1", p[1], -1.98200981, 1e-6);
  /* no decay, zero gradient: the parameter stays */
  float q[1] = {5}, qm[1] = {0}, qv[1] = {0}, z[1] = {0};
  gpuc_adamw_step(q, qm, qv, z, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0, 1);
  near("adamw zero grad", q[0], 5.0, 0);
}

static void test_schedules(void) {
  /* cosine over 10 steps with 2 warmup steps */
  near("warmup s0", gpuc_lr_at(GPUC_SCHED_COSINE, 1, 0, 10, 5, 2, 30), 0.5, 1e-12);
  near("warmup s1", gpuc_lr_at(GPUC_SCHED_COSINE, 1, 1, 10, 5, 2, 30), 1.0, 1e-12);
  near("cosine s2", gpuc_lr_at(GPUC_SCHED_COSINE, 1, 2, 10, 5, 2, 30), 1.0, 1e-12);
  near("cosine s6", gpuc_lr_at(GPUC_SCHED_COSINE, 1, 6, 10, 5, 2, 30), 0.5, 1e-12);
  near("cosine s9", gpuc_lr_at(GPUC_SCHED_COSINE, 1, 9, 10, 5, 2, 30), 0.5 * (1 + cos(M_PI * 7 / 8)), 1e-12);
  /* step: x0.1 every 2 epochs of 5 steps */
  near("step s9", gpuc_lr_at(GPUC_SCHED_STEP, 2, 9, 100, 5, 0, 2), 2.0, 1e-12);
  near("step s10", gpuc_lr_at(GPUC_SCHED_STEP, 2, 10, 100, 5, 0, 2), 0.2, 1e-12);
  near("step s25", gpuc_lr_at(GPUC_SCHED_STEP, 2, 25, 100, 5, 0, 2), 0.02, 1e-12);
  near("constant warmup", gpuc_lr_at(GPUC_SCHED_CONSTANT, 0.4, 1, 100, 5, 4, 30), 0.2, 1e-12);
  near("constant", gpuc_lr_at(GPUC_SCHED_CONSTANT, 0.4, 50, 100, 5, 4, 30), 0.4, 1e-12);
}

/* The GPU trainer's kernels compile for every target, with fp16 and with
 * bf16 half copies (--amp bf16) (running them needs a GPU:
 * tests/gpu/train_gpu.sh); each entry point is in the PTX; the bf16
 * variant rounds to bf16 (cvt.rn.bf16.f32) where the other does f16. */
static void test_gpu_kernels_compile(void) {
  const int sms[] = {80, 89, 90, 120};
  const char *entries[] = {"gpuc_grad_acc", "gpuc_grad_check", "gpuc_sgd", "gpuc_adamw",
                           "gpuc_scale_update", "gpuc_loss_acc", "gpuc_seed"};
  for (size_t k = 0; k < 2 * sizeof sms / sizeof *sms; k++) {
    GpucErr e = {0};
    char *ptx = NULL;
    size_t n = 0;
    bool bf16 = k % 2;
    int rc = gpuc_nvrtc_compile(gpuc_optim_kernels_src(bf16), sms[k / 2], false, &ptx, &n, NULL, NULL, &e);
    if (rc && strstr(e.msg, "not found")) { printf("skip: NVRTC not installed (%s)\n", e.msg); return; }
    char what[64];
    snprintf(what, sizeof what, "optimizer kernels (%s) compile for sm_%d", bf16 ? "bf16" : "fp16", sms[k / 2]);
    CHECK(rc == 0 && ptx && n > 0, "%s: %s", what, e.msg);
    if (ptx) CHECK(strstr(ptx, bf16 ? "cvt.rn.bf16.f32" : "cvt.rn.f16.f32") != NULL, "%s: no rounding to half", what);
    for (size_t i = 0; ptx && i < sizeof entries / sizeof *entries; i++) {
      char entry[96];
      snprintf(entry, sizeof entry, ".entry %s(", entries[i]);
      CHECK(strstr(ptx, entry) != NULL, "sm_%d PTX has %s", sms[k / 2], entries[i]);
    }
    free(ptx);
  }
  /* the host table entry matches the CUDA struct: 7 pointers (--prune's mask the last) + i64 */
  CHECK(sizeof(OptTensor) == 64, "OptTensor is %zu bytes", sizeof(OptTensor));
}

int main(void) {
  test_gpu_kernels_compile();
  test_sgd();
  test_adamw();
  test_schedules();
  return check_summary();
}
