/* -O3 autotuning: on the GPU the plan will run on, time the candidates of
 * each library call and keep the fastest in the plan.
 *   - forward convolutions: cuDNN's own timing of every forward algorithm
 *     (cudnnFindConvolutionForwardAlgorithm, fastest first); the first that
 *     succeeds within 1 GiB of scratch wins. Convolutions whose fused call
 *     admits one algorithm only (bias with an identity activation) and the
 *     training gradients keep the heuristic.
 *   - 2:4 GEMMs (PLAN_GEMM_F_SPARSE24): cuSPARSELt's search of its kernel
 *     configurations (kept in the plan), then sparse against dense
 *     (tune_sparse).
 *   - GEMMs: up to GPUC_GEMM_TUNE_MAX of cuBLASLt's heuristic results, each
 *     run 3 times then timed over 10 with CUDA events; the plan stores the
 *     index of the fastest (PlanGemm.algo_index).
 *   - generated kernels that codegen marked block-size free (PlanTune,
 *     cg_launch_items): blocks of 64..1024 threads (within the kernel's
 *     limit), each timed as the median of 5 runs of 10 launches; the
 *     compiled block stays unless another is 3% faster. The plan records
 *     the block and its grid (PLAN_TUNE_F_BLOCK_TUNED).
 *   - then the whole plan: its CUDA-graph replay time with the heuristics'
 *     choices, with the timed GEMM choices, then with the timed convolution
 *     choices, then with the timed blocks; each group is kept only if the
 *     plan got faster (a call timed alone, its weights hot in L2, can lose
 *     inside the plan).
 * Results are remembered in a text cache keyed by device name, cuDNN
 * version and the call's shape, so a recompile of the same model (or
 * another model with the same layers) skips the timing. The cache is
 * untrusted input: a line that does not parse, or a value out of range, is
 * ignored. Kernels are keyed by the hash of their source (name left out)
 * and item count, so the same kernel in another model shares the entry. */
#include "session_internal.h"
#include "sparse_gemm.h"
#include "tune_cache.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* "<device>|cudnn <version>|" then the call's shape. */
static int key_prefix(const GpucSession *s, char *buf, size_t n) {
  int k = snprintf(buf, n, "%s|cudnn %zu|", s->devname, cudnn.cudnnGetVersion ? cudnn.cudnnGetVersion() : (size_t)0);
  for (char *q = buf; *q; q++) if (*q == '\t' || *q == '\n') *q = ' ';
  return k;
}

static void dims_str(const PlanTensor *t, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int d = 0; d < t->rank && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "x" : "", (long long)t->dims[d]);
}

static void conv_key(const GpucSession *s, const PlanConv *c, char *buf, size_t n) {
  const Plan *p = s->plan;
  char x[128], w[128], y[128];
  dims_str(&p->tensors[c->x], x, sizeof x);
  dims_str(&p->tensors[c->w], w, sizeof w);
  dims_str(&p->tensors[c->y], y, sizeof y);
  int k = key_prefix(s, buf, n);
  snprintf(buf + k, n - (size_t)k, "conv dt%u act%u x%s w%s y%s g%u p%d,%d,%d s%d,%d,%d d%d,%d,%d b%d z%d", c->dt,
           c->act, x, w, y, c->groups, c->pads[0], c->pads[1], c->pads[2], c->strides[0], c->strides[1],
           c->strides[2], c->dilations[0], c->dilations[1], c->dilations[2], c->b != UINT32_MAX,
           c->z != UINT32_MAX);
}

static void gemm_key(const GpucSession *s, const PlanGemm *g, char *buf, size_t n) {
  int k = key_prefix(s, buf, n);
  snprintf(buf + k, n - (size_t)k, "gemm dt%u t%u%u m%lld n%lld k%lld b%lld ld%lld,%lld,%lld,%lld c%d e%d",
           g->dt, g->trans_a, g->trans_b, (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch,
           (long long)g->lda, (long long)g->ldb, (long long)g->ldc, (long long)g->ldy, g->c != UINT32_MAX,
           s->gemms[g - s->plan->gemms].bias_epilogue);
}

static int tune_conv(GpucSession *s, uint32_t i, Cache *cache, GpucTuneStats *ts, GpucErr *e) {
  PlanConv *c = &s->plan->convs[i];
  ConvState *st = &s->convs[i];
  if (c->mode != PLAN_CONV_FWD || (c->b != UINT32_MAX && GPUC_CONV_ACT(c->act) == 0)) return 0;
  char key[1024];
  conv_key(s, c, key, sizeof key);
  long algo = gpuc_tune_cache_get(cache, key, CUDNN_CONVOLUTION_FWD_ALGO_COUNT - 1);
  if (algo >= 0) ts->convs_cached++;
  else {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    CUDNN_TRY(e, cudnn.cudnnFindConvolutionForwardAlgorithm(s->dnn, st->x, st->w, st->conv, st->y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
    for (int k = 0; k < found && algo < 0; k++)
      if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= s->workspace_budget) algo = perf[k].algo;
    if (algo < 0) return 0; /* nothing better known: the heuristic stays */
    gpuc_tune_cache_put(cache, key, algo);
  }
  size_t need = 0;
  if (cudnn.cudnnGetConvolutionForwardWorkspaceSize(s->dnn, st->x, st->w, st->conv, st->y,
                                                    (cudnnConvolutionFwdAlgo_t)algo, &need) != CUDNN_STATUS_SUCCESS)
    return 0;
  if (need > s->workspace_budget) return 0; /* a cached choice from a larger budget */
  c->algo = (int32_t)algo;
  c->workspace = need;
  if (need > s->plan->meta.workspace_bytes) s->plan->meta.workspace_bytes = need;
  st->algo = (cudnnConvolutionFwdAlgo_t)algo;
  ts->convs++;
  return 0;
}

static int time_gemm(GpucSession *s, uint32_t i, const cublasLtMatmulAlgo_t *algo, CUevent ev[2], float *ms,
                     GpucErr *e) {
  for (int r = 0; r < 3; r++)
    if (gpuc_gemm_run(s, i, algo, e)) return -1;
  CU_TRY(e, cu.cuEventRecord(ev[0], s->stream));
  for (int r = 0; r < 10; r++)
    if (gpuc_gemm_run(s, i, algo, e)) return -1;
  CU_TRY(e, cu.cuEventRecord(ev[1], s->stream));
  CU_TRY(e, cu.cuEventSynchronize(ev[1]));
  CU_TRY(e, cu.cuEventElapsedTime(ms, ev[0], ev[1]));
  return 0;
}

static int tune_gemm(GpucSession *s, uint32_t i, Cache *cache, CUevent ev[2], GpucTuneStats *ts, GpucErr *e) {
  PlanGemm *g = &s->plan->gemms[i];
  if (s->gemms[i].sparse) return 0; /* cuSPARSELt runs it: cuBLASLt's candidates do not apply */
  char key[1024];
  gemm_key(s, g, key, sizeof key);
  cublasLtMatmulHeuristicResult_t res[GPUC_GEMM_TUNE_MAX];
  int found = 0;
  if (gpuc_gemm_heuristics(s, &s->gemms[i], res, GPUC_GEMM_TUNE_MAX, &found, e)) return -1;
  if (found < 2) return 0;
  long best = gpuc_tune_cache_get(cache, key, found - 1);
  if (best >= 0) ts->gemms_cached++;
  else {
    float best_ms = 0;
    for (int k = 0; k < found; k++) {
      float ms;
      if (res[k].state != CUBLAS_STATUS_SUCCESS) continue;
      /* a candidate the library refuses at run time is skipped, not fatal */
      GpucErr ignore = {0};
      if (time_gemm(s, i, &res[k].algo, ev, &ms, &ignore)) continue;
      if (best < 0 || ms < best_ms) { best = k; best_ms = ms; }
    }
    if (best < 0) return 0;
    gpuc_tune_cache_put(cache, key, best);
  }
  g->algo_index = (uint32_t)best;
  s->gemms[i].algo = res[best].algo;
  ts->gemms++;
  return 0;
}

/* ---- 2:4 GEMMs: sparse tensor cores or dense ---- */
/* cuSPARSELt's configuration of a 2:4 GEMM packed for the tune cache:
 * config id (12 bits), split-K (7), its mode (2), buffers (7); the plan
 * reader's ranges (plan.h PLAN_GEMM_F_SPARSE_CFG). -1: outside them. */
static long pack_cfg(const int32_t c[4]) {
  if (c[0] < 0 || c[0] > 4095 || c[1] < 1 || c[1] > 64 || c[2] < 0 || c[2] > 2 || c[3] < 0 || c[3] > 64) return -1;
  return (long)c[0] | (long)c[1] << 12 | (long)c[2] << 19 | (long)c[3] << 21;
}
static void unpack_cfg(long v, int32_t c[4]) {
  c[0] = (int32_t)(v & 4095);
  c[1] = (int32_t)(v >> 12 & 127);
  c[2] = (int32_t)(v >> 19 & 3);
  c[3] = (int32_t)(v >> 21 & 127);
}

/* The session's workspace grown to `need` bytes (a searched cuSPARSELt
 * configuration may want more scratch than the default one). */
static int grow_workspace(GpucSession *s, size_t need, GpucErr *e) {
  if (need <= s->workspace_bytes) return 0;
  CU_TRY(e, cu.cuStreamSynchronize(s->stream));
  cu.cuMemFree(s->workspace);
  s->workspace = 0;
  s->workspace_bytes = need;
  if (cu.cuMemAlloc(&s->workspace, need) != CUDA_SUCCESS)
    return gpuc_err_set(e, "autotune: cannot allocate a %zu-byte workspace", need);
  return 0;
}

/* A GEMM on cuSPARSELt (PLAN_GEMM_F_SPARSE24): first cuSPARSELt's own
 * search of its configurations on this GPU (cusparseLtMatmulSearch; the
 * choice goes into the plan, PLAN_GEMM_F_SPARSE_CFG, so a load runs it
 * instead of the default), then the GEMM with that configuration timed
 * against the same GEMM on cuBLASLt (the session made both), alone. Where
 * dense is faster (by 2%) the sparse state is parked and the flags
 * cleared, so the plan written after tuning runs it dense (BERT-base b32
 * on the H200 with the default configuration: every one lost to dense,
 * docs/BENCHMARKS.md); the whole plan's time then decides
 * (keep_if_faster), as for the other groups. Cached: the configuration
 * under the GEMM's key + "|2:4 cfg|<cuSPARSELt version>", the choice
 * under + "|2:4 searched" (1: dense). */
static int tune_sparse(GpucSession *s, uint32_t i, Cache *cache, CUevent ev[2], struct SparseGemm **parked,
                       PlanGemm *parked_g, GpucTuneStats *ts, GpucErr *e) {
  GemmState *gs = &s->gemms[i];
  PlanGemm *g = &s->plan->gemms[i];
  if (!gs->sparse) return 0;
  char base[1024], key[1100], ckey[1200];
  gemm_key(s, g, base, sizeof base);
  snprintf(key, sizeof key, "%s|2:4 searched", base);
  snprintf(ckey, sizeof ckey, "%s|2:4 cfg|%s", base, gpuc_sparse_gemm_library());
  for (char *q = ckey; *q; q++) if (*q == '\t' || *q == '\n') *q = ' ';
  int32_t cfg[4];
  size_t ws = 0;
  char why[256] = "";
  long packed = gpuc_tune_cache_get(cache, ckey, (1L << 28) - 1);
  int rc;
  if (packed >= 0) {
    unpack_cfg(packed, cfg);
    rc = gpuc_sparse_gemm_configure(gs->sparse, cfg, &ws, s->stream, why, sizeof why, e);
    ts->sparse_cfg_cached += rc == 0;
  } else {
    rc = gpuc_sparse_gemm_search(gs->sparse, cfg, &ws, s->stream, why, sizeof why, e);
    if (rc == 0 && pack_cfg(cfg) >= 0) gpuc_tune_cache_put(cache, ckey, pack_cfg(cfg));
  }
  if (rc < 0 || (rc == 0 && grow_workspace(s, ws, e))) return -1;
  if (rc == 0 && pack_cfg(cfg) >= 0) {
    g->flags |= PLAN_GEMM_F_SPARSE_CFG;
    memcpy(g->sparse_cfg, cfg, sizeof g->sparse_cfg);
    ts->sparse_searched++;
  } /* else the default configuration stays, unrecorded */
  long dense = gpuc_tune_cache_get(cache, key, 1);
  if (dense >= 0) ts->sparse_cached++;
  else {
    float ms_sparse, ms_dense;
    if (time_gemm(s, i, &gs->algo, ev, &ms_sparse, e)) return -1;
    struct SparseGemm *sp = gs->sparse;
    gs->sparse = NULL; /* gpuc_gemm_run then runs cuBLASLt */
    GpucErr ignore = {0};
    rc = time_gemm(s, i, &gs->algo, ev, &ms_dense, &ignore);
    gs->sparse = sp;
    if (rc) return 0; /* the dense call failed here: stay sparse */
    dense = ms_dense < ms_sparse * 0.98f;
    gpuc_tune_cache_put(cache, key, dense);
  }
  ts->sparse++;
  if (dense) {
    parked[i] = gs->sparse;
    parked_g[i] = *g;
    gs->sparse = NULL;
    g->flags &= ~(PLAN_GEMM_F_SPARSE24 | PLAN_GEMM_F_SPARSE_CFG);
    memset(g->sparse_cfg, 0, sizeof g->sparse_cfg);
    ts->sparse_dense++;
  }
  return 0;
}

/* ---- generated kernels' block sizes ---- */
static const uint32_t block_candidates[] = {64, 128, 256, 512, 1024}; /* GpucTuneStats.blocks_chosen */
#define BLOCK_SAMPLES 5
#define BLOCK_LAUNCHES 10

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median over BLOCK_SAMPLES of the mean time of BLOCK_LAUNCHES launches
 * of kernel step i with `block` threads a block (and the grid its items
 * need), after two warm-up launches. */
static int time_block(GpucSession *s, uint32_t i, uint32_t block, CUevent ev[2], float *ms, GpucErr *e) {
  uint32_t grid[3] = {gpuc_plan_items_grid(s->plan->tune[i].items, block), 1, 1}, blk[3] = {block, 1, 1};
  float t[BLOCK_SAMPLES];
  for (int r = 0; r < 2; r++)
    if (gpuc_kernel_run(s, i, grid, blk, e)) return -1;
  for (int k = 0; k < BLOCK_SAMPLES; k++) {
    CU_TRY(e, cu.cuEventRecord(ev[0], s->stream));
    for (int r = 0; r < BLOCK_LAUNCHES; r++)
      if (gpuc_kernel_run(s, i, grid, blk, e)) return -1;
    CU_TRY(e, cu.cuEventRecord(ev[1], s->stream));
    CU_TRY(e, cu.cuEventSynchronize(ev[1]));
    CU_TRY(e, cu.cuEventElapsedTime(&t[k], ev[0], ev[1]));
  }
  qsort(t, BLOCK_SAMPLES, sizeof *t, cmp_float);
  *ms = t[BLOCK_SAMPLES / 2] / BLOCK_LAUNCHES;
  return 0;
}

static bool block_ok(long b, int max_threads) {
  for (size_t k = 0; k < sizeof block_candidates / sizeof *block_candidates; k++)
    if (b == block_candidates[k]) return b <= max_threads;
  return false;
}

static int tune_block(GpucSession *s, uint32_t i, Cache *cache, CUevent ev[2], GpucTuneStats *ts, GpucErr *e) {
  Plan *p = s->plan;
  PlanStep *st = &p->steps[i];
  PlanTune *tn = &p->tune[i];
  if (st->kind != PLAN_STEP_KERNEL || !(tn->flags & PLAN_TUNE_F_BLOCK_FREE)) return 0;
  int max_threads = 0;
  CU_TRY(e, cu.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, s->funcs[st->index]));
  char key[512];
  int drv = 0;
  cu.cuDriverGetVersion(&drv);
  int k = snprintf(key, sizeof key, "%s|cuda %d|kernel %016llx items %llu", s->devname, drv,
                   (unsigned long long)tn->src_hash, (unsigned long long)tn->items);
  for (int q = 0; q < k && q < (int)sizeof key; q++) if (key[q] == '\t' || key[q] == '\n') key[q] = ' ';
  long best = gpuc_tune_cache_get(cache, key, 1024);
  if (best >= 0 && block_ok(best, max_threads)) ts->blocks_cached++;
  else {
    float cur_ms = -1, best_ms = 0;
    best = -1;
    for (size_t c = 0; c < sizeof block_candidates / sizeof *block_candidates; c++) {
      uint32_t b = block_candidates[c];
      float ms = 0;
      if ((int)b > max_threads) continue;
      GpucErr ignore = {0}; /* a block the kernel cannot run with is skipped, not fatal */
      if (time_block(s, i, b, ev, &ms, &ignore)) continue;
      if (b == st->block[0]) cur_ms = ms;
      if (best < 0 || ms < best_ms) { best = b; best_ms = ms; }
    }
    if (best < 0) return 0;
    /* the compiled block unless another is clearly faster: a few percent
     * is noise on a kernel of microseconds */
    if (cur_ms >= 0 && best_ms > cur_ms * 0.97f) best = st->block[0];
    gpuc_tune_cache_put(cache, key, best);
  }
  ts->blocks++;
  for (size_t c = 0; c < sizeof block_candidates / sizeof *block_candidates; c++)
    ts->blocks_chosen[c] += (uint32_t)best == block_candidates[c];
  if ((uint32_t)best == st->block[0]) return 0;
  st->block[0] = (uint32_t)best;
  st->grid[0] = gpuc_plan_items_grid(tn->items, (uint32_t)best);
  tn->flags |= PLAN_TUNE_F_BLOCK_TUNED;
  ts->blocks_changed++;
  return 0;
}

/* The whole plan's replay time (median of 30 CUDA-graph replays) with the
 * session's current choices. */
static int plan_ms(GpucSession *s, double *ms, GpucErr *e) {
  if (s->graph) { cu.cuGraphExecDestroy(s->graph); s->graph = NULL; }
  s->graph_ready = false;
  GpucBench b;
  if (gpuc_session_bench(s, 5, 30, &b, NULL, e)) return -1;
  *ms = b.median_ms;
  return 0;
}

/* What the heuristics chose, to go back to when the timed choices do not
 * make the whole plan faster: a call timed alone (its weights hot in L2,
 * no neighbours) is not always faster inside the plan. */
typedef struct Saved {
  cublasLtMatmulAlgo_t *gemm;
  cudnnConvolutionFwdAlgo_t *conv;
  PlanGemm *pg;
  PlanConv *pc;
  PlanStep *steps;               /* launch shapes */
  PlanTune *tune;
  uint64_t workspace_bytes;
  struct SparseGemm **parked;    /* 2:4 GEMMs tune_sparse moved to dense */
  PlanGemm *parked_g;            /* and their records before (flags, configuration) */
} Saved;

enum { GROUP_GEMMS, GROUP_CONVS, GROUP_BLOCKS, GROUP_SPARSE };

static void restore(GpucSession *s, const Saved *v, int group) {
  Plan *p = s->plan;
  if (group == GROUP_SPARSE) {
    for (uint32_t i = 0; i < p->ngemms; i++)
      if (v->parked[i]) {
        s->gemms[i].sparse = v->parked[i];
        v->parked[i] = NULL;
        p->gemms[i].flags = v->parked_g[i].flags;
        memcpy(p->gemms[i].sparse_cfg, v->parked_g[i].sparse_cfg, sizeof p->gemms[i].sparse_cfg);
      }
  } else if (group == GROUP_BLOCKS) {
    memcpy(p->steps, v->steps, p->nsteps * sizeof *p->steps);
    memcpy(p->tune, v->tune, p->nsteps * sizeof *p->tune);
  } else if (group == GROUP_GEMMS)
    for (uint32_t i = 0; i < p->ngemms; i++) { s->gemms[i].algo = v->gemm[i]; p->gemms[i] = v->pg[i]; }
  else {
    for (uint32_t i = 0; i < p->nconvs; i++) { s->convs[i].algo = v->conv[i]; p->convs[i] = v->pc[i]; }
    p->meta.workspace_bytes = v->workspace_bytes;
  }
}

/* After a group's choices: time the whole plan; keep them if it got faster
 * than *best, else go back to what was there before the group. */
static int keep_if_faster(GpucSession *s, const Saved *v, int group, double *best, bool *reverted, GpucErr *e) {
  double t;
  if (plan_ms(s, &t, e)) return -1;
  if (t < *best * 0.995) *best = t;
  else { restore(s, v, group); *reverted = true; }
  return 0;
}

int gpuc_session_autotune(GpucSession *s, const char *cache_path, GpucTuneStats *ts, GpucErr *e) {
  memset(ts, 0, sizeof *ts);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
  /* defined inputs for the timing runs: zeros, not whatever the allocation held; an
   * index they make out of range is not the user's error (fault_quiet) */
  CU_TRY(e, cu.cuMemsetD8Async(s->arena, 0, s->plan->meta.arena_bytes ? s->plan->meta.arena_bytes : 1, s->stream));
  s->fault_quiet = true;
  Cache cache;
  gpuc_tune_cache_open(&cache, cache_path);
  CUevent ev[2] = {0, 0};
  int rc = -1;
  if (cu.cuEventCreate(&ev[0], 0) != CUDA_SUCCESS || cu.cuEventCreate(&ev[1], 0) != CUDA_SUCCESS) {
    gpuc_err_set(e, "autotune: cannot create CUDA events");
    goto done;
  }
  Plan *p = s->plan;
  Saved v = {.gemm = calloc(p->ngemms + 1, sizeof *v.gemm), .conv = calloc(p->nconvs + 1, sizeof *v.conv),
             .pg = calloc(p->ngemms + 1, sizeof *v.pg), .pc = calloc(p->nconvs + 1, sizeof *v.pc),
             .steps = calloc(p->nsteps + 1, sizeof *v.steps), .tune = calloc(p->nsteps + 1, sizeof *v.tune),
             .workspace_bytes = p->meta.workspace_bytes, .parked = calloc(p->ngemms + 1, sizeof *v.parked),
             .parked_g = calloc(p->ngemms + 1, sizeof *v.parked_g)};
  if (!v.gemm || !v.conv || !v.pg || !v.pc || !v.steps || !v.tune || !v.parked || !v.parked_g) {
    gpuc_err_set(e, "out of memory");
    goto done_saved;
  }
  memcpy(v.steps, p->steps, p->nsteps * sizeof *p->steps);
  memcpy(v.tune, p->tune, p->nsteps * sizeof *p->tune);
  for (uint32_t i = 0; i < p->ngemms; i++) { v.gemm[i] = s->gemms[i].algo; v.pg[i] = p->gemms[i]; }
  for (uint32_t i = 0; i < p->nconvs; i++) { v.conv[i] = s->convs[i].algo; v.pc[i] = p->convs[i]; }
  if (plan_ms(s, &ts->ms_heuristic, e)) goto done_saved;
  double best = ts->ms_heuristic;
  /* 2:4 GEMMs sparse or dense first: the dense ones are then tuned with the rest */
  for (uint32_t i = 0; i < p->ngemms; i++)
    if (tune_sparse(s, i, &cache, ev, v.parked, v.parked_g, ts, e)) goto done_saved;
  if (ts->sparse_dense && keep_if_faster(s, &v, GROUP_SPARSE, &best, &ts->sparse_reverted, e)) goto done_saved;
  if (ts->sparse_searched && !ts->sparse_dense) { /* all stay sparse, with their searched configurations */
    double t;
    if (plan_ms(s, &t, e)) goto done_saved;
    if (t < best) best = t;
  }
  for (uint32_t i = 0; i < p->ngemms; i++) v.pg[i] = p->gemms[i]; /* the GEMM group's restore keeps those flags */
  /* GEMMs next: they run with the plan's workspace size, which a tuned
   * convolution may raise */
  for (uint32_t i = 0; i < p->ngemms; i++)
    if (tune_gemm(s, i, &cache, ev, ts, e)) goto done_saved;
  if (ts->gemms && keep_if_faster(s, &v, GROUP_GEMMS, &best, &ts->gemms_reverted, e)) goto done_saved;
  for (uint32_t i = 0; i < p->nconvs; i++)
    if (tune_conv(s, i, &cache, ts, e)) goto done_saved;
  if (p->meta.workspace_bytes > s->workspace_bytes) { /* the tuned algorithms' scratch */
    CUresult r = cu.cuStreamSynchronize(s->stream);
    if (r != CUDA_SUCCESS) { gpuc_cu_fail(e, r, "cuStreamSynchronize", __FILE__, __LINE__); goto done_saved; }
    cu.cuMemFree(s->workspace);
    s->workspace = 0;
    s->workspace_bytes = p->meta.workspace_bytes;
    if (cu.cuMemAlloc(&s->workspace, s->workspace_bytes) != CUDA_SUCCESS) {
      gpuc_err_set(e, "autotune: cannot allocate a %zu-byte workspace", s->workspace_bytes);
      goto done_saved;
    }
  }
  if (ts->convs && keep_if_faster(s, &v, GROUP_CONVS, &best, &ts->convs_reverted, e)) goto done_saved;
  /* last: the blocks are timed beside the library calls' final choices */
  for (uint32_t i = 0; i < p->nsteps; i++)
    if (tune_block(s, i, &cache, ev, ts, e)) goto done_saved;
  if (ts->blocks_changed && keep_if_faster(s, &v, GROUP_BLOCKS, &best, &ts->blocks_reverted, e))
    goto done_saved;
  ts->ms_tuned = best;
  s->graph_ready = false; /* a replay must see the final choices */
  if (s->graph) { cu.cuGraphExecDestroy(s->graph); s->graph = NULL; }
  rc = 0;
done_saved:
  for (uint32_t i = 0; v.parked && i < p->ngemms; i++) gpuc_sparse_gemm_free(v.parked[i]); /* dense for good */
  free(v.gemm); free(v.conv); free(v.pg); free(v.pc); free(v.steps); free(v.tune); free(v.parked); free(v.parked_g);
done:
  for (int k = 0; k < 2; k++)
    if (ev[k]) cu.cuEventDestroy(ev[k]);
  gpuc_tune_cache_close(&cache);
  s->fault_quiet = false;
  if (gpuc_fault_reset(s, rc ? NULL : e)) rc = -1; /* the timed kernels' reports, if any, go */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ts->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return rc;
}
