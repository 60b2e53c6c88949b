/* RotaryEmbedding-23 computed directly from the ONNX definition (models
 * never reach it: frontend/onnx_rotary.c expands the node at import; it is
 * the oracle tests/unit/test_rotary.c checks that expansion against).
 * Per batch b, position s, head h, pair i < rot/2 of X's head vector x:
 *   halves:      x1 = x[i],     x2 = x[i + rot/2]
 *   interleaved: x1 = x[2i],    x2 = x[2i + 1]
 *   y1 = cos x1 - sin x2, y2 = sin x1 + cos x2 (written where x1, x2 were),
 * cos/sin = cache[position_ids[b, s], i] or cache[b, s, i]; features past
 * rot are copied. f32 math per product, rounded once on store. */
#include "ref.h"
#include "ref_util.h"
#include "rotary.h"
#include <stdlib.h>

int ref_RotaryEmbedding(OpCtx *c) {
  RotaryGeom r;
  if (gpuc_rotary_geom(c, &r)) return -1;
  const Tensor *x = c->in[0], *cc = c->in[1], *sc = c->in[2], *pos = r.has_pos ? c->in[3] : NULL;
  Tensor *y = c->out[0];
  int64_t B = r.B, S = r.S, H = r.H, D = r.D, half = r.rot / 2;
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++) {
      int64_t row = b * S + s; /* the caches' [b, s] row, or position_ids' */
      if (pos) {
        row = gpuc_get_i64(pos, b * S + s);
        if (row < 0 || row >= cc->dims[0])
          return gpuc_op_fail(c, "position_ids[%lld] is %lld, outside the caches' %lld positions",
                              (long long)(b * S + s), (long long)row, (long long)cc->dims[0]);
      }
      for (int64_t h = 0; h < H; h++) {
        /* X [B, H, S, D] or [B, S, H*D]: the head vector's offset */
        int64_t base = r.rank == 4 ? ((b * H + h) * S + s) * D : ((b * S + s) * H + h) * D;
        for (int64_t i = 0; i < half; i++) {
          int64_t i1 = r.interleaved ? base + 2 * i : base + i, i2 = r.interleaved ? i1 + 1 : i1 + half;
          float co = (float)gpuc_get_f64(cc, row * half + i), si = (float)gpuc_get_f64(sc, row * half + i);
          float x1 = (float)gpuc_get_f64(x, i1), x2 = (float)gpuc_get_f64(x, i2);
          float a = co * x1, bb = si * x2, p = si * x1, q = co * x2;
          gpuc_set_f64(y, i1, a - bb);
          gpuc_set_f64(y, i2, p + q);
        }
        for (int64_t j = r.rot; j < D; j++) gpuc_set_f64(y, base + j, gpuc_get_f64(x, base + j));
      }
    }
  return 0;
}

/* RotaryHalf (internal, ir/ops.def): per element j of a row of D,
 * y = x[j] cos + r sin with r = -x[j + D/2] (j < D/2) or x[j - D/2],
 * X read through perm when given, Cos/Sin broadcast; each product and the
 * sum rounded to f32 as the Muls and the Add it replaces do (the same bits
 * as they give in f32), then once to Y's dtype. */
int ref_RotaryHalf(OpCtx *c) {
  const Tensor *x = c->in[0], *cs = c->in[1], *sn = c->in[2];
  Tensor *y = c->out[0];
  int r = x->rank;
  int64_t n = gpuc_numel(y), d = y->dims[r - 1], h = d / 2;
  if (n == 0) return 0;
  int64_t xs[GPUC_MAX_RANK]; /* X's element stride along Y's axis k (X read through perm) */
  gpuc_rotary_half_strides(c->n, x, xs);
  int64_t *mc = ref_bcast_map(cs, y), *ms = ref_bcast_map(sn, y);
  if (!mc || !ms) { free(mc); free(ms); return gpuc_op_fail(c, "out of memory"); }
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i, xo = 0;
    for (int k = r - 1; k >= 0; k--) { xo += (rest % y->dims[k]) * xs[k]; rest /= y->dims[k]; }
    int64_t j = i % d;
    float xv = (float)gpuc_get_f64(x, xo);
    float rv = j < h ? -(float)gpuc_get_f64(x, xo + h) : (float)gpuc_get_f64(x, xo - h);
    float a = xv * (float)gpuc_get_f64(cs, mc[i]), b = rv * (float)gpuc_get_f64(sn, ms[i]);
    gpuc_set_f64(y, i, (double)(float)(a + b));
  }
  free(mc);
  free(ms);
  return 0;
}
