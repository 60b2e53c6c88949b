/* Reference kernel of the internal Attention op: the unfused graph's math,
 * one query row at a time, in double: s = scale * q.k + mask, p =
 * softmax(s) (NaN -> 0 with nan_to_zero, as Where(IsNaN(P), 0, P)), y = p V. */
#include "ref_util.h"
#include <math.h>
#include <stdlib.h>

/* Strides of the mask viewed as [B,H,Sq,Sk] (0 on broadcast dims). */
static void mask_strides(const Tensor *m, int64_t st[4]) {
  int64_t s = 1;
  for (int d = 3; d >= 0; d--) {
    int md = d - (4 - m->rank);
    if (md < 0 || m->dims[md] == 1) { st[d] = 0; continue; }
    st[d] = s;
    s *= m->dims[md];
  }
}

int ref_Attention(OpCtx *c) {
  const Tensor *qt = c->in[0], *kt = c->in[1], *vt = c->in[2];
  const Tensor *mt = gpuc_has_in(c, 3) ? c->in[3] : NULL;
  Tensor *y = c->out[0];
  int64_t B = qt->dims[0], H = qt->dims[1], Sq = qt->dims[2], D = qt->dims[3];
  int64_t Sk = kt->dims[2], Dv = vt->dims[3];
  double scale = gpuc_attr_f(c->n, "scale", 1.0f);
  bool nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) != 0;
  int64_t ms[4] = {0, 0, 0, 0};
  if (mt) mask_strides(mt, ms);
  float *q = gpuc_to_f32(qt, c->err), *k = gpuc_to_f32(kt, c->err), *v = gpuc_to_f32(vt, c->err);
  float *m = mt ? gpuc_to_f32(mt, c->err) : NULL;
  float *out = malloc(sizeof(float) * (size_t)(gpuc_numel(y) + 1));
  double *s = malloc(sizeof(double) * (size_t)(Sk + 1)), *acc = malloc(sizeof(double) * (size_t)(Dv + 1));
  int rc = 0;
  if (!q || !k || !v || (mt && !m) || !out || !s || !acc) { rc = gpuc_op_fail(c, "out of host memory"); goto done; }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t bh = b * H + h;
      const float *K = k + bh * Sk * D, *V = v + bh * Sk * Dv;
      for (int64_t i = 0; i < Sq; i++) {
        const float *Q = q + (bh * Sq + i) * D;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Sk; j++) {
          double dot = 0;
          for (int64_t d = 0; d < D; d++) dot += (double)Q[d] * K[j * D + d];
          s[j] = scale * dot;
          if (m) s[j] += m[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
          if (s[j] > mx || isnan(s[j])) mx = s[j];
        }
        for (int64_t j = 0; j < Sk; j++) sum += exp(s[j] - mx);
        for (int64_t d = 0; d < Dv; d++) acc[d] = 0;
        for (int64_t j = 0; j < Sk; j++) {
          double p = exp(s[j] - mx) / sum;
          if (nan0 && isnan(p)) p = 0;
          for (int64_t d = 0; d < Dv; d++) acc[d] += p * V[j * Dv + d];
        }
        for (int64_t d = 0; d < Dv; d++) out[(bh * Sq + i) * Dv + d] = (float)acc[d];
      }
    }
  gpuc_from_f32(y, out);
done:
  free(q); free(k); free(v); free(m); free(out); free(s); free(acc);
  return rc;
}
