/* A channel shuffle and what surrounds it as one ChannelShuffle node
 * (-O2; the op: ir/ops.def).
 *
 * ShuffleNet V2 ends every unit with Concat(x1, branch) along channels and
 * torch's channel_shuffle, x.view(N, g, C/g, H, W).transpose(1, 2)
 * .reshape(N, C, H, W); the next unit's x.chunk(2, dim=1) reads it as two
 * Slices (TorchScript export) or one Split (dynamo). Four copies a unit
 * (Concat, Transpose, two Slices), seven at batch 32 where the NHWC region
 * ended at the Reshape. As one node it is one kernel writing the halves
 * the next unit reads, and layout_nhwc keeps it inside the region.
 *
 * The pattern: S = Reshape(Transpose(Reshape(X, [.., p, q, ..]), swapping
 * those two adjacent axes), X's shape), X of static shape with p * q
 * channels on that axis. S's channel c is X's channel (c % p) * q + c / p,
 * so group = p. Absorbed when present: a Concat along that axis making X
 * and read only there (its inputs become the node's); every Slice of S
 * that takes one range of that axis (constant bounds, step 1) and every
 * Split of S along it (each becomes an output: start, size). S stays an
 * output of the node when anything else reads it or it is a graph output.
 * The intermediates must be read only inside the pattern and not be
 * graph outputs. The second Reshape's node becomes the ChannelShuffle,
 * named after the Transpose (it stands after X's producers and before
 * S's readers). */
#include "passes.h"
#include <stdlib.h>
#include <string.h>

int gpuc_slice_plan(OpCtx *c, int64_t *start, int64_t *step, int64_t *count); /* ir/infer_shape.c */

#define CS_MAX_OUT 64

/* v's only reader when it has one and is no graph output; else -1 */
static int only_reader(const Graph *g, const int *readers, int v) {
  if (v < 0 || readers[v] != 1 || g->values[v].is_output) return -1;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++)
      if (g->nodes[i].in[k] == v) return i;
  return -1;
}

static bool same_dims_but(const Tensor *a, const Tensor *b, int axis) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (d != axis && a->dims[d] != b->dims[d]) return false;
  return true;
}

/* passes.h */
bool pass_axis_slice(const Graph *g, const Node *n, int axis, int64_t *start) {
  if (n->nin > 5 || n->out[0] < 0) return false;
  const Tensor *ins[5] = {NULL, NULL, NULL, NULL, NULL};
  for (int i = 0; i < n->nin; i++) ins[i] = n->in[i] >= 0 ? &g->values[n->in[i]].t : NULL;
  GpucErr err; /* a slice the planner refuses is not absorbed */
  OpCtx oc = {.g = g, .n = n, .nin = n->nin, .nout = n->nout, .in = ins, .err = &err};
  int64_t st[GPUC_MAX_RANK], step[GPUC_MAX_RANK], count[GPUC_MAX_RANK];
  if (gpuc_slice_plan(&oc, st, step, count) != 0) return false;
  const Tensor *x = ins[0], *y = &g->values[n->out[0]].t;
  if (!same_dims_but(x, y, axis) || count[axis] != y->dims[axis] || count[axis] < 1) return false;
  for (int d = 0; d < x->rank; d++)
    if (d != axis && (st[d] != 0 || count[d] != x->dims[d])) return false;
  if (step[axis] != 1 && count[axis] > 1) return false;
  *start = st[axis];
  return true;
}

static Attr int_attr(const char *name, int64_t v) { return (Attr){.name = name, .kind = GPUC_ATTR_INT, .i = v}; }

static int rewrite(Graph *g, int ti, const int *readers, bool *drop, GpucErr *e) {
  const Node *tn = &g->nodes[ti];
  const int64_t *perm;
  if (tn->in[0] < 0 || tn->out[0] < 0) return 0;
  int rp = gpuc_attr_ints(tn, "perm", &perm), a = -1;
  for (int d = 0; d < rp; d++)
    if (perm[d] != d) {
      if (a < 0 && d + 1 < rp && perm[d] == d + 1 && perm[d + 1] == d) a = d;
      else if (a < 0 || d != a + 1) return 0;
    }
  if (a < 0) return 0;
  int u = tn->in[0], r1 = g->values[u].producer;
  if (r1 < 0 || g->nodes[r1].op != GPUC_OP_RESHAPE || only_reader(g, readers, u) != ti) return 0;
  int r2 = only_reader(g, readers, tn->out[0]);
  if (r2 < 0 || g->nodes[r2].op != GPUC_OP_RESHAPE || g->nodes[r2].in[0] != tn->out[0]) return 0;
  int x = g->nodes[r1].in[0], sv = g->nodes[r2].out[0];
  if (x < 0 || sv < 0) return 0;
  const Tensor *xt = &g->values[x].t, *ut = &g->values[u].t, *stt = &g->values[sv].t;
  int r = xt->rank;
  if (!gpuc_shape_known(xt) || !gpuc_shape_known(ut) || !gpuc_shape_known(stt) || ut->rank != r + 1 || a >= r ||
      stt->rank != r || stt->dt != xt->dt)
    return 0;
  for (int d = 0; d < r; d++) {
    if (stt->dims[d] != xt->dims[d]) return 0;
    if (d < a && ut->dims[d] != xt->dims[d]) return 0;
    if (d > a && ut->dims[d + 1] != xt->dims[d]) return 0;
  }
  int64_t p = ut->dims[a], q = ut->dims[a + 1], C = xt->dims[a];
  if (p * q != C || p < 2 || q < 2) return 0;
  /* the inputs: a Concat's along the axis, or X */
  int xp = g->values[x].producer, nin = 1, cat = -1;
  const int *ins = &x;
  if (xp >= 0 && g->nodes[xp].op == GPUC_OP_CONCAT && only_reader(g, readers, x) == r1) {
    int64_t ax = gpuc_attr_i(&g->nodes[xp], "axis", 1);
    if (ax < 0) ax += r;
    bool ok = ax == a;
    for (int k = 0; ok && k < g->nodes[xp].nin; k++) ok = g->nodes[xp].in[k] >= 0;
    if (ok) { cat = xp; nin = g->nodes[xp].nin; ins = g->nodes[xp].in; }
  }
  /* the outputs: S's Slices and Splits along the axis, S for the rest */
  int outs[CS_MAX_OUT], nout = 0, readn[CS_MAX_OUT], nread = 0;
  int64_t starts[CS_MAX_OUT], sizes[CS_MAX_OUT];
  bool keep_s = g->values[sv].is_output;
  for (int i = r2 + 1; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    int uses = 0;
    for (int k = 0; k < n->nin; k++) uses += n->in[k] == sv;
    if (!uses) continue;
    int64_t s0;
    if (n->op == GPUC_OP_SLICE && uses == 1 && n->in[0] == sv && nout < CS_MAX_OUT && pass_axis_slice(g, n, a, &s0)) {
      starts[nout] = s0;
      sizes[nout] = g->values[n->out[0]].t.dims[a];
      outs[nout++] = n->out[0];
    } else if (n->op == GPUC_OP_SPLIT && uses == 1 && n->in[0] == sv && nout + n->nout <= CS_MAX_OUT) {
      int64_t ax = gpuc_attr_i(n, "axis", 0), off = 0;
      if (ax < 0) ax += r;
      bool ok = ax == a;
      for (int k = 0; ok && k < n->nout; k++) ok = n->out[k] >= 0 && gpuc_shape_known(&g->values[n->out[k]].t);
      if (!ok) { keep_s = true; continue; }
      for (int k = 0; k < n->nout; k++) {
        starts[nout] = off;
        sizes[nout] = g->values[n->out[k]].t.dims[a];
        off += sizes[nout];
        outs[nout++] = n->out[k];
      }
      if (off != C) return 0;
    } else {
      keep_s = true;
      continue;
    }
    readn[nread++] = i;
    if (nread == CS_MAX_OUT) return 0;
  }
  if (keep_s) {
    if (nout == CS_MAX_OUT) return 0;
    starts[nout] = 0;
    sizes[nout] = C;
    outs[nout++] = sv;
  }
  if (nout == 0) return 0;
  for (int k = 0; k < nin; k++) {
    const Tensor *t = &g->values[ins[k]].t;
    if (!gpuc_shape_known(t) || t->dt != xt->dt || !same_dims_but(t, xt, a)) return 0;
  }
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * (size_t)nin);
  int *out = gpuc_arena_alloc(&g->arena, sizeof(int) * (size_t)nout);
  int64_t *sa = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)nout);
  int64_t *za = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)nout);
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr) * 4);
  if (!in || !out || !sa || !za || !at) return gpuc_err_set(e, "%s: channel_shuffle: out of memory", g->path);
  memcpy(in, ins, sizeof(int) * (size_t)nin);
  memcpy(out, outs, sizeof(int) * (size_t)nout);
  memcpy(sa, starts, sizeof(int64_t) * (size_t)nout);
  memcpy(za, sizes, sizeof(int64_t) * (size_t)nout);
  at[0] = int_attr("axis", a);
  at[1] = int_attr("group", p);
  at[2] = (Attr){.name = "starts", .kind = GPUC_ATTR_INTS, .n = nout, .ints = sa};
  at[3] = (Attr){.name = "sizes", .kind = GPUC_ATTR_INTS, .n = nout, .ints = za};
  Node *n = &g->nodes[r2];
  n->name = g->nodes[ti].name; /* the shuffle's Transpose names it (arena-owned, the node goes) */
  n->op = GPUC_OP_CHANNELSHUFFLE;
  n->in = in;
  n->nin = nin;
  n->out = out;
  n->nout = nout;
  n->attrs = at;
  n->nattr = 4;
  drop[r1] = drop[ti] = true;
  if (cat >= 0) drop[cat] = true;
  for (int i = 0; i < nread; i++) drop[readn[i]] = true;
  return 1;
}

int pass_channel_shuffle(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0; /* ChannelShuffle has no gradient rule */
  /* GPUC_NO_CHANNEL_SHUFFLE=1: the copies stay (GPU A/B runs) */
  if (pass_env_on("GPUC_NO_CHANNEL_SHUFFLE")) return 0; /* GPU A/B runs: the rewrite off */
  int nn = g->nnodes, changes = 0;
  PassScratch ps;
  if (pass_scratch_new(g, &ps, e)) return -1;
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_TRANSPOSE || ps.drop[i]) continue;
    int r = rewrite(g, i, ps.readers, ps.drop, e);
    if (r < 0) { pass_scratch_free(&ps); return -1; }
    changes += r;
  }
  gpuc_graph_remove_nodes(g, ps.drop);
  pass_scratch_free(&ps);
  return changes;
}
