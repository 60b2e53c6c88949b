/* gpuc bench PLAN [--iters N] [--warmup N] [--profile] [--shape NAME=DIMS]... [--each-bucket]
 * (--each-bucket: a bucket plan's buckets one after another, each at its
 * own shape, one line each)
 * (--shape: a bucket plan's inputs at that shape, in its ranges; the run
 * uses the smallest bucket holding it, padded)
 * Median and p90 latency of whole-plan CUDA-graph replays timed with CUDA
 * events, throughput in items/s for the plan's batch, device memory. Inputs
 * are seeded random values. --profile adds a per-step table: time, share,
 * bytes and FLOPs (from the plan), achieved GB/s and TFLOP/s and their
 * fractions of the GPU's peaks (runtime/gpu/profile.c). */
#include "cli.h"
#include "profile.h"
#include "session.h"
#include "buckets.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seeded random inputs at the shapes the binds give (plan_input_dims);
 * *batch: the leading dim of the first. */
static int set_random_inputs(GpucSession *s, const Plan *p, const GpucShapeBind *binds, int nbinds, int64_t *batch,
                             GpucErr *e) {
  uint64_t seed = 7;
  *batch = -1;
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_INPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    int64_t dims[GPUC_MAX_RANK];
    Tensor *h = plan_input_dims(p, gpuc_plan_str(p, t->name), binds, nbinds, dims, e) ? NULL
              : gpuc_tensor_new(t->dt, t->rank, dims, e);
    if (!h) return -1;
    for (int64_t k = 0; k < gpuc_numel(h); k++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(seed >> 11) / 9007199254740992.0;
      if (gpuc_dtype_is_float(h->dt)) gpuc_set_f64(h, k, u * 2 - 1);
      else gpuc_set_i64(h, k, (int64_t)(u * 2));
    }
    if (*batch < 0) *batch = h->rank ? h->dims[0] : 1;
    int rc = gpuc_session_set_input(s, gpuc_plan_str(p, t->name), h, e);
    gpuc_tensor_free(h);
    if (rc) return -1;
  }
  return 0;
}

/* --each-bucket: every bucket of a bucket plan at its own shape, one line each. */
static int bench_each_bucket(GpucSession *s, const Plan *p, int warmup, int iters, GpucErr *e) {
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    GpucShapeBind binds[64];
    int n = 0;
    for (uint32_t t = 0; t < p->ntensors && n < 64; t++) {
      const PlanTensor *pt = &p->tensors[t];
      if (pt->role != PLAN_ROLE_INPUT && pt->role != PLAN_ROLE_INPUT_OUTPUT) continue;
      binds[n].name = gpuc_plan_str(p, pt->name);
      binds[n].rank = gpuc_bucket_io_dims(p, binds[n].name, false, p->buckets[i].size, binds[n].dims);
      n++;
    }
    int64_t batch;
    GpucBench b;
    if (set_random_inputs(s, p, binds, n, &batch, e) || gpuc_session_bench(s, warmup, iters, &b, NULL, e)) return -1;
    printf("bucket %2u", i);
    for (uint32_t a = 0; a < p->naxes; a++)
      printf(" %s=%lld", gpuc_plan_str(p, p->axes[a].name), (long long)p->buckets[i].size[a]);
    printf(": median %.4f ms, p90 %.4f ms, min %.4f ms (%.1f items/s at batch %lld)\n", b.median_ms, b.p90_ms,
           b.min_ms, (double)batch / (b.median_ms * 1e-3), (long long)batch);
    fflush(stdout);
  }
  return 0;
}

int cmd_bench(int argc, char **argv) {
  const char *plan = NULL;
  int iters = 100, warmup = 10;
  bool profile = false, each = false;
  GpucShapeBind binds[64];
  int nbinds = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--shape")) { /* a bucket plan: any shape in its ranges */
      if (i + 1 >= argc) return usage_error("--shape needs NAME=DIMS");
      if (nbinds == 64) return usage_error("too many --shape flags");
      if (parse_shape_arg(argv[++i], &binds[nbinds++])) return EXIT_USAGE;
    } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--profile")) profile = true;
    else if (!strcmp(argv[i], "--each-bucket")) each = true;
    else if (argv[i][0] == '-') return usage_error("bench: unknown flag '%s'", argv[i]);
    else if (!plan) plan = argv[i];
    else return usage_error("bench: more than one plan given");
  }
  if (!plan) return usage_error("bench: no plan given");
  if (iters < 1 || iters > 100000 || warmup < 0 || warmup > 100000)
    return usage_error("bench: --iters 1..100000, --warmup 0..100000");
  GpucErr e = {0};
  GpucSession *s = gpuc_session_create(plan, 0, &e);
  if (!s) return report(&e);
  const Plan *p = gpuc_session_plan(s);
  if (each) {
    if (!p->nbuckets) { gpuc_session_free(s); return usage_error("bench: --each-bucket wants a bucket plan (a --shape range)"); }
    int rc = bench_each_bucket(s, p, warmup, iters, &e);
    gpuc_session_free(s);
    return rc ? report(&e) : EXIT_OK;
  }
  int64_t batch = -1; /* a bucket plan: the leading dim of the first input, as given */
  if (set_random_inputs(s, p, binds, nbinds, &batch, &e)) { gpuc_session_free(s); return report(&e); }
  GpucBench b;
  uint32_t maxsteps = p->nsteps; /* a bucket plan's buckets may differ */
  for (uint32_t i = 0; i < p->nbuckets; i++)
    if (gpuc_plan_bucket(p, i)->nsteps > maxsteps) maxsteps = gpuc_plan_bucket(p, i)->nsteps;
  double *prof = profile ? calloc(maxsteps + 1, sizeof *prof) : NULL;
  if (gpuc_session_bench(s, warmup, iters, &b, prof, &e)) { free(prof); gpuc_session_free(s); return report(&e); }
  const Plan *container = p;
  p = gpuc_session_run_plan(s); /* the bucket the inputs' shape chose */
  char dev[128];
  int sm;
  gpuc_session_device(s, dev, sizeof dev, &sm);
  printf("plan: %s on %s (sm_%d)\n", plan, dev, sm);
  for (uint32_t i = 0; i < container->nbuckets; i++)
    if (gpuc_plan_bucket(container, i) == p) {
      printf("bucket %u of %u:", i, container->nbuckets);
      for (uint32_t a = 0; a < container->naxes; a++)
        printf(" %s=%lld", gpuc_plan_str(container, container->axes[a].name), (long long)container->buckets[i].size[a]);
      printf("\n");
    }
  printf("latency: median %.4f ms, p90 %.4f ms, min %.4f ms over %d replays (CUDA graph, CUDA events)\n",
         b.median_ms, b.p90_ms, b.min_ms, iters);
  if (!container->nbuckets || batch < 0) batch = p->meta.batch;
  printf("throughput: %.1f items/s at batch %lld\n", (double)batch / (b.median_ms * 1e-3), (long long)batch);
  /* the workspace may exceed the plan's: cuDNN's needs are known at load */
  uint64_t arena = gpuc_bucket_arena_bytes(container); /* a bucket plan's one arena: the largest bucket's */
  uint64_t ws = b.peak_device_bytes - arena - p->weights_size;
  printf("device memory: %llu bytes (arena %llu + workspace %llu + weights %llu)\n",
         (unsigned long long)b.peak_device_bytes, (unsigned long long)arena,
         (unsigned long long)ws, (unsigned long long)p->weights_size);
  if (b.gpu_used_bytes) /* what nvidia-smi would show for the GPU, this process included */
    printf("GPU memory in use: %llu bytes (all processes, context included)\n", (unsigned long long)b.gpu_used_bytes);
  if (prof) {
    double total = 0;
    for (uint32_t i = 0; i < p->nsteps; i++) total += prof[i];
    printf("profile (eager issue, events between steps; total %.4f ms):\n", total);
    GpucDeviceInfo d;
    GpucPeaks pk;
    gpuc_session_device_info(s, &d);
    gpuc_peaks_from_device(&d, &pk);
    gpuc_profile_print(stdout, p, prof, &pk, &d);
  }
  free(prof);
  gpuc_session_free(s);
  return EXIT_OK;
}
