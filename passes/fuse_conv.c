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

/* NHWC FusedConv n is depthwise (groups == C == K, W [K,R,S,1]) with
 * activation 0 and no residual: codegen/lower_dwconv.c runs it as one
 * generated kernel that can apply any activation of ir/conv_act.h. */
static bool dw_nhwc_plain(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_FUSEDCONV || gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NHWC ||
      gpuc_attr_i(n, "activation", 0) != 0 || (n->nin > 3 && n->in[3] >= 0) || n->nin < 2 || n->in[0] < 0 ||
      n->in[1] < 0 || n->out[0] < 0)
    return false;
  const Tensor *x = &g->values[n->in[0]].t, *w = &g->values[n->in[1]].t, *y = &g->values[n->out[0]].t;
  int64_t groups = gpuc_attr_i(n, "group", 1);
  return x->rank == 4 && w->rank == 4 && y->rank == 4 && gpuc_shape_known(y) && groups > 1 && groups == x->dims[3] &&
         w->dims[0] == groups && w->dims[3] == 1 && gpuc_dtype_is_float(y->dt);
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

/* Relu, Clip (constant bounds), HardSwish, erf Gelu, or SiLU (Sigmoid(y)
 * and Mul(y, that), y read by those two alone) reading NHWC depthwise
 * FusedConv outputs y, alone -> the conv's activation attribute (ir/
 * conv_act.h); the conv writes the activation's output. The reference
 * computes the same function on the same rounded sum (ref_FusedConv), and
 * the GPU kernel applies it before its one store. After the fp16 pass
 * (the activation's dtype is the conv's) and before fuse_elementwise
 * (which would otherwise split the bias off into the activation's group).
 * Returns the number fused, or -1. */
int pass_fuse_conv_act(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0; /* FusedConv's gradient rule knows no activations */
  int fused = 0, nv = g->nvalues;
  bool *drop = calloc((size_t)g->nnodes + 1, 1);
  int *readers = malloc(sizeof(int) * ((size_t)nv + 1)), *last = malloc(sizeof(int) * ((size_t)nv + 1));
  if (!drop || !readers || !last) { free(drop); free(readers); free(last); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, last);
  for (int i = 0; i < g->nnodes; i++) {
    if (!dw_nhwc_plain(g, &g->nodes[i])) continue;
    int y = g->nodes[i].out[0];
    if (g->values[y].is_output || readers[y] < 1 || readers[y] > 2) continue;
    /* the reader(s): one activation node, or SiLU's Sigmoid + Mul */
    int rd[2], nrd = 0;
    for (int j = i + 1; j < g->nnodes && nrd < 2; j++) {
      bool reads = false;
      for (int k = 0; k < g->nodes[j].nin; k++) reads |= g->nodes[j].in[k] == y;
      if (reads && !drop[j]) rd[nrd++] = j;
    }
    if (nrd != readers[y]) continue; /* a node reading y twice, or one already fused */
    int act = -1, a = nrd == 1 ? rd[0] : -1, b = -1; /* a: the node whose output the conv takes over; b: a Sigmoid dropped too */
    if (nrd == 2) {
      int sig = g->nodes[rd[0]].op == GPUC_OP_SIGMOID ? 0 : g->nodes[rd[1]].op == GPUC_OP_SIGMOID ? 1 : -1;
      if (sig < 0) continue;
      b = rd[sig];
      a = rd[1 - sig];
    }
    double lo = 0, hi = 0;
    const Tensor *yt = &g->values[y].t;
    if (a < 0) continue;
    const Node *r = &g->nodes[a];
    int out = r->out[0];
    if (out < 0 || r->nout < 1 || g->values[out].t.dt != yt->dt || r->in[0] < 0) continue;
    for (int k = 1; k < r->nout; k++) if (r->out[k] >= 0) out = -1;
    if (out < 0) continue;
    if (readers[y] == 2) { /* SiLU: s = Sigmoid(y), Mul(y, s) in either order */
      if (b < 0 || r->op != GPUC_OP_MUL || r->nin != 2) continue;
      int s = g->nodes[b].out[0];
      bool pair = (r->in[0] == y && r->in[1] == s) || (r->in[1] == y && r->in[0] == s);
      if (!pair || s < 0 || readers[s] != 1 || g->values[s].is_output || g->values[s].t.dt != yt->dt) continue;
      act = GPUC_FCONV_ACT_SILU;
    } else if (r->in[0] != y) {
      continue;
    } else if (r->op == GPUC_OP_RELU) {
      act = GPUC_FCONV_ACT_RELU;
    } else if (r->op == GPUC_OP_HARDSWISH) {
      act = GPUC_FCONV_ACT_HARDSWISH;
    } else if (r->op == GPUC_OP_GELU && !strcmp(gpuc_attr_s(r, "approximate", "none"), "none")) {
      act = GPUC_FCONV_ACT_GELU;
    } else if (r->op == GPUC_OP_CLIP) {
      if (g->opset < 11) {
        lo = gpuc_attr_f(r, "min", -INFINITY);
        hi = gpuc_attr_f(r, "max", INFINITY);
      } else if (!scalar_or(g, r, 1, -INFINITY, &lo) || !scalar_or(g, r, 2, INFINITY, &hi)) {
        continue;
      }
      if (isnan(lo) || isnan(hi) || lo > hi) continue; /* Clip's own rule for crossed bounds: not ours */
      act = GPUC_FCONV_ACT_CLIP;
    } else {
      continue;
    }
    if (!same_type(&g->values[out].t, yt)) continue;
    Node *n = &g->nodes[i];
    int extra = 3; /* act_min, act_max (Clip), activation if absent */
    Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + (size_t)extra));
    if (!attrs) { free(drop); free(readers); free(last); return gpuc_err_set(e, "%s: out of memory", g->path); }
    int na = 0;
    for (int k = 0; k < n->nattr; k++)
      if (strcmp(n->attrs[k].name, "act_min") && strcmp(n->attrs[k].name, "act_max")) attrs[na++] = n->attrs[k];
    bool has_act = false;
    for (int k = 0; k < na; k++)
      if (!strcmp(attrs[k].name, "activation")) { attrs[k].i = act; has_act = true; }
    if (!has_act) attrs[na++] = (Attr){.name = "activation", .kind = GPUC_ATTR_INT, .i = act};
    if (act == GPUC_FCONV_ACT_CLIP) {
      attrs[na++] = (Attr){.name = "act_min", .kind = GPUC_ATTR_FLOAT, .f = (float)lo};
      attrs[na++] = (Attr){.name = "act_max", .kind = GPUC_ATTR_FLOAT, .f = (float)hi};
    }
    n->attrs = attrs;
    n->nattr = na;
    g->values[y].producer = -1;
    n->out[0] = out;
    g->values[out].producer = i;
    drop[a] = true;
    if (b >= 0 && act == GPUC_FCONV_ACT_SILU) drop[b] = true;
    fused++;
  }
  gpuc_graph_remove_nodes(g, drop);
  free(drop); free(readers); free(last);
  return fused;
}
