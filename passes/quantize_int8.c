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
 * cannot take (say why: gpuc_int8_report). */
#include "passes.h"
#include "quant_int8.h"
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ONNX_FLOAT = 1, ONNX_FLOAT16 = 10, ONNX_BFLOAT16 = 16 };

/* A Linear layer's parts; w_t: W is stored [N, K] (Gemm transB). */
typedef struct {
  int x, w, bias;                /* values; bias -1 if none */
  int64_t k, n;
  bool w_t;
  float alpha, beta;             /* Gemm's; 1 otherwise */
} Linear;

static bool is_float(GpucDType dt) { return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16; }

/* A constant holding n values along its last dim ([N] or [1,..,1,N]). */
static bool const_row(const Value *v, int64_t n) {
  const Tensor *t = &v->t;
  if (!v->is_const || !t->data || !is_float(t->dt) || t->rank < 1) return false;
  for (int i = 0; i + 1 < t->rank; i++)
    if (t->dims[i] != 1) return false;
  return t->dims[t->rank - 1] == n;
}

/* True when any comma-separated glob of `skip` matches `name`. */
static bool skipped(const char *skip, const char *name) {
  if (!skip) return false;
  char pat[512];
  for (const char *p = skip; *p;) {
    size_t l = strcspn(p, ",");
    if (l > 0 && l < sizeof pat) {
      memcpy(pat, p, l);
      pat[l] = 0;
      if (fnmatch(pat, name, 0) == 0) return true;
    }
    p += l;
    if (*p == ',') p++;
  }
  return false;
}

/* 0: not a Linear layer; 1: a Linear layer the int8 path takes (*L set);
 * 2: a Linear layer kept in float, *why says why. */
static int classify(const Graph *g, const Node *nd, const PassOptions *o, Linear *L, const char **why) {
  if (nd->op != GPUC_OP_MATMUL && nd->op != GPUC_OP_GEMM && nd->op != GPUC_OP_MATMULBIAS) return 0;
  if (nd->nin < 2 || nd->in[0] < 0 || nd->in[1] < 0 || nd->out[0] < 0) return 0;
  const Value *w = &g->values[nd->in[1]];
  if (!w->is_const || !w->t.data || w->t.rank != 2 || !is_float(w->t.dt)) return 0;
  const Tensor *x = &g->values[nd->in[0]].t, *y = &g->values[nd->out[0]].t;
  bool gemm = nd->op == GPUC_OP_GEMM;
  *L = (Linear){.x = nd->in[0], .w = nd->in[1], .bias = -1, .alpha = 1, .beta = 1};
  L->w_t = gemm && gpuc_attr_i(nd, "transB", 0);
  L->k = L->w_t ? w->t.dims[1] : w->t.dims[0];
  L->n = L->w_t ? w->t.dims[0] : w->t.dims[1];
  if (skipped(o->int8_skip, nd->name)) { *why = "matches --int8-skip"; return 2; }
  if (!is_float(x->dt) || !is_float(y->dt)) { *why = "input or output is not f32/f16/bf16"; return 2; }
  if (x->rank < 1 || x->dims[x->rank - 1] != L->k) { *why = "input rows of unknown length"; return 2; }
  if (gemm && gpuc_attr_i(nd, "transA", 0)) { *why = "Gemm with transA"; return 2; }
  if (L->k % 4 || L->n % 4) { *why = "K or N not a multiple of 4 (cuBLASLt's int8 GEMM)"; return 2; }
  if (L->k > GPUC_Q8_MAX_K) { *why = "K too large for exact int32 sums"; return 2; }
  if (nd->op == GPUC_OP_MATMULBIAS) L->bias = nd->in[2];
  if (gemm) {
    L->alpha = gpuc_attr_f(nd, "alpha", 1.0f);
    L->beta = gpuc_attr_f(nd, "beta", 1.0f);
    if (nd->nin > 2 && nd->in[2] >= 0 && L->beta != 0) {
      if (!const_row(&g->values[nd->in[2]], L->n)) { *why = "Gemm's C is not a constant row of N values"; return 2; }
      L->bias = nd->in[2];
    }
  }
  return 1;
}

/* A new constant value named `name` of dtype dt and shape dims. */
static int new_const(Graph *g, const char *name, GpucDType dt, int rank, const int64_t *dims, GpucErr *e) {
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_set_shape(&g->values[v].t, dt, rank, dims);
  if (gpuc_tensor_alloc(&g->values[v].t, e)) return -1;
  g->values[v].is_const = true;
  return v;
}

/* Wq [N, K] int8 and ws [N] f32 (alpha folded in) from W. */
static int quantize_weight(Graph *g, const Node *nd, const Linear *L, int *wq, int *ws, GpucErr *e) {
  char name[512];
  int64_t dq[2] = {L->n, L->k}, n = L->n, k = L->k;
  snprintf(name, sizeof name, "%s.wq", nd->name);
  if ((*wq = new_const(g, name, GPUC_DT_I8, 2, dq, e)) < 0) return -1;
  snprintf(name, sizeof name, "%s.wscale", nd->name);
  if ((*ws = new_const(g, name, GPUC_DT_F32, 1, &n, e)) < 0) return -1;
  const Tensor *w = &g->values[L->w].t;
  int8_t *q = g->values[*wq].t.data;
  float *s = g->values[*ws].t.data;
  for (int64_t o = 0; o < n; o++) {
    /* element (k, o) of the [K, N] weight W (or of W^T when stored [N, K]) */
#define W_AT(j) ((float)gpuc_get_f64(w, L->w_t ? o * k + (j) : (j) * n + o))
    float m = 0.0f;
    for (int64_t j = 0; j < k; j++) m = fmaxf(m, fabsf(W_AT(j)));
    float inv = gpuc_q8_inv(m);
    for (int64_t j = 0; j < k; j++) q[o * k + j] = gpuc_q8(W_AT(j), inv);
#undef W_AT
    s[o] = gpuc_q8_scale(m) * L->alpha;
  }
  return 0;
}

/* Gemm's C times beta, when beta is not 1 (as f32). */
static int scaled_bias(Graph *g, const Node *nd, const Linear *L, GpucErr *e) {
  if (L->bias < 0 || L->beta == 1.0f) return L->bias;
  char name[512];
  snprintf(name, sizeof name, "%s.bias", nd->name);
  int64_t n = L->n;
  int b = new_const(g, name, GPUC_DT_F32, 1, &n, e);
  if (b < 0) return -1;
  for (int64_t o = 0; o < n; o++)
    gpuc_set_f64(&g->values[b].t, o, (double)((float)gpuc_get_f64(&g->values[L->bias].t, o) * L->beta));
  return b;
}

static int onnx_float_type(GpucDType dt) {
  return dt == GPUC_DT_F16 ? ONNX_FLOAT16 : dt == GPUC_DT_BF16 ? ONNX_BFLOAT16 : ONNX_FLOAT;
}

/* X's QuantizeRows outputs, made once per X (cache: per value, -1 = none). */
static int quantize_rows(Graph *g, int x, int *cache_q, int *cache_s, GpucErr *e) {
  if (cache_q[x] >= 0) return 0;
  char name[512];
  snprintf(name, sizeof name, "%s.q8", g->values[x].name);
  int q = gpuc_graph_add_value(g, name);
  snprintf(name, sizeof name, "%s.q8scale", g->values[x].name);
  int s = q < 0 ? -1 : gpuc_graph_add_value(g, name);
  snprintf(name, sizeof name, "%s.quantize", g->values[x].name);
  int ni = s < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_QUANTIZEROWS, name, 1, 2);
  if (ni < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  Node *qn = &g->nodes[ni];
  qn->in[0] = x;
  qn->out[0] = q;
  qn->out[1] = s;
  g->values[q].producer = g->values[s].producer = ni;
  cache_q[x] = q;
  cache_s[x] = s;
  return 0;
}

int pass_quantize_int8(Graph *g, const PassOptions *o, GpucErr *e) {
  if (!o->int8) return 0;
  int nn = g->nnodes, changes = 0, rc = -1;
  /* values grow by 4 per layer and 2 per distinct X at most */
  int cap = g->nvalues + 6 * nn + 16;
  int *cache_q = malloc(sizeof(int) * (size_t)cap), *cache_s = malloc(sizeof(int) * (size_t)cap);
  if (!cache_q || !cache_s) { free(cache_q); free(cache_s); return gpuc_err_set(e, "%s: out of memory", g->path); }
  for (int i = 0; i < cap; i++) cache_q[i] = cache_s[i] = -1;
  for (int i = 0; i < nn; i++) {
    Linear L;
    const char *why = NULL;
    if (classify(g, &g->nodes[i], o, &L, &why) != 1) continue;
    int wq, ws, y = g->nodes[i].out[0];
    GpucDType ydt = g->values[y].t.dt;
    if (quantize_weight(g, &g->nodes[i], &L, &wq, &ws, e)) goto done;
    int bias = scaled_bias(g, &g->nodes[i], &L, e);
    if (L.bias >= 0 && bias < 0) goto done;
    if (quantize_rows(g, L.x, cache_q, cache_s, e)) goto done;
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
    *to = (Attr){.name = "to", .kind = GPUC_ATTR_INT, .i = onnx_float_type(ydt)};
    dq->op = GPUC_OP_DEQUANTIZEROWS;
    dq->name = dname;
    dq->in = in;
    dq->nin = bias >= 0 ? 4 : 3;
    dq->attrs = to;
    dq->nattr = 1;
    changes++;
  }
  if (changes && (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e))) goto done;
  rc = changes;
done:
  free(cache_q);
  free(cache_s);
  return rc;
}

void gpuc_int8_report(const Graph *g, const PassOptions *o, FILE *f) {
  int n8 = 0, nf = 0;
  for (int i = 0; i < g->nnodes; i++) n8 += g->nodes[i].op == GPUC_OP_MATMULINT8;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < g->nnodes; i++) {
      Linear L;
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
