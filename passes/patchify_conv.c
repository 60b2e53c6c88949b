/* A "patchify" convolution (kernel == stride, no padding, no dilation,
 * group 1: ViT's conv_proj 16x16/16, ConvNeXt's and Swin's 4x4/4 stems,
 * ConvNeXt's 2x2/2 downsampling) reads every input element exactly once,
 * so it is a permutation of X (im2col without overlap) and one GEMM:
 *
 *   X [B,C,H,W] -> Reshape [B,C,H/p,p,W/q,q] -> Transpose [B,H/p,W/q,C,p,q]
 *     -> Reshape [B,H/p,W/q,C*p*q] -> MatMul W' [C*p*q,O] (+ bias [O])
 *     -> Transpose [0,3,1,2] -> Y [B,O,H/p,W/q]
 *
 * W' is W [O,C,p,q] reshaped to [O,K] and transposed at compile time. The
 * MatMul's rows are channels-last, so the trailing Transpose cancels
 * against the model's own flatten/permute (ViT's flatten(2).transpose(1,2),
 * ConvNeXt's permute before its LayerNorm) or layout_nhwc's edge Transposes
 * in passes/simplify_transpose.c; the bias Add becomes the GEMM's epilogue
 * in fuse_matmul.
 *
 * When X is itself Transpose(X0, perm) (ConvNeXt's LayerNorm2d permutes
 * back to NCHW before each downsampling conv) the split is made on X0's
 * axes instead, and K is ordered as X0 holds it (NHWC: [p,q,C], the
 * Transpose then only swaps p with W/q), so one Transpose does both.
 *
 * Spatial ranks 1-3 (X of rank 3-5; the split tensor has rank <= 8).
 * Conditions: constant W (and bias, if any) of X's float dtype, every
 * stride equal to its kernel, pads 0, dilations 1, group 1, static shapes
 * with each spatial dim a multiple of its kernel, K = C * prod(kernel) >=
 * 16 (a smaller GEMM is not worth the copy), not 1x1 (stride 1: other
 * paths take those), not the f32 convs on integers of expand_qlinear
 * (gpuc_fp32), not a training graph (the weight stays the parameter the
 * optimizer updates). Exact in f32 up to the summation order. -O2, before
 * fuse_conv and layout_nhwc (no Conv left for them), fuse_matmul after. */
#include "passes.h"
#include "linear_layers.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SP 3

enum { TAG_BATCH = -1, TAG_CHAN = -2 }; /* split axes: >= 0 outer j, <= -3 inner j (-3 - j) */
#define TAG_OUTER(j) (j)
#define TAG_INNER(j) (-3 - (j))

static bool float_dt(GpucDType dt) { return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16; }

/* attribute `name` of n holds `len` values all equal to v, or is absent */
static bool ints_all(const Node *n, const char *name, int len, int64_t v) {
  const int64_t *a;
  int k = gpuc_attr_ints(n, name, &a);
  if (k < 0) return true;
  if (k != len) return false;
  for (int i = 0; i < k; i++)
    if (a[i] != v) return false;
  return true;
}

/* The conv's spatial count n (1..3) when it is a patchify conv worth a GEMM, else 0. */
static int patch_conv(const Graph *g, const Node *nd) {
  if (nd->op != GPUC_OP_CONV || nd->nin < 2 || nd->in[0] < 0 || nd->in[1] < 0 || nd->out[0] < 0) return 0;
  if (gpuc_attr_i(nd, "gpuc_fp32", 0) == 1 || gpuc_attr_i(nd, "group", 1) != 1) return 0;
  const Value *x = &g->values[nd->in[0]], *w = &g->values[nd->in[1]];
  const Tensor *xt = &x->t, *wt = &w->t, *yt = &g->values[nd->out[0]].t;
  int r = xt->rank, n = r - 2;
  if (n < 1 || n > MAX_SP || x->is_const || !float_dt(xt->dt) || !gpuc_shape_known(xt)) return 0;
  if (!w->is_const || !wt->data || wt->dt != xt->dt || wt->rank != r || wt->dims[1] != xt->dims[1]) return 0;
  if (yt->rank != r || !gpuc_shape_known(yt) || yt->dims[0] != xt->dims[0] || yt->dims[1] != wt->dims[0]) return 0;
  if (nd->nin > 2 && nd->in[2] >= 0) {
    const Value *b = &g->values[nd->in[2]];
    if (!b->is_const || !b->t.data || b->t.dt != xt->dt || b->t.rank != 1 || b->t.dims[0] != wt->dims[0]) return 0;
  }
  const int64_t *ks, *st;
  int nk = gpuc_attr_ints(nd, "kernel_shape", &ks), ns = gpuc_attr_ints(nd, "strides", &st);
  if (ns != n || (nk >= 0 && nk != n)) return 0; /* no strides: 1, so kernel 1 */
  if (!ints_all(nd, "pads", 2 * n, 0) || !ints_all(nd, "dilations", n, 1)) return 0;
  int64_t k = xt->dims[1];
  bool all_one = true;
  for (int j = 0; j < n; j++) {
    int64_t p = wt->dims[2 + j];
    if (p < 1 || st[j] != p || (nk >= 0 && ks[j] != p)) return 0;
    if (xt->dims[2 + j] % p || yt->dims[2 + j] != xt->dims[2 + j] / p) return 0;
    all_one &= p == 1;
    k *= p;
  }
  if (all_one || k < 16) return 0;
  return n;
}

static int oom(Graph *g, GpucErr *e) { return gpuc_err_set(e, "%s: patchify_conv: out of memory", g->path); }

/* Sets Transpose node ni's perm attribute. */
static int set_perm(Graph *g, int ni, int rank, const int *perm, GpucErr *e) {
  return pass_set_perm(g, ni, perm, rank) ? oom(g, e) : 0;
}

/* Reshape(x, dims) -> a new value named "<base>.<suffix>" */
static int reshape(Graph *g, const char *base, const char *suffix, int x, int rank, const int64_t *dims, GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s_shape", base, suffix);
  int s = pass_shape_const(g, name, rank, dims, e);
  if (s < 0) return -1;
  snprintf(name, sizeof name, "%s.%s", base, suffix);
  return gpuc_linear_new_node(g, GPUC_OP_RESHAPE, name, 2, (int[]){x, s}, -1, e);
}

/* Conv node ci (spatial count n) rewritten; the Conv node becomes the
 * trailing Transpose writing Y, so Y keeps its name and producer. */
static int rewrite(Graph *g, int ci, int n, GpucErr *e) {
  const Node *cv = &g->nodes[ci];
  char base[400], name[512];
  snprintf(base, sizeof base, "%s", cv->name);
  int x = cv->in[0], w = cv->in[1], bias = cv->nin > 2 ? cv->in[2] : -1, y = cv->out[0];
  int r = n + 2;
  int64_t xd[GPUC_MAX_RANK], kd[MAX_SP], o = g->values[w].t.dims[0], c = g->values[x].t.dims[1];
  memcpy(xd, g->values[x].t.dims, sizeof(int64_t) * (size_t)r);
  for (int j = 0; j < n; j++) kd[j] = g->values[w].t.dims[2 + j];

  /* X0 and perm with X = Transpose(X0, perm) (identity when X is no
   * Transpose); X axis i is X0 axis perm[i] */
  int x0 = x, perm[GPUC_MAX_RANK], inv[GPUC_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  int tp = g->values[x].producer;
  if (tp >= 0 && g->nodes[tp].op == GPUC_OP_TRANSPOSE && g->nodes[tp].in[0] >= 0) {
    const int64_t *pv;
    int np = gpuc_attr_ints(&g->nodes[tp], "perm", &pv);
    bool ok = np == r, seen[GPUC_MAX_RANK] = {0};
    for (int i = 0; ok && i < r; i++) {
      ok = pv[i] >= 0 && pv[i] < r && !seen[pv[i]];
      if (ok) seen[pv[i]] = true;
    }
    if (ok) {
      x0 = g->nodes[tp].in[0];
      for (int i = 0; i < r; i++) perm[i] = (int)pv[i];
    }
  }
  for (int i = 0; i < r; i++) inv[perm[i]] = i;

  /* X0's axes in order, each spatial one split into (outer, kernel) */
  int64_t sd[GPUC_MAX_RANK];
  int tag[GPUC_MAX_RANK], ns = 0;
  for (int a = 0; a < r; a++) {
    int i = inv[a];
    if (i >= 2) {
      sd[ns] = xd[i] / kd[i - 2];
      tag[ns++] = TAG_OUTER(i - 2);
      sd[ns] = kd[i - 2];
      tag[ns++] = TAG_INNER(i - 2);
    } else {
      sd[ns] = xd[i];
      tag[ns++] = i == 0 ? TAG_BATCH : TAG_CHAN;
    }
  }
  GPUC_ASSERT(ns == r + n && ns <= GPUC_MAX_RANK);
  /* target: batch, outer 0..n-1, then the K axes (channel and kernel
   * offsets) in X0's order, so the copy reads runs of X0 */
  int tperm[GPUC_MAX_RANK], nt = 0, ktag[MAX_SP + 1], nk = 0;
  for (int want = TAG_BATCH; want < n; want++) /* batch, then outer 0..n-1 */
    for (int s = 0; s < ns; s++)
      if (tag[s] == (want < 0 ? TAG_BATCH : TAG_OUTER(want))) tperm[nt++] = s;
  for (int s = 0; s < ns; s++)
    if (tag[s] == TAG_CHAN || tag[s] <= -3) { tperm[nt++] = s; ktag[nk++] = tag[s]; }
  GPUC_ASSERT(nt == ns && nk == n + 1);
  bool moves = false;
  for (int i = 0; i < ns; i++) moves |= tperm[i] != i;

  /* W' [K, O]: row kk = the K axes' digits in ktag's order */
  int64_t kk_n = c, kdims[MAX_SP + 1];
  for (int j = 0; j < n; j++) kk_n *= kd[j];
  for (int m = 0; m < nk; m++) kdims[m] = ktag[m] == TAG_CHAN ? c : kd[-3 - ktag[m]];
  snprintf(name, sizeof name, "%s.gemm_weight", base);
  int64_t wd[2] = {kk_n, o};
  int wg = gpuc_linear_new_const(g, name, g->values[w].t.dt, 2, wd, e);
  if (wg < 0) return -1;
  const Tensor *wt = &g->values[w].t;
  Tensor *gt = &g->values[wg].t;
  for (int64_t kk = 0; kk < kk_n; kk++) {
    int64_t rem = kk, ch = 0, off[MAX_SP] = {0};
    for (int m = nk - 1; m >= 0; m--) {
      int64_t d = rem % kdims[m];
      rem /= kdims[m];
      if (ktag[m] == TAG_CHAN) ch = d;
      else off[-3 - ktag[m]] = d;
    }
    for (int64_t oc = 0; oc < o; oc++) {
      int64_t src = oc * c + ch; /* W [O, C, k0, .., k(n-1)] */
      for (int j = 0; j < n; j++) src = src * kd[j] + off[j];
      gpuc_set_f64(gt, kk * o + oc, gpuc_get_f64(wt, src));
    }
  }

  int v = reshape(g, base, "patches", x0, ns, sd, e);
  if (v < 0) return -1;
  if (moves) {
    snprintf(name, sizeof name, "%s.patches_t", base);
    v = gpuc_linear_new_node(g, GPUC_OP_TRANSPOSE, name, 1, &v, -1, e);
    if (v < 0 || set_perm(g, g->values[v].producer, ns, tperm, e)) return -1;
  }
  int64_t rd[GPUC_MAX_RANK];
  rd[0] = xd[0];
  for (int j = 0; j < n; j++) rd[1 + j] = xd[2 + j] / kd[j];
  rd[n + 1] = kk_n;
  v = reshape(g, base, "rows", v, r, rd, e);
  if (v < 0) return -1;
  snprintf(name, sizeof name, "%s.gemm", base);
  v = gpuc_linear_new_node(g, GPUC_OP_MATMUL, name, 2, (int[]){v, wg}, -1, e);
  if (v < 0) return -1;
  if (bias >= 0) {
    snprintf(name, sizeof name, "%s.gemm_bias", base);
    v = gpuc_linear_new_node(g, GPUC_OP_ADD, name, 2, (int[]){v, bias}, -1, e);
    if (v < 0) return -1;
  }
  /* the Conv node becomes Transpose [0, n+1, 1..n]: [B,H/p,W/q,O] -> [B,O,H/p,W/q] */
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int));
  int back[GPUC_MAX_RANK];
  if (!in) return oom(g, e);
  back[0] = 0;
  back[1] = n + 1;
  for (int j = 0; j < n; j++) back[2 + j] = 1 + j;
  Node *t = &g->nodes[ci];
  in[0] = v;
  t->op = GPUC_OP_TRANSPOSE;
  t->in = in;
  t->nin = 1;
  g->values[y].producer = ci;
  return set_perm(g, ci, r, back, e);
}

int pass_patchify_conv(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0;
  /* GPUC_NO_PATCHIFY=1: the convs stay (the GPU A/B of tests/gpu/patchify_check.sh) */
  if (pass_env_on("GPUC_NO_PATCHIFY")) return 0; /* GPU A/B runs: the rewrite off */
  int nn = g->nnodes, changed = 0;
  for (int i = 0; i < nn; i++) {
    int n = patch_conv(g, &g->nodes[i]);
    if (!n) continue;
    if (rewrite(g, i, n, e)) return -1;
    changed++;
  }
  if (changed && (gpuc_graph_toposort(g, e) || pass_dead_code(g, o, e) < 0 || gpuc_graph_infer(g, e))) return -1;
  return changed;
}
