/* Reference Conv and ConvTranspose: im2col / col2im around ref_sgemm
 * (ref_dgemm for f64), per batch item and group, N-D spatial.
 *
 * Conv, for each image n and group g:
 *   col[Cg*K, P]  = taps of X_g at every output position (0 in the padding)
 *   Y_g[Mg, P]    = W_g[Mg, Cg*K] x col
 * ConvTranspose, for each n and g:
 *   col[Mg*K, Q]  = W_g[Cg, Mg*K]^T x X_g[Cg, Q]
 *   Y_g          += col scattered to the output positions of each tap
 * with K the kernel taps, P/Q the output/input positions. Positions are
 * processed in chunks so col stays under NN_SCRATCH_BYTES. A table maps
 * (tap, position) to the offset of the element it touches, or -1 for a
 * tap in the padding; it is shared by every channel, image and group.
 * The Conv gradients (ConvGradInput / ConvGradWeight, ref_conv.h) reuse the
 * same table, im2col (gather) and col2im (scatter). */
#include "ref_conv.h"
#include "conv_act.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* For grid positions [p0, p0 + np) (flattened over `grid`) and each kernel
 * tap kp: tbl[kp * np + j] = flattened offset in `target` of
 * pos * stride - pad_b + tap * dil, or -1 when outside target. Conv walks
 * the output grid into the input; ConvTranspose the input into the output.
 * Positions are walked in runs along the last dim, whose inner loop is
 * branch-light. */
static void tap_table(const NnWindow *w, const int64_t *grid, const int64_t *target, int64_t p0,
                      int64_t np, int32_t *tbl) {
  int nsp = w->nsp, L = nsp - 1;
  int64_t K = ref_prod(w->k, nsp), tstride[NN_MAX_SP], tap[NN_MAX_SP] = {0};
  int64_t s = 1;
  for (int d = L; d >= 0; d--) { tstride[d] = s; s *= target[d]; }
  int64_t sL = w->stride[L], lim = target[L];
  for (int64_t kp = 0; kp < K; kp++) {
    int32_t *dst = tbl + kp * np;
    int64_t pos[NN_MAX_SP], rem = p0;
    for (int d = L; d >= 0; d--) { pos[d] = rem % grid[d]; rem /= grid[d]; }
    for (int64_t j = 0; j < np;) {
      int64_t run = grid[L] - pos[L] < np - j ? grid[L] - pos[L] : np - j;
      int64_t outer = 0;
      for (int d = 0; d < L && outer >= 0; d++) {
        int64_t t = pos[d] * w->stride[d] - w->pad_b[d] + tap[d] * w->dil[d];
        outer = t < 0 || t >= target[d] ? -1 : outer + t * tstride[d];
      }
      if (outer < 0) {
        for (int64_t r = 0; r < run; r++) dst[j + r] = -1;
      } else {
        int64_t t0 = pos[L] * sL - w->pad_b[L] + tap[L] * w->dil[L];
        for (int64_t r = 0; r < run; r++) {
          int64_t t = t0 + r * sL;
          dst[j + r] = t >= 0 && t < lim ? (int32_t)(outer + t) : -1;
        }
      }
      j += run;
      pos[L] += run;
      for (int d = L; d > 0 && pos[d] >= grid[d]; d--) { /* next row */
        pos[d] = 0;
        pos[d - 1]++;
      }
    }
    for (int d = L; d >= 0; d--) { /* next tap */
      if (++tap[d] < w->k[d]) break;
      tap[d] = 0;
    }
  }
}

/* Positions per chunk so that `rows` rows of T stay within the budget. */
static int64_t chunk_len(int64_t rows, int64_t total, size_t elem) {
  if (rows <= 0) return total > 0 ? total : 1;
  int64_t c = NN_SCRATCH_BYTES / (rows * (int64_t)elem);
  if (c < 1) c = 1;
  return c < total ? c : total;
}

/* True for a 1x1 window with unit strides and no padding: col == X. */
static bool is_pointwise(const NnWindow *w) {
  for (int d = 0; d < w->nsp; d++)
    if (w->k[d] != 1 || w->stride[d] != 1 || w->pad_b[d] || w->pad_e[d]) return false;
  return true;
}

/* im2col: col[r * K + kp, j] = src[r, tbl[kp, j]] (0 in the padding), for
 * `rows` planes of src of `plane` elements; col is [rows * K, np]. */
#define DEFINE_GATHER(NAME, T)                                                               \
  static void NAME(const T *src, int64_t plane, int64_t rows, int64_t K, const int32_t *tbl, \
                   int64_t np, T *col) {                                                     \
    for (int64_t r = 0; r < rows; r++)                                                       \
      for (int64_t kp = 0; kp < K; kp++) {                                                   \
        T *d = col + (r * K + kp) * np;                                                      \
        const int32_t *t = tbl + kp * np;                                                    \
        const T *sr = src + r * plane;                                                       \
        for (int64_t j = 0; j < np; j++) d[j] = t[j] >= 0 ? sr[t[j]] : 0;                    \
      }                                                                                      \
  }

/* col2im, the adjoint: dst[r, tbl[kp, j]] += col[r * K + kp, j]. */
#define DEFINE_SCATTER(NAME, T)                                                              \
  static void NAME(const T *col, int64_t rows, int64_t K, const int32_t *tbl, int64_t np,    \
                   T *dst, int64_t plane) {                                                  \
    for (int64_t r = 0; r < rows; r++)                                                       \
      for (int64_t kp = 0; kp < K; kp++) {                                                   \
        const T *s = col + (r * K + kp) * np;                                                \
        const int32_t *t = tbl + kp * np;                                                    \
        T *dr = dst + r * plane;                                                             \
        for (int64_t j = 0; j < np; j++)                                                     \
          if (t[j] >= 0) dr[t[j]] += s[j];                                                   \
      }                                                                                      \
  }

DEFINE_GATHER(gather_f32, float)
DEFINE_GATHER(gather_f64, double)
DEFINE_SCATTER(scatter_f32, float)
DEFINE_SCATTER(scatter_f64, double)

/* The chunked col buffer every kernel below walks a grid of P positions
 * with: `chunk` positions per pass, a tap table for them and col[rows,
 * chunk] (rows = channels x taps). A direct (pointwise) window needs
 * neither: the whole grid is one chunk read in place. */
typedef struct ColBuf { int64_t chunk; int32_t *tbl; void *col; } ColBuf;

static int colbuf_init(ColBuf *cb, bool direct, int64_t rows, int64_t K, int64_t P, size_t es) {
  cb->chunk = direct ? P : chunk_len(rows, P, es);
  cb->tbl = NULL;
  cb->col = NULL;
  if (direct) return 0;
  cb->tbl = malloc(sizeof *cb->tbl * (size_t)(K * cb->chunk + 1));
  cb->col = malloc(es * (size_t)(rows * cb->chunk + 1));
  return cb->tbl && cb->col ? 0 : -1;
}

static void colbuf_free(ColBuf *cb) {
  free(cb->tbl);
  free(cb->col);
}

/* y[n, m, :] += b[m] */
#define DEFINE_ADD_BIAS(NAME, T)                                                             \
  static void NAME(const NnWindow *w, const T *b, T *y, int64_t HWout) {                     \
    for (int64_t n = 0; n < w->n; n++)                                                       \
      for (int64_t m = 0; m < w->c_out; m++) {                                               \
        T *ym = y + (n * w->c_out + m) * HWout;                                              \
        for (int64_t j = 0; j < HWout; j++) ym[j] += b[m];                                   \
      }                                                                                      \
  }
DEFINE_ADD_BIAS(add_bias_f32, float)
DEFINE_ADD_BIAS(add_bias_f64, double)

#define DEFINE_CONV(NAME, T, GEMM, GATHER, ADD_BIAS)                                         \
  static int NAME(const NnWindow *w, const T *x, const T *wt, const T *b, T *y) {            \
    int nsp = w->nsp;                                                                        \
    int64_t HWin = ref_prod(w->in, nsp), HWout = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);         \
    int64_t Cg = w->c_in / w->group, Mg = w->c_out / w->group, CK = Cg * K;                  \
    bool direct = is_pointwise(w);                                                           \
    ColBuf cb;                                                                               \
    int rc = CK == 0 ? 0 : colbuf_init(&cb, direct, CK, K, HWout, sizeof(T));                \
    /* no input channels: the output is the bias */                                          \
    for (int64_t p0 = 0; CK > 0 && p0 < HWout && !rc; p0 += cb.chunk) {                      \
      int64_t np = HWout - p0 < cb.chunk ? HWout - p0 : cb.chunk;                            \
      if (!direct) tap_table(w, w->out, w->in, p0, np, cb.tbl);                              \
      for (int64_t n = 0; n < w->n && !rc; n++)                                              \
        for (int64_t g = 0; g < w->group && !rc; g++) {                                      \
          const T *xg = x + (n * w->c_in + g * Cg) * HWin, *B = xg + p0;                     \
          int64_t ldb = HWin;                                                                \
          if (!direct) {                                                                     \
            GATHER(xg, HWin, Cg, K, cb.tbl, np, cb.col);                                     \
            B = cb.col;                                                                      \
            ldb = np;                                                                        \
          }                                                                                  \
          rc = GEMM(false, false, Mg, np, CK, 1, wt + g * Mg * CK, CK, B, ldb, 0,            \
                    y + (n * w->c_out + g * Mg) * HWout + p0, HWout);                        \
        }                                                                                    \
    }                                                                                        \
    if (CK > 0) colbuf_free(&cb);                                                            \
    if (!rc && b) ADD_BIAS(w, b, y, HWout);                                                  \
    return rc;                                                                               \
  }

DEFINE_CONV(conv_f32, float, ref_sgemm, gather_f32, add_bias_f32)
DEFINE_CONV(conv_f64, double, ref_dgemm, gather_f64, add_bias_f64)

/* y must be zeroed by the caller. */
#define DEFINE_CONVT(NAME, T, GEMM, SCATTER, ADD_BIAS)                                       \
  static int NAME(const NnWindow *w, const T *x, const T *wt, const T *b, T *y) {            \
    int nsp = w->nsp;                                                                        \
    int64_t HWin = ref_prod(w->in, nsp), HWout = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);         \
    int64_t Cg = w->c_in / w->group, Mg = w->c_out / w->group, MK = Mg * K;                  \
    ColBuf cb;                                                                               \
    int rc = colbuf_init(&cb, false, MK, K, HWin, sizeof(T));                                \
    for (int64_t p0 = 0; p0 < HWin && !rc; p0 += cb.chunk) {                                 \
      int64_t np = HWin - p0 < cb.chunk ? HWin - p0 : cb.chunk;                              \
      tap_table(w, w->in, w->out, p0, np, cb.tbl);                                           \
      for (int64_t n = 0; n < w->n && !rc; n++)                                              \
        for (int64_t g = 0; g < w->group && !rc; g++) {                                      \
          const T *xg = x + (n * w->c_in + g * Cg) * HWin;                                   \
          rc = GEMM(true, false, MK, np, Cg, 1, wt + g * Cg * MK, MK, xg + p0, HWin, 0,      \
                    cb.col, np);                                                             \
          if (!rc) SCATTER(cb.col, Mg, K, cb.tbl, np, y + (n * w->c_out + g * Mg) * HWout, HWout); \
        }                                                                                    \
    }                                                                                        \
    colbuf_free(&cb);                                                                        \
    if (!rc && b) ADD_BIAS(w, b, y, HWout);                                                  \
    return rc;                                                                               \
  }

DEFINE_CONVT(convt_f32, float, ref_sgemm, scatter_f32, add_bias_f32)
DEFINE_CONVT(convt_f64, double, ref_dgemm, scatter_f64, add_bias_f64)

/* ---- Conv gradients (ConvGradInput / ConvGradWeight, see ref_conv.h) ----
 * The same chunks and tap table as the forward Conv (output grid walked
 * into the input). A pointwise window needs no col: X / dX are read and
 * written in place. */

/* dX_g[Cg, in..] = col2im(W_g[Mg, CK]^T x dY_g[Mg, P]), per image and group. */
#define DEFINE_CONV_GRAD_X(NAME, T, GEMM, SCATTER)                                           \
  int NAME(const NnWindow *w, const T *wt, const T *dy, T *dx) {                             \
    int nsp = w->nsp;                                                                        \
    int64_t HWin = ref_prod(w->in, nsp), P = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);             \
    int64_t Cg = w->c_in / w->group, Mg = w->c_out / w->group, CK = Cg * K;                  \
    memset(dx, 0, sizeof(T) * (size_t)(w->n * w->c_in * HWin));                              \
    if (CK == 0 || Mg == 0 || P == 0) return 0;                                              \
    bool direct = is_pointwise(w); /* then P == HWin and col == dX_g */                      \
    ColBuf cb;                                                                               \
    int rc = colbuf_init(&cb, direct, CK, K, P, sizeof(T));                                  \
    for (int64_t p0 = 0; p0 < P && !rc; p0 += cb.chunk) {                                    \
      int64_t np = P - p0 < cb.chunk ? P - p0 : cb.chunk;                                    \
      if (!direct) tap_table(w, w->out, w->in, p0, np, cb.tbl);                              \
      for (int64_t n = 0; n < w->n && !rc; n++)                                              \
        for (int64_t g = 0; g < w->group && !rc; g++) {                                      \
          const T *dyg = dy + (n * w->c_out + g * Mg) * P + p0;                              \
          T *dxg = dx + (n * w->c_in + g * Cg) * HWin;                                       \
          const T *wg = wt + g * Mg * CK;                                                    \
          if (direct) {                                                                      \
            rc = GEMM(true, false, CK, np, Mg, 1, wg, CK, dyg, P, 0, dxg + p0, HWin);        \
          } else {                                                                           \
            rc = GEMM(true, false, CK, np, Mg, 1, wg, CK, dyg, P, 0, cb.col, np);            \
            if (!rc) SCATTER(cb.col, Cg, K, cb.tbl, np, dxg, HWin);                          \
          }                                                                                  \
        }                                                                                    \
    }                                                                                        \
    colbuf_free(&cb);                                                                        \
    return rc;                                                                               \
  }

/* dW_g[Mg, CK] += dY_g[Mg, np] x col(X_g)[CK, np]^T over images and chunks. */
#define DEFINE_CONV_GRAD_W(NAME, T, GEMM, GATHER)                                            \
  int NAME(const NnWindow *w, const T *x, const T *dy, T *dw) {                              \
    int nsp = w->nsp;                                                                        \
    int64_t HWin = ref_prod(w->in, nsp), P = ref_prod(w->out, nsp), K = ref_prod(w->k, nsp);             \
    int64_t Cg = w->c_in / w->group, Mg = w->c_out / w->group, CK = Cg * K;                  \
    memset(dw, 0, sizeof(T) * (size_t)(w->c_out * CK));                                      \
    if (CK == 0 || Mg == 0 || P == 0) return 0;                                              \
    bool direct = is_pointwise(w);                                                           \
    ColBuf cb;                                                                               \
    int rc = colbuf_init(&cb, direct, CK, K, P, sizeof(T));                                  \
    for (int64_t p0 = 0; p0 < P && !rc; p0 += cb.chunk) {                                    \
      int64_t np = P - p0 < cb.chunk ? P - p0 : cb.chunk;                                    \
      if (!direct) tap_table(w, w->out, w->in, p0, np, cb.tbl);                              \
      for (int64_t n = 0; n < w->n && !rc; n++)                                              \
        for (int64_t g = 0; g < w->group && !rc; g++) {                                      \
          const T *xg = x + (n * w->c_in + g * Cg) * HWin, *B = xg + p0;                     \
          int64_t ldb = HWin;                                                                \
          if (!direct) {                                                                     \
            GATHER(xg, HWin, Cg, K, cb.tbl, np, cb.col);                                     \
            B = cb.col;                                                                      \
            ldb = np;                                                                        \
          }                                                                                  \
          rc = GEMM(false, true, Mg, CK, np, 1, dy + (n * w->c_out + g * Mg) * P + p0, P, B, \
                    ldb, 1, dw + g * Mg * CK, CK);                                           \
        }                                                                                    \
    }                                                                                        \
    colbuf_free(&cb);                                                                        \
    return rc;                                                                               \
  }

DEFINE_CONV_GRAD_X(ref_conv_grad_input_f32, float, ref_sgemm, scatter_f32)
DEFINE_CONV_GRAD_X(ref_conv_grad_input_f64, double, ref_dgemm, scatter_f64)
DEFINE_CONV_GRAD_W(ref_conv_grad_weight_f32, float, ref_sgemm, gather_f32)
DEFINE_CONV_GRAD_W(ref_conv_grad_weight_f64, double, ref_dgemm, gather_f64)

/* Dispatch on dtype; f16/bf16 go through f32 copies. */
static int run_conv(OpCtx *c, const NnWindow *w, bool transpose) {
  const Tensor *x = c->in[0], *wt = c->in[1];
  const Tensor *b = gpuc_has_in(c, 2) ? c->in[2] : NULL;
  Tensor *y = c->out[0];
  /* tap tables hold offsets as int32 */
  if (ref_prod(w->in, w->nsp) > INT32_MAX || ref_prod(w->out, w->nsp) > INT32_MAX)
    return gpuc_op_fail(c, "spatial size too large for the reference kernel");
  if (gpuc_numel(y) == 0) return 0;
  /* one multiply-add per (output or input position, channel pair, tap) */
  double work = (double)w->n * (double)w->c_out * (double)(w->c_in / w->group) *
                (double)ref_prod(w->k, w->nsp) * (double)ref_prod(transpose ? w->in : w->out, w->nsp);
  if (work > NN_MAX_WORK)
    return gpuc_op_fail(c, "needs %.3g multiply-adds, over the reference limit of %.3g", work,
                        NN_MAX_WORK);
  int rc;
  if (x->dt == GPUC_DT_F32) {
    rc = (transpose ? convt_f32 : conv_f32)(w, x->data, wt->data, b ? b->data : NULL, y->data);
  } else if (x->dt == GPUC_DT_F64) {
    rc = (transpose ? convt_f64 : conv_f64)(w, x->data, wt->data, b ? b->data : NULL, y->data);
  } else {
    float *xf = gpuc_to_f32(x, c->err), *wf = xf ? gpuc_to_f32(wt, c->err) : NULL;
    float *bf = wf && b ? gpuc_to_f32(b, c->err) : NULL;
    float *yf = calloc((size_t)gpuc_numel(y), sizeof *yf);
    rc = -1;
    if (xf && wf && (bf || !b) && yf) {
      rc = (transpose ? convt_f32 : conv_f32)(w, xf, wf, bf, yf);
      if (!rc) gpuc_from_f32(y, yf);
    }
    free(xf); free(wf); free(bf); free(yf);
  }
  return rc ? gpuc_op_fail(c, "out of host memory") : 0;
}

int ref_Conv(OpCtx *c) {
  NnWindow w;
  if (nn_conv_window(c, &w)) return -1;
  return run_conv(c, &w, false);
}

int ref_ConvTranspose(OpCtx *c) {
  NnWindow w;
  if (nn_convt_window(c, &w)) return -1;
  return run_conv(c, &w, true);
}

/* NHWC: X [N,H,W,C] and W [K,R,S,C/g] transposed to NCHW / OIHW, Conv,
 * Y transposed back into c->out[0] [N,H,W,K]. */
static int conv_nhwc(OpCtx *c) {
  static const int to_nchw[4] = GPUC_NHWC_TO_NCHW, to_nhwc[4] = GPUC_NCHW_TO_NHWC;
  if (c->in[0]->rank != 4 || c->in[1]->rank != 4) return gpuc_op_fail(c, "an NHWC convolution must be 2-D");
  Tensor xn = {0}, wn = {0}, yn = {0};
  int rc = -1;
  if (gpuc_tensor_permute4(c->in[0], to_nchw, &xn, c->err) || gpuc_tensor_permute4(c->in[1], to_nchw, &wn, c->err)) goto done;
  Tensor *y = c->out[0];
  int64_t yd[4];
  for (int i = 0; i < 4; i++) yd[i] = y->dims[to_nchw[i]];
  gpuc_set_shape(&yn, y->dt, 4, yd);
  if (gpuc_tensor_alloc(&yn, c->err)) goto done;
  const Tensor *ins[3] = {&xn, &wn, c->nin > 2 ? c->in[2] : NULL};
  Tensor *outs[1] = {&yn}, back = {0};
  OpCtx conv = *c;
  conv.nin = 3;
  conv.in = ins;
  conv.out = outs;
  if (ref_Conv(&conv) || gpuc_tensor_permute4(&yn, to_nhwc, &back, c->err)) goto done;
  memcpy(y->data, back.data, gpuc_tensor_bytes(y));
  free(back.data);
  rc = 0;
done:
  free(xn.data); free(wn.data); free(yn.data);
  return rc;
}

/* FusedConv = act(Conv(in_act(X), W, B) + Z): the reference runs the parts
 * in turn; in_act(X) is rounded to X's dtype, as the activation node it
 * replaces wrote it. */
int ref_FusedConv(OpCtx *c) {
  OpCtx conv = *c;
  conv.nin = 3;
  bool nhwc = gpuc_attr_i(c->n, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC;
  int in_act = (int)gpuc_attr_i(c->n, "in_activation", 0);
  Tensor xa = {0};
  const Tensor *ins[3] = {c->in[0], c->in[1], c->nin > 2 ? c->in[2] : NULL};
  if (in_act != GPUC_FCONV_ACT_NONE) {
    double ilo = gpuc_attr_f(c->n, "in_act_min", -INFINITY), ihi = gpuc_attr_f(c->n, "in_act_max", INFINITY);
    gpuc_set_shape(&xa, c->in[0]->dt, c->in[0]->rank, c->in[0]->dims);
    if (gpuc_tensor_alloc(&xa, c->err)) return -1;
    for (int64_t i = 0, n = gpuc_numel(&xa); i < n; i++)
      gpuc_set_f64(&xa, i, gpuc_conv_act_ref(in_act, gpuc_get_f64(c->in[0], i), ilo, ihi));
    ins[0] = &xa;
    conv.in = ins;
  }
  int crc = nhwc ? conv_nhwc(&conv) : ref_Conv(&conv);
  free(xa.data);
  if (crc) return -1;
  Tensor *y = c->out[0];
  const Tensor *z = c->nin > 3 ? c->in[3] : NULL;
  int act = (int)gpuc_attr_i(c->n, "activation", 0);
  double lo = gpuc_attr_f(c->n, "act_min", -INFINITY), hi = gpuc_attr_f(c->n, "act_max", INFINITY);
  if (!z && act == GPUC_FCONV_ACT_NONE) return 0;
  int64_t n = gpuc_numel(y);
  for (int64_t i = 0; i < n; i++) {
    double v = gpuc_get_f64(y, i);
    if (z) v += gpuc_get_f64(z, i);
    gpuc_set_f64(y, i, gpuc_conv_act_ref(act, v, lo, hi));
  }
  return 0;
}
