/* A fusion group (passes/fuse_elementwise.c) as one elementwise kernel.
 *
 * Each member is lowered by its own lower_<Op> with LowerCtx.capture set,
 * so its expression is exactly the one its stand-alone kernel would use;
 * the expressions become the terms of one program (ew_kernel.h) whose
 * intermediates live in registers. The group is checked first (the pass
 * made it, but codegen does not trust its input): members are single-output
 * elementwise nodes (a Transpose or a Concat may head the group, its inputs
 * read from memory: permuted strides, or the piece each element's column
 * falls in), only the last member's output is read outside the
 * group, all outputs share its shape. If a check fails or a member's
 * lowering is not one plain elementwise kernel, the members are lowered one
 * by one instead: slower, never wrong. */
#include "ew_kernel.h"
#include "infer_nn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool same_dims(const Tensor *a, const Tensor *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

static int term_of(const Graph *g, const int *m, int nm, int v) {
  for (int t = 0; t < nm; t++)
    if (g->nodes[m[t]].out[0] == v) return t;
  return -1;
}

/* reader_group[v]: the fusion group of every node reading value v (0:
 * ungrouped nodes), -1 when readers differ, -2 when nothing reads it */
void cg_reader_groups(const Graph *g, int *reader_group) {
  for (int v = 0; v < g->nvalues; v++) reader_group[v] = -2;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      int grp = g->nodes[i].fuse_group;
      reader_group[v] = reader_group[v] == -2 || reader_group[v] == grp ? grp : -1;
    }
}

bool cg_group_valid(const Graph *g, const int *m, int nm, const int *reader_group) {
  if (nm < 2 || nm > EW_MAX_TERMS) return false;
  const Tensor *y = &g->values[g->nodes[m[nm - 1]].out[0]].t;
  for (int t = 0; t < nm; t++) {
    const Node *n = &g->nodes[m[t]];
    bool transpose = n->op == GPUC_OP_TRANSPOSE || n->op == GPUC_OP_AVERAGEPOOL, concat = n->op == GPUC_OP_CONCAT;
    if (!(transpose || concat || (gpuc_ops[n->op].flags & GPUC_OPF_ELEMWISE)) || n->out[0] < 0 ||
        n->nin > (concat ? EW_MAX_CAT : EW_MAX_ARGS))
      return false;
    /* a Transpose, an AveragePool or a Concat reads memory: its inputs must not be members' */
    if (transpose && n->in[0] >= 0 && term_of(g, m, nm, n->in[0]) >= 0) return false;
    for (int k = 0; concat && k < n->nin; k++)
      if (n->in[k] < 0 || term_of(g, m, nm, n->in[k]) >= 0) return false;
    for (int k = 1; k < n->nout; k++)
      if (n->out[k] >= 0) return false;
    const Value *v = &g->values[n->out[0]];
    if (!same_dims(&v->t, y)) return false;
    /* intermediates are read by members only */
    if (t < nm - 1 && (v->is_output || reader_group[n->out[0]] != n->fuse_group)) return false;
  }
  return true;
}

/* Term t is ext k read as it is (x0), in the compute type of dtype in,
 * stored as dtype out: the head terms that only move or gather data */
static void pass_through_term(EwTerm *term, int k, GpucDType in, GpucDType out) {
  term->nargs = 1;
  term->arg[0].ext = k;
  term->arg[0].term = -1;
  term->ct = ew_natural_type(in);
  term->pre = NULL;
  term->expr = "x0";
  term->dt = out;
}

/* Term t = Transpose(x): x's element at the output's coordinates, read with
 * stride[d] = x's row-major stride of dim perm[d]. Nonzero: not inlinable. */
static int transpose_term(PlanBuilder *pb, const Graph *g, const Node *n, EwProgram *p, int t) {
  const Tensor *x = &g->values[n->in[0]].t, *y = &g->values[n->out[0]].t;
  int r = x->rank, perm[GPUC_MAX_RANK];
  const int64_t *pv;
  int np = gpuc_attr_ints(n, "perm", &pv);
  if (np > 0 && np != r) return 1;
  for (int d = 0; d < r; d++) perm[d] = np > 0 ? (int)pv[d] : r - 1 - d;
  int64_t xs[GPUC_MAX_RANK], stride[GPUC_MAX_RANK], s = 1;
  for (int d = r - 1; d >= 0; d--) { xs[d] = s; s *= x->dims[d]; }
  for (int d = 0; d < r; d++) {
    if (perm[d] < 0 || perm[d] >= r) return 1;
    stride[d] = xs[perm[d]];
  }
  Tensor view = *y;
  view.dt = x->dt;
  int ext = ew_ext_strided(p, cg_value_tensor(pb, n->in[0]), &view, stride);
  if (ext < 0) return 1;
  pass_through_term(&p->term[t], ext, x->dt, y->dt);
  return 0;
}

/* Term t = Concat(x0, x1, ..): the group's one EXT_CAT input (EwCat),
 * read where each element's column falls. Nonzero: not inlinable (a second
 * Concat, pieces of another dtype, a piece empty or too many). */
static int concat_term(PlanBuilder *pb, const Graph *g, const Node *n, EwProgram *p, int t) {
  const Tensor *y = &g->values[n->out[0]].t;
  int r = y->rank, axis;
  if (!p->allow_cat || p->cat.n || n->nin < 2 || n->nin > EW_MAX_CAT || r < 1) return 1;
  int64_t a = gpuc_attr_i(n, "axis", 1);
  if (a < -r || a >= r) return 1;
  axis = (int)(a < 0 ? a + r : a);
  int64_t run = gpuc_shape_numel(r - axis, y->dims + axis), sum = 0;
  for (int k = 0; k < n->nin; k++) {
    const Tensor *x = &g->values[n->in[k]].t;
    if (x->dt != y->dt || x->rank != r) return 1;
    for (int d = 0; d < r; d++)
      if (d != axis && x->dims[d] != y->dims[d]) return 1;
    int64_t len = gpuc_shape_numel(r - axis, x->dims + axis);
    if (len <= 0) return 1;
    p->cat.tensor[k] = cg_value_tensor(pb, n->in[k]);
    p->cat.len[k] = len;
    sum += len;
  }
  if (sum != run) return 1;
  p->cat.n = n->nin;
  p->cat.run = run;
  if (p->next == EW_MAX_EXT) return 1;
  EwExt *x = &p->ext[p->next];
  memset(x, 0, sizeof *x);
  x->tensor = UINT32_MAX;
  x->view = *y;
  x->view.data = NULL;
  x->cat = true;
  pass_through_term(&p->term[t], p->next++, y->dt, y->dt);
  return 0;
}

/* Term t = an NHWC 2-D AveragePool (layout 1) of x: EXT_POOL input (EwPool).
 * Nonzero: not inlinable (not allowed here, another layout or shape, too
 * many pools). */
static int pool_term(PlanBuilder *pb, const Graph *g, const Node *n, EwProgram *p, int t) {
  if (!p->allow_cat || p->npools == EW_MAX_POOL || p->next == EW_MAX_EXT || n->nin < 1 || n->in[0] < 0 ||
      gpuc_attr_i(n, "layout", GPUC_LAYOUT_NCHW) != GPUC_LAYOUT_NHWC)
    return 1;
  for (int k = 1; k < n->nout; k++)
    if (n->out[k] >= 0) return 1;
  const Tensor *x = &g->values[n->in[0]].t, *y = &g->values[n->out[0]].t;
  if (x->rank != 4 || y->rank != 4 || x->dt != y->dt || !is_flt(x->dt) || x->dt == GPUC_DT_F64) return 1;
  const Tensor *ins[1] = {x};
  Tensor *outs[1] = {(Tensor *)y};
  GpucErr quiet = {0};
  OpCtx oc = {.g = g, .n = n, .nin = 1, .nout = 1, .in = ins, .out = outs, .err = &quiet};
  NnWindow w;
  if (nn_pool_window(&oc, &w) || w.nsp != 2 || !nn_pool_nhwc(&oc)) return 1;
  if (w.n != y->dims[0] || w.out[0] != y->dims[1] || w.out[1] != y->dims[2] || w.c_in != y->dims[3]) return 1;
  EwPool *pw = &p->pool[p->npools++];
  *pw = (EwPool){.H = w.in[0], .W = w.in[1], .C = w.c_in, .OH = w.out[0], .OW = w.out[1],
                 .include_pad = gpuc_attr_i(n, "count_include_pad", 0) == 1};
  for (int d = 0; d < 2; d++) {
    pw->k[d] = w.k[d];
    pw->stride[d] = w.stride[d];
    pw->dil[d] = w.dil[d];
    pw->pad_b[d] = w.pad_b[d];
    pw->pad_e[d] = w.pad_e[d];
  }
  EwExt *e = &p->ext[p->next];
  memset(e, 0, sizeof *e);
  e->tensor = cg_value_tensor(pb, n->in[0]);
  e->view = *y;
  e->view.data = NULL;
  e->pool = p->npools;
  pass_through_term(&p->term[t], p->next++, y->dt, y->dt);
  return 0;
}

int cg_lower_one_by_one(PlanBuilder *pb, const int *m, int nm) {
  for (int t = 0; t < nm; t++)
    if (cg_lower_node(pb, m[t], NULL, NULL)) return -1;
  return 0;
}

int ew_group_program(PlanBuilder *pb, const Graph *g, const int *m, int nm, EwProgram *p, EwCapture *caps) {
  const int base = p->nterms; /* terms before the members' (a norm's), or 0 */
  if (base + nm > EW_MAX_TERMS) return 1;
  for (int t = 0; t < nm; t++) {
    const Node *n = &g->nodes[m[t]];
    if (n->op == GPUC_OP_TRANSPOSE) { /* the group reads its input through permuted strides */
      if (transpose_term(pb, g, n, p, base + t)) return 1;
      p->nterms = base + t + 1;
      continue;
    }
    if (n->op == GPUC_OP_AVERAGEPOOL) { /* the group pools its input's taps itself */
      if (pool_term(pb, g, n, p, base + t)) return 1;
      p->nterms = base + t + 1;
      continue;
    }
    if (n->op == GPUC_OP_CONCAT) { /* the group reads the pieces where each column falls */
      if (concat_term(pb, g, n, p, base + t)) return 1;
      p->nterms = base + t + 1;
      continue;
    }
    if (cg_lower_node(pb, m[t], &caps[t], NULL)) return -1; /* the op's own error */
    EwCapture *cap = &caps[t];
    if (cap->calls != 1 || cap->other) return 1;
    EwTerm *term = &p->term[base + t];
    term->nargs = cap->nargs;
    term->ct = cap->ct;
    term->pre = cap->pre;
    term->expr = cap->expr;
    term->dt = g->values[n->out[0]].t.dt;
    for (int k = 0; k < cap->nargs; k++) {
      int v = n->in[cap->slot[k]];
      int q = term_of(g, m, t, v); /* an earlier member's output? */
      if (q >= 0) q += base;
      else if (base && v == p->pre_value) q = p->pre_term; /* the norm's */
      term->arg[k].term = q;
      if (q >= 0) term->arg[k].ext = -1;
      else if (p->has_reg && v == p->reg_value) { /* the enclosing kernel's register: no tensor */
        term->arg[k].ext = ew_ext(p, UINT32_MAX, &cap->view[k]);
        if (term->arg[k].ext >= 0) p->ext[term->arg[k].ext].reg = true;
      } else term->arg[k].ext = ew_ext(p, cg_value_tensor(pb, v), &cap->view[k]);
      if (q < 0 && term->arg[k].ext < 0) return 1; /* too many inputs */
    }
    p->nterms = base + t + 1;
  }
  return 0;
}

/* Term 0 of p: InstanceNormalization node ni's y = x * a[r] + b[r] over
 * the group's output y (the norm's output, through Reshapes, has y's
 * elements in y's order), r = the element's plane: the flat index / S, so
 * a and b are viewed as y's leading dims up to the planes ([rows], then
 * 1s). 1: y's dims do not split at the planes. */
static int norm_term(PlanBuilder *pb, const Graph *g, const Node *ni, const Tensor *y, int64_t rows, uint32_t ta,
                     uint32_t tb, EwProgram *p) {
  const Tensor *x = &g->values[ni->in[0]].t;
  int64_t lead = 1;
  int k = 0;
  while (k < y->rank && lead < rows) lead *= y->dims[k++];
  if (lead != rows || gpuc_numel(y) != gpuc_numel(x)) return 1;
  Tensor vx = *y, vab = *y;
  vx.dt = x->dt;
  vx.data = vab.data = NULL;
  vab.dt = GPUC_DT_F32;
  for (int d = k; d < y->rank; d++) vab.dims[d] = 1;
  int ex = ew_ext(p, cg_value_tensor(pb, ni->in[0]), &vx), ea = ew_ext(p, ta, &vab), eb = ew_ext(p, tb, &vab);
  if (ex < 0 || ea < 0 || eb < 0) return 1;
  EwTerm *term = &p->term[0];
  term->nargs = 3;
  term->arg[0] = (EwArg){.ext = ex, .term = -1};
  term->arg[1] = (EwArg){.ext = ea, .term = -1};
  term->arg[2] = (EwArg){.ext = eb, .term = -1};
  term->ct = "float";
  term->pre = NULL;
  term->expr = "x0 * x1 + x2";
  term->dt = g->values[ni->out[0]].t.dt;
  p->nterms = 1;
  p->pre_term = 0;
  return 0;
}

/* A group headed by an InstanceNormalization and the Reshapes of its
 * output (passes/fuse_elementwise.c, attach_norm_heads): the norm's
 * statistics kernels, then one kernel for x * a + b and the members.
 * Where the norm is not on the split path (or y does not split at its
 * planes) the norm and the Reshapes are lowered alone and the members as
 * a group. */
static int lower_norm_group(PlanBuilder *pb, const Graph *g, const int *m, int nm, const int *reader_group) {
  int h = 1;
  while (h < nm && g->nodes[m[h]].op == GPUC_OP_RESHAPE) h++;
  const Node *ni = &g->nodes[m[0]], *sink = &g->nodes[m[nm - 1]];
  int pre = g->nodes[m[h - 1]].out[0];
  const Tensor *y = &g->values[sink->out[0]].t;
  bool fits = nm - h >= 2 && ni->nin >= 3 && ni->in[0] >= 0 && ni->in[1] >= 0 && ni->in[2] >= 0 && pre >= 0 &&
              cg_group_valid(g, m + h, nm - h, reader_group);
  if (fits) { /* the members' y splits at the planes? (checked again by norm_term) */
    const Tensor *x = &g->values[ni->in[0]].t;
    int64_t rows = x->rank >= 2 ? x->dims[0] * x->dims[1] : 0, lead = 1;
    for (int k = 0; k < y->rank && lead < rows; k++) lead *= y->dims[k];
    fits = rows > 0 && lead == rows && gpuc_numel(y) == gpuc_numel(x);
  }
  int rc = -1;
  int64_t rows = 0;
  uint32_t ta = UINT32_MAX, tb = UINT32_MAX;
  const Tensor *ins[3];
  uint32_t tin[3];
  for (int k = 0; k < 3 && fits; k++) {
    ins[k] = &g->values[ni->in[k]].t;
    tin[k] = cg_value_tensor(pb, ni->in[k]);
  }
  LowerCtx c = {.g = g, .n = ni, .node_index = m[0], .nin = 3, .nout = 0, .in = ins, .out = NULL, .tin = tin,
                .tout = NULL, .pb = pb, .opt = cg_builder_opt(pb), .err = cg_builder_err(pb), .label = ni->name};
  snprintf(c.kname, sizeof c.kname, "k%d_InstanceNormalization", m[0]);
  int st = fits ? cg_instance_norm_stats(&c, &rows, &ta, &tb) : 1;
  if (st < 0) return -1;
  if (st == 0) st = cg_cost_steps(cg_builder_plan(pb), &c);
  if (st < 0) return -1;
  if (st > 0) { /* the norm (and its views) alone, then the members as a group */
    if (cg_lower_one_by_one(pb, m, h)) return -1;
    return nm - h >= 2 ? cg_lower_group(pb, g, m + h, nm - h, reader_group) : cg_lower_one_by_one(pb, m + h, nm - h);
  }
  EwProgram *p = calloc(1, sizeof *p);
  EwCapture *caps = calloc((size_t)nm, sizeof *caps);
  StrBuf label = {0};
  if (!p || !caps) goto oom;
  p->allow_cat = true;
  p->pre_value = pre;
  if (norm_term(pb, g, ni, y, rows, ta, tb, p)) { /* checked above: cannot happen */
    rc = gpuc_err_set(cg_builder_err(pb), "internal: %s: the norm's planes do not split the group's output", ni->name);
    goto out;
  }
  int built = ew_group_program(pb, g, m + h, nm - h, p, caps);
  if (built) { /* statistics emitted: no way back; a member not inlinable is an error here */
    rc = built < 0 ? -1 : gpuc_err_set(cg_builder_err(pb), "internal: %s: a member of its group is not one elementwise term", ni->name);
    goto out;
  }
  p->y = y;
  p->ty = cg_value_tensor(pb, sink->out[0]);
  for (int t = 0; t < nm; t++) sb_printf(&label, "%s%s", t ? ", " : "", g->nodes[m[t]].name);
  if (label.oom || p->ty == UINT32_MAX) goto oom;
  const Tensor *fins[1] = {NULL}, *outs[1] = {p->y};
  uint32_t ftin[1] = {UINT32_MAX}, ftout[1] = {p->ty};
  LowerCtx f = {.g = g, .n = sink, .node_index = m[nm - 1], .nin = 0, .nout = 1, .in = fins, .out = outs,
                .tin = ftin, .tout = ftout, .pb = pb, .opt = cg_builder_opt(pb), .err = cg_builder_err(pb),
                .label = label.s};
  snprintf(f.kname, sizeof f.kname, "k%d_Fused%d", m[nm - 1], nm - h + 1);
  rc = cg_ew_program(&f, p);
  if (!rc) rc = cg_cost_steps(cg_builder_plan(pb), &f);
  if (!rc) {
    Plan *plan = cg_builder_plan(pb);
    plan->costs[plan->nsteps - 1].flops = (uint64_t)gpuc_numel(p->y) * (uint64_t)(nm - h + 2);
  }
  goto out;
oom:
  rc = gpuc_err_set(cg_builder_err(pb), "%s: out of memory", g->path);
out:
  ew_captures_free(caps, nm);
  free(p);
  free(label.s);
  return rc;
}

int cg_lower_group(PlanBuilder *pb, const Graph *g, const int *m, int nm, const int *reader_group) {
  if (g->nodes[m[0]].op == GPUC_OP_INSTANCENORMALIZATION) return lower_norm_group(pb, g, m, nm, reader_group);
  GpucOp last = g->nodes[m[nm - 1]].op;
  if (last == GPUC_OP_QUANTIZEROWS || last == GPUC_OP_QUANTIZEROWSF8 || last == GPUC_OP_LAYERNORMALIZATION ||
      last == GPUC_OP_ADDLAYERNORMALIZATION)
    return cg_lower_row_group(pb, g, m, nm, reader_group); /* passes/fuse_quantize_rows.c */
  if (!cg_group_valid(g, m, nm, reader_group)) return cg_lower_one_by_one(pb, m, nm);
  EwProgram *p = calloc(1, sizeof *p);
  EwCapture *caps = calloc((size_t)nm, sizeof *caps);
  StrBuf label = {0};
  int rc = -1;
  GpucErr *e = NULL;
  if (!p || !caps) goto oom;
  p->allow_cat = true;
  int built = ew_group_program(pb, g, m, nm, p, caps);
  if (built < 0) goto out;
  if (built > 0) {
    rc = cg_lower_one_by_one(pb, m, nm);
    goto out;
  }
  const Node *sink = &g->nodes[m[nm - 1]];
  p->y = &g->values[sink->out[0]].t;
  p->ty = cg_value_tensor(pb, sink->out[0]);
  for (int t = 0; t < nm; t++) sb_printf(&label, "%s%s", t ? ", " : "", g->nodes[m[t]].name);
  if (label.oom || p->ty == UINT32_MAX) goto oom;
  /* the kernel is emitted in the name of the group's last node */
  const Tensor *ins[1] = {NULL}, *outs[1] = {p->y};
  uint32_t tin[1] = {UINT32_MAX}, tout[1] = {p->ty};
  LowerCtx c = {.g = g, .n = sink, .node_index = m[nm - 1], .nin = 0, .nout = 1, .in = ins, .out = outs,
                .tin = tin, .tout = tout, .pb = pb, .opt = cg_builder_opt(pb), .err = cg_builder_err(pb),
                .label = label.s};
  snprintf(c.kname, sizeof c.kname, "k%d_Fused%d", m[nm - 1], nm);
  rc = cg_ew_program(&c, p);
  if (!rc) rc = cg_cost_steps(cg_builder_plan(pb), &c);
  if (!rc) { /* the estimate: one operation per member per element */
    Plan *plan = cg_builder_plan(pb);
    plan->costs[plan->nsteps - 1].flops = (uint64_t)gpuc_numel(p->y) * (uint64_t)nm;
  }
  goto out;
oom:
  e = cg_builder_err(pb);
  rc = gpuc_err_set(e, "%s: out of memory", g->path);
out:
  ew_captures_free(caps, nm);
  free(p);
  free(label.s);
  return rc;
}
