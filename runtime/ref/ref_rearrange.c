/* Reference kernels of ReverseSequence-10, MaxUnpool-11, Col2Im-18 and
 * CenterCropPad-18 (geometry: ir/rearrange.h) and Det-11.
 *
 * ReverseSequence, MaxUnpool and CenterCropPad move elements as bytes, so
 * every dtype is exact; Col2Im sums overlapping blocks in double and
 * rounds once on store; Det is LU with partial pivoting in double. Runtime
 * data that would index out of range (a sequence length past the time
 * axis, an unpool index past the output) is an error naming the element,
 * as on the GPU (runtime/device_fault.h). */
#include "ref_util.h"
#include "rearrange.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef long long ll;

/* ---- ReverseSequence: Y[b, t, ...] = X[b, len[b] - 1 - t, ...] for t < len[b]
 * (batch/time as axes 0/1 either way), X's element elsewhere ------------- */
int ref_ReverseSequence(OpCtx *c) {
  const Tensor *x = c->in[0], *len = c->in[1];
  Tensor *y = c->out[0];
  int ba, ta;
  if (gpuc_revseq_axes(c, &ba, &ta)) return -1;
  int64_t B = x->dims[ba], T = x->dims[ta], inner = gpuc_shape_numel(x->rank - 2, x->dims + 2);
  if (gpuc_numel(len) != B) return gpuc_op_fail(c, "sequence_lens has %lld values for %lld batch entries", (ll)gpuc_numel(len), (ll)B);
  size_t es = gpuc_dtype_size(x->dt), row = (size_t)inner * es;
  /* element (b, t) starts at (b * sb + t * st) * inner */
  int64_t sb = ba == 0 ? T : 1, st = ta == 0 ? B : 1;
  for (int64_t b = 0; b < B; b++) {
    int64_t L = gpuc_get_i64(len, b);
    if (L < 0 || L > T)
      return gpuc_op_fail(c, "sequence length %lld (element %lld of sequence_lens) is outside [0, %lld]", (ll)L, (ll)b, (ll)T);
    for (int64_t t = 0; t < T; t++) {
      int64_t src = t < L ? L - 1 - t : t;
      memcpy((char *)y->data + (size_t)(b * sb + t * st) * row, (const char *)x->data + (size_t)(b * sb + src * st) * row, row);
    }
  }
  return 0;
}

/* ---- MaxUnpool: Y = 0, then Y[coords of I[i] in the unpooled shape] =
 * X.flat[i] (in order: the last of duplicate indices wins) ---------------- */
int ref_MaxUnpool(OpCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1];
  Tensor *y = c->out[0];
  int64_t yd[GPUC_MAX_RANK], id[GPUC_MAX_RANK], ys[GPUC_MAX_RANK];
  if (gpuc_maxunpool_plan(c, yd, id) < 0) return -1;
  int r = x->rank;
  int64_t n = gpuc_numel(x), ny = gpuc_numel(y), ni = gpuc_shape_numel(r, id);
  size_t es = gpuc_dtype_size(x->dt);
  gpuc_strides(y, ys);
  memset(y->data, 0, (size_t)ny * es);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = gpuc_get_i64(ind, i), off = 0;
    if (v < 0 || v >= ni) return gpuc_op_fail(c, "index %lld (element %lld of I) is outside [0, %lld)", (ll)v, (ll)i, (ll)ni);
    for (int d = r - 1; d >= 0; d--) {
      off += v % id[d] * ys[d];
      v /= id[d];
    }
    memcpy((char *)y->data + (size_t)off * es, (const char *)x->data + (size_t)i * es, es);
  }
  return 0;
}

/* ---- Col2Im: Y[n, c, pos] += X[n, c * kprod + k, l] where pos_d = l_d *
 * stride_d - pad_b_d + k_d * dil_d lies inside the image -------------------- */
int ref_Col2Im(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  Col2ImPlan p;
  if (gpuc_col2im_plan(c, &p)) return -1;
  int64_t ny = gpuc_numel(y), img = ny / (p.n * p.c > 0 ? p.n * p.c : 1);
  if (ny == 0) return 0;
  double *acc = calloc((size_t)ny, sizeof *acc);
  if (!acc) return gpuc_op_fail(c, "out of host memory");
  for (int64_t nc = 0; nc < p.n * p.c; nc++)
    for (int64_t k = 0; k < p.kprod; k++)
      for (int64_t l = 0; l < p.L; l++) {
        int64_t kr = k, lr = l, off = 0;
        bool in = true;
        for (int d = p.nsp - 1; d >= 0; d--) { /* innermost dim first */
          int64_t kd = kr % p.block[d], ld = lr % p.blocks[d];
          kr /= p.block[d];
          lr /= p.blocks[d];
          int64_t pos = ld * p.stride[d] - p.pad_b[d] + kd * p.dil[d];
          in &= pos >= 0 && pos < p.image[d];
          int64_t s = 1;
          for (int e = d + 1; e < p.nsp; e++) s *= p.image[e];
          off += pos * s;
        }
        if (in) acc[nc * img + off] += gpuc_get_f64(x, (nc * p.kprod + k) * p.L + l);
      }
  for (int64_t i = 0; i < ny; i++) gpuc_set_f64(y, i, acc[i]);
  free(acc);
  return 0;
}

/* ---- CenterCropPad: Y[i] = X[i + shift] inside X, else 0 ---------------- */
int ref_CenterCropPad(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int64_t yd[GPUC_MAX_RANK], shift[GPUC_MAX_RANK], xs[GPUC_MAX_RANK];
  if (gpuc_ccp_plan(c, yd, shift)) return -1;
  int r = x->rank;
  int64_t ny = gpuc_numel(y);
  size_t es = gpuc_dtype_size(x->dt);
  gpuc_strides(x, xs);
  for (int64_t i = 0; i < ny; i++) {
    int64_t rem = i, off = 0;
    bool in = true;
    for (int d = r - 1; d >= 0; d--) {
      int64_t s = rem % yd[d] + shift[d];
      rem /= yd[d];
      in &= s >= 0 && s < x->dims[d];
      off += s * xs[d];
    }
    if (in) memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
    else memset((char *)y->data + (size_t)i * es, 0, es);
  }
  return 0;
}

/* ---- Det: per M x M matrix, LU with partial pivoting in double ------------ */

/* det of the M x M row-major a (overwritten) */
static double det_lu(double *a, int64_t M) {
  double det = 1;
  for (int64_t k = 0; k < M; k++) {
    int64_t piv = k;
    for (int64_t i = k + 1; i < M; i++)
      if (fabs(a[i * M + k]) > fabs(a[piv * M + k])) piv = i;
    if (a[piv * M + k] == 0) return 0; /* singular (or NaN-free zero column) */
    if (piv != k) {
      for (int64_t j = 0; j < M; j++) { double t = a[k * M + j]; a[k * M + j] = a[piv * M + j]; a[piv * M + j] = t; }
      det = -det;
    }
    double d = a[k * M + k];
    det *= d;
    for (int64_t i = k + 1; i < M; i++) {
      double f = a[i * M + k] / d;
      for (int64_t j = k + 1; j < M; j++) a[i * M + j] -= f * a[k * M + j];
    }
  }
  return det;
}

int ref_Det(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int64_t M = x->dims[x->rank - 1], batch = gpuc_numel(y);
  if (x->dims[x->rank - 2] != M) return gpuc_op_fail(c, "matrices must be square");
  if ((double)batch * (double)M * (double)M * (double)M > 1e12)
    return gpuc_op_fail(c, "%lld matrices of %lld x %lld are too much work for the reference", (ll)batch, (ll)M, (ll)M);
  double *a = malloc(sizeof(double) * (size_t)(M * M > 0 ? M * M : 1));
  if (!a) return gpuc_op_fail(c, "out of host memory");
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t i = 0; i < M * M; i++) a[i] = gpuc_get_f64(x, b * M * M + i);
    gpuc_set_f64(y, b, det_lu(a, M));
  }
  free(a);
  return 0;
}
