/* Reference kernels for Cast, CastLike, Identity and Dropout.
 *
 * Cast goes through the engine's rows: float sources load as double and
 * store with C truncation toward zero into integers (saturating at the
 * int64 range, then wrapping into narrower types; NaN -> 0), f16/bf16 round
 * once to nearest even; integer and bool sources load as int64 (u64 as its
 * bit pattern) and narrow by wrapping. */
#include "ref_ew.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct CastCtx {
  const Tensor *x;
  Tensor *o;
  bool from_float, uns;
} CastCtx;

static void cast_row(void *ud, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const CastCtx *p = ud;
  if (p->from_float) {
    double v[EW_BLOCK];
    ew_load_f(p->x, io[0], is[0], n, v);
    ew_store_f(p->o, oo, n, v);
  } else {
    int64_t v[EW_BLOCK];
    ew_load_i(p->x, io[0], is[0], n, v);
    ew_store_i(p->o, oo, n, v, p->uns);
  }
}

/* y = x with y's (already inferred) dtype */
static int cast_to_out(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  if (x->dt == y->dt) {
    memcpy(y->data, x->data, gpuc_tensor_bytes(x));
    return 0;
  }
  CastCtx p = {x, y, ew_is_float(x->dt), x->dt == GPUC_DT_U64};
  return ew_for_rows(c, 1, c->in, y, cast_row, &p);
}

int ref_Cast(OpCtx *c) { return cast_to_out(c); }
int ref_CastLike(OpCtx *c) { return cast_to_out(c); }
int ref_Identity(OpCtx *c) { return cast_to_out(c); }

/* ---- Dropout ----------------------------------------------------------- */

/* MT19937, seeded and drawn like numpy's legacy np.random.seed(s) and
 * np.random.uniform(0, 1), which the ONNX reference implementation uses for
 * training-mode masks: with the same 'seed' attribute the masks agree. */
typedef struct Mt {
  uint32_t s[624];
  int i;
} Mt;

static void mt_seed(Mt *m, uint32_t seed) {
  m->s[0] = seed;
  for (uint32_t k = 1; k < 624; k++) m->s[k] = 1812433253u * (m->s[k - 1] ^ (m->s[k - 1] >> 30)) + k;
  m->i = 624;
}

static uint32_t mt_next(Mt *m) {
  if (m->i >= 624) { /* regenerate the whole state in place */
    for (int k = 0; k < 624; k++) {
      uint32_t y = (m->s[k] & 0x80000000u) | (m->s[(k + 1) % 624] & 0x7fffffffu);
      m->s[k] = m->s[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu : 0);
    }
    m->i = 0;
  }
  uint32_t y = m->s[m->i++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

/* uniform in [0, 1) with 53 random bits */
static double mt_double(Mt *m) {
  uint32_t a = mt_next(m) >> 5, b = mt_next(m) >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* Inference mode (or ratio 0): Y = X and the mask is all true. Training:
 * an element is kept when its uniform draw is >= ratio, and scaled by
 * 1 / (1 - ratio). */
int ref_Dropout(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0], *mask = c->nout > 1 ? c->out[1] : NULL; /* either may be unused */
  double ratio;
  bool training;
  if (c->g->opset >= 12) {
    for (int i = 1; i < 3; i++)
      if (gpuc_has_in(c, i) && gpuc_numel(c->in[i]) != 1)
        return gpuc_op_fail(c, "%s must hold one value", i == 1 ? "ratio" : "training_mode");
    ratio = gpuc_has_in(c, 1) ? gpuc_get_f64(c->in[1], 0) : 0.5;
    training = gpuc_has_in(c, 2) && gpuc_get_i64(c->in[2], 0) != 0;
  } else {
    ratio = gpuc_attr_f(c->n, "ratio", 0.5f);
    training = c->g->opset < 7 && gpuc_attr_i(c->n, "is_test", 0) == 0;
  }
  int64_t n = gpuc_numel(x);
  if (!training || ratio == 0) {
    if (y) memcpy(y->data, x->data, gpuc_tensor_bytes(x));
    if (mask) /* bool true, or 1 of X's dtype before opset 10 */
      for (int64_t i = 0; i < n; i++) gpuc_set_f64(mask, i, 1.0);
    return 0;
  }
  if (!(ratio >= 0 && ratio <= 1))
    return gpuc_op_fail(c, "ratio %g is outside [0, 1]", ratio);
  Mt *m = malloc(sizeof *m);
  if (!m) return gpuc_op_fail(c, "out of host memory");
  mt_seed(m, (uint32_t)gpuc_attr_i(c->n, "seed", 0));
  double scale = ratio < 1 ? 1 / (1 - ratio) : 0, v[EW_BLOCK], keep[EW_BLOCK];
  for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {
    int64_t k = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;
    ew_load_f(x, i0, 1, k, v);
    for (int64_t i = 0; i < k; i++) {
      keep[i] = mt_double(m) >= ratio;
      v[i] = keep[i] != 0 ? v[i] * scale : 0;
    }
    if (y) ew_store_f(y, i0, k, v);
    if (mask) ew_store_f(mask, i0, k, keep);
  }
  free(m);
  return 0;
}
