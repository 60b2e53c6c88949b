/* Attention reads Q, K and V as strided views instead of copies, and the
 * Q, K and V projections become one GEMM.
 *
 * 1. Views. An Attention input (Q, K or V) is a logical [B,H,S,D] tensor
 *    whose element (b,h,s,d) lies at off + b*sb + h*sh + s*ss + d of the
 *    tensor the node reads (ir/infer_linalg.h, attributes view and dims).
 *    Walking up from the input, ops that only move data keep such an
 *    affine map (passes/view_walk.c: Reshape, Flatten, Squeeze, Unsqueeze,
 *    Identity, Transpose, Split, Slice with constant bounds, Gather of one
 *    constant index). The walk stops at the first op that computes, or
 *    where a step does not fit; d must stay contiguous. The Attention then
 *    reads that tensor: GPT-2's Split of c_attn, torchvision's in_proj
 *    chunking ([S,B,3,E] -> Transpose -> Gather), timm's qkv unbind
 *    ([B,S,3,H,D] -> Transpose -> Slice, the dynamo export) and the
 *    head-split Reshapes and Transposes all stop being kernels (they die
 *    unless read elsewhere).
 * 2. One QKV GEMM. When Q, K and V (after 1) are the outputs of three
 *    GEMMs on one A (MatMulBias with activation 0 and no residual, or
 *    MatMul, a constant 2-D weight [K,N_i], a constant bias row), read by
 *    nothing but this Attention, they become one GEMM against the weights
 *    concatenated along N (bias likewise; zeros for a member without one,
 *    as Whisper's k_proj): Y [..., Nq+Nk+Nv], each view re-addressed as a
 *    column window of Y's rows (BERT, ViT from Hugging Face: [B,S,3,H,D]
 *    order, one read of A instead of three). Two of them on one A merge
 *    the same way (cross-attention's K and V from the encoder output).
 * 3. torchvision's Transposes around the block (in_proj on [S,B,E], out_proj
 *    back to [B,S,E]): the GEMMs work row by row, so in_proj reads x as it
 *    is (the views follow the Transpose), and out_proj's Transpose moves
 *    up into Y's layout, where the residual Add then meets out_proj.
 * Runs right after fuse_attention (before fp16: the merged weights get the
 * half policy like the others). Each rewrite is checked against the
 * unrewritten graph on the CPU reference (tests/unit/test_xformer_passes.c). */
#include "passes.h"
#include "infer_linalg.h"
#include "linear_layers.h"
#include "view_walk.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Q, K, V as views: the logical axes b, h, s, d (rank 4); d must stay
 * contiguous */
typedef GpucView View;

static bool d_contiguous(const View *v) { return v->n[3] == 1 || v->st[3] == 1; }

/* v through y -> z (gpuc_view_through), d still contiguous after */
static bool through(View *v, const Tensor *y, const Tensor *z, const int *map, const int64_t *start,
                    const int64_t *fixed) {
  View w = *v;
  if (!gpuc_view_through(&w, y, z, map, start, fixed, false) || !d_contiguous(&w)) return false;
  *v = w;
  return true;
}

/* One step up from value y through its producer: the new base, or -1.
 * A view axis may cover several axes of y (s over an NCHW conv output's
 * H x W): it is split across them for the step (gpuc_view_step's split)
 * and its parts merged back after, which works where they are contiguous
 * with each other in the producer's input (H x W rows of an NHWC tensor,
 * stride C). The view keeps its 4 axes; d may be strided on the way (the
 * caller keeps the last base where it is contiguous). */
static int step_up(const Graph *g, int y, View *v) {
  View w = *v;
  int z = gpuc_view_step(g, y, &w, true);
  if (z < 0) return -1;
  View m = {.off = w.off, .rank = v->rank};
  int j = 0;
  for (int i = 0; i < v->rank; i++) { /* the parts of axis i: the next axes of w whose extents multiply to n[i] */
    if (j >= w.rank) return -1;
    int64_t n = w.n[j], st = w.st[j];
    bool ok = true;
    for (j++; n < v->n[i] && j < w.rank; j++) {
      ok &= w.st[j - 1] == w.st[j] * w.n[j];
      n *= w.n[j];
      st = w.st[j];
    }
    if (n != v->n[i] || !ok) return -1;
    m.n[i] = n;
    m.st[i] = st;
  }
  if (j != w.rank) return -1;
  *v = m;
  return z;
}

/* the view of Attention input i (0 Q, 1 K, 2 V) as its geometry has it */
static View geom_view(const GpucAttnGeom *a, int i) {
  View v = {.off = a->off[i], .rank = 4, .st = {a->st[i][0], a->st[i][1], a->st[i][2], 1},
            .n = {a->B, a->H, i == 0 ? a->Sq : a->Sk, i == 2 ? a->Dv : a->D}};
  return v;
}

/* Attention node n reads in[i] through views v[i]: its inputs and
 * attributes (view, dims; bshd's input flags cleared, y's kept) */
static int set_views(Graph *g, Node *n, const GpucAttnGeom *a, const int in[3], const View v[3], GpucErr *e) {
  int keep = 0;
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 2));
  int64_t *view = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * 12);
  int64_t *dims = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * 6);
  int64_t *bshd = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * 4);
  if (!at || !view || !dims || !bshd) return gpuc_err_set(e, "%s: out of memory", g->path);
  for (int i = 0; i < n->nattr; i++) {
    const char *nm = n->attrs[i].name;
    if (!strcmp(nm, "view") || !strcmp(nm, "dims") || !strcmp(nm, "bshd")) continue;
    at[keep++] = n->attrs[i];
  }
  for (int i = 0; i < 3; i++) {
    view[4 * i] = v[i].off;
    for (int j = 0; j < 3; j++) view[4 * i + 1 + j] = v[i].st[j];
  }
  int64_t d[6] = {a->B, a->H, a->Sq, a->Sk, a->D, a->Dv};
  memcpy(dims, d, sizeof d);
  bshd[0] = bshd[1] = bshd[2] = 0;
  bshd[3] = a->bshd[3];
  at[keep++] = (Attr){.name = "view", .kind = GPUC_ATTR_INTS, .n = 12, .ints = view};
  at[keep++] = (Attr){.name = "dims", .kind = GPUC_ATTR_INTS, .n = 6, .ints = dims};
  if (keep > n->nattr + 2) return gpuc_err_set(e, "%s: internal: attribute count", g->path);
  Attr *b = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)keep + 1));
  if (!b) return gpuc_err_set(e, "%s: out of memory", g->path);
  memcpy(b, at, sizeof(Attr) * (size_t)keep);
  b[keep] = (Attr){.name = "bshd", .kind = GPUC_ATTR_INTS, .n = 4, .ints = bshd};
  n->attrs = b;
  n->nattr = keep + 1;
  for (int i = 0; i < 3; i++) n->in[i] = in[i];
  return 0;
}

/* The node's geometry after a rewrite must still hold and lower */
static bool still_valid(const Graph *g, const Node *n) {
  GpucAttnGeom a;
  const Tensor *q = &g->values[n->in[0]].t, *k = &g->values[n->in[1]].t, *v = &g->values[n->in[2]].t;
  const Tensor *m = n->nin > 3 && n->in[3] >= 0 ? &g->values[n->in[3]].t : NULL;
  return !gpuc_attention_geom(n, q, k, v, &a) && gpuc_attention_lowerable(&a, q, k, v, m);
}

/* the node reads Q, K, V through views (fold_views set them): the QKV
 * merge and the input Transpose work on those only */
static bool has_views(const Node *n) {
  const int64_t *v;
  return gpuc_attr_ints(n, "view", &v) == 12;
}

/* 1: walk each of Q, K, V up as far as views go; 1 if any moved */
static int fold_views(Graph *g, int i, GpucErr *e) {
  Node *n = &g->nodes[i];
  GpucAttnGeom a;
  if (gpuc_attention_geom(n, &g->values[n->in[0]].t, &g->values[n->in[1]].t, &g->values[n->in[2]].t, &a)) return 0;
  /* K and V with as many heads as Q (views of grouped-query K/V would need
   * their own head count in `dims`) */
  const int64_t *had;
  for (int k = 1; k < 3 && gpuc_attr_ints(n, "view", &had) < 0; k++) {
    const Tensor *t = &g->values[n->in[k]].t;
    if (t->rank != 4 || t->dims[a.bshd[k] ? 2 : 1] != a.H) return 0;
  }
  int in[3];
  View v[3];
  bool moved = false;
  for (int k = 0; k < 3; k++) {
    in[k] = n->in[k];
    v[k] = geom_view(&a, k);
    View w = v[k];
    for (int guard = 0, at = in[k]; guard < 64; guard++) {
      if ((at = step_up(g, at, &w)) < 0) break;
      if (!d_contiguous(&w)) continue;
      in[k] = at;
      v[k] = w;
      moved = true;
    }
  }
  if (!moved) return 0;
  Node keep = *n;
  int *nin = gpuc_arena_alloc(&g->arena, sizeof(int) * 4);
  if (!nin) return gpuc_err_set(e, "%s: out of memory", g->path);
  memcpy(nin, n->in, sizeof(int) * (size_t)n->nin);
  n->in = nin;
  if (set_views(g, n, &a, in, v, e)) return -1;
  if (!still_valid(g, n)) { *n = keep; return 0; }
  return 1;
}

/* ---- 0: Y written in the layout its readers want ----------------------- */

/* Attention node n's y_perm attribute set to perm */
static int set_y_perm(Graph *g, Node *n, const int perm[4], GpucErr *e) {
  int64_t *p = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * 4);
  Attr *at = gpuc_arena_alloc(&g->arena, sizeof(Attr) * ((size_t)n->nattr + 1));
  if (!p || !at) return gpuc_err_set(e, "%s: out of memory", g->path);
  for (int i = 0; i < 4; i++) p[i] = perm[i];
  int k = 0;
  for (int i = 0; i < n->nattr; i++)
    if (strcmp(n->attrs[i].name, "y_perm")) at[k++] = n->attrs[i];
  at[k++] = (Attr){.name = "y_perm", .kind = GPUC_ATTR_INTS, .n = 4, .ints = p};
  n->attrs = at;
  n->nattr = k;
  return 0;
}

static bool same_dims(const Tensor *a, const Tensor *b) {
  if (a->rank != b->rank || !gpuc_shape_known(a) || !gpuc_shape_known(b)) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* Y's only reader, a Transpose that keeps Dv last or a Reshape to the same
 * shape (GPT-2's head merge: Reshape, Transpose [0,2,1,3]; torchvision's
 * Transpose [2,0,1,3]), becomes Y's stored layout: the Attention writes
 * that reader's output. Returns how many were absorbed. */
static int fold_output(Graph *g, int i, const int *readers, const int *last, bool *drop, GpucErr *e) {
  int absorbed = 0;
  for (int guard = 0; guard < 8; guard++) {
    Node *n = &g->nodes[i];
    int y = n->out[0];
    if (y < 0 || readers[y] != 1 || g->values[y].is_output || last[y] < 0 || drop[last[y]]) break;
    const Node *r = &g->nodes[last[y]];
    if (r->in[0] != y || r->out[0] < 0) break;
    GpucAttnGeom a;
    if (gpuc_attention_geom(n, &g->values[n->in[0]].t, &g->values[n->in[1]].t, &g->values[n->in[2]].t, &a)) break;
    int perm[4];
    const int64_t *tp;
    if (r->op == GPUC_OP_TRANSPOSE && gpuc_attr_ints(r, "perm", &tp) == 4 && tp[3] == 3) {
      bool ok = true;
      for (int k = 0; k < 4 && ok; k++) {
        ok = tp[k] >= 0 && tp[k] < 4;
        if (ok) perm[k] = a.ydims_perm[tp[k]];
      }
      if (!ok) break;
    } else if (r->op == GPUC_OP_RESHAPE && same_dims(&g->values[y].t, &g->values[r->out[0]].t)) {
      memcpy(perm, a.ydims_perm, sizeof perm);
    } else {
      break;
    }
    Node keep = *n;
    if (set_y_perm(g, n, perm, e)) return -1;
    n->out[0] = r->out[0];
    if (!still_valid(g, n)) { n->out[0] = y; n->attrs = keep.attrs; n->nattr = keep.nattr; break; }
    drop[last[y]] = true;
    absorbed++;
  }
  return absorbed;
}

/* ---- 3: the Transposes around torchvision's attention block ----------- */

/* the node making y when it is a GEMM that works row by row: MatMulBias
 * with 3 inputs and activation 0, or MatMul against a constant 2-D B;
 * permuting A's leading axes permutes Y's the same way */
static int row_gemm(const Graph *g, int y) {
  int p = y >= 0 ? g->values[y].producer : -1;
  if (p < 0) return -1;
  const Node *n = &g->nodes[p];
  const Value *b = &g->values[n->in[1]];
  bool mmb = n->op == GPUC_OP_MATMULBIAS && n->nin == 3 && gpuc_attr_i(n, "activation", 0) == 0;
  bool mm = n->op == GPUC_OP_MATMUL && b->is_const && b->t.data;
  if ((!mmb && !mm) || b->t.rank != 2 || g->values[n->in[0]].t.rank < 2) return -1;
  return p;
}

/* a Transpose node's perm when it keeps the last axis, else false */
static bool perm_keeps_last(const Node *t, int rank, int *perm) {
  const int64_t *p;
  if (t->op != GPUC_OP_TRANSPOSE || gpuc_attr_ints(t, "perm", &p) != rank || p[rank - 1] != rank - 1) return false;
  for (int a = 0; a < rank; a++) {
    if (p[a] < 0 || p[a] >= rank) return false;
    perm[a] = (int)p[a];
  }
  return true;
}

/* Input side: the Attention (node i) reads all of Q, K, V from y =
 * GEMM(Transpose(x, P)) (torchvision: x [B,S,E] -> [S,B,E] -> in_proj),
 * the GEMM's output read by nothing else and the Transpose's by nothing
 * but the GEMM: the GEMM reads x (its output holds y transposed back) and
 * the views follow through P. 1 done, 0 not. */
static int sink_input_transpose(Graph *g, int i, const int *readers, bool *drop, GpucErr *e) {
  Node *n = &g->nodes[i];
  int y = n->in[0];
  if (!has_views(n) || n->in[1] != y || n->in[2] != y || readers[y] != 3 || g->values[y].is_output) return 0;
  int gp = row_gemm(g, y);
  if (gp < 0 || drop[gp]) return 0;
  int xt = g->nodes[gp].in[0], tp = g->values[xt].producer;
  if (tp < 0 || drop[tp] || readers[xt] != 1 || g->values[xt].is_output) return 0;
  const Tensor *yt = &g->values[y].t;
  int perm[GPUC_MAX_RANK];
  if (yt->rank > GPUC_MAX_RANK || g->values[xt].t.rank != yt->rank || !perm_keeps_last(&g->nodes[tp], yt->rank, perm))
    return 0;
  GpucAttnGeom a;
  if (gpuc_attention_geom(n, yt, yt, yt, &a)) return 0;
  /* y = Transpose(y', P): y's element i lies in y' at index i[a] on axis P[a] */
  Tensor y2 = *yt;
  for (int ax = 0; ax < yt->rank; ax++) y2.dims[perm[ax]] = yt->dims[ax];
  View v[3];
  int64_t start[GPUC_MAX_RANK] = {0}, fixed[GPUC_MAX_RANK];
  for (int ax = 0; ax < GPUC_MAX_RANK; ax++) fixed[ax] = -1;
  for (int k = 0; k < 3; k++) {
    v[k] = geom_view(&a, k);
    if (!through(&v[k], yt, &y2, perm, start, fixed)) return 0;
  }
  g->nodes[gp].in[0] = g->nodes[tp].in[0];
  g->values[y].t = y2; /* the GEMM's output, now untransposed */
  g->values[y].t.data = NULL;
  drop[tp] = true;
  int in[3] = {y, y, y};
  return set_views(g, &g->nodes[i], &a, in, v, e) ? -1 : 1;
}

/* Output side: Y -> Reshape (merging axes after the first p, which it
 * keeps) -> GEMM -> Transpose(P) with P moving only axes before p
 * (torchvision: [S,B,H,D] -> [S,B,E] -> out_proj -> [B,S,E]): the
 * Attention writes Y with those axes permuted, the Reshape and the GEMM
 * keep the order, and the Transpose goes, so the residual Add after it
 * meets the GEMM (fuse_residual_gemm). 1 done, 0 not. */
static int hoist_output_transpose(Graph *g, int i, const int *readers, const int *last, bool *drop, GpucErr *e) {
  Node *n = &g->nodes[i];
  int y = n->out[0];
  if (y < 0 || readers[y] != 1 || g->values[y].is_output || last[y] < 0) return 0;
  int rs = last[y];
  Node *r = &g->nodes[rs];
  int y1 = r->out[0];
  if (drop[rs] || r->op != GPUC_OP_RESHAPE || r->in[0] != y || y1 < 0 || readers[y1] != 1 ||
      g->values[y1].is_output || last[y1] < 0)
    return 0;
  int gp = last[y1];
  int y2 = g->nodes[gp].out[0];
  if (drop[gp] || row_gemm(g, y2) != gp || g->nodes[gp].in[0] != y1 || readers[y2] != 1 ||
      g->values[y2].is_output || last[y2] < 0 || drop[last[y2]])
    return 0;
  int tp = last[y2];
  const Tensor *yt = &g->values[y].t, *t1 = &g->values[y1].t, *t2 = &g->values[y2].t;
  int perm[GPUC_MAX_RANK];
  if (t2->rank > GPUC_MAX_RANK || t1->rank != t2->rank || !perm_keeps_last(&g->nodes[tp], t2->rank, perm) ||
      g->nodes[tp].out[0] < 0)
    return 0;
  int p = 0; /* the Reshape keeps Y's first p axes */
  while (p < yt->rank && p < t1->rank && yt->dims[p] == t1->dims[p]) p++;
  for (int ax = 0; ax < t1->rank; ax++)
    if (ax >= p ? perm[ax] != ax : perm[ax] >= p) return 0;
  GpucAttnGeom a;
  if (p < 1 || p > 3 ||
      gpuc_attention_geom(n, &g->values[n->in[0]].t, &g->values[n->in[1]].t, &g->values[n->in[2]].t, &a))
    return 0;
  int yperm[4];
  for (int ax = 0; ax < 4; ax++) yperm[ax] = ax < p ? a.ydims_perm[perm[ax]] : a.ydims_perm[ax];
  /* the Reshape's new target: its output's dims with the first p permuted */
  int64_t dims[GPUC_MAX_RANK];
  for (int ax = 0; ax < t1->rank; ax++) dims[ax] = ax < p ? t1->dims[perm[ax]] : t1->dims[ax];
  char name[512];
  snprintf(name, sizeof name, "%s.shape", r->name);
  int64_t rk = t1->rank;
  int sc = gpuc_linear_new_const(g, name, GPUC_DT_I64, 1, &rk, e);
  if (sc < 0) return -1;
  for (int ax = 0; ax < t1->rank; ax++) gpuc_set_i64(&g->values[sc].t, ax, dims[ax]);
  n = &g->nodes[i];
  r = &g->nodes[rs];
  Node keep = *n;
  if (set_y_perm(g, n, yperm, e)) return -1;
  if (!still_valid(g, n)) { *n = keep; return 0; }
  /* Y's stored dims follow; the Reshape's output and the GEMM's too */
  Tensor *ty = &g->values[y].t, *ty1 = &g->values[y1].t;
  int64_t old[GPUC_MAX_RANK];
  memcpy(old, ty->dims, sizeof old);
  for (int ax = 0; ax < p; ax++) ty->dims[ax] = old[perm[ax]];
  for (int ax = 0; ax < ty1->rank; ax++) ty1->dims[ax] = dims[ax];
  int *rin = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
  if (!rin) return gpuc_err_set(e, "%s: out of memory", g->path);
  rin[0] = r->in[0];
  rin[1] = sc;
  r->in = rin;
  r->nin = 2;
  g->nodes[gp].out[0] = g->nodes[tp].out[0];
  g->values[g->nodes[tp].out[0]].producer = gp;
  drop[tp] = true;
  return 1;
}

/* ---- 2: one GEMM for Q, K and V ---------------------------------------- */

/* the GEMM that makes y, mergeable: MatMulBias(A, W, bias) with activation
 * 0 or MatMul(A, W), W a constant 2-D float [K,N], bias a constant of N
 * values, y [..., N]; its node index or -1 */
static int mergeable_gemm(const Graph *g, int y) {
  int p = g->values[y].producer;
  if (p < 0) return -1;
  const Node *n = &g->nodes[p];
  bool mmb = n->op == GPUC_OP_MATMULBIAS && n->nin == 3 && gpuc_attr_i(n, "activation", 0) == 0;
  if (!mmb && n->op != GPUC_OP_MATMUL) return -1;
  const Value *w = &g->values[n->in[1]];
  const Tensor *yt = &g->values[y].t;
  if (!w->is_const || !w->t.data || w->t.rank != 2 || !gpuc_dtype_is_float(w->t.dt) || w->t.dt != yt->dt ||
      g->values[n->in[0]].t.rank < 2 || !gpuc_shape_known(yt) || yt->dims[yt->rank - 1] != w->t.dims[1])
    return -1;
  if (mmb) {
    const Value *b = &g->values[n->in[2]];
    if (!b->is_const || !b->t.data || b->t.dt != yt->dt || gpuc_numel(&b->t) != w->t.dims[1]) return -1;
  }
  return p;
}

/* can GEMM nodes pa and pb (mergeable_gemm) become one? */
static bool same_gemm_family(const Graph *g, int pa, int pb) {
  const Node *a = &g->nodes[pa], *b = &g->nodes[pb];
  const Tensor *wa = &g->values[a->in[1]].t, *wb = &g->values[b->in[1]].t;
  return a->in[0] == b->in[0] && wa->dims[0] == wb->dims[0] && wa->dt == wb->dt;
}

/* Merge the GEMMs making Q, K and V of Attention node i (each read only
 * by it) that share their A: all three (self-attention), or two (K and V
 * of cross-attention, from the encoder's output). 1 done, 0 not
 * applicable, -1 error. */
static int merge_qkv(Graph *g, int i, const int *readers, bool *drop, GpucErr *e) {
  Node *n = &g->nodes[i];
  int y[3] = {n->in[0], n->in[1], n->in[2]}, p[3];
  if (!has_views(n)) return 0;
  for (int k = 0; k < 3; k++) {
    p[k] = mergeable_gemm(g, y[k]);
    if (p[k] >= 0 && (drop[p[k]] || readers[y[k]] != 1 || g->values[y[k]].is_output)) p[k] = -1;
  }
  /* the members: all three, else the first pair of K/V, Q/K, Q/V whose
   * outputs differ and whose GEMMs share A */
  static const int groups[4][3] = {{0, 1, 2}, {1, 2, -1}, {0, 1, -1}, {0, 2, -1}};
  int mem[3], nm = 0;
  for (int gi = 0; gi < 4 && !nm; gi++) {
    int sz = groups[gi][2] < 0 ? 2 : 3;
    bool ok = true;
    for (int x = 0; x < sz && ok; x++) {
      ok = p[groups[gi][x]] >= 0;
      for (int z = 0; z < x && ok; z++)
        ok = y[groups[gi][x]] != y[groups[gi][z]] && same_gemm_family(g, p[groups[gi][x]], p[groups[gi][z]]);
    }
    if (!ok) continue;
    for (int x = 0; x < sz; x++) mem[x] = groups[gi][x];
    nm = sz;
  }
  if (nm < 2) return 0;
  const Node *g0 = &g->nodes[p[mem[0]]];
  int64_t K = g->values[g0->in[1]].t.dims[0], N[3] = {0, 0, 0}, Nt = 0;
  for (int x = 0; x < nm; x++) {
    N[mem[x]] = g->values[g->nodes[p[mem[x]]].in[1]].t.dims[1];
    Nt += N[mem[x]];
  }
  GpucAttnGeom a;
  if (gpuc_attention_geom(n, &g->values[y[0]].t, &g->values[y[1]].t, &g->values[y[2]].t, &a)) return 0;
  /* each member's view re-addressed in Y [M, Nt] through Y_k = Y[:, c_k : c_k + N_k] */
  const Tensor *yt0 = &g->values[y[mem[0]]].t;
  int64_t M = gpuc_numel(yt0) / N[mem[0]];
  int64_t c = 0;
  View v[3];
  for (int k = 0; k < 3; k++) v[k] = geom_view(&a, k);
  for (int x = 0; x < nm; x++) {
    int k = mem[x];
    if (gpuc_numel(&g->values[y[k]].t) / N[k] != M) return 0;
    Tensor yk = {.dt = yt0->dt, .rank = 2, .dims = {M, N[k]}}, ya = {.dt = yt0->dt, .rank = 2, .dims = {M, Nt}};
    int map[2] = {0, 1};
    int64_t start[2] = {0, c}, fixed[2] = {-1, -1};
    if (!through(&v[k], &yk, &ya, map, start, fixed)) return 0;
    c += N[k];
  }
  /* W [K, Nt] and the bias [Nt], column blocks in Q, K, V order */
  GpucDType dt = g->values[g0->in[1]].t.dt;
  bool has_bias = false; /* a member without one (Whisper's k_proj) adds zeros */
  for (int x = 0; x < nm; x++) has_bias |= g->nodes[p[mem[x]]].op == GPUC_OP_MATMULBIAS;
  char name[512];
  snprintf(name, sizeof name, "%s.qkv_weight", g0->name);
  int64_t wd[2] = {K, Nt};
  int w = gpuc_linear_new_const(g, name, dt, 2, wd, e), bias = -1;
  if (w < 0) return -1;
  if (has_bias) {
    snprintf(name, sizeof name, "%s.qkv_bias", g->nodes[p[mem[0]]].name);
    bias = gpuc_linear_new_const(g, name, dt, 1, &Nt, e);
    if (bias < 0) return -1;
  }
  size_t es = gpuc_dtype_size(dt);
  c = 0;
  for (int x = 0; x < nm; x++) {
    int k = mem[x];
    const Node *gk = &g->nodes[p[k]];
    const char *src = g->values[gk->in[1]].t.data;
    char *dst = g->values[w].t.data;
    for (int64_t r = 0; r < K; r++) memcpy(dst + ((size_t)(r * Nt + c)) * es, src + (size_t)(r * N[k]) * es, (size_t)N[k] * es);
    if (bias >= 0 && gk->op == GPUC_OP_MATMULBIAS)
      memcpy((char *)g->values[bias].t.data + (size_t)c * es, g->values[gk->in[2]].t.data, (size_t)N[k] * es);
    else if (bias >= 0)
      memset((char *)g->values[bias].t.data + (size_t)c * es, 0, (size_t)N[k] * es);
    c += N[k];
  }
  /* the first member GEMM (all come after A and before this Attention)
   * becomes the merged one; its output value grows to [..., Nt] */
  int first = mem[0];
  for (int x = 1; x < nm; x++)
    if (p[mem[x]] < p[first]) first = mem[x];
  Node *gm = &g->nodes[p[first]];
  gm->op = has_bias ? GPUC_OP_MATMULBIAS : GPUC_OP_MATMUL;
  int *gin = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
  size_t len = strlen(gm->name) + 16;
  char *nmv = gpuc_arena_alloc(&g->arena, len);
  if (!gin || !nmv) return gpuc_err_set(e, "%s: out of memory", g->path);
  snprintf(nmv, len, "%s (%s)", gm->name, nm == 3 ? "qkv" : "merged");
  gin[0] = gm->in[0];
  gin[1] = w;
  gin[2] = bias;
  gm->in = gin;
  gm->nin = has_bias ? 3 : 2;
  gm->name = nmv;
  int yv = y[first];
  Tensor *yt = &g->values[yv].t;
  yt->dims[yt->rank - 1] = Nt;
  int ins[3] = {y[0], y[1], y[2]};
  for (int x = 0; x < nm; x++) {
    if (mem[x] != first) drop[p[mem[x]]] = true;
    ins[mem[x]] = yv;
  }
  n = &g->nodes[i];
  return set_views(g, n, &a, ins, v, e) ? -1 : 1;
}

int pass_attention_views(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0; /* the weights are parameters there */
  /* GPUC_NO_ATTENTION_VIEWS=1: the copies stay (the GPU A/B of
   * tests/gpu/xformer_check.sh: steps and time before and after) */
  if (pass_env_on("GPUC_NO_ATTENTION_VIEWS")) return 0; /* GPU A/B runs: the rewrite off */
  int changes = 0, rc = -1;
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i].op != GPUC_OP_ATTENTION) continue;
    int r = fold_views(g, i, e);
    if (r < 0) return -1;
    changes += r;
  }
  if (changes && pass_dead_code(g, o, e) < 0) return -1; /* the copies nothing reads now */
  int nn = g->nnodes;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *last = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  bool *drop = calloc((size_t)nn + 1, 1);
  if (!readers || !last || !drop) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  gpuc_graph_count_readers(g, readers, last);
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_ATTENTION || drop[i]) continue;
    int r = sink_input_transpose(g, i, readers, drop, e);
    if (r < 0) goto done;
    changes += r;
    r = fold_output(g, i, readers, last, drop, e);
    if (r < 0) goto done;
    changes += r;
    r = hoist_output_transpose(g, i, readers, last, drop, e);
    if (r < 0) goto done;
    changes += r;
    r = merge_qkv(g, i, readers, drop, e);
    if (r < 0) goto done;
    changes += r;
  }
  gpuc_graph_remove_nodes(g, drop);
  rc = changes;
done:
  free(readers); free(last); free(drop);
  return rc;
}
