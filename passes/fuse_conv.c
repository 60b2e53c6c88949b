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
