/* Einsum of two inputs that is a batched matrix product -> MatMul, with a
 * Transpose on an operand or the result where its axes are not in
 * MatMul's order.
 *
 * Why: an Einsum runs as a generic loop kernel, one thread per output
 * element, in fp32 (passes/fp16.c keeps it fp32; codegen/lower_convt.c),
 * where a MatMul is a cuBLASLt GEMM in fp16. torchvision's MaxViT writes
 * each attention as two 5-D Einsums ("BGHID,BGHJD->BGHIJ" and
 * "BGHIJ,BGHJD->BGHID").
 *
 * Matched: two float inputs of one dtype with static shapes, no label twice
 * in one operand, and each label one of
 *   batch: in A, B and Y, the same size in both inputs (no broadcast);
 *   M: in A and Y; N: in B and Y; K: in A and B (summed);
 * exactly one M, one N and one K label (more would need Reshapes). A
 * becomes [batch..., M, K] and B [batch..., K, N], batch in Y's order;
 * the MatMul's [batch..., M, N] is transposed to Y's order. The same sums
 * in the same f32/f16 arithmetic as MatMul's everywhere else.
 * GPUC_NO_EINSUM_MATMUL=1 leaves Einsums alone (a GPU A/B). */
#include "passes.h"
#include "infer_linalg.h"
#include <stdio.h>
#include <string.h>

/* A new value of x's dtype with `dims`, read from x's axes by perm, made by
 * a Transpose node named after the Einsum; -1 on OOM. perm == identity:
 * x itself. */
static int transposed(Graph *g, int x, const int *perm, int rank, const char *base, const char *what, GpucErr *e) {
  bool ident = true;
  for (int d = 0; d < rank; d++) ident &= perm[d] == d;
  if (ident) return x;
  char name[512];
  snprintf(name, sizeof name, "%s.%s", base, what);
  int v = gpuc_graph_add_value(g, name);
  if (v < 0 || pass_add_transpose(g, name, x, v, perm, rank) < 0) {
    gpuc_err_set(e, "%s: out of memory", g->path);
    return -1;
  }
  const Tensor *xt = &g->values[x].t;
  int64_t dims[GPUC_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = xt->dims[perm[d]];
  gpuc_set_shape(&g->values[v].t, xt->dt, rank, dims);
  return v;
}

/* 1 rewritten, 0 not this pattern, -1 error */
static int rewrite(Graph *g, int i, GpucErr *e) {
  Node *n = &g->nodes[i];
  if (n->nin != 2 || n->nout != 1 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0) return 0;
  const Tensor *in[2] = {&g->values[n->in[0]].t, &g->values[n->in[1]].t}, *y = &g->values[n->out[0]].t;
  if (!gpuc_dtype_is_float(in[0]->dt) || in[0]->dt != in[1]->dt || y->dt != in[0]->dt || !gpuc_shape_known(in[0]) ||
      !gpuc_shape_known(in[1]) || !gpuc_shape_known(y))
    return 0;
  GpucErr pe = {0};
  OpCtx oc = {.g = g, .n = n, .nin = 2, .nout = 1, .in = in, .err = &pe};
  GpucEinsum es;
  if (gpuc_einsum_parse(&oc, &es)) return 0;
  /* axis of each label in A, B, Y (-1 absent, -2 twice) */
  int ax[3][GPUC_EINSUM_MAX_LABELS];
  const int rk[3] = {in[0]->rank, in[1]->rank, es.out_rank};
  bool ok = es.nlab <= GPUC_EINSUM_MAX_LABELS;
  for (int s = 0; s < 3 && ok; s++) {
    for (int l = 0; l < es.nlab; l++) ax[s][l] = -1;
    for (int a = 0; a < rk[s]; a++) {
      int l = s < 2 ? es.in_lab[s][a] : es.out_lab[a];
      ax[s][l] = ax[s][l] == -1 ? a : -2;
    }
  }
  gpuc_einsum_free(&es);
  int M = -1, N = -1, K = -1, nm = 0, nn = 0, nk = 0, nb = 0;
  for (int l = 0; l < es.nlab && ok; l++) {
    bool a = ax[0][l] != -1, b = ax[1][l] != -1, o = ax[2][l] != -1;
    if (ax[0][l] == -2 || ax[1][l] == -2 || ax[2][l] == -2) ok = false;
    else if (a && b && o) { nb++; ok = in[0]->dims[ax[0][l]] == in[1]->dims[ax[1][l]]; }
    else if (a && !b && o) { M = l; nm++; }
    else if (!a && b && o) { N = l; nn++; }
    else if (a && b && !o) { K = l; nk++; }
    else if (a || b || o) ok = false; /* a sum over one operand, or a label only in Y */
  }
  if (!ok || nm != 1 || nn != 1 || nk != 1 || nb + 2 > GPUC_MAX_RANK) return 0;
  /* batch labels in Y's order; Z = MatMul's result [batch..., M, N] */
  int pa[GPUC_MAX_RANK], pb[GPUC_MAX_RANK], py[GPUC_MAX_RANK], zpos[GPUC_EINSUM_MAX_LABELS], k = 0;
  for (int d = 0; d < es.out_rank; d++) {
    int l = es.out_lab[d];
    if (l == M || l == N) continue;
    pa[k] = ax[0][l];
    pb[k] = ax[1][l];
    zpos[l] = k++;
  }
  pa[k] = ax[0][M]; pa[k + 1] = ax[0][K];
  pb[k] = ax[1][K]; pb[k + 1] = ax[1][N];
  zpos[M] = k;
  zpos[N] = k + 1;
  for (int d = 0; d < es.out_rank; d++) py[d] = zpos[es.out_lab[d]];
  /* the inverse: Y axis d is Z axis py[d], so Y = Transpose(Z, py) */
  const char *base = n->name;
  int y0 = n->out[0], a0 = n->in[0], b0 = n->in[1];
  int av = transposed(g, a0, pa, nb + 2, base, "lhs", e);
  int bv = av < 0 ? -1 : transposed(g, b0, pb, nb + 2, base, "rhs", e);
  if (av < 0 || bv < 0) return -1;
  bool yid = true;
  for (int d = 0; d < nb + 2; d++) yid &= py[d] == d;
  int z = y0;
  if (!yid) {
    char name[512];
    snprintf(name, sizeof name, "%s.mm", base);
    if ((z = gpuc_graph_add_value(g, name)) < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
    int64_t zd[GPUC_MAX_RANK];
    const Tensor *yt = &g->values[y0].t;
    for (int d = 0; d < nb + 2; d++) zd[py[d]] = yt->dims[d];
    gpuc_set_shape(&g->values[z].t, yt->dt, nb + 2, zd);
    snprintf(name, sizeof name, "%s.out", base);
    if (pass_add_transpose(g, name, z, y0, py, nb + 2) < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  n = &g->nodes[i]; /* adding nodes may move the array */
  n->op = GPUC_OP_MATMUL;
  n->in[0] = av;
  n->in[1] = bv;
  n->out[0] = z;
  n->nattr = 0;
  g->values[z].producer = i;
  return 1;
}

int pass_einsum_matmul(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  if (pass_env_on("GPUC_NO_EINSUM_MATMUL")) return 0;
  int changes = 0, nn = g->nnodes;
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].op != GPUC_OP_EINSUM) continue;
    int r = rewrite(g, i, e);
    if (r < 0) return -1;
    changes += r;
  }
  return changes && gpuc_graph_toposort(g, e) ? -1 : changes;
}
