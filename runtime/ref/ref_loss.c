/* Reference kernels for NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss. Everything is computed in f64 (so f64 inputs
 * keep their precision; f32/f16/bf16 are rounded once, on store).
 *
 * Layout: the scores/input [N, C, d1..dk] are seen as [N, C, D] with
 * D = d1*..*dk (D = 1 for [N, C]); labels [N, d1..dk] as [N, D]. */
#include "ref_util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct LossShape {
  int64_t N, C, D;
} LossShape;

static int loss_shape(OpCtx *c, LossShape *s) {
  const Tensor *x = c->in[0], *t = c->in[1];
  if (x->rank < 2) return gpuc_op_fail(c, "input must have rank >= 2");
  s->N = x->dims[0];
  s->C = x->dims[1];
  /* with C = 0 the input is empty whatever N*D is, so N*D is checked for
   * overflow rather than bounded by the input's size */
  s->D = gpuc_shape_numel(x->rank - 2, x->dims + 2);
  if (s->D < 0 || (s->D > 0 && s->N > INT64_MAX / s->D))
    return gpuc_op_fail(c, "input dims overflow");
  /* inference checked the dims one by one; this guards the flat indexing */
  if (gpuc_numel(t) != s->N * s->D) return gpuc_op_fail(c, "labels do not match the input");
  if (gpuc_has_in(c, 2) && gpuc_numel(c->in[2]) != s->C)
    return gpuc_op_fail(c, "weights do not have C = %lld elements", (long long)s->C);
  return 0;
}

/* The NLL part both losses share. For every (n, d) whose label is not
 * ignore_index:
 *   loss[n, d] = -(x[n, label, d] - shift[n*D + d]) * w[label]
 * (shift == NULL: no shift, x already holds log-probabilities; w = 1 without
 * weights). Ignored entries have loss 0 and no weight. Reductions:
 *   none: loss[N, d1..dk];  sum: sum(loss);  mean: sum(loss) / sum(w) over the
 *   entries not ignored (their count without weights; NaN if there are none,
 *   as 0/0 is in the ONNX reference). */
static int nll_reduce(OpCtx *c, const LossShape *s, const double *shift) {
  const Tensor *x = c->in[0], *t = c->in[1];
  const Tensor *w = gpuc_has_in(c, 2) ? c->in[2] : NULL;
  Tensor *out = c->out[0];
  const char *red = gpuc_attr_s(c->n, "reduction", "mean");
  bool none = !strcmp(red, "none"), mean = !strcmp(red, "mean");
  const Attr *ii = gpuc_attr(c->n, "ignore_index");
  bool has_ii = ii && ii->kind == GPUC_ATTR_INT;
  int64_t ignore = has_ii ? ii->i : 0;
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < s->N; n++) {
    for (int64_t d = 0; d < s->D; d++) {
      int64_t j = n * s->D + d, label = gpuc_get_i64(t, j);
      double loss = 0;
      if (!(has_ii && label == ignore)) {
        if (label < 0 || label >= s->C)
          return gpuc_op_fail(c, "label %lld at position %lld is outside [0, %lld) and is not "
                              "ignore_index", (long long)label, (long long)j, (long long)s->C);
        double wv = w ? gpuc_get_f64(w, label) : 1.0;
        double logp = gpuc_get_f64(x, (n * s->C + label) * s->D + d) - (shift ? shift[j] : 0);
        loss = -logp * wv;
        wsum += wv;
      }
      if (none) gpuc_set_f64(out, j, loss);
      else sum += loss;
    }
  }
  if (!none) gpuc_set_f64(out, 0, mean ? sum / wsum : sum);
  return 0;
}

int ref_NegativeLogLikelihoodLoss(OpCtx *c) {
  LossShape s;
  if (loss_shape(c, &s)) return -1;
  return nll_reduce(c, &s, NULL);
}

/* log_prob = LogSoftmax(scores, axis 1); loss = NLL(log_prob, labels).
 * shift[n, d] = max_c x + log(sum_c exp(x - max)), so that
 * log_prob[n, c, d] = x[n, c, d] - shift[n, d]. */
int ref_SoftmaxCrossEntropyLoss(OpCtx *c) {
  const Tensor *x = c->in[0];
  LossShape s;
  if (loss_shape(c, &s)) return -1;
  int64_t nd = s.N * s.D;
  double *shift = malloc(sizeof *shift * (size_t)(nd ? nd : 1));
  if (!shift) return gpuc_op_fail(c, "out of host memory");
  for (int64_t n = 0; n < s.N; n++) {
    for (int64_t d = 0; d < s.D; d++) {
      int64_t base = n * s.C * s.D + d;
      double mx = -INFINITY, acc = 0;
      for (int64_t k = 0; k < s.C; k++) {
        double v = gpuc_get_f64(x, base + k * s.D);
        if (v > mx || isnan(v)) mx = v;
      }
      if (isinf(mx)) mx = 0; /* all -inf (or +inf present): exp() gives the right limits */
      for (int64_t k = 0; k < s.C; k++) acc += exp(gpuc_get_f64(x, base + k * s.D) - mx);
      shift[n * s.D + d] = mx + log(acc);
    }
  }
  Tensor *lp = c->nout > 1 ? c->out[1] : NULL;
  if (lp) {
    for (int64_t n = 0; n < s.N; n++)
      for (int64_t k = 0; k < s.C; k++)
        for (int64_t d = 0; d < s.D; d++) {
          int64_t i = (n * s.C + k) * s.D + d;
          gpuc_set_f64(lp, i, gpuc_get_f64(x, i) - shift[n * s.D + d]);
        }
  }
  int rc = nll_reduce(c, &s, shift);
  free(shift);
  return rc;
}
