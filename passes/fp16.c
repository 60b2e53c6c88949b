/* --fp16 / --bf16: half-precision storage with fp32 islands, decided at
 * compile time. The half type is float16 (--fp16) or bfloat16 (--bf16: the
 * same policy; bf16 keeps fp32's exponent range, so activations that
 * overflow fp16's 65504, as T5's do, stay finite, at 8 bits of mantissa).
 *
 * Every float32 value becomes half except where half loses too much or
 * overflows: reductions (sums of many terms), Pow/Exp/Log, cumulative sums,
 * losses, determinants, ops whose float outputs are fixed by attributes, and the
 * arithmetic that computes a GridSample's sampling grid. Those
 * "fp32 islands" read fp32 inputs and write fp32 outputs, with Cast nodes
 * inserted at the borders. Graph inputs and outputs stay fp32 (the user's
 * interface does not change). Kernels still compute in fp32 registers
 * (half is a storage format for them: softmax and LayerNorm statistics
 * accumulate in fp32), and GEMMs/convolutions accumulate in fp32.
 * AddLayerNormalization is no island either, like LayerNormalization: its
 * kernel forms A + B and the statistics in fp32 from half A and B. */
#include "passes.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ONNX_FLOAT = 1, ONNX_FLOAT16 = 10, ONNX_BFLOAT16 = 16 };

static bool fp32_island(GpucOp op) {
  switch (op) {
  case GPUC_OP_REDUCESUM: case GPUC_OP_REDUCEMEAN: case GPUC_OP_REDUCESUMSQUARE:
  case GPUC_OP_REDUCEL1: case GPUC_OP_REDUCEL2: case GPUC_OP_REDUCELOGSUM:
  case GPUC_OP_REDUCELOGSUMEXP: case GPUC_OP_REDUCEPROD:
  case GPUC_OP_POW: case GPUC_OP_EXP: case GPUC_OP_LOG: case GPUC_OP_CUMSUM:
  case GPUC_OP_SOFTMAXCROSSENTROPYLOSS: case GPUC_OP_NEGATIVELOGLIKELIHOODLOSS:
  case GPUC_OP_CONSTANTOFSHAPE: case GPUC_OP_EYELIKE: case GPUC_OP_RANGE:
  case GPUC_OP_QUANTIZELINEAR: case GPUC_OP_DYNAMICQUANTIZELINEAR: case GPUC_OP_EINSUM:
  case GPUC_OP_MEANVARIANCENORMALIZATION: case GPUC_OP_LRN:
  /* recurrences: the state is carried through every step (an fp32 state
   * and fp32 GEMMs, codegen/lower_rnn.c) */
  case GPUC_OP_LSTM: case GPUC_OP_GRU: case GPUC_OP_RNN:
  /* a determinant is a product of M pivots: past half's range as soon as
   * the matrices are a little large or scaled */
  case GPUC_OP_DET:
  /* sampling coordinates (coord_nodes, below) */
  case GPUC_OP_AFFINEGRID:
  /* training (gpuc train --amp): the loss gradient reads the loss scale
   * (2^16 and up, past half's range); batch statistics and their gradient
   * are sums over the batch */
  case GPUC_OP_SOFTMAXCROSSENTROPYLOSSGRAD: case GPUC_OP_BATCHNORMGRAD:
    return true;
  default:
    return false;
  }
}

/* Reductions whose island reads the half input itself (attribute
 * gpuc_out_f32, ir/infer_reduce.c): their kernels and the reference
 * accumulate in fp32 (double) whatever the input, and half -> f32 is
 * exact, so the values are those of a Cast then the reduction, without
 * the Cast's f32 copy of the whole input (GRN's norms over H, W). The
 * output stays f32. */
static bool reads_half(GpucOp op) {
  switch (op) {
  case GPUC_OP_REDUCESUM: case GPUC_OP_REDUCEMEAN: case GPUC_OP_REDUCESUMSQUARE:
  case GPUC_OP_REDUCEL1: case GPUC_OP_REDUCEL2:
    return true;
  default:
    return false;
  }
}

static int mark_out_f32(Graph *g, Node *n, GpucErr *e) {
  if (gpuc_attr(n, "gpuc_out_f32")) return 0;
  Attr *a = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 1));
  if (!a) return gpuc_err_set(e, "%s: out of memory", g->path);
  memcpy(a, n->attrs, sizeof(Attr) * (size_t)n->nattr);
  a[n->nattr] = (Attr){.name = "gpuc_out_f32", .kind = GPUC_ATTR_INT, .i = 1};
  n->attrs = a;
  n->nattr++;
  return 0;
}

/* Inputs that are parameters read at compile time, not data: keep them. */
static bool param_input(GpucOp op, int k) {
  return (op == GPUC_OP_RESIZE || op == GPUC_OP_UPSAMPLE) && k >= 1;
}

/* Inputs read as f32 whatever the node's precision: DequantizeRows'
 * scales (its output follows the policy, its math is f32), GridSample's
 * grid (coordinates: X and Y follow the policy). */
static bool f32_input(GpucOp op, int k) {
  return (op == GPUC_OP_DEQUANTIZEROWS && (k == 1 || k == 2)) || (op == GPUC_OP_GRIDSAMPLE && k == 1);
}

/* Ops that compute sampling coordinates from coordinates: the arithmetic
 * and reshaping between a grid's source (a GEMM's theta, a conv's flow, a
 * constant base grid) and GridSample. */
static bool coord_op(GpucOp op) {
  switch (op) {
  case GPUC_OP_ADD: case GPUC_OP_SUB: case GPUC_OP_MUL: case GPUC_OP_DIV: case GPUC_OP_NEG:
  case GPUC_OP_CLIP: case GPUC_OP_WHERE: case GPUC_OP_REDUCESUM: case GPUC_OP_AFFINEGRID:
  case GPUC_OP_TRANSPOSE: case GPUC_OP_RESHAPE: case GPUC_OP_FLATTEN: case GPUC_OP_SQUEEZE:
  case GPUC_OP_UNSQUEEZE: case GPUC_OP_CONCAT: case GPUC_OP_SLICE: case GPUC_OP_SPLIT:
  case GPUC_OP_EXPAND: case GPUC_OP_IDENTITY:
    return true;
  default:
    return false;
  }
}

/* Nodes that compute a GridSample's grid: the coord_op nodes it reaches
 * walking producers back from the grid input. They stay fp32 (fp32 in,
 * fp32 out): a grid offset by half's 2^-11 relative error is (size / 2) *
 * 2^-11 pixels off (0.008 px at 32 wide, 0.25 px at 1024), an error every
 * sampled value then carries; bf16 is 8x worse. What the walk stops at (a
 * GEMM, a conv) stays half: its output is an offset or matrix, whose
 * relative error moves a point by a small part of that offset. NULL when
 * out of memory. */
static bool *coord_nodes(const Graph *g) {
  bool *mark = calloc((size_t)g->nnodes + 1, 1);
  int *stack = malloc(sizeof(int) * ((size_t)g->nnodes + 1));
  if (!mark || !stack) { free(mark); free(stack); return NULL; }
  int top = 0;
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i].op != GPUC_OP_GRIDSAMPLE || g->nodes[i].nin < 2 || g->nodes[i].in[1] < 0) continue;
    int p = g->values[g->nodes[i].in[1]].producer;
    if (p >= 0 && !mark[p] && coord_op(g->nodes[p].op)) mark[p] = true, stack[top++] = p;
    while (top) {
      const Node *n = &g->nodes[stack[--top]];
      for (int k = 0; k < n->nin; k++) {
        int q = n->in[k] < 0 ? -1 : g->values[n->in[k]].producer;
        if (q >= 0 && !mark[q] && coord_op(g->nodes[q].op)) mark[q] = true, stack[top++] = q;
      }
    }
  }
  free(stack);
  return mark;
}

typedef struct {
  Graph *g;
  GpucDType half;                /* GPUC_DT_F16 or GPUC_DT_BF16 */
  int *casth, *cast32;           /* per value: its converted twin, or -1 */
  GpucErr *e;
} Fp16;

static bool is_f(GpucDType dt, GpucDType half) { return dt == GPUC_DT_F32 || dt == half; }

static int onnx_type(GpucDType dt) {
  return dt == GPUC_DT_F16 ? ONNX_FLOAT16 : dt == GPUC_DT_BF16 ? ONNX_BFLOAT16 : ONNX_FLOAT;
}

/* A constant's element as half. A nonzero value that would round to zero
 * in fp16 (|x| < 2^-25) becomes fp16's smallest subnormal, 2^-24, with its
 * sign: an epsilon that guards a division (F.normalize's clamp_min(1e-12),
 * exported as Clip/Max) must stay nonzero, or a zero row's 0 / max(0, eps)
 * is 0/0 = NaN. PyTorch's own .half() model does exactly that on
 * swin_v2_t's zero-padded windows; onnxconverter-common's float16
 * converter clamps constants the same way. bf16 has fp32's exponent range.
 * Overflow is left alone: masks' -inf and float-min fills mean -inf. */
static double half_constant(double x, GpucDType dt) {
  const double tiny = 5.9604644775390625e-08; /* 2^-24 */
  if (dt == GPUC_DT_F16 && x != 0 && fabs(x) <= tiny / 2) return x < 0 ? -tiny : tiny;
  return x;
}

/* A value holding v converted to dt: constants convert their data once;
 * computed values get a Cast node (placed by the final toposort). */
static int converted(Fp16 *s, int v, GpucDType dt) {
  int *cache = dt == s->half ? s->casth : s->cast32;
  if (cache[v] >= 0) return cache[v];
  Graph *g = s->g;
  char name[512];
  snprintf(name, sizeof name, "%s.%s", g->values[v].name, gpuc_dtype_name(dt));
  int w = gpuc_graph_add_value(g, name);
  if (w < 0) { gpuc_err_set(s->e, "%s: out of memory", g->path); return -1; }
  Value *src = &g->values[v], *dst = &g->values[w];
  dst->t = src->t;
  dst->t.data = NULL;
  dst->t.dt = dt;
  if (src->is_const) {
    if (gpuc_tensor_alloc(&dst->t, s->e)) return -1;
    int64_t n = gpuc_numel(&src->t);
    for (int64_t i = 0; i < n; i++) gpuc_set_f64(&dst->t, i, half_constant(gpuc_get_f64(&src->t, i), dt));
    dst->is_const = true;
    dst->is_param = src->is_param;
  } else {
    int ni = gpuc_graph_add_node(g, GPUC_OP_CAST, name, 1, 1);
    if (ni < 0) { gpuc_err_set(s->e, "%s: out of memory", g->path); return -1; }
    Node *n = &g->nodes[ni];
    n->in[0] = v;
    n->out[0] = w;
    n->nattr = 1;
    n->attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr));
    if (!n->attrs) { gpuc_err_set(s->e, "%s: out of memory", g->path); return -1; }
    n->attrs[0] = (Attr){.name = "to", .kind = GPUC_ATTR_INT,
                         .i = onnx_type(dt)};
    g->values[w].producer = ni;
  }
  cache[v] = w;
  return w;
}

int pass_fp16(Graph *g, const PassOptions *o, GpucErr *e) {
  int nv = g->nvalues, changes = 0, nn = g->nnodes;
  GpucDType half = o->bf16 ? GPUC_DT_BF16 : GPUC_DT_F16;
  Fp16 s = {.g = g, .e = e, .half = half};
  /* values may be added: size the caches for the worst case */
  int cap = nv * 3 + 16;
  s.casth = malloc(sizeof(int) * (size_t)cap);
  s.cast32 = malloc(sizeof(int) * (size_t)cap);
  if (!s.casth || !s.cast32) { free(s.casth); free(s.cast32); return gpuc_err_set(e, "%s: out of memory", g->path); }
  for (int i = 0; i < cap; i++) s.casth[i] = s.cast32[i] = -1;
  int rc = -1;
  /* the model's own output dtypes are the interface: remember them */
  GpucDType *out_dt = malloc(sizeof(GpucDType) * ((size_t)g->noutputs + 1));
  if (!out_dt) { free(s.casth); free(s.cast32); return gpuc_err_set(e, "%s: out of memory", g->path); }
  for (int k = 0; k < g->noutputs; k++) out_dt[k] = g->values[g->outputs[k]].t.dt;
  bool *coord = coord_nodes(g);
  if (!coord) { free(out_dt); free(s.casth); free(s.cast32); return gpuc_err_set(e, "%s: out of memory", g->path); }
  for (int i = 0; i < nn; i++) {
    GpucOp op = g->nodes[i].op;
    /* BatchNormalization in training mode (running statistics out) too */
    bool bn_train = op == GPUC_OP_BATCHNORMALIZATION && g->nodes[i].nout > 1;
    /* gpuc_fp32: nodes a pass made to hold exact integer sums in f32
     * (passes/expand_qlinear.c) */
    bool keep = gpuc_attr_i(&g->nodes[i], "gpuc_fp32", 0) == 1;
    GpucDType want = fp32_island(op) || bn_train || keep || coord[i] ? GPUC_DT_F32 : half;
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0 || !is_f(g->values[v].t.dt, half) || param_input(op, k)) continue;
      if (op == GPUC_OP_CAST) continue; /* Cast converts whatever it gets */
      GpucDType want_k = f32_input(op, k) ? GPUC_DT_F32 : want;
      if (g->values[v].t.dt == want_k) continue;
      if (k == 0 && want == GPUC_DT_F32 && reads_half(op) && g->values[v].t.dt == half) {
        if (mark_out_f32(g, &g->nodes[i], e)) goto done;
        continue;
      }
      if (g->nvalues + 2 >= cap) { gpuc_err_set(e, "%s: %s pass: too many casts", g->path, o->bf16 ? "bf16" : "fp16"); goto done; }
      int w = converted(&s, v, want_k);
      if (w < 0) goto done;
      g->nodes[i].in[k] = w;
      changes++;
    }
    /* outputs follow the node's precision */
    Node *n = &g->nodes[i];
    /* an Attention's causal_fill is the value its mask had above the
     * diagonal (passes/causal_mask.c): rounded as that mask's constant
     * would have been (PyTorch's float min is -inf in f16 and bf16) */
    const Attr *fill = op == GPUC_OP_ATTENTION && want == half ? gpuc_attr(n, "causal_fill") : NULL;
    if (fill && fill->kind == GPUC_ATTR_FLOAT) {
      float f = fill->f;
      f = half == GPUC_DT_BF16 ? gpuc_bf16_to_f32(gpuc_f32_to_bf16(f)) : gpuc_f16_to_f32(gpuc_f32_to_f16(f));
      ((Attr *)fill)->f = f;
    }
    if ((op == GPUC_OP_CAST && !keep) || (op == GPUC_OP_DEQUANTIZEROWS && want == half)) {
      Attr *to = (Attr *)gpuc_attr(n, "to");
      if (to && to->kind == GPUC_ATTR_INT && to->i == ONNX_FLOAT) { to->i = onnx_type(half); changes++; }
    }
    for (int k = 0; k < n->nout; k++) {
      int v = n->out[k];
      if (v >= 0 && g->values[v].t.dt == GPUC_DT_F32 && want == half && op != GPUC_OP_SHAPE &&
          op != GPUC_OP_SIZE)
        g->values[v].t.dt = half;
    }
  }
  /* graph outputs keep the model's dtype: where an fp32 output became
   * half, the producer writes a half twin and a Cast writes the output */
  for (int k = 0; k < g->noutputs; k++) {
    int v = g->outputs[k];
    if (out_dt[k] != GPUC_DT_F32 || g->values[v].t.dt != half || g->values[v].producer < 0)
      continue;
    char name[512];
    snprintf(name, sizeof name, "%s.%s", g->values[v].name, gpuc_dtype_name(half));
    int w = gpuc_graph_add_value(g, name);
    int ni = w < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_CAST, name, 1, 1);
    if (ni < 0) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    int p = g->values[v].producer;
    for (int j = 0; j < g->nodes[p].nout; j++)
      if (g->nodes[p].out[j] == v) g->nodes[p].out[j] = w;
    /* other consumers of v read the half twin */
    for (int j = 0; j < g->nnodes; j++)
      for (int q = 0; q < g->nodes[j].nin; q++)
        if (g->nodes[j].in[q] == v) g->nodes[j].in[q] = w;
    g->values[w].t = g->values[v].t;
    g->values[w].producer = p;
    Node *c = &g->nodes[ni];
    c->in[0] = w;
    c->out[0] = v;
    c->nattr = 1;
    c->attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr));
    if (!c->attrs) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    c->attrs[0] = (Attr){.name = "to", .kind = GPUC_ATTR_INT, .i = ONNX_FLOAT};
    g->values[v].producer = ni;
    g->values[v].t.dt = GPUC_DT_F32;
    changes++;
  }
  if (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e)) goto done;
  rc = changes;
done:
  free(coord);
  free(out_dt);
  free(s.casth);
  free(s.cast32);
  return rc;
}
