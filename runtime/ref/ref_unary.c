/* Reference kernels for the unary elementwise ops: math functions,
 * activations (Mish included), Clip, Not, IsInf/IsNaN. Float dtypes compute in double and
 * round once on store; Abs/Neg/Sign/Relu/Clip on integers are exact in
 * int64 (wrapping: Abs/Neg of INT_MIN give INT_MIN, as in C on two's
 * complement). Other ops on integers (Erf, Shrink) go through double and are
 * truncated back. */
#include "ref_ew.h"
#include <float.h>
#include <math.h>

typedef struct Un {
  GpucOp op;
  const Tensor *x;
  Tensor *o;
  bool f;                /* compute in double */
  bool uns;              /* u64 values */
  double alpha, beta, gamma; /* attributes, by op (Shrink: lambd, bias) */
  double lo, hi;         /* Clip bounds for the double path */
  int64_t ilo, ihi;      /* ... and for the integer path */
  bool pos, neg;         /* IsInf: detect_positive, detect_negative */
} Un;

/* ---- scalar helpers ---------------------------------------------------- */

static double sigmoid(double x) {
  if (x >= 0) return 1 / (1 + exp(-x));
  double e = exp(x); /* no overflow for very negative x */
  return e / (1 + e);
}

/* log(1 + e^x) without overflow */
static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* Round half to even, independent of the FP rounding mode. */
static double round_even(double x) {
  double r = floor(x), d = x - r;
  if (d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0)) r += 1;
  return r == 0 ? copysign(0.0, x) : r;
}

/* sign keeps 0, -0 and NaN */
static double sign_f(double x) { return x > 0 ? 1 : x < 0 ? -1 : x; }

/* Gelu: x * Phi(x), exact by erf or by the tanh approximation */
static double gelu(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + erf(x * 0.7071067811865476));
}

static double clamp01(double t) { return t < 0 ? 0 : t > 1 ? 1 : t; }

static int64_t neg_i(int64_t x) { return (int64_t)(0 - (uint64_t)x); }

static bool lt_i(int64_t a, int64_t b, bool uns) { return uns ? (uint64_t)a < (uint64_t)b : a < b; }

/* Clip: max with lo first, then min with hi, so with lo > hi everything
 * becomes hi (as ONNX specifies); NaN stays NaN. */
static double clip_f(double x, double lo, double hi) {
  if (x < lo) x = lo;
  return x > hi ? hi : x;
}
static int64_t clip_i(int64_t x, int64_t lo, int64_t hi, bool uns) {
  if (lt_i(x, lo, uns)) x = lo;
  return lt_i(hi, x, uns) ? hi : x;
}

/* ---- rows -------------------------------------------------------------- */

#define MAP(expr)                                                    \
  for (int64_t i = 0; i < n; i++) {                                  \
    x = v[i];                                                        \
    v[i] = (expr);                                                   \
  }                                                                  \
  break

static void un_f(const Un *p, int64_t n, double *v) {
  double x, a = p->alpha, b = p->beta, g = p->gamma;
  switch (p->op) {
  case GPUC_OP_ABS: MAP(fabs(x));
  case GPUC_OP_ACOS: MAP(acos(x));
  case GPUC_OP_ACOSH: MAP(acosh(x));
  case GPUC_OP_ASIN: MAP(asin(x));
  case GPUC_OP_ASINH: MAP(asinh(x));
  case GPUC_OP_ATAN: MAP(atan(x));
  case GPUC_OP_ATANH: MAP(atanh(x));
  case GPUC_OP_CEIL: MAP(ceil(x));
  case GPUC_OP_COS: MAP(cos(x));
  case GPUC_OP_COSH: MAP(cosh(x));
  case GPUC_OP_ERF: MAP(erf(x));
  case GPUC_OP_EXP: MAP(exp(x));
  case GPUC_OP_FLOOR: MAP(floor(x));
  case GPUC_OP_LOG: MAP(log(x));
  case GPUC_OP_NEG: MAP(-x);
  case GPUC_OP_RECIPROCAL: MAP(1 / x);
  case GPUC_OP_ROUND: MAP(round_even(x));
  case GPUC_OP_SIGN: MAP(sign_f(x));
  case GPUC_OP_SIN: MAP(sin(x));
  case GPUC_OP_SINH: MAP(sinh(x));
  case GPUC_OP_SQRT: MAP(sqrt(x));
  case GPUC_OP_TAN: MAP(tan(x));
  case GPUC_OP_TANH: MAP(tanh(x));
  case GPUC_OP_RELU: MAP(x < 0 ? 0 : x); /* NaN stays NaN */
  case GPUC_OP_SIGMOID: MAP(sigmoid(x));
  case GPUC_OP_ELU: MAP(x < 0 ? a * expm1(x) : x);
  case GPUC_OP_CELU: MAP(x > 0 ? x : a * expm1(x / a));
  case GPUC_OP_SELU: MAP(x > 0 ? g * x : g * a * expm1(x));
  case GPUC_OP_LEAKYRELU: MAP(x < 0 ? a * x : x);
  case GPUC_OP_HARDSIGMOID: MAP(clamp01(a * x + b));
  case GPUC_OP_HARDSWISH: MAP(x * clamp01(x / 6 + 0.5));
  case GPUC_OP_SOFTPLUS: MAP(softplus(x));
  case GPUC_OP_MISH: MAP(x * tanh(softplus(x)));
  case GPUC_OP_GELU: MAP(gelu(x, a != 0));
  case GPUC_OP_SOFTSIGN: MAP(x / (1 + fabs(x)));
  case GPUC_OP_THRESHOLDEDRELU: MAP(x > a ? x : 0);
  case GPUC_OP_SHRINK: MAP(x < -a ? x + b : x > a ? x - b : 0);
  case GPUC_OP_CLIP: MAP(clip_f(x, p->lo, p->hi));
  default: GPUC_ASSERT(!"not a float unary op");
  }
}

static void un_i(const Un *p, int64_t n, int64_t *v) {
  int64_t x;
  bool uns = p->uns;
  switch (p->op) {
  case GPUC_OP_ABS: MAP(!uns && x < 0 ? neg_i(x) : x);
  case GPUC_OP_NEG: MAP(neg_i(x));
  case GPUC_OP_SIGN: MAP(uns ? x != 0 : (x > 0) - (x < 0));
  case GPUC_OP_RELU: MAP(!uns && x < 0 ? 0 : x);
  case GPUC_OP_CLIP: MAP(clip_i(x, p->ilo, p->ihi, uns));
  default: GPUC_ASSERT(!"not an integer unary op");
  }
}
#undef MAP

static void un_row(void *ud, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const Un *p = ud;
  if (p->op == GPUC_OP_ISNAN || p->op == GPUC_OP_ISINF) {
    double v[EW_BLOCK];
    uint8_t *o = (uint8_t *)p->o->data + oo;
    ew_load_f(p->x, io[0], is[0], n, v);
    for (int64_t i = 0; i < n; i++)
      o[i] = p->op == GPUC_OP_ISNAN ? isnan(v[i]) != 0
                                    : isinf(v[i]) && (v[i] > 0 ? p->pos : p->neg);
  } else if (p->op == GPUC_OP_NOT) {
    const uint8_t *x = (const uint8_t *)p->x->data + io[0];
    uint8_t *o = (uint8_t *)p->o->data + oo;
    for (int64_t i = 0; i < n; i++) o[i] = !x[i * is[0]];
  } else if (p->f) {
    double v[EW_BLOCK];
    ew_load_f(p->x, io[0], is[0], n, v);
    un_f(p, n, v);
    ew_store_f(p->o, oo, n, v);
  } else {
    int64_t v[EW_BLOCK];
    ew_load_i(p->x, io[0], is[0], n, v);
    un_i(p, n, v);
    ew_store_i(p->o, oo, n, v, p->uns);
  }
}

/* ---- setup ------------------------------------------------------------- */

/* Clip bounds: attributes before opset 11, optional inputs after. */
static int clip_bounds(OpCtx *c, Un *p) {
  p->lo = -INFINITY;
  p->hi = INFINITY;
  p->ilo = p->uns ? 0 : INT64_MIN;
  p->ihi = p->uns ? (int64_t)UINT64_MAX : INT64_MAX;
  if (c->g->opset < 11) {
    const Attr *lo = gpuc_attr(c->n, "min"), *hi = gpuc_attr(c->n, "max");
    if (lo) p->lo = gpuc_attr_f(c->n, "min", -FLT_MAX);
    if (hi) p->hi = gpuc_attr_f(c->n, "max", FLT_MAX);
    return 0;
  }
  for (int i = 1; i < 3; i++) {
    if (!gpuc_has_in(c, i)) continue;
    const Tensor *t = c->in[i];
    if (gpuc_numel(t) != 1)
      return gpuc_op_fail(c, "%s must hold one value, has %lld", i == 1 ? "min" : "max",
                          (long long)gpuc_numel(t));
    if (i == 1) { p->lo = gpuc_get_f64(t, 0); p->ilo = gpuc_get_i64(t, 0); }
    else { p->hi = gpuc_get_f64(t, 0); p->ihi = gpuc_get_i64(t, 0); }
  }
  return 0;
}

static int run_unary(OpCtx *c) {
  const Node *n = c->n;
  GpucDType dt = c->in[0]->dt;
  Un p = {.op = n->op, .x = c->in[0], .o = c->out[0], .uns = dt == GPUC_DT_U64};
  /* integers stay exact in int64 for the ops that have integer semantics */
  bool int_op = p.op == GPUC_OP_ABS || p.op == GPUC_OP_NEG || p.op == GPUC_OP_SIGN ||
                p.op == GPUC_OP_RELU || p.op == GPUC_OP_CLIP;
  p.f = ew_is_float(dt) || !int_op;
  switch (p.op) {
  case GPUC_OP_ELU: case GPUC_OP_CELU: case GPUC_OP_THRESHOLDEDRELU:
    p.alpha = gpuc_attr_f(n, "alpha", 1.0f);
    break;
  case GPUC_OP_SELU:
    p.alpha = gpuc_attr_f(n, "alpha", 1.67326319217681884765625f);
    p.gamma = gpuc_attr_f(n, "gamma", 1.05070102214050292968750f);
    break;
  case GPUC_OP_LEAKYRELU:
    p.alpha = gpuc_attr_f(n, "alpha", 0.01f);
    break;
  case GPUC_OP_HARDSIGMOID:
    p.alpha = gpuc_attr_f(n, "alpha", 0.2f);
    p.beta = gpuc_attr_f(n, "beta", 0.5f);
    break;
  case GPUC_OP_SHRINK:
    p.alpha = gpuc_attr_f(n, "lambd", 0.5f);
    p.beta = gpuc_attr_f(n, "bias", 0.0f);
    break;
  case GPUC_OP_GELU: /* alpha 1: the tanh form */
    if (gpuc_gelu_tanh(n) < 0) return gpuc_op_fail(c, "approximate must be \"none\" or \"tanh\"");
    p.alpha = gpuc_gelu_tanh(n);
    break;
  case GPUC_OP_ISINF:
    p.pos = gpuc_attr_i(n, "detect_positive", 1) != 0;
    p.neg = gpuc_attr_i(n, "detect_negative", 1) != 0;
    break;
  case GPUC_OP_CLIP:
    if (clip_bounds(c, &p)) return -1;
    break;
  default: break;
  }
  if (p.op == GPUC_OP_CELU && p.alpha == 0) return gpuc_op_fail(c, "Celu alpha must not be 0");
  return ew_for_rows(c, 1, c->in, c->out[0], un_row, &p);
}

#define UNARY(Name) \
  int ref_##Name(OpCtx *c) { return run_unary(c); }
UNARY(Abs)
UNARY(Acos)
UNARY(Acosh)
UNARY(Asin)
UNARY(Asinh)
UNARY(Atan)
UNARY(Atanh)
UNARY(Ceil)
UNARY(Cos)
UNARY(Cosh)
UNARY(Erf)
UNARY(Exp)
UNARY(Floor)
UNARY(Log)
UNARY(Neg)
UNARY(Not)
UNARY(Reciprocal)
UNARY(Round)
UNARY(Sign)
UNARY(Sin)
UNARY(Sinh)
UNARY(Sqrt)
UNARY(Tan)
UNARY(Tanh)
UNARY(IsInf)
UNARY(IsNaN)
UNARY(Sigmoid)
UNARY(Elu)
UNARY(Celu)
UNARY(Selu)
UNARY(LeakyRelu)
UNARY(HardSigmoid)
UNARY(HardSwish)
UNARY(Softplus)
UNARY(Mish)
UNARY(Gelu)
UNARY(Softsign)
UNARY(ThresholdedRelu)
UNARY(Shrink)
UNARY(Clip)
#undef UNARY

/* Relu on f32 is the hot one (every conv block): a plain loop. */
int ref_Relu(OpCtx *c) {
  if (c->in[0]->dt != GPUC_DT_F32) return run_unary(c);
  const float *x = c->in[0]->data;
  float *y = c->out[0]->data;
  int64_t n = gpuc_numel(c->out[0]);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
  return 0;
}

/* GatedUnit {silu} (internal, ir/ops.def): y = (g * sigmoid(g)) * u with g
 * = X[..., j], u = X[..., j + N]; the sigmoid as Sigmoid's, each result
 * rounded to f32 as the Sigmoid and Muls it replaces, then to Y's dtype */
int ref_GatedUnit(OpCtx *c) {
  const Tensor *x = c->in[0];
  Tensor *y = c->out[0];
  int64_t n = y->dims[y->rank - 1], rows = n ? gpuc_numel(y) / n : 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < n; j++) {
      float g = (float)gpuc_get_f64(x, r * 2 * n + j), u = (float)gpuc_get_f64(x, r * 2 * n + n + j);
      float sg = (float)sigmoid(g), a = g * sg;
      gpuc_set_f64(y, r * n + j, (double)(a * u));
    }
  return 0;
}
