/* A gated MLP's two projections as one GEMM: LLaMA's SwiGLU
 *   y = silu(x Wg) * (x Wu),  silu(g) = g * Sigmoid(g)
 * (Mistral, Qwen, ... copy it; both exporters write Sigmoid and two Muls)
 * becomes
 *   h = x [Wg | Wu]           one MatMul, weights concatenated along N
 *   y = GatedUnit(h) {silu}   one kernel (internal op, codegen/lower_gated.c)
 * One GEMM launch and one read of x instead of two; the activation reads
 * one tensor. f32 values are the same bits (each output column of the
 * merged GEMM is the same dot product; GatedUnit rounds as the ops it
 * replaces).
 *
 * Conditions: gate and up are MatMul(x, W) of the same x with constant
 * 2-D float W of one shape [K, N] and dtype; g is read only by the Sigmoid
 * and its Mul, every other pattern value only once; none is a graph
 * output. Runs at -O2 before fuse_matmul (a bias Add after either GEMM
 * leaves the pattern alone; not in training: the weights are parameters
 * there); GPUC_NO_FUSE_GATED_MLP=1 turns it off (GPU A/B). */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Node *producer(const Graph *g, int v, GpucOp op) {
  if (v < 0 || g->values[v].is_output) return NULL;
  int p = g->values[v].producer;
  return p >= 0 && g->nodes[p].op == op && g->nodes[p].nout == 1 ? &g->nodes[p] : NULL;
}

/* v = MatMul(x, W) with W a constant float [K, N]: the node */
static const Node *const_matmul(const Graph *g, int v) {
  const Node *m = producer(g, v, GPUC_OP_MATMUL);
  if (!m || m->nin != 2 || m->in[0] < 0 || m->in[1] < 0) return NULL;
  const Value *w = &g->values[m->in[1]];
  if (!w->is_const || !w->t.data || w->t.rank != 2 || !gpuc_dtype_is_float(w->t.dt) || w->t.dt != g->values[v].t.dt)
    return NULL;
  return m;
}

/* s = Mul(g, Sigmoid(g)) (either order), s read once: g in *gv, the
 * Sigmoid node in *sig */
static bool silu(const Graph *g, int s, const int *readers, int *gv, const Node **sig, const Node **mul) {
  const Node *m = producer(g, s, GPUC_OP_MUL);
  if (!m || readers[s] != 1 || m->nin != 2) return false;
  for (int k = 0; k < 2; k++) {
    const Node *sg = producer(g, m->in[k], GPUC_OP_SIGMOID);
    if (sg && readers[m->in[k]] == 1 && sg->in[0] == m->in[1 - k] && readers[m->in[1 - k]] == 2) {
      *gv = m->in[1 - k];
      *sig = sg;
      *mul = m;
      return true;
    }
  }
  return false;
}

/* Mul node y as the pattern's end: its gate and up GEMMs, Sigmoid and
 * silu Mul (nodes[0..4)) */
static bool match(const Graph *g, const Node *y, const int *readers, int nodes[4]) {
  if (y->op != GPUC_OP_MUL || y->nin != 2 || y->nout != 1 || y->out[0] < 0) return false;
  for (int k = 0; k < 2; k++) {
    int gv, uv = y->in[1 - k];
    const Node *sig, *mul;
    if (!silu(g, y->in[k], readers, &gv, &sig, &mul) || uv < 0 || readers[uv] != 1) continue;
    const Node *mg = const_matmul(g, gv), *mu = const_matmul(g, uv);
    if (!mg || !mu || mg == mu || mg->in[0] != mu->in[0]) continue;
    const Tensor *wg = &g->values[mg->in[1]].t, *wu = &g->values[mu->in[1]].t;
    if (wg->dt != wu->dt || wg->dims[0] != wu->dims[0] || wg->dims[1] != wu->dims[1]) continue;
    nodes[0] = (int)(mg - g->nodes);
    nodes[1] = (int)(mu - g->nodes);
    nodes[2] = (int)(sig - g->nodes);
    nodes[3] = (int)(mul - g->nodes);
    return true;
  }
  return false;
}

/* The rewrite of end node yi with match's nodes: 0 done, -1 error */
static int rewrite(Graph *g, int yi, const int nodes[4], bool *drop, GpucErr *e) {
  const Node *mg = &g->nodes[nodes[0]], *mu = &g->nodes[nodes[1]];
  const Tensor *wg = &g->values[mg->in[1]].t, *wu = &g->values[mu->in[1]].t;
  int64_t K = wg->dims[0], N = wg->dims[1], wd[2] = {K, 2 * N};
  char name[512];
  snprintf(name, sizeof name, "%s.gate_up_weight", mg->name);
  int w = gpuc_linear_new_const(g, name, wg->dt, 2, wd, e);
  if (w < 0) return -1;
  wg = &g->values[mg->in[1]].t; /* values may have moved */
  wu = &g->values[mu->in[1]].t;
  size_t es = gpuc_dtype_size(wg->dt), row = (size_t)N * es;
  char *dst = g->values[w].t.data;
  for (int64_t r = 0; r < K; r++) {
    memcpy(dst + (size_t)r * 2 * row, (const char *)wg->data + (size_t)r * row, row);
    memcpy(dst + (size_t)r * 2 * row + row, (const char *)wu->data + (size_t)r * row, row);
  }
  /* the earlier GEMM (both come after x and before y) computes h; its
   * output value grows to [..., 2N] */
  int first = nodes[0] < nodes[1] ? nodes[0] : nodes[1];
  Node *gm = &g->nodes[first];
  int *gin = gpuc_arena_alloc(&g->arena, sizeof(int) * 2), *yin = gpuc_arena_alloc(&g->arena, sizeof(int));
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  if (!gin || !yin || !at) return gpuc_err_set(e, "%s: out of memory", g->path);
  size_t len = strlen(gm->name) + 16;
  char *nmv = gpuc_arena_alloc(&g->arena, len);
  if (!nmv) return gpuc_err_set(e, "%s: out of memory", g->path);
  snprintf(nmv, len, "%s (gate+up)", gm->name);
  gm->name = nmv;
  gin[0] = gm->in[0];
  gin[1] = w;
  gm->in = gin;
  int h = gm->out[0];
  Tensor *ht = &g->values[h].t;
  ht->dims[ht->rank - 1] = 2 * N;
  Node *y = &g->nodes[yi];
  yin[0] = h;
  *at = (Attr){.name = "activation", .kind = GPUC_ATTR_STRING, .s = "silu"};
  y->op = GPUC_OP_GATEDUNIT;
  y->in = yin;
  y->nin = 1;
  y->attrs = at;
  y->nattr = 1;
  for (int k = 0; k < 4; k++)
    if (nodes[k] != first) drop[nodes[k]] = true;
  return 0;
}

int pass_fuse_gated_mlp(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training || pass_env_on("GPUC_NO_FUSE_GATED_MLP")) return 0;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  for (int i = 0; i < nn; i++) {
    int nodes[4];
    if (ps.drop[i] || !match(g, &g->nodes[i], ps.readers, nodes)) continue;
    bool taken = false;
    for (int k = 0; k < 4; k++) taken |= ps.drop[nodes[k]];
    if (taken) continue;
    if (rewrite(g, i, nodes, ps.drop, e)) { pass_scratch_free(&ps); return -1; }
    changes++;
  }
  gpuc_graph_remove_nodes(g, ps.drop);
  pass_scratch_free(&ps);
  return changes;
}
