/* The --int8 / --fp8 row steps fused into the kernels next to them, so the
 * half activation and the int32 GEMM output cross memory once each:
 *
 *   QuantizeRows(X) / QuantizeRowsF8(X) where X is made by
 *     - an elementwise group (passes/fuse_elementwise.c; the dequantize,
 *       bias, GELU of a Linear layer) or one elementwise node or a
 *       Transpose that keeps the innermost dim (attention's heads merged
 *       back), X (or a Reshape of X) read by nothing else: the group's
 *       kernel becomes a row kernel that evaluates the group per row,
 *       takes the row's absmax and writes only Xq and the scale (X itself
 *       is never stored);
 *     - a LayerNormalization or AddLayerNormalization over the last axis
 *       (X its Y, or a Reshape of Y that keeps the rows): its row kernel,
 *       which holds the row in registers, also writes Xq and the scale; Y
 *       is stored only when something else reads it (BERT's residual
 *       path; not GPT-2's pre-LN ln_1/ln_2);
 *     - a GatedUnit (LLaMA's SwiGLU, passes/fuse_gated_mlp.c; X its Y, or
 *       a Reshape of Y that keeps the rows): its kernel becomes a row
 *       kernel that also writes Xq and the scale (codegen/lower_gated.c),
 *       Y stored only when something else reads it.
 *   DequantizeRows(acc, xs, ws, b) read only by an AddLayerNormalization
 *     (or a LayerNormalization): the norm kernel loads acc (int32) and
 *     dequantizes each element as it loads the row; the half value is
 *     never stored.
 *
 * The pass does not rewrite nodes: it puts the members in one fusion group
 * (Node.fuse_group, as fuse_elementwise does), and codegen
 * (codegen/lower_row_group.c) lowers such a group as one kernel. The
 * fused kernels round each intermediate to the dtype the unfused graph
 * stores it in before using it, so they compute the bits the separate
 * kernels (and the CPU reference, which ignores groups) compute.
 *
 * A group is lowered where its last member stands, so every reader of a
 * value the group writes for others (a norm's Y) must come after that
 * member in node order; the pass checks it. Runs last, after
 * fuse_elementwise. */
#include "passes.h"
#include <stdlib.h>
#include <string.h>

static bool is_quantize(GpucOp op) { return op == GPUC_OP_QUANTIZEROWS || op == GPUC_OP_QUANTIZEROWSF8; }
static bool is_norm(GpucOp op) {
  return op == GPUC_OP_LAYERNORMALIZATION || op == GPUC_OP_ADDLAYERNORMALIZATION || op == GPUC_OP_RMSNORMALIZATION;
}

static bool same_dims(const Tensor *a, const Tensor *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

static bool half_or_f32(GpucDType dt) { return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16; }

/* n makes its output 0 and no other (a norm's Mean/InvStdDev unused) */
static bool y_only(const Node *n) {
  if (n->nout < 1 || n->out[0] < 0) return false;
  for (int k = 1; k < n->nout; k++)
    if (n->out[k] >= 0) return false;
  return true;
}

/* A norm over the last axis with Y only (no Mean/InvStdDev outputs). */
static bool norm_fusable(const Graph *g, const Node *n) {
  if (!is_norm(n->op) || n->fuse_group || !y_only(n)) return false;
  const Tensor *y = &g->values[n->out[0]].t;
  int64_t axis = gpuc_attr_i(n, "axis", -1);
  return gpuc_shape_known(y) && y->rank >= 1 && (axis == -1 || axis == y->rank - 1) && half_or_f32(y->dt);
}

/* A GatedUnit with Y only, float: its row kernel can quantize Y. */
static bool gated_fusable(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_GATEDUNIT || n->fuse_group || !y_only(n)) return false;
  const Tensor *y = &g->values[n->out[0]].t;
  return gpuc_shape_known(y) && y->rank >= 1 && half_or_f32(y->dt);
}

/* A Transpose whose output's innermost dim is its input's: a row kernel
 * reading through it reads runs of that dim (attention's heads merged
 * back: [B, H, S, D] -> [B, S, H, D], runs of D). */
static bool keeps_last_dim(const Node *n, const Tensor *y) {
  const int64_t *pv;
  int np = gpuc_attr_ints(n, "perm", &pv), r = y->rank;
  if (r < 1 || np != r) return false;
  return pv[r - 1] == r - 1 || pv[r - 1] == -1;
}

enum { MAX_RESHAPES = 4 };

/* The Reshape (ungrouped, after node `after`) reading v whose output keeps
 * rows of `row` elements and is read by one node, no graph output; -1. */
static int reshape_reader(const Graph *g, const int *readers, int v, int after, int64_t row) {
  for (int j = after + 1; j < g->nnodes; j++) {
    const Node *r = &g->nodes[j];
    int rv = r->out[0];
    if (r->op != GPUC_OP_RESHAPE || r->nin < 1 || r->in[0] != v || r->fuse_group || rv < 0 || readers[rv] != 1 ||
        g->values[rv].is_output)
      continue;
    const Tensor *rt = &g->values[rv].t;
    if (gpuc_shape_known(rt) && rt->rank >= 1 && rt->dims[rt->rank - 1] == row) return j;
  }
  return -1;
}

/* Every node reading v, other than q and `member` (a Reshape of the
 * group, or -1), stands after q in node order. */
static bool readers_after(const Graph *g, int v, int q, int member) {
  for (int j = 0; j < q; j++) {
    if (j == member) continue;
    const Node *r = &g->nodes[j];
    for (int k = 0; k < r->nin; k++)
      if (r->in[k] == v) return false;
  }
  return true;
}

/* The QuantizeRows node reading v, fusable at node index > after; -1 if none. */
static int quantize_reader(const Graph *g, int v, int after) {
  for (int j = after + 1; j < g->nnodes; j++) {
    const Node *q = &g->nodes[j];
    if (is_quantize(q->op) && q->nin >= 1 && q->in[0] == v && !q->fuse_group) return j;
  }
  return -1;
}

/* v is made by an ungrouped DequantizeRows that nothing else reads: row
 * scale one per row (or one), column scale and bias per column. */
static bool dequant_only(const Graph *g, const int *readers, int v) {
  int p = v >= 0 ? g->values[v].producer : -1;
  if (p < 0) return false;
  const Node *d = &g->nodes[p];
  if (d->op != GPUC_OP_DEQUANTIZEROWS || d->fuse_group || d->out[0] != v || readers[v] != 1 || g->values[v].is_output)
    return false;
  const Tensor *acc = &g->values[d->in[0]].t, *y = &g->values[v].t;
  int64_t cols = y->dims[y->rank - 1], rows = cols ? gpuc_numel(y) / cols : 0;
  int64_t nx = gpuc_numel(&g->values[d->in[1]].t), nw = gpuc_numel(&g->values[d->in[2]].t);
  bool bias_ok = d->nin < 4 || d->in[3] < 0 || gpuc_numel(&g->values[d->in[3]].t) == cols;
  return acc->dt == GPUC_DT_I32 && same_dims(acc, y) && (nx == rows || nx == 1) && (nw == cols || nw == 1) &&
         bias_ok && half_or_f32(y->dt);
}

/* DequantizeRows node d's GEMM takes d as its epilogue on the target
 * (PassOptions.int8_gemm_epilogue): then d stays there, and the row
 * kernel after it reads the half rows the epilogue writes (2 bytes an
 * element) instead of the int32 sums (4 bytes, written and read back;
 * fp32 rows save nothing, and stay in the row kernels).
 * BERT-base b32's FC1 (4096 x 3072): GEMM out + row kernel in and out
 * 25 + 25 + 12.6 MB against 50 + 50 + 12.6; its out-projections save 12.6
 * MB each the same way. GPUC_INT8_ROW_DEQUANT=1 keeps every dequantize in
 * the row kernels (A/B). */
static bool dequant_in_gemm(const Graph *g, const PassOptions *o, const Node *d) {
  if (d->op != GPUC_OP_DEQUANTIZEROWS || !o->int8_gemm_epilogue || d->nin < 1 || d->in[0] < 0 || d->out[0] < 0)
    return false;
  GpucDType dt = g->values[d->out[0]].t.dt;
  if (dt != GPUC_DT_F16 && dt != GPUC_DT_BF16) return false; /* fp32 rows weigh what int32 sums do */
  if (pass_env_on("GPUC_INT8_ROW_DEQUANT")) return false;
  int mm = g->values[d->in[0]].producer;
  return mm >= 0 && g->nodes[mm].op == GPUC_OP_MATMULINT8 && o->int8_gemm_epilogue(g, mm, o->sm);
}

/* v is a dequantize a norm's row kernel should load: made by one
 * (dequant_only) that its GEMM does not take as an epilogue */
static bool dequant_for_norm(const Graph *g, const PassOptions *o, const int *readers, int v) {
  return dequant_only(g, readers, v) && !dequant_in_gemm(g, o, &g->nodes[g->values[v].producer]);
}

/* Node p, or a member of its fusion group, is a dequantize its GEMM takes
 * as an epilogue: the group stays that epilogue, not a row kernel. */
static bool group_in_gemm(const Graph *g, const PassOptions *o, int p) {
  int grp = g->nodes[p].fuse_group;
  if (!grp) return dequant_in_gemm(g, o, &g->nodes[p]);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].fuse_group == grp && dequant_in_gemm(g, o, &g->nodes[i])) return true;
  return false;
}

int pass_fuse_quantize_rows(Graph *g, const PassOptions *o, GpucErr *e) {
  /* GPUC_NO_ROW_FUSION=1: the steps stay kernels of their own, for the GPU
   * check that compares the fused plan with the unfused one
   * (tests/gpu/row_fusion_bench.py) */
  if (pass_env_on("GPUC_NO_ROW_FUSION")) return 0; /* GPU A/B runs: the rewrite off */
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_graph_count_readers(g, readers, NULL);
  int next = 0, fused = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].fuse_group > next) next = g->nodes[i].fuse_group;
  /* norms: a dequantize before, a quantize after; GatedUnits: a quantize after */
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    if (!norm_fusable(g, n) && !gated_fusable(g, n)) continue;
    int y = n->out[0];
    int dq = -1;
    if (n->op == GPUC_OP_ADDLAYERNORMALIZATION && n->nin >= 2 && n->in[1] >= 0 &&
        !dequant_for_norm(g, o, readers, n->in[0]) && dequant_for_norm(g, o, readers, n->in[1]) &&
        same_dims(&g->values[n->in[0]].t, &g->values[n->in[1]].t)) {
      int t = n->in[0]; /* A + B = B + A bit for bit: the dequantized input goes first */
      n->in[0] = n->in[1];
      n->in[1] = t;
    }
    if (is_norm(n->op) && n->nin >= 1 && dequant_for_norm(g, o, readers, n->in[0])) dq = g->values[n->in[0]].producer;
    /* the quantize reads Y, or a chain of Reshapes of Y that keep the rows
     * (GPT-2's Conv1D input), each read by the next alone */
    int q = -1, chain[MAX_RESHAPES], nchain = 0, v = y, at = i;
    while ((q = quantize_reader(g, v, at)) < 0 && nchain < MAX_RESHAPES) {
      int r = reshape_reader(g, readers, v, at, g->values[y].t.dims[g->values[y].t.rank - 1]);
      if (r < 0) break;
      chain[nchain++] = at = r;
      v = g->nodes[r].out[0];
    }
    if (q >= 0 && !readers_after(g, y, q, nchain ? chain[0] : -1)) q = -1;
    if (q < 0) nchain = 0;
    if (dq < 0 && q < 0) continue;
    next++;
    if (dq >= 0) { g->nodes[dq].fuse_group = next; fused++; }
    n->fuse_group = next;
    for (int c = 0; c < nchain; c++) g->nodes[chain[c]].fuse_group = next; /* views: lowered by nobody */
    if (q >= 0) { g->nodes[q].fuse_group = next; fused++; }
  }
  /* quantize after an elementwise group or node whose output it alone
   * reads, possibly through a Reshape (a view: the rows are runs of the
   * same elements in the same order) */
  for (int j = 0; j < g->nnodes; j++) {
    Node *q = &g->nodes[j];
    if (!is_quantize(q->op) || q->fuse_group || q->nin < 1 || q->in[0] < 0) continue;
    int x = q->in[0], p = g->values[x].producer, chain[MAX_RESHAPES], nchain = 0;
    if (p < 0 || readers[x] != 1 || g->values[x].is_output) continue;
    while (g->nodes[p].op == GPUC_OP_RESHAPE && nchain < MAX_RESHAPES && g->nodes[p].nin >= 1 &&
           g->nodes[p].in[0] >= 0 && !g->nodes[p].fuse_group) {
      chain[nchain++] = p;
      x = g->nodes[p].in[0];
      p = g->values[x].producer;
      if (p < 0 || readers[x] != 1 || g->values[x].is_output) break;
    }
    if (p < 0 || readers[x] != 1 || g->values[x].is_output) continue;
    const Node *pn = &g->nodes[p];
    bool ew = (gpuc_ops[pn->op].flags & GPUC_OPF_ELEMWISE) && pn->op != GPUC_OP_IDENTITY && pn->op != GPUC_OP_DROPOUT;
    ew |= pn->op == GPUC_OP_TRANSPOSE && !pn->fuse_group && keeps_last_dim(pn, &g->values[x].t);
    if (!ew || !y_only(pn) || pn->out[0] != x || !half_or_f32(g->values[x].t.dt) || group_in_gemm(g, o, p)) continue;
    int grp = pn->fuse_group;
    if (!grp) g->nodes[p].fuse_group = grp = ++next;
    for (int c = 0; c < nchain; c++) g->nodes[chain[c]].fuse_group = grp; /* views: lowered by nobody */
    g->nodes[j].fuse_group = grp;
    fused++;
  }
  free(readers);
  return fused;
}
