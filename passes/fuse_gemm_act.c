/* MatMulBias + activation -> MatMulBias with attribute activation, which
 * cuBLASLt applies in the GEMM's epilogue after the bias (codegen/
 * lower_linalg.c), so the [M,N] product is written once instead of
 * written, read and written again by an activation kernel (ConvNeXt's
 * 4C-wide MLP: about a quarter of the bytes the model moves).
 *
 * activation: 1 Relu; 3 Gelu(approximate="tanh"); 2 the exact, erf GELU:
 * Gelu(approximate="none") or the TorchScript exporter's pattern
 *   Mul(Mul(y, Add(Erf(Div(y, sqrt 2)), 1)), 0.5)   (or Mul(y, 1/sqrt 2),
 *   or Mul(Mul(y, 0.5), Add(..)))
 * cuBLASLt's GELU epilogue computes the tanh approximation, which differs
 * from the erf form by at most 4.7e-4 absolute (at x = -2.70, where GELU is
 * -0.0094): the size of half's rounding of values near 0.5 (ulp 4.9e-4),
 * within the fp16 tolerance, but not within fp32's 1e-4 rel L2. So the
 * erf GELU (2) is fused only for --fp16 and --bf16 plans (bf16 rounds
 * coarser still); an f32 MatMulBias with
 * activation 2 (one the fp16 pass left in f32) runs the exact form in a
 * kernel after the GEMM. The CPU reference computes each form exactly.
 * Conditions: the MatMulBias's output is read only by the pattern and is
 * no graph output, nor are the pattern's inner values. */
#include "passes.h"
#include "infer_elementwise.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* v is a one-element constant within 1e-6 of want */
static bool scalar_is(const Graph *g, int v, double want) {
  if (v < 0) return false;
  const Value *c = &g->values[v];
  return c->is_const && c->t.data && gpuc_numel(&c->t) == 1 && fabs(gpuc_get_f64(&c->t, 0) - want) <= 1e-6;
}

/* node n (op) reads v and, as its other input, a scalar constant want */
static bool op_with_scalar(const Graph *g, const Node *n, GpucOp op, int v, double want) {
  if (n->op != op || n->nin != 2) return false;
  if (n->in[0] == v) return scalar_is(g, n->in[1], want);
  return op != GPUC_OP_DIV && n->in[1] == v && scalar_is(g, n->in[0], want);
}

typedef struct {
  int *readers, *reader; /* per value: how many slots read it, the last reader */
} Uses;

/* the one node reading v (v no graph output), or -1 */
static int sole(const Graph *g, const Uses *u, int v) {
  return v >= 0 && u->readers[v] == 1 && !g->values[v].is_output ? u->reader[v] : -1;
}

/* The erf GELU of y: its output value, with its 5 nodes in nodes[], or -1.
 * y's two readers are the scaling (Div by sqrt 2 / Mul by 1/sqrt 2) and
 * the Mul by y (or by 0.5). */
static int erf_gelu(const Graph *g, const Uses *u, int y, int nodes[5]) {
  if (u->readers[y] != 2 || g->values[y].is_output) return -1;
  int rd[2], nr = 0;
  for (int i = 0; i < g->nnodes && nr < 2; i++)
    for (int k = 0; k < g->nodes[i].nin; k++)
      if (g->nodes[i].in[k] == y) { rd[nr++] = i; break; }
  if (nr != 2) return -1;
  for (int s = 0; s < 2; s++) {
    const Node *d = &g->nodes[rd[s]], *other = &g->nodes[rd[1 - s]];
    if (!op_with_scalar(g, d, GPUC_OP_DIV, y, sqrt(2.0)) && !op_with_scalar(g, d, GPUC_OP_MUL, y, sqrt(0.5)))
      continue;
    int ei = sole(g, u, d->out[0]);
    if (ei < 0 || g->nodes[ei].op != GPUC_OP_ERF) continue;
    int ai = sole(g, u, g->nodes[ei].out[0]);
    if (ai < 0 || !op_with_scalar(g, &g->nodes[ai], GPUC_OP_ADD, g->nodes[ei].out[0], 1.0)) continue;
    int a = g->nodes[ai].out[0], mi = sole(g, u, a);
    if (mi < 0 || g->nodes[mi].op != GPUC_OP_MUL || g->nodes[mi].nin != 2) continue;
    const Node *m = &g->nodes[mi];
    int m_other = m->in[0] == a ? m->in[1] : m->in[0];
    nodes[0] = rd[s]; nodes[1] = ei; nodes[2] = ai; nodes[3] = mi;
    if (m_other == y && other == m) { /* y * (1 + erf) then * 0.5 */
      int hi = sole(g, u, m->out[0]);
      if (hi < 0 || !op_with_scalar(g, &g->nodes[hi], GPUC_OP_MUL, m->out[0], 0.5)) continue;
      nodes[4] = hi;
      return g->nodes[hi].out[0];
    }
    if (op_with_scalar(g, other, GPUC_OP_MUL, y, 0.5) && m_other == other->out[0] &&
        sole(g, u, other->out[0]) == mi) { /* (y * 0.5) * (1 + erf) */
      nodes[4] = rd[1 - s];
      return m->out[0];
    }
  }
  return -1;
}

static int set_activation(Graph *g, Node *n, int act, GpucErr *e) {
  Attr *attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 1));
  if (!attrs) return gpuc_err_set(e, "%s: out of memory", g->path);
  int na = 0;
  for (int j = 0; j < n->nattr; j++)
    if (strcmp(n->attrs[j].name, "activation")) attrs[na++] = n->attrs[j];
  attrs[na++] = (Attr){.name = "activation", .kind = GPUC_ATTR_INT, .i = act};
  n->attrs = attrs;
  n->nattr = na;
  return 0;
}

int pass_fuse_matmul_act(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0; /* a backward reads the forward's activations by name */
  /* GEMMs that other passes take over have no activation epilogue here:
   * --int8 (cuBLASLt's int32 output; the activation joins DequantizeRows'
   * elementwise group), --fp8 (its GEMM takes the bias only) and --prune
   * 2:4 (plan.h: a PLAN_GEMM_F_SPARSE24 GEMM has no epilogue, so an
   * activation here would keep the GEMM dense) */
  if (o->int8 || o->fp8 || o->prune_kind == GPUC_PRUNE_24) return 0;
  int nn = g->nnodes, changes = 0, rc = -1;
  Uses u = {malloc(sizeof(int) * ((size_t)g->nvalues + 1)), malloc(sizeof(int) * ((size_t)g->nvalues + 1))};
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!u.readers || !u.reader || !drop) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  gpuc_graph_count_readers(g, u.readers, u.reader);
  for (int i = 0; i < nn; i++) {
    Node *mb = &g->nodes[i];
    if (mb->op != GPUC_OP_MATMULBIAS || mb->out[0] < 0 || gpuc_attr_i(mb, "activation", 0) != 0) continue;
    int y = mb->out[0], act = 0, out = -1, nodes[5], nabs = 0;
    int r = sole(g, &u, y);
    const Node *rn = r >= 0 ? &g->nodes[r] : NULL;
    if (rn && drop[r]) continue;
    if (rn && rn->op == GPUC_OP_RELU) act = 1;
    else if (rn && rn->op == GPUC_OP_GELU && gpuc_gelu_tanh(rn) == 1) act = 3;
    else if (rn && rn->op == GPUC_OP_GELU && gpuc_gelu_tanh(rn) == 0 && (o->fp16 || o->bf16)) act = 2;
    if (act) {
      out = rn->out[0];
      nodes[nabs++] = r;
    } else if ((o->fp16 || o->bf16) && (out = erf_gelu(g, &u, y, nodes)) >= 0) {
      act = 2;
      nabs = 5;
    }
    if (!act) continue;
    bool taken = false;
    for (int k = 0; k < nabs; k++) taken |= drop[nodes[k]];
    if (taken) continue;
    if (set_activation(g, &g->nodes[i], act, e)) goto done;
    /* the name lists the nodes it covers, for inspect and profiles */
    size_t len = strlen(g->nodes[i].name) + 1;
    for (int k = 0; k < nabs; k++) len += strlen(g->nodes[nodes[k]].name) + 2;
    char *name = gpuc_arena_alloc(&g->arena, len);
    if (!name) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    strcpy(name, g->nodes[i].name);
    for (int k = 0; k < nabs; k++) { strcat(name, ", "); strcat(name, g->nodes[nodes[k]].name); }
    g->nodes[i].name = name;
    for (int k = 0; k < nabs; k++) drop[nodes[k]] = true;
    g->nodes[i].out[0] = out; /* producers are recomputed as the absorbed nodes go */
    changes++;
  }
  gpuc_graph_remove_nodes(g, drop);
  rc = changes;
done:
  free(u.readers); free(u.reader); free(drop);
  return rc;
}
