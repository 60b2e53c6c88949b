/* Reference kernels of the internal CNN training ops (passes/grad_rules_nn.c):
 * ConvGradInput, ConvGradWeight, MaxPoolGrad, AveragePoolGrad, BatchNormGrad.
 * N-D windows from the shared geometry (infer_nn.h). The Conv gradients of
 * f32/f64 go through im2col + GEMM (ref_conv.c); the loops below, which read
 * into and accumulate in f64 and round on store, are their fallback. */
#include "ref_conv.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>


static void load(const Tensor *t, int64_t off, int64_t n, double *dst) {
  if (t->dt == GPUC_DT_F32) {
    const float *s = (const float *)t->data + off;
    for (int64_t i = 0; i < n; i++) dst[i] = s[i];
  } else if (t->dt == GPUC_DT_F64) {
    memcpy(dst, (const double *)t->data + off, sizeof(double) * (size_t)n);
  } else {
    for (int64_t i = 0; i < n; i++) dst[i] = gpuc_get_f64(t, off + i);
  }
}

static void store(Tensor *t, int64_t off, int64_t n, const double *src) {
  if (t->dt == GPUC_DT_F32) {
    float *d = (float *)t->data + off;
    for (int64_t i = 0; i < n; i++) d[i] = (float)src[i];
  } else {
    for (int64_t i = 0; i < n; i++) gpuc_set_f64(t, off + i, src[i]);
  }
}

/* tbl[kp * P + p] = offset in an input plane of the tap kp of output
 * position p, or -1 in the padding (as the forward Conv/pool reads it). */
static int64_t *window_table(const NnWindow *w) {
  int nsp = w->nsp;
  int64_t P = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);
  int64_t *tbl = malloc(sizeof(int64_t) * (size_t)(P * K + 1));
  if (!tbl) return NULL;
  int64_t rstride[NN_MAX_SP], s = 1;
  for (int d = nsp - 1; d >= 0; d--) { rstride[d] = s; s *= w->in[d]; }
  int64_t tap[NN_MAX_SP] = {0};
  for (int64_t kp = 0; kp < K; kp++) {
    int64_t o[NN_MAX_SP] = {0};
    for (int64_t p = 0; p < P; p++) {
      int64_t off = 0;
      for (int d = 0; d < nsp && off >= 0; d++) {
        int64_t i = o[d] * w->stride[d] - w->pad_b[d] + tap[d] * w->dil[d];
        off = i < 0 || i >= w->in[d] ? -1 : off + i * rstride[d];
      }
      tbl[kp * P + p] = off;
      for (int d = nsp - 1; d >= 0; d--) {
        if (++o[d] < w->out[d]) break;
        o[d] = 0;
      }
    }
    for (int d = nsp - 1; d >= 0; d--) {
      if (++tap[d] < w->k[d]) break;
      tap[d] = 0;
    }
  }
  return tbl;
}

/* The limits every path shares; `loops` adds the whole-plane scratch of the
 * loop kernels (the fast path works in chunks). */
static int conv_check(OpCtx *c, const NnWindow *w, bool loops) {
  int nsp = w->nsp;
  double work = (double)w->n * (double)w->c_out * (double)(w->group ? w->c_in / w->group : 0) *
                (double)ref_prod(w->k, nsp) * (double)ref_prod(w->out, nsp);
  if (work > NN_MAX_WORK)
    return gpuc_op_fail(c, "needs %.3g multiply-adds, over the reference limit of %.3g", work,
                        NN_MAX_WORK);
  double bytes = 8.0 * ((double)ref_prod(w->out, nsp) * (double)ref_prod(w->k, nsp) +
                        (double)w->c_in * (double)ref_prod(w->in, nsp) +
                        (double)w->c_out * (double)ref_prod(w->out, nsp));
  if (loops && bytes > 16.0 * (double)NN_SCRATCH_BYTES)
    return gpuc_op_fail(c, "needs %.3g bytes of scratch, over the reference limit", bytes);
  return 0;
}

/* f32 / f64 with int32 tap offsets take im2col + GEMM (ref_conv.c); f16,
 * bf16 and planes past INT32_MAX elements the loops. */
static bool conv_fast(const NnWindow *w, GpucDType dt) {
  return (dt == GPUC_DT_F32 || dt == GPUC_DT_F64) && ref_prod(w->in, w->nsp) <= INT32_MAX &&
         ref_prod(w->out, w->nsp) <= INT32_MAX;
}

/* dX[n, g*Cg+ci, tbl(kp, p)] += W[g*Mg+m, ci, kp] * dY[n, g*Mg+m, p] */
int ref_conv_grad_input_loops(const NnWindow *w, const Tensor *wt, const Tensor *dyt, Tensor *dxt) {
  int nsp = w->nsp;
  int64_t HWin = ref_prod(w->in, nsp), P = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);
  int64_t Cg = w->c_in / w->group, Mg = w->c_out / w->group;
  int64_t nw = gpuc_numel(wt);
  int64_t *tbl = window_table(w);
  double *W = malloc(sizeof(double) * (size_t)(nw + 1));
  double *dy = malloc(sizeof(double) * (size_t)(w->c_out * P + 1));
  double *dx = malloc(sizeof(double) * (size_t)(w->c_in * HWin + 1));
  int rc = 0;
  if (!tbl || !W || !dy || !dx) { rc = -1; goto done; }
  load(wt, 0, nw, W);
  for (int64_t n = 0; n < w->n; n++) {
    load(dyt, n * w->c_out * P, w->c_out * P, dy);
    memset(dx, 0, sizeof(double) * (size_t)(w->c_in * HWin));
    for (int64_t g = 0; g < w->group; g++)
      for (int64_t m = 0; m < Mg; m++) {
        const double *dym = dy + (g * Mg + m) * P;
        for (int64_t ci = 0; ci < Cg; ci++) {
          double *dxc = dx + (g * Cg + ci) * HWin;
          const double *wk = W + ((g * Mg + m) * Cg + ci) * K;
          for (int64_t kp = 0; kp < K; kp++) {
            const int64_t *t = tbl + kp * P;
            double a = wk[kp];
            for (int64_t p = 0; p < P; p++)
              if (t[p] >= 0) dxc[t[p]] += a * dym[p];
          }
        }
      }
    store(dxt, n * w->c_in * HWin, w->c_in * HWin, dx);
  }
done:
  free(tbl); free(W); free(dy); free(dx);
  return rc;
}

/* dW[g*Mg+m, ci, kp] = sum_n,p dY[n, g*Mg+m, p] * X[n, g*Cg+ci, tbl(kp, p)] */
int ref_conv_grad_weight_loops(const NnWindow *w, const Tensor *xt, const Tensor *dyt, Tensor *dwt) {
  int nsp = w->nsp;
  int64_t HWin = ref_prod(w->in, nsp), P = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);
  int64_t Cg = w->c_in / w->group, Mg = w->c_out / w->group;
  int64_t nw = gpuc_numel(dwt);
  int64_t *tbl = window_table(w);
  double *dW = calloc((size_t)(nw + 1), sizeof(double));
  double *dy = malloc(sizeof(double) * (size_t)(w->c_out * P + 1));
  double *x = malloc(sizeof(double) * (size_t)(w->c_in * HWin + 1));
  int rc = 0;
  if (!tbl || !dW || !dy || !x) { rc = -1; goto done; }
  for (int64_t n = 0; n < w->n; n++) {
    load(dyt, n * w->c_out * P, w->c_out * P, dy);
    load(xt, n * w->c_in * HWin, w->c_in * HWin, x);
    for (int64_t g = 0; g < w->group; g++)
      for (int64_t m = 0; m < Mg; m++) {
        const double *dym = dy + (g * Mg + m) * P;
        for (int64_t ci = 0; ci < Cg; ci++) {
          const double *xc = x + (g * Cg + ci) * HWin;
          double *dwk = dW + ((g * Mg + m) * Cg + ci) * K;
          for (int64_t kp = 0; kp < K; kp++) {
            const int64_t *t = tbl + kp * P;
            double acc = 0;
            for (int64_t p = 0; p < P; p++)
              if (t[p] >= 0) acc += dym[p] * xc[t[p]];
            dwk[kp] += acc;
          }
        }
      }
  }
  store(dwt, 0, nw, dW);
done:
  free(tbl); free(dW); free(dy); free(x);
  return rc;
}

int ref_ConvGradInput(OpCtx *c) {
  NnWindow w;
  if (nn_conv_grad_window(c, &w)) return -1;
  const Tensor *wt = c->in[1], *dy = c->in[2];
  Tensor *dx = c->out[0];
  bool fast = conv_fast(&w, dx->dt);
  if (conv_check(c, &w, !fast)) return -1;
  int rc;
  if (!fast) rc = ref_conv_grad_input_loops(&w, wt, dy, dx);
  else if (dx->dt == GPUC_DT_F32) rc = ref_conv_grad_input_f32(&w, wt->data, dy->data, dx->data);
  else rc = ref_conv_grad_input_f64(&w, wt->data, dy->data, dx->data);
  return rc ? gpuc_op_fail(c, "out of host memory") : 0;
}

int ref_ConvGradWeight(OpCtx *c) {
  NnWindow w;
  if (nn_conv_grad_window(c, &w)) return -1;
  const Tensor *x = c->in[0], *dy = c->in[2];
  Tensor *dw = c->out[0];
  bool fast = conv_fast(&w, dw->dt);
  if (conv_check(c, &w, !fast)) return -1;
  int rc;
  if (!fast) rc = ref_conv_grad_weight_loops(&w, x, dy, dw);
  else if (dw->dt == GPUC_DT_F32) rc = ref_conv_grad_weight_f32(&w, x->data, dy->data, dw->data);
  else rc = ref_conv_grad_weight_f64(&w, x->data, dy->data, dw->data);
  return rc ? gpuc_op_fail(c, "out of host memory") : 0;
}

/* ---- pools -------------------------------------------------------------- */

enum { POOL_AVG, POOL_MAX };

/* The walk of ref_pool.c's pool_nd: for each output position, the taps in
 * X (padding skipped; counted for count_include_pad). MaxPool: dY goes to
 * the first maximum of the window; AveragePool: dY / divisor to each tap
 * in X. A window with no tap in X gets nothing. */
static int pool_grad(OpCtx *c, int kind) {
  const Tensor *xt = c->in[0], *dyt = c->in[1];
  Tensor *dxt = c->out[0];
  NnWindow w;
  OpCtx sub = *c;
  sub.nin = 1;
  if (nn_pool_window(&sub, &w)) return -1;
  int nsp = w.nsp;
  int64_t HWin = ref_prod(w.in, nsp), HWout = ref_prod(w.out, nsp), K = ref_prod(w.k, nsp);
  if ((double)w.n * (double)w.c_in * (double)HWout * (double)K > NN_MAX_WORK)
    return gpuc_op_fail(c, "too many window taps for the reference");
  if (gpuc_numel(dyt) != w.n * w.c_in * HWout) return gpuc_op_fail(c, "dY does not match the window");
  bool include_pad = gpuc_attr_i(c->n, "count_include_pad", 0) == 1;
  int64_t rstride[NN_MAX_SP], s = 1;
  for (int d = nsp - 1; d >= 0; d--) { rstride[d] = s; s *= w.in[d]; }
  double *x = malloc(sizeof(double) * (size_t)(HWin + 1)), *dx = malloc(sizeof(double) * (size_t)(HWin + 1));
  double *dy = malloc(sizeof(double) * (size_t)(HWout + 1));
  int64_t *offs = malloc(sizeof(int64_t) * (size_t)(K + 1));
  if (!x || !dx || !dy || !offs) {
    free(x); free(dx); free(dy); free(offs);
    return gpuc_op_fail(c, "out of host memory");
  }
  for (int64_t pl = 0; pl < w.n * w.c_in; pl++) {
    if (kind == POOL_MAX) load(xt, pl * HWin, HWin, x);
    load(dyt, pl * HWout, HWout, dy);
    memset(dx, 0, sizeof(double) * (size_t)HWin);
    int64_t o[NN_MAX_SP] = {0};
    for (int64_t p = 0; p < HWout; p++) {
      int64_t tap[NN_MAX_SP] = {0}, valid = 0, padded = 0, best = -1;
      double acc = -INFINITY;
      for (int64_t kp = 0; kp < K; kp++) {
        int64_t off = 0;
        bool in_x = true, in_pad = true;
        for (int d = 0; d < nsp; d++) {
          int64_t i = o[d] * w.stride[d] - w.pad_b[d] + tap[d] * w.dil[d];
          if (i < 0 || i >= w.in[d]) in_x = false;
          if (i < -w.pad_b[d] || i >= w.in[d] + w.pad_e[d]) in_pad = false;
          off += i * rstride[d];
        }
        padded += in_pad;
        if (in_x) {
          offs[valid++] = off;
          if (kind == POOL_MAX && (best < 0 || x[off] > acc)) { acc = x[off]; best = off; }
        }
        for (int d = nsp - 1; d >= 0; d--) {
          if (++tap[d] < w.k[d]) break;
          tap[d] = 0;
        }
      }
      if (kind == POOL_MAX) {
        if (best >= 0) dx[best] += dy[p];
      } else {
        int64_t div = include_pad ? padded : valid;
        if (div)
          for (int64_t j = 0; j < valid; j++) dx[offs[j]] += dy[p] / (double)div;
      }
      for (int d = nsp - 1; d >= 0; d--) {
        if (++o[d] < w.out[d]) break;
        o[d] = 0;
      }
    }
    store(dxt, pl * HWin, HWin, dx);
  }
  free(x); free(dx); free(dy); free(offs);
  return 0;
}

int ref_MaxPoolGrad(OpCtx *c) { return pool_grad(c, POOL_MAX); }
int ref_AveragePoolGrad(OpCtx *c) { return pool_grad(c, POOL_AVG); }

/* ---- BatchNormalization ------------------------------------------------- */

/* Per channel, over M = N * S values: inv = 1 / sqrt(var + eps),
 * xhat = (x - mean) * inv, dB = sum dy, dscale = sum dy * xhat.
 * Batch statistics (no mean/var inputs):
 *   dx = scale * inv / M * (M * dy - dB - xhat * dscale)
 * given statistics (inference mode): dx = scale * inv * dy. */
int ref_BatchNormGrad(OpCtx *c) {
  const Tensor *xt = c->in[0], *sc = c->in[1], *dyt = c->in[2];
  bool given = gpuc_has_in(c, 3) && gpuc_has_in(c, 4);
  Tensor *dxt = c->out[0], *dst = c->nout > 1 ? c->out[1] : NULL, *dbt = c->nout > 2 ? c->out[2] : NULL;
  double eps = gpuc_attr_f(c->n, "epsilon", 1e-5f);
  int64_t N = xt->dims[0], C = xt->dims[1], S = ref_prod(xt->dims + 2, xt->rank - 2);
  if (gpuc_numel(sc) != C || gpuc_numel(dyt) != gpuc_numel(xt))
    return gpuc_op_fail(c, "scale or dY does not match X");
  double *x = malloc(sizeof(double) * (size_t)(S + 1)), *dy = malloc(sizeof(double) * (size_t)(S + 1));
  double *st = malloc(sizeof(double) * (size_t)(4 * C + 1));
  if (!x || !dy || !st) { free(x); free(dy); free(st); return gpuc_op_fail(c, "out of host memory"); }
  double *mean = st, *inv = st + C, *dsc = st + 2 * C, *db = st + 3 * C;
  double M = (double)N * (double)S;
  for (int64_t ch = 0; ch < C; ch++) {
    double mu = 0, var = 0;
    if (given) {
      mu = gpuc_get_f64(c->in[3], ch);
      var = gpuc_get_f64(c->in[4], ch);
    } else {
      for (int64_t n = 0; n < N; n++) {
        load(xt, (n * C + ch) * S, S, x);
        for (int64_t s = 0; s < S; s++) mu += x[s];
      }
      mu = M > 0 ? mu / M : 0;
      for (int64_t n = 0; n < N; n++) {
        load(xt, (n * C + ch) * S, S, x);
        for (int64_t s = 0; s < S; s++) var += (x[s] - mu) * (x[s] - mu);
      }
      var = M > 0 ? var / M : 0;
    }
    mean[ch] = mu;
    inv[ch] = 1.0 / sqrt(var + eps);
    double sb = 0, ss = 0;
    for (int64_t n = 0; n < N; n++) {
      load(xt, (n * C + ch) * S, S, x);
      load(dyt, (n * C + ch) * S, S, dy);
      for (int64_t s = 0; s < S; s++) {
        sb += dy[s];
        ss += dy[s] * (x[s] - mu) * inv[ch];
      }
    }
    db[ch] = sb;
    dsc[ch] = ss;
    double g = gpuc_get_f64(sc, ch) * inv[ch];
    for (int64_t n = 0; n < N; n++) {
      load(xt, (n * C + ch) * S, S, x);
      load(dyt, (n * C + ch) * S, S, dy);
      for (int64_t s = 0; s < S; s++) {
        if (given) x[s] = g * dy[s];
        else x[s] = g / M * (M * dy[s] - sb - (x[s] - mu) * inv[ch] * ss);
      }
      store(dxt, (n * C + ch) * S, S, x);
    }
  }
  if (dst) store(dst, 0, C, dsc);
  if (dbt) store(dbt, 0, C, db);
  free(x); free(dy); free(st);
  return 0;
}
