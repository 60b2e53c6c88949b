/* RotaryEmbedding-23 (ONNX, default domain) replaced at import by the
 * primitive ops that compute it, so the reference, the GPU lowerings, the
 * fp16 policy, fusion and autodiff need nothing new.
 *
 * Why here and not while functions are inlined (onnx_functions.c, where
 * Attention-23 expands): the graph differs by X's rank (3-D X is split
 * into heads by a Reshape, the caches unsqueeze at another axis), which
 * the protobuf does not tell before shape inference, and the shape checks
 * (ir/infer_rotary.c) should name the RotaryEmbedding node, not one of
 * its pieces. So the node is imported as an op of the table, inferred
 * and checked with the rest of the graph, then replaced here:
 *
 *   Xw = X [B, H, S, D]               or Reshape(X, [0, 0, H, -1]) [B, S, H, D]
 *   c  = Gather(cos_cache, position_ids) [B, S, rot/2]  (cos_cache itself without ids)
 *   c4 = Unsqueeze(c, heads axis)     [B, 1, S, rot/2]  or [B, S, 1, rot/2]; s4 alike
 *   Xr = Slice(Xw, :rot), Xp = Slice(Xw, rot:)        (rotary_embedding_dim < D only)
 *   x1, x2 = Slice(Xr, :rot/2), Slice(Xr, rot/2:)     (halves; Split(Xr, 2) when D is symbolic)
 *         or Slice(Xr, 0::2), Slice(Xr, 1::2)        (interleaved)
 *   re = c4 x1 - s4 x2, im = s4 x1 + c4 x2
 *   Yr = Concat(re, im)             or Reshape(Concat(re[..., None], im[..., None]), [0, 0, 0, -1])
 *   Y  = Concat(Yr, Xp), then Reshape(., [0, 0, -1]) for 3-D X
 *
 * Shapes stay symbolic where the model's are (Reshape's 0 and -1, Split
 * into halves, Slice to INT64_MAX): dynamic batch and sequence work. */
#include "frontend_internal.h"
#include "infer_util.h"
#include "rotary.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  Graph *g;
  GpucErr *e;
  int node;     /* the RotaryEmbedding node's index */
  int k;        /* values made so far, for names */
} Ex;

static int oom(Ex *x) { return gpuc_err_set(x->e, "%s: out of memory", x->g->path); }

/* "rope:<node>/<what>.<k>": node names may repeat in a file, so the node's
 * index is added to a name the model gave ("#<index>" when it gave none) */
static void name_for(const Ex *x, const char *what, int k, char *buf, size_t n) {
  const char *nm = x->g->nodes[x->node].name;
  if (nm[0] == '#') snprintf(buf, n, "rope:%.160s/%s.%d", nm, what, k);
  else snprintf(buf, n, "rope:%.160s#%d/%s.%d", nm, x->node, what, k);
}

static int new_value(Ex *x, const char *what) {
  char name[256];
  name_for(x, what, x->k++, name, sizeof name);
  return gpuc_graph_add_value(x->g, name);
}

/* a constant int64 vector */
static int const_ints(Ex *x, int n, const int64_t *v) {
  int c = new_value(x, "const");
  Tensor *t = c < 0 ? NULL : gpuc_tensor_new(GPUC_DT_I64, 1, (int64_t[]){n}, x->e);
  if (!t) return -1;
  memcpy(t->data, v, sizeof *v * (size_t)n);
  x->g->values[c].t = *t;
  free(t);
  x->g->values[c].is_const = true;
  return c;
}

/* op(ins) -> outs[0..nout) (fresh values, or out for the first when >= 0);
 * attributes set after by the caller on the returned node. Returns the
 * node index or -1. */
static int add(Ex *x, GpucOp op, int nin, const int *ins, int nout, int *outs, int out) {
  char name[256];
  name_for(x, gpuc_ops[op].name, x->k++, name, sizeof name);
  for (int o = 0; o < nout; o++)
    if ((outs[o] = o == 0 && out >= 0 ? out : new_value(x, gpuc_ops[op].name)) < 0) return -1;
  int ni = gpuc_graph_add_node(x->g, op, name, nin, nout);
  Attr *a = ni < 0 ? NULL : gpuc_arena_alloc(&x->g->arena, sizeof(Attr) * 2);
  if (!a) return -1;
  Node *n = &x->g->nodes[ni];
  memcpy(n->in, ins, sizeof *ins * (size_t)nin);
  memcpy(n->out, outs, sizeof *outs * (size_t)nout);
  n->attrs = a;
  for (int o = 0; o < nout; o++) x->g->values[outs[o]].producer = ni;
  return ni;
}

static void attr_int(Graph *g, int ni, const char *name, int64_t v) {
  Node *n = &g->nodes[ni];
  n->attrs[n->nattr++] = (Attr){.name = name, .kind = GPUC_ATTR_INT, .i = v};
}

/* one-output op; -1 on failure */
static int op1(Ex *x, GpucOp op, int nin, const int *ins, int out) {
  int y;
  return add(x, op, nin, ins, 1, &y, out) < 0 ? -1 : y;
}
#define OP1(x, op, out, ...) op1(x, op, sizeof((int[]){__VA_ARGS__}) / sizeof(int), (int[]){__VA_ARGS__}, out)

static int reshape(Ex *x, int a, int n, const int64_t *shape, int out) {
  int s = const_ints(x, n, shape);
  return s < 0 ? -1 : OP1(x, GPUC_OP_RESHAPE, out, a, s);
}
static int unsqueeze(Ex *x, int a, int64_t axis) {
  int s = const_ints(x, 1, &axis);
  return s < 0 ? -1 : OP1(x, GPUC_OP_UNSQUEEZE, -1, a, s);
}
/* a[..., start:end:step] on the last axis */
static int slice_last(Ex *x, int a, int64_t start, int64_t end, int64_t step) {
  int64_t last = -1;
  int s = const_ints(x, 1, &start), e = const_ints(x, 1, &end), ax = const_ints(x, 1, &last);
  int st = const_ints(x, 1, &step);
  if (s < 0 || e < 0 || ax < 0 || st < 0) return -1;
  return OP1(x, GPUC_OP_SLICE, -1, a, s, e, ax, st);
}
static int concat_last(Ex *x, int a, int b, int out) {
  int y, ni = add(x, GPUC_OP_CONCAT, 2, (int[]){a, b}, 1, &y, out);
  if (ni < 0) return -1;
  attr_int(x->g, ni, "axis", -1);
  return y;
}

/* Replace node ni by its expansion (node ni itself is dropped later). */
static int expand(Graph *g, int ni, GpucErr *e) {
  Ex x = {.g = g, .e = e, .node = ni};
  const Node *n = &g->nodes[ni];
  const Tensor *in[4] = {0};
  for (int k = 0; k < n->nin && k < 4; k++) {
    if (n->in[k] < 0) continue;
    in[k] = &g->values[n->in[k]].t;
    if (in[k]->rank < 0)
      return gpuc_err_unsupported(e, "%s: node '%s' (RotaryEmbedding): the rank of input %d is not known at "
                                  "import (it is computed from data), and the expansion depends on it",
                                  g->path, n->name, k);
  }
  OpCtx c = {.g = g, .n = n, .nin = n->nin, .nout = 1, .in = in, .err = e};
  RotaryGeom r;
  if (gpuc_rotary_geom(&c, &r)) return -1;
  int X = n->in[0], C = n->in[1], S = n->in[2], P = r.has_pos ? n->in[3] : -1, Y = n->out[0];
  if (Y < 0) return 0; /* nothing reads it */
  bool three = r.rank == 3, split_rot = r.partial && r.partial != r.D;
  int64_t big = INT64_MAX;

  int xw = X;
  if (three && (xw = reshape(&x, X, 4, (int64_t[]){0, 0, r.H, -1}, -1)) < 0) return oom(&x);
  if (P >= 0 && ((C = OP1(&x, GPUC_OP_GATHER, -1, C, P)) < 0 || (S = OP1(&x, GPUC_OP_GATHER, -1, S, P)) < 0))
    return oom(&x);
  int64_t heads_axis = three ? 2 : 1;
  int c4 = unsqueeze(&x, C, heads_axis), s4 = c4 < 0 ? -1 : unsqueeze(&x, S, heads_axis);
  if (s4 < 0) return oom(&x);
  int xr = xw, xp = -1;
  if (split_rot && ((xr = slice_last(&x, xw, 0, r.partial, 1)) < 0 || (xp = slice_last(&x, xw, r.partial, big, 1)) < 0))
    return oom(&x);
  int x12[2];
  if (r.interleaved) {
    if ((x12[0] = slice_last(&x, xr, 0, big, 2)) < 0 || (x12[1] = slice_last(&x, xr, 1, big, 2)) < 0) return oom(&x);
  } else if (r.rot >= 0) { /* Slices, not a Split: Slice has a gradient rule (passes/grad_rules*.c) */
    if ((x12[0] = slice_last(&x, xr, 0, r.rot / 2, 1)) < 0 || (x12[1] = slice_last(&x, xr, r.rot / 2, big, 1)) < 0)
      return oom(&x);
  } else { /* head size unknown at import (a symbolic dim): halves of whatever it is */
    int sp = add(&x, GPUC_OP_SPLIT, 1, &xr, 2, x12, -1);
    if (sp < 0) return oom(&x);
    attr_int(g, sp, "axis", -1);
    attr_int(g, sp, "num_outputs", 2);
  }
  int a = OP1(&x, GPUC_OP_MUL, -1, c4, x12[0]), b = OP1(&x, GPUC_OP_MUL, -1, s4, x12[1]);
  int p = OP1(&x, GPUC_OP_MUL, -1, s4, x12[0]), q = OP1(&x, GPUC_OP_MUL, -1, c4, x12[1]);
  int re = a < 0 || b < 0 ? -1 : OP1(&x, GPUC_OP_SUB, -1, a, b);
  int im = p < 0 || q < 0 ? -1 : OP1(&x, GPUC_OP_ADD, -1, p, q);
  if (re < 0 || im < 0) return oom(&x);
  /* the last step writes Y itself */
  int yr_out = !three && xp < 0 ? Y : -1, yr;
  if (r.interleaved) { /* [..., rot/2, 2] -> [..., rot]: pairs back in place */
    int re1 = unsqueeze(&x, re, -1), im1 = re1 < 0 ? -1 : unsqueeze(&x, im, -1);
    int pairs = im1 < 0 ? -1 : concat_last(&x, re1, im1, -1);
    yr = pairs < 0 ? -1 : reshape(&x, pairs, 4, (int64_t[]){0, 0, 0, -1}, yr_out);
  } else {
    yr = concat_last(&x, re, im, yr_out);
  }
  if (yr < 0) return oom(&x);
  int yw = yr;
  if (xp >= 0 && (yw = concat_last(&x, yr, xp, three ? -1 : Y)) < 0) return oom(&x);
  if (three && reshape(&x, yw, 3, (int64_t[]){0, 0, -1}, Y) < 0) return oom(&x);
  return 0;
}

int gpuc_onnx_expand_rotary(Graph *g, GpucErr *e) {
  int n0 = g->nnodes, found = 0;
  for (int i = 0; i < n0; i++) {
    if (g->nodes[i].op != GPUC_OP_ROTARYEMBEDDING) continue;
    if (expand(g, i, e)) return -1;
    found++;
  }
  if (!found) return 0;
  bool *drop = calloc((size_t)g->nnodes, sizeof *drop);
  if (!drop) return gpuc_err_set(e, "%s: out of memory", g->path);
  for (int i = 0; i < n0; i++) drop[i] = g->nodes[i].op == GPUC_OP_ROTARYEMBEDDING;
  gpuc_graph_remove_nodes(g, drop);
  free(drop);
  return gpuc_graph_toposort(g, e) || gpuc_graph_verify(g, e) || gpuc_graph_infer(g, e) ? -1 : 0;
}
