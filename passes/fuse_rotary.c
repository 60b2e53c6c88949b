/* The "rotate half" rotary position embedding as exported -> one
 * RotaryHalf node (internal, ir/ops.def; one kernel, codegen/lower_rotary.c).
 *
 * Hugging Face's apply_rotary_pos_emb (LLaMA, Mistral, Qwen, GPT-NeoX,
 * Phi, ... copy it) computes q * cos + rotate_half(q) * sin with
 * rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]); both PyTorch
 * exporters write it as
 *   s1 = Slice(x, 0, D/2, last axis)      s2 = Slice(x, D/2, D, last axis)
 *   r  = Concat(Neg(s2), s1, last axis)
 *   y  = Add(Mul(x, cos), Mul(r, sin))    (operands of each in either order)
 * which runs as two Slice, a Neg and a fused kernel per tensor, writing
 * the halves and the negation out. It becomes y = RotaryHalf(x, cos, sin);
 * when x is a Transpose that keeps the last axis (q and k from [B, S, H,
 * D] to [B, H, S, D]) read only by the pattern, the node reads the
 * Transpose's input through attribute perm instead.
 *
 * Conditions: s1, s2, Neg(s2), r and both products are read only by the
 * pattern and are no graph outputs; x is f32/f16/bf16 with a known shape
 * and an even last dim D; cos and sin have x's dtype and broadcast to x's
 * shape, which y has. Runs at -O2 before fuse_elementwise would take the
 * Muls and the Add (not in training: a backward reads the forward's values
 * by name); GPUC_NO_FUSE_ROTARY=1 turns it off (GPU A/B). */
#include "passes.h"
#include <stdlib.h>
#include <string.h>

/* the producer of v when it is op, with one output read once and no graph
 * output, else NULL */
static const Node *only_use(const Graph *g, int v, GpucOp op, const int *readers) {
  if (v < 0 || g->values[v].is_output || readers[v] != 1) return NULL;
  int p = g->values[v].producer;
  return p >= 0 && g->nodes[p].op == op && g->nodes[p].nout == 1 ? &g->nodes[p] : NULL;
}

/* v = Slice(x, [start, start + D/2) of the last axis): x in *x */
static bool half_slice(const Graph *g, int v, int64_t start, const int *readers, int *x) {
  const Node *s = only_use(g, v, GPUC_OP_SLICE, readers);
  if (!s || s->in[0] < 0) return false;
  const Tensor *xt = &g->values[s->in[0]].t, *st = &g->values[v].t;
  int64_t got;
  if (xt->rank < 1 || !gpuc_shape_known(xt) || !gpuc_shape_known(st)) return false;
  int last = xt->rank - 1;
  if (st->dims[last] * 2 != xt->dims[last] || !pass_axis_slice(g, s, last, &got) || got != start) return false;
  *x = s->in[0];
  return true;
}

/* r = Concat(Neg(Slice(x, upper half)), Slice(x, lower half)) on the last
 * axis: x in *x, the three nodes and the Concat marked in drop */
static bool rotate_half(const Graph *g, int r, const int *readers, int *x, int nodes[4]) {
  const Node *cat = only_use(g, r, GPUC_OP_CONCAT, readers);
  if (!cat || cat->nin != 2) return false;
  const Tensor *rt = &g->values[r].t;
  int64_t axis = gpuc_attr_i(cat, "axis", 0);
  if (rt->rank < 1 || (axis != -1 && axis != rt->rank - 1) || !gpuc_shape_known(rt)) return false;
  const Node *neg = only_use(g, cat->in[0], GPUC_OP_NEG, readers);
  int xa, xb;
  int64_t h = rt->dims[rt->rank - 1] / 2;
  if (!neg || !half_slice(g, neg->in[0], h, readers, &xa) || !half_slice(g, cat->in[1], 0, readers, &xb) ||
      xa != xb)
    return false;
  *x = xa;
  nodes[0] = (int)(cat - g->nodes);
  nodes[1] = (int)(neg - g->nodes);
  nodes[2] = g->values[neg->in[0]].producer;
  nodes[3] = g->values[cat->in[1]].producer;
  return true;
}

/* Add node a as the pattern's end: x, cos, sin in io[0..3), the other
 * pattern nodes in drop */
static bool match(const Graph *g, const Node *a, const int *readers, bool *drop, int io[3]) {
  if (a->op != GPUC_OP_ADD || a->nin != 2 || a->nout != 1 || a->out[0] < 0) return false;
  for (int side = 0; side < 2; side++) {
    const Node *m1 = only_use(g, a->in[side], GPUC_OP_MUL, readers);
    const Node *m2 = only_use(g, a->in[1 - side], GPUC_OP_MUL, readers);
    if (!m1 || !m2 || m1->nin != 2 || m2->nin != 2) continue;
    for (int k = 0; k < 2; k++) { /* m2 = r * sin, r in operand k */
      int x, nodes[4];
      if (!rotate_half(g, m2->in[k], readers, &x, nodes)) continue;
      int sn = m2->in[1 - k], cs = m1->in[0] == x ? m1->in[1] : m1->in[1] == x ? m1->in[0] : -1;
      if (cs < 0 || sn < 0) continue;
      const Tensor *xt = &g->values[x].t, *yt = &g->values[a->out[0]].t;
      GpucDType dt = xt->dt;
      if ((dt != GPUC_DT_F32 && dt != GPUC_DT_F16 && dt != GPUC_DT_BF16) || yt->dt != dt ||
          g->values[cs].t.dt != dt || g->values[sn].t.dt != dt || yt->rank != xt->rank)
        continue;
      bool same = true; /* cos and sin did not grow y past x */
      for (int d = 0; d < xt->rank; d++) same &= yt->dims[d] == xt->dims[d];
      if (!same) continue;
      for (int j = 0; j < 4; j++) drop[nodes[j]] = true;
      drop[m1 - g->nodes] = drop[m2 - g->nodes] = true;
      io[0] = x;
      io[1] = cs;
      io[2] = sn;
      return true;
    }
  }
  return false;
}

/* x = Transpose(t, perm) keeping the last axis last, read only by the
 * pattern (its two Slices and a Mul): RotaryHalf n reads t through perm
 * instead (LLaMA's q and k, [B, S, H, D] -> [B, H, S, D], never written
 * transposed). 1 absorbed, 0 not, -1 out of memory. */
static int absorb_transpose(Graph *g, Node *n, const int *readers, bool *drop) {
  int x = n->in[0], p = g->values[x].producer;
  if (p < 0 || readers[x] != 3 || g->values[x].is_output) return 0;
  Node *tr = &g->nodes[p];
  const int64_t *perm;
  int r = g->values[x].t.rank;
  if (tr->op != GPUC_OP_TRANSPOSE || tr->nout != 1 || tr->in[0] < 0 || gpuc_attr_ints(tr, "perm", &perm) != r ||
      perm[r - 1] != r - 1)
    return 0;
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  int64_t *pv = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)r);
  if (!at || !pv) return -1;
  memcpy(pv, perm, sizeof(int64_t) * (size_t)r);
  *at = (Attr){.name = "perm", .kind = GPUC_ATTR_INTS, .n = r, .ints = pv};
  n->in[0] = tr->in[0];
  n->attrs = at;
  n->nattr = 1;
  drop[p] = true;
  return 1;
}

int pass_fuse_rotary(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training || pass_env_on("GPUC_NO_FUSE_ROTARY")) return 0;
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  for (int i = 0; i < nn; i++) {
    Node *a = &g->nodes[i];
    int io[3];
    if (ps.drop[i] || !match(g, a, ps.readers, ps.drop, io)) continue;
    int *in = gpuc_arena_alloc(&g->arena, 3 * sizeof(int));
    if (!in) { pass_scratch_free(&ps); return gpuc_err_set(e, "%s: out of memory", g->path); }
    memcpy(in, io, sizeof io);
    /* the Add becomes the node, in its place: x, cos and sin come before it */
    a->op = GPUC_OP_ROTARYHALF;
    a->in = in;
    a->nin = 3;
    a->attrs = NULL;
    a->nattr = 0;
    if (absorb_transpose(g, a, ps.readers, ps.drop) < 0) {
      pass_scratch_free(&ps);
      return gpuc_err_set(e, "%s: out of memory", g->path);
    }
    changes++;
  }
  gpuc_graph_remove_nodes(g, ps.drop);
  pass_scratch_free(&ps);
  return changes;
}
