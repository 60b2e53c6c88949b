/* Reference pooling: AveragePool, MaxPool (with Indices), GlobalAveragePool,
 * GlobalMaxPool. N-D windows over [N, C, D1..Dn]; values are read and
 * accumulated as f64 (exact for every integer type MaxPool accepts). */
#include "ref_util.h"
#include "infer_nn.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { POOL_AVG, POOL_MAX };

/* Pool every [N, C] plane. For each output position walk the K kernel taps;
 * taps in the padding are skipped (MaxPool) or only counted (AveragePool
 * with count_include_pad). idx (MaxPool Indices) may be NULL. */
static void pool_nd(const NnWindow *w, int kind, bool include_pad, bool col_major,
                    const Tensor *x, Tensor *y, Tensor *idx) {
  int nsp = w->nsp;
  int64_t HWin = ref_prod(w->in, nsp), HWout = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);
  int64_t planes = w->n * w->c_in;
  int64_t rstride[NN_MAX_SP], cstride[NN_MAX_SP], s = 1;
  for (int d = nsp - 1; d >= 0; d--) { rstride[d] = s; s *= w->in[d]; }
  s = 1;
  for (int d = 0; d < nsp; d++) { cstride[d] = s; s *= w->in[d]; }
  for (int64_t pl = 0; pl < planes; pl++) {
    int64_t o[NN_MAX_SP] = {0};
    for (int64_t p = 0; p < HWout; p++) {
      int64_t tap[NN_MAX_SP] = {0};
      double acc = kind == POOL_MAX ? -INFINITY : 0;
      int64_t best = -1, valid = 0, padded = 0;
      for (int64_t kp = 0; kp < K; kp++) {
        int64_t off = 0, coff = 0;
        bool in_x = true, in_pad = true;
        for (int d = 0; d < nsp; d++) {
          int64_t i = o[d] * w->stride[d] - w->pad_b[d] + tap[d] * w->dil[d];
          if (i < 0 || i >= w->in[d]) in_x = false;
          if (i < -w->pad_b[d] || i >= w->in[d] + w->pad_e[d]) in_pad = false;
          off += i * rstride[d];
          coff += i * cstride[d];
        }
        padded += in_pad;
        if (in_x) {
          double v = ref_ld(x, pl * HWin + off);
          valid++;
          if (kind == POOL_AVG) acc += v;
          else if (best < 0 || v > acc) { acc = v; best = col_major ? coff : off; }
        }
        for (int d = nsp - 1; d >= 0; d--) {
          if (++tap[d] < w->k[d]) break;
          tap[d] = 0;
        }
      }
      /* A window entirely in the padding (possible with dilation or
       * ceil_mode) has no value: it yields 0 (and index -1). */
      double out;
      if (kind == POOL_AVG) {
        int64_t div = include_pad ? padded : valid;
        out = div ? acc / (double)div : 0;
      } else {
        out = valid ? acc : 0;
      }
      ref_st(y, pl * HWout + p, out);
      if (idx) ((int64_t *)idx->data)[pl * HWout + p] = best < 0 ? -1 : pl * HWin + best;
      for (int d = nsp - 1; d >= 0; d--) {
        if (++o[d] < w->out[d]) break;
        o[d] = 0;
      }
    }
  }
}

/* Taps visited: N * C * outputs * kernel taps. */
static int check_work(OpCtx *c, const NnWindow *w) {
  double work = (double)w->n * (double)w->c_in * (double)ref_prod(w->out, w->nsp) *
                (double)ref_prod(w->k, w->nsp);
  if (work > NN_MAX_WORK)
    return gpuc_op_fail(c, "needs %.3g window taps, over the reference limit of %.3g", work,
                        NN_MAX_WORK);
  return 0;
}

/* NHWC MaxPool / AveragePool (passes/layout_nhwc.c): the NCHW pool
 * between two transposes. */
static int pool_nhwc(OpCtx *c, const NnWindow *w, int kind, bool include_pad) {
  static const int to_nchw[4] = GPUC_NHWC_TO_NCHW, to_nhwc[4] = GPUC_NCHW_TO_NHWC;
  Tensor xn = {0}, yn = {0}, back = {0};
  int64_t yd[4] = {w->n, w->c_out, w->out[0], w->out[1]};
  int rc = -1;
  if (gpuc_tensor_permute4(c->in[0], to_nchw, &xn, c->err)) goto done;
  gpuc_set_shape(&yn, c->out[0]->dt, 4, yd);
  if (gpuc_tensor_alloc(&yn, c->err)) goto done;
  pool_nd(w, kind, include_pad, false, &xn, &yn, NULL);
  if (gpuc_tensor_permute4(&yn, to_nhwc, &back, c->err)) goto done;
  memcpy(c->out[0]->data, back.data, gpuc_tensor_bytes(c->out[0]));
  rc = 0;
done:
  free(xn.data); free(yn.data); free(back.data);
  return rc;
}

int ref_AveragePool(OpCtx *c) {
  NnWindow w;
  if (nn_pool_window(c, &w) || check_work(c, &w)) return -1;
  bool include_pad = gpuc_attr_i(c->n, "count_include_pad", 0) == 1;
  if (nn_pool_nhwc(c)) return pool_nhwc(c, &w, POOL_AVG, include_pad);
  pool_nd(&w, POOL_AVG, include_pad, false, c->in[0], c->out[0], NULL);
  return 0;
}

int ref_MaxPool(OpCtx *c) {
  NnWindow w;
  if (nn_pool_window(c, &w) || check_work(c, &w)) return -1;
  if (nn_pool_nhwc(c)) return pool_nhwc(c, &w, POOL_MAX, false);
  bool col_major = gpuc_attr_i(c->n, "storage_order", 0) == 1;
  Tensor *idx = c->nout > 1 ? c->out[1] : NULL;
  pool_nd(&w, POOL_MAX, false, col_major, c->in[0], c->out[0], idx);
  return 0;
}

/* Reduce every [N, C] plane over all spatial dims. */
static int global_pool(OpCtx *c, int kind) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  if (gpuc_attr_i(c->n, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC) { /* [N,H,W,C] -> [N,1,1,C] */
    int64_t n = x->dims[0], hw = x->dims[1] * x->dims[2], ch = x->dims[3];
    for (int64_t b = 0; b < n; b++)
      for (int64_t k = 0; k < ch; k++) {
        double acc = 0;
        for (int64_t i = 0; i < hw; i++) acc += ref_ld(x, (b * hw + i) * ch + k);
        ref_st(y, b * ch + k, hw ? acc / (double)hw : 0);
      }
    return 0;
  }
  int64_t planes = x->dims[0] * x->dims[1], hw = ref_prod(x->dims + 2, x->rank - 2);
  for (int64_t pl = 0; pl < planes; pl++) {
    double acc = kind == POOL_MAX ? -INFINITY : 0;
    for (int64_t i = 0; i < hw; i++) {
      double v = ref_ld(x, pl * hw + i);
      if (kind == POOL_AVG) acc += v;
      else if (i == 0 || v > acc) acc = v;
    }
    if (kind == POOL_AVG) acc = hw ? acc / (double)hw : 0;
    else if (hw == 0) acc = 0;
    ref_st(y, pl, acc);
  }
  return 0;
}

int ref_GlobalAveragePool(OpCtx *c) { return global_pool(c, POOL_AVG); }
int ref_GlobalMaxPool(OpCtx *c) { return global_pool(c, POOL_MAX); }
