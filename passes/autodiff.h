/* Reverse-mode automatic differentiation as a graph pass.
 *
 * gpuc_autodiff(g, loss, e) appends the backward graph to a forward graph:
 * the gradient of the scalar value `loss` with respect to every trainable
 * parameter becomes a new value "<param>.grad", appended to g->outputs in
 * the order of params (see GradParams). The backward nodes are ordinary
 * nodes of the op table (Gemm with trans attributes, Mul, Where, ReduceSum,
 * Reshape...), so the CPU reference runs them and later backends lower them
 * like any other node.
 *
 * Trainable parameters: float constants (initializers, Value.is_const)
 * feeding a trainable input slot of an op with a gradient rule (not the
 * labels/weights of a loss, not the shape of a Reshape...). They keep or
 * get Value.is_param; other constants are left alone.
 *
 * Gradient rules live in one table keyed by op: `int grad_<OnnxName>(GradCtx *)`
 * (passes/grad_rules*.c), dispatched by a table generated from ir/ops.def;
 * an op without a rule fails with "no gradient rule for <Op>". A rule reads
 * the forward node (gc_node), the output gradients c->dy[k] (-1 when that
 * output does not reach the loss), and sets c->dx[k] for every input with
 * c->need[k], emitting nodes with the gc_* helpers below. */
#ifndef GPUC_AUTODIFF_H
#define GPUC_AUTODIFF_H
#include "passes.h"

typedef struct GradCtx {
  Graph *g;
  int node;                     /* forward node index (nodes may move: use gc_node) */
  const int *dy;                /* per output: gradient value or -1 */
  int *dx;                      /* per input: set by the rule (value index or -1) */
  const bool *need;             /* per input: a gradient is wanted */
  GpucErr *e;
  int last;                     /* node index of the last node emitted */
  int pending;                  /* emitted, not inferred yet (attributes may follow) */
  bool failed;
} GradCtx;

typedef int (*GpucGradFn)(GradCtx *c);
#define OP(E, Name, min_in, max_in, min_out, max_out, flags) int grad_##Name(GradCtx *c);
#include "ops.def"
#undef OP

/* Is input slot k of op a trainable (differentiable, float) slot? */
bool gpuc_grad_trainable_slot(GpucOp op, int k);

int gpuc_autodiff(Graph *g, int loss_value, GpucErr *e);

/* MatMul with batch dims or 1-D operands (grad_MatMul handles 2-D x 2-D). */
int gpuc_grad_matmul_nd(GradCtx *c);

/* ---- helpers for rules --------------------------------------------------- */
const Node *gc_node(const GradCtx *c);
int gc_in(const GradCtx *c, int k);   /* forward input value (or -1) */
int gc_out(const GradCtx *c, int k);  /* forward output value (or -1) */
const Tensor *gc_t(GradCtx *c, int v); /* dtype/shape of a value */
/* Emit op(ins...) with one new output value; returns the value or -1.
 * Inputs of -1 are absent optional inputs. */
int gc_emit(GradCtx *c, GpucOp op, int nin, const int *ins);
int gc_emit1(GradCtx *c, GpucOp op, int a);
int gc_emit2(GradCtx *c, GpucOp op, int a, int b);
int gc_emit3(GradCtx *c, GpucOp op, int a, int b, int d);
/* Attributes on the last node emitted (at most 8 per node). */
int gc_attr_i(GradCtx *c, const char *name, int64_t v);
int gc_attr_f(GradCtx *c, const char *name, float v);
int gc_attr_s(GradCtx *c, const char *name, const char *s);
int gc_attr_ints(GradCtx *c, const char *name, int n, const int64_t *v);
/* Constants: a scalar of dtype dt, and a 1-D int64 vector. */
int gc_scalar(GradCtx *c, GpucDType dt, double v);
int gc_ints(GradCtx *c, int n, const int64_t *v);
/* Shape of value v as a 1-D int64 value (a constant when known, else Shape). */
int gc_shape_of(GradCtx *c, int v);
/* The forward node's output 1 (SoftmaxCrossEntropyLoss log_prob, Dropout
 * mask), added as "<node>.<suffix>" of in[0]'s shape when the model left it
 * out; dt UNDEF = in[0]'s dtype. Returns the value or -1. */
int gc_second_output(GradCtx *c, const char *suffix, GpucDType dt);
/* dy reduced over the axes along which `like` was broadcast to dy's shape
 * (numpy rules), reshaped to like's shape. Returns dy itself when nothing
 * is broadcast. */
int gc_unbroadcast(GradCtx *c, int dy, int like);
/* ReduceSum over axes (keepdims), written for the graph's opset. */
int gc_reduce_sum(GradCtx *c, int x, int naxes, const int64_t *axes, bool keepdims);
/* Dropout node n's mode: training (opset 12+: the constant training_mode
 * input; before opset 7: is_test unset) and ratio (0.5 when absent; not
 * range-checked). Fails with the reason in why when training_mode, or in
 * training mode the ratio, is not a one-value constant, or when a
 * training-mode node is older than opset 10 (no bool mask). */
int gpuc_dropout_mode(const Graph *g, const Node *n, bool *training, double *ratio, char *why, size_t nwhy);
/* Fail: "<file>: node '<name>' (<Op>): gradient: <reason>" (unsupported). */
int gc_fail(GradCtx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
