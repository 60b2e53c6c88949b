/* Reference kernel of the internal Attention op: the unfused graph's math,
 * one query row at a time, in double: s = scale * q.k + mask (with causal,
 * key j > query i scores -inf, or scale * q.k + causal_fill for a finite
 * fill, the mask not read; K/V head h / G for grouped heads; with
 * mask_period P batch b reads mask batch b mod P), p =
 * softmax(s) (NaN -> 0 with nan_to_zero, as Where(IsNaN(P), 0, P)), y = p V. */
#include "ref_util.h"
#include "infer_linalg.h"
#include <math.h>
#include <stdlib.h>

int ref_Attention(OpCtx *c) {
  const Tensor *qt = c->in[0], *kt = c->in[1], *vt = c->in[2];
  const Tensor *mt = gpuc_has_in(c, 3) ? c->in[3] : NULL;
  Tensor *y = c->out[0];
  GpucAttnGeom a;
  if (gpuc_attention_geom(c->n, qt, kt, vt, &a)) return gpuc_op_fail(c, "inconsistent shapes");
  int64_t B = a.B, H = a.H, Sq = a.Sq, D = a.D, Sk = a.Sk, Dv = a.Dv;
  const int64_t *sq = a.st[0], *sk = a.st[1], *sv = a.st[2], *sy = a.st[3];
  double scale = gpuc_attr_f(c->n, "scale", 1.0f);
  bool nan0 = gpuc_attr_i(c->n, "nan_to_zero", 0) != 0, causal = gpuc_attr_i(c->n, "causal", 0) != 0;
  double fill = gpuc_attr_f(c->n, "causal_fill", -INFINITY);
  int64_t G = a.H / a.Hk; /* query heads per K/V head */
  int64_t ms[4] = {0, 0, 0, 0};
  if (a.mask_period && (!mt || mt->rank != 4 || mt->dims[0] != a.mask_period || a.mask_period < 1 || B % a.mask_period))
    return gpuc_op_fail(c, "mask_period %lld does not fit the mask and batch %lld", (long long)a.mask_period,
                        (long long)B);
  if (mt) gpuc_attention_mask_strides(mt, ms);
  float *q = gpuc_to_f32(qt, c->err), *k = gpuc_to_f32(kt, c->err), *v = gpuc_to_f32(vt, c->err);
  float *m = mt ? gpuc_to_f32(mt, c->err) : NULL;
  float *out = malloc(sizeof(float) * (size_t)(gpuc_numel(y) + 1));
  double *s = malloc(sizeof(double) * (size_t)(Sk + 1)), *acc = malloc(sizeof(double) * (size_t)(Dv + 1));
  int rc = 0;
  if (!q || !k || !v || (mt && !m) || !out || !s || !acc) { rc = gpuc_op_fail(c, "out of host memory"); goto done; }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t mb = a.mask_period > 0 ? b % a.mask_period : b; /* the mask's batch (mask_period) */
      const float *K = k + a.off[1] + b * sk[0] + h / G * sk[1], *V = v + a.off[2] + b * sv[0] + h / G * sv[1];
      for (int64_t i = 0; i < Sq; i++) {
        const float *Q = q + a.off[0] + b * sq[0] + h * sq[1] + i * sq[2];
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Sk; j++) {
          double dot = 0;
          for (int64_t d = 0; d < D; d++) dot += (double)Q[d] * K[j * sk[2] + d];
          s[j] = scale * dot;
          if (causal && j > i) s[j] = isinf(fill) ? -INFINITY : s[j] + fill;
          else if (m) s[j] += m[mb * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
          if (s[j] > mx || isnan(s[j])) mx = s[j];
        }
        for (int64_t j = 0; j < Sk; j++) sum += exp(s[j] - mx);
        for (int64_t d = 0; d < Dv; d++) acc[d] = 0;
        for (int64_t j = 0; j < Sk; j++) {
          double p = exp(s[j] - mx) / sum;
          if (nan0 && isnan(p)) p = 0;
          for (int64_t d = 0; d < Dv; d++) acc[d] += p * V[j * sv[2] + d];
        }
        for (int64_t d = 0; d < Dv; d++) out[b * sy[0] + h * sy[1] + i * sy[2] + d] = (float)acc[d];
      }
    }
  gpuc_from_f32(y, out);
done:
  free(q); free(k); free(v); free(m); free(out); free(s); free(acc);
  return rc;
}
