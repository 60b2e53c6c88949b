/* The Linear layers the quantizing passes take (passes/quantize_int8.c,
 * passes/quantize_fp8.c): MatMul, Gemm and MatMulBias against a constant
 * 2-D float weight. What both passes require of a layer, the weight's rows
 * by output channel, the per-row quantize node and the new constants, in
 * one place; each pass keeps only its number format. */
#ifndef GPUC_LINEAR_LAYERS_H
#define GPUC_LINEAR_LAYERS_H
#include "passes.h"

/* A Linear layer's parts; w_t: W is stored [N, K] (Gemm transB). */
typedef struct LinearLayer {
  int x, w, bias;                /* values; bias -1 if none */
  int64_t k, n;
  bool w_t;
  float alpha, beta;             /* Gemm's; 1 otherwise */
} LinearLayer;

/* What one number format adds to the common conditions. */
typedef struct LinearRules {
  const char *skip, *skip_why;   /* comma-separated fnmatch globs of layer names kept in float */
  int64_t multiple;              /* K and N must divide by it (the GEMM's alignment) */
  const char *multiple_why;
  int64_t max_k;                 /* 0: none */
  const char *max_k_why;
} LinearRules;

/* 0: not a Linear layer; 1: one the format takes (*L set); 2: a Linear
 * layer kept in float, *why says why. */
int gpuc_linear_classify(const Graph *g, const Node *nd, const LinearRules *r, LinearLayer *L, const char **why);
/* A node op(in...) -> a new value named name, with attribute `to` when
 * to >= 0 (a Cast's); the value, or -1 (e set). */
int gpuc_linear_new_node(Graph *g, GpucOp op, const char *name, int nin, const int *in, int to, GpucErr *e);
/* A new constant value named `name` of dtype dt and shape dims, allocated. */
int gpuc_linear_new_const(Graph *g, const char *name, GpucDType dt, int rank, const int64_t *dims, GpucErr *e);
/* The bias times beta as a new [N] constant of dtype dt named
 * "<layer>.<suffix>". */
int gpuc_linear_bias_const(Graph *g, const Node *nd, const LinearLayer *L, const char *suffix, GpucDType dt,
                           GpucErr *e);
/* Row o (output channel o) of the weight as K floats: column o of a [K, N]
 * W, or row o of a [N, K] one. */
void gpuc_linear_weight_row(const Graph *g, const LinearLayer *L, int64_t o, float *row);
/* X's quantize node `op` (outputs Xq and one f32 scale per row), made once
 * per X: cache_q/cache_s per value, -1 = none. Names: "<x>.<q>",
 * "<x>.<q>scale", node "<x>.<node>". */
int gpuc_linear_quantize_rows(Graph *g, int x, GpucOp op, const char *q, const char *node, int *cache_q,
                              int *cache_s, GpucErr *e);
/* The ONNX type code of a float dtype (the `to` attribute of the new nodes). */
int gpuc_linear_onnx_float_type(GpucDType dt);
#endif
