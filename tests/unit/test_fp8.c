/* --fp8 without a GPU:
 *  - gpuc_f32_to_f8e4m3 against ml_dtypes' float8_e4m3fn on a table of
 *    known values (every e4m3 value, every tie between neighbours and the
 *    floats either side of it, random values over 20 binades;
 *    tests/unit/fp8_known.h), saturation to +-448 (infinity too), NaN ->
 *    0x7f, signed zero, and decode -> encode of all 255 non-NaN codes;
 *  - the reference kernels: QuantizeRowsF8 (scales absmax/448, values by
 *    the rule), MatMulF8 against double sums of the decoded values (1e-5);
 *  - pass_quantize_fp8 against the fp32 graph on the CPU reference with
 *    seeded random inputs: relative L2 below 8e-2 per output (fp32 and
 *    --fp16; e4m3 keeps 3 mantissa bits: seen 0.9e-2 to 4.8e-2);
 *  - plans: --fp8 plans build and their kernels compile with NVRTC for
 *    sm_89/90/120, an sm_80 target is refused with a message that says
 *    why; the FP8 GEMM descriptors (TN, e4m3, scale vectors, bias of Y's
 *    dtype); a plan round-trips byte-exact and broken FP8 GEMMs are
 *    refused.
 * usage: test_fp8 MODELS_DIR WORK_DIR */
#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "plan.h"
#include "ref.h"
#include <math.h>
#include <string.h>
#include "compile_model.h"
#include "fp8_known.h"
#include "ref_node.h"

static uint64_t rng = 11;
static double urand(void) { /* [-1, 1) */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0 * 2 - 1;
}

static double rel_l2(const Tensor *a, const Tensor *w) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < gpuc_numel(w); i++) {
    double d = gpuc_get_f64(a, i) - gpuc_get_f64(w, i);
    num += d * d;
    den += gpuc_get_f64(w, i) * gpuc_get_f64(w, i);
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void check_rounding(void) {
  int bad = 0, n = (int)(sizeof fp8_known / sizeof fp8_known[0]);
  for (int i = 0; i < n; i++) {
    uint8_t q = gpuc_f32_to_f8e4m3(bits_f(fp8_known[i].f));
    if (q != fp8_known[i].q && bad++ < 5)
      fprintf(stderr, "  %a: got 0x%02x, ml_dtypes 0x%02x\n", bits_f(fp8_known[i].f), q, fp8_known[i].q);
  }
  CHECK(n > 600 && bad == 0, "e4m3 rounding: %d of %d known values differ", bad, n);
  CHECK(gpuc_f32_to_f8e4m3(448.0f) == 0x7e && gpuc_f32_to_f8e4m3(470.0f) == 0x7e &&
            gpuc_f32_to_f8e4m3(1e9f) == 0x7e && gpuc_f32_to_f8e4m3(INFINITY) == 0x7e &&
            gpuc_f32_to_f8e4m3(-INFINITY) == 0xfe && gpuc_f32_to_f8e4m3(-1000.0f) == 0xfe,
        "e4m3: saturates to +-448 (satfinite)");
  CHECK(gpuc_f32_to_f8e4m3(NAN) == 0x7f && gpuc_f32_to_f8e4m3(-0.0f) == 0x80 && gpuc_f32_to_f8e4m3(-1e-30f) == 0x80,
        "e4m3: NaN -> 0x7f, the sign of a zero kept");
  int rt = 0;
  for (int b = 0; b < 256; b++) {
    if ((b & 0x7f) == 0x7f) { CHECK(isnan(gpuc_f8e4m3_to_f32((uint8_t)b)), "0x%02x decodes to NaN", b); continue; }
    rt += gpuc_f32_to_f8e4m3(gpuc_f8e4m3_to_f32((uint8_t)b)) != b;
  }
  CHECK(rt == 0 && gpuc_f8e4m3_to_f32(0x7e) == 448.0f && gpuc_f8e4m3_to_f32(0x01) == 0x1p-9f &&
            gpuc_f8e4m3_to_f32(0x38) == 1.0f,
        "e4m3: %d codes do not survive decode -> encode", rt);
}

static void check_reference_kernels(void) {
  enum { R = 5, K = 32, N = 16 };
  GpucErr e = {0};
  int64_t xd[2] = {R, K}, wd[2] = {N, K}, nd = N;
  Tensor *x = gpuc_tensor_new(GPUC_DT_F32, 2, xd, &e), *w = gpuc_tensor_new(GPUC_DT_F32, 2, wd, &e);
  float *xv = x->data;
  for (int i = 0; i < R * K; i++) xv[i] = (float)(urand() * 3);
  for (int j = 0; j < K; j++) xv[1 * K + j] = 0; /* a zero row: scale 1 */
  for (int i = 0; i < N * K; i++) ((float *)w->data)[i] = (float)urand();
  Tensor *qx[2] = {0}, *qw[2] = {0};
  const Tensor *in1[1] = {x}, *in2[1] = {w};
  if (run_op(GPUC_OP_QUANTIZEROWSF8, 1, in1, 2, qx, 0) || run_op(GPUC_OP_QUANTIZEROWSF8, 1, in2, 2, qw, 0)) return;
  CHECK(qx[0]->dt == GPUC_DT_F8E4M3 && qx[1]->dt == GPUC_DT_F32 && qx[1]->dims[1] == 1, "QuantizeRowsF8 dtypes");
  const uint8_t *q = qx[0]->data;
  const float *s = qx[1]->data;
  int bad = 0;
  for (int r = 0; r < R; r++) {
    float m = 0;
    for (int j = 0; j < K; j++) m = fmaxf(m, fabsf(xv[r * K + j]));
    bad += s[r] != (m > 0 ? m / 448.0f : 1.0f);
    for (int j = 0; j < K; j++)
      bad += q[r * K + j] != gpuc_f32_to_f8e4m3(m > 0 ? (float)((double)xv[r * K + j] * (double)(448.0f / m)) : 0);
  }
  CHECK(bad == 0, "QuantizeRowsF8: %d scales or values differ from the rule", bad);
  Tensor *bias = gpuc_tensor_new(GPUC_DT_F16, 1, &nd, &e);
  for (int o = 0; o < N; o++) gpuc_set_f64(bias, o, urand());
  /* MatMulF8 takes WScale [N]: the weight's rows' scales, flattened */
  int64_t n1 = N;
  Tensor ws = *qw[1];
  gpuc_set_shape(&ws, GPUC_DT_F32, 1, &n1);
  const Tensor *ins[5] = {qx[0], qw[0], qx[1], &ws, bias};
  Tensor *y[1] = {0};
  if (run_op(GPUC_OP_MATMULF8, 5, ins, 1, y, 10)) return;
  double worst = 0;
  for (int r = 0; r < R; r++)
    for (int o = 0; o < N; o++) {
      double sum = 0;
      for (int j = 0; j < K; j++)
        sum += (double)gpuc_f8e4m3_to_f32(q[r * K + j]) * gpuc_f8e4m3_to_f32(((uint8_t *)qw[0]->data)[o * K + j]);
      double want = sum * s[r] * ((float *)qw[1]->data)[o] + gpuc_get_f64(bias, o);
      double d = fabs(gpuc_get_f64(y[0], r * N + o) - want) / (fabs(want) + 1e-3);
      worst = d > worst ? d : worst;
    }
  CHECK(y[0]->dt == GPUC_DT_F16 && worst < 1e-3, "MatMulF8 (half out): worst relative error %.3g (bound 1e-3)", worst);
  gpuc_tensor_free(x); gpuc_tensor_free(w); gpuc_tensor_free(bias); gpuc_tensor_free(y[0]);
  for (int k = 0; k < 2; k++) { gpuc_tensor_free(qx[k]); gpuc_tensor_free(qw[k]); }
}

static int count_op(const Graph *g, GpucOp op) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
  return n;
}

/* The --fp8 graph against the fp32 one on the reference, same random inputs. */
static void compare_fp8(const char *dir, const char *model, const GpucShapeBind *b, int nb, bool fp16, int want_f8,
                        int want_q) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, model);
  GpucErr e = {0};
  Graph *g0 = gpuc_onnx_load(path, b, nb, &e), *g1 = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g0 && g1, "load %s: %s", path, e.msg);
  if (!g0 || !g1) { gpuc_graph_free(g0); gpuc_graph_free(g1); return; }
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  o.fp16 = fp16;
  o.fp8 = true;
  int rc = gpuc_passes_run(g1, &o, &e);
  CHECK(rc == 0, "passes --fp8 on %s: %s", model, e.msg);
  CHECK(count_op(g1, GPUC_OP_MATMULF8) == want_f8 && count_op(g1, GPUC_OP_QUANTIZEROWSF8) == want_q,
        "%s%s: %d fp8 layers and %d QuantizeRowsF8, want %d and %d", model, fp16 ? " fp16" : "",
        count_op(g1, GPUC_OP_MATMULF8), count_op(g1, GPUC_OP_QUANTIZEROWSF8), want_f8, want_q);
  Tensor **ins = calloc((size_t)g0->ninputs + 1, sizeof *ins);
  for (int k = 0; k < g0->ninputs; k++) {
    const Tensor *d = &g0->values[g0->inputs[k]].t;
    ins[k] = gpuc_tensor_new(d->dt, d->rank, d->dims, &e);
    for (int64_t i = 0; i < gpuc_numel(d); i++) gpuc_set_f64(ins[k], i, urand());
  }
  Tensor *o0[16] = {0}, *o1[16] = {0};
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "run fp32 %s: %s", model, e.msg);
  int r1 = rc == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "run fp8 %s: %s", model, e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs && k < 16; k++) {
    double r = rel_l2(o1[k], o0[k]);
    CHECK(o1[k]->dt == o0[k]->dt && r < 8e-2 && r > 0, "%s%s output %d: fp8 relative L2 %.3g (bound 8e-2)", model,
          fp16 ? " fp16" : "", k, r);
    printf("  %s%s output %d: relative L2 %.4f against fp32\n", model, fp16 ? " fp16" : "", k, r);
  }
  for (int k = 0; k < 16; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
  for (int k = 0; k < g0->ninputs; k++) gpuc_tensor_free(ins[k]);
  free(ins);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
}

/* ffn_block --fp8 for sm: the plan, or NULL with the error in *e. */
static Plan *compile_fp8(const char *path, int sm, bool fp16, GpucErr *e) {
  GpucShapeBind bind = {.name = "x", .rank = 3, .dims = {2, 16, 64}};
  Graph *g = gpuc_onnx_load(path, &bind, 1, e);
  CHECK(g != NULL, "load %s: %s", path, e->msg);
  if (!g) return NULL;
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  po.fp16 = fp16;
  po.fp8 = true;
  Plan *p = NULL;
  int rc = gpuc_passes_run(g, &po, e);
  CHECK(rc == 0, "passes on %s: %s", path, e->msg);
  CodegenOptions co = {.sm = sm, .level = 2, .fp16 = fp16};
  if (rc == 0 && gpuc_codegen(g, &co, &p, NULL, e)) p = NULL;
  gpuc_graph_free(g);
  return p;
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
  const int archs[] = {89, 90, 120};
  GpucErr e = {0};
  for (int i = 0; i < 3; i++)
    for (int fp16 = 0; fp16 < 2; fp16++) {
      Plan *p = compile_fp8(path, archs[i], fp16, &e);
      CHECK(p != NULL, "codegen --fp8 sm_%d%s: %s", archs[i], fp16 ? " fp16" : "", e.msg);
      gpuc_plan_free(p);
    }
  Plan *old = compile_fp8(path, 80, false, &e);
  CHECK(old == NULL && strstr(e.msg, "--fp8 needs FP8 tensor cores (sm_89 or newer); the target is sm_80"),
        "--fp8 for sm_80: %s", old ? "compiled" : e.msg);
  gpuc_plan_free(old);
  Plan *p = compile_fp8(path, 90, true, &e);
  CHECK(p != NULL, "codegen: %s", e.msg);
  if (!p) return;
  /* fc1: [32,64] x [64,256] (stored [256,64]) + bias, fc2: [32,256] x [256,64] + bias */
  int n8 = 0, nq = 0, nfq = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    if (s->kind == PLAN_STEP_KERNEL && strstr(gpuc_plan_str(p, p->kernels[s->index].name), "QuantizeRowsF8")) nq++;
    /* the GELU row quantized in its own group's kernel (passes/fuse_quantize_rows.c) */
    if (s->kind == PLAN_STEP_KERNEL && strstr(gpuc_plan_str(p, p->kernels[s->index].name), "Quantize") &&
        !strstr(gpuc_plan_str(p, p->kernels[s->index].name), "QuantizeRows"))
      nfq++;
    if (s->kind != PLAN_STEP_GEMM || p->gemms[s->index].compute != PLAN_GEMM_COMPUTE_F8) continue;
    const PlanGemm *g = &p->gemms[s->index];
    bool fc1 = g->n == 256;
    n8++;
    CHECK(g->a_dt == GPUC_DT_F8E4M3 && g->b_dt == GPUC_DT_F8E4M3 && g->y_dt == GPUC_DT_F16 &&
              g->dt == GPUC_DT_F8E4M3 && !g->trans_a && g->trans_b && g->m == 32 && g->k == (fc1 ? 64 : 256) &&
              g->lda == g->k && g->ldb == g->k && g->ldy == g->n && g->batch == 1 && g->alpha == 1.0f,
          "FP8 GEMM %u: TN, e4m3 x e4m3 -> f16, [%lld,%lld]x[%lld,%lld]", s->index, (long long)g->m,
          (long long)g->k, (long long)g->n, (long long)g->k);
    CHECK(g->c != UINT32_MAX && g->ldc == 0 && p->tensors[g->c].dt == GPUC_DT_F16 &&
              p->tensors[g->stride_a].dt == GPUC_DT_F32 && p->tensors[g->stride_a].bytes == (uint64_t)g->m * 4 &&
              p->tensors[g->stride_b].mem == PLAN_MEM_WEIGHTS && p->tensors[g->stride_b].bytes == (uint64_t)g->n * 4 &&
              p->tensors[g->b].mem == PLAN_MEM_WEIGHTS && p->tensors[g->b].dt == GPUC_DT_F8E4M3,
          "FP8 GEMM %u: half bias row, per-row and per-channel f32 scales, e4m3 weight", s->index);
  }
  CHECK(n8 == 2 && nq == 1 && nfq == 1,
        "ffn_block --fp8 --fp16: %d FP8 GEMMs, %d QuantizeRowsF8 kernels of their own, %d fused into the GELU kernel, "
        "want 2, 1 and 1", n8, nq, nfq);
  snprintf(a, sizeof a, "%s/fp8_a.gpuc", work);
  snprintf(b, sizeof b, "%s/fp8_b.gpuc", work);
  snprintf(bad, sizeof bad, "%s/fp8_bad.gpuc", work);
  Plan *q = plan_round_trip(p, a, b, "fp8");
  if (q) {
    uint32_t gi = UINT32_MAX;
    for (uint32_t i = 0; i < q->ngemms; i++)
      if (q->gemms[i].compute == PLAN_GEMM_COMPUTE_F8) gi = i;
    if (gi != UINT32_MAX) {
      PlanGemm keep = q->gemms[gi];
      static const char *cases[] = {"K not a multiple of 16", "B not transposed", "i8 A", "alpha 2",
                                    "a scale vector of the wrong length", "a scale index past the tensors",
                                    "i32 output"};
      for (int c = 0; c < 7; c++) {
        q->gemms[gi] = keep;
        if (c == 0) q->gemms[gi].k = keep.k - 8;
        if (c == 1) q->gemms[gi].trans_b = 0;
        if (c == 2) q->gemms[gi].a_dt = GPUC_DT_I8;
        if (c == 3) q->gemms[gi].alpha = 2;
        if (c == 4) q->gemms[gi].stride_a = keep.stride_b;
        if (c == 5) q->gemms[gi].stride_b = (int64_t)q->ntensors + 3;
        if (c == 6) q->gemms[gi].y_dt = GPUC_DT_I32;
        CHECK(gpuc_plan_write(q, bad, &e) == 0, "write: %s", e.msg);
        expect_refused(bad, cases[c]);
      }
      q->gemms[gi] = keep;
    }
    gpuc_plan_free(q);
  }
  gpuc_plan_free(p);
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: test_fp8 MODELS_DIR WORK_DIR\n"); return 2; }
  const char *dir = argv[1];
  check_rounding();
  check_reference_kernels();
  GpucShapeBind mlp = {.name = "image", .rank = 2, .dims = {8, 784}};
  GpucShapeBind ffn = {.name = "x", .rank = 3, .dims = {3, 16, 64}};
  GpucShapeBind lin[3] = {{.name = "x", .rank = 3, .dims = {3, 8, 64}}, {.name = "v", .rank = 2, .dims = {5, 64}},
                          {.name = "w", .rank = 2, .dims = {7, 64}}};
  /* mlp: fc2 (N 10) stays float; ffn_block: fc1 and fc2 (bias: in the
   * epilogue with --fp16, an f32 Add without); linears: all four, fc_d a
   * Gemm with alpha 0.5, beta 2, W [K,N] */
  for (int fp16 = 0; fp16 < 2; fp16++) {
    compare_fp8(dir, "mlp.onnx", &mlp, 1, fp16, 1, 1);
    compare_fp8(dir, "ffn_block.onnx", &ffn, 1, fp16, 2, 2);
    compare_fp8(dir, "linears.onnx", lin, 3, fp16, 4, 3);
  }
  check_plans(dir, argv[2]);
  return check_summary();
}
