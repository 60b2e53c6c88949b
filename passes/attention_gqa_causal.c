/* Two rewrites of Attention nodes (ir/ops.def) that pass_fuse_attention
 * made, so the kernel reads less:
 *
 * Grouped-query heads. LLaMA-style decoders repeat each K/V head G times
 * before attention (transformers' repeat_kv; both PyTorch exporters write
 * it the same way):
 *   K = Reshape(Expand(Unsqueeze(Kh, axis 2), [B,Hk,G,S,D]), [B,Hk*G,S,D])
 * K then becomes Kh [B,Hk,S,D] itself (query head h reads K/V head h / G:
 * head h of the Reshape is row h of [Hk*G], i.e. Kh's head h / G). K and V
 * are rewritten together or not at all (one Hk for both). Kh made by the
 * head split Transpose(x, perm [0,2,1,3]) read only there is read as x,
 * stored [B,S,Hk,D] (the bshd flag), as fuse_attention does for H heads.
 *
 * Causal masks: a mask that computes a causal triangle (with or without
 * a padding row beside it) becomes attribute causal = 1 and the padding
 * row alone, found by value and exact, fully masked rows included
 * (passes/causal_mask.c).
 *
 * Runs after fuse_attention; dead Expand/Reshape chains go with DCE. */
#include "passes.h"
#include "causal_mask.h"
#include "infer_linalg.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Node *producer(const Graph *g, int v, GpucOp op) {
  if (v < 0) return NULL;
  int p = g->values[v].producer;
  return p >= 0 && g->nodes[p].op == op ? &g->nodes[p] : NULL;
}

static bool dims_eq(const Tensor *t, int rank, const int64_t *d) {
  if (t->rank != rank || !gpuc_shape_known(t)) return false;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != d[i]) return false;
  return true;
}

/* kv = Reshape(Expand(Unsqueeze(x, 2), [B,Hk,G,S,D]), [B,Hk*G,S,D]): x
 * (4-D [B,Hk,S,D]) and *G; else -1 */
static int repeated_kv(const Graph *g, int kv, int64_t *G) {
  const Node *r = producer(g, kv, GPUC_OP_RESHAPE);
  const Node *ex = r ? producer(g, r->in[0], GPUC_OP_EXPAND) : NULL;
  const Node *un = ex ? producer(g, ex->in[0], GPUC_OP_UNSQUEEZE) : NULL;
  if (!un) return -1;
  const Tensor *x = &g->values[un->in[0]].t, *e = &g->values[ex->out[0]].t;
  if (x->rank != 4 || !gpuc_shape_known(x) || e->rank != 5 || !gpuc_shape_known(e)) return -1;
  const int64_t *xd = x->dims;
  int64_t ud[5] = {xd[0], xd[1], 1, xd[2], xd[3]}, ed[5] = {xd[0], xd[1], e->dims[2], xd[2], xd[3]};
  int64_t rd[4] = {xd[0], xd[1] * e->dims[2], xd[2], xd[3]};
  if (!dims_eq(&g->values[un->out[0]].t, 5, ud) || !dims_eq(e, 5, ed) || !dims_eq(&g->values[kv].t, 4, rd))
    return -1;
  *G = e->dims[2];
  return un->in[0];
}

/* x = Transpose(y, perm [0,2,1,3]) read only by one node and not an
 * output: y; else -1 */
static int head_split(const Graph *g, const int *readers, int x) {
  const Node *t = producer(g, x, GPUC_OP_TRANSPOSE);
  const int64_t *p;
  if (!t || readers[x] != 1 || g->values[x].is_output || gpuc_attr_ints(t, "perm", &p) != 4 || p[0] != 0 ||
      p[1] != 2 || p[2] != 1 || p[3] != 3)
    return -1;
  return t->in[0];
}

static int64_t attr_index(const Node *n, const char *name) {
  for (int i = 0; i < n->nattr; i++)
    if (!strcmp(n->attrs[i].name, name)) return i;
  return -1;
}

static int gqa(Graph *g, int i, const int *readers) {
  Node *n = &g->nodes[i];
  const int64_t *flags;
  if (gpuc_attr_ints(n, "bshd", &flags) != 4 || flags[1] || flags[2]) return 0;
  int64_t gk = 0, gv = 0;
  int k = repeated_kv(g, n->in[1], &gk), v = repeated_kv(g, n->in[2], &gv);
  if (k < 0 || v < 0 || gk != gv || gk < 1) return 0;
  /* the Unsqueeze reads Kh: a head split feeding only it becomes strides */
  int64_t *fl = g->nodes[i].attrs[attr_index(n, "bshd")].ints;
  int ks = head_split(g, readers, k), vs = head_split(g, readers, v);
  n->in[1] = ks >= 0 ? ks : k;
  n->in[2] = vs >= 0 ? vs : v;
  fl[1] = ks >= 0;
  fl[2] = vs >= 0;
  return 1;
}

int pass_attention_gqa_causal(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  /* GPUC_NO_CAUSAL_MASK=1: masks stay masks (A/B runs; tests/unit/test_longattn.c
   * compares the two on the reference) */
  bool masks = !pass_env_on("GPUC_NO_CAUSAL_MASK");
  int nn = g->nnodes, changes = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *last = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  CausalMemo memo;
  bool memo_ok = gpuc_causal_memo_init(&memo, nn) == 0;
  if (!readers || !last || !memo_ok) {
    free(readers); free(last);
    if (memo_ok) gpuc_causal_memo_free(&memo);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, readers, last);
  int rc = 0;
  for (int i = 0; i < nn && rc >= 0; i++) {
    if (g->nodes[i].op != GPUC_OP_ATTENTION) continue;
    changes += gqa(g, i, readers);
    rc = masks ? gpuc_attention_causal_mask(g, i, &memo, e) : 0;
    if (rc > 0) changes += rc;
  }
  free(readers); free(last);
  gpuc_causal_memo_free(&memo);
  if (rc < 0) return -1;
  if (changes && (gpuc_graph_toposort(g, e) || pass_dead_code(g, o, e) < 0 || gpuc_graph_infer(g, e))) return -1;
  return changes;
}
