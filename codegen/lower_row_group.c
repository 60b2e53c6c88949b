/* Fusion groups that end in a row step (passes/fuse_quantize_rows.c):
 *
 *   [DequantizeRows] -> LayerNormalization | AddLayerNormalization |
 *   RMSNormalization -> [QuantizeRows(F8)]
 *     the norm's warp-per-row kernel (codegen/lower_norm.c, LowerCtx.row)
 *     loads X as int32 and dequantizes it, and/or quantizes its Y per row
 *     as a second output;
 *   GatedUnit [-> Reshape] -> QuantizeRows(F8)
 *     its row kernel (codegen/lower_gated.c, LowerCtx.row) quantizes Y;
 *   elementwise members (or a Transpose) ... [-> Reshape] -> QuantizeRows(F8)
 *     one block per row evaluates the members' program (ew_kernel.c),
 *     rounds the result to the dtype the graph stores it in and quantizes
 *     the row; the float row is never stored.
 *
 * The group is checked first; a group that does not have one of these
 * shapes, or rows the kernels cannot hold, is lowered node by node
 * (slower, never different). */
#include "ew_kernel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_quantize(GpucOp op) { return op == GPUC_OP_QUANTIZEROWS || op == GPUC_OP_QUANTIZEROWSF8; }

static int label_of(const Graph *g, const int *m, int nm, StrBuf *label) {
  for (int t = 0; t < nm; t++) sb_printf(label, "%s%s", t ? ", " : "", g->nodes[m[t]].name);
  return label->oom ? -1 : 0;
}

/* The head of a [dq] node [q] group whose lowering takes LowerCtx.row: a
 * norm (dequantize and/or quantize), a GatedUnit (quantize only) */
static bool row_head_fusable(const Graph *g, const Node *n, bool dq) {
  return n->op == GPUC_OP_GATEDUNIT ? !dq && cg_gated_row_fusable(g, n) : cg_norm_row_fusable(g, n, dq);
}

/* [dq] norm [q], GatedUnit q: 1 when the group is not of this shape. */
static int row_node_group(PlanBuilder *pb, const Graph *g, const int *m, int nm) {
  int t = 0, dq = -1, q = -1;
  if (nm > 0 && g->nodes[m[0]].op == GPUC_OP_DEQUANTIZEROWS) dq = m[t++];
  if (t >= nm) return 1;
  int ni = m[t++], r0 = t;
  const Node *n = &g->nodes[ni];
  while (t < nm && g->nodes[m[t]].op == GPUC_OP_RESHAPE) t++; /* views of Y: not lowered */
  int nreshape = t - r0;
  if (t < nm && is_quantize(g->nodes[m[t]].op)) q = m[t++];
  if (t != nm || (dq < 0 && q < 0) || (nreshape && q < 0) || !row_head_fusable(g, n, dq >= 0)) return 1;
  for (int k = 0, v = n->out[0]; k <= nreshape; k++) { /* Y -> Reshape ... -> the quantize, in order */
    const Node *r = &g->nodes[k < nreshape ? m[r0 + k] : q >= 0 ? q : ni];
    if (k == nreshape && q < 0) break;
    if (r->in[0] != v) return 1;
    v = r->out[0];
  }
  if (dq >= 0) {
    const Node *d = &g->nodes[dq];
    if (d->out[0] != n->in[0] || d->nin < 3 || g->values[d->in[0]].t.dt != GPUC_DT_I32) return 1;
  }
  if (q >= 0) {
    const Node *qn = &g->nodes[q];
    if (qn->out[0] < 0 || qn->nout < 2 || qn->out[1] < 0) return 1;
    const Tensor *xt = &g->values[qn->in[0]].t, *yt = &g->values[n->out[0]].t;
    if (xt->dims[xt->rank - 1] != yt->dims[yt->rank - 1]) return 1; /* the quantize's rows are the norm's */
  }
  /* Y stored only when a node outside the group reads it (or it is a graph output) */
  int y = n->out[0];
  bool y_read = g->values[y].is_output;
  for (int i = 0; i < g->nnodes && !y_read; i++) {
    if (i == q || (nreshape && i == m[r0])) continue;
    for (int k = 0; k < g->nodes[i].nin; k++) y_read |= g->nodes[i].in[k] == y;
  }
  RowFuse rf = {.dq = dq, .q = q, .drop_y = q >= 0 && !y_read, .tacc = UINT32_MAX, .txs = UINT32_MAX, .tws = UINT32_MAX, .tbias = UINT32_MAX,
                .tq = UINT32_MAX, .ts = UINT32_MAX};
  if (dq >= 0) {
    const Node *d = &g->nodes[dq];
    rf.tacc = cg_value_tensor(pb, d->in[0]);
    rf.txs = cg_value_tensor(pb, d->in[1]);
    rf.tws = cg_value_tensor(pb, d->in[2]);
    if (d->nin > 3 && d->in[3] >= 0) rf.tbias = cg_value_tensor(pb, d->in[3]);
  }
  if (q >= 0) {
    rf.tq = cg_value_tensor(pb, g->nodes[q].out[0]);
    rf.ts = cg_value_tensor(pb, g->nodes[q].out[1]);
  }
  StrBuf label = {0};
  if (label_of(g, m, nm, &label)) {
    free(label.s);
    return gpuc_err_set(cg_builder_err(pb), "%s: out of memory", g->path);
  }
  int rc = cg_lower_node_row(pb, ni, &rf, label.s);
  free(label.s);
  return rc;
}

/* elementwise members, then q: 1 when the group is not of this shape or
 * its rows do not fit. */
static int ew_quantize_group(PlanBuilder *pb, const Graph *g, const int *m, int nm, const int *reader_group) {
  const Node *qn = &g->nodes[m[nm - 1]];
  int ne = nm - 1;
  if (ne < 1 || !is_quantize(qn->op) || qn->nout < 2 || qn->out[0] < 0 || qn->out[1] < 0) return 1;
  /* the row: the sink's output, or Reshapes of it (views: not lowered) */
  int x = qn->in[0], v = x;
  while (ne >= 2 && g->nodes[m[ne - 1]].op == GPUC_OP_RESHAPE) {
    const Node *r = &g->nodes[m[ne - 1]];
    if (r->out[0] != v || r->nin < 1) return 1;
    v = r->in[0];
    ne--;
  }
  const Node *sink = &g->nodes[m[ne - 1]];
  if (v != sink->out[0] || gpuc_numel(&g->values[x].t) != gpuc_numel(&g->values[v].t)) return 1;
  if (ne >= 2 && !cg_group_valid(g, m, ne, reader_group)) return 1;
  if (ne == 1 && sink->op != GPUC_OP_TRANSPOSE &&
      (!(gpuc_ops[sink->op].flags & GPUC_OPF_ELEMWISE) || sink->nin > EW_MAX_ARGS))
    return 1;
  EwProgram *p = calloc(1, sizeof *p);
  EwCapture *caps = calloc((size_t)ne, sizeof *caps);
  StrBuf label = {0};
  int rc = -1;
  if (!p || !caps || label_of(g, m, nm, &label)) {
    rc = gpuc_err_set(cg_builder_err(pb), "%s: out of memory", g->path);
    goto out;
  }
  rc = ew_group_program(pb, g, m, ne, p, caps);
  if (rc) goto out;
  p->y = &g->values[sink->out[0]].t;
  p->ty = UINT32_MAX; /* never stored */
  uint32_t tq = cg_value_tensor(pb, qn->out[0]), ts = cg_value_tensor(pb, qn->out[1]);
  const Tensor *ins[1] = {NULL}, *outs[2] = {&g->values[qn->out[0]].t, &g->values[qn->out[1]].t};
  uint32_t tin[1] = {UINT32_MAX}, tout[2] = {tq, ts};
  LowerCtx c = {.g = g, .n = qn, .node_index = m[nm - 1], .nin = 0, .nout = 2, .in = ins, .out = outs,
                .tin = tin, .tout = tout, .pb = pb, .opt = cg_builder_opt(pb), .err = cg_builder_err(pb),
                .label = label.s};
  snprintf(c.kname, sizeof c.kname, "k%d_Fused%dQuantize", m[nm - 1], ne);
  const Tensor *xt = &g->values[x].t;
  rc = cg_ew_rows_quantize(&c, p, xt->rank ? xt->dims[xt->rank - 1] : 1, qn->op == GPUC_OP_QUANTIZEROWSF8, tq, ts);
  if (rc) goto out;
  rc = cg_cost_steps(cg_builder_plan(pb), &c);
  if (!rc) { /* the estimate: one operation per member per element, and the absmax */
    Plan *plan = cg_builder_plan(pb);
    plan->costs[plan->nsteps - 1].flops = (uint64_t)gpuc_numel(p->y) * (uint64_t)nm;
  }
out:
  ew_captures_free(caps, ne);
  free(p);
  free(label.s);
  return rc;
}

int cg_lower_row_group(PlanBuilder *pb, const Graph *g, const int *m, int nm, const int *reader_group) {
  int rc = row_node_group(pb, g, m, nm);
  if (rc == 1) rc = ew_quantize_group(pb, g, m, nm, reader_group);
  if (rc != 1) return rc;
  /* not one kernel (rows past the registers, say): the elementwise members
   * still as the group fuse_elementwise made, the rest one by one */
  int ne = 0;
  while (ne < nm && (gpuc_ops[g->nodes[m[ne]].op].flags & GPUC_OPF_ELEMWISE)) ne++;
  if (ne < 2) return cg_lower_one_by_one(pb, m, nm);
  if (cg_lower_group(pb, g, m, ne, reader_group)) return -1;
  return cg_lower_one_by_one(pb, m + ne, nm - ne);
}
