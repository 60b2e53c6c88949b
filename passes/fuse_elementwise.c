/* Chains (and small DAGs) of elementwise ops -> fusion groups, which codegen
 * runs as one kernel: the GELU PyTorch exports (Div, Erf, Add, Mul, Mul) is
 * five kernels reading and writing the whole activation each, and one
 * kernel reading it once when fused.
 *
 * The pass does not rewrite the graph: it sets Node.fuse_group on members,
 * so the CPU reference, dumps and every other pass still see plain ONNX
 * nodes, and the group is exactly as correct as its members' lowerings.
 * A producer p joins its consumer n's group when
 *   - both are fusable elementwise ops with one output,
 *   - every reader of p's output is n and it is not a graph output (so the
 *     intermediate never needs to exist in memory),
 *   - p's output has n's output shape (broadcasting happens on the group's
 *     external inputs, read with strides; never on an intermediate).
 * A Transpose (transpose_leads_well) or a Concat (concat_leads_well) may
 * head a group as such a producer: its inputs stay outside, read in place.
 * Groups merge through n (union-find), up to MAX_MEMBERS members. Then a
 * producer whose output only members of one group read, several of them
 * (SiLU: x * Sigmoid(x)), joins that group too, with the group it ends if
 * it ends one (GPUC_NO_GROUP_JOIN=1: a lone producer only, for A/B).
 *
 * First, a Conv with a constant bias whose output goes straight into such
 * ops only (MobileNetV2's Conv -> Clip, a projection Conv -> residual Add,
 * EfficientNet's Conv -> SiLU)
 * becomes Conv without bias + Add(bias viewed [C,1,..]): the bias then
 * rides in the group's kernel instead of a kernel of its own. So does a
 * FusedConv without activation or residual (an NHWC Conv, from
 * passes/layout_nhwc.c; its bias is then [C], the last dim).
 *
 * An NHWC conv's bias read by a LayerNorm over the channels goes into that
 * LayerNorm instead (conv_bias_into_layernorm).
 *
 * And a Cast whose output only a Transpose reads swaps places with it
 * (see swap_cast_transpose): the Transpose then heads the Cast's group. */
#include "passes.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_MEMBERS = 48, MAX_NODE_INPUTS = 8, MAX_CONCAT_INPUTS = 48 };

/* The op's lowering is one broadcasting elementwise kernel that codegen can
 * inline into a fused group. */
static bool fusable_elementwise(GpucOp op) {
  /* Identity/Dropout are views or copies, not arithmetic */
  return (gpuc_ops[op].flags & GPUC_OPF_ELEMWISE) && op != GPUC_OP_IDENTITY && op != GPUC_OP_DROPOUT;
}

/* A Transpose may head a group: the kernel reads its input with permuted
 * strides (its own input never comes from inside the group). */
static bool candidate(const Graph *g, const Node *n) {
  bool op_ok = fusable_elementwise(n->op) || n->op == GPUC_OP_TRANSPOSE;
  if (!op_ok || n->nin > MAX_NODE_INPUTS || n->out[0] < 0) return false;
  for (int k = 1; k < n->nout; k++)
    if (n->out[k] >= 0) return false;
  const Tensor *t = &g->values[n->out[0]].t;
  return gpuc_shape_known(t) && t->dt != GPUC_DT_UNDEF;
}

/* A Transpose leads a group only when it keeps the innermost dim in place:
 * then the group's reads stay coalesced runs. Moving the innermost dim
 * (attention's K^T) reads with a stride per element; the tiled Transpose
 * kernel alone is faster than that (H200, BERT b32 fp16: 7 us tiled + a
 * vectorized Mul vs 18.6 us fused). Except when the output's innermost dim
 * C is at most 16 and its next one is the input's innermost (NCHW -> NHWC
 * of an image, C = 3, or of resnet_block's 16 channels): a warp's 128
 * outputs (4 per thread, codegen/ew_kernel.c) then read C runs of 128 / C
 * >= 8 consecutive elements, one per channel plane, and are written as one
 * run; the tiled kernel would not take a dim under 8 at all, and fused the
 * transposed value is never written. y: the Transpose's output. */
static bool transpose_leads_well(const Node *n, const Tensor *y) {
  int rank = y->rank;
  int64_t perm[GPUC_MAX_RANK];
  const int64_t *pv;
  int np = gpuc_attr_ints(n, "perm", &pv);
  if (np >= 0 && np != rank) return false;
  for (int d = 0; d < rank; d++) perm[d] = np < 0 ? rank - 1 - d : pv[d] < 0 ? pv[d] + rank : pv[d];
  if (rank <= 1 || perm[rank - 1] == rank - 1) return true;
  return y->dims[rank - 1] <= 16 && perm[rank - 2] == rank - 1;
}

/* A Concat may head a group too (DenseNet's Concat of every earlier
 * layer's features, read only by the next layer's BatchNorm + Relu): the
 * kernel reads each element from the piece its column falls in
 * (codegen/ew_kernel.c, EXT_CAT), and the concatenation is never written.
 * Its inputs are the group's external inputs, of the output's dtype and
 * static shapes, each piece's run along the axis (its elements per index
 * of the dims before it) a multiple of 16 bytes, so the group's 16-byte
 * vectors never straddle two pieces (the stand-alone Concat kernel's
 * vectors, codegen/lower_shape.c). At most MAX_CONCAT_INPUTS pieces (a
 * kernel takes at most 64 pointers) and one Concat a group. */
static bool concat_leads_well(const Graph *g, const Node *n) {
  /* GPUC_NO_CONCAT_GROUP=1: Concats stay steps of their own (GPU A/B runs) */
  if (n->op != GPUC_OP_CONCAT || pass_env_on("GPUC_NO_CONCAT_GROUP")) return false;
  if (n->op != GPUC_OP_CONCAT || n->nin < 2 || n->nin > MAX_CONCAT_INPUTS || n->out[0] < 0) return false;
  for (int k = 1; k < n->nout; k++)
    if (n->out[k] >= 0) return false;
  const Tensor *y = &g->values[n->out[0]].t;
  if (!gpuc_shape_known(y) || y->rank < 1 || y->dt == GPUC_DT_UNDEF) return false;
  size_t es = gpuc_dtype_size(y->dt);
  if (es < 1 || es > 8) return false;
  int64_t a = gpuc_attr_i(n, "axis", 1);
  if (a < -y->rank || a >= y->rank) return false;
  int axis = (int)(a < 0 ? a + y->rank : a);
  for (int k = 0; k < n->nin; k++) {
    if (n->in[k] < 0) return false;
    const Tensor *x = &g->values[n->in[k]].t;
    if (!gpuc_shape_known(x) || x->dt != y->dt || x->rank != y->rank) return false;
    int64_t run = gpuc_shape_numel(y->rank - axis, x->dims + axis);
    if (run <= 0 || (run * (int64_t)es) % 16) return false;
  }
  return true;
}

/* An NHWC 2-D AveragePool (layout 1, passes/layout_nhwc.c) may head a
 * group too (PoolFormer's token mixer, pool(x) - x): the kernel walks the
 * taps of each output vector of channels itself (codegen/ew_kernel.c,
 * EXT_POOL), so the pooled value is never written. Channels in 16-byte
 * multiples (whole vectors per pixel). GPUC_NO_POOL_GROUP=1: not (A/B). */
static bool pool_leads_well(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_AVERAGEPOOL || n->nin < 1 || n->in[0] < 0 || n->out[0] < 0 ||
      gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NHWC || pass_env_on("GPUC_NO_POOL_GROUP"))
    return false;
  for (int k = 1; k < n->nout; k++)
    if (n->out[k] >= 0) return false;
  const Tensor *x = &g->values[n->in[0]].t, *y = &g->values[n->out[0]].t;
  if (!gpuc_shape_known(x) || !gpuc_shape_known(y) || x->rank != 4 || y->rank != 4 || x->dt != y->dt ||
      (x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16 && x->dt != GPUC_DT_F32))
    return false;
  return (x->dims[3] * (int64_t)gpuc_dtype_size(x->dt)) % 16 == 0;
}

static int find(int *parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

static bool same_dims(const Tensor *a, const Tensor *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

/* Every node reading v is a fusable op (no Transpose) with an output of
 * v's shape, and one does: then an Add producing v can join their group
 * (SiLU's x * Sigmoid(x) reads x twice). */
static bool readers_fusable(const Graph *g, int v) {
  int n = 0;
  for (int j = 0; j < g->nnodes; j++) {
    const Node *r = &g->nodes[j];
    bool reads = false;
    for (int k = 0; k < r->nin; k++) reads |= r->in[k] == v;
    if (!reads) continue;
    if (!candidate(g, r) || r->op == GPUC_OP_TRANSPOSE || !same_dims(&g->values[r->out[0]].t, &g->values[v].t))
      return false;
    n++;
  }
  return n > 0;
}

/* NHWC FusedConv(x, W, B) (activation 0, no residual) read only by a
 * LayerNormalization over its channels (the last axis; ConvNeXt's depthwise
 * conv once passes/simplify_transpose.c cancelled the permutes between) ->
 * FusedConv(x, W) and AddLayerNormalization(y, B, Scale, Bias): the bias
 * is added as the LayerNorm loads each row, not by a kernel of its own
 * that reads and writes the whole output. Returns the number moved, or -1. */
static int conv_bias_into_layernorm(Graph *g, bool training, GpucErr *e) {
  int moved = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers || !reader) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < g->nnodes; i++) {
    Node *conv = &g->nodes[i];
    if (conv->op != GPUC_OP_FUSEDCONV || gpuc_attr_i(conv, "activation", 0) != 0 ||
        gpuc_attr_i(conv, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NHWC || (conv->nin > 3 && conv->in[3] >= 0) ||
        conv->nin < 3 || conv->in[2] < 0 || conv->out[0] < 0)
      continue;
    int y = conv->out[0], bias = conv->in[2];
    const Tensor *yt = &g->values[y].t, *bt = &g->values[bias].t;
    if (!g->values[bias].is_const || (training && g->values[bias].is_param) || readers[y] != 1 ||
        g->values[y].is_output || yt->rank != 4 || bt->rank != 1 || bt->dims[0] != yt->dims[3] || bt->dt != yt->dt)
      continue;
    Node *ln = &g->nodes[reader[y]];
    int64_t axis = ln->op == GPUC_OP_LAYERNORMALIZATION ? gpuc_attr_i(ln, "axis", -1) : 0;
    if (ln->op != GPUC_OP_LAYERNORMALIZATION || ln->in[0] != y || (axis != -1 && axis != 3)) continue;
    bool stats = false;
    for (int k = 1; k < ln->nout; k++) stats |= ln->out[k] >= 0;
    if (stats) continue;
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
    size_t len = strlen(conv->name) + strlen(ln->name) + 8;
    char *name = gpuc_arena_alloc(&g->arena, len);
    if (!in || !name) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
    snprintf(name, len, "%s.bias, %s", conv->name, ln->name);
    in[0] = y;
    in[1] = bias;
    in[2] = ln->in[1];
    in[3] = ln->nin > 2 ? ln->in[2] : -1;
    ln->op = GPUC_OP_ADDLAYERNORMALIZATION;
    ln->in = in;
    ln->nin = 4;
    ln->nout = 1;
    ln->name = name;
    conv->in[2] = -1; /* FusedConv keeps its slots; B absent */
    moved++;
  }
  free(readers); free(reader);
  return moved;
}

/* Conv(x, W, B) -> Conv(x, W) then Add(., B as [C,1,..] / NHWC [C]) where every
 * reader of the Conv's output is a fusable op of its shape (readers_fusable).
 * Returns splits or -1. */
static int split_conv_bias(Graph *g, bool training, GpucErr *e) {
  int nn = g->nnodes, splits = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers || !reader) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < nn; i++) {
    Node *conv = &g->nodes[i];
    /* a FusedConv without activation or residual is a Conv (in NHWC) */
    bool fused = conv->op == GPUC_OP_FUSEDCONV && gpuc_attr_i(conv, "activation", 0) == 0 &&
                 (conv->nin < 4 || conv->in[3] < 0);
    if ((conv->op != GPUC_OP_CONV && !fused) || conv->nin < 3 || conv->in[2] < 0 || conv->out[0] < 0) continue;
    bool nhwc = fused && gpuc_attr_i(conv, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC;
    int y = conv->out[0], bias = conv->in[2];
    const Tensor *yt = &g->values[y].t, *bt = &g->values[bias].t;
    /* a parameter being trained must stay the one tensor the optimizer
     * updates: no reshaped copy of it */
    if (!g->values[bias].is_const || (training && g->values[bias].is_param) || readers[y] < 1 || g->values[y].is_output ||
        !gpuc_shape_known(yt) || yt->rank < 3 || bt->rank != 1 || bt->dims[0] != yt->dims[nhwc ? yt->rank - 1 : 1])
      continue;
    if (!readers_fusable(g, y)) continue;
    const Tensor ycopy = *yt; /* adding values may move the array */
    char name[512];
    snprintf(name, sizeof name, "%s.nobias", g->values[y].name);
    int y0 = gpuc_graph_add_value(g, name);
    snprintf(name, sizeof name, "%s.bias_view", g->values[bias].name);
    int bv = y0 < 0 ? -1 : gpuc_graph_add_value(g, name);
    snprintf(name, sizeof name, "%s.bias", conv->name);
    int ni = bv < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_ADD, name, 2, 1);
    if (ni < 0) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
    conv = &g->nodes[i]; /* adding nodes may move the array */
    Value *b = &g->values[bv], *src = &g->values[bias];
    int64_t dims[GPUC_MAX_RANK];
    dims[0] = src->t.dims[0];
    for (int d = 1; d < ycopy.rank - 1; d++) dims[d] = 1;
    gpuc_set_shape(&b->t, src->t.dt, nhwc ? 1 : ycopy.rank - 1, dims); /* NHWC: [C] is the last dim */
    if (gpuc_tensor_alloc(&b->t, e)) { free(readers); free(reader); return -1; }
    memcpy(b->t.data, src->t.data, gpuc_tensor_bytes(&src->t));
    b->is_const = true;
    g->values[y0].t = ycopy;
    g->values[y0].t.data = NULL;
    if (fused) conv->in[2] = -1; /* FusedConv keeps its slots; B absent */
    else conv->nin = 2;
    conv->out[0] = y0;
    g->values[y0].producer = i;
    Node *add = &g->nodes[ni];
    add->in[0] = y0;
    add->in[1] = bv;
    add->out[0] = y;
    g->values[y].producer = ni;
    splits++;
  }
  free(readers); free(reader);
  return splits && gpuc_graph_toposort(g, e) ? -1 : splits;
}

/* Cast(x) -> c -> Transpose -> y  =>  Transpose(x) -> t -> Cast -> y, where
 * c has no other reader, the Transpose leads well (transpose_leads_well)
 * and x does not come from a fusable op (whose group the Cast would
 * otherwise join): the Transpose heads the Cast's group, and the two are
 * one kernel reading x through permuted strides and writing y once. The
 * --fp16 plan's input, f32 NCHW -> f16 NHWC, was a Cast kernel and a
 * Transpose kernel. Both ops move each element unchanged (the conversion
 * aside), so the order changes no bit. Node p (the Cast) becomes the
 * Transpose and node i (the Transpose) the Cast: the order stays
 * topological. Returns the number swapped, or -1. */
static int swap_cast_transpose(Graph *g, GpucErr *e) {
  int swaps = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_graph_count_readers(g, readers, NULL);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *t = &g->nodes[i];
    if (t->op != GPUC_OP_TRANSPOSE || t->nin < 1 || t->in[0] < 0 || t->out[0] < 0) continue;
    int c = t->in[0], y = t->out[0], p = g->values[c].producer;
    if (p < 0 || readers[c] != 1 || g->values[c].is_output || !candidate(g, t)) continue;
    const Node *cast = &g->nodes[p];
    if (cast->op != GPUC_OP_CAST || cast->out[0] != c || cast->in[0] < 0 || !candidate(g, cast)) continue;
    int x = cast->in[0], xp = g->values[x].producer;
    if (xp >= 0 && candidate(g, &g->nodes[xp])) continue;
    if (!gpuc_shape_known(&g->values[x].t) || !transpose_leads_well(t, &g->values[y].t)) continue;
    char name[512];
    snprintf(name, sizeof name, "%s.before_cast", g->values[y].name);
    int tv = gpuc_graph_add_value(g, name);
    if (tv < 0) { free(readers); return gpuc_err_set(e, "%s: out of memory", g->path); }
    g->values[tv].t = g->values[y].t;
    g->values[tv].t.dt = g->values[x].t.dt;
    g->values[tv].t.data = NULL;
    Node tmp = g->nodes[p];
    g->nodes[p] = g->nodes[i];
    g->nodes[i] = tmp;
    g->nodes[p].in[0] = x;
    g->nodes[p].out[0] = tv;
    g->nodes[i].in[0] = tv;
    g->nodes[i].out[0] = y;
    g->values[tv].producer = p;
    g->values[y].producer = i;
    g->values[c].producer = -1; /* no longer written or read */
    swaps++;
  }
  free(readers);
  return swaps;
}

/* An InstanceNormalization whose output, through a chain of Reshapes
 * (views: the same elements in the same order), only members of one group
 * read (PoolFormer's GroupNorm(1) -> the per-channel affine Mul and Add)
 * heads that group: codegen/lower_fused.c runs its statistics kernels,
 * then the group's kernel computes x * a + b as its first term, so the
 * normalized value is never written (where the norm takes codegen's split
 * path; elsewhere the norm is lowered alone, the group as before). The
 * norm and the Reshapes get the group's id. Returns the number attached,
 * or -1. */
static int attach_norm_heads(Graph *g, GpucErr *e) {
  if (pass_env_on("GPUC_NO_NORM_GROUP")) return 0; /* GPU A/B runs: the rewrite off */
  int n = 0, *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers || !reader) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < g->nnodes; i++) {
    Node *in = &g->nodes[i];
    if (in->op != GPUC_OP_INSTANCENORMALIZATION || in->fuse_group || in->nin < 3 || in->in[0] < 0 || in->out[0] < 0)
      continue;
    bool stats = false;
    for (int k = 1; k < in->nout; k++) stats |= in->out[k] >= 0;
    const Tensor *xt = &g->values[in->in[0]].t;
    if (stats || !gpuc_shape_known(xt) || xt->rank < 3) continue;
    int chain[8], nchain = 0, v = in->out[0];
    while (!g->values[v].is_output && readers[v] == 1 && nchain < 8) {
      const Node *r = &g->nodes[reader[v]];
      if (r->op != GPUC_OP_RESHAPE || r->in[0] != v || r->out[0] < 0 || r->fuse_group) break;
      chain[nchain++] = reader[v];
      v = r->out[0];
    }
    /* every reader of v a member of one group, of v's shape */
    int grp = 0;
    bool ok = !g->values[v].is_output && readers[v] > 0 && gpuc_numel(&g->values[v].t) == gpuc_numel(xt);
    for (int j = 0; j < g->nnodes && ok; j++) {
      const Node *r = &g->nodes[j];
      bool reads = false;
      for (int k = 0; k < r->nin; k++) reads |= r->in[k] == v;
      if (!reads) continue;
      ok = r->fuse_group > 0 && (grp == 0 || r->fuse_group == grp) && r->op != GPUC_OP_TRANSPOSE &&
           r->op != GPUC_OP_CONCAT && same_dims(&g->values[r->out[0]].t, &g->values[v].t);
      grp = r->fuse_group;
    }
    if (!ok || !grp) continue;
    g->nodes[i].fuse_group = grp;
    for (int c = 0; c < nchain; c++) g->nodes[chain[c]].fuse_group = grp;
    n++;
  }
  free(readers); free(reader);
  return n;
}

int pass_fuse_elementwise(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  if (conv_bias_into_layernorm(g, o->training, e) < 0) return -1;
  if (split_conv_bias(g, o->training, e) < 0) return -1;
  if (swap_cast_transpose(g, e) < 0) return -1;
  int nn = g->nnodes;
  /* sole_reader[v]: the one node reading v, -1 none yet, -2 several */
  int *sole_reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  int *parent = malloc(sizeof(int) * ((size_t)nn + 1));
  int *size = malloc(sizeof(int) * ((size_t)nn + 1));
  int *id = calloc((size_t)nn + 1, sizeof(int));
  int *cats = calloc((size_t)nn + 1, sizeof(int)); /* Concats in the group of root i */
  if (!sole_reader || !parent || !size || !id || !cats) {
    free(sole_reader); free(parent); free(size); free(id); free(cats);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  for (int v = 0; v < g->nvalues; v++) sole_reader[v] = -1;
  for (int i = 0; i < nn; i++) {
    parent[i] = i;
    size[i] = 1;
    cats[i] = g->nodes[i].op == GPUC_OP_CONCAT;
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      sole_reader[v] = sole_reader[v] == -1 || sole_reader[v] == i ? i : -2;
    }
  }
  for (int i = 0; i < nn; i++) {
    const Node *n = &g->nodes[i];
    if (!candidate(g, n) || n->op == GPUC_OP_TRANSPOSE) continue; /* Transposes only lead */
    const Tensor *y = &g->values[n->out[0]].t;
    for (int k = 0; k < n->nin; k++) {
      int v = n->in[k];
      if (v < 0 || sole_reader[v] != i || g->values[v].is_output) continue;
      int p = g->values[v].producer;
      if (p < 0 || g->nodes[p].out[0] != v ||
          !(candidate(g, &g->nodes[p]) || concat_leads_well(g, &g->nodes[p]) || pool_leads_well(g, &g->nodes[p])))
        continue;
      if (g->nodes[p].op == GPUC_OP_TRANSPOSE && !transpose_leads_well(&g->nodes[p], &g->values[v].t))
        continue;
      if (!same_dims(&g->values[v].t, y)) continue;
      int a = find(parent, i), b = find(parent, p);
      if (a == b || size[a] + size[b] > MAX_MEMBERS || cats[a] + cats[b] > 1) continue;
      parent[b] = a;
      size[a] += size[b];
      cats[a] += cats[b];
    }
  }
  /* then producers whose output several members of one group read (SiLU's
   * x, read by Sigmoid and Mul): the value stays in registers. The
   * producer alone, or with the group it ends (CoAtNet's BatchNorm as
   * Mul + Add before its SiLU: the group's one output is the producer's,
   * every other member's value is read inside it), joins the readers'
   * group. */
  bool lone_only = pass_env_on("GPUC_NO_GROUP_JOIN");
  for (bool more = true; more;) {
    more = false;
    for (int p = nn - 1; p >= 0; p--) {
      const Node *pn = &g->nodes[p];
      int a = find(parent, p);
      if (!(candidate(g, pn) || concat_leads_well(g, pn) || pool_leads_well(g, pn)) || (size[a] > 1 && lone_only))
        continue;
      int v = pn->out[0], root = -1;
      if (g->values[v].is_output || sole_reader[v] != -2) continue;
      if (pn->op == GPUC_OP_TRANSPOSE && !transpose_leads_well(pn, &g->values[v].t)) continue;
      bool ok = true;
      for (int i = p + 1; i < nn && ok; i++) {
        const Node *n = &g->nodes[i];
        bool reads = false;
        for (int k = 0; k < n->nin; k++) reads |= n->in[k] == v;
        if (!reads) continue;
        int r = find(parent, i);
        ok = candidate(g, n) && n->op != GPUC_OP_TRANSPOSE && size[r] > 1 && r != a && (root < 0 || r == root) &&
             same_dims(&g->values[v].t, &g->values[n->out[0]].t);
        root = r;
      }
      if (!ok || root < 0 || size[root] + size[a] > MAX_MEMBERS || cats[root] + cats[a] > 1) continue;
      parent[a] = root;
      size[root] += size[a];
      cats[root] += cats[a];
      more = true;
    }
  }
  /* number the groups of two or more members 1, 2, ... */
  int groups = 0, fused = 0;
  for (int i = 0; i < nn; i++) {
    g->nodes[i].fuse_group = 0;
    int r = find(parent, i);
    if (size[r] < 2) continue;
    if (!id[r]) id[r] = ++groups;
    g->nodes[i].fuse_group = id[r];
    fused++;
  }
  free(sole_reader); free(parent); free(size); free(id); free(cats);
  if (groups && attach_norm_heads(g, e) < 0) return -1;
  return fused ? fused - groups : 0; /* kernels saved */
}
