/* An RMSNorm written out as a mean and elementwise ops -> one
 * RMSNormalization node (opset 23's op, ir/ops.def), which runs as one row
 * kernel (codegen/lower_norm.c, a warp a row) instead of four steps, and
 * under --fp16 reads the half activation itself: written out, its Pow and
 * ReduceMean are an fp32 island (passes/fp16.c) with an f32 copy of the
 * activation in front.
 *
 * The form PyTorch's exporters (TorchScript and dynamo alike) write for
 * Hugging Face's LlamaRMSNorm and T5LayerNorm (Mistral, Qwen, ... copy
 * them), after fold has dropped the same-type Casts around it:
 *   p   = Pow(x, 2) | Mul(x, x)
 *   m   = ReduceMean(p) over x's last axis, keepdims 1
 *   a   = Add(m, eps)                  eps a one-element float constant
 *   s   = Sqrt(a)
 *   y   = Mul(x, Div(1, s) | Reciprocal(s)) | Div(x, s)    (operands either order)
 *   out = Mul(scale, y)                scale a float constant of N elements,
 *                                      N x's last dim (either order)
 * becomes out = RMSNormalization(x, scale) {axis -1, epsilon eps}: the
 * same function (x / sqrt(mean(x^2) + eps) * scale), computed in float
 * from the input's values. A norm without the scale Mul is left as it is.
 *
 * Conditions: every value between x and out is read only by the pattern
 * and is no graph output; x is float with a known shape; out has x's shape.
 * Runs at -O2, before fuse_matmul (not in training: a backward reads the
 * forward's values by name); GPUC_NO_FUSE_RMSNORM=1 turns it off (GPU A/B). */
#include "passes.h"
#include <stdlib.h>
#include <string.h>

static bool is_scalar(const Graph *g, int v, double want) {
  double x;
  return pass_const_scalar(g, v, &x) && x == want;
}

static bool same_shape(const Tensor *a, const Tensor *b) {
  if (a->rank != b->rank || !gpuc_shape_known(a) || !gpuc_shape_known(b)) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* Node w (a Mul) as the pattern's end: x in *x, scale in *scale, eps in
 * *eps, the other pattern nodes in drop. */
static bool match(Graph *g, Node *w, const int *readers, bool *drop, int *xo, int *scale, double *eps) {
  if (w->op != GPUC_OP_MUL || w->nin != 2 || w->nout != 1 || w->out[0] < 0) return false;
  for (int side = 0; side < 2; side++) {
    int sc = w->in[side], yv = w->in[1 - side];
    const Value *s = sc >= 0 ? &g->values[sc] : NULL;
    if (!s || !s->is_const || !s->t.data || !gpuc_dtype_is_float(s->t.dt) || s->t.rank < 1) continue;
    Node *y = pass_sole_producer(g, yv, GPUC_OP_MUL, readers);
    if (!y) y = pass_sole_producer(g, yv, GPUC_OP_DIV, readers);
    if (!y || y->nin != 2) continue;
    /* y = x * r (r = 1/s or Reciprocal(s)) or y = x / s: s's Sqrt gives x */
    int cand[2][2] = {{y->in[0], y->in[1]}, {y->in[1], y->in[0]}}; /* {x, r or s} */
    for (int c = 0; c < (y->op == GPUC_OP_DIV ? 1 : 2); c++) {
      int x = cand[c][0], rv = cand[c][1];
      Node *sq = NULL, *rcp = NULL;
      if (y->op == GPUC_OP_DIV) {
        sq = pass_sole_producer(g, rv, GPUC_OP_SQRT, readers);
      } else if ((rcp = pass_sole_producer(g, rv, GPUC_OP_RECIPROCAL, readers))) {
        sq = pass_sole_producer(g, rcp->in[0], GPUC_OP_SQRT, readers);
      } else if ((rcp = pass_sole_producer(g, rv, GPUC_OP_DIV, readers)) && rcp->nin == 2 && is_scalar(g, rcp->in[0], 1.0)) {
        sq = pass_sole_producer(g, rcp->in[1], GPUC_OP_SQRT, readers);
      }
      if (!sq || x < 0) continue;
      Node *add = pass_sole_producer(g, sq->in[0], GPUC_OP_ADD, readers);
      if (!add || add->nin != 2) continue;
      int mv = -1;
      double e = 0;
      if (pass_const_scalar(g, add->in[1], &e)) mv = add->in[0];
      else if (pass_const_scalar(g, add->in[0], &e)) mv = add->in[1];
      Node *mean = pass_sole_producer(g, mv, GPUC_OP_REDUCEMEAN, readers);
      if (!mean || !(e >= 0)) continue;
      Node *sqr = pass_sole_producer(g, mean->in[0], GPUC_OP_POW, readers);
      if (sqr && !(sqr->nin == 2 && sqr->in[0] == x && is_scalar(g, sqr->in[1], 2.0))) sqr = NULL;
      if (!sqr && (sqr = pass_sole_producer(g, mean->in[0], GPUC_OP_MUL, readers)) && !(sqr->in[0] == x && sqr->in[1] == x))
        sqr = NULL;
      if (!sqr) continue;
      const Tensor *xt = &g->values[x].t, *ot = &g->values[w->out[0]].t;
      if (!gpuc_dtype_is_float(xt->dt) || xt->rank < 1 || !same_shape(xt, ot) || ot->dt != xt->dt ||
          !pass_reduces_last_axis(g, mean, xt))
        continue;
      /* the scale: N elements along the last axis (leading dims 1) */
      int64_t n = xt->dims[xt->rank - 1];
      if (gpuc_numel(&s->t) != n || s->t.dims[s->t.rank - 1] != n || s->t.rank > xt->rank) continue;
      Node *parts[6] = {y, rcp, sq, add, mean, sqr};
      for (int k = 0; k < 6; k++)
        if (parts[k]) drop[parts[k] - g->nodes] = true;
      *xo = x;
      *scale = sc;
      *eps = e;
      return true;
    }
  }
  return false;
}

int pass_fuse_rmsnorm(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training || pass_env_on("GPUC_NO_FUSE_RMSNORM")) return 0;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  for (int i = 0; i < nn; i++) {
    Node *w = &g->nodes[i];
    int x, scale;
    double eps;
    if (ps.drop[i] || !match(g, w, ps.readers, ps.drop, &x, &scale, &eps)) continue;
    int *in = gpuc_arena_alloc(&g->arena, 2 * sizeof(int));
    Attr *at = gpuc_arena_alloc(&g->arena, 2 * sizeof(Attr));
    if (!in || !at) { pass_scratch_free(&ps); return gpuc_err_set(e, "%s: out of memory", g->path); }
    in[0] = x;
    in[1] = scale;
    at[0] = (Attr){.name = "axis", .kind = GPUC_ATTR_INT, .i = -1};
    at[1] = (Attr){.name = "epsilon", .kind = GPUC_ATTR_FLOAT, .f = (float)eps};
    /* the scale Mul becomes the norm, in its place: x and scale come before it */
    w->op = GPUC_OP_RMSNORMALIZATION;
    w->in = in;
    w->nin = 2;
    w->attrs = at;
    w->nattr = 2;
    changes++;
  }
  gpuc_graph_remove_nodes(g, ps.drop);
  pass_scratch_free(&ps);
  return changes;
}
