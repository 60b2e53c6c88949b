/* Reference Resize / Upsample, and the block rearrangements DepthToSpace /
 * SpaceToDepth.
 *
 * Resize is separable: for every axis and output index we list the input
 * indices ("taps") and weights that contribute; an output element is the
 * sum over the product of its axes' taps. Nearest mode has one tap of
 * weight 1 per axis and copies elements bit-exactly. Out-of-range taps are
 * clamped to the edge (the ONNX reference pads with edge values), or get
 * weight 0 with exclude_outside; weights are renormalized then and with
 * antialias (the filter is stretched by 1/scale when downsampling). */
#include "ref_util.h"
#include "infer_nn.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Resize ------------------------------------------------------------ */


static int resize_run(OpCtx *c) {
  NnResize p;
  if (nn_resize_params(c, &p)) return -1;
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int r = p.rank;
  int64_t n = gpuc_numel(y), xs[GPUC_MAX_RANK];
  if (n == 0) return 0;
  gpuc_strides(x, xs);
  for (int d = 0; d < r; d++)
    if (x->dims[d] == 0) return gpuc_op_fail(c, "cannot resize an empty axis %d", d);
  NnAxisTaps taps[GPUC_MAX_RANK];
  memset(taps, 0, sizeof taps);
  int rc = 0;
  for (int d = 0; d < r && !rc; d++) rc = nn_resize_taps(c, &p, d, x->dims[d], GPUC_MAX_TENSOR_BYTES / 16, &taps[d]);
  if (rc) goto done;
  double work = (double)n; /* outputs times the average taps per axis */
  for (int d = 0; d < r; d++)
    if (p.out[d] > 0) work *= (double)taps[d].first[p.out[d]] / (double)p.out[d];
  if (work > NN_MAX_WORK) {
    rc = gpuc_op_fail(c, "needs about %.3g taps, over the reference limit of %.3g", work,
                      NN_MAX_WORK);
    goto done;
  }
  size_t es = gpuc_dtype_size(x->dt);
  int64_t o[GPUC_MAX_RANK] = {0};
  for (int64_t i = 0; i < n; i++) {
    bool outside = false;
    for (int d = 0; d < r; d++) outside |= taps[d].outside[o[d]];
    if (outside) {
      ref_st(y, i, p.extrapolation);
    } else if (p.mode == NN_RS_NEAREST) { /* one tap per axis: copy the element */
      int64_t off = 0;
      for (int d = 0; d < r; d++) off += taps[d].idx[taps[d].first[o[d]]] * xs[d];
      memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
    } else { /* sum over the product of the axes' taps */
      int64_t k[GPUC_MAX_RANK];
      bool empty = false;
      for (int d = 0; d < r; d++) {
        k[d] = taps[d].first[o[d]];
        empty |= k[d] == taps[d].first[o[d] + 1];
      }
      double acc = 0;
      while (!empty) {
        int64_t off = 0;
        double w = 1;
        for (int d = 0; d < r; d++) {
          off += taps[d].idx[k[d]] * xs[d];
          w *= taps[d].w[k[d]];
        }
        acc += w * ref_ld(x, off);
        int d = r - 1;
        for (; d >= 0; d--) {
          if (++k[d] < taps[d].first[o[d] + 1]) break;
          k[d] = taps[d].first[o[d]];
        }
        if (d < 0) break;
      }
      ref_st(y, i, acc);
    }
    for (int d = r - 1; d >= 0; d--) {
      if (++o[d] < p.out[d]) break;
      o[d] = 0;
    }
  }
done:
  for (int d = 0; d < r; d++) nn_free_taps(&taps[d]);
  return rc;
}

int ref_Resize(OpCtx *c) { return resize_run(c); }
int ref_Upsample(OpCtx *c) { return resize_run(c); }

/* ---- DepthToSpace / SpaceToDepth --------------------------------------- */

/* Deep side [N, C*b*b, H, W], spatial side [N, C, H*b, W*b]. The deep
 * channel of (c, bh, bw) is (bh*b + bw)*C + c (DCR) or c*b*b + bh*b + bw
 * (CRD). to_space: copy deep -> spatial, else the reverse. */
static int block_move(OpCtx *c, bool to_space, bool crd) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  const Tensor *deep = to_space ? x : y, *sp = to_space ? y : x;
  int64_t b = gpuc_attr_i(c->n, "blocksize", 1);
  int64_t N = sp->dims[0], C = sp->dims[1], H = deep->dims[2], W = deep->dims[3];
  size_t es = gpuc_dtype_size(x->dt);
  const char *src = x->data;
  char *dst = y->data;
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < C; ch++)
      for (int64_t bh = 0; bh < b; bh++)
        for (int64_t bw = 0; bw < b; bw++) {
          int64_t dc = crd ? ch * b * b + bh * b + bw : (bh * b + bw) * C + ch;
          for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++) {
              int64_t di = ((n * C * b * b + dc) * H + h) * W + w;
              int64_t si = ((n * C + ch) * H * b + h * b + bh) * W * b + w * b + bw;
              int64_t from = to_space ? di : si, to = to_space ? si : di;
              memcpy(dst + (size_t)to * es, src + (size_t)from * es, es);
            }
        }
  return 0;
}

int ref_DepthToSpace(OpCtx *c) {
  return block_move(c, true, !strcmp(gpuc_attr_s(c->n, "mode", "DCR"), "CRD"));
}
int ref_SpaceToDepth(OpCtx *c) { return block_move(c, false, false); }
