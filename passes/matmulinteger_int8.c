/* MatMulInteger (as onnxruntime.quantization.quantize_dynamic writes it,
 * after DynamicQuantizeLinear) on the int8 GEMM of --int8, exactly:
 *
 *   Y[m,n] = sum_k (A[m,k] - za) (B[k,n] - zb[n])        A u8, B const int8
 *
 * IMMA multiplies signed bytes, so with A' = A - 128 (s8, exact) and
 * B' = B - zb (constant, must fit s8):
 *
 *   Y[m,n] = sum_k A'[m,k] B'[k,n] + (128 - za) * colsum[n],
 *   colsum[n] = sum_k B'[k,n]   (a compile-time constant)
 *
 * which the graph computes as
 *   A'  = Cast<int8>(Cast<int32>(A) - 128)
 *   acc = MatMulInt8(A', B'^T)               ([N,K] int8, made here)
 *   Y   = acc + (128 - Cast<int32>(za)) * colsum
 * all in int32 without overflow (checked from B's values), so Y holds the
 * integers MatMulInteger holds. The scale chain ORT writes after it,
 * Mul(Cast<float>(Y), s), becomes DequantizeRows(Y, s, 1): the same f32
 * product in one elementwise step, and under --fp16 (which runs later)
 * the sums are scaled before they are stored as half. The output matches
 * onnxruntime's where the reference did. za is a scalar (the
 * DynamicQuantizeLinear zero point, known at run time) or absent; zb a
 * constant scalar or per column, or absent. A int8 (QLinearMatMul of int8
 * activations, passes/expand_qlinear.c) goes to the GEMM as it is, with
 * shift 0 - za in place of 128 - za. Other MatMulIntegers (B computed,
 * per-row za, K or N not multiples of 4) stay as they are. */
#include "passes.h"
#include "linear_layers.h"
#include "quant_int8.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ONNX_INT8 = 3, ONNX_INT32 = 6 };

static int add_const_i32(Graph *g, const char *name, int rank, const int64_t *dims, GpucErr *e) {
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_set_shape(&g->values[v].t, GPUC_DT_I32, rank, dims);
  if (gpuc_tensor_alloc(&g->values[v].t, e)) return -1;
  g->values[v].is_const = true;
  return v;
}

/* B' = B - zb as [N,K] int8 and colsum[N], when every B' fits int8 and
 * the sums fit int32; else 1 (leave the node). */
static int weights(Graph *g, const Node *nd, int *wq, int *colsum, GpucErr *e) {
  const Tensor *b = &g->values[nd->in[1]].t;
  const Tensor *zb = nd->nin > 3 && nd->in[3] >= 0 ? &g->values[nd->in[3]].t : NULL;
  int64_t k = b->dims[0], n = b->dims[1];
  if (zb && (!zb->data || (gpuc_numel(zb) != 1 && gpuc_numel(zb) != n))) return 1;
  int64_t maxabs = 0;
  for (int64_t j = 0; j < k * n; j++) {
    int64_t z = zb ? (int64_t)gpuc_get_f64(zb, gpuc_numel(zb) == 1 ? 0 : j % n) : 0;
    int64_t w = (int64_t)gpuc_get_f64(b, j) - z;
    if (w < -128 || w > 127) return 1;
    if (llabs(w) > maxabs) maxabs = llabs(w);
  }
  /* |sum A' B'| <= K * 128 * maxabs and |(128 - za) colsum| <= 128 K maxabs,
   * the true result at most K * 255 * maxabs */
  if (k * 255 * maxabs > INT32_MAX) return 1;
  char name[512];
  int64_t dq[2] = {n, k};
  snprintf(name, sizeof name, "%s.wq", nd->name);
  int q = gpuc_graph_add_value(g, name);
  if (q < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_set_shape(&g->values[q].t, GPUC_DT_I8, 2, dq);
  if (gpuc_tensor_alloc(&g->values[q].t, e)) return -1;
  g->values[q].is_const = true;
  snprintf(name, sizeof name, "%s.colsum", nd->name);
  int s = add_const_i32(g, name, 1, &n, e);
  if (s < 0) return -1;
  b = &g->values[nd->in[1]].t; /* values may have moved */
  zb = nd->nin > 3 && nd->in[3] >= 0 ? &g->values[nd->in[3]].t : NULL;
  int8_t *qv = g->values[q].t.data;
  int32_t *sv = g->values[s].t.data;
  for (int64_t o = 0; o < n; o++) {
    int64_t z = zb ? (int64_t)gpuc_get_f64(zb, gpuc_numel(zb) == 1 ? 0 : o) : 0, sum = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t w = (int64_t)gpuc_get_f64(b, j * n + o) - z;
      qv[o * k + j] = (int8_t)w;
      sum += w;
    }
    sv[o] = (int32_t)sum;
  }
  *wq = q;
  *colsum = s;
  return 0;
}

static bool takes(const Graph *g, const Node *nd) {
  if (nd->op != GPUC_OP_MATMULINTEGER || nd->in[0] < 0 || nd->in[1] < 0 || nd->out[0] < 0) return false;
  const Tensor *a = &g->values[nd->in[0]].t, *b = &g->values[nd->in[1]].t;
  const Value *bv = &g->values[nd->in[1]];
  if ((a->dt != GPUC_DT_U8 && a->dt != GPUC_DT_I8) || b->dt != GPUC_DT_I8 || !bv->is_const || !b->data || b->rank != 2) return false;
  if (a->rank < 1 || a->dims[a->rank - 1] != b->dims[0] || b->dims[0] % 4 || b->dims[1] % 4) return false;
  if (nd->nin > 2 && nd->in[2] >= 0 && gpuc_numel(&g->values[nd->in[2]].t) != 1) return false; /* per-row za */
  return true;
}

/* The scale chain ORT writes after a MatMulInteger y: Cast(y, to=FLOAT)
 * read only by Mul(., s), s f32 of one value or N values. Returns the
 * Mul's index (and the Cast's in *cast, s in *scale), or -1. */
static int scale_chain(const Graph *g, int y, const int *readers, const int *reader, int64_t n, int *cast,
                       int *scale) {
  if (readers[y] != 1 || g->values[y].is_output) return -1;
  const Node *c = &g->nodes[reader[y]];
  if (c->op != GPUC_OP_CAST || gpuc_attr_i(c, "to", 0) != 1 || c->out[0] < 0) return -1;
  int cv = c->out[0];
  if (readers[cv] != 1 || g->values[cv].is_output) return -1;
  const Node *m = &g->nodes[reader[cv]];
  if (m->op != GPUC_OP_MUL || m->in[0] == m->in[1]) return -1;
  int s = m->in[0] == cv ? m->in[1] : m->in[0];
  const Tensor *st = &g->values[s].t, *yt = &g->values[y].t;
  if (st->dt != GPUC_DT_F32 || !gpuc_shape_known(st) || st->rank > yt->rank) return -1;
  bool one = gpuc_numel(st) == 1, row = st->rank >= 1 && st->dims[st->rank - 1] == n && gpuc_numel(st) == n;
  if (!one && !row) return -1;
  if (m->out[0] < 0 || g->values[m->out[0]].t.rank != yt->rank) return -1; /* no broadcast past y */
  *cast = reader[y];
  *scale = s;
  return reader[cv];
}

/* Mul(Cast(y), s) -> DequantizeRows(y, s, 1) or (y, 1, s): the same f32
 * product, and under --fp16 the scaling happens before the half store
 * (a Cast of the int32 sums to half would overflow). */
static int absorb_scale(Graph *g, int mul, int y, int s, GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.one", g->nodes[mul].name);
  int64_t one = 1;
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_set_shape(&g->values[v].t, GPUC_DT_F32, 1, &one);
  if (gpuc_tensor_alloc(&g->values[v].t, e)) return -1;
  *(float *)g->values[v].t.data = 1.0f;
  g->values[v].is_const = true;
  bool per_tensor = gpuc_numel(&g->values[s].t) == 1;
  int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
  Attr *to = gpuc_arena_alloc(&g->arena, sizeof(Attr));
  if (!in || !to) return gpuc_err_set(e, "%s: out of memory", g->path);
  in[0] = y;
  in[1] = per_tensor ? s : v;
  in[2] = per_tensor ? v : s;
  *to = (Attr){.name = "to", .kind = GPUC_ATTR_INT, .i = 1};
  Node *m = &g->nodes[mul];
  m->op = GPUC_OP_DEQUANTIZEROWS;
  m->in = in;
  m->nin = 3;
  m->attrs = to;
  m->nattr = 1;
  return 0;
}

int pass_matmulinteger_int8(Graph *g, const PassOptions *o, GpucErr *e) {
  (void)o;
  int nn = g->nnodes, changes = 0, rc = -1;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  int *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  int *casts = malloc(sizeof(int) * ((size_t)nn + 1)), ncasts = 0; /* absorbed Casts, dropped at the end */
  bool *drop = NULL;
  if (!readers || !reader || !casts) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < nn; i++) {
    if (!takes(g, &g->nodes[i])) continue;
    int wq = -1, colsum = -1;
    int w = weights(g, &g->nodes[i], &wq, &colsum, e);
    if (w < 0) goto done;
    if (w > 0) continue;
    char base[400], name[512];
    snprintf(base, sizeof base, "%s", g->nodes[i].name);
    int a = g->nodes[i].in[0], za = g->nodes[i].nin > 2 ? g->nodes[i].in[2] : -1;
    bool s8 = g->values[a].t.dt == GPUC_DT_I8; /* A is already what IMMA multiplies */
    int64_t one = 1;
    snprintf(name, sizeof name, "%s.c128", base);
    int c128 = add_const_i32(g, name, 0, &one, e);
    if (c128 < 0) goto done;
    *(int32_t *)g->values[c128].t.data = s8 ? 0 : 128;
    /* A' = Cast<int8>(Cast<int32>(A) - 128), or A itself */
    int as8 = a;
    if (!s8) {
      snprintf(name, sizeof name, "%s.a32", base);
      int a32 = gpuc_linear_new_node(g, GPUC_OP_CAST, name, 1, &a, ONNX_INT32, e);
      snprintf(name, sizeof name, "%s.a32s", base);
      int a32s = a32 < 0 ? -1 : gpuc_linear_new_node(g, GPUC_OP_SUB, name, 2, (int[]){a32, c128}, -1, e);
      snprintf(name, sizeof name, "%s.as8", base);
      as8 = a32s < 0 ? -1 : gpuc_linear_new_node(g, GPUC_OP_CAST, name, 1, &a32s, ONNX_INT8, e);
    }
    /* the GEMM keeps the MatMulInteger's name */
    snprintf(name, sizeof name, "%s.acc", base);
    int acc = as8 < 0 ? -1 : gpuc_graph_add_value(g, name);
    int mi = acc < 0 ? -1 : gpuc_graph_add_node(g, GPUC_OP_MATMULINT8, base, 2, 1);
    if (mi < 0) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    g->nodes[mi].in[0] = as8;
    g->nodes[mi].in[1] = wq;
    g->nodes[mi].out[0] = acc;
    g->values[acc].producer = mi;
    /* corr = (128 - Cast<int32>(za)) * colsum, or 128 * colsum (u8); s8:
     * (0 - za) * colsum, or 0 * colsum */
    int shift = c128;
    if (za >= 0) {
      snprintf(name, sizeof name, "%s.za32", base);
      int za32 = gpuc_linear_new_node(g, GPUC_OP_CAST, name, 1, &za, ONNX_INT32, e);
      snprintf(name, sizeof name, "%s.shift", base);
      shift = za32 < 0 ? -1 : gpuc_linear_new_node(g, GPUC_OP_SUB, name, 2, (int[]){c128, za32}, -1, e);
      if (shift < 0) goto done;
    }
    snprintf(name, sizeof name, "%s.corr", base);
    int corr = gpuc_linear_new_node(g, GPUC_OP_MUL, name, 2, (int[]){shift, colsum}, -1, e);
    if (corr < 0) goto done;
    /* the MatMulInteger becomes Y = acc + corr */
    int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
    snprintf(name, sizeof name, "%s.sum", base);
    const char *nm = gpuc_arena_strdup(&g->arena, name, strlen(name));
    if (!in || !nm) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    in[0] = acc;
    in[1] = corr;
    Node *n = &g->nodes[i];
    n->op = GPUC_OP_ADD;
    n->name = nm;
    n->in = in;
    n->nin = 2;
    n->nattr = 0;
    n->attrs = NULL;
    changes++;
    int cast, scale, mul = scale_chain(g, n->out[0], readers, reader, g->values[wq].t.dims[0], &cast, &scale);
    if (mul >= 0 && absorb_scale(g, mul, n->out[0], scale, e)) goto done;
    if (mul >= 0) casts[ncasts++] = cast;
  }
  if (ncasts) { /* nodes were added: size the mask for all of them */
    if (!(drop = calloc((size_t)g->nnodes + 1, 1))) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    for (int k = 0; k < ncasts; k++) drop[casts[k]] = true;
    gpuc_graph_remove_nodes(g, drop);
  }
  if (changes && (gpuc_graph_toposort(g, e) || gpuc_graph_infer(g, e))) goto done;
  rc = changes;
done:
  free(readers);
  free(reader);
  free(casts);
  free(drop);
  return rc;
}
