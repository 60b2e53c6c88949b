/* --fp16 / --bf16 -O2: 2-D convolutions in NHWC (channels last), the layout cuDNN's
 * half-precision tensor-core kernels read; given NCHW they transpose
 * internally, around every convolution.
 *
 * A region is a connected set of
 *   - 2-D convolutions: FusedConv (NCHW) and Conv, both with constant
 *     weights; a Conv becomes FusedConv with activation 0 (its bias, if
 *     any, added after the convolution as before),
 *   - layout-agnostic elementwise ops (Relu, Clip, Add of a residual, Mul
 *     by a per-channel constant...): every input a rank-4 computed value,
 *     or a constant of rank <= 4 (re-laid-out), with a rank-4 output,
 *   - 2-D MaxPools without Indices (ResNet's after the stem), 2-D
 *     AveragePools (DenseNet's transitions, Inception's branch pools) and 2-D
 *     GlobalAveragePools (squeeze-and-excitation, the classifier's pool),
 *     which get layout = 1 too,
 *   - Concats along channels of computed rank-4 values (DenseNet's dense
 *     blocks, Inception's and GoogLeNet's branches, SqueezeNet's Fire
 *     modules), which concatenate along axis 3 instead,
 *   - ChannelShuffles along channels (ShuffleNet's units), which shuffle
 *     along axis 3 instead,
 *   - float reductions with keepdims (Sum, Mean, L1, L2, SumSquare, Max,
 *     Min) of a region value (GRN's norms over H, W and mean over C), which
 *     reduce the same axes at their NHWC positions,
 * joined where one reads another's output; a region without a convolution
 * is left alone. Inside it every value is NHWC: convolutions get
 * layout = 1 and weights [K,C/g,R,S] -> [K,R,S,C/g]; constants read by
 * elementwise ops are padded to rank 4 and permuted ([C,1,1] -> [1,1,1,C]);
 * scalars stay. A computed NCHW value a region node reads enters through
 * one Transpose [0,2,3,1]; a region value that a node outside the region
 * reads, or that is a graph output, leaves through one Transpose [0,3,1,2]
 * which writes the original value (so the outside keeps its names, shapes
 * and outputs). Between two convolutions of a region there is no
 * Transpose. Anything else ends a region: other pools (Indices, LpPool...), Flatten/Reshape,
 * other Concats, Gemm, ops reading a rank-4 value with a lower-rank computed
 * operand (broadcast that would mean something else in NHWC).
 *
 * Runs before the fp16 pass (the Transposes and re-laid-out constants are
 * then cast like everything else) and after fuse_conv. */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gpuc_reduce_axes(OpCtx *c, bool mask[GPUC_MAX_RANK], bool *known); /* ir/infer_reduce.c */

static const int to_nhwc[4] = GPUC_NCHW_TO_NHWC, to_nchw[4] = GPUC_NHWC_TO_NCHW;

static bool known4(const Tensor *t) { return t->rank == 4 && gpuc_shape_known(t); }
static bool has_data(const Value *v) { return v->is_const && v->t.data; }

/* Conv / FusedConv over [N,C,H,W] with constant [K,C/g,R,S] weights. */
static bool conv2d(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_CONV && n->op != GPUC_OP_FUSEDCONV) return false;
  if (gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NCHW) return false;
  /* f32 convs on integer values (passes/expand_qlinear.c): the edge
   * Transposes would store their int32-sized sums as half */
  if (gpuc_attr_i(n, "gpuc_fp32", 0) == 1) return false;
  if (n->nin < 2 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0) return false;
  const Value *x = &g->values[n->in[0]], *w = &g->values[n->in[1]];
  const Tensor *y = &g->values[n->out[0]].t;
  if (!known4(&x->t) || x->is_const || !known4(&w->t) || !has_data(w) || !known4(y)) return false;
  if (x->t.dt != GPUC_DT_F32 && x->t.dt != GPUC_DT_F16 && x->t.dt != GPUC_DT_BF16) return false;
  if (n->nin > 3 && n->in[3] >= 0 && !known4(&g->values[n->in[3]].t)) return false;
  return true;
}

/* A depthwise convolution (one input channel per group) over a batch of 1. */
static bool depthwise_batch1(const Graph *g, const Node *n) {
  const Tensor *x = &g->values[n->in[0]].t;
  int64_t groups = gpuc_attr_i(n, "group", 1);
  return x->dims[0] == 1 && groups > 1 && groups == x->dims[1];
}

/* A 1x1 convolution of one group over more than one pixel (conv2d
 * already checked): 1 when its input or output channels are not a
 * multiple of 8, 0 when they are; -1 for other convolutions. */
static int pointwise_misaligned(const Graph *g, const Node *n) {
  const Tensor *w = &g->values[n->in[1]].t, *y = &g->values[n->out[0]].t;
  if (gpuc_attr_i(n, "group", 1) != 1 || w->dims[2] != 1 || w->dims[3] != 1 || y->dims[2] * y->dims[3] <= 1)
    return -1;
  return w->dims[0] % 8 != 0 || w->dims[1] % 8 != 0;
}

/* A 2-D MaxPool without Indices or a 2-D AveragePool: they have an NHWC
 * form (attribute layout). */
static bool pool2d(const Graph *g, const Node *n) {
  if ((n->op != GPUC_OP_MAXPOOL && n->op != GPUC_OP_AVERAGEPOOL) || n->in[0] < 0 || n->out[0] < 0) return false;
  if (gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NCHW) return false;
  if (n->nout > 1 && n->out[1] >= 0) return false;
  const Value *x = &g->values[n->in[0]];
  return known4(&x->t) && !x->is_const && known4(&g->values[n->out[0]].t) &&
         (x->t.dt == GPUC_DT_F32 || x->t.dt == GPUC_DT_F16 || x->t.dt == GPUC_DT_BF16);
}

/* A GlobalAveragePool of a 2-D float image: its NHWC form (attribute
 * layout 1) reduces over H, W of [N,H,W,C] into [N,1,1,C], so a
 * squeeze-and-excitation block stays NHWC instead of leaving through a
 * Transpose of its whole input (codegen/lower_se.c). */
static bool gap2d(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_GLOBALAVERAGEPOOL || n->in[0] < 0 || n->out[0] < 0) return false;
  if (gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NCHW) return false;
  const Value *x = &g->values[n->in[0]];
  return known4(&x->t) && !x->is_const && known4(&g->values[n->out[0]].t) &&
         (x->t.dt == GPUC_DT_F32 || x->t.dt == GPUC_DT_F16 || x->t.dt == GPUC_DT_BF16);
}

/* A Concat along C of [N,C,H,W] values (none a constant): in NHWC it
 * concatenates along axis 3, a run of each input's channels per pixel. */
static bool concat_channels(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_CONCAT || n->nin < 1 || n->out[0] < 0 || !known4(&g->values[n->out[0]].t)) return false;
  int64_t axis = gpuc_attr_i(n, "axis", 1);
  if (axis != 1 && axis != -3) return false;
  for (int k = 0; k < n->nin; k++) {
    const Value *x = n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
    if (!x || x->is_const || !known4(&x->t)) return false;
  }
  return true;
}

/* A ChannelShuffle along C of [N,C,H,W] values (ShuffleNet's units,
 * passes/channel_shuffle.c): in NHWC it shuffles along axis 3. */
static bool shuffle_channels(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_CHANNELSHUFFLE) return false;
  int64_t axis = gpuc_attr_i(n, "axis", 1);
  if (axis != 1 && axis != -3) return false;
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] < 0 || g->values[n->in[k]].is_const || !known4(&g->values[n->in[k]].t)) return false;
  for (int k = 0; k < n->nout; k++)
    if (n->out[k] < 0 || !known4(&g->values[n->out[k]].t)) return false;
  return true;
}

/* A float reduction with keepdims of a [N,C,H,W] value over known axes
 * (GRN's ReduceL2 over H, W and its ReduceMean over C, ConvNeXt V2): in
 * NHWC it reduces the same axes at their NHWC positions and writes the
 * NHWC twin of its [N,C,1,1]-like output. */
static bool reduce_keepdims(const Graph *g, const Node *n, bool mask[GPUC_MAX_RANK]) {
  switch (n->op) {
  case GPUC_OP_REDUCEL1: case GPUC_OP_REDUCEL2: case GPUC_OP_REDUCEMAX: case GPUC_OP_REDUCEMEAN:
  case GPUC_OP_REDUCEMIN: case GPUC_OP_REDUCESUM: case GPUC_OP_REDUCESUMSQUARE:
    break;
  default:
    return false;
  }
  if (n->in[0] < 0 || n->out[0] < 0 || gpuc_attr_i(n, "keepdims", 1) != 1) return false;
  const Value *x = &g->values[n->in[0]];
  if (x->is_const || !known4(&x->t) || !known4(&g->values[n->out[0]].t) || !gpuc_dtype_is_float(x->t.dt) ||
      x->t.dt == GPUC_DT_F64)
    return false;
  const Tensor *ins[2] = {&x->t, n->nin > 1 && n->in[1] >= 0 ? &g->values[n->in[1]].t : NULL};
  GpucErr err;
  OpCtx oc = {.g = g, .n = n, .nin = n->nin, .nout = 1, .in = ins, .err = &err};
  bool known;
  return gpuc_reduce_axes(&oc, mask, &known) == 0 && known;
}

/* An elementwise op that computes the same in NHWC once its inputs are. */
static bool agnostic(const Graph *g, const Node *n) {
  if (!(gpuc_ops[n->op].flags & GPUC_OPF_ELEMWISE) || n->op == GPUC_OP_DROPOUT) return false;
  if (n->nout < 1 || n->out[0] < 0 || !known4(&g->values[n->out[0]].t)) return false;
  for (int k = 1; k < n->nout; k++)
    if (n->out[k] >= 0) return false;
  int computed = 0;
  for (int k = 0; k < n->nin; k++) {
    int v = n->in[k];
    if (v < 0) continue;
    const Value *x = &g->values[v];
    if (has_data(x)) {
      if (x->t.rank > 4) return false;
    } else if (x->t.rank == 4) {
      computed++;
    } else {
      return false;
    }
  }
  return computed > 0;
}

/* Inputs that carry the layout: a conv's X and Z; an elementwise op's
 * computed inputs. */
static bool layout_input(const Graph *g, const Node *n, int k) {
  int v = n->in[k];
  if (v < 0) return false;
  if (n->op == GPUC_OP_CONV || n->op == GPUC_OP_FUSEDCONV) return k == 0 || k == 3;
  if (n->op == GPUC_OP_MAXPOOL || n->op == GPUC_OP_AVERAGEPOOL || n->op == GPUC_OP_GLOBALAVERAGEPOOL) return k == 0;
  bool mask[GPUC_MAX_RANK];
  if (reduce_keepdims(g, n, mask)) return k == 0;
  return !has_data(&g->values[v]);
}

static int find(int *parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

typedef struct {
  Graph *g;
  int *twin;                     /* per original value: its NHWC value, or -1 */
  int *cperm;                    /* per original constant: its permuted copy, or -1 */
  GpucErr *e;
} Rw;

static int oom(Rw *r) { return gpuc_err_set(r->e, "%s: layout_nhwc: out of memory", r->g->path); }

static int new_value(Rw *r, int like, const char *suffix) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", r->g->values[like].name, suffix);
  int v = gpuc_graph_add_value(r->g, name);
  if (v < 0) oom(r);
  return v;
}

/* Transpose in -> out with perm; returns the node or -1. */
static int transpose(Rw *r, int in, int out, const int perm[4]) {
  Graph *g = r->g;
  char name[512];
  snprintf(name, sizeof name, "%s.%s", g->values[out].name, perm[1] == 2 ? "to_nhwc" : "to_nchw");
  int ni = pass_add_transpose(g, name, in, out, perm, 4);
  return ni < 0 ? oom(r) : ni;
}

/* The NHWC value a region node reads for computed value v: the region's
 * own twin, or a Transpose of v made once. */
static int nhwc_input(Rw *r, int v) {
  if (r->twin[v] >= 0) return r->twin[v];
  int w = new_value(r, v, "nhwc");
  if (w < 0 || transpose(r, v, w, to_nhwc) < 0) return -1;
  Graph *g = r->g;
  g->values[w].t = g->values[v].t;
  for (int i = 0; i < 4; i++) g->values[w].t.dims[i] = g->values[v].t.dims[to_nhwc[i]];
  return r->twin[v] = w;
}

/* Constant v re-laid-out: rank <= 4 padded with leading 1s to [N,C,H,W],
 * then permuted to [N,H,W,C] (conv weights [K,C/g,R,S] -> [K,R,S,C/g]).
 * A single element stays as it is. */
static int nhwc_const(Rw *r, int v) {
  Graph *g = r->g;
  if (gpuc_numel(&g->values[v].t) <= 1) return v;
  if (r->cperm[v] >= 0) return r->cperm[v];
  Tensor padded = g->values[v].t;
  int rank = padded.rank;
  for (int i = 3; i >= 0; i--) padded.dims[i] = i - (4 - rank) >= 0 ? g->values[v].t.dims[i - (4 - rank)] : 1;
  padded.rank = 4;
  int w = new_value(r, v, "nhwc");
  if (w < 0) return -1;
  Value *c = &g->values[w];
  if (gpuc_tensor_permute4(&padded, to_nhwc, &c->t, r->e)) return -1;
  c->is_const = true;
  c->is_param = g->values[v].is_param;
  return r->cperm[v] = w;
}

/* Conv -> FusedConv(X, W, B?) activation 0; both (and MaxPool) get layout 1. */
static int mark_layout(Rw *r, int i) {
  Graph *g = r->g;
  Node *n = &g->nodes[i];
  bool plain = n->op == GPUC_OP_CONV;
  int extra = plain ? 2 : 1;
  Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + (size_t)extra));
  int *in = plain ? gpuc_arena_alloc(&g->arena, sizeof(int) * 3) : n->in;
  if (!attrs || !in) return oom(r);
  memcpy(attrs, n->attrs, sizeof(Attr) * (size_t)n->nattr);
  attrs[n->nattr] = (Attr){.name = "layout", .kind = GPUC_ATTR_INT, .i = GPUC_LAYOUT_NHWC};
  if (plain) {
    attrs[n->nattr + 1] = (Attr){.name = "activation", .kind = GPUC_ATTR_INT, .i = 0};
    in[0] = n->in[0];
    in[1] = n->in[1];
    in[2] = n->nin > 2 ? n->in[2] : -1;
    n->in = in;
    n->nin = 3;
    n->op = GPUC_OP_FUSEDCONV;
  }
  n->attrs = attrs;
  n->nattr += extra;
  return 0;
}

/* The reduction's axes at their NHWC positions: the attribute, or a new
 * constant for the axes input (opset 18's ReduceMean, 13's ReduceSum). */
static int reduce_axes_nhwc(Rw *r, int i) {
  Graph *g = r->g;
  Node *n = &g->nodes[i];
  bool mask[GPUC_MAX_RANK];
  if (!reduce_keepdims(g, n, mask)) return 0; /* cannot change: it was checked before */
  const int64_t *old;
  bool attr = gpuc_attr_ints(n, "axes", &old) >= 0, input = n->nin > 1 && n->in[1] >= 0;
  if (!attr && !input) return 0; /* every axis (or none, noop_with_empty_axes): the same in NHWC */
  int64_t ax[4], na = 0;
  for (int d = 0; d < 4; d++) /* NHWC position d holds NCHW axis to_nhwc[d] */
    if (mask[to_nhwc[d]]) ax[na++] = d;
  if (attr) {
    int64_t *v = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * 4);
    Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * (size_t)n->nattr);
    if (!v || !attrs) return oom(r);
    memcpy(v, ax, sizeof(int64_t) * (size_t)na);
    for (int k = 0; k < n->nattr; k++) {
      attrs[k] = n->attrs[k];
      if (!strcmp(attrs[k].name, "axes")) { attrs[k].ints = v; attrs[k].n = (int)na; }
    }
    n->attrs = attrs;
    return 0;
  }
  char name[512];
  snprintf(name, sizeof name, "%s.axes_nhwc", n->name);
  int w = gpuc_linear_new_const(g, name, GPUC_DT_I64, 1, &na, r->e);
  if (w < 0) return -1;
  memcpy(g->values[w].t.data, ax, sizeof(int64_t) * (size_t)na);
  g->nodes[i].in[1] = w;
  return 0;
}

/* A region's Concat concatenates NHWC values along axis 3 (a
 * ChannelShuffle shuffles along it). */
static int concat_axis3(Rw *r, int i) {
  Graph *g = r->g;
  Node *n = &g->nodes[i];
  Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 1));
  if (!attrs) return oom(r);
  int na = 0;
  for (int k = 0; k < n->nattr; k++)
    if (strcmp(n->attrs[k].name, "axis") != 0) attrs[na++] = n->attrs[k];
  attrs[na++] = (Attr){.name = "axis", .kind = GPUC_ATTR_INT, .i = 3};
  n->attrs = attrs;
  n->nattr = na;
  return 0;
}

/* ReduceMean over axes {2, 3} of a float [N,C,H,W] is GlobalAveragePool
 * (the dynamo exporter's squeeze-and-excitation pool: torch's mean((2, 3),
 * keepdim=True)); as one, it joins the region (gap2d) and keeps half
 * storage (a reduction would be an fp32 island with Casts). Without
 * keepdims (ECA's x.mean((2, 3)) before its Conv1d, eca_nfnet) the pool
 * writes [N,C,1,1] and a Reshape gives the [N,C] the graph had: its NHWC
 * [N,1,1,C] leaves the region in the same element order, so the edge
 * Transpose folds away too. Both average in the reference's double sum,
 * so the values are the same. Returns the number rewritten, -1 on error. */
static int reducemean_as_gap(Graph *g, GpucErr *e) {
  int n = 0, nn = g->nnodes;
  for (int i = 0; i < nn; i++) {
    Node *r = &g->nodes[i];
    if (r->op != GPUC_OP_REDUCEMEAN || r->in[0] < 0 || r->out[0] < 0) continue;
    bool keep = gpuc_attr_i(r, "keepdims", 1) == 1;
    const Tensor *x = &g->values[r->in[0]].t;
    if (!known4(x) || !gpuc_dtype_is_float(x->dt) || x->dt == GPUC_DT_F64) continue;
    const int64_t *ax = NULL;
    int na = -1;
    if (r->nin > 1 && r->in[1] >= 0) { /* opset 18: axes as a constant input */
      const Value *a = &g->values[r->in[1]];
      if (!has_data(a) || a->t.dt != GPUC_DT_I64 || a->t.rank != 1) continue;
      ax = a->t.data;
      na = (int)a->t.dims[0];
    } else {
      na = gpuc_attr_ints(r, "axes", &ax);
    }
    if (na != 2) continue;
    int64_t a0 = ax[0] < 0 ? ax[0] + 4 : ax[0], a1 = ax[1] < 0 ? ax[1] + 4 : ax[1];
    if (!((a0 == 2 && a1 == 3) || (a0 == 3 && a1 == 2))) continue;
    if (!keep) { /* GAP -> [N,C,1,1], then Reshape -> the original [N,C] */
      int y = r->out[0];
      int64_t nc[2] = {x->dims[0], x->dims[1]}, two = 2;
      char name[512];
      snprintf(name, sizeof name, "%s.pooled", g->values[y].name);
      int p = gpuc_graph_add_value(g, name);
      snprintf(name, sizeof name, "%s.shape", g->values[y].name);
      int shape = p < 0 ? -1 : gpuc_linear_new_const(g, name, GPUC_DT_I64, 1, &two, e);
      snprintf(name, sizeof name, "%s.squeeze", g->nodes[i].name);
      int rn = shape < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_RESHAPE, name, 2, 1);
      if (rn < 0) return gpuc_err_set(e, "%s: layout_nhwc: out of memory", g->path);
      memcpy(g->values[shape].t.data, nc, sizeof nc);
      r = &g->nodes[i]; /* adding nodes may move the array */
      Node *rs = &g->nodes[rn];
      rs->in[0] = p;
      rs->in[1] = shape;
      rs->out[0] = y;
      g->values[y].producer = rn;
      g->values[p].producer = i;
      r->out[0] = p;
    }
    r->op = GPUC_OP_GLOBALAVERAGEPOOL;
    r->nin = 1;
    r->nattr = 0;
    n++;
  }
  return n;
}

int pass_layout_nhwc(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int pools = reducemean_as_gap(g, e);
  if (pools < 0) return -1;
  if (pools && (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e))) return -1;
  int nn = g->nnodes, nv = g->nvalues, changed = pools, rc = -1;
  int *parent = malloc(sizeof(int) * ((size_t)nn + 1));
  bool *elig = calloc((size_t)nn + 1, 1), *isconv = calloc((size_t)nn + 1, 1);
  bool *has_conv = calloc((size_t)nn + 1, 1), *region = calloc((size_t)nn + 1, 1);
  bool *pool = calloc((size_t)nn + 1, 1);
  Rw r = {.g = g, .e = e, .twin = malloc(sizeof(int) * ((size_t)nv + 1)),
          .cperm = malloc(sizeof(int) * ((size_t)nv + 1))};
  if (!parent || !elig || !isconv || !has_conv || !region || !pool || !r.twin || !r.cperm) { oom(&r); goto done; }
  for (int v = 0; v < nv; v++) r.twin[v] = r.cperm[v] = -1;
  /* regions: components of eligible nodes joined through layout inputs */
  for (int i = 0; i < nn; i++) {
    parent[i] = i;
    isconv[i] = conv2d(g, &g->nodes[i]);
    /* a GlobalAveragePool only of a value a region may make: one that
     * reads an NCHW value would make the region Transpose that whole
     * value in, not its [N,C,1,1] result out */
    int xp = g->nodes[i].in[0] >= 0 ? g->values[g->nodes[i].in[0]].producer : -1;
    bool mask[GPUC_MAX_RANK];
    pool[i] = pool2d(g, &g->nodes[i]) || (gap2d(g, &g->nodes[i]) && xp >= 0 && xp < i && elig[xp]);
    /* a reduction likewise only of a value a region may make */
    bool red = reduce_keepdims(g, &g->nodes[i], mask) && xp >= 0 && xp < i && elig[xp];
    elig[i] = isconv[i] || pool[i] || red || agnostic(g, &g->nodes[i]) || concat_channels(g, &g->nodes[i]) ||
              shuffle_channels(g, &g->nodes[i]);
  }
  for (int i = 0; i < nn; i++) {
    if (!elig[i]) continue;
    const Node *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      if (!layout_input(g, n, k)) continue;
      int p = g->values[n->in[k]].producer;
      if (p >= 0 && elig[p]) parent[find(parent, p)] = find(parent, i);
    }
  }
  for (int i = 0; i < nn; i++)
    if (isconv[i]) has_conv[find(parent, i)] = true;
  /* depthwise convolutions at batch 1 ran slower in NHWC than in NCHW on
   * the H200 (MobileNetV2 fp16 b1 0.268 -> 0.371 ms; b256 was 36% faster
   * in NHWC): such a region keeps NCHW */
  /* ...unless the model permutes the region's values to channels-last
   * itself (ConvNeXt's Transpose [0,2,3,1] before each LayerNorm): NCHW
   * there costs that Transpose plus one back, NHWC lets both cancel
   * (passes/simplify_transpose.c) */
  bool *wants_nhwc = calloc((size_t)nn + 1, 1);
  if (!wants_nhwc) { oom(&r); goto done; }
  for (int j = 0; j < nn; j++) {
    const Node *t = &g->nodes[j];
    const int64_t *pv;
    if (t->op != GPUC_OP_TRANSPOSE || t->in[0] < 0 || gpuc_attr_ints(t, "perm", &pv) != 4) continue;
    int p = g->values[t->in[0]].producer;
    bool to_cl = pv[0] == 0 && pv[1] == 2 && pv[2] == 3 && pv[3] == 1;
    if (to_cl && p >= 0 && p < nn && elig[p]) wants_nhwc[find(parent, p)] = true;
  }
  /* ...nor when most of the region's pointwise convolutions (1x1, one
   * group, more than one output pixel) have channels that are not
   * multiples of 8: in NCHW cuDNN ran those slowly (shufflenet_v2_x1_0's
   * 58/116/232 channels: about 0.1 ms a pointwise conv in the eager
   * profile, 4x a depthwise one; likely off the tensor cores), where NHWC
   * runs them as cuBLASLt GEMMs (codegen/lower_se.c) and the depthwise
   * convolutions as generated kernels (codegen/lower_dwconv.c, which came
   * after the MobileNetV2 measurement): shufflenet_v2_x1_0 fp16 b1 0.774
   * ms NCHW, 0.203 ms NHWC on the H200 (2026-12-03). MobileNets',
   * EfficientNet's and MnasNet's pointwise channels are multiples of 8:
   * they keep NCHW (not re-measured in NHWC since lower_dwconv.c). */
  int *pw = calloc((size_t)nn + 1, sizeof(int)), *pw_off = calloc((size_t)nn + 1, sizeof(int));
  if (!pw || !pw_off) { free(pw); free(pw_off); free(wants_nhwc); oom(&r); goto done; }
  for (int i = 0; i < nn; i++) {
    int m = isconv[i] ? pointwise_misaligned(g, &g->nodes[i]) : -1;
    if (m >= 0) { pw[find(parent, i)]++; pw_off[find(parent, i)] += m; }
  }
  for (int i = 0; i < nn; i++) /* most of them: one head conv to 21 classes (LR-ASPP) does not decide */
    if (2 * pw_off[i] > pw[i]) wants_nhwc[i] = true;
  free(pw);
  free(pw_off);
  /* GPUC_NHWC_DEPTHWISE_B1=1 lifts the rule (GPU A/B runs) */
  const char *dw1 = getenv("GPUC_NHWC_DEPTHWISE_B1");
  bool keep_dw1 = !(dw1 && *dw1 && strcmp(dw1, "0"));
  for (int i = 0; i < nn; i++)
    if (keep_dw1 && isconv[i] && depthwise_batch1(g, &g->nodes[i]) && !wants_nhwc[find(parent, i)])
      has_conv[find(parent, i)] = false;
  free(wants_nhwc);
  for (int i = 0; i < nn; i++) region[i] = elig[i] && has_conv[find(parent, i)];
  /* every region output gets an NHWC twin the node writes instead (a
   * ChannelShuffle has several) */
  for (int i = 0; i < nn; i++) {
    if (!region[i]) continue;
    for (int k = 0; k < g->nodes[i].nout; k++) {
      int y = g->nodes[i].out[k], w = y < 0 ? -1 : new_value(&r, y, "nhwc");
      if (y < 0) continue;
      if (w < 0) goto done;
      Value *t = &g->values[w], *src = &g->values[y];
      t->t = src->t;
      t->t.data = NULL;
      for (int d = 0; d < 4; d++) t->t.dims[d] = src->t.dims[to_nhwc[d]];
      t->producer = i;
      g->values[y].producer = -1;
      g->nodes[i].out[k] = w;
      r.twin[y] = w;
    }
  }
  /* inputs: twins or Transposes in; constants re-laid-out; conv bias kept */
  for (int i = 0; i < nn; i++) {
    if (!region[i]) continue;
    bool conv = isconv[i];
    bool mask[GPUC_MAX_RANK], red = reduce_keepdims(g, &g->nodes[i], mask);
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int v = g->nodes[i].in[k], w;
      if (v < 0 || (conv && k == 2) || (red && k == 1)) continue;
      if (layout_input(g, &g->nodes[i], k)) w = nhwc_input(&r, v);
      else w = nhwc_const(&r, v);
      if (w < 0) goto done;
      g->nodes[i].in[k] = w;
    }
    if ((conv || pool[i]) && mark_layout(&r, i)) goto done;
    if (red && reduce_axes_nhwc(&r, i)) goto done;
    GpucOp op = g->nodes[i].op;
    if ((op == GPUC_OP_CONCAT || op == GPUC_OP_CHANNELSHUFFLE) && concat_axis3(&r, i)) goto done;
    changed++;
  }
  /* region values read outside (or graph outputs) leave through a Transpose
   * that writes the original value */
  bool *outside = calloc((size_t)nv + 1, 1);
  if (!outside) { oom(&r); goto done; }
  for (int j = 0; j < g->nnodes; j++)
    for (int k = 0; k < g->nodes[j].nin; k++) {
      int v = g->nodes[j].in[k];
      if (v >= 0 && v < nv) outside[v] = true; /* region readers read twins now */
    }
  for (int v = 0; v < nv; v++) {
    if (!(outside[v] || g->values[v].is_output) || r.twin[v] < 0) continue;
    int p = g->values[r.twin[v]].producer; /* a region node, or a Transpose in (index >= nn) */
    if (p < 0 || p >= nn || !region[p]) continue;
    if (transpose(&r, r.twin[v], v, to_nchw) < 0) { free(outside); goto done; }
  }
  free(outside);
  if (changed && (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e))) goto done;
  rc = changed;
done:
  free(parent); free(elig); free(isconv); free(has_conv); free(region); free(pool); free(r.twin); free(r.cperm);
  return rc;
}
