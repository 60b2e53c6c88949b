/* The Linear layers of the quantizing passes (passes/linear_layers.h). */
#include "linear_layers.h"
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

enum { ONNX_FLOAT = 1, ONNX_FLOAT16 = 10, ONNX_BFLOAT16 = 16 };

static bool is_float(GpucDType dt) { return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16; }

/* A constant holding n values along its last dim ([N] or [1,..,1,N]). */
static bool const_row(const Value *v, int64_t n) {
  const Tensor *t = &v->t;
  if (!v->is_const || !t->data || !is_float(t->dt) || t->rank < 1) return false;
  for (int i = 0; i + 1 < t->rank; i++)
    if (t->dims[i] != 1) return false;
  return t->dims[t->rank - 1] == n;
}

/* True when any comma-separated glob of `skip` matches `name`. */
static bool skipped(const char *skip, const char *name) {
  if (!skip) return false;
  char pat[512];
  for (const char *p = skip; *p;) {
    size_t l = strcspn(p, ",");
    if (l > 0 && l < sizeof pat) {
      memcpy(pat, p, l);
      pat[l] = 0;
      if (fnmatch(pat, name, 0) == 0) return true;
    }
    p += l;
    if (*p == ',') p++;
  }
  return false;
}

int gpuc_linear_classify(const Graph *g, const Node *nd, const LinearRules *r, LinearLayer *L, const char **why) {
  if (nd->op != GPUC_OP_MATMUL && nd->op != GPUC_OP_GEMM && nd->op != GPUC_OP_MATMULBIAS) return 0;
  if (nd->nin < 2 || nd->in[0] < 0 || nd->in[1] < 0 || nd->out[0] < 0) return 0;
  const Value *w = &g->values[nd->in[1]];
  if (!w->is_const || !w->t.data || w->t.rank != 2 || !is_float(w->t.dt)) return 0;
  const Tensor *x = &g->values[nd->in[0]].t, *y = &g->values[nd->out[0]].t;
  bool gemm = nd->op == GPUC_OP_GEMM;
  *L = (LinearLayer){.x = nd->in[0], .w = nd->in[1], .bias = -1, .alpha = 1, .beta = 1};
  L->w_t = gemm && gpuc_attr_i(nd, "transB", 0);
  L->k = L->w_t ? w->t.dims[1] : w->t.dims[0];
  L->n = L->w_t ? w->t.dims[0] : w->t.dims[1];
  if (skipped(r->skip, nd->name)) { *why = r->skip_why; return 2; }
  if (!is_float(x->dt) || !is_float(y->dt)) { *why = "input or output is not f32/f16/bf16"; return 2; }
  if (x->rank < 1 || x->dims[x->rank - 1] != L->k) { *why = "input rows of unknown length"; return 2; }
  if (gemm && gpuc_attr_i(nd, "transA", 0)) { *why = "Gemm with transA"; return 2; }
  if (L->k % r->multiple || L->n % r->multiple) { *why = r->multiple_why; return 2; }
  if (r->max_k && L->k > r->max_k) { *why = r->max_k_why; return 2; }
  /* an activation cuBLASLt applies in a float GEMM's epilogue
   * (fuse_gemm_act leaves --int8/--fp8 graphs alone; static Q/DQ ones can
   * have it) */
  if (nd->op == GPUC_OP_MATMULBIAS && gpuc_attr_i(nd, "activation", 0) != 0) {
    *why = "an activation fused into the float GEMM's epilogue";
    return 2;
  }
  if (nd->op == GPUC_OP_MATMULBIAS) L->bias = nd->in[2];
  if (gemm) {
    L->alpha = gpuc_attr_f(nd, "alpha", 1.0f);
    L->beta = gpuc_attr_f(nd, "beta", 1.0f);
    if (nd->nin > 2 && nd->in[2] >= 0 && L->beta != 0) {
      if (!const_row(&g->values[nd->in[2]], L->n)) { *why = "Gemm's C is not a constant row of N values"; return 2; }
      L->bias = nd->in[2];
    }
  }
  return 1;
}

int gpuc_linear_new_const(Graph *g, const char *name, GpucDType dt, int rank, const int64_t *dims, GpucErr *e) {
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  gpuc_set_shape(&g->values[v].t, dt, rank, dims);
  if (gpuc_tensor_alloc(&g->values[v].t, e)) return -1;
  g->values[v].is_const = true;
  return v;
}

int gpuc_linear_bias_const(Graph *g, const Node *nd, const LinearLayer *L, const char *suffix, GpucDType dt,
                           GpucErr *e) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", nd->name, suffix);
  int64_t n = L->n;
  int b = gpuc_linear_new_const(g, name, dt, 1, &n, e);
  if (b < 0) return -1;
  for (int64_t o = 0; o < n; o++)
    gpuc_set_f64(&g->values[b].t, o, (double)((float)gpuc_get_f64(&g->values[L->bias].t, o) * L->beta));
  return b;
}

void gpuc_linear_weight_row(const Graph *g, const LinearLayer *L, int64_t o, float *row) {
  const Tensor *w = &g->values[L->w].t;
  for (int64_t j = 0; j < L->k; j++)
    row[j] = (float)gpuc_get_f64(w, L->w_t ? o * L->k + j : j * L->n + o);
}

int gpuc_linear_quantize_rows(Graph *g, int x, GpucOp op, const char *q, const char *node, int *cache_q,
                              int *cache_s, GpucErr *e) {
  if (cache_q[x] >= 0) return 0;
  char name[512];
  snprintf(name, sizeof name, "%s.%s", g->values[x].name, q);
  int qv = gpuc_graph_add_value(g, name);
  snprintf(name, sizeof name, "%s.%sscale", g->values[x].name, q);
  int s = qv < 0 ? -1 : gpuc_graph_add_value(g, name);
  snprintf(name, sizeof name, "%s.%s", g->values[x].name, node);
  int ni = s < 0 ? -1 : gpuc_graph_add_node(g, op, name, 1, 2);
  if (ni < 0) return gpuc_err_set(e, "%s: out of memory", g->path);
  Node *qn = &g->nodes[ni];
  qn->in[0] = x;
  qn->out[0] = qv;
  qn->out[1] = s;
  g->values[qv].producer = g->values[s].producer = ni;
  cache_q[x] = qv;
  cache_s[x] = s;
  return 0;
}

int gpuc_linear_onnx_float_type(GpucDType dt) {
  return dt == GPUC_DT_F16 ? ONNX_FLOAT16 : dt == GPUC_DT_BF16 ? ONNX_BFLOAT16 : ONNX_FLOAT;
}

int gpuc_linear_new_node(Graph *g, GpucOp op, const char *name, int nin, const int *in, int to, GpucErr *e) {
  int y = gpuc_graph_add_value(g, name);
  int ni = y < 0 ? -1 : gpuc_graph_add_node(g, op, name, nin, 1);
  Attr *a = to >= 0 ? gpuc_arena_alloc(&g->arena, sizeof(Attr)) : NULL;
  if (ni < 0 || (to >= 0 && !a)) return gpuc_err_set(e, "%s: out of memory", g->path);
  Node *n = &g->nodes[ni];
  for (int k = 0; k < nin; k++) n->in[k] = in[k];
  n->out[0] = y;
  if (a) {
    *a = (Attr){.name = "to", .kind = GPUC_ATTR_INT, .i = to};
    n->attrs = a;
    n->nattr = 1;
  }
  g->values[y].producer = ni;
  return y;
}
