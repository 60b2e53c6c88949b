/* Reference kernels for the broadcasting elementwise ops (binary
 * arithmetic, logic, comparisons, Pow, Mod, PRelu, Where, the variadic
 * Max/Min/Mean/Sum) and the row engine all elementwise kernels share (see
 * ref_ew.h).
 *
 * Integer arithmetic is exact in int64 with two's complement wrapping (done
 * in uint64, so overflow is never UB) and narrowed on store; u64 operands
 * compare and divide as unsigned. Integer Div truncates toward zero; x / 0
 * and x % 0 give 0, INT_MIN / -1 wraps to INT_MIN: nothing traps. */
#include "ref_ew.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the row engine ---------------------------------------------------- */

/* Out-of-range values saturate instead of being UB; NaN gives 0. */
static int64_t sat_i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}
static uint64_t sat_u64(double v) {
  if (v != v) return 0;
  if (v >= 1.8446744073709552e19) return UINT64_MAX;
  if (v >= 9.2233720368547758e18) return (uint64_t)v;
  return (uint64_t)sat_i64(v); /* negative values wrap, as for narrower types */
}

/* double -> float rounded to odd: truncate, and set the last bit when the
 * conversion was inexact. Rounding that to f16/bf16 (far fewer bits) then
 * gives the correctly rounded result of the double, with no double
 * rounding. */
static float f64_to_f32_odd(double d) {
  float f = (float)d;
  if (isfinite(f) && (double)f != d) {
    uint32_t b;
    memcpy(&b, &f, 4);
    if (fabs((double)f) > fabs(d)) b--; /* step back toward zero; |f| > 0 here */
    b |= 1;
    memcpy(&f, &b, 4);
  }
  return f;
}
static uint16_t f64_to_f16(double d) { return gpuc_f32_to_f16(f64_to_f32_odd(d)); }
static uint16_t f64_to_bf16(double d) { return gpuc_f32_to_bf16(f64_to_f32_odd(d)); }

#define CONV_ID(x) (x)
#define CONV_F16(x) ((double)gpuc_f16_to_f32(x))
#define CONV_BF16(x) ((double)gpuc_bf16_to_f32(x))
#define CONV_BOOL(x) ((x) != 0)
#define CONV_SATI(x) sat_i64((double)(x))
#define CONV_SATI16(x) sat_i64((double)gpuc_f16_to_f32(x))
#define CONV_SATIBF(x) sat_i64((double)gpuc_bf16_to_f32(x))

/* one dtype case of a load into buf (type BT) from C type CT */
#define LOAD_CASE(DTE, CT, BT, CONV)                                  \
  case GPUC_DT_##DTE: {                                               \
    const CT *p = (const CT *)t->data + off;                          \
    if (step) {                                                       \
      for (int64_t i = 0; i < n; i++) buf[i] = (BT)CONV(p[i]);        \
    } else {                                                          \
      BT v = (BT)CONV(p[0]);                                          \
      for (int64_t i = 0; i < n; i++) buf[i] = v;                     \
    }                                                                 \
    break;                                                            \
  }

void ew_load_f(const Tensor *t, int64_t off, int64_t step, int64_t n, double *buf) {
  switch (t->dt) {
    LOAD_CASE(F32, float, double, CONV_ID)
    LOAD_CASE(F16, uint16_t, double, CONV_F16)
    LOAD_CASE(BF16, uint16_t, double, CONV_BF16)
    LOAD_CASE(F64, double, double, CONV_ID)
    LOAD_CASE(I8, int8_t, double, CONV_ID)
    LOAD_CASE(U8, uint8_t, double, CONV_ID)
    LOAD_CASE(I16, int16_t, double, CONV_ID)
    LOAD_CASE(U16, uint16_t, double, CONV_ID)
    LOAD_CASE(I32, int32_t, double, CONV_ID)
    LOAD_CASE(U32, uint32_t, double, CONV_ID)
    LOAD_CASE(I64, int64_t, double, CONV_ID)
    LOAD_CASE(U64, uint64_t, double, CONV_ID)
    LOAD_CASE(BOOL, uint8_t, double, CONV_BOOL)
  default: GPUC_ASSERT(!"bad dtype");
  }
}

void ew_load_i(const Tensor *t, int64_t off, int64_t step, int64_t n, int64_t *buf) {
  switch (t->dt) {
    LOAD_CASE(F32, float, int64_t, CONV_SATI)
    LOAD_CASE(F16, uint16_t, int64_t, CONV_SATI16)
    LOAD_CASE(BF16, uint16_t, int64_t, CONV_SATIBF)
    LOAD_CASE(F64, double, int64_t, CONV_SATI)
    LOAD_CASE(I8, int8_t, int64_t, CONV_ID)
    LOAD_CASE(U8, uint8_t, int64_t, CONV_ID)
    LOAD_CASE(I16, int16_t, int64_t, CONV_ID)
    LOAD_CASE(U16, uint16_t, int64_t, CONV_ID)
    LOAD_CASE(I32, int32_t, int64_t, CONV_ID)
    LOAD_CASE(U32, uint32_t, int64_t, CONV_ID)
    LOAD_CASE(I64, int64_t, int64_t, CONV_ID)
    LOAD_CASE(U64, uint64_t, int64_t, CONV_ID) /* bit pattern */
    LOAD_CASE(BOOL, uint8_t, int64_t, CONV_BOOL)
  default: GPUC_ASSERT(!"bad dtype");
  }
}
#undef LOAD_CASE

#define STORE_CASE(DTE, CT, CONV)                                     \
  case GPUC_DT_##DTE: {                                               \
    CT *p = (CT *)t->data + off;                                      \
    for (int64_t i = 0; i < n; i++) p[i] = (CT)CONV(buf[i]);          \
    break;                                                            \
  }
#define CONV_SATU(x) sat_u64(x)
#define CONV_TRUNC(x) sat_i64(x)

void ew_store_f(Tensor *t, int64_t off, int64_t n, const double *buf) {
  switch (t->dt) {
    STORE_CASE(F32, float, CONV_ID)
    STORE_CASE(F16, uint16_t, f64_to_f16)
    STORE_CASE(BF16, uint16_t, f64_to_bf16)
    STORE_CASE(F64, double, CONV_ID)
    STORE_CASE(I8, int8_t, CONV_TRUNC)
    STORE_CASE(U8, uint8_t, CONV_TRUNC)
    STORE_CASE(I16, int16_t, CONV_TRUNC)
    STORE_CASE(U16, uint16_t, CONV_TRUNC)
    STORE_CASE(I32, int32_t, CONV_TRUNC)
    STORE_CASE(U32, uint32_t, CONV_TRUNC)
    STORE_CASE(I64, int64_t, CONV_TRUNC)
    STORE_CASE(U64, uint64_t, CONV_SATU)
    STORE_CASE(BOOL, uint8_t, CONV_BOOL)
  default: GPUC_ASSERT(!"bad dtype");
  }
}

void ew_store_i(Tensor *t, int64_t off, int64_t n, const int64_t *buf, bool uns) {
  if (ew_is_float(t->dt)) {
    if (t->dt == GPUC_DT_F32) { /* direct, so f32 rounds once */
      float *p = (float *)t->data + off;
      if (uns) for (int64_t i = 0; i < n; i++) p[i] = (float)(uint64_t)buf[i];
      else for (int64_t i = 0; i < n; i++) p[i] = (float)buf[i];
      return;
    }
    double d[EW_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {
      int64_t m = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;
      for (int64_t i = 0; i < m; i++)
        d[i] = uns ? (double)(uint64_t)buf[i0 + i] : (double)buf[i0 + i];
      ew_store_f(t, off + i0, m, d);
    }
    return;
  }
  switch (t->dt) {
    STORE_CASE(I8, int8_t, CONV_ID)
    STORE_CASE(U8, uint8_t, CONV_ID)
    STORE_CASE(I16, int16_t, CONV_ID)
    STORE_CASE(U16, uint16_t, CONV_ID)
    STORE_CASE(I32, int32_t, CONV_ID)
    STORE_CASE(U32, uint32_t, CONV_ID)
    STORE_CASE(I64, int64_t, CONV_ID)
    STORE_CASE(U64, uint64_t, CONV_ID)
    STORE_CASE(BOOL, uint8_t, CONV_BOOL)
  default: GPUC_ASSERT(!"bad dtype");
  }
}
#undef STORE_CASE

/* Broadcast plan: per input, the element stride along each output dim (0
 * where the input is broadcast). Output dims of size 1 are dropped and
 * neighbours that every input walks contiguously (or not at all) are
 * merged, so same-shape inputs become one long row and [N,C,H,W] + [C,1,1]
 * becomes rows of H*W. */
typedef struct Plan {
  int rank;
  int64_t dims[GPUC_MAX_RANK];
  int64_t (*st)[GPUC_MAX_RANK]; /* [nin][rank] */
} Plan;

static int plan_build(OpCtx *c, int nin, const Tensor *const *ins, const Tensor *out, Plan *p) {
  int R = out->rank;
  for (int k = 0; k < nin; k++) {
    const Tensor *t = ins[k];
    int sh = R - t->rank;
    bool ok = sh >= 0;
    int64_t s = 1;
    for (int d = t->rank - 1; ok && d >= 0; d--) {
      int64_t id = t->dims[d], od = out->dims[d + sh];
      if (id == od) p->st[k][d + sh] = id == 1 ? 0 : s;
      else if (id == 1) p->st[k][d + sh] = 0;
      else ok = false;
      s *= id;
    }
    if (!ok) {
      char a[160], b[160];
      gpuc_shape_str(t, a, sizeof a);
      gpuc_shape_str(out, b, sizeof b);
      return gpuc_op_fail(c, "input %d of shape %s does not broadcast to output shape %s", k, a, b);
    }
  }
  int r = 0;
  for (int od = 0; od < R; od++) {
    int64_t n = out->dims[od];
    if (n == 1) continue;
    bool merge = r > 0;
    for (int k = 0; merge && k < nin; k++)
      if (p->st[k][r - 1] != p->st[k][od] * n) merge = false;
    if (merge) {
      p->dims[r - 1] *= n;
      for (int k = 0; k < nin; k++) p->st[k][r - 1] = p->st[k][od];
    } else {
      p->dims[r] = n;
      for (int k = 0; k < nin; k++) p->st[k][r] = p->st[k][od];
      r++;
    }
  }
  if (r == 0) { /* a single element */
    p->dims[0] = 1;
    for (int k = 0; k < nin; k++) p->st[k][0] = 0;
    r = 1;
  }
  p->rank = r;
  return 0;
}

int ew_for_rows(OpCtx *c, int nin, const Tensor *const *ins, const Tensor *out, EwRowFn fn,
                void *ud) {
  int64_t total = gpuc_numel(out);
  if (total < 0) return gpuc_op_fail(c, "output shape is unknown");
  if (total == 0) return 0;
  size_t nk = nin > 0 ? (size_t)nin : 1;
  Plan p = {.rank = 0};
  p.st = calloc(nk, sizeof *p.st);
  int64_t *off = calloc(nk * 3, sizeof *off); /* row start, chunk start, step */
  if (!p.st || !off) {
    free(p.st);
    free(off);
    return gpuc_op_fail(c, "out of host memory");
  }
  int rc = plan_build(c, nin, ins, out, &p);
  if (rc == 0) {
    int R = p.rank;
    int64_t L = p.dims[R - 1], outer = total / L, idx[GPUC_MAX_RANK] = {0};
    int64_t *cur = off + nk, *step = off + 2 * nk;
    for (int k = 0; k < nin; k++) step[k] = p.st[k][R - 1];
    for (int64_t o = 0; o < outer; o++) {
      for (int64_t c0 = 0; c0 < L; c0 += EW_BLOCK) {
        for (int k = 0; k < nin; k++) cur[k] = off[k] + c0 * step[k];
        fn(ud, L - c0 < EW_BLOCK ? L - c0 : EW_BLOCK, o * L + c0, cur, step);
      }
      for (int d = R - 2; d >= 0; d--) { /* odometer over the outer dims */
        idx[d]++;
        for (int k = 0; k < nin; k++) off[k] += p.st[k][d];
        if (idx[d] < p.dims[d]) break;
        for (int k = 0; k < nin; k++) off[k] -= p.st[k][d] * p.dims[d];
        idx[d] = 0;
      }
    }
  }
  free(p.st);
  free(off);
  return rc;
}

/* ---- scalar semantics -------------------------------------------------- */

static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static int64_t int_div(int64_t a, int64_t b, bool uns) {
  if (b == 0) return 0;
  if (uns) return (int64_t)((uint64_t)a / (uint64_t)b);
  if (b == -1) return wrap_sub(0, a); /* INT64_MIN / -1 wraps */
  return a / b;
}

/* fmod: sign of the dividend (C %); else Python/numpy mod: sign of the
 * divisor. */
static int64_t int_mod(int64_t a, int64_t b, bool uns, bool fmod_sem) {
  if (b == 0) return 0;
  if (uns) return (int64_t)((uint64_t)a % (uint64_t)b);
  if (b == -1) return 0;
  int64_t r = a % b;
  if (!fmod_sem && r != 0 && (r < 0) != (b < 0)) r += b;
  return r;
}

static double float_mod(double a, double b, bool fmod_sem) {
  double r = fmod(a, b);
  if (!fmod_sem && r != 0 && (r < 0) != (b < 0)) r += b;
  return r;
}

/* Integer power by squaring, wrapping. A negative exponent gives the
 * truncated 1 / base^-e: 0 unless |base| == 1 (0^-e is 0 too). */
static int64_t int_pow(int64_t base, int64_t e, bool e_uns) {
  if (!e_uns && e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
  uint64_t r = 1, b = (uint64_t)base, k = (uint64_t)e;
  for (; k; k >>= 1) {
    if (k & 1) r *= b;
    b *= b;
  }
  return (int64_t)r;
}

static bool int_less(int64_t a, int64_t b, bool uns) {
  return uns ? (uint64_t)a < (uint64_t)b : a < b;
}

/* ---- binary ops -------------------------------------------------------- */

typedef struct Bin {
  GpucOp op;
  const Tensor *a, *b;
  Tensor *o;
  bool f;          /* compute in double */
  bool f32;        /* all f32 and + - * /: straight float loops */
  bool to_bool;    /* comparison/logic: writes the bool output itself */
  bool uns;        /* u64 operands */
  bool b_uns;      /* Pow: u64 exponent */
  bool fmod_sem;   /* Mod fmod=1 */
} Bin;

#define LOOP(expr)                                                   \
  for (int64_t i = 0; i < n; i++) {                                  \
    x = a[i];                                                        \
    y = b[i];                                                        \
    o[i] = (expr);                                                   \
  }                                                                  \
  break

/* o = a op b in double (also the combiner for Max/Min/Sum/Mean) */
static void bin_f(const Bin *p, GpucOp op, int64_t n, double *o, const double *a,
                  const double *b) {
  double x, y;
  switch (op) {
  case GPUC_OP_ADD: case GPUC_OP_SUM: case GPUC_OP_MEAN: LOOP(x + y);
  case GPUC_OP_SUB: LOOP(x - y);
  case GPUC_OP_MUL: LOOP(x * y);
  case GPUC_OP_DIV: LOOP(x / y);
  case GPUC_OP_POW: LOOP(pow(x, y));
  case GPUC_OP_MOD: LOOP(float_mod(x, y, p->fmod_sem));
  /* NaN wins, as numpy's maximum/minimum */
  case GPUC_OP_MAX: LOOP(x > y || x != x ? x : y);
  case GPUC_OP_MIN: LOOP(x < y || x != x ? x : y);
  default: GPUC_ASSERT(!"not a float binary op");
  }
}

static void bin_i(const Bin *p, GpucOp op, int64_t n, int64_t *o, const int64_t *a,
                  const int64_t *b) {
  int64_t x, y;
  bool uns = p->uns;
  switch (op) {
  case GPUC_OP_ADD: case GPUC_OP_SUM: LOOP(wrap_add(x, y));
  case GPUC_OP_SUB: LOOP(wrap_sub(x, y));
  case GPUC_OP_MUL: LOOP(wrap_mul(x, y));
  case GPUC_OP_DIV: LOOP(int_div(x, y, uns));
  case GPUC_OP_POW: LOOP(int_pow(x, y, p->b_uns));
  case GPUC_OP_MOD: LOOP(int_mod(x, y, uns, p->fmod_sem));
  case GPUC_OP_MAX: LOOP(int_less(x, y, uns) ? y : x);
  case GPUC_OP_MIN: LOOP(int_less(y, x, uns) ? y : x);
  default: GPUC_ASSERT(!"not an integer binary op");
  }
}

static void cmp_f(GpucOp op, int64_t n, uint8_t *o, const double *a, const double *b) {
  double x, y;
  switch (op) {
  case GPUC_OP_EQUAL: LOOP(x == y);
  case GPUC_OP_GREATER: LOOP(x > y);
  case GPUC_OP_GREATEROREQUAL: LOOP(x >= y);
  case GPUC_OP_LESS: LOOP(x < y);
  case GPUC_OP_LESSOREQUAL: LOOP(x <= y);
  default: GPUC_ASSERT(!"not a float comparison");
  }
}

static void cmp_i(GpucOp op, bool uns, int64_t n, uint8_t *o, const int64_t *a,
                  const int64_t *b) {
  int64_t x, y;
  switch (op) {
  case GPUC_OP_EQUAL: LOOP(x == y);
  case GPUC_OP_GREATER: LOOP(int_less(y, x, uns));
  case GPUC_OP_GREATEROREQUAL: LOOP(!int_less(x, y, uns));
  case GPUC_OP_LESS: LOOP(int_less(x, y, uns));
  case GPUC_OP_LESSOREQUAL: LOOP(!int_less(y, x, uns));
  case GPUC_OP_AND: LOOP(x && y);
  case GPUC_OP_OR: LOOP(x || y);
  case GPUC_OP_XOR: LOOP((x != 0) != (y != 0));
  default: GPUC_ASSERT(!"not an integer comparison");
  }
}
#undef LOOP

/* f32 + - * / straight from the tensors (row steps 0 or 1). */
#define F32LOOP(expr)                                                              \
  if (sa && sb) {                                                                  \
    for (int64_t i = 0; i < n; i++) { float x = a[i], y = b[i]; o[i] = (expr); }   \
  } else {                                                                         \
    for (int64_t i = 0; i < n; i++) {                                              \
      float x = a[i * sa], y = b[i * sb];                                          \
      o[i] = (expr);                                                               \
    }                                                                              \
  }                                                                                \
  break
static void bin_f32(const Bin *p, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const float *a = (const float *)p->a->data + io[0], *b = (const float *)p->b->data + io[1];
  float *o = (float *)p->o->data + oo;
  int64_t sa = is[0], sb = is[1];
  switch (p->op) {
  case GPUC_OP_ADD: F32LOOP(x + y);
  case GPUC_OP_SUB: F32LOOP(x - y);
  case GPUC_OP_MUL: F32LOOP(x * y);
  case GPUC_OP_DIV: F32LOOP(x / y);
  default: GPUC_ASSERT(!"not an f32 fast op");
  }
}
#undef F32LOOP

static void bin_row(void *ud, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const Bin *p = ud;
  if (p->f32) {
    bin_f32(p, n, oo, io, is);
  } else if (p->f) {
    double a[EW_BLOCK], b[EW_BLOCK], o[EW_BLOCK];
    ew_load_f(p->a, io[0], is[0], n, a);
    ew_load_f(p->b, io[1], is[1], n, b);
    if (p->to_bool) {
      cmp_f(p->op, n, (uint8_t *)p->o->data + oo, a, b);
    } else {
      bin_f(p, p->op, n, o, a, b);
      ew_store_f(p->o, oo, n, o);
    }
  } else {
    int64_t a[EW_BLOCK], b[EW_BLOCK], o[EW_BLOCK];
    ew_load_i(p->a, io[0], is[0], n, a);
    ew_load_i(p->b, io[1], is[1], n, b);
    if (p->to_bool) {
      cmp_i(p->op, p->uns, n, (uint8_t *)p->o->data + oo, a, b);
    } else {
      bin_i(p, p->op, n, o, a, b);
      ew_store_i(p->o, oo, n, o, p->uns);
    }
  }
}

static int run_binary(OpCtx *c, bool to_bool) {
  Tensor tmp;
  const Tensor *b = gpuc_ew_bcast_view(c, 1, &tmp);
  if (!b) return -1;
  const Tensor *a = c->in[0];
  GpucOp op = c->n->op;
  Bin p = {.op = op, .a = a, .b = b, .o = c->out[0], .to_bool = to_bool,
           .uns = a->dt == GPUC_DT_U64, .b_uns = b->dt == GPUC_DT_U64,
           .fmod_sem = gpuc_attr_i(c->n, "fmod", 0) != 0};
  /* Pow computes in double when either side is a float (an int base with
   * a float exponent is truncated back on store); else exactly in int64 */
  p.f = ew_is_float(a->dt) || (op == GPUC_OP_POW && ew_is_float(b->dt));
  p.f32 = a->dt == GPUC_DT_F32 && b->dt == GPUC_DT_F32 && !to_bool &&
          (op == GPUC_OP_ADD || op == GPUC_OP_SUB || op == GPUC_OP_MUL || op == GPUC_OP_DIV);
  const Tensor *ins[2] = {a, b};
  return ew_for_rows(c, 2, ins, c->out[0], bin_row, &p);
}

int ref_Add(OpCtx *c) { return run_binary(c, false); }
int ref_Sub(OpCtx *c) { return run_binary(c, false); }
int ref_Mul(OpCtx *c) { return run_binary(c, false); }
int ref_Div(OpCtx *c) { return run_binary(c, false); }
int ref_Pow(OpCtx *c) { return run_binary(c, false); }
int ref_Mod(OpCtx *c) { return run_binary(c, false); }
int ref_And(OpCtx *c) { return run_binary(c, true); }
int ref_Or(OpCtx *c) { return run_binary(c, true); }
int ref_Xor(OpCtx *c) { return run_binary(c, true); }
int ref_Equal(OpCtx *c) { return run_binary(c, true); }
int ref_Greater(OpCtx *c) { return run_binary(c, true); }
int ref_GreaterOrEqual(OpCtx *c) { return run_binary(c, true); }
int ref_Less(OpCtx *c) { return run_binary(c, true); }
int ref_LessOrEqual(OpCtx *c) { return run_binary(c, true); }

/* ---- PRelu: y = x < 0 ? slope * x : x ---------------------------------- */

static void prelu_row(void *ud, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const Bin *p = ud;
  if (p->f) {
    double x[EW_BLOCK], s[EW_BLOCK];
    ew_load_f(p->a, io[0], is[0], n, x);
    ew_load_f(p->b, io[1], is[1], n, s);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] < 0 ? x[i] * s[i] : x[i];
    ew_store_f(p->o, oo, n, x);
  } else {
    int64_t x[EW_BLOCK], s[EW_BLOCK];
    ew_load_i(p->a, io[0], is[0], n, x);
    ew_load_i(p->b, io[1], is[1], n, s);
    if (!p->uns) /* unsigned values are never negative */
      for (int64_t i = 0; i < n; i++) x[i] = x[i] < 0 ? wrap_mul(x[i], s[i]) : x[i];
    ew_store_i(p->o, oo, n, x, p->uns);
  }
}

int ref_PRelu(OpCtx *c) {
  Tensor tmp;
  const Tensor *s = gpuc_ew_bcast_view(c, 1, &tmp);
  if (!s) return -1;
  Bin p = {.op = GPUC_OP_PRELU, .a = c->in[0], .b = s, .o = c->out[0],
           .f = ew_is_float(c->in[0]->dt), .uns = c->in[0]->dt == GPUC_DT_U64};
  const Tensor *ins[2] = {c->in[0], s};
  return ew_for_rows(c, 2, ins, c->out[0], prelu_row, &p);
}

/* ---- Where(cond, X, Y): bytes of X or Y, any dtype --------------------- */

typedef struct WhereCtx {
  const Tensor *cond, *x, *y;
  Tensor *o;
  size_t es;
} WhereCtx;

static void where_row(void *ud, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const WhereCtx *w = ud;
  const uint8_t *cd = (const uint8_t *)w->cond->data + io[0];
  const char *x = (const char *)w->x->data + (size_t)io[1] * w->es;
  const char *y = (const char *)w->y->data + (size_t)io[2] * w->es;
  char *o = (char *)w->o->data + (size_t)oo * w->es;
  size_t es = w->es;
  for (int64_t i = 0; i < n; i++) {
    const char *src = cd[i * is[0]] ? x + (size_t)(i * is[1]) * es : y + (size_t)(i * is[2]) * es;
    memcpy(o + (size_t)i * es, src, es);
  }
}

int ref_Where(OpCtx *c) {
  WhereCtx w = {c->in[0], c->in[1], c->in[2], c->out[0], gpuc_dtype_size(c->out[0]->dt)};
  return ew_for_rows(c, 3, c->in, c->out[0], where_row, &w);
}

/* ---- Max/Min/Mean/Sum over any number of broadcast inputs -------------- */

typedef struct Var {
  Bin b; /* op, o, f, uns */
  int nin;
  const Tensor *const *ins;
} Var;

static void var_row(void *ud, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const Var *v = ud;
  if (v->b.f) {
    double acc[EW_BLOCK], t[EW_BLOCK];
    ew_load_f(v->ins[0], io[0], is[0], n, acc);
    for (int k = 1; k < v->nin; k++) {
      ew_load_f(v->ins[k], io[k], is[k], n, t);
      bin_f(&v->b, v->b.op, n, acc, acc, t);
    }
    if (v->b.op == GPUC_OP_MEAN)
      for (int64_t i = 0; i < n; i++) acc[i] /= v->nin;
    ew_store_f(v->b.o, oo, n, acc);
  } else {
    int64_t acc[EW_BLOCK], t[EW_BLOCK];
    ew_load_i(v->ins[0], io[0], is[0], n, acc);
    for (int k = 1; k < v->nin; k++) {
      ew_load_i(v->ins[k], io[k], is[k], n, t);
      bin_i(&v->b, v->b.op, n, acc, acc, t);
    }
    ew_store_i(v->b.o, oo, n, acc, v->b.uns);
  }
}

static int run_variadic(OpCtx *c) {
  GpucDType dt = c->in[0]->dt;
  if (c->n->op == GPUC_OP_MEAN && !ew_is_float(dt))
    return gpuc_op_unsupported(c, "Mean of %s", gpuc_dtype_name(dt));
  Var v = {.b = {.op = c->n->op, .o = c->out[0], .f = ew_is_float(dt), .uns = dt == GPUC_DT_U64},
           .nin = c->nin, .ins = c->in};
  return ew_for_rows(c, c->nin, c->in, c->out[0], var_row, &v);
}

int ref_Max(OpCtx *c) { return run_variadic(c); }
int ref_Min(OpCtx *c) { return run_variadic(c); }
int ref_Mean(OpCtx *c) { return run_variadic(c); }
int ref_Sum(OpCtx *c) { return run_variadic(c); }
