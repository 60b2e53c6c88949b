/* --int8: dynamic int8 quantization of Linear layers (MatMul, Gemm and
 * MatMulBias against a constant 2-D weight), on int8 tensor cores.
 *
 *   Y = X W (+ bias)   becomes
 *   Xq, xs = QuantizeRows(X)                 per row (token), at run time
 *   acc    = MatMulInt8(Xq, Wq)              int8 x int8 -> int32, exact
 *   Y      = DequantizeRows(acc, xs, ws, bias)   acc * xs * ws + bias
 *
 * Wq [N, K] and ws [N] are made here: one symmetric scale per output
 * channel, by the rule of ir/quant_int8.h (the activations' rule too).
 * Layers reading the same X share one QuantizeRows (Q, K and V). Y keeps
 * the layer's dtype: the pass runs after fp16, so the other ops keep their
 * precision; DequantizeRows is elementwise and joins the fusion group of
 * what follows. Kept in float: layers whose name matches a pattern of
 * o->int8_skip (fnmatch globs, comma-separated), and layers the int8 GEMM
 * cannot take (say why: gpuc_int8_report).
 *
 * Static Q/DQ models (pass_qdq_int8, -O2 with or without --int8): a layer
 * whose X is DequantizeLinear(q, s, zp) per tensor, q int8 or uint8,
 * takes q (uint8: q - 128) and s as its Xq and XScale instead of a
 * QuantizeRows, and adds the zero point's correction to the int32 sums. Its weight, folded to float
 * from its own DequantizeLinear, is quantized again by the rule above: the
 * model's int8 values come back exactly when its per-channel scale was
 * max|W| / 127 (symmetric calibration, as onnxruntime and TensorRT make
 * them), else within half a step. */
#include "linear_layers.h"
#include "quant_int8.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int classify(const Graph *g, const Node *nd, const PassOptions *o, LinearLayer *L, const char **why) {
  const LinearRules r = {.skip = o->int8_skip, .skip_why = "matches --int8-skip", .multiple = 4,
                         .multiple_why = "K or N not a multiple of 4 (cuBLASLt's int8 GEMM)",
                         .max_k = GPUC_Q8_MAX_K, .max_k_why = "K too large for exact int32 sums"};
  return gpuc_linear_classify(g, nd, &r, L, why);
}

/* Wq [N, K] int8 and ws [N] f32 (alpha folded in) from W. */
static int quantize_weight(Graph *g, const Node *nd, const LinearLayer *L, int *wq, int *ws, GpucErr *e) {
  char name[512];
  int64_t dq[2] = {L->n, L->k}, n = L->n, k = L->k;
  snprintf(name, sizeof name, "%s.wq", nd->name);
  if ((*wq = gpuc_linear_new_const(g, name, GPUC_DT_I8, 2, dq, e)) < 0) return -1;
  snprintf(name, sizeof name, "%s.wscale", nd->name);
  if ((*ws = gpuc_linear_new_const(g, name, GPUC_DT_F32, 1, &n, e)) < 0) return -1;
  float *row = malloc(sizeof(float) * (size_t)(k + 1));
  if (!row) return gpuc_err_set(e, "%s: out of memory", g->path);
  int8_t *q = g->values[*wq].t.data;
  float *s = g->values[*ws].t.data;
  for (int64_t o = 0; o < n; o++) {
    gpuc_linear_weight_row(g, L, o, row);
    float m = 0.0f;
    for (int64_t j = 0; j < k; j++) m = fmaxf(m, fabsf(row[j]));
    float inv = gpuc_q8_inv(m);
    for (int64_t j = 0; j < k; j++) q[o * k + j] = gpuc_q8(row[j], inv);
    s[o] = gpuc_q8_scale(m) * L->alpha;
  }
  free(row);
  return 0;
}

/* Gemm's C times beta, when beta is not 1 (as f32). */
static int scaled_bias(Graph *g, const Node *nd, const LinearLayer *L, GpucErr *e) {
  if (L->bias < 0 || L->beta == 1.0f) return L->bias;
  return gpuc_linear_bias_const(g, nd, L, "bias", GPUC_DT_F32, e);
}

/* A new node op(in...) -> a new value "<base>.<suffix>" (attr `to` when
 * to >= 0). */
static int int_node(Graph *g, GpucOp op, const char *base, const char *suffix, int nin, const int *in, int to,
                    GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", base, suffix);
  return gpuc_linear_new_node(g, op, name, nin, in, to, e);
}

/* X = DequantizeLinear(q, s, zp) with q int8 or uint8, s one constant
 * value and zp one constant value (or none): a static Q/DQ model's
 * activation (TensorRT's symmetric int8, onnxruntime's default asymmetric
 * uint8). *q goes to the int8 GEMM as it is (int8) or as q - 128 (uint8,
 * exact in int8); cache_z[x] holds the shift the GEMM's sums then miss,
 * (128 or 0) - zp: the layer adds shift * colsum(Wq) (per output channel,
 * a compile-time constant) to the int32 sums, which makes them sum (q -
 * zp) Wq exactly. Made once per X (the same caches). 1: not such an X. */
static int static_rows(Graph *g, int x, int *cache_q, int *cache_s, int *cache_z, GpucErr *e) {
  if (cache_q[x] >= 0) return 0;
  int p = g->values[x].producer;
  if (p < 0) return 1;
  const Node *dq = &g->nodes[p];
  if (dq->op != GPUC_OP_DEQUANTIZELINEAR || dq->nin < 2 || dq->in[0] < 0 || dq->in[1] < 0) return 1;
  const Tensor *q = &g->values[dq->in[0]].t, *sc = &g->values[dq->in[1]].t;
  const Tensor *zp = dq->nin > 2 && dq->in[2] >= 0 ? &g->values[dq->in[2]].t : NULL;
  if ((q->dt != GPUC_DT_I8 && q->dt != GPUC_DT_U8) || !sc->data || gpuc_numel(sc) != 1 ||
      !(gpuc_get_f64(sc, 0) > 0))
    return 1;
  if (zp && (!zp->data || gpuc_numel(zp) != 1)) return 1;
  bool u8 = q->dt == GPUC_DT_U8;
  int32_t shift = (u8 ? 128 : 0) - (zp ? (int32_t)gpuc_get_f64(zp, 0) : 0);
  char name[512];
  snprintf(name, sizeof name, "%s.scale", g->values[x].name);
  int64_t one = 1;
  int s = gpuc_linear_new_const(g, name, GPUC_DT_F32, 1, &one, e);
  if (s < 0) return -1;
  dq = &g->nodes[p];
  *(float *)g->values[s].t.data = (float)gpuc_get_f64(&g->values[dq->in[1]].t, 0);
  int xq = dq->in[0];
  if (u8) { /* q - 128 as int8: Cast<int8>(Cast<int32>(q) - 128) */
    snprintf(name, sizeof name, "%s.c128", g->values[x].name);
    int c = gpuc_linear_new_const(g, name, GPUC_DT_I32, 0, &one, e);
    if (c < 0) return -1;
    *(int32_t *)g->values[c].t.data = 128;
    const char *base = g->values[x].name;
    int q32 = int_node(g, GPUC_OP_CAST, base, "q32", 1, &xq, 6, e);
    int qs = q32 < 0 ? -1 : int_node(g, GPUC_OP_SUB, base, "q32s", 2, (int[]){q32, c}, -1, e);
    if ((xq = qs < 0 ? -1 : int_node(g, GPUC_OP_CAST, base, "qs8", 1, &qs, 3, e)) < 0) return -1;
  }
  cache_q[x] = xq;
  cache_s[x] = s;
  cache_z[x] = shift;
  return 0;
}

/* acc + shift * colsum(Wq) (static_rows' correction), int32 [.., N]. */
static int shift_sums(Graph *g, const char *layer, int acc, int wq, int32_t shift, GpucErr *e) {
  int64_t n = g->values[wq].t.dims[0], k = g->values[wq].t.dims[1];
  char name[512];
  snprintf(name, sizeof name, "%s.zp_correction", layer);
  int c = gpuc_linear_new_const(g, name, GPUC_DT_I32, 1, &n, e);
  if (c < 0) return -1;
  const int8_t *w = g->values[wq].t.data;
  int32_t *cv = g->values[c].t.data;
  for (int64_t o = 0; o < n; o++) {
    int64_t sum = 0;
    for (int64_t j = 0; j < k; j++) sum += w[o * k + j];
    cv[o] = (int32_t)(sum * shift);
  }
  return int_node(g, GPUC_OP_ADD, layer, "acc_zp", 2, (int[]){acc, c}, -1, e);
}

/* DequantizeRows(acc, xs, ws, b) -> y read only by a Reshape to z that
 * keeps the last dim (GPT-2's Conv1D: Gemm on [B*S, K], then back to [B,
 * S, N]) becomes DequantizeRows(Reshape(acc), Reshape(xs), ws, b) -> z:
 * the Reshapes are views, the same elements in the same order, so every
 * output bit is the same, and the dequantize then meets the residual Add
 * or GELU after it in one fusion group (fuse_elementwise wants one shape).
 * The Reshape node becomes acc's; xs gets a new one unless it is one value.
 * Returns the number moved, or -1. */
static int dequantize_after_reshape(Graph *g, GpucErr *e) {
  int moved = 0, nn = g->nnodes;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers || !reader) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < nn; i++) {
    const Node *d = &g->nodes[i];
    if (d->op != GPUC_OP_DEQUANTIZEROWS || d->nin < 3 || d->out[0] < 0) continue;
    int y = d->out[0], ri = reader[y];
    if (readers[y] != 1 || g->values[y].is_output || ri < 0 || g->nodes[ri].op != GPUC_OP_RESHAPE ||
        g->nodes[ri].in[0] != y || g->nodes[ri].out[0] < 0)
      continue;
    int z = g->nodes[ri].out[0], acc = d->in[0], xs = d->in[1];
    const Tensor yt = g->values[y].t, zt = g->values[z].t;
    if (!gpuc_shape_known(&yt) || !gpuc_shape_known(&zt) || yt.rank < 1 || zt.rank < 1 ||
        yt.dims[yt.rank - 1] != zt.dims[zt.rank - 1] || !gpuc_shape_known(&g->values[acc].t))
      continue;
    bool xs_one = gpuc_numel(&g->values[xs].t) == 1;
    char name[512];
    snprintf(name, sizeof name, "%s.reshaped", g->values[acc].name);
    int accr = gpuc_graph_add_value(g, name), xsr = xs, shape = -1, xn = -1;
    if (accr < 0) goto oom;
    if (!xs_one) {
      int64_t sd[GPUC_MAX_RANK], rank = zt.rank;
      for (int k = 0; k < zt.rank - 1; k++) sd[k] = zt.dims[k];
      sd[zt.rank - 1] = 1;
      snprintf(name, sizeof name, "%s.shape", g->values[xs].name);
      if ((shape = gpuc_linear_new_const(g, name, GPUC_DT_I64, 1, &rank, e)) < 0) goto fail;
      memcpy(g->values[shape].t.data, sd, sizeof(int64_t) * (size_t)rank);
      snprintf(name, sizeof name, "%s.reshaped", g->values[xs].name);
      xsr = gpuc_graph_add_value(g, name);
      snprintf(name, sizeof name, "%s.scale_view", g->nodes[i].name);
      xn = xsr < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_RESHAPE, name, 2, 1);
      if (xn < 0) goto oom;
      Node *r = &g->nodes[xn];
      r->in[0] = xs;
      r->in[1] = shape;
      r->out[0] = xsr;
      g->values[xsr].producer = xn;
    }
    Node *r = &g->nodes[ri], *dn = &g->nodes[i]; /* adding nodes may move the array */
    r->in[0] = acc;
    r->out[0] = accr;
    g->values[accr].producer = ri;
    dn->in[0] = accr;
    dn->in[1] = xsr;
    dn->out[0] = z;
    g->values[z].producer = i;
    g->values[y].producer = -1; /* no longer made or read */
    moved++;
  }
  free(readers); free(reader);
  if (moved && (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e))) return -1;
  return moved;
oom:
  gpuc_err_set(e, "%s: out of memory", g->path);
fail:
  free(readers); free(reader);
  return -1;
}

/* --int8 (o->int8): every Linear layer; static Q/DQ (-O2, always): the
 * layers whose X is a DequantizeLinear of int8 (their int8 values go to the
 * GEMM as they are). */
static int rewrite(Graph *g, const PassOptions *o, bool all, GpucErr *e) {
  int nn = g->nnodes, changes = 0, rc = -1;
  /* values grow by 6 per layer and 6 per distinct X at most */
  int cap = g->nvalues + 12 * nn + 16;
  int *cache_q = malloc(sizeof(int) * (size_t)cap), *cache_s = malloc(sizeof(int) * (size_t)cap);
  int *cache_z = calloc((size_t)cap, sizeof(int));
  if (!cache_q || !cache_s || !cache_z) {
    free(cache_q); free(cache_s); free(cache_z);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  for (int i = 0; i < cap; i++) cache_q[i] = cache_s[i] = -1;
  for (int i = 0; i < nn; i++) {
    LinearLayer L;
    const char *why = NULL;
    if (classify(g, &g->nodes[i], o, &L, &why) != 1) continue;
    int st = static_rows(g, L.x, cache_q, cache_s, cache_z, e);
    if (st < 0) goto done;
    if (st > 0 && !all) continue;
    /* a zero point's correction: |sum (q - zp) Wq| <= K * 255 * 127 must fit int32 */
    if (st == 0 && cache_z[L.x] != 0 && L.k > (int64_t)INT32_MAX / (255 * 127)) continue;
    int wq, ws, y = g->nodes[i].out[0];
    GpucDType ydt = g->values[y].t.dt;
    if (quantize_weight(g, &g->nodes[i], &L, &wq, &ws, e)) goto done;
    int bias = scaled_bias(g, &g->nodes[i], &L, e);
    if (L.bias >= 0 && bias < 0) goto done;
    if (st > 0 && gpuc_linear_quantize_rows(g, L.x, GPUC_OP_QUANTIZEROWS, "q8", "quantize", cache_q, cache_s, e))
      goto done;
    char name[512];
    snprintf(name, sizeof name, "%s.acc", g->nodes[i].name);
    int acc = gpuc_graph_add_value(g, name);
    /* the layer's name goes to the GEMM (what inspect and the profile show) */
    int mi = acc < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_MATMULINT8, g->nodes[i].name, 2, 1);
    if (mi < 0) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    Node *mm = &g->nodes[mi];
    mm->in[0] = cache_q[L.x];
    mm->in[1] = wq;
    mm->out[0] = acc;
    g->values[acc].producer = mi;
    if (st == 0 && cache_z[L.x] != 0 && (acc = shift_sums(g, g->nodes[i].name, acc, wq, cache_z[L.x], e)) < 0)
      goto done;
    /* the layer's node becomes the DequantizeRows writing its output */
    Node *dq = &g->nodes[i];
    snprintf(name, sizeof name, "%s.dequantize", dq->name);
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
    Attr *to = gpuc_arena_alloc(&g->arena, sizeof(Attr));
    const char *dname = gpuc_arena_strdup(&g->arena, name, strlen(name));
    if (!in || !to || !dname) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    in[0] = acc;
    in[1] = cache_s[L.x];
    in[2] = ws;
    in[3] = bias;
    *to = (Attr){.name = "to", .kind = GPUC_ATTR_INT, .i = gpuc_linear_onnx_float_type(ydt)};
    dq->op = GPUC_OP_DEQUANTIZEROWS;
    dq->name = dname;
    dq->in = in;
    dq->nin = bias >= 0 ? 4 : 3;
    dq->attrs = to;
    dq->nattr = 1;
    changes++;
  }
  if (changes && (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e))) goto done;
  if (changes && pass_dead_code(g, o, e) < 0) goto done; /* DequantizeLinears now unread */
  if (changes && o->level >= 2 && dequantize_after_reshape(g, e) < 0) goto done;
  rc = changes;
done:
  free(cache_q);
  free(cache_s);
  free(cache_z);
  return rc;
}

int pass_quantize_int8(Graph *g, const PassOptions *o, GpucErr *e) { return o->int8 ? rewrite(g, o, true, e) : 0; }
int pass_qdq_int8(Graph *g, const PassOptions *o, GpucErr *e) { return rewrite(g, o, false, e); }

void gpuc_int8_report(const Graph *g, const PassOptions *o, FILE *f) {
  int n8 = 0, nf = 0;
  for (int i = 0; i < g->nnodes; i++) n8 += g->nodes[i].op == GPUC_OP_MATMULINT8;
  if (!o->int8 && n8 == 0) return; /* a float model compiled as asked */
  for (int pass = 0; o->int8 && pass < 2; pass++)
    for (int i = 0; i < g->nnodes; i++) {
      LinearLayer L;
      const char *why = NULL;
      int k = classify(g, &g->nodes[i], o, &L, &why);
      if (k == 0) continue;
      if (pass == 0) { nf++; continue; }
      fprintf(f, "  int8: kept in float: %s (%s): %s\n", g->nodes[i].name, gpuc_op_name(&g->nodes[i]),
              k == 2 ? why : "not quantized");
    }
  if (n8 == 0) {
    fprintf(f, "  note: --int8: nothing was quantized: %s\n",
            nf ? "no Linear layer the int8 GEMM takes (above)"
               : "the model has no Linear layer (MatMul or Gemm with a constant 2-D weight)");
    return;
  }
  fprintf(f, "  int8 layers (%d, int8 x int8 -> int32 GEMMs):", n8);
  int col = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == GPUC_OP_MATMULINT8) {
      const Tensor *w = &g->values[g->nodes[i].in[1]].t;
      fprintf(f, "%s %s [%lldx%lld]", col++ % 4 ? "," : "\n   ", g->nodes[i].name, (long long)w->dims[1],
              (long long)w->dims[0]);
    }
  fprintf(f, "\n");
}
