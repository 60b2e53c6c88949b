/* Reverse-mode autodiff: the driver, the rule dispatch generated from
 * ops.def (weak fallbacks: "no gradient rule for <Op>"), and the node
 * emitting helpers the rules use. The rules are in grad_rules*.c. */
#include "autodiff.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP(E, Name, min_in, max_in, min_out, max_out, flags)            \
  __attribute__((weak)) int grad_##Name(GradCtx *c) {                    \
    return gc_fail(c, "no gradient rule for %s", #Name);                  \
  }
#include "ops.def"
#undef OP

static const GpucGradFn grad_fns[GPUC_OP_COUNT] = {
#define OP(E, Name, min_in, max_in, min_out, max_out, flags) [GPUC_OP_##E] = grad_##Name,
#include "ops.def"
#undef OP
};

#define GC_MAX_ATTR 8

/* ---- helpers --------------------------------------------------------------- */

const Node *gc_node(const GradCtx *c) { return &c->g->nodes[c->node]; }
int gc_in(const GradCtx *c, int k) { const Node *n = gc_node(c); return k < n->nin ? n->in[k] : -1; }
int gc_out(const GradCtx *c, int k) { const Node *n = gc_node(c); return k < n->nout ? n->out[k] : -1; }


int gc_fail(GradCtx *c, const char *fmt, ...) {
  char reason[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  const Node *n = gc_node(c);
  gpuc_err_unsupported(c->e, "%s: node '%s' (%s): gradient: %s", c->g->path ? c->g->path : "<graph>",
                       n->name, gpuc_op_name(n), reason);
  return -1;
}

static int oom(GradCtx *c) { return gpuc_err_set(c->e, "%s: autodiff: out of memory", c->g->path); }

static int new_value(GradCtx *c, const char *hint) {
  char name[600];
  snprintf(name, sizeof name, "%s/grad%d", hint, c->g->nvalues);
  int v = gpuc_graph_add_value(c->g, name);
  if (v < 0) oom(c);
  return v;
}

/* Shape/dtype inference of one emitted node, as gpuc_graph_infer does it. */
static int infer_node(GradCtx *c, int ni) {
  if (gpuc_node_infer(c->g, ni, c->e)) {
    gpuc_err_prefix(c->e, "autodiff");
    return -1;
  }
  return 0;
}

/* The last node emitted is inferred once its attributes are set: before
 * the next node, before a shape is read, and after the rule. */
static int flush(GradCtx *c) {
  int ni = c->pending;
  c->pending = -1;
  if (ni >= 0 && infer_node(c, ni)) { c->failed = true; return -1; }
  return c->failed ? -1 : 0;
}

const Tensor *gc_t(GradCtx *c, int v) {
  flush(c);
  return &c->g->values[v].t;
}

int gc_emit(GradCtx *c, GpucOp op, int nin, const int *ins) {
  Graph *g = c->g;
  if (flush(c)) return -1;
  char name[600];
  snprintf(name, sizeof name, "grad/%s/%d", gc_node(c)->name, g->nnodes);
  int ni = gpuc_graph_add_node(g, op, name, nin, 1);
  if (ni < 0) return oom(c);
  Node *n = &g->nodes[ni];
  n->attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * GC_MAX_ATTR);
  if (!n->attrs) return oom(c);
  for (int k = 0; k < nin; k++) n->in[k] = ins[k];
  int v = new_value(c, gc_node(c)->name);
  if (v < 0) return -1;
  n = &g->nodes[ni];
  n->out[0] = v;
  g->values[v].producer = ni;
  c->last = c->pending = ni;
  return v;
}

int gc_emit1(GradCtx *c, GpucOp op, int a) { return gc_emit(c, op, 1, &a); }
int gc_emit2(GradCtx *c, GpucOp op, int a, int b) { int in[2] = {a, b}; return gc_emit(c, op, 2, in); }
int gc_emit3(GradCtx *c, GpucOp op, int a, int b, int d) {
  int in[3] = {a, b, d};
  return gc_emit(c, op, 3, in);
}

/* Attributes change inference: re-infer the last node after each one. */
static Attr *add_attr(GradCtx *c, const char *name, GpucAttrKind kind) {
  Node *n = &c->g->nodes[c->last];
  GPUC_ASSERT(n->nattr < GC_MAX_ATTR);
  Attr *a = &n->attrs[n->nattr++];
  memset(a, 0, sizeof *a);
  a->name = gpuc_arena_strdup(&c->g->arena, name, strlen(name));
  a->kind = kind;
  if (!a->name) { oom(c); return NULL; }
  return a;
}

int gc_attr_i(GradCtx *c, const char *name, int64_t v) {
  Attr *a = add_attr(c, name, GPUC_ATTR_INT);
  if (!a) return -1;
  a->i = v;
  return 0;
}

int gc_attr_f(GradCtx *c, const char *name, float v) {
  Attr *a = add_attr(c, name, GPUC_ATTR_FLOAT);
  if (!a) return -1;
  a->f = v;
  return 0;
}

int gc_attr_s(GradCtx *c, const char *name, const char *s) {
  Attr *a = add_attr(c, name, GPUC_ATTR_STRING);
  if (!a) return -1;
  a->s = gpuc_arena_strdup(&c->g->arena, s, strlen(s));
  if (!a->s) return oom(c);
  return 0;
}

int gc_attr_ints(GradCtx *c, const char *name, int n, const int64_t *v) {
  Attr *a = add_attr(c, name, GPUC_ATTR_INTS);
  if (!a) return -1;
  a->n = n;
  a->ints = gpuc_arena_alloc(&c->g->arena, sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!a->ints) return oom(c);
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
  return 0;
}

static int new_const(GradCtx *c, GpucDType dt, int rank, const int64_t *dims) {
  int v = new_value(c, "const");
  if (v < 0) return -1;
  Value *val = &c->g->values[v];
  gpuc_set_shape(&val->t, dt, rank, dims);
  val->is_const = true;
  if (gpuc_tensor_alloc(&val->t, c->e)) return -1;
  return v;
}

int gc_scalar(GradCtx *c, GpucDType dt, double x) {
  int v = new_const(c, dt, 0, NULL);
  if (v < 0) return -1;
  gpuc_set_f64(&c->g->values[v].t, 0, x);
  return v;
}

int gc_ints(GradCtx *c, int n, const int64_t *x) {
  int64_t d = n;
  int v = new_const(c, GPUC_DT_I64, 1, &d);
  if (v < 0) return -1;
  for (int i = 0; i < n; i++) gpuc_set_i64(&c->g->values[v].t, i, x[i]);
  return v;
}

int gc_second_output(GradCtx *c, const char *suffix, GpucDType dt) {
  Graph *g = c->g;
  Node *n = &g->nodes[c->node];
  if (n->nout > 1 && n->out[1] >= 0) return n->out[1];
  char name[600];
  snprintf(name, sizeof name, "%s.%s", n->name, suffix);
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) return gpuc_err_set(c->e, "%s: autodiff: out of memory", g->path);
  n = &g->nodes[c->node];
  if (n->nout < 2) {
    int *outs = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
    if (!outs) return gpuc_err_set(c->e, "%s: autodiff: out of memory", g->path);
    outs[0] = n->out[0];
    n->out = outs;
    n->nout = 2;
  }
  n->out[1] = v;
  g->values[v].producer = c->node;
  const Tensor *x = gc_t(c, n->in[0]);
  gpuc_set_shape(&g->values[v].t, dt == GPUC_DT_UNDEF ? x->dt : dt, x->rank, x->dims);
  return v;
}

int gc_shape_of(GradCtx *c, int v) {
  const Tensor *t = gc_t(c, v);
  if (gpuc_shape_known(t)) return gc_ints(c, t->rank, t->dims);
  return gc_emit1(c, GPUC_OP_SHAPE, v);
}

int gc_reduce_sum(GradCtx *c, int x, int naxes, const int64_t *axes, bool keepdims) {
  int r;
  if (c->g->opset >= 13) {
    int a = gc_ints(c, naxes, axes);
    if (a < 0 || (r = gc_emit2(c, GPUC_OP_REDUCESUM, x, a)) < 0) return -1;
  } else {
    if ((r = gc_emit1(c, GPUC_OP_REDUCESUM, x)) < 0 || gc_attr_ints(c, "axes", naxes, axes)) return -1;
  }
  if (gc_attr_i(c, "keepdims", keepdims)) return -1;
  return r;
}

int gc_unbroadcast(GradCtx *c, int dy, int like) {
  const Tensor *ty = gc_t(c, dy), *tl = gc_t(c, like);
  if (ty->rank < 0 || tl->rank < 0 || tl->rank > ty->rank)
    return gc_fail(c, "cannot reduce a gradient of unknown or smaller rank for broadcasting");
  int64_t axes[GPUC_MAX_RANK];
  int na = 0, off = ty->rank - tl->rank;
  for (int d = 0; d < ty->rank; d++) {
    if (d < off) { axes[na++] = d; continue; }
    int64_t a = tl->dims[d - off], b = ty->dims[d];
    /* unknown on both sides: the same (symbolic) extent, as the model
     * broadcasting forward implies when it is not 1 */
    if (a == 1 && b != 1) axes[na++] = d;
    else if (a != b && a >= 0 && b >= 0) return gc_fail(c, "gradient shape does not broadcast");
  }
  if (na == 0) return dy;
  int r = gc_reduce_sum(c, dy, na, axes, true);
  if (r < 0) return -1;
  if (off == 0) return r;
  int s = gc_shape_of(c, like);
  return s < 0 ? -1 : gc_emit2(c, GPUC_OP_RESHAPE, r, s);
}

/* ---- the driver ------------------------------------------------------------- */

static bool trainable_value(const Graph *g, int v) {
  const Value *val = &g->values[v];
  return val->is_const && !val->is_input && gpuc_dtype_is_float(val->t.dt) && val->t.data;
}

int gpuc_autodiff(Graph *g, int loss, GpucErr *e) {
  if (loss < 0 || loss >= g->nvalues) return gpuc_err_set(e, "%s: autodiff: bad loss value", g->path);
  const Tensor *lt = &g->values[loss].t;
  if (!gpuc_dtype_is_float(lt->dt) || !gpuc_shape_known(lt) || gpuc_numel(lt) != 1)
    return gpuc_err_set(e, "%s: autodiff: the loss '%s' must be a float scalar", g->path,
                        g->values[loss].name);
  if (gpuc_graph_toposort(g, e)) return -1;
  int nv = g->nvalues, nn = g->nnodes, rc = -1;
  bool *param = calloc((size_t)nv + 1, 1), *need = calloc((size_t)nv + 1, 1);
  bool *reach = calloc((size_t)nv + 1, 1);
  int *grad = malloc(sizeof(int) * ((size_t)nv + 1));
  if (!param || !need || !reach || !grad) { gpuc_err_set(e, "%s: autodiff: out of memory", g->path); goto done; }
  for (int v = 0; v < nv; v++) grad[v] = -1;
  /* parameters: float constants at trainable slots of ops with a rule */
  for (int i = 0; i < nn; i++) {
    const Node *n = &g->nodes[i];
    if (!(gpuc_ops[n->op].flags & GPUC_OPF_GRAD)) continue;
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0 && gpuc_grad_trainable_slot(n->op, k) && trainable_value(g, n->in[k]))
        param[n->in[k]] = need[n->in[k]] = true;
  }
  /* values that depend on a parameter ... */
  for (int i = 0; i < nn; i++) {
    const Node *n = &g->nodes[i];
    bool any = false;
    for (int k = 0; k < n->nin; k++) if (n->in[k] >= 0 && need[n->in[k]]) any = true;
    /* only float values carry gradients (not Shape's, ArgMax's...) */
    if (any)
      for (int k = 0; k < n->nout; k++)
        if (n->out[k] >= 0 && (g->values[n->out[k]].t.dt == GPUC_DT_UNDEF ||
                              gpuc_dtype_is_float(g->values[n->out[k]].t.dt)))
          need[n->out[k]] = true;
  }
  /* ... and that the loss depends on */
  reach[loss] = true;
  for (int i = nn - 1; i >= 0; i--) {
    const Node *n = &g->nodes[i];
    bool any = false;
    for (int k = 0; k < n->nout; k++) if (n->out[k] >= 0 && reach[n->out[k]]) any = true;
    if (any) for (int k = 0; k < n->nin; k++) if (n->in[k] >= 0) reach[n->in[k]] = true;
  }
  GradCtx c = {.g = g, .e = e, .node = 0, .last = -1, .pending = -1};
  /* seed: d loss / d loss = 1 */
  {
    int s = new_value(&c, "loss");
    if (s < 0) goto done;
    Value *sv = &g->values[s];
    sv->t = (Tensor){.dt = lt->dt, .rank = lt->rank};
    memcpy(sv->t.dims, lt->dims, sizeof lt->dims);
    sv->is_const = true;
    if (gpuc_tensor_alloc(&sv->t, e)) goto done;
    gpuc_set_f64(&sv->t, 0, 1.0);
    grad[loss] = s;
  }
  for (int i = nn - 1; i >= 0; i--) {
    const Node *n = &g->nodes[i];
    int dy[64], dx[64];
    bool nd[64], any_out = false, any_in = false;
    if (n->nin > 64 || n->nout > 64) {
      c.node = i;
      gc_fail(&c, "more than 64 inputs or outputs");
      goto done;
    }
    for (int k = 0; k < n->nout; k++) {
      dy[k] = n->out[k] >= 0 ? grad[n->out[k]] : -1;
      if (dy[k] >= 0) any_out = true;
    }
    for (int k = 0; k < n->nin; k++) {
      int v = n->in[k];
      nd[k] = v >= 0 && need[v] && reach[v];
      if (nd[k]) any_in = true;
      dx[k] = -1;
    }
    if (!any_out || !any_in) continue;
    c.node = i;
    c.dy = dy;
    c.dx = dx;
    c.need = nd;
    if (grad_fns[g->nodes[i].op](&c) || flush(&c)) goto done;
    n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      int v = n->in[k];
      if (!nd[k] || dx[k] < 0) continue;
      if (grad[v] < 0) grad[v] = dx[k];
      else if ((grad[v] = gc_emit2(&c, GPUC_OP_ADD, grad[v], dx[k])) < 0 || flush(&c)) goto done;
    }
  }
  /* "<param>.grad" values, appended to the graph outputs */
  int np = 0;
  for (int v = 0; v < nv; v++) np += param[v];
  int *outs = gpuc_arena_alloc(&g->arena, sizeof(int) * ((size_t)(g->noutputs + np) + 1));
  if (!outs) { gpuc_err_set(e, "%s: autodiff: out of memory", g->path); goto done; }
  memcpy(outs, g->outputs, sizeof(int) * (size_t)g->noutputs);
  int no = g->noutputs;
  for (int v = 0; v < nv; v++) {
    if (!param[v]) continue;
    char name[600];
    snprintf(name, sizeof name, "%s.grad", g->values[v].name);
    if (gpuc_graph_find_value(g, name) >= 0) {
      gpuc_err_set(e, "%s: autodiff: a value named '%s' already exists", g->path, name);
      goto done;
    }
    g->values[v].is_param = true;
    int gv;
    if (grad[v] < 0) { /* does not reach the loss: zero gradient */
      const Tensor *pt = &g->values[v].t;
      if ((gv = new_const(&c, pt->dt, pt->rank, pt->dims)) < 0) goto done;
    } else {
      c.node = g->values[grad[v]].producer >= 0 ? g->values[grad[v]].producer : 0;
      if ((gv = gc_emit1(&c, GPUC_OP_IDENTITY, grad[v])) < 0 || flush(&c)) goto done;
    }
    g->values[gv].name = gpuc_arena_strdup(&g->arena, name, strlen(name));
    if (!g->values[gv].name) { gpuc_err_set(e, "%s: autodiff: out of memory", g->path); goto done; }
    g->values[gv].is_output = true;
    outs[no++] = gv;
  }
  g->outputs = outs;
  g->noutputs = no;
  if (gpuc_graph_toposort(g, e) || gpuc_graph_verify(g, e)) goto done;
  rc = 0;
done:
  free(param); free(need); free(reach); free(grad);
  return rc;
}
