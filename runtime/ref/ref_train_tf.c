/* Reference kernels of the internal training ops of the transformer rules
 * (passes/grad_rules_tf.c) and of training-mode Dropout (DropoutTrain). */
#include "ref_util.h"
#include "dropout_rng.h"
#include <stdlib.h>
#include <string.h>

/* out = zeros(shape); out[o, idx[n], i] += dy[o, n, i]. Accumulated in f64
 * (then stored), indices checked first. */
int ref_GatherGrad(OpCtx *c) {
  const Tensor *dy = c->in[0], *ind = c->in[1];
  Tensor *out = c->out[0];
  int axis;
  if (gpuc_norm_axis(c, gpuc_attr_i(c->n, "axis", 0), out->rank, &axis)) return -1;
  int64_t D = out->dims[axis], N = gpuc_numel(ind);
  int64_t outer = gpuc_shape_numel(axis, out->dims);
  int64_t inner = gpuc_shape_numel(out->rank - axis - 1, out->dims + axis + 1);
  if (gpuc_numel(dy) != outer * N * inner) return gpuc_op_fail(c, "dy does not match indices and shape");
  for (int64_t n = 0; n < N; n++) {
    int64_t v = gpuc_get_i64(ind, n);
    if (v < -D || v >= D)
      return gpuc_op_fail(c, "index %lld (element %lld of the indices) out of range [%lld, %lld)",
                          (long long)v, (long long)n, (long long)-D, (long long)D);
  }
  int64_t total = gpuc_numel(out);
  double *acc = calloc((size_t)(total > 0 ? total : 1), sizeof(double));
  if (!acc) return gpuc_op_fail(c, "out of host memory");
  for (int64_t o = 0; o < outer; o++)
    for (int64_t n = 0; n < N; n++) {
      int64_t v = gpuc_get_i64(ind, n);
      if (v < 0) v += D;
      double *dst = acc + (o * D + v) * inner;
      int64_t src = (o * N + n) * inner;
      for (int64_t i = 0; i < inner; i++) dst[i] += gpuc_get_f64(dy, src + i);
    }
  for (int64_t i = 0; i < total; i++) gpuc_set_f64(out, i, acc[i]);
  free(acc);
  return 0;
}

/* DropoutTrain(X, counter = (seed, step)) -> Y, mask?: element i kept when
 * its draw (ir/dropout_rng.h, the generated kernel's own text) passes the
 * ratio, then scaled by 1 / (1 - ratio). The scale is rounded to float for
 * every dtype but f64, as the GPU kernel's literal: an f32 product of two
 * floats is exact in double, so Y is bit-identical to the kernel's. */
int ref_DropoutTrain(OpCtx *c) {
  const Tensor *x = c->in[0], *k = c->in[1];
  Tensor *y = c->out[0], *mask = c->nout > 1 ? c->out[1] : NULL; /* either may be unused */
  if (gpuc_numel(k) != 2) return gpuc_op_fail(c, "counter must hold 2 values (seed, step)");
  double ratio = gpuc_attr_f(c->n, "ratio", 0.5f), scale = gpuc_dropout_scale(ratio);
  if (x->dt != GPUC_DT_F64) scale = (float)scale;
  uint32_t thr = gpuc_dropout_threshold(ratio);
  unsigned long long key = gpuc_dropout_key((uint64_t)gpuc_get_i64(k, 0), (uint64_t)gpuc_get_i64(k, 1),
                                            (uint64_t)gpuc_attr_i(c->n, "salt", 0));
  int64_t n = gpuc_numel(x);
  for (int64_t i = 0; i < n; i++) {
    bool keep = gpuc_dropout_bits(key, (uint64_t)i) >= thr;
    if (y) gpuc_set_f64(y, i, keep ? gpuc_get_f64(x, i) * scale : 0.0);
    if (mask) gpuc_set_i64(mask, i, keep);
  }
  return 0;
}
