/* --int8 without a GPU:
 *  - the reference kernels against a naive exact computation: QuantizeRows
 *    (scales and int8 values by the rule of ir/quant_int8.h, recomputed in
 *    double: ties, zero rows, a NaN, values past the clamp), MatMulInt8
 *    (int64 sums, K up to the int32 limit's worth of products), and
 *    DequantizeRows (f32 steps, half output);
 *  - pass_quantize_int8 against the fp32 graph on the CPU reference with
 *    seeded random inputs: relative L2 below 2e-2 per output (fp32, and
 *    with --fp16), on mlp, ffn_block, attention and linears.onnx; which
 *    layers it takes, which it keeps and why (--int8-skip, N % 4), one
 *    QuantizeRows per shared input, the note when nothing is quantized;
 *  - codegen: int8 plans build and their kernels compile with NVRTC for
 *    sm_80/89/90/120; the int8 GEMM descriptors (TN, dtypes, leading dims);
 *    an int8 plan round-trips byte-exact, and broken int8 GEMMs are refused;
 *    at sizes with enough tiles, gpuc's own int8 GEMM kernel with the
 *    DequantizeRows group as its epilogue (check_own_gemm).
 *  - onnxruntime's quantize_dynamic and quantize_static (QDQ) outputs
 *    rewritten onto the int8 GEMM against onnxruntime's own outputs.
 * usage: test_int8 MODELS_DIR WORK_DIR DATA_DIR (tests/data) */
#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "plan.h"
#include "quant_int8.h"
#include "npy.h"
#include "ref.h"
#include "compile_model.h"
#include "ref_random.h"
#include "ref_node.h"
#include <math.h>
#include <string.h>

/* The rule recomputed independently: the product x * inv rounded to f32
 * from its exact double value, then round half to even. */
static int naive_q(float x, float absmax) {
  if (!(absmax > 0)) return 0;
  float inv = 127.0f / absmax; /* IEEE division: correctly rounded */
  float p = (float)((double)x * (double)inv);
  if (isnan(p)) return -127;
  double r = nearbyint((double)p);
  return r > 127 ? 127 : r < -127 ? -127 : (int)r;
}

static void check_reference_kernels(void) {
  enum { R = 6, K = 40, N = 12 };
  GpucErr e = {0};
  int64_t xd[2] = {R, K}, wd[2] = {N, K};
  Tensor *x = gpuc_tensor_new(GPUC_DT_F32, 2, xd, &e);
  float *xv = x->data;
  for (int i = 0; i < R * K; i++) xv[i] = (float)(urand() * 3);
  for (int j = 0; j < K; j++) xv[1 * K + j] = 0;                 /* row 1: zeros -> scale 1, q 0 */
  for (int j = 0; j < K; j++) xv[2 * K + j] = (float)(j - 20) * 0.5f; /* row 2: absmax 10, halves land on ties */
  xv[2 * K + 0] = -127.0f;                                     /* absmax 127: inv 1, x.5 ties exact */
  for (int j = 1; j < K; j++) xv[2 * K + j] = (float)(j - 20) + 0.5f;
  xv[3 * K + 5] = NAN;                                         /* skipped by the absmax, q -127 */
  xv[4 * K + 7] = 1e30f;                                       /* one huge value: the rest round to 0 */
  const Tensor *qin[1] = {x};
  Tensor *qout[2] = {0};
  if (run_op(GPUC_OP_QUANTIZEROWS, 1, qin, 2, qout, 0)) return;
  CHECK(qout[0]->dt == GPUC_DT_I8 && qout[1]->dt == GPUC_DT_F32 && qout[1]->rank == 2 && qout[1]->dims[1] == 1,
        "QuantizeRows: i8 [R,K] and f32 [R,1]");
  const int8_t *q = qout[0]->data;
  const float *s = qout[1]->data;
  int bad = 0;
  for (int r = 0; r < R; r++) {
    float m = 0;
    for (int j = 0; j < K; j++)
      if (!isnan(xv[r * K + j]) && fabsf(xv[r * K + j]) > m) m = fabsf(xv[r * K + j]);
    float want_s = m > 0 ? m / 127.0f : 1.0f;
    if (s[r] != want_s) bad++;
    for (int j = 0; j < K; j++) bad += q[r * K + j] != naive_q(xv[r * K + j], m);
  }
  CHECK(bad == 0, "QuantizeRows: %d scales or values differ from the rule", bad);
  CHECK(s[1] == 1.0f && q[1 * K + 3] == 0, "a zero row: scale 1, q 0");
  CHECK(q[2 * K + 0] == -127 && q[2 * K + 1] == -18 && q[2 * K + 2] == -18 && q[2 * K + 3] == -16,
        "ties round to even: -18.5 -> %d, -17.5 -> %d, -16.5 -> %d", q[2 * K + 1], q[2 * K + 2], q[2 * K + 3]);
  CHECK(q[3 * K + 5] == -127, "NaN quantizes to -127, got %d", q[3 * K + 5]);
  CHECK(q[4 * K + 7] == 127 && q[4 * K + 8] == 0, "a huge value: 127, the rest 0");

  /* MatMulInt8 against int64 sums, with the extremes of int8 */
  Tensor *w = gpuc_tensor_new(GPUC_DT_I8, 2, wd, &e);
  int8_t *wv = w->data;
  for (int i = 0; i < N * K; i++) wv[i] = (int8_t)(urand() * 127.9);
  for (int j = 0; j < K; j++) wv[j] = -127;
  const Tensor *min[2] = {qout[0], w};
  Tensor *acc[1] = {0};
  if (run_op(GPUC_OP_MATMULINT8, 2, min, 1, acc, 0) == 0) {
    const int32_t *a = acc[0]->data;
    bad = 0;
    for (int r = 0; r < R; r++)
      for (int n = 0; n < N; n++) {
        int64_t sum = 0;
        for (int j = 0; j < K; j++) sum += (int64_t)q[r * K + j] * wv[n * K + j];
        bad += a[r * N + n] != sum;
      }
    CHECK(acc[0]->dt == GPUC_DT_I32 && acc[0]->dims[1] == N && bad == 0, "MatMulInt8: %d sums differ", bad);
    /* DequantizeRows to half: ((acc * xs) * ws + b), rounded step by step */
    int64_t nd = N;
    Tensor *ws = gpuc_tensor_new(GPUC_DT_F32, 1, &nd, &e), *b = gpuc_tensor_new(GPUC_DT_F16, 1, &nd, &e);
    for (int n = 0; n < N; n++) {
      ((float *)ws->data)[n] = (float)(0.01 + 0.001 * n);
      gpuc_set_f64(b, n, urand());
    }
    const Tensor *din[4] = {acc[0], qout[1], ws, b};
    Tensor *y[1] = {0};
    if (run_op(GPUC_OP_DEQUANTIZEROWS, 4, din, 1, y, 10) == 0) {
      bad = 0;
      for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) {
          float t = (float)a[r * N + n] * s[r];
          t = t * ((float *)ws->data)[n];
          t = t + (float)gpuc_get_f64(b, n);
          Tensor one = {.dt = GPUC_DT_F16, .rank = 0};
          uint16_t h = 0;
          one.data = &h;
          gpuc_set_f64(&one, 0, t);
          bad += ((uint16_t *)y[0]->data)[r * N + n] != h;
        }
      CHECK(y[0]->dt == GPUC_DT_F16 && bad == 0, "DequantizeRows (half): %d values differ", bad);
      gpuc_tensor_free(y[0]);
    }
    gpuc_tensor_free(ws);
    gpuc_tensor_free(b);
    gpuc_tensor_free(acc[0]);
  }
  gpuc_tensor_free(w);
  gpuc_tensor_free(x);
  gpuc_tensor_free(qout[0]);
  gpuc_tensor_free(qout[1]);
}

static int count_op(const Graph *g, GpucOp op) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
  return n;
}

/* The int8 graph against the fp32 one on the reference, same random
 * inputs; want_int8 int8 layers and want_q QuantizeRows. */
static void compare_int8(const char *dir, const char *model, const GpucShapeBind *b, int nb, bool fp16,
                         const char *skip, int want_int8, int want_q) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, model);
  GpucErr e = {0};
  Graph *g0 = gpuc_onnx_load(path, b, nb, &e), *g1 = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g0 && g1, "load %s: %s", path, e.msg);
  if (!g0 || !g1) { gpuc_graph_free(g0); gpuc_graph_free(g1); return; }
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = fp16;
  o.int8 = true;
  o.int8_skip = skip;
  int rc = gpuc_passes_run(g1, &o, &e);
  CHECK(rc == 0, "passes --int8 on %s: %s", model, e.msg);
  CHECK(count_op(g1, GPUC_OP_MATMULINT8) == want_int8 && count_op(g1, GPUC_OP_QUANTIZEROWS) == want_q &&
            count_op(g1, GPUC_OP_DEQUANTIZEROWS) == want_int8,
        "%s%s: %d int8 layers and %d QuantizeRows, want %d and %d", model, fp16 ? " fp16" : "",
        count_op(g1, GPUC_OP_MATMULINT8), count_op(g1, GPUC_OP_QUANTIZEROWS), want_int8, want_q);
  Tensor **ins = random_inputs(g0);
  Tensor *o0[16] = {0}, *o1[16] = {0};
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "run fp32 %s: %s", model, e.msg);
  int r1 = rc == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "run int8 %s: %s", model, e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs && k < 16; k++) {
    double r = rel_l2(o1[k], o0[k]);
    /* int8 steps of 1/127 of each row's and channel's range: ~1% */
    CHECK(o1[k]->dt == o0[k]->dt && r < 2e-2 && (want_int8 == 0 || r > 0),
          "%s%s output %d: int8 relative L2 %.3g (bound 2e-2)", model, fp16 ? " fp16" : "", k, r);
    printf("  %s%s%s output %d: relative L2 %.4f against fp32\n", model, fp16 ? " fp16" : "", skip ? " skip" : "",
           k, r);
  }
  for (int k = 0; k < 16; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
  free_inputs(ins);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

/* The report of a model after --int8: `want` must appear in it. */
static void check_report(const char *dir, const char *model, const char *skip, const char *want) {
  Graph *g = load_model(dir, model, NULL, 0);
  if (!g) return;
  GpucErr e = {0};
  PassOptions o;
  pass_options_as(&o, 2, (CompilePrecision){.int8 = true});
  o.int8_skip = skip;
  CHECK(gpuc_passes_run(g, &o, &e) == 0, "passes on %s: %s", model, e.msg);
  char buf[8192] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  gpuc_int8_report(g, &o, f);
  fclose(f);
  CHECK(strstr(buf, want) != NULL, "%s report lacks '%s':\n%s", model, want, buf);
  gpuc_graph_free(g);
}

static Plan *compile_int8(const char *path, const GpucShapeBind *b, int nb, int sm, bool fp16) {
  return compile_model_as(path, b, nb, sm, (CompilePrecision){.fp16 = fp16, .int8 = true}, NULL);
}

static void expect_refused(const char *path, const char *what) {
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(path, &e);
  CHECK(p == NULL && strstr(e.msg, "corrupt plan: gemm"), "%s: %s", what, p ? "accepted" : e.msg);
  gpuc_plan_free(p);
}

static void check_plans(const char *dir, const char *work) {
  char path[4096], a[4200], b[4200], bad[4200];
  snprintf(path, sizeof path, "%s/ffn_block.onnx", dir);
  GpucShapeBind bind = {.name = "x", .rank = 3, .dims = {2, 16, 64}};
  const int archs[] = {80, 89, 90, 120};
  for (int i = 0; i < 4; i++)
    for (int fp16 = 0; fp16 < 2; fp16++) gpuc_plan_free(compile_int8(path, &bind, 1, archs[i], fp16));
  Plan *p = compile_int8(path, &bind, 1, 90, true);
  if (!p) return;
  /* fc1: [32,64] x [64,256] (stored [256,64]), fc2: [32,256] x [256,64] */
  int n8 = 0, nq = 0, nfq = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    if (s->kind == PLAN_STEP_KERNEL && strstr(gpuc_plan_str(p, p->kernels[s->index].name), "QuantizeRows")) nq++;
    /* the GELU row quantized in its own group's kernel (passes/fuse_quantize_rows.c) */
    if (s->kind == PLAN_STEP_KERNEL && strstr(gpuc_plan_str(p, p->kernels[s->index].name), "Quantize") &&
        !strstr(gpuc_plan_str(p, p->kernels[s->index].name), "QuantizeRows"))
      nfq++;
    if (s->kind != PLAN_STEP_GEMM) continue;
    const PlanGemm *g = &p->gemms[s->index];
    if (g->compute != PLAN_GEMM_COMPUTE_I32) continue;
    bool fc1 = g->n == 256;
    n8++;
    CHECK(g->a_dt == GPUC_DT_I8 && g->b_dt == GPUC_DT_I8 && g->y_dt == GPUC_DT_I32 && g->dt == GPUC_DT_I8 &&
              !g->trans_a && g->trans_b && g->m == 32 && g->k == (fc1 ? 64 : 256) && g->n == (fc1 ? 256 : 64) &&
              g->lda == g->k && g->ldb == g->k && g->ldy == g->n && g->c == UINT32_MAX && g->batch == 1,
          "int8 GEMM %u: TN, i8 x i8 -> i32, [%lld,%lld]x[%lld,%lld]", s->index, (long long)g->m, (long long)g->k,
          (long long)g->n, (long long)g->k);
    CHECK(p->tensors[g->b].mem == PLAN_MEM_WEIGHTS && p->tensors[g->b].dims[0] == g->n,
          "int8 GEMM %u: Wq [N,K] among the weights", s->index);
  }
  CHECK(n8 == 2 && nq == 1 && nfq == 1,
        "ffn_block --int8 --fp16: %d int8 GEMMs, %d QuantizeRows kernels of their own, %d fused into the GELU kernel, "
        "want 2, 1 and 1", n8, nq, nfq);
  snprintf(a, sizeof a, "%s/int8_a.gpuc", work);
  snprintf(b, sizeof b, "%s/int8_b.gpuc", work);
  snprintf(bad, sizeof bad, "%s/int8_bad.gpuc", work);
  GpucErr e = {0};
  Plan *q = plan_round_trip(p, a, b, "int8");
  if (q) {
    uint32_t gi = UINT32_MAX;
    for (uint32_t i = 0; i < q->ngemms; i++)
      if (q->gemms[i].compute == PLAN_GEMM_COMPUTE_I32) gi = i;
    if (gi != UINT32_MAX) {
      PlanGemm keep = q->gemms[gi];
      static const char *cases[] = {"K not a multiple of 4", "B not transposed", "int32 A", "alpha 2"};
      for (int c = 0; c < 4; c++) {
        q->gemms[gi] = keep;
        if (c == 0) q->gemms[gi].k = keep.k - 2;
        if (c == 1) q->gemms[gi].trans_b = 0;
        if (c == 2) q->gemms[gi].a_dt = GPUC_DT_I32;
        if (c == 3) q->gemms[gi].alpha = 2;
        CHECK(gpuc_plan_write(q, bad, &e) == 0, "write: %s", e.msg);
        expect_refused(bad, cases[c]);
      }
      q->gemms[gi] = keep;
    }
    gpuc_plan_free(q);
  }
  gpuc_plan_free(p);
}

/* Steps of p whose kernel name contains `part`. */
static int kernels_named(const Plan *p, const char *part, unsigned *shmem) {
  int n = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    if (s->kind != PLAN_STEP_KERNEL || !strstr(gpuc_plan_str(p, p->kernels[s->index].name), part)) continue;
    if (shmem) *shmem = s->shmem;
    n++;
  }
  return n;
}

static int int8_library_gemms(const Plan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->ngemms; i++) n += p->gemms[i].compute == PLAN_GEMM_COMPUTE_I32;
  return n;
}

/* GPUC_INT8_WS=tma (the WS kernel's loads by TMA): each GEMM step takes
 * two tensor maps (plan format 7, PlanTensorMap): Xq [M, K] in boxes of
 * 128 bytes x 128 rows, Wq [N, K] in 128 x 128, both among the step's
 * arguments; the PTX has the bulk tensor copies; the records round-trip,
 * and the reader refuses a record whose box a 128-byte swizzle cannot
 * take, whose tensor the step does not read, or whose rows run past the
 * tensor. (On the GPU: tests/gpu/int8_ws_check.sh.) */
static void check_tma_plan(const char *path, const GpucShapeBind *big, const char *work) {
  setenv("GPUC_INT8_WS", "tma", 1);
  Plan *p = compile_int8(path, big, 1, 90, true);
  unsetenv("GPUC_INT8_WS");
  if (!p) return;
  int good = 0;
  for (uint32_t i = 0; i < p->ntmaps; i++) {
    const PlanTensorMap *m = &p->tmaps[i];
    const PlanStep *st = &p->steps[m->step];
    bool arg = false;
    for (uint32_t k = 0; k < st->nargs; k++) arg |= p->args[st->args + k] == m->tensor;
    const PlanTensor *t = &p->tensors[m->tensor];
    good += arg && st->kind == PLAN_STEP_KERNEL && t->dt == GPUC_DT_I8 && m->dims[0] == (uint64_t)t->dims[t->rank - 1] &&
            m->row_stride == m->dims[0] && m->dims[0] * m->dims[1] == t->bytes && m->box[0] == 128 && m->box[1] == 128 &&
            m->swizzle == PLAN_TMAP_SWIZZLE_128B && (i % 2 ? p->tmaps[i - 1].step == m->step : true);
  }
  bool bulk = p->ptx && strstr(p->ptx, "cp.async.bulk.tensor.2d") && strstr(p->ptx, "mbarrier.arrive.expect_tx");
  CHECK(p->ntmaps == 4 && good == 4 && bulk, "GPUC_INT8_WS=tma: %u tensor maps, %d as wanted (4), bulk copies in the PTX %d",
        p->ntmaps, good, bulk);
  char a[4200], b[4200], bad[4200];
  snprintf(a, sizeof a, "%s/int8_tma_a.gpuc", work);
  snprintf(b, sizeof b, "%s/int8_tma_b.gpuc", work);
  snprintf(bad, sizeof bad, "%s/int8_tma_bad.gpuc", work);
  Plan *q = plan_round_trip(p, a, b, "TMA int8 GEMM");
  bool same = q && q->ntmaps == p->ntmaps && !memcmp(q->tmaps, p->tmaps, p->ntmaps * sizeof *p->tmaps);
  CHECK(same, "the tensor maps round-trip");
  gpuc_plan_free(q);
  if (p->ntmaps == 4) {
    static const char *cases[] = {"a 256-byte box", "a tensor the step does not read", "rows past the tensor",
                                  "records out of step order"};
    const PlanTensorMap keep0 = p->tmaps[0], keep3 = p->tmaps[3];
    for (int c = 0; c < 4; c++) {
      p->tmaps[0] = keep0;
      p->tmaps[3] = keep3;
      if (c == 0) p->tmaps[0].box[0] = 256;
      if (c == 1) { /* the first tensor the step does not take */
        const PlanStep *st = &p->steps[keep0.step];
        for (uint32_t t = 0, in = 1; in && t < p->ntensors; t++) {
          in = 0;
          for (uint32_t k = 0; k < st->nargs; k++) in |= p->args[st->args + k] == t;
          if (!in) p->tmaps[0].tensor = t;
        }
      }
      if (c == 2) p->tmaps[0].dims[1] += 1;
      if (c == 3) p->tmaps[0].step = keep3.step + (keep3.step > keep0.step ? 1 : 0);
      GpucErr e = {0};
      CHECK(gpuc_plan_write(p, bad, &e) == 0, "write: %s", e.msg);
      Plan *r = gpuc_plan_read(bad, &e);
      CHECK(!r && strstr(e.msg, "tensor map"), "a tensor map with %s is refused: %s", cases[c], r ? "(read)" : e.msg);
      gpuc_plan_free(r);
    }
  }
  gpuc_plan_free(p);
}

/* Which int8 GEMMs gpuc's kernel takes by default (cg_int8_gemm_own):
 * ffn_block at 16384 rows, fc1 (K 64, N 256) writing int32 sums for the
 * GELU + quantize row kernel, fc2 (K 256, N 64). sm_90: every GEMM of N >=
 * 256 with 64 tiles, int32 ones too, so fc1 is the wgmma kernel (ws_choice
 * keeps K < 2048, N < 2048 off TMA: no tensor map) and fc2 cuBLASLt's;
 * GPUC_INT8_WS=0 (the default before) and the other targets (epilogue
 * GEMMs of N >= 2048 only) leave both to cuBLASLt. (The TMA choice by
 * shape: tests/int8_ws_ptx_test.py, tests/int8_ws_host_test.py.) */
static void check_default_choice(const char *dir, const GpucShapeBind *big) {
  char path[4096];
  snprintf(path, sizeof path, "%s/ffn_block.onnx", dir);
  const int archs[] = {80, 86, 89, 90, 90, 120};
  for (int i = 0; i < 6; i++) {
    const bool ws0 = i == 4, hopper = archs[i] == 90 && !ws0;
    if (ws0) setenv("GPUC_INT8_WS", "0", 1);
    Plan *p = compile_int8(path, big, 1, archs[i], true);
    unsetenv("GPUC_INT8_WS");
    if (!p) continue;
    int own = kernels_named(p, "_int8_gemm", NULL), lt = int8_library_gemms(p);
    CHECK(own == (hopper ? 1 : 0) && lt == (hopper ? 1 : 2) && p->ntmaps == 0,
          "ffn_block b1024 --int8 --fp16 sm_%d%s by default: %d own int8 GEMM kernels, %d cuBLASLt, %u tensor maps "
          "(want %d, %d, 0)", archs[i], ws0 ? " GPUC_INT8_WS=0" : "", own, lt, p->ntmaps, hopper ? 1 : 0, hopper ? 1 : 2);
    gpuc_plan_free(p);
  }
}

/* gpuc's own int8 GEMM (codegen/lower_int8_gemm.c), GPUC_INT8_GEMM=own:
 * ffn_block at 16384 rows (128 x 128 tiles, 96 KB of pipeline: the
 * runtime opts in past 48 KB) compiled by NVRTC for every arch; its fc1
 * sums go to the GELU + quantize row kernel as int32, its fc2 sums to the residual + LayerNorm row kernel; linears.onnx's four
 * Linears each one kernel with its DequantizeRows (+ Relu) as the
 * epilogue, no DequantizeRows kernel left; GPUC_INT8_GEMM=cublaslt brings
 * cuBLASLt's GEMMs back; the plan round-trips. (The kernel's numbers are
 * checked on a GPU: tests/gpu/int8_gemm_check.py, bit-exact against the
 * CPU reference.) */
static void check_own_gemm(const char *dir, const char *work) {
  char path[4096], a[4200], b[4200];
  setenv("GPUC_INT8_GEMM", "own", 1); /* the kernel wherever it can go (the default: wide epilogue GEMMs) */
  snprintf(path, sizeof path, "%s/ffn_block.onnx", dir);
  GpucShapeBind big = {.name = "x", .rank = 3, .dims = {1024, 16, 64}};
  const int archs[] = {80, 86, 89, 90, 120};
  for (int i = 0; i < 5; i++) {
    Plan *p = compile_int8(path, &big, 1, archs[i], true);
    if (!p) continue;
    unsigned sh = 0;
    int own = kernels_named(p, "_int8_gemm", &sh);
    CHECK(own == 2 && int8_library_gemms(p) == 0,
          "ffn_block b1024 --int8 --fp16 sm_%d: %d own int8 GEMM kernels, %d cuBLASLt ones (want 2, 0)", archs[i], own,
          int8_library_gemms(p));
    /* sm_90: Hopper's wgmma kernel, the module compiled for sm_90a and the
     * plan flagged arch-specific; mma.sync (portable PTX) everywhere else */
    bool hopper = archs[i] == 90, wgmma = p->ptx && strstr(p->ptx, "wgmma.mma_async") != NULL;
    bool sm90a = p->ptx && strstr(p->ptx, ".target sm_90a") != NULL;
    bool flagged = (p->hdr.flags & GPUC_PLAN_F_ARCH_SPECIFIC) != 0;
    CHECK(wgmma == hopper && sm90a == hopper && flagged == hopper,
          "ffn_block sm_%d: wgmma in the PTX %d, .target sm_90a %d, plan flag arch-specific %d (want all %d)", archs[i],
          wgmma, sm90a, flagged, hopper);
    if (hopper) {
      int tiles = 0;
      for (uint32_t s = 0; s < p->nsteps; s++)
        if (p->steps[s].kind == PLAN_STEP_KERNEL && strstr(gpuc_plan_str(p, p->kernels[p->steps[s].index].name), "_int8_gemm"))
          tiles += p->steps[s].shmem == 3 * (128 + 64) * 128 + 1024 && p->steps[s].block[0] == 256;
      /* K 64 and 256, N 256 and 64: short K, narrow N -> 128 x 64 tiles, two
       * warpgroups, 3 stages of 128-byte K steps + 1 KB for the alignment */
      CHECK(tiles == 2, "ffn_block b1024: both GEMMs take wgmma 128 x 64 tiles, 3 stages (73 KB): %d do", tiles);
      snprintf(a, sizeof a, "%s/int8_own_a.gpuc", work);
      snprintf(b, sizeof b, "%s/int8_own_b.gpuc", work);
      gpuc_plan_free(plan_round_trip(p, a, b, "own int8 GEMM"));
    }
    gpuc_plan_free(p);
  }
  snprintf(path, sizeof path, "%s/linears.onnx", dir);
  GpucShapeBind lin[3] = {{.name = "x", .rank = 3, .dims = {1024, 8, 64}},
                          {.name = "v", .rank = 2, .dims = {8192, 64}},
                          {.name = "w", .rank = 2, .dims = {8192, 64}}};
  for (int fp16 = 0; fp16 < 2; fp16++) {
    Plan *p = compile_int8(path, lin, 3, 90, fp16);
    if (!p) continue;
    int fused = kernels_named(p, "_int8_gemm_epilogue", NULL), dq = kernels_named(p, "DequantizeRows", NULL);
    CHECK(fused == 4 && dq == 0 && int8_library_gemms(p) == 0,
          "linears big%s: %d GEMMs with their epilogue, %d DequantizeRows kernels, %d cuBLASLt (want 4, 0, 0)",
          fp16 ? " --fp16" : "", fused, dq, int8_library_gemms(p));
    gpuc_plan_free(p);
  }
  /* GPUC_INT8_WS=1: the warp-specialized wgmma kernel on sm_90 (its numbers:
   * tests/int8_ws_host_test.py, its PTX: tests/int8_ws_ptx_test.py): an
   * mbarrier ring in the sm_90a PTX, each GEMM one persistent 1-D launch
   * of two consumer warpgroups + a producer warp (128 x 128 tiles, 3
   * stages, two CTAs an SM: grid min(tiles, 264)), the plan round-trips */
  setenv("GPUC_INT8_WS", "1", 1);
  snprintf(path, sizeof path, "%s/ffn_block.onnx", dir);
  Plan *w = compile_int8(path, &big, 1, 90, true);
  if (w) {
    int ws = 0;
    for (uint32_t s = 0; s < w->nsteps; s++) {
      const PlanStep *st = &w->steps[s];
      if (st->kind == PLAN_STEP_KERNEL && strstr(gpuc_plan_str(w, w->kernels[st->index].name), "_int8_gemm"))
        ws += st->block[0] == 288 && st->grid[1] == 1 && st->grid[0] >= 1 && st->grid[0] <= 264 &&
              st->shmem == 3 * (128 + 128) * 128 + 1024 + 16 * 3 + 16;
    }
    bool ring = w->ptx && strstr(w->ptx, "mbarrier.try_wait.parity") && strstr(w->ptx, "cp.async.mbarrier.arrive.noinc") &&
                strstr(w->ptx, "wgmma.mma_async") && strstr(w->ptx, ".target sm_90a");
    CHECK(ws == 2 && ring && (w->hdr.flags & GPUC_PLAN_F_ARCH_SPECIFIC),
          "GPUC_INT8_WS=1 sm_90: %d of 2 GEMMs the WS kernel (block 288, 1-D grid, 97 KB), ring in the PTX %d", ws, ring);
    snprintf(a, sizeof a, "%s/int8_ws_a.gpuc", work);
    snprintf(b, sizeof b, "%s/int8_ws_b.gpuc", work);
    gpuc_plan_free(plan_round_trip(w, a, b, "WS int8 GEMM"));
  }
  gpuc_plan_free(w);
  check_tma_plan(path, &big, work);
  unsetenv("GPUC_INT8_WS");
  /* GPUC_INT8_WGMMA=0: the mma.sync kernel on sm_90, a portable module */
  setenv("GPUC_INT8_WGMMA", "0", 1);
  snprintf(path, sizeof path, "%s/ffn_block.onnx", dir);
  Plan *p = compile_int8(path, &big, 1, 90, true);
  if (p)
    CHECK(kernels_named(p, "_int8_gemm", NULL) == 2 && p->ptx && !strstr(p->ptx, "wgmma") &&
              !strstr(p->ptx, "sm_90a") && !(p->hdr.flags & GPUC_PLAN_F_ARCH_SPECIFIC),
          "GPUC_INT8_WGMMA=0 sm_90: the mma.sync kernel, no sm_90a module");
  gpuc_plan_free(p);
  unsetenv("GPUC_INT8_WGMMA");
  snprintf(path, sizeof path, "%s/linears.onnx", dir);
  setenv("GPUC_INT8_GEMM", "cublaslt", 1);
  p = compile_int8(path, lin, 3, 90, true);
  if (p)
    CHECK(int8_library_gemms(p) == 4 && kernels_named(p, "_int8_gemm", NULL) == 0,
          "GPUC_INT8_GEMM=cublaslt: %d cuBLASLt int8 GEMMs (want 4)", int8_library_gemms(p));
  gpuc_plan_free(p);
  /* by default only epilogue GEMMs of N >= 2048 (sm_90: every GEMM of N >= 256):
   * linears' (N <= 96) stay cuBLASLt's */
  unsetenv("GPUC_INT8_GEMM");
  p = compile_int8(path, lin, 3, 90, true);
  if (p)
    CHECK(int8_library_gemms(p) == 4 && kernels_named(p, "_int8_gemm", NULL) == 0,
          "linears by default: %d cuBLASLt int8 GEMMs (want 4)", int8_library_gemms(p));
  gpuc_plan_free(p);
  check_default_choice(dir, &big);
}

/* onnxruntime's quantize_dynamic output (tests/data/ort_dynamic_ffn, made
 * by tests/tools/make_ort_quantized.py): at -O2 every MatMulInteger becomes
 * the int8 GEMM with its zero-point correction; the integers are exact, so
 * the outputs equal the unrewritten graph's (-O0) and onnxruntime's CPU
 * outputs within 1e-2 relative L2 (seen: ~1e-7); with --fp16 too (the
 * scale chain is one DequantizeRows, so the int32 sums are never half).
 * Its quantize_static QDQ output (tests/data/ort_static_ffn): each MatMul
 * reading DequantizeLinear(int8) becomes the int8 GEMM on those int8
 * values (passes/quantize_int8.c, pass_qdq_int8), to 1e-5 of -O0. */
static void check_ort_model(const char *data, bool fp16, GpucOp rewritten, int nrewritten) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.onnx", data);
  GpucShapeBind b = {.name = "x", .rank = 3, .dims = {2, 16, 64}};
  GpucErr e = {0};
  Graph *g0 = gpuc_onnx_load(path, &b, 1, &e), *g1 = gpuc_onnx_load(path, &b, 1, &e);
  CHECK(g0 && g1, "load %s: %s", path, e.msg);
  snprintf(path, sizeof path, "%s/in_x.npy", data);
  Tensor *x = gpuc_npy_load(path, &e);
  CHECK(x != NULL, "%s: %s", path, e.msg);
  if (!g0 || !g1 || !x) { gpuc_graph_free(g0); gpuc_graph_free(g1); gpuc_tensor_free(x); return; }
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = fp16; /* the scales apply before the half store: no int32 sums cast to half */
  CHECK(gpuc_passes_run(g1, &o, &e) == 0, "passes on the ORT model: %s", e.msg);
  CHECK(count_op(g0, rewritten) == nrewritten && count_op(g1, rewritten) == 0 && count_op(g1, GPUC_OP_MATMULINT8) == 2,
        "%s: %ss %d -> %d, int8 GEMMs %d (want %d -> 0, 2)", data, gpuc_ops[rewritten].name, count_op(g0, rewritten),
        count_op(g1, rewritten), count_op(g1, GPUC_OP_MATMULINT8), nrewritten);
  const Tensor *ins[1] = {x};
  Tensor *o0[4] = {0}, *o1[4] = {0};
  int r0 = gpuc_ref_run(g0, ins, o0, &e);
  CHECK(r0 == 0, "ORT model -O0: %s", e.msg);
  int r1 = gpuc_ref_run(g1, ins, o1, &e);
  CHECK(r1 == 0, "ORT model -O2: %s", e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs && k < 4; k++) {
    snprintf(path, sizeof path, "%s/%s.npy", data, g0->values[g0->outputs[k]].name);
    Tensor *want = gpuc_npy_load(path, &e);
    CHECK(want != NULL, "%s: %s", path, e.msg);
    if (!want) continue;
    double r_ort = rel_l2(o1[k], want), r_o0 = rel_l2(o1[k], o0[k]);
    /* fp16: half rounding flips steps of the model's own output Q/DQ pairs (the
     * QDQ model at -O2 --fp16 without the int8 rewrite: the same 9e-3) */
    CHECK(r_ort < (fp16 ? 2e-2 : 1e-2) && r_o0 < (fp16 ? 2e-2 : 1e-5),
          "%s%s output %s: rel L2 %.3g against onnxruntime, %.3g against -O0", data, fp16 ? " fp16" : "",
          g0->values[g0->outputs[k]].name, r_ort, r_o0);
    printf("  %s%s output %s: relative L2 %.3g against onnxruntime, %.3g against -O0\n", strrchr(data, '/') + 1,
           fp16 ? " fp16" : "", g0->values[g0->outputs[k]].name, r_ort, r_o0);
    gpuc_tensor_free(want);
  }
  for (int k = 0; k < 4; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
  gpuc_tensor_free(x);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: test_int8 MODELS_DIR WORK_DIR DATA_DIR\n"); return 2; }
  const char *dir = argv[1];
  check_reference_kernels();
  GpucShapeBind mlp = {.name = "image", .rank = 2, .dims = {8, 784}};
  GpucShapeBind ffn = {.name = "x", .rank = 3, .dims = {3, 16, 64}};
  GpucShapeBind att[3] = {{.name = "x", .rank = 3, .dims = {2, 33, 64}},
                          {.name = "mem", .rank = 3, .dims = {2, 20, 64}},
                          {.name = "mask", .rank = 4, .dims = {2, 1, 1, 33}}};
  GpucShapeBind lin[3] = {{.name = "x", .rank = 3, .dims = {3, 8, 64}}, {.name = "v", .rank = 2, .dims = {5, 64}},
                          {.name = "w", .rank = 2, .dims = {7, 64}}};
  /* mlp: fc2 (N 10) stays float; ffn_block: fc1 and fc2; attention: its
   * two blocks' projections as attention_views merged them (self-attention's
   * Q/K/V one GEMM, cross-attention's K/V one, its Q alone), one
   * QuantizeRows per input read */
  for (int fp16 = 0; fp16 < 2; fp16++) {
    compare_int8(dir, "mlp.onnx", &mlp, 1, fp16, NULL, 1, 1);
    compare_int8(dir, "ffn_block.onnx", &ffn, 1, fp16, NULL, 2, 2);
    compare_int8(dir, "attention.onnx", att, 3, fp16, NULL, 3, 3);
    compare_int8(dir, "linears.onnx", lin, 3, fp16, NULL, 4, 3); /* fc_d: Gemm, alpha 0.5, beta 2, W [K,N] */
  }
  compare_int8(dir, "ffn_block.onnx", &ffn, 1, false, "x,fc2*", 1, 1);
  compare_int8(dir, "ffn_block.onnx", &ffn, 1, false, "*", 0, 0);
  check_report(dir, "mlp.onnx", NULL, "fc2 (Gemm): K or N not a multiple of 4");
  check_report(dir, "ffn_block.onnx", "fc1*", "fc1/MatMul (MatMul): matches --int8-skip");
  check_report(dir, "ffn_block.onnx", NULL, "int8 layers (2");
  check_report(dir, "resnet_block.onnx", NULL, "nothing was quantized: the model has no Linear layer");
  check_report(dir, "ffn_block.onnx", "*", "nothing was quantized: no Linear layer the int8 GEMM takes");
  check_plans(dir, argv[2]);
  check_own_gemm(dir, argv[2]);
  char ort[4200];
  snprintf(ort, sizeof ort, "%s/ort_dynamic_ffn", argv[3]);
  check_ort_model(ort, false, GPUC_OP_MATMULINTEGER, 2);
  check_ort_model(ort, true, GPUC_OP_MATMULINTEGER, 2);
  snprintf(ort, sizeof ort, "%s/ort_static_ffn", argv[3]);
  check_ort_model(ort, false, GPUC_OP_MATMUL, 2);
  check_ort_model(ort, true, GPUC_OP_MATMUL, 2);
  return check_summary();
}
