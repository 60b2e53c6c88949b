/* Reference kernels of Softmax, LogSoftmax and Hardmax. The input is viewed
 * as [outer, n, inner] (gpuc_softmax_view: 2-D coercion before opset 13,
 * one axis from 13) and each of the outer*inner rows of n elements, stride
 * inner, is processed on its own, in double. */
#include "ref_util.h"
#include "infer_reduce.h"
#include <math.h>
#include <stdlib.h>

typedef enum { SM_SOFTMAX, SM_LOGSOFTMAX, SM_HARDMAX } SmOp;

/* row[0..n) in place: exp(x - max) / sum, x - max - log(sum), or one-hot of
 * the first maximum (a NaN counts as the maximum, as in numpy's argmax).
 * NaNs propagate through max/sum like the formula does. */
static void softmax_row(SmOp op, double *row, int64_t n) {
  if (op == SM_HARDMAX) {
    int64_t best = 0;
    for (int64_t k = 1; k < n; k++)
      if (row[k] > row[best] || (isnan(row[k]) && !isnan(row[best]))) best = k;
    for (int64_t k = 0; k < n; k++) row[k] = k == best;
    return;
  }
  double mx = -INFINITY, sum = 0;
  for (int64_t k = 0; k < n; k++)
    if (row[k] > mx || isnan(row[k])) mx = row[k];
  for (int64_t k = 0; k < n; k++) sum += exp(row[k] - mx);
  if (op == SM_SOFTMAX)
    for (int64_t k = 0; k < n; k++) row[k] = exp(row[k] - mx) / sum;
  else {
    double ls = log(sum);
    for (int64_t k = 0; k < n; k++) row[k] = row[k] - mx - ls;
  }
}

static int ref_softmax(OpCtx *c, SmOp op) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int64_t outer, n, inner;
  if (gpuc_softmax_view(c, &outer, &n, &inner)) return -1;
  double *row = malloc(sizeof *row * (size_t)(n ? n : 1));
  if (!row) return gpuc_op_fail(c, "out of host memory");
  bool f32 = x->dt == GPUC_DT_F32;
  const float *xf = x->data;
  float *yf = y->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * n * inner + i;
      for (int64_t k = 0; k < n; k++)
        row[k] = f32 ? xf[base + k * inner] : gpuc_get_f64(x, base + k * inner);
      softmax_row(op, row, n);
      for (int64_t k = 0; k < n; k++) {
        if (f32) yf[base + k * inner] = (float)row[k];
        else gpuc_set_f64(y, base + k * inner, row[k]);
      }
    }
  free(row);
  return 0;
}

int ref_Softmax(OpCtx *c) { return ref_softmax(c, SM_SOFTMAX); }
int ref_LogSoftmax(OpCtx *c) { return ref_softmax(c, SM_LOGSOFTMAX); }
int ref_Hardmax(OpCtx *c) { return ref_softmax(c, SM_HARDMAX); }
