/* Conv (+ residual Add) + Relu -> FusedConv, which cuDNN runs as one
 * cudnnConvolutionBiasActivationForward: the convolution's output is
 * written once instead of read and written by two or three more kernels.
 * The Conv gets a zero bias if it has none (cuDNN's fused call needs one).
 * Conditions: the Conv's output (and the Add's, when fused) is read by
 * exactly one node and is not a graph output; the residual has the
 * output's shape and dtype.
 *
 * Then a projection shortcut's bias moves into its consumer's (see
 * fold_shortcut_bias). */
#include "passes.h"
#include "conv_act.h"
#include "linear_layers.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The one node reading v (and at which input), or -1. Reader counts are
 * of the graph before this pass: nodes are visited in order, so a fusion
 * only ever absorbs nodes after the Conv, whose readers are not yet
 * rewired; a reader already absorbed is refused all the same. */
static int only_consumer(const Graph *g, const int *readers, const int *last, const bool *drop, int v,
                         int *slot) {
  if (readers[v] != 1 || g->values[v].is_output || drop[last[v]]) return -1;
  const Node *n = &g->nodes[last[v]];
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] == v) { *slot = k; return last[v]; }
  return -1;
}

static bool same_type(const Tensor *a, const Tensor *b) {
  if (a->dt != b->dt || a->rank != b->rank || !gpuc_shape_known(a)) return false;
  return !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

/* ResNet's projection shortcut A = Conv(x, WA, bA) (or an NHWC FusedConv
 * with activation 0 and no residual), read only as the residual Z of one
 * FusedConv B = relu(conv(y, WB) + bB + Z):
 *   relu(conv_B + bB + (conv_A + bA)) = relu(conv_B + (bB + bA) + conv_A).
 * B gets a new constant bias bB + bA ([K] both; bA alone if B has none)
 * and A none: A is then the plain cuDNN convolution, without the generated
 * bias kernel that read and wrote its whole output (codegen/lower_conv.c).
 * Not for a bias being trained (PassOptions.training): it must stay the
 * one tensor the optimizer updates. Returns the number folded, or -1. */
static int fold_shortcut_bias(Graph *g, bool training, GpucErr *e) {
  int folded = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_graph_count_readers(g, readers, NULL);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *b = &g->nodes[i];
    if (b->op != GPUC_OP_FUSEDCONV || b->nin < 4 || b->in[3] < 0 || b->in[1] < 0) continue;
    int z = b->in[3], p = g->values[z].producer;
    if (p < 0 || readers[z] != 1 || g->values[z].is_output) continue;
    const Node *a = &g->nodes[p];
    bool plain = a->op == GPUC_OP_CONV, bare = a->op == GPUC_OP_FUSEDCONV &&
                 gpuc_attr_i(a, "activation", 0) == 0 && (a->nin < 4 || a->in[3] < 0);
    if ((!plain && !bare) || a->nin < 3 || a->in[2] < 0 || a->out[0] != z) continue;
    int ba = a->in[2], bb = b->in[2];
    const Value *va = &g->values[ba], *vb = bb >= 0 ? &g->values[bb] : NULL;
    int64_t k = g->values[b->in[1]].t.dims[0];
    if (!va->is_const || !va->t.data || va->t.rank != 1 || va->t.dims[0] != k || !gpuc_dtype_is_float(va->t.dt))
      continue;
    if (vb && (!vb->is_const || !vb->t.data || vb->t.rank != 1 || vb->t.dims[0] != k || vb->t.dt != va->t.dt))
      continue;
    if (training && (va->is_param || (vb && vb->is_param))) continue;
    char name[512];
    snprintf(name, sizeof name, "%s.bias_with_shortcut", b->name);
    int nb = gpuc_graph_add_value(g, name);
    if (nb < 0) { free(readers); return gpuc_err_set(e, "%s: out of memory", g->path); }
    va = &g->values[ba]; /* adding a value may move the array */
    vb = bb >= 0 ? &g->values[bb] : NULL;
    Value *s = &g->values[nb];
    gpuc_set_shape(&s->t, va->t.dt, 1, &k);
    if (gpuc_tensor_alloc(&s->t, e)) { free(readers); return -1; }
    for (int64_t c = 0; c < k; c++)
      gpuc_set_f64(&s->t, c, gpuc_get_f64(&va->t, c) + (vb ? gpuc_get_f64(&vb->t, c) : 0));
    s->is_const = true;
    s->is_param = va->is_param && (!vb || vb->is_param); /* as folded BN biases are */
    g->nodes[i].in[2] = nb;
    if (plain) g->nodes[p].nin = 2;
    else g->nodes[p].in[2] = -1;
    folded++;
  }
  free(readers);
  return folded;
}

int pass_fuse_conv(Graph *g, const PassOptions *o, GpucErr *e) {
  int changes = 0;
  bool *drop = calloc((size_t)g->nnodes + 1, 1);
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *last = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!drop || !readers || !last) {
    free(drop); free(readers); free(last);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, readers, last);
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i].op != GPUC_OP_CONV || drop[i]) continue;
    int y = g->nodes[i].out[0], slot = 0;
    if (y < 0 || !gpuc_shape_known(&g->values[y].t)) continue;
    int next = only_consumer(g, readers, last, drop, y, &slot);
    int add = -1, relu = -1, z = -1;
    if (next >= 0 && g->nodes[next].op == GPUC_OP_ADD) {
      int other = g->nodes[next].in[1 - slot];
      if (other >= 0 && other != y && same_type(&g->values[other].t, &g->values[y].t) &&
          same_type(&g->values[g->nodes[next].out[0]].t, &g->values[y].t)) {
        add = next;
        z = other;
        int s2;
        int after = only_consumer(g, readers, last, drop, g->nodes[add].out[0], &s2);
        if (after >= 0 && g->nodes[after].op == GPUC_OP_RELU) relu = after;
      }
    } else if (next >= 0 && g->nodes[next].op == GPUC_OP_RELU) {
      relu = next;
    }
    /* cuDNN's fused call with an identity activation runs one slow
     * algorithm only (and misbehaved in fp16 on the H200 run): fuse only
     * what ends in a Relu */
    if (relu < 0) continue;
    /* the residual must be computed before the Conv runs: producers come
     * earlier in topological order, or it is an input/constant */
    if (z >= 0 && g->values[z].producer > i) continue;
    /* bias: the Conv's, or a zero constant */
    int bias = g->nodes[i].nin > 2 ? g->nodes[i].in[2] : -1;
    if (bias < 0) {
      char name[512];
      snprintf(name, sizeof name, "%s.zero_bias", g->nodes[i].name);
      bias = gpuc_graph_add_value(g, name);
      if (bias < 0) { free(drop); free(readers); free(last); return gpuc_err_set(e, "%s: out of memory", g->path); }
      int64_t m = g->values[g->nodes[i].in[1]].t.dims[0];
      gpuc_set_shape(&g->values[bias].t, g->values[y].t.dt, 1, &m);
      if (gpuc_tensor_alloc(&g->values[bias].t, e)) { free(drop); free(readers); free(last); return -1; }
      g->values[bias].is_const = true;
    }
    Node *n = &g->nodes[i];
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
    Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 1));
    if (!in || !attrs) { free(drop); free(readers); free(last); return gpuc_err_set(e, "%s: out of memory", g->path); }
    in[0] = n->in[0];
    in[1] = n->in[1];
    in[2] = bias;
    in[3] = z;
    memcpy(attrs, n->attrs, sizeof(Attr) * (size_t)n->nattr);
    attrs[n->nattr] = (Attr){.name = "activation", .kind = GPUC_ATTR_INT, .i = relu >= 0 ? 1 : 0};
    n->op = GPUC_OP_FUSEDCONV;
    n->in = in;
    n->nin = z >= 0 ? 4 : 3;
    n->attrs = attrs;
    n->nattr++;
    int last = relu >= 0 ? relu : add;
    int out = g->nodes[last].out[0];
    g->values[y].producer = -1; /* the Conv's own output is no longer written */
    n->out[0] = out;
    if (add >= 0) { drop[add] = true; g->values[g->nodes[add].out[0]].producer = -1; }
    if (relu >= 0) drop[relu] = true;
    g->values[out].producer = i;
    changes++;
  }
  gpuc_graph_remove_nodes(g, drop);
  free(drop);
  free(readers);
  free(last);
  int folded = fold_shortcut_bias(g, o->training, e);
  return folded < 0 ? -1 : changes + folded;
}

/* ---- activations into NHWC depthwise convolutions -------------------- */

/* NHWC FusedConv n is depthwise (groups == C == K, W [K,R,S,1]) without a
 * residual: codegen/lower_dwconv.c runs it as one generated kernel that
 * can apply any activation of ir/conv_act.h to its inputs as it loads them
 * and to its sums before the store. */
static bool dw_nhwc(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_FUSEDCONV || gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NHWC ||
      (n->nin > 3 && n->in[3] >= 0) || n->nin < 2 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0)
    return false;
  const Tensor *x = &g->values[n->in[0]].t, *w = &g->values[n->in[1]].t, *y = &g->values[n->out[0]].t;
  int64_t groups = gpuc_attr_i(n, "group", 1);
  return x->rank == 4 && w->rank == 4 && y->rank == 4 && gpuc_shape_known(y) && groups > 1 && groups == x->dims[3] &&
         w->dims[0] == groups && w->dims[3] == 1 && gpuc_dtype_is_float(y->dt);
}

/* NHWC FusedConv n is a pointwise convolution without a residual (1x1,
 * stride 1, no pads, one group) of half values: codegen/lower_se.c
 * runs it as one cuBLASLt GEMM whose epilogue adds the bias and applies
 * Relu or GELU (RELU_BIAS / GELU_BIAS; cuBLASLt's GELU is the tanh form,
 * within half's rounding of the erf one, the rule MatMulBias follows in
 * passes/fuse_gemm_act.c). PoolFormer's and ConvNeXt-style MLPs written as
 * 1x1 convs: the bias and the GELU were a kernel reading and writing the
 * 4x-wide hidden activation. One without a bias (the dynamo exporter drops
 * a bias of zeros) gets a zero bias row when it takes the activation. */
static bool pw_nhwc(const Graph *g, const Node *n) {
  if (pass_env_on("GPUC_NO_PW_ACT")) return false; /* GPU A/B runs: the rewrite off */
  if (n->op != GPUC_OP_FUSEDCONV || gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NHWC ||
      (n->nin > 3 && n->in[3] >= 0) || n->nin < 3 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0 ||
      gpuc_attr_i(n, "group", 1) != 1)
    return false;
  const Tensor *x = &g->values[n->in[0]].t, *w = &g->values[n->in[1]].t, *y = &g->values[n->out[0]].t;
  if (x->rank != 4 || w->rank != 4 || y->rank != 4 || !gpuc_shape_known(y) || w->dims[1] != 1 || w->dims[2] != 1 ||
      (y->dt != GPUC_DT_F16 && y->dt != GPUC_DT_BF16))
    return false;
  const int64_t *v;
  int nv = gpuc_attr_ints(n, "strides", &v);
  for (int i = 0; i < nv; i++)
    if (v[i] != 1) return false;
  nv = gpuc_attr_ints(n, "pads", &v);
  for (int i = 0; i < nv; i++)
    if (v[i] != 0) return false;
  const char *ap = gpuc_attr_s(n, "auto_pad", "NOTSET");
  return !strcmp(ap, "NOTSET") || !strcmp(ap, "VALID");
}

/* A scalar constant's value (Clip's min / max inputs), or `dflt` when the
 * input is absent; false when present but not a constant scalar. */
static bool scalar_or(const Graph *g, const Node *n, int k, double dflt, double *v) {
  if (k >= n->nin || n->in[k] < 0) { *v = dflt; return true; }
  const Value *c = &g->values[n->in[k]];
  if (!c->is_const || !c->t.data || gpuc_numel(&c->t) != 1) return false;
  *v = gpuc_get_f64(&c->t, 0);
  return true;
}

/* An activation applied to value y: the nodes reading y are one Relu,
 * Clip (constant bounds), HardSwish, Mish or erf Gelu, or SiLU's Sigmoid(y) and
 * Mul(y, that) in either order, nothing else, y not a graph output, and
 * the activation's output of y's type. */
typedef struct {
  int act;        /* GPUC_FCONV_ACT_* */
  double lo, hi;  /* Clip's bounds */
  int node;       /* the node writing the activation's output */
  int sigmoid;    /* SiLU's Sigmoid node, or -1 */
} ActMatch;

static bool match_act(const Graph *g, const int *readers, const bool *drop, int y, ActMatch *m) {
  if (g->values[y].is_output || readers[y] < 1 || readers[y] > 2) return false;
  int rd[2], nrd = 0;
  for (int j = 0; j < g->nnodes && nrd < 2; j++) {
    bool reads = false;
    for (int k = 0; k < g->nodes[j].nin; k++) reads |= g->nodes[j].in[k] == y;
    if (reads && !drop[j]) rd[nrd++] = j;
  }
  if (nrd != readers[y]) return false; /* a node reading y twice, or one already fused */
  *m = (ActMatch){.act = -1, .node = nrd == 1 ? rd[0] : -1, .sigmoid = -1};
  if (nrd == 2) {
    int sig = g->nodes[rd[0]].op == GPUC_OP_SIGMOID ? 0 : g->nodes[rd[1]].op == GPUC_OP_SIGMOID ? 1 : -1;
    if (sig < 0) return false;
    m->sigmoid = rd[sig];
    m->node = rd[1 - sig];
  }
  const Tensor *yt = &g->values[y].t;
  const Node *r = &g->nodes[m->node];
  int out = r->out[0];
  if (out < 0 || r->nout < 1 || r->in[0] < 0 || !same_type(&g->values[out].t, yt)) return false;
  for (int k = 1; k < r->nout; k++)
    if (r->out[k] >= 0) return false;
  if (nrd == 2) { /* SiLU: s = Sigmoid(y), Mul(y, s) in either order */
    int s = g->nodes[m->sigmoid].out[0];
    bool pair = r->op == GPUC_OP_MUL && r->nin == 2 &&
                ((r->in[0] == y && r->in[1] == s) || (r->in[1] == y && r->in[0] == s));
    if (!pair || s < 0 || readers[s] != 1 || g->values[s].is_output || g->values[s].t.dt != yt->dt) return false;
    m->act = GPUC_FCONV_ACT_SILU;
    return true;
  }
  if (r->in[0] != y) return false;
  switch (r->op) {
  case GPUC_OP_RELU: m->act = GPUC_FCONV_ACT_RELU; return true;
  case GPUC_OP_HARDSWISH: m->act = GPUC_FCONV_ACT_HARDSWISH; return true;
  case GPUC_OP_MISH: m->act = GPUC_FCONV_ACT_MISH; return true;
  case GPUC_OP_GELU:
    if (strcmp(gpuc_attr_s(r, "approximate", "none"), "none")) return false;
    m->act = GPUC_FCONV_ACT_GELU;
    return true;
  case GPUC_OP_CLIP:
    if (g->opset < 11) {
      m->lo = gpuc_attr_f(r, "min", -INFINITY);
      m->hi = gpuc_attr_f(r, "max", INFINITY);
    } else if (!scalar_or(g, r, 1, -INFINITY, &m->lo) || !scalar_or(g, r, 2, INFINITY, &m->hi)) {
      return false;
    }
    if (isnan(m->lo) || isnan(m->hi) || m->lo > m->hi) return false; /* Clip's own rule for crossed bounds */
    m->act = GPUC_FCONV_ACT_CLIP;
    return true;
  default: return false;
  }
}

/* Node n's attributes with `key` (int) = act and, for Clip, `lo_key` /
 * `hi_key` (floats) set; false when out of memory. */
static bool set_act_attrs(Graph *g, Node *n, const char *key, const char *lo_key, const char *hi_key, const ActMatch *m) {
  Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 3));
  if (!attrs) return false;
  int na = 0;
  bool has = false;
  for (int k = 0; k < n->nattr; k++) {
    if (!strcmp(n->attrs[k].name, lo_key) || !strcmp(n->attrs[k].name, hi_key)) continue;
    attrs[na] = n->attrs[k];
    if (!strcmp(attrs[na].name, key)) { attrs[na].i = m->act; has = true; }
    na++;
  }
  if (!has) attrs[na++] = (Attr){.name = key, .kind = GPUC_ATTR_INT, .i = m->act};
  if (m->act == GPUC_FCONV_ACT_CLIP) {
    attrs[na++] = (Attr){.name = lo_key, .kind = GPUC_ATTR_FLOAT, .f = (float)m->lo};
    attrs[na++] = (Attr){.name = hi_key, .kind = GPUC_ATTR_FLOAT, .f = (float)m->hi};
  }
  n->attrs = attrs;
  n->nattr = na;
  return true;
}

/* NHWC pointwise FusedConv i (pw_nhwc, no activation) whose output only an
 * Add reads, the Add's other operand z of the output's shape and dtype and
 * made before the conv: z becomes the conv's residual input, the conv
 * writes the Add's output, the Add is dropped. 1 fused, 0 not, -1 out of
 * memory. */
static int pw_residual(Graph *g, const int *readers, const int *last, bool *drop, int i) {
  int y = g->nodes[i].out[0], slot;
  int a = only_consumer(g, readers, last, drop, y, &slot);
  if (a < 0 || g->nodes[a].op != GPUC_OP_ADD || g->nodes[a].nin != 2 || g->nodes[a].out[0] < 0) return 0;
  int z = g->nodes[a].in[1 - slot], out = g->nodes[a].out[0];
  if (z < 0 || z == y || g->values[z].producer >= i || !same_type(&g->values[z].t, &g->values[y].t) ||
      !same_type(&g->values[out].t, &g->values[y].t))
    return 0;
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
  if (!in) return -1;
  Node *n = &g->nodes[i];
  for (int k = 0; k < 3; k++) in[k] = k < n->nin ? n->in[k] : -1;
  in[3] = z;
  n->in = in;
  n->nin = 4;
  g->values[y].producer = -1;
  n->out[0] = out;
  g->values[out].producer = i;
  drop[a] = true;
  return 1;
}

/* NHWC depthwise FusedConvs take the activations around them (ir/
 * conv_act.h), NHWC pointwise ones (pw_nhwc) a Relu or erf GELU after:
 *   - after: Relu, Clip (constant bounds), HardSwish, erf Gelu or SiLU
 *     reading the conv's output alone -> attribute activation (act_min,
 *     act_max); the conv writes the activation's output;
 *   - before: the same activations of a value y whose output only the conv
 *     reads (MobileNetV3's HardSwish and EfficientNet's SiLU after each
 *     1x1 expansion) -> attribute in_activation (in_act_min, in_act_max);
 *     the conv reads y and activates each element as it loads it (the
 *     zero padding stays zero), so the activated tensor, the largest of
 *     the block, is never written.
 * The reference computes the same functions on the same rounded values
 * (ref_FusedConv). After the fp16 pass (the activations' dtype is the
 * conv's) and before fuse_elementwise (which would split the conv's bias
 * off into the activation's group). Returns the number fused, or -1. */
int pass_fuse_conv_act(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0; /* FusedConv's gradient rule knows no activations */
  int fused = 0, nv = g->nvalues;
  bool *drop = calloc((size_t)g->nnodes + 1, 1);
  int *readers = malloc(sizeof(int) * ((size_t)nv + 1)), *last = malloc(sizeof(int) * ((size_t)nv + 1));
  if (!drop || !readers || !last) {
    free(drop); free(readers); free(last);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, readers, last);
  /* the residual after a pointwise conv (GPUC_NO_PW_RESIDUAL=1: not, for A/B) */
  bool pw_res = !pass_env_on("GPUC_NO_PW_RESIDUAL");
  for (int i = 0; i < g->nnodes; i++) {
    bool dw = dw_nhwc(g, &g->nodes[i]);
    if (!dw && !pw_nhwc(g, &g->nodes[i])) continue;
    ActMatch m;
    /* after (pointwise: Relu or GELU, cuBLASLt's epilogues) */
    int y = g->nodes[i].out[0];
    if (gpuc_attr_i(&g->nodes[i], "activation", 0) == 0 && match_act(g, readers, drop, y, &m) &&
        (dw || m.act == GPUC_FCONV_ACT_RELU || m.act == GPUC_FCONV_ACT_GELU)) {
      if (!set_act_attrs(g, &g->nodes[i], "activation", "act_min", "act_max", &m)) goto oom;
      if (!dw && g->nodes[i].in[2] < 0) { /* cuBLASLt's epilogue adds a bias row: zeros */
        char name[512];
        snprintf(name, sizeof name, "%s.zero_bias", g->nodes[i].name);
        int64_t k = g->values[y].t.dims[3];
        int zb = gpuc_linear_new_const(g, name, g->values[y].t.dt, 1, &k, e);
        if (zb < 0) { free(drop); free(readers); free(last); return -1; }
        memset(g->values[zb].t.data, 0, gpuc_tensor_bytes(&g->values[zb].t));
        g->nodes[i].in[2] = zb;
      }
      int out = g->nodes[m.node].out[0];
      g->values[y].producer = -1;
      g->nodes[i].out[0] = out;
      g->values[out].producer = i;
      drop[m.node] = true;
      if (m.sigmoid >= 0) drop[m.sigmoid] = true;
      fused++;
    }
    /* after, pointwise without an activation: Add(y, z) reading y alone
     * (MBConv's projection + shortcut) -> the conv's residual z, which
     * cuBLASLt adds as C with the bias row (codegen/lower_se.c); z must
     * be computed before the conv */
    if (!dw && gpuc_attr_i(&g->nodes[i], "activation", 0) == 0 && pw_res) {
      int r = pw_residual(g, readers, last, drop, i);
      if (r < 0) goto oom;
      fused += r;
    }
    /* before: x = act(y), read by this conv alone */
    int x = g->nodes[i].in[0], p = g->values[x].producer;
    if (!dw || gpuc_attr_i(&g->nodes[i], "in_activation", 0) != 0 || p < 0 || drop[p] || readers[x] != 1 ||
        g->values[x].is_output)
      continue;
    const Node *a = &g->nodes[p];
    int yin = -1;
    for (int k = 0; k < a->nin && yin < 0; k++) { /* Mul(y, s) or Mul(s, y): y is the one not made by a Sigmoid */
      int v = a->in[k], q = v >= 0 ? g->values[v].producer : -1;
      if (v >= 0 && !(a->op == GPUC_OP_MUL && q >= 0 && g->nodes[q].op == GPUC_OP_SIGMOID)) yin = v;
    }
    if (yin < 0 || g->values[yin].is_const || !match_act(g, readers, drop, yin, &m) || m.node != p) continue;
    if (!set_act_attrs(g, &g->nodes[i], "in_activation", "in_act_min", "in_act_max", &m)) goto oom;
    g->nodes[i].in[0] = yin;
    drop[p] = true;
    if (m.sigmoid >= 0) drop[m.sigmoid] = true;
    g->values[x].producer = -1;
    readers[yin] = 1;
    fused++;
  }
  gpuc_graph_remove_nodes(g, drop);
  free(drop); free(readers); free(last);
  return fused;
oom:
  free(drop); free(readers); free(last);
  return gpuc_err_set(e, "%s: out of memory", g->path);
}
