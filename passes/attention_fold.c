/* 5-D attention folded to 4-D, so fuse_attention matches it.
 *
 * torchvision's MaxViT attends within windows and grids with 5-D tensors,
 * [B, G, H, S, D] (G windows or grid cells an image), its two Einsums
 * MatMuls since passes/einsum_matmul.c:
 *   Sc = MatMul(Q, Kt)   Q [B,G,H,S,D], Kt [B,G,H,D,T]
 *   X  = Add(Sc, M)      M a constant (the relative-position bias, [H,S,T])
 *   P  = Softmax(X, axis -1)
 *   Y  = MatMul(P, V)    V [B,G,H,T,D]
 * fuse_attention takes 4-D attention only, so these ran as batched GEMMs,
 * a Softmax and an Add each (598 steps at batch 1, 0.86x torch.compile).
 * Here the leading two axes, which every op of the chain keeps apart
 * (MatMul's batch axes, Softmax's last axis), merge into one of B*G:
 *   - Q, Kt, V: when made by a Transpose that keeps axes 0 and 1 and read
 *     only here, the Transpose reads Reshape(x, [B*G, ...]) with its perm
 *     on 4 axes (MaxViT's head splits, perm [0,1,3,2,4], become the
 *     [0,2,1,3] head splits fuse_attention reads in place); else a Reshape
 *     of the value (a view);
 *   - Sc, X, P: their shapes, in place (each read only by the chain);
 *   - M: a constant copy with its leading axes merged likewise ([1,1,..]
 *     -> [1,..], [B,G,..] -> [B*G,..]), left as it is when it has 3 axes
 *     or fewer; any other mask shape stops the match;
 *   - Y: the MatMul writes [B*G,H,S,D]; a Transpose keeping axes 0 and 1
 *     that alone reads it (MaxViT's head merge) then works on 4 axes and a
 *     Reshape restores its 5-D output; else a Reshape restores Y.
 * The same values in the same order: only shapes change. A chain with a
 * nan_to_zero Where, a dynamic mask or a value read outside it is left as
 * it is. GPUC_NO_ATTENTION_FOLD=1 turns the pass off (a GPU A/B). */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <string.h>

typedef struct {
  Graph *g;
  const int *readers; /* per value of the graph before the pass (nv0 of them) */
  int nv0;
  int64_t A, B; /* the two leading axes merged */
  const char *base;
  GpucErr *e;
} Fold;

static int oom(Fold *f) {
  gpuc_err_set(f->e, "%s: out of memory", f->g->path);
  return -1;
}

static bool rank5_known(const Graph *g, int v) {
  return v >= 0 && g->values[v].t.rank == 5 && gpuc_shape_known(&g->values[v].t);
}

/* v read once, by the chain, and no graph output */
static bool private_value(const Fold *f, int v) {
  return v >= 0 && v < f->nv0 && f->readers[v] == 1 && !f->g->values[v].is_output;
}

/* dims of a 5-D tensor with the leading two merged (rank 4) */
static void merged_dims(const Tensor *t, int64_t d4[4]) {
  d4[0] = t->dims[0] * t->dims[1];
  for (int i = 2; i < 5; i++) d4[i - 1] = t->dims[i];
}

/* A new Reshape node writing `out` (its tensor already set) from `in`
 * with an i64 shape constant of out's dims: the node or -1 (e set). */
static int add_reshape(Fold *f, int in, int out, const char *what) {
  Graph *g = f->g;
  char name[512];
  snprintf(name, sizeof name, "%s.fold4.%s", f->base, what);
  int s = pass_shape_const(g, name, g->values[out].t.rank, g->values[out].t.dims, f->e);
  if (s < 0) return -1;
  int ni = gpuc_graph_add_node(g, GPUC_OP_RESHAPE, name, 2, 1);
  if (ni < 0) return oom(f);
  Node *n = &g->nodes[ni];
  n->in[0] = in;
  n->in[1] = s;
  n->out[0] = out;
  g->values[out].producer = ni;
  return ni;
}

/* A new value like v (dtype, no data) with `rank` dims: the value or -1. */
static int new_value(Fold *f, int v, const char *what, int rank, const int64_t *dims) {
  char name[512];
  snprintf(name, sizeof name, "%s.fold4.%s", f->base, what);
  int n = gpuc_graph_add_value(f->g, name);
  if (n < 0) return oom(f);
  gpuc_set_shape(&f->g->values[n].t, f->g->values[v].t.dt, rank, dims);
  return n;
}

/* Transpose node p's perm over 5 axes keeping 0 and 1, as 4 axes; false
 * when p is no such Transpose */
static bool perm_keeps_lead(const Node *p, int64_t p4[4]) {
  const int64_t *perm;
  if (p->op != GPUC_OP_TRANSPOSE || gpuc_attr_ints(p, "perm", &perm) != 5 || perm[0] != 0 || perm[1] != 1) return false;
  p4[0] = 0;
  for (int i = 2; i < 5; i++) p4[i - 1] = perm[i] - 1;
  return true;
}

static int set_perm(Fold *f, int ni, const int64_t p4[4]) {
  const int p[4] = {(int)p4[0], (int)p4[1], (int)p4[2], (int)p4[3]};
  return pass_set_perm(f->g, ni, p, 4) ? oom(f) : 0;
}

/* Operand v [A,B,...] of the chain as a 4-D value: the value, or -1. */
static int fold_in(Fold *f, int v, const char *what) {
  Graph *g = f->g;
  Tensor *t = &g->values[v].t;
  int64_t d4[4], p4[4];
  merged_dims(t, d4);
  int pi = g->values[v].producer;
  if (pi >= 0 && private_value(f, v) && perm_keeps_lead(&g->nodes[pi], p4)) {
    int x = g->nodes[pi].in[0];
    int64_t x4[4];
    merged_dims(&g->values[x].t, x4);
    int r = new_value(f, x, what, 4, x4);
    if (r < 0 || add_reshape(f, x, r, what) < 0 || set_perm(f, pi, p4) < 0) return -1;
    g->nodes[pi].in[0] = r;
    gpuc_set_shape(&g->values[v].t, g->values[v].t.dt, 4, d4);
    return v;
  }
  char w4[64];
  snprintf(w4, sizeof w4, "%s4", what);
  int r = new_value(f, v, w4, 4, d4);
  if (r < 0 || add_reshape(f, v, r, w4) < 0) return -1;
  return r;
}

/* The mask constant m as the 4-D scores read it: m itself (3 axes or
 * fewer), a merged copy, -2 when its leading axes do not merge */
static int fold_mask(Fold *f, int m) {
  Graph *g = f->g;
  const Tensor *t = &g->values[m].t;
  if (!g->values[m].is_const || !t->data) return -2;
  if (t->rank <= 3) return m;
  int64_t d[5], lead;
  if (t->rank == 4) { /* aligned to [G,H,S,T] */
    if (t->dims[0] != 1 && !(t->dims[0] == f->B && f->A == 1)) return -2;
    return m;
  }
  if (t->rank != 5) return -2;
  int64_t a = t->dims[0], b = t->dims[1];
  if (a == 1 && b == 1) lead = 1;
  else if (a == f->A && b == f->B) lead = f->A * f->B;
  else if (a == 1 && f->A == 1) lead = b;
  else if (b == 1 && f->B == 1) lead = a;
  else return -2;
  d[0] = lead;
  for (int i = 2; i < 5; i++) d[i - 1] = t->dims[i];
  char name[512];
  snprintf(name, sizeof name, "%s.fold4.mask", f->base);
  int n = gpuc_linear_new_const(g, name, t->dt, 4, d, f->e); /* t is stale from here */
  if (n < 0) return -1;
  memcpy(g->values[n].t.data, g->values[m].t.data, gpuc_tensor_bytes(&g->values[n].t));
  return n;
}

/* Softmax node si and the chain around it, when it matches: 1 folded, 0
 * not the pattern, -1 error. */
static int fold_chain(Graph *g, int si, const int *readers, int nv0, GpucErr *e) {
  Node *sm = &g->nodes[si];
  int x = sm->in[0], p = sm->out[0];
  if (!rank5_known(g, x) || !rank5_known(g, p)) return 0;
  /* the last axis (on 5-D the same before and after opset 13's change) */
  int64_t axis = gpuc_attr_i(sm, "axis", g->opset >= 13 ? -1 : 1);
  if (axis != -1 && axis != 4) return 0;
  Fold f = {.g = g, .readers = readers, .nv0 = nv0, .A = g->values[x].t.dims[0], .B = g->values[x].t.dims[1],
            .base = sm->name, .e = e};
  if (!private_value(&f, x) || !private_value(&f, p)) return 0;
  /* Y = MatMul(P, V): P's one reader */
  int mm2 = -1;
  for (int i = 0; i < g->nnodes && mm2 < 0; i++)
    if (g->nodes[i].op == GPUC_OP_MATMUL && g->nodes[i].in[0] == p) mm2 = i;
  if (mm2 < 0) return 0;
  int vv = g->nodes[mm2].in[1], y = g->nodes[mm2].out[0];
  /* X = Add(Sc, M) or Add(M, Sc), or X = Sc */
  int sc = x, mask = -1, add = -1, xp = g->values[x].producer;
  if (xp >= 0 && g->nodes[xp].op == GPUC_OP_ADD) {
    add = xp;
    int a0 = g->nodes[xp].in[0], a1 = g->nodes[xp].in[1];
    bool first = g->values[a0].producer >= 0 && g->nodes[g->values[a0].producer].op == GPUC_OP_MATMUL;
    sc = first ? a0 : a1;
    mask = first ? a1 : a0;
    if (!rank5_known(g, sc) || !private_value(&f, sc)) return 0;
  }
  int mm1 = g->values[sc].producer;
  if (mm1 < 0 || g->nodes[mm1].op != GPUC_OP_MATMUL) return 0;
  int q = g->nodes[mm1].in[0], kt = g->nodes[mm1].in[1];
  const int ops[4] = {q, kt, vv, y};
  for (int k = 0; k < 4; k++)
    if (!rank5_known(g, ops[k]) || g->values[ops[k]].t.dims[0] != f.A || g->values[ops[k]].t.dims[1] != f.B)
      return 0;
  int m4 = mask;
  if (add >= 0 && (m4 = fold_mask(&f, mask)) < 0) return m4 == -1 ? -1 : 0;
  /* the rewrite: operands, then the chain's shapes, then Y */
  int q4 = fold_in(&f, q, "q"), k4 = q4 < 0 ? -1 : fold_in(&f, kt, "kt"), v4 = k4 < 0 ? -1 : fold_in(&f, vv, "v");
  if (v4 < 0) return -1;
  g->nodes[mm1].in[0] = q4;
  g->nodes[mm1].in[1] = k4;
  g->nodes[mm2].in[1] = v4;
  if (add >= 0) g->nodes[add].in[g->nodes[add].in[0] == mask ? 0 : 1] = m4;
  const int mid[3] = {sc, x, p};
  for (int k = 0; k < (add >= 0 ? 3 : 2); k++) {
    int v = add >= 0 ? mid[k] : mid[k + 1];
    int64_t d4[4];
    merged_dims(&g->values[v].t, d4);
    gpuc_set_shape(&g->values[v].t, g->values[v].t.dt, 4, d4);
  }
  int64_t y4d[4], p4[4];
  merged_dims(&g->values[y].t, y4d);
  int y4 = new_value(&f, y, "y4", 4, y4d);
  if (y4 < 0) return -1;
  g->nodes[mm2].out[0] = y4;
  g->values[y4].producer = mm2;
  g->values[y].producer = -1;
  /* Y's one reader a Transpose keeping axes 0 and 1 (the head merge) */
  int t = -1;
  if (private_value(&f, y))
    for (int i = 0; i < g->nnodes && t < 0; i++)
      if (g->nodes[i].op == GPUC_OP_TRANSPOSE && g->nodes[i].in[0] == y && perm_keeps_lead(&g->nodes[i], p4)) t = i;
  if (t < 0) return add_reshape(&f, y4, y, "y") < 0 ? -1 : 1;
  int z = g->nodes[t].out[0];
  int64_t z4d[4];
  merged_dims(&g->values[z].t, z4d);
  int z4 = new_value(&f, z, "merged4", 4, z4d);
  if (z4 < 0 || set_perm(&f, t, p4) < 0) return -1;
  g->nodes[t].in[0] = y4;
  g->nodes[t].out[0] = z4;
  g->values[z4].producer = t;
  g->values[z].producer = -1;
  return add_reshape(&f, z4, z, "merged") < 0 ? -1 : 1;
}

int pass_attention_fold(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  if (pass_env_on("GPUC_NO_ATTENTION_FOLD")) return 0;
  PassScratch s;
  if (pass_scratch_new(g, &s, e)) return -1;
  int changes = 0, n0 = g->nnodes, nv0 = g->nvalues;
  for (int i = 0; i < n0; i++) {
    if (g->nodes[i].op != GPUC_OP_SOFTMAX) continue;
    int rc = fold_chain(g, i, s.readers, nv0, e);
    if (rc < 0) { pass_scratch_free(&s); return -1; }
    changes += rc;
  }
  pass_scratch_free(&s);
  return changes && gpuc_graph_toposort(g, e) ? -1 : changes;
}
