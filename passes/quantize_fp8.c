/* --fp8: dynamic FP8 (e4m3) quantization of Linear layers (MatMul, Gemm
 * and MatMulBias against a constant 2-D weight), on FP8 tensor cores.
 *
 *   Y = X W (+ bias)   becomes
 *   Xq, xs = QuantizeRowsF8(X)                   per row (token), at run time
 *   Y      = MatMulF8(Xq, Wq, xs, ws, bias?)     one GEMM: e4m3 products,
 *            f32 sums, times xs[row] * ws[channel], + bias, in Y's dtype
 *
 * Wq [N, K] e4m3 and ws [N] f32 are made here: one scale per output
 * channel, absmax / 448 (alpha folded in), Wq = e4m3(w * 448 / absmax) by
 * gpuc_f32_to_f8e4m3. Unlike --int8 nothing is written in int32 and read
 * back: the GEMM applies the scales and writes Y (fp16/bf16/fp32) itself.
 * Layers reading the same X share one QuantizeRowsF8. The bias goes into
 * the GEMM's epilogue when Y is f16 or bf16 (cuBLASLt's FP8 bias is of the
 * output type then); for f32 outputs an Add after the GEMM adds it in f32
 * (cuBLASLt would take it only as bf16). Kept in float (gpuc_fp8_report
 * says why): layers whose K or N is not a multiple of 16 (cuBLASLt's FP8
 * alignment), Gemm with transA, non-float inputs, and an activation fused
 * into a float GEMM's epilogue. */
#include "linear_layers.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const LinearRules fp8_rules = {.multiple = 16,
                                      .multiple_why = "K or N not a multiple of 16 (cuBLASLt's FP8 GEMM)"};

/* Wq [N, K] e4m3 and ws [N] f32 (alpha folded in) from W. */
static int quantize_weight(Graph *g, const Node *nd, const LinearLayer *L, int *wq, int *ws, GpucErr *e) {
  char name[512];
  int64_t dq[2] = {L->n, L->k}, n = L->n, k = L->k;
  snprintf(name, sizeof name, "%s.wf8", nd->name);
  if ((*wq = gpuc_linear_new_const(g, name, GPUC_DT_F8E4M3, 2, dq, e)) < 0) return -1;
  snprintf(name, sizeof name, "%s.wf8scale", nd->name);
  if ((*ws = gpuc_linear_new_const(g, name, GPUC_DT_F32, 1, &n, e)) < 0) return -1;
  float *row = malloc(sizeof(float) * (size_t)(k + 1));
  if (!row) return gpuc_err_set(e, "%s: out of memory", g->path);
  uint8_t *q = g->values[*wq].t.data;
  float *s = g->values[*ws].t.data;
  for (int64_t o = 0; o < n; o++) {
    gpuc_linear_weight_row(g, L, o, row);
    float m = 0.0f;
    for (int64_t j = 0; j < k; j++) m = fmaxf(m, fabsf(row[j]));
    float inv = m > 0.0f ? 448.0f / m : 0.0f;
    for (int64_t j = 0; j < k; j++) {
      volatile float t = row[j] * inv;
      q[o * k + j] = gpuc_f32_to_f8e4m3(t);
    }
    s[o] = (m > 0.0f ? m / 448.0f : 1.0f) * L->alpha;
  }
  free(row);
  return 0;
}

int pass_quantize_fp8(Graph *g, const PassOptions *o, GpucErr *e) {
  if (!o->fp8) return 0;
  int nn = g->nnodes, changes = 0, rc = -1;
  int cap = g->nvalues + 6 * nn + 16; /* values grow by 5 per layer and 2 per X at most */
  int *cache_q = malloc(sizeof(int) * (size_t)cap), *cache_s = malloc(sizeof(int) * (size_t)cap);
  if (!cache_q || !cache_s) { free(cache_q); free(cache_s); return gpuc_err_set(e, "%s: out of memory", g->path); }
  for (int i = 0; i < cap; i++) cache_q[i] = cache_s[i] = -1;
  for (int i = 0; i < nn; i++) {
    LinearLayer L;
    const char *why = NULL;
    if (gpuc_linear_classify(g, &g->nodes[i], &fp8_rules, &L, &why) != 1) continue;
    int wq, ws, y = g->nodes[i].out[0];
    GpucDType ydt = g->values[y].t.dt;
    bool epi = ydt != GPUC_DT_F32; /* f16/bf16: the bias in the GEMM's epilogue */
    if (quantize_weight(g, &g->nodes[i], &L, &wq, &ws, e)) goto done;
    int bias = L.bias < 0 ? -1 : gpuc_linear_bias_const(g, &g->nodes[i], &L, "f8bias", epi ? ydt : GPUC_DT_F32, e);
    if (L.bias >= 0 && bias < 0) goto done;
    if (gpuc_linear_quantize_rows(g, L.x, GPUC_OP_QUANTIZEROWSF8, "f8", "quantize_f8", cache_q, cache_s, e)) goto done;
    /* without an epilogue bias, the GEMM writes Yg and an Add makes Y */
    int yg = y;
    if (bias >= 0 && !epi) {
      char name[512];
      snprintf(name, sizeof name, "%s.f8out", g->nodes[i].name);
      if ((yg = gpuc_graph_add_value(g, name)) < 0) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
      snprintf(name, sizeof name, "%s.f8bias_add", g->nodes[i].name);
      int ai = gpuc_graph_add_node(g, GPUC_OP_ADD, name, 2, 1);
      if (ai < 0) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
      g->nodes[ai].in[0] = yg;
      g->nodes[ai].in[1] = bias;
      g->nodes[ai].out[0] = y;
      g->values[y].producer = ai;
    }
    /* the layer's node becomes the GEMM (its name: what inspect and the profile show) */
    Node *mm = &g->nodes[i];
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 5);
    Attr *to = gpuc_arena_alloc(&g->arena, sizeof(Attr));
    if (!in || !to) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    in[0] = cache_q[L.x];
    in[1] = wq;
    in[2] = cache_s[L.x];
    in[3] = ws;
    in[4] = epi ? bias : -1;
    *to = (Attr){.name = "to", .kind = GPUC_ATTR_INT, .i = gpuc_linear_onnx_float_type(ydt)};
    mm->op = GPUC_OP_MATMULF8;
    mm->in = in;
    mm->nin = in[4] >= 0 ? 5 : 4;
    mm->attrs = to;
    mm->nattr = 1;
    mm->out[0] = yg;
    g->values[yg].producer = i;
    changes++;
  }
  if (changes && (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e))) goto done;
  if (changes && pass_dead_code(g, o, e) < 0) goto done; /* float weights now unread */
  rc = changes;
done:
  free(cache_q);
  free(cache_s);
  return rc;
}

void gpuc_fp8_report(const Graph *g, const PassOptions *o, FILE *f) {
  if (!o->fp8) return;
  int n8 = 0;
  for (int i = 0; i < g->nnodes; i++) n8 += g->nodes[i].op == GPUC_OP_MATMULF8;
  int nf = 0;
  for (int i = 0; i < g->nnodes; i++) {
    LinearLayer L;
    const char *why = NULL;
    int k = gpuc_linear_classify(g, &g->nodes[i], &fp8_rules, &L, &why);
    if (k == 0) continue;
    nf++;
    fprintf(f, "  fp8: kept in float: %s (%s): %s\n", g->nodes[i].name, gpuc_op_name(&g->nodes[i]),
            k == 2 ? why : "not quantized");
  }
  if (n8 == 0) {
    fprintf(f, "  note: --fp8: nothing was quantized: %s\n",
            nf ? "no Linear layer the FP8 GEMM takes (above)"
               : "the model has no Linear layer (MatMul or Gemm with a constant 2-D weight)");
    return;
  }
  fprintf(f, "  fp8 layers (%d, e4m3 x e4m3 GEMMs, scaled in the GEMM):", n8);
  int col = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == GPUC_OP_MATMULF8) {
      const Tensor *w = &g->values[g->nodes[i].in[1]].t;
      fprintf(f, "%s %s [%lldx%lld]", col++ % 4 ? "," : "\n   ", g->nodes[i].name, (long long)w->dims[1],
              (long long)w->dims[0]);
    }
  fprintf(f, "\n");
}
