/* Gradient rules, one function per op: grad_<OnnxName>(GradCtx *). Each
 * reads the forward node and the output gradients c->dy[k], and sets
 * c->dx[k] for the inputs with c->need[k] by emitting ordinary nodes of the
 * op table. Leaving dx[k] = -1 means a zero gradient. Ops without a rule
 * fall back to the weak definition in autodiff.c ("no gradient rule").
 *
 * This file: linear algebra, elementwise arithmetic and activations, shape
 * ops, ReduceSum, SoftmaxCrossEntropyLoss. Conv/Pool/BatchNorm/LayerNorm go
 * in a grad_rules_nn.c beside it, as more rows of the same table. */
#include "autodiff.h"
#include <string.h>

bool gpuc_grad_trainable_slot(GpucOp op, int k) {
  switch (op) {
  case GPUC_OP_SOFTMAXCROSSENTROPYLOSS: case GPUC_OP_NEGATIVELOGLIKELIHOODLOSS:
  case GPUC_OP_RESHAPE: case GPUC_OP_FLATTEN: case GPUC_OP_DROPOUT: case GPUC_OP_DROPOUTTRAIN:
  case GPUC_OP_GATHER: case GPUC_OP_SLICE: case GPUC_OP_REDUCESUM: case GPUC_OP_REDUCEMEAN:
  case GPUC_OP_TRANSPOSE:
    return k == 0;
  case GPUC_OP_BATCHNORMALIZATION:
    return k == 1 || k == 2;    /* scale and bias; not the running statistics */
  default:
    return true;
  }
}

#define TRY(x) do { if ((x) < 0) return -1; } while (0)

/* ---- linear algebra --------------------------------------------------------- */

/* Y = alpha * op(A) op(B) + beta * C */
int grad_Gemm(GradCtx *c) {
  const Node *n = gc_node(c);
  float alpha = gpuc_attr_f(n, "alpha", 1.0f), beta = gpuc_attr_f(n, "beta", 1.0f);
  bool ta = gpuc_attr_i(n, "transA", 0) != 0, tb = gpuc_attr_i(n, "transB", 0) != 0;
  int A = gc_in(c, 0), B = gc_in(c, 1), C = gc_in(c, 2), dy = c->dy[0];
  if (c->need[0]) {
    /* !ta: dA = dY op(B)^T;  ta: dA = op(B) dY^T */
    if (!ta) { TRY(c->dx[0] = gc_emit2(c, GPUC_OP_GEMM, dy, B)); TRY(gc_attr_i(c, "transB", !tb)); }
    else {
      TRY(c->dx[0] = gc_emit2(c, GPUC_OP_GEMM, B, dy));
      TRY(gc_attr_i(c, "transA", tb));
      TRY(gc_attr_i(c, "transB", 1));
    }
    if (alpha != 1.0f) TRY(gc_attr_f(c, "alpha", alpha));
  }
  if (c->need[1]) {
    /* !tb: dB = op(A)^T dY;  tb: dB = dY^T op(A) */
    if (!tb) { TRY(c->dx[1] = gc_emit2(c, GPUC_OP_GEMM, A, dy)); TRY(gc_attr_i(c, "transA", !ta)); }
    else {
      TRY(c->dx[1] = gc_emit2(c, GPUC_OP_GEMM, dy, A));
      TRY(gc_attr_i(c, "transA", 1));
      TRY(gc_attr_i(c, "transB", ta));
    }
    if (alpha != 1.0f) TRY(gc_attr_f(c, "alpha", alpha));
  }
  if (C >= 0 && c->need[2] && beta != 0) {
    int dc = gc_unbroadcast(c, dy, C);
    TRY(dc);
    if (beta != 1.0f) {
      int b = gc_scalar(c, gc_t(c, dy)->dt, beta);
      TRY(b);
      TRY(dc = gc_emit2(c, GPUC_OP_MUL, dc, b));
    }
    c->dx[2] = dc;
  }
  return 0;
}

int grad_MatMul(GradCtx *c) {
  int A = gc_in(c, 0), B = gc_in(c, 1), dy = c->dy[0];
  if (gc_t(c, A)->rank != 2 || gc_t(c, B)->rank != 2)
    return gpuc_grad_matmul_nd(c); /* passes/grad_rules_tf.c */
  if (c->need[0]) { TRY(c->dx[0] = gc_emit2(c, GPUC_OP_GEMM, dy, B)); TRY(gc_attr_i(c, "transB", 1)); }
  if (c->need[1]) { TRY(c->dx[1] = gc_emit2(c, GPUC_OP_GEMM, A, dy)); TRY(gc_attr_i(c, "transA", 1)); }
  return 0;
}

/* ---- elementwise arithmetic ------------------------------------------------------ */

int grad_Add(GradCtx *c) {
  for (int k = 0; k < 2; k++)
    if (c->need[k]) TRY(c->dx[k] = gc_unbroadcast(c, c->dy[0], gc_in(c, k)));
  return 0;
}

int grad_Sub(GradCtx *c) {
  if (c->need[0]) TRY(c->dx[0] = gc_unbroadcast(c, c->dy[0], gc_in(c, 0)));
  if (c->need[1]) {
    int neg = gc_emit1(c, GPUC_OP_NEG, c->dy[0]);
    TRY(neg);
    TRY(c->dx[1] = gc_unbroadcast(c, neg, gc_in(c, 1)));
  }
  return 0;
}

int grad_Mul(GradCtx *c) {
  for (int k = 0; k < 2; k++) {
    if (!c->need[k]) continue;
    int p = gc_emit2(c, GPUC_OP_MUL, c->dy[0], gc_in(c, 1 - k));
    TRY(p);
    TRY(c->dx[k] = gc_unbroadcast(c, p, gc_in(c, k)));
  }
  return 0;
}

/* ---- activations --------------------------------------------------------------- */

int grad_Relu(GradCtx *c) {
  int x = gc_in(c, 0), zero = gc_scalar(c, gc_t(c, x)->dt, 0.0);
  TRY(zero);
  int pos = gc_emit2(c, GPUC_OP_GREATER, x, zero);
  TRY(pos);
  TRY(c->dx[0] = gc_emit3(c, GPUC_OP_WHERE, pos, c->dy[0], zero));
  return 0;
}

/* dx = dy * y * (1 - y) */
int grad_Sigmoid(GradCtx *c) {
  int y = gc_out(c, 0), one = gc_scalar(c, gc_t(c, y)->dt, 1.0);
  TRY(one);
  int t = gc_emit2(c, GPUC_OP_SUB, one, y);
  TRY(t);
  TRY(t = gc_emit2(c, GPUC_OP_MUL, y, t));
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, c->dy[0], t));
  return 0;
}

/* dx = dy * (1 - y^2) */
int grad_Tanh(GradCtx *c) {
  int y = gc_out(c, 0), one = gc_scalar(c, gc_t(c, y)->dt, 1.0);
  TRY(one);
  int t = gc_emit2(c, GPUC_OP_MUL, y, y);
  TRY(t);
  TRY(t = gc_emit2(c, GPUC_OP_SUB, one, t));
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, c->dy[0], t));
  return 0;
}

/* Mish: y = x t, t = tanh(softplus(x)); softplus' = sigmoid, so
 * dx = dy * (t + x * sigmoid(x) * (1 - t^2)) */
int grad_Mish(GradCtx *c) {
  int x = gc_in(c, 0), one = gc_scalar(c, gc_t(c, x)->dt, 1.0);
  TRY(one);
  int t = gc_emit1(c, GPUC_OP_SOFTPLUS, x);
  TRY(t);
  TRY(t = gc_emit1(c, GPUC_OP_TANH, t));
  int s = gc_emit1(c, GPUC_OP_SIGMOID, x);
  TRY(s);
  int u = gc_emit2(c, GPUC_OP_MUL, t, t);
  TRY(u);
  TRY(u = gc_emit2(c, GPUC_OP_SUB, one, u));   /* 1 - t^2 */
  TRY(u = gc_emit2(c, GPUC_OP_MUL, u, s));
  TRY(u = gc_emit2(c, GPUC_OP_MUL, u, x));
  TRY(u = gc_emit2(c, GPUC_OP_ADD, u, t));
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_MUL, c->dy[0], u));
  return 0;
}

/* ---- shape ops ----------------------------------------------------------------- */

int grad_Identity(GradCtx *c) {
  c->dx[0] = c->dy[0];
  return 0;
}

static int grad_reshape_like(GradCtx *c) {
  int s = gc_shape_of(c, gc_in(c, 0));
  TRY(s);
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_RESHAPE, c->dy[0], s));
  return 0;
}

int grad_Reshape(GradCtx *c) { return c->need[0] ? grad_reshape_like(c) : 0; }
int grad_Flatten(GradCtx *c) { return grad_reshape_like(c); }

/* ---- reductions ---------------------------------------------------------------- */

/* dx = Expand(dy with the reduced axes kept, Shape(x)) */
int grad_ReduceSum(GradCtx *c) {
  const Node *n = gc_node(c);
  int x = gc_in(c, 0), rank = gc_t(c, x)->rank, dy = c->dy[0];
  if (rank < 0) return gc_fail(c, "input rank unknown");
  int64_t axes[GPUC_MAX_RANK];
  int na = 0;
  int av = gc_in(c, 1);
  if (av >= 0) {
    const Tensor *at = gc_t(c, av);
    if (!at->data) return gc_fail(c, "axes must be a constant");
    int64_t cnt = gpuc_numel(at);
    if (cnt < 0 || cnt > rank) return gc_fail(c, "bad axes");
    for (int64_t i = 0; i < cnt; i++) axes[na++] = gpuc_get_i64(at, i);
  } else {
    const int64_t *v;
    int cnt = gpuc_attr_ints(n, "axes", &v);
    if (cnt > rank) return gc_fail(c, "bad axes");
    for (int i = 0; i < cnt; i++) axes[na++] = v[i];
  }
  bool keep = gpuc_attr_i(n, "keepdims", 1) != 0;
  if (na == 0) {
    if (gpuc_attr_i(n, "noop_with_empty_axes", 0)) { c->dx[0] = dy; return 0; }
    for (int d = 0; d < rank; d++) axes[na++] = d;
  }
  for (int i = 0; i < na; i++) {
    if (axes[i] < -rank || axes[i] >= rank) return gc_fail(c, "axis out of range");
    if (axes[i] < 0) axes[i] += rank;
  }
  /* sort: Unsqueeze wants the output positions in order */
  for (int i = 1; i < na; i++)
    for (int j = i; j > 0 && axes[j - 1] > axes[j]; j--) {
      int64_t t = axes[j]; axes[j] = axes[j - 1]; axes[j - 1] = t;
    }
  int k = dy;
  if (!keep && na < rank) {
    if (c->g->opset >= 13) {
      int a = gc_ints(c, na, axes);
      TRY(a);
      TRY(k = gc_emit2(c, GPUC_OP_UNSQUEEZE, dy, a));
    } else {
      TRY(k = gc_emit1(c, GPUC_OP_UNSQUEEZE, dy));
      TRY(gc_attr_ints(c, "axes", na, axes));
    }
  }
  int s = gc_shape_of(c, x);
  TRY(s);
  TRY(c->dx[0] = gc_emit2(c, GPUC_OP_EXPAND, k, s));
  return 0;
}

/* ---- losses ------------------------------------------------------------------ */

/* dscores = SoftmaxCrossEntropyLossGrad(dloss, log_prob, labels[, weights]):
 * the forward node gets its log_prob output if it had none. */
int grad_SoftmaxCrossEntropyLoss(GradCtx *c) {
  Graph *g = c->g;
  Node *n = &g->nodes[c->node];
  int lp;
  TRY(lp = gc_second_output(c, "log_prob", GPUC_DT_UNDEF));
  n = &g->nodes[c->node];
  int ins[4] = {c->dy[0], lp, n->in[1], n->nin > 2 ? n->in[2] : -1};
  const char *red = gpuc_attr_s(n, "reduction", "mean");
  const Attr *ii = gpuc_attr(n, "ignore_index");
  bool has_ii = ii && ii->kind == GPUC_ATTR_INT;
  int64_t ignore = has_ii ? ii->i : 0;
  char redbuf[32];
  snprintf(redbuf, sizeof redbuf, "%s", red);
  TRY(c->dx[0] = gc_emit(c, GPUC_OP_SOFTMAXCROSSENTROPYLOSSGRAD, ins[3] >= 0 ? 4 : 3, ins));
  TRY(gc_attr_s(c, "reduction", redbuf));
  if (has_ii) TRY(gc_attr_i(c, "ignore_index", ignore));
  return 0;
}
