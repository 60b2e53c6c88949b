/* GPU lowerings of elementwise ops: one generated kernel per node, one
 * thread per output element, inputs broadcast by baked strides. Math runs
 * in float for f32/f16/bf16, double for f64, long long for integers. */
#include "lower_util.h"
#include "infer_elementwise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int IN0[] = {0}, IN01[] = {0, 1}, IN012[] = {0, 1, 2};

static bool is_float_ct(const char *ct) { return strcmp(ct, "long long") != 0; }

/* Unary ops on float types only; expression in x0. */
static int unary_float(LowerCtx *c, const char *expr) {
  const char *ct = cg_compute_type(c->in[0]->dt);
  if (!is_float_ct(ct) || c->in[0]->dt == GPUC_DT_BOOL)
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(c->in[0]->dt));
  return cg_elementwise(c, IN0, 1, ct, NULL, expr);
}

/* Unary ops with separate float and integer expressions. */
static int unary_any(LowerCtx *c, const char *fexpr, const char *iexpr) {
  const char *ct = cg_compute_type(c->in[0]->dt);
  return cg_elementwise(c, IN0, 1, ct, NULL, is_float_ct(ct) ? fexpr : iexpr);
}

#define UNARY_F(Name, expr) int lower_##Name(LowerCtx *c) { return unary_float(c, expr); }
UNARY_F(Acos, "acos(x0)")
UNARY_F(Acosh, "acosh(x0)")
UNARY_F(Asin, "asin(x0)")
UNARY_F(Asinh, "asinh(x0)")
UNARY_F(Atan, "atan(x0)")
UNARY_F(Atanh, "atanh(x0)")
UNARY_F(Ceil, "ceil(x0)")
UNARY_F(Cos, "cos(x0)")
UNARY_F(Cosh, "cosh(x0)")
UNARY_F(Erf, "erf(x0)")
UNARY_F(Exp, "exp(x0)")
UNARY_F(Floor, "floor(x0)")
UNARY_F(Log, "log(x0)")
UNARY_F(Reciprocal, "1 / x0")
UNARY_F(Round, "rint(x0)")
UNARY_F(Sin, "sin(x0)")
UNARY_F(Sinh, "sinh(x0)")
UNARY_F(Sqrt, "sqrt(x0)")
UNARY_F(Tan, "tan(x0)")
UNARY_F(Tanh, "tanh(x0)")
UNARY_F(Sigmoid, "x0 >= 0 ? 1 / (1 + exp(-x0)) : exp(x0) / (1 + exp(x0))")
UNARY_F(Softsign, "x0 / (1 + fabs(x0))")
UNARY_F(Softplus, "x0 > 0 ? x0 + log1p(exp(-x0)) : log1p(exp(x0))")
/* Mish-18: x * tanh(softplus(x)), softplus without overflow */
UNARY_F(Mish, "x0 * tanh(x0 > 0 ? x0 + log1p(exp(-x0)) : log1p(exp(x0)))")
UNARY_F(HardSwish, "x0 * fmax((decltype(x0))0, fmin((decltype(x0))1, x0 / 6 + (decltype(x0))0.5))")
/* Gelu-20 in the compute type (float for half and bf16 too) */
int lower_Gelu(LowerCtx *c) {
  int t = gpuc_gelu_tanh(c->n);
  if (t < 0) return lower_unsupported(c, "approximate \"%s\"", gpuc_attr_s(c->n, "approximate", "none"));
  if (t) return unary_float(c, "(decltype(x0))0.5 * x0 * ((decltype(x0))1 + tanh((decltype(x0))0.7978845608028654 * "
                               "(x0 + (decltype(x0))0.044715 * x0 * x0 * x0)))");
  return unary_float(c, "(decltype(x0))0.5 * x0 * ((decltype(x0))1 + erf(x0 * (decltype(x0))0.7071067811865476))");
}

int lower_Abs(LowerCtx *c) { return unary_any(c, "fabs(x0)", "x0 < 0 ? -x0 : x0"); }
int lower_Neg(LowerCtx *c) { return unary_any(c, "-x0", "-x0"); }
int lower_Sign(LowerCtx *c) { return unary_any(c, "(decltype(x0))((x0 > 0) - (x0 < 0))", "(x0 > 0) - (x0 < 0)"); }
int lower_Relu(LowerCtx *c) { return unary_any(c, "x0 < 0 ? (decltype(x0))0 : x0", "x0 < 0 ? 0 : x0"); }
int lower_Not(LowerCtx *c) { return cg_elementwise(c, IN0, 1, "long long", NULL, "!x0"); }
int lower_IsNaN(LowerCtx *c) { return cg_elementwise(c, IN0, 1, cg_compute_type(c->in[0]->dt), NULL, "isnan(x0)"); }
int lower_IsInf(LowerCtx *c) {
  bool pos = gpuc_attr_i(c->n, "detect_positive", 1), neg = gpuc_attr_i(c->n, "detect_negative", 1);
  char expr[128];
  snprintf(expr, sizeof expr, "isinf(x0) && ((x0 > 0 && %d) || (x0 < 0 && %d))", pos, neg);
  return cg_elementwise(c, IN0, 1, cg_compute_type(c->in[0]->dt), NULL, expr);
}

/* activations with attributes: literals baked into the source */
static int with_attrs(LowerCtx *c, const char *fmt, double a, double b) {
  char la[64], lb[64], expr[512];
  const char *ct = cg_compute_type(c->in[0]->dt);
  if (!is_float_ct(ct)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(c->in[0]->dt));
  cg_float_lit(la, sizeof la, a, ct);
  cg_float_lit(lb, sizeof lb, b, ct);
  snprintf(expr, sizeof expr, fmt, la, lb, la, lb, la, lb);
  return cg_elementwise(c, IN0, 1, ct, NULL, expr);
}
/* in the format strings the literals alternate: %1$s alpha, %2$s beta ... */
int lower_Elu(LowerCtx *c) {
  return with_attrs(c, "x0 < 0 ? %s * (exp(x0) - 1) : x0%.0s", gpuc_attr_f(c->n, "alpha", 1.0f), 0);
}
int lower_Celu(LowerCtx *c) {
  double a = gpuc_attr_f(c->n, "alpha", 1.0f);
  char la[64], expr[256];
  cg_float_lit(la, sizeof la, a, cg_compute_type(c->in[0]->dt));
  snprintf(expr, sizeof expr, "fmax((decltype(x0))0, x0) + fmin((decltype(x0))0, %s * (exp(x0 / %s) - 1))", la, la);
  return cg_elementwise(c, IN0, 1, cg_compute_type(c->in[0]->dt), NULL, expr);
}
int lower_Selu(LowerCtx *c) {
  return with_attrs(c, "x0 <= 0 ? %2$s * (%1$s * exp(x0) - %1$s) : %2$s * x0",
                    gpuc_attr_f(c->n, "alpha", 1.67326319217681884765625f),
                    gpuc_attr_f(c->n, "gamma", 1.05070102214813232421875f));
}
int lower_LeakyRelu(LowerCtx *c) {
  return with_attrs(c, "x0 < 0 ? %s * x0 : x0%.0s", gpuc_attr_f(c->n, "alpha", 0.01f), 0);
}
int lower_ThresholdedRelu(LowerCtx *c) {
  return with_attrs(c, "x0 > %s ? x0 : (decltype(x0))0%.0s", gpuc_attr_f(c->n, "alpha", 1.0f), 0);
}
int lower_HardSigmoid(LowerCtx *c) {
  return with_attrs(c, "fmax((decltype(x0))0, fmin((decltype(x0))1, %s * x0 + %s))",
                    gpuc_attr_f(c->n, "alpha", 0.2f), gpuc_attr_f(c->n, "beta", 0.5f));
}
int lower_Shrink(LowerCtx *c) {
  const char *ct = cg_compute_type(c->in[0]->dt);
  char lb[64], bi[64], expr[256];
  cg_float_lit(lb, sizeof lb, gpuc_attr_f(c->n, "lambd", 0.5f), is_float_ct(ct) ? ct : "double");
  cg_float_lit(bi, sizeof bi, gpuc_attr_f(c->n, "bias", 0.0f), is_float_ct(ct) ? ct : "double");
  snprintf(expr, sizeof expr, "x0 < -%s ? x0 + %s : (x0 > %s ? x0 - %s : 0)", lb, bi, lb, bi);
  return cg_elementwise(c, IN0, 1, is_float_ct(ct) ? ct : "double", NULL, expr);
}

/* ---- binary and variadic ---- */
static const char *bin_ct(LowerCtx *c) { return cg_compute_type(c->in[0]->dt); }

/* Binary ops broadcast B the way inference did: numpy rules, or before
 * opset 7 the legacy axis/PRelu forms (gpuc_ew_bcast_view). */
static int binary(LowerCtx *c, const char *ct, const char *expr) {
  Tensor tmp;
  OpCtx oc = {.g = c->g, .n = c->n, .nin = c->nin, .nout = c->nout, .in = c->in,
              .out = (Tensor **)c->out, .err = c->err};
  const Tensor *b = gpuc_ew_bcast_view(&oc, 1, &tmp);
  if (!b) return -1;
  const Tensor *ins[2] = {c->in[0], b};
  LowerCtx v = *c;
  v.in = ins;
  int rc = cg_elementwise(&v, IN01, 2, ct, NULL, expr);
  c->nkernels_emitted = v.nkernels_emitted;
  return rc;
}
#define BINARY(Name, fexpr, iexpr) \
  int lower_##Name(LowerCtx *c) { const char *ct = bin_ct(c); \
    return binary(c, ct, is_float_ct(ct) ? fexpr : iexpr); }
BINARY(Add, "x0 + x1", "(long long)((unsigned long long)x0 + (unsigned long long)x1)")
BINARY(Sub, "x0 - x1", "(long long)((unsigned long long)x0 - (unsigned long long)x1)")
BINARY(Mul, "x0 * x1", "(long long)((unsigned long long)x0 * (unsigned long long)x1)")
/* integer division truncates; by zero gives 0 like the reference. A
 * half-precision output divided by a constant scalar multiplies by its
 * reciprocal instead: an IEEE fp32 division is a dozen instructions and
 * made BERT's GELU kernel (x / sqrt(2) inside) instruction-bound; the
 * product differs from the quotient by at most one fp32 ulp, far below
 * the half rounding that follows. */
int lower_Div(LowerCtx *c) {
  const char *ct = bin_ct(c);
  const Tensor *d = c->in[1], *y = c->out[0];
  if (is_float_ct(ct) && (y->dt == GPUC_DT_F16 || y->dt == GPUC_DT_BF16) && d->data && gpuc_numel(d) == 1 &&
      gpuc_numel(c->in[0]) == gpuc_numel(y)) {
    double v = gpuc_get_f64(d, 0);
    if (v != 0 && isfinite(v) && isfinite(1 / v)) {
      char lit[64], expr[96];
      cg_float_lit(lit, sizeof lit, 1 / v, ct);
      snprintf(expr, sizeof expr, "x0 * %s", lit);
      return cg_elementwise(c, IN0, 1, ct, NULL, expr);
    }
  }
  return binary(c, ct, is_float_ct(ct) ? "x0 / x1" : "x1 == 0 ? 0 : (x1 == -1 ? -x0 : x0 / x1)");
}
BINARY(Equal, "x0 == x1", "x0 == x1")
BINARY(Greater, "x0 > x1", "x0 > x1")
BINARY(GreaterOrEqual, "x0 >= x1", "x0 >= x1")
BINARY(Less, "x0 < x1", "x0 < x1")
BINARY(LessOrEqual, "x0 <= x1", "x0 <= x1")
BINARY(And, "x0 && x1", "x0 && x1")
BINARY(Or, "x0 || x1", "x0 || x1")
BINARY(Xor, "(x0 != 0) != (x1 != 0)", "(x0 != 0) != (x1 != 0)")

/* Bitwise*-18 and BitShift on integers in long long (u64 as its bit
 * pattern, narrower types sign- or zero-extended); the store narrows by
 * wrapping, as the reference does. BitShift: an amount outside [0, bit
 * width) gives 0, or -1 for a right shift of a negative signed value (a
 * negative x1 is a negative amount or a u64 one >= 2^63); signed right
 * shifts are arithmetic. */
static int bitwise(LowerCtx *c, const char *expr) {
  if (!gpuc_dtype_is_int(c->in[0]->dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(c->in[0]->dt));
  return binary(c, "long long", expr);
}
int lower_BitwiseAnd(LowerCtx *c) { return bitwise(c, "x0 & x1"); }
int lower_BitwiseOr(LowerCtx *c) { return bitwise(c, "x0 | x1"); }
int lower_BitwiseXor(LowerCtx *c) { return bitwise(c, "x0 ^ x1"); }
int lower_BitwiseNot(LowerCtx *c) {
  if (!gpuc_dtype_is_int(c->in[0]->dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(c->in[0]->dt));
  return cg_elementwise(c, IN0, 1, "long long", NULL, "~x0");
}
int lower_BitShift(LowerCtx *c) {
  int left = gpuc_bitshift_left(c->n), w = (int)gpuc_dtype_size(c->in[0]->dt) * 8;
  bool sgn = gpuc_dtype_is_signed(c->in[0]->dt);
  if (left < 0) return lower_fail(c, "direction must be \"LEFT\" or \"RIGHT\"");
  char expr[256];
  if (left)
    snprintf(expr, sizeof expr, "(x1 < 0 || x1 >= %d) ? 0LL : (long long)((unsigned long long)x0 << x1)", w);
  else if (sgn)
    snprintf(expr, sizeof expr, "(x1 < 0 || x1 >= %d) ? (x0 < 0 ? -1LL : 0LL) : (x0 >> x1)", w);
  else
    snprintf(expr, sizeof expr, "(x1 < 0 || x1 >= %d) ? 0LL : (long long)((unsigned long long)x0 >> x1)", w);
  return bitwise(c, expr);
}

int lower_Pow(LowerCtx *c) {
  /* exponent may have another dtype: compute in double for exactness on
   * integer bases, float otherwise */
  const char *ct = is_float_ct(cg_compute_type(c->in[0]->dt)) ? cg_compute_type(c->in[0]->dt) : "double";
  return binary(c, ct, "pow(x0, x1)");
}
int lower_Mod(LowerCtx *c) {
  const char *ct = bin_ct(c);
  if (is_float_ct(ct) && !gpuc_attr_i(c->n, "fmod", 0)) /* Python-style: the divisor's sign */
    return binary(c, ct, "(fmod(x0, x1) != 0 && ((fmod(x0, x1) < 0) != (x1 < 0))) ? fmod(x0, x1) + x1 : fmod(x0, x1)");
  if (is_float_ct(ct)) return binary(c, ct, "fmod(x0, x1)");
  if (gpuc_attr_i(c->n, "fmod", 0)) /* C remainder: the dividend's sign */
    return binary(c, ct, "x1 == 0 ? 0 : (x1 == -1 ? 0 : x0 % x1)");
  /* integer mod takes the divisor's sign; by zero gives 0 */
  return binary(c, ct,
                        "x1 == 0 ? 0 : (x1 == -1 ? 0 : ((x0 % x1 != 0 && ((x0 % x1 < 0) != (x1 < 0))) ? x0 % x1 + x1 : x0 % x1))");
}
int lower_PRelu(LowerCtx *c) { return binary(c, bin_ct(c), "x0 < 0 ? x0 * x1 : x0"); }
int lower_Where(LowerCtx *c) {
  const char *ct = cg_compute_type(c->in[1]->dt);
  return cg_elementwise(c, IN012, 3, ct, NULL, "x0 ? x1 : x2");
}

/* Max/Min/Sum/Mean: fold the present inputs left to right into acc.
 * `step` is a statement in acc and x (the next input). */
static int variadic(LowerCtx *c, const char *step, bool mean) {
  int which[GPUC_MAX_IO], n = 0;
  for (int k = 0; k < c->nin; k++) if (c->in[k]) which[n++] = k;
  const char *ct = cg_compute_type(c->in[0]->dt);
  StrBuf pre = {0};
  sb_printf(&pre, "%s acc = x0;", ct);
  for (int k = 1; k < n; k++) sb_printf(&pre, " { %s x = x%d; %s }", ct, k, step);
  if (mean) sb_printf(&pre, " acc = acc / %d;", n);
  int rc = pre.oom ? lower_fail(c, "out of memory") : cg_elementwise(c, which, n, ct, pre.s, "acc");
  free(pre.s);
  return rc;
}
/* NaN propagates through Max/Min as in the reference */
int lower_Max(LowerCtx *c) { return variadic(c, "if (x != x || x > acc) acc = x;", false); }
int lower_Min(LowerCtx *c) { return variadic(c, "if (x != x || x < acc) acc = x;", false); }
int lower_Sum(LowerCtx *c) { return variadic(c, "acc = acc + x;", false); }
int lower_Mean(LowerCtx *c) { return variadic(c, "acc = acc + x;", true); }

int lower_Clip(LowerCtx *c) {
  const char *ct = cg_compute_type(c->in[0]->dt);
  if (c->g->opset < 11) { /* attributes */
    char lo[64], hi[64], expr[256];
    cg_float_lit(lo, sizeof lo, gpuc_attr_f(c->n, "min", -INFINITY), ct);
    cg_float_lit(hi, sizeof hi, gpuc_attr_f(c->n, "max", INFINITY), ct);
    snprintf(expr, sizeof expr, "x0 < %s ? %s : (x0 > %s ? %s : x0)", lo, lo, hi, hi);
    return cg_elementwise(c, IN0, 1, ct, NULL, expr);
  }
  int which[3] = {0}, n = 1;
  const char *lo = "x0", *hi = "x0";
  if (c->nin > 1 && c->in[1]) { which[n] = 1; lo = n == 1 ? "x1" : "x2"; n++; }
  if (c->nin > 2 && c->in[2]) { which[n] = 2; hi = n == 1 ? "x1" : "x2"; n++; }
  char expr[256];
  snprintf(expr, sizeof expr, "x0 < %s ? %s : (x0 > %s ? %s : x0)", lo, lo, hi, hi);
  return cg_elementwise(c, which, n, ct, NULL, expr);
}

/* ---- types ---- */
int lower_Cast(LowerCtx *c) {
  GpucDType from = c->in[0]->dt, to = c->out[0]->dt;
  /* convert through the wider of the two compute types */
  const char *ct = (from == GPUC_DT_F64 || to == GPUC_DT_F64) ? "double"
                 : gpuc_dtype_is_float(from) ? "float"
                 : "long long";
  if (gpuc_dtype_is_float(from) && gpuc_dtype_is_int(to))
    return cg_elementwise(c, IN0, 1, "double", NULL, "(long long)x0");
  return cg_elementwise(c, IN0, 1, ct, NULL, "x0");
}
int lower_CastLike(LowerCtx *c) { return lower_Cast(c); }

/* Identity/Dropout(inference): a view when the planner allows, else a copy.
 * The optional Dropout mask is all ones. */
int lower_Identity(LowerCtx *c) {
  int r = cg_alias(c, 0, c->tin[0]);
  if (r <= 0) return r;
  return cg_copy(c, c->tin[0], c->tout[0], gpuc_tensor_bytes(c->out[0]));
}
int lower_Dropout(LowerCtx *c) {
  /* before opset 7 Dropout trains unless is_test is set (the reference's rule) */
  if (c->g->opset < 7 && !gpuc_attr_i(c->n, "is_test", 0)) return lower_unsupported(c, "Dropout in training mode");
  if (c->nin > 2 && c->in[2]) {
    if (!c->in[2]->data) return lower_unsupported(c, "training_mode must be a constant");
    if (gpuc_get_i64(c->in[2], 0)) return lower_unsupported(c, "Dropout in training mode");
  }
  if (lower_Identity(c)) return -1;
  if (c->nout > 1 && c->out[1]) {
    LowerCtx m = *c;
    const Tensor *mo[1] = {c->out[1]};
    uint32_t mt[1] = {c->tout[1]};
    m.out = mo;
    m.tout = mt;
    m.nout = 1;
    if (cg_elementwise(&m, IN0, 1, "float", NULL, "1")) return -1;
    c->nkernels_emitted = m.nkernels_emitted;
  }
  return 0;
}
