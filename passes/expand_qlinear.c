/* QLinearMatMul, QLinearConv and ConvInteger (quantized models from
 * onnxruntime's quantize_static QOperator format and quantize_dynamic)
 * rewritten into ops the GPU lowers, with the reference's arithmetic
 * (runtime/ref/ref_qlinear.c):
 *
 *   QLinearMatMul(a, as, az, b, bs, bz, ys, yz) ->
 *     acc = MatMulInteger(a, b, az, bz)           int32, exact
 *     y   = QuantizeLinear(Cast<f32>(acc) * M, 1, yz)
 *   M[n] = (as * bs[n]) / ys, a compile-time f32 constant [N] or [1].
 *   matmulinteger_int8 (-O2) then puts the MatMulInteger on the int8 GEMM
 *   (s8 x s8 -> s32 with the u8 zero-point correction term) and the
 *   Cast + Mul into its DequantizeRows: every integer stays exact.
 *
 *   ConvInteger(x, w, xz, wz) -> Cast<int32>(Conv(x - xz, w - wz))
 *   QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B) ->
 *     QuantizeLinear(Conv(x - xz, w - wz, B) * M, 1, yz),  M[m] = xs ws[m] / ys
 *   The Conv is f32 on integer values (|x - xz| <= 255, w - wz made here
 *   as an f32 constant): products are exact, and so is every partial sum
 *   below 2^24 (K * 255 * max|w - wz| < 2^24 guarantees it; beyond, the
 *   sums carry f32 rounding, 2^-24 relative per addition). fp32 convs run
 *   FMA math on the GPU (no TF32). No int8 convolution: cuDNN 9's int8
 *   convs want NHWC int8 with C a multiple of 4 and an int8 or float
 *   output through its legacy INT8x4/INT8x32 configurations; the integer
 *   values in f32 are what gpuc's cuDNN f32 path already runs.
 *
 * The nodes made here carry the attribute gpuc_fp32 = 1: --fp16/--bf16
 * keep them in f32 (half would overflow on the int32 sums). Weights and
 * scales must be constants, zero points scalars (per tensor) except the
 * weight's (per output channel allowed); other nodes stay as they are
 * (the reference runs them; the GPU reports them unsupported). */
#include "linear_layers.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ONNX_FLOAT = 1, ONNX_INT32 = 6 };

typedef struct {
  Graph *g;
  GpucErr *e;
  char base[400];
} Ex;

static const Tensor *in_t(const Graph *g, const Node *n, int k) {
  return k < n->nin && n->in[k] >= 0 ? &g->values[n->in[k]].t : NULL;
}
static bool is_const(const Graph *g, const Node *n, int k) {
  return k < n->nin && n->in[k] >= 0 && g->values[n->in[k]].is_const && g->values[n->in[k]].t.data;
}
static bool scalar_or_absent(const Tensor *t) { return !t || gpuc_numel(t) == 1; }

/* Attributes `src` (n of them) plus gpuc_fp32 = 1 and, when to >= 0, to. */
static Attr *island_attrs(Ex *x, const Attr *src, int n, int to, int *nattr) {
  Attr *a = gpuc_arena_alloc(&x->g->arena, sizeof(Attr) * (size_t)(n + 2));
  if (!a) return NULL;
  for (int i = 0; i < n; i++) a[i] = src[i];
  a[n++] = (Attr){.name = "gpuc_fp32", .kind = GPUC_ATTR_INT, .i = 1};
  if (to >= 0) a[n++] = (Attr){.name = "to", .kind = GPUC_ATTR_INT, .i = to};
  *nattr = n;
  return a;
}

/* A new node op(in...) -> new value "<base>.<suffix>", in f32 islands. */
static int node(Ex *x, GpucOp op, const char *suffix, int nin, const int *in, int to, const Attr *attrs,
                int nattr) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", x->base, suffix);
  int y = gpuc_graph_add_value(x->g, name);
  int ni = y < 0 ? -1 : gpuc_graph_add_node(x->g, op, name, nin, 1);
  int na = 0;
  Attr *a = ni < 0 ? NULL : island_attrs(x, attrs, nattr, to, &na);
  if (!a) return gpuc_err_set(x->e, "%s: out of memory", x->g->path);
  Node *n = &x->g->nodes[ni];
  for (int k = 0; k < nin; k++) n->in[k] = in[k];
  n->out[0] = y;
  n->attrs = a;
  n->nattr = na;
  x->g->values[y].producer = ni;
  return y;
}

static int new_f32(Ex *x, const char *suffix, int rank, const int64_t *dims) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", x->base, suffix);
  return gpuc_linear_new_const(x->g, name, GPUC_DT_F32, rank, dims, x->e);
}

/* x - xz in f32 (input xi, zero point zi optional). */
static int shifted_input(Ex *x, int ni, int xi, int zi) {
  int v = x->g->nodes[ni].in[xi];
  int xf = node(x, GPUC_OP_CAST, "xf", 1, &v, ONNX_FLOAT, NULL, 0);
  const Node *n = &x->g->nodes[ni];
  if (xf < 0 || zi >= n->nin || n->in[zi] < 0) return xf;
  int z = n->in[zi], zf;
  if (is_const(x->g, n, zi)) {
    int64_t one = 1;
    if ((zf = new_f32(x, "xzf", 1, &one)) < 0) return -1;
    *(float *)x->g->values[zf].t.data = (float)gpuc_get_f64(&x->g->values[z].t, 0);
  } else if ((zf = node(x, GPUC_OP_CAST, "xzf", 1, &z, ONNX_FLOAT, NULL, 0)) < 0) {
    return -1;
  }
  return node(x, GPUC_OP_SUB, "xs", 2, (int[]){xf, zf}, -1, NULL, 0);
}

/* w - wz as an f32 constant of w's shape (wz per tensor or per channel). */
static int shifted_weight(Ex *x, int ni, int wi, int zi) {
  const Node *n = &x->g->nodes[ni];
  Tensor w = x->g->values[n->in[wi]].t;
  int v = new_f32(x, "wf", w.rank, w.dims);
  if (v < 0) return -1;
  n = &x->g->nodes[ni];
  const Tensor *wt = &x->g->values[n->in[wi]].t, *z = in_t(x->g, n, zi);
  int64_t M = wt->dims[0], per = M > 0 ? gpuc_numel(wt) / M : 0;
  float *o = x->g->values[v].t.data;
  for (int64_t i = 0; i < gpuc_numel(wt); i++) {
    int64_t zp = z ? (int64_t)gpuc_get_f64(z, gpuc_numel(z) == 1 ? 0 : i / per) : 0;
    o[i] = (float)(gpuc_get_i64(wt, i) - zp);
  }
  return v;
}

/* M[c] = (s1 * s2[c]) / s3 in f32, shaped [C] (rank 1) or [C, 1, ...]
 * (rank > 1: per conv channel). */
static int multiplier(Ex *x, const Tensor *s1, const Tensor *s2, const Tensor *s3, int64_t C, int rank) {
  int64_t dims[GPUC_MAX_RANK];
  dims[0] = C;
  for (int d = 1; d < rank; d++) dims[d] = 1;
  int v = new_f32(x, "mult", rank, dims);
  if (v < 0) return -1;
  float *m = x->g->values[v].t.data;
  for (int64_t c = 0; c < C; c++)
    m[c] = (float)gpuc_get_f64(s1, 0) * (float)gpuc_get_f64(s2, gpuc_numel(s2) == 1 ? 0 : c) /
           (float)gpuc_get_f64(s3, 0);
  return v;
}

/* Node ni becomes QuantizeLinear(v, 1, yz) writing its own output. */
static int to_quantize(Ex *x, int ni, int v, int yz) {
  int64_t one = 1;
  int s = new_f32(x, "one", 1, &one);
  int *in = gpuc_arena_alloc(&x->g->arena, sizeof(int) * 3);
  if (s < 0 || !in) return s < 0 ? -1 : gpuc_err_set(x->e, "%s: out of memory", x->g->path);
  *(float *)x->g->values[s].t.data = 1.0f;
  in[0] = v;
  in[1] = s;
  in[2] = yz;
  Node *n = &x->g->nodes[ni];
  n->op = GPUC_OP_QUANTIZELINEAR;
  n->in = in;
  n->nin = yz >= 0 ? 3 : 2;
  n->attrs = NULL;
  n->nattr = 0;
  return 0;
}

static int qlinear_matmul(Ex *x, int ni) {
  const Graph *g = x->g;
  const Node *n = &g->nodes[ni];
  const Tensor *b = in_t(g, n, 3), *y = &g->values[n->out[0]].t;
  if (!is_const(g, n, 1) || !is_const(g, n, 4) || !is_const(g, n, 6) || b->rank < 1 || y->rank < 1) return 1;
  int64_t N = y->dims[y->rank - 1];
  if (N < 0 || !scalar_or_absent(in_t(g, n, 1)) || !scalar_or_absent(in_t(g, n, 2)) ||
      !scalar_or_absent(in_t(g, n, 6)) || !scalar_or_absent(in_t(g, n, 7)))
    return 1;
  int64_t nb = gpuc_numel(in_t(g, n, 4));
  if (nb != 1 && nb != N) return 1;
  int mult = multiplier(x, in_t(g, n, 1), in_t(g, n, 4), in_t(g, n, 6), nb, 1);
  if (mult < 0) return -1;
  n = &x->g->nodes[ni];
  int in[4] = {n->in[0], n->in[3], n->nin > 2 ? n->in[2] : -1, n->nin > 5 ? n->in[5] : -1};
  /* MatMulInteger without the island attribute: matmulinteger_int8 takes it */
  char name[512];
  snprintf(name, sizeof name, "%s.acc", x->base);
  int acc = gpuc_graph_add_value(x->g, name);
  int mi = acc < 0 ? -1 : gpuc_graph_add_node(x->g, GPUC_OP_MATMULINTEGER, x->base, 4, 1);
  if (mi < 0) return gpuc_err_set(x->e, "%s: out of memory", x->g->path);
  for (int k = 0; k < 4; k++) x->g->nodes[mi].in[k] = in[k];
  x->g->nodes[mi].out[0] = acc;
  x->g->values[acc].producer = mi;
  int accf = node(x, GPUC_OP_CAST, "accf", 1, &acc, ONNX_FLOAT, NULL, 0);
  int scaled = accf < 0 ? -1 : node(x, GPUC_OP_MUL, "scaled", 2, (int[]){accf, mult}, -1, NULL, 0);
  if (scaled < 0) return -1;
  n = &x->g->nodes[ni];
  return to_quantize(x, ni, scaled, n->nin > 7 ? n->in[7] : -1);
}

/* ConvInteger (quantized = false) or QLinearConv. */
static int conv(Ex *x, int ni, bool quantized) {
  const Graph *g = x->g;
  const Node *n = &g->nodes[ni];
  int wi = quantized ? 3 : 1, xzi = 2, wzi = quantized ? 5 : 3;
  const Tensor *w = in_t(g, n, wi);
  if (!is_const(g, n, wi) || !w || w->rank < 3 || (in_t(g, n, wzi) && !is_const(g, n, wzi)) ||
      !scalar_or_absent(in_t(g, n, xzi)))
    return 1;
  if (quantized && (!is_const(g, n, 1) || !is_const(g, n, 4) || !is_const(g, n, 6) ||
                    (in_t(g, n, 8) && !is_const(g, n, 8)) || !scalar_or_absent(in_t(g, n, 7))))
    return 1;
  int64_t M = w->dims[0];
  int rank = w->rank;
  int xs = shifted_input(x, ni, 0, xzi);
  int wf = xs < 0 ? -1 : shifted_weight(x, ni, wi, wzi);
  if (wf < 0) return -1;
  int bf = -1;
  n = &x->g->nodes[ni];
  if (quantized && in_t(x->g, n, 8)) {
    if ((bf = new_f32(x, "bf", 1, &M)) < 0) return -1;
    n = &x->g->nodes[ni];
    for (int64_t m = 0; m < M; m++)
      ((float *)x->g->values[bf].t.data)[m] = (float)gpuc_get_i64(in_t(x->g, n, 8), m);
  }
  n = &x->g->nodes[ni];
  int cin[3] = {xs, wf, bf};
  int y = node(x, GPUC_OP_CONV, "conv", bf >= 0 ? 3 : 2, cin, -1, n->attrs, n->nattr);
  if (y < 0) return -1;
  n = &x->g->nodes[ni];
  if (!quantized) { /* the node becomes Cast<int32>(y) */
    int *in = gpuc_arena_alloc(&x->g->arena, sizeof(int));
    int na = 0;
    Attr *a = in ? island_attrs(x, NULL, 0, ONNX_INT32, &na) : NULL;
    if (!a) return gpuc_err_set(x->e, "%s: out of memory", x->g->path);
    in[0] = y;
    Node *c = &x->g->nodes[ni];
    c->op = GPUC_OP_CAST;
    c->in = in;
    c->nin = 1;
    c->attrs = a;
    c->nattr = na;
    return 0;
  }
  int mult = multiplier(x, in_t(x->g, n, 1), in_t(x->g, n, 4), in_t(x->g, n, 6), M, rank - 1);
  int scaled = mult < 0 ? -1 : node(x, GPUC_OP_MUL, "scaled", 2, (int[]){y, mult}, -1, NULL, 0);
  if (scaled < 0) return -1;
  n = &x->g->nodes[ni];
  return to_quantize(x, ni, scaled, n->nin > 7 ? n->in[7] : -1);
}

/* ConvInteger's int32 sums are read by quantize_dynamic's scale chain,
 * Mul(Cast<float>(y), scale): those Casts and Muls join the f32 islands,
 * so under --fp16 the sums are scaled before anything is stored as half
 * (a Cast of the sums to half would overflow). mark[v]: 1 for a rewritten
 * ConvInteger's output, 2 for a Cast of one to float. */
static int island_readers(Graph *g, char *mark, GpucErr *e) {
  Ex x = {.g = g, .e = e};
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    if (n->nin < 1 || n->out[0] < 0 || gpuc_attr_i(n, "gpuc_fp32", 0) == 1) continue;
    int want = n->op == GPUC_OP_CAST ? 1 : n->op == GPUC_OP_MUL ? 2 : 0, hit = 0;
    for (int k = 0; want && k < n->nin; k++) hit |= n->in[k] >= 0 && mark[n->in[k]] == want;
    if (!hit || (want == 1 && gpuc_attr_i(n, "to", 0) != ONNX_FLOAT)) continue;
    int na = 0;
    Attr *a = island_attrs(&x, n->attrs, n->nattr, -1, &na);
    if (!a) return gpuc_err_set(e, "%s: out of memory", g->path);
    n = &g->nodes[i];
    n->attrs = a;
    n->nattr = na;
    if (want == 1) mark[n->out[0]] = 2;
  }
  return 0;
}

int pass_expand_qlinear(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0;
  char *mark = calloc((size_t)g->nvalues + 1, 1);
  if (!mark) return gpuc_err_set(e, "%s: out of memory", g->path);
  for (int i = 0; i < nn; i++) {
    GpucOp op = g->nodes[i].op;
    if (op != GPUC_OP_QLINEARMATMUL && op != GPUC_OP_QLINEARCONV && op != GPUC_OP_CONVINTEGER) continue;
    if (g->nodes[i].out[0] < 0 || !gpuc_shape_known(&g->values[g->nodes[i].out[0]].t)) continue;
    Ex x = {.g = g, .e = e};
    snprintf(x.base, sizeof x.base, "%s", g->nodes[i].name);
    int rc = op == GPUC_OP_QLINEARMATMUL ? qlinear_matmul(&x, i) : conv(&x, i, op == GPUC_OP_QLINEARCONV);
    if (rc < 0) { free(mark); return -1; }
    if (rc == 0) changes++;
    if (rc == 0 && op == GPUC_OP_CONVINTEGER) mark[g->nodes[i].out[0]] = 1; /* an original value */
  }
  int rc = changes && (gpuc_graph_toposort(g, e) || island_readers(g, mark, e) || gpuc_graph_infer(g, e));
  free(mark);
  return rc ? -1 : changes;
}
