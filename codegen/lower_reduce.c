/* GPU lowerings of the reductions: Reduce*, ArgMax/ArgMin, Softmax,
 * LogSoftmax, Hardmax, CumSum and TopK. Semantics follow
 * runtime/ref/ref_reduce.c and ref_softmax.c.
 *
 * Geometry: like the reference, the input's axes are split into kept and
 * reduced ones, each list merged where contiguous; one output element (a
 * "row") reduces nred inputs at base(row) + off(j). Rows run either one per
 * thread (short rows, or many strided rows: coalesced across threads) or
 * one per block (threads stride over the row, then warp shuffles and a
 * shared-memory step combine the partials). Floats accumulate in float
 * (double for f64); integers exactly in 64 bits, wrapping like the
 * reference. Every generated kernel has shapes baked in. */
#include "lower_rows.h"
#include "infer_reduce.h"
#include <stdio.h>
#include <string.h>

#define MAX_GRID (65535u * 32)
#define LL(v) ((long long)(v))

static const char *facc(GpucDType dt) { return dt == GPUC_DT_F64 ? "double" : "float"; }
/* integer value type: u64 compares unsigned, everything else fits long long */
static const char *ival(GpucDType dt) { return dt == GPUC_DT_U64 ? "unsigned long long" : "long long"; }
static void inf_lit(char *buf, size_t n, const char *ct, bool neg) {
  snprintf(buf, n, "((%s)(%s__int_as_float(0x7f800000)))", ct, neg ? "-" : "");
}
static void nan_lit(char *buf, size_t n, const char *ct) {
  snprintf(buf, n, "((%s)__int_as_float(0x7fc00000))", ct);
}

/* ---- rows: one per thread or one per block ------------------------------ */





static const char *rows_first(const Rows *r) {
  return r->warp ? "(threadIdx.x & 31) == 0" : r->block ? "threadIdx.x == 0" : "true";
}

typedef enum { C_SUM, C_PROD, C_MAX, C_MIN, C_FMAX } Comb;

/* combine expression of a and b: MAX/MIN propagate NaN, FMAX ignores it */
static void comb_expr(char *buf, size_t n, Comb op, const char *a, const char *b) {
  switch (op) {
  case C_SUM: snprintf(buf, n, "%s + %s", a, b); break;
  case C_PROD: snprintf(buf, n, "%s * %s", a, b); break;
  case C_MAX: snprintf(buf, n, "((%s > %s || %s != %s) ? %s : %s)", b, a, b, b, b, a); break;
  case C_MIN: snprintf(buf, n, "((%s < %s || %s != %s) ? %s : %s)", b, a, b, b, b, a); break;
  case C_FMAX: snprintf(buf, n, "((%s > %s || %s != %s) ? %s : %s)", b, a, a, a, b, a); break;
  }
}

/* Combine `var` (type t) across the block; every thread gets the result. */
static void rows_reduce(StrBuf *b, Rows *r, const char *var, const char *t, Comb op) {
  if (!r->block) return;
  char e[256], s[64];
  comb_expr(e, sizeof e, op, var, "t_");
  sb_printf(b, "    for (int s_ = 16; s_ > 0; s_ >>= 1) { %s t_ = __shfl_xor_sync(0xffffffffu, %s, s_); %s = %s; }\n",
            t, var, var, e);
  if (r->threads <= 32 || r->warp) return;
  int id = r->uid++;
  snprintf(s, sizeof s, "sh%d_[w_]", id);
  comb_expr(e, sizeof e, op, var, s);
  sb_printf(b, "    { __shared__ %s sh%d_[32];\n"
               "      if ((threadIdx.x & 31) == 0) sh%d_[threadIdx.x >> 5] = %s;\n"
               "      __syncthreads();\n"
               "      %s = sh%d_[0];\n"
               "      for (int w_ = 1; w_ < %u; w_++) %s = %s;\n"
               "      __syncthreads(); }\n",
            t, id, id, var, var, id, r->threads / 32, var, e);
}

/* Combine (v, i) pairs across the block with the order `before`. */
static void rows_argreduce(StrBuf *b, Rows *r, const char *v, const char *i, const char *t,
                           const char *before) {
  if (!r->block) return;
  sb_printf(b, "    for (int s_ = 16; s_ > 0; s_ >>= 1) {\n"
               "      %s tv_ = __shfl_xor_sync(0xffffffffu, %s, s_);\n"
               "      i64 ti_ = __shfl_xor_sync(0xffffffffu, %s, s_);\n"
               "      if (%s(tv_, ti_, %s, %s)) { %s = tv_; %s = ti_; }\n    }\n",
            t, v, i, before, v, i, v, i);
  if (r->threads <= 32 || r->warp) return;
  int id = r->uid++;
  sb_printf(b, "    { __shared__ %s shv%d_[32]; __shared__ i64 shi%d_[32];\n"
               "      if ((threadIdx.x & 31) == 0) { shv%d_[threadIdx.x >> 5] = %s; shi%d_[threadIdx.x >> 5] = %s; }\n"
               "      __syncthreads();\n"
               "      %s = shv%d_[0]; %s = shi%d_[0];\n"
               "      for (int w_ = 1; w_ < %u; w_++)\n"
               "        if (%s(shv%d_[w_], shi%d_[w_], %s, %s)) { %s = shv%d_[w_]; %s = shi%d_[w_]; }\n"
               "      __syncthreads(); }\n",
            t, id, id, id, v, id, i, v, id, i, id, r->threads / 32, before, id, id, v, i, v, id, i, id);
}


/* Device function `name`(a, ai, b, bi): element a (index ai) comes strictly
 * before b in the order: larger (or smaller) values first, NaN first or
 * last, ties by lower (or higher, `last`) index. An index < 0 marks no
 * element, which comes after everything. */
static void emit_before(StrBuf *b, const char *name, const char *vt, bool is_float, bool larger,
                        bool nan_first, bool last) {
  const char *tie = last ? "ai > bi" : "ai < bi";
  sb_printf(b, "__device__ __forceinline__ bool %s(%s a, i64 ai, %s b, i64 bi) {\n"
               "  if (ai < 0) return false;\n  if (bi < 0) return true;\n", name, vt, vt);
  if (is_float)
    sb_printf(b, "  bool an = a != a, bn = b != b;\n"
                 "  if (an || bn) return (an && bn) ? (%s) : %s;\n", tie, nan_first ? "an" : "bn");
  sb_printf(b, "  if (a != b) return a %s b;\n  return %s;\n}\n", larger ? ">" : "<", tie);
}

/* [outer, n, inner] view of x along `axis` */
static void axis_view(const Tensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank; d++) *inner *= x->dims[d];
  *n = x->dims[axis];
}

/* ---- Reduce* ------------------------------------------------------------ */

typedef enum {
  R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_MAX, R_MEAN, R_MIN, R_PROD, R_SUM, R_SUMSQ
} RedOp;

typedef struct {
  int nk, nr;
  int64_t kdim[GPUC_MAX_RANK], kstr[GPUC_MAX_RANK], rdim[GPUC_MAX_RANK], rstr[GPUC_MAX_RANK];
  int64_t nout, nred;
} RedGeom;


static void geom_init(const Tensor *x, const bool *mask, RedGeom *g) {
  memset(g, 0, sizeof *g);
  int64_t str[GPUC_MAX_RANK];
  gpuc_strides(x, str);
  g->nout = g->nred = 1;
  for (int d = 0; d < x->rank; d++) {
    if (mask[d]) g->nred *= x->dims[d];
    else g->nout *= x->dims[d];
    if (x->dims[d] == 1) continue;
    if (mask[d]) push_axis(g->rdim, g->rstr, &g->nr, x->dims[d], str[d]);
    else push_axis(g->kdim, g->kstr, &g->nk, x->dims[d], str[d]);
  }
}



/* f64 value -> integer dtype the way gpuc_set_f64 converts (the PTX
 * conversion saturates and maps NaN to 0, like f64_to_i64) */
static void store_f64_as_int(StrBuf *b, GpucDType dt, const char *dst, const char *val) {
  if (dt == GPUC_DT_BOOL) sb_printf(b, "%s = (unsigned char)((%s) != 0);\n", dst, val);
  else if (dt == GPUC_DT_U64)
    sb_printf(b, "{ double d_ = %s; %s = (d_ != d_ || d_ <= 0) ? (d_ <= -1 ? (unsigned long long)(long long)d_ : 0ULL) : (unsigned long long)d_; }\n",
              val, dst);
  else sb_printf(b, "%s = (%s)(long long)(%s);\n", dst, cg_ctype(dt), val);
}

static void int_limit(GpucDType dt, bool hi, char *buf, size_t n) {
  switch (dt) {
  case GPUC_DT_I8: snprintf(buf, n, hi ? "127LL" : "-128LL"); break;
  case GPUC_DT_U8: snprintf(buf, n, hi ? "255LL" : "0LL"); break;
  case GPUC_DT_I16: snprintf(buf, n, hi ? "32767LL" : "-32768LL"); break;
  case GPUC_DT_U16: snprintf(buf, n, hi ? "65535LL" : "0LL"); break;
  case GPUC_DT_I32: snprintf(buf, n, hi ? "2147483647LL" : "(-2147483647LL - 1)"); break;
  case GPUC_DT_U32: snprintf(buf, n, hi ? "4294967295LL" : "0LL"); break;
  case GPUC_DT_U64: snprintf(buf, n, hi ? "0xffffffffffffffffULL" : "0ULL"); break;
  case GPUC_DT_BOOL: snprintf(buf, n, hi ? "1LL" : "0LL"); break;
  default: snprintf(buf, n, hi ? "9223372036854775807LL" : "(-9223372036854775807LL - 1)"); break;
  }
}

/* The loop over this thread's share of the row: declares `v` (type vt) =
 * x[base + offset(j)]; the caller appends the body statement. */
static void reduce_loop(StrBuf *b, const Rows *r, const RedGeom *g, GpucDType dt, const char *vt) {
  rows_for(b, r, "j", g->nred);
  sb_printf(b, " {\n");
  emit_offset(b, "off", "j", g->nr, g->rdim, g->rstr);
  sb_printf(b, "      %s v = ", vt);
  cg_load(b, vt, dt, "x", "base + off");
  sb_printf(b, ";\n      ");
}

/* Columns: x as [O, P, Cc] contiguous, reduced over P (an NHWC value's
 * H, W: GRN's norms, ConvNeXt V2), so row (o, c) reads P elements Cc
 * apart. One thread a row read them coalesced across threads but with
 * O * Cc threads only (5120 for [32,56,56,160]: a few blocks on the
 * GPU). Here a block of 256 threads takes TX vectors of columns (16 bytes
 * each where Cc allows) by TY rows of P, and S blocks split P: each
 * thread sums its vectors' columns in f32 over every TY-th row of its
 * share, the block adds its TY partials in shared memory, and with S > 1
 * a second kernel adds the S partials (an f32 scratch [S, O, Cc]) and
 * finishes (mean, sqrt). Additive float reductions only (Sum, Mean, L1,
 * L2, SumSquare). Returns 1 when x is not such a view. */
static int reduce_columns(LowerCtx *c, RedOp op, const RedGeom *g, GpucDType dt, GpucDType ydt) {
  if (!is_flt(dt) || dt == GPUC_DT_F64 || (op != R_SUM && op != R_MEAN && op != R_L1 && op != R_L2 && op != R_SUMSQ))
    return 1;
  if (g->nr != 1 || g->nk < 1 || g->nk > 2 || g->kstr[g->nk - 1] != 1) return 1;
  int64_t Cc = g->kdim[g->nk - 1], P = g->rdim[0], O = g->nk == 2 ? g->kdim[0] : 1;
  if (g->rstr[0] != Cc || (g->nk == 2 && g->kstr[0] != P * Cc) || Cc < 2 || P < 32) return 1;
  size_t es = gpuc_dtype_size(dt);
  int vec = (int)(16 / es);
  while (vec > 1 && Cc % vec) vec /= 2;
  int64_t cv = Cc / vec, TX = cv < 64 ? cv : 64, TY = 256 / TX, CT = (cv + TX - 1) / TX;
  int64_t base_blocks = O * CT, S = (528 + base_blocks - 1) / base_blocks, smax = P / (TY * 8);
  if (S > smax) S = smax;
  if (S < 1) S = 1;
  int64_t PS = (P + S - 1) / S;
  if (O * Cc * S > 0x7fffffffLL || O * P * Cc > 0x7fffffffLL * 8LL) return 1;
  const char *map = op == R_L1 ? "fabsf(v)" : op == R_L2 || op == R_SUMSQ ? "v * v" : "v";
  char fin[96];
  if (op == R_MEAN) snprintf(fin, sizeof fin, "t / (float)%lld", LL(P));
  else snprintf(fin, sizeof fin, "%s", op == R_L2 ? "sqrtf(t)" : "t");
  uint32_t part = S > 1 ? cg_scratch(c, GPUC_DT_F32, 1, (int64_t[]){S * O * Cc}) : UINT32_MAX;
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  const char *xt = cg_ctype(dt);
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(256) %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  __shared__ float sh[256 * %d];\n"
               "  const i64 blk = blockIdx.x, s = blk %% %lldLL, ct = (blk / %lldLL) %% %lldLL, o = blk / %lldLL;\n"
               "  const int tx = threadIdx.x %% %lld, ty = threadIdx.x / %lld;\n"
               "  const i64 col = ct * %lldLL + tx;\n"
               "  const bool live = ty < %lld && col < %lldLL;\n"
               "  float acc[%d];\n"
               "  for (int u = 0; u < %d; u++) acc[u] = 0.f;\n"
               "  if (live) {\n"
               "    const i64 p1 = (s + 1) * %lldLL < %lldLL ? (s + 1) * %lldLL : %lldLL;\n"
               "    const Vec<%s, %d>* xv = (const Vec<%s, %d>*)x + o * %lldLL + col;\n"
               "    for (i64 p = s * %lldLL + ty; p < p1; p += %lld) {\n"
               "      const Vec<%s, %d> w = xv[p * %lldLL];\n"
               "      for (int u = 0; u < %d; u++) { const float v = ldf(w.v[u]); acc[u] += %s; }\n"
               "    }\n"
               "  }\n"
               "  for (int u = 0; u < %d; u++) sh[threadIdx.x * %d + u] = acc[u];\n"
               "  __syncthreads();\n"
               "  if (ty == 0 && col < %lldLL)\n"
               "    for (int u = 0; u < %d; u++) {\n"
               "      float t = 0.f;\n"
               "      for (int k = 0; k < %lld; k++) t += sh[(k * %lld + tx) * %d + u];\n",
            name, xt, S > 1 ? "float" : cg_ctype(ydt), vec, LL(S), LL(S), LL(CT), LL(S * CT), LL(TX), LL(TX),
            LL(TX), LL(TY), LL(cv), vec, vec, LL(PS), LL(P), LL(PS), LL(P), xt, vec, xt, vec, LL(P * cv), LL(PS), LL(TY), xt, vec,
            LL(cv), vec, map, vec, vec, LL(cv), vec, LL(TY), LL(TX), vec);
  char idx[96];
  if (S > 1) {
    sb_printf(b, "      y[(s * %lldLL + o) * %lldLL + col * %d + u] = t;\n    }\n}\n", LL(O), LL(Cc), vec);
  } else {
    snprintf(idx, sizeof idx, "o * %lldLL + col * %d + u", LL(Cc), vec);
    sb_printf(b, "      ");
    cg_store(b, ydt, "y", idx, "float", fin);
    sb_printf(b, "    }\n}\n");
  }
  unsigned grid[3] = {(unsigned)(O * CT * S), 1, 1}, blk[3] = {256, 1, 1};
  uint32_t args[2] = {c->tin[0], S > 1 ? part : c->tout[0]};
  if (cg_launch_grid(c, name, grid, blk, 0, 2, args)) return -1;
  if (S == 1) return 0;
  /* the S partials of each output */
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const float* __restrict__ part, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(q, %lldLL) {\n"
               "    float t = 0.f;\n"
               "    for (int k = 0; k < %lld; k++) t += part[k * %lldLL + q];\n    ",
            name, cg_ctype(ydt), LL(O * Cc), LL(S), LL(O * Cc));
  cg_store(b, ydt, "y", "q", "float", fin);
  sb_printf(b, "  }\n}\n");
  uint32_t args2[2] = {part, c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)(O * Cc), 2, args2);
}

static int reduce_lower(LowerCtx *c, RedOp op) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  bool mask[GPUC_MAX_RANK], known;
  if (gpuc_reduce_axes(LOWER_OPCTX(c), mask, &known)) return -1;
  if (!known) return lower_unsupported(c, "the axes input is not a constant");
  /* a half input may sum into an f32 output (gpuc_out_f32, passes/fp16.c) */
  GpucDType ydt = y->dt;
  if (dt == GPUC_DT_UNDEF || (dt == GPUC_DT_BOOL && op != R_MAX && op != R_MIN) ||
      (ydt != dt && !(is_flt(dt) && ydt == GPUC_DT_F32)))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  RedGeom g;
  geom_init(x, mask, &g);
  if (g.nout != gpuc_numel(y)) return lower_fail(c, "internal: reduction size mismatch");
  if (g.nout == 0) return 0;
  bool fl = is_flt(dt), u64 = dt == GPUC_DT_U64;
  bool contiguous = g.nr == 0 || (g.nr == 1 && g.rstr[0] == 1);
  if (!contiguous) {
    int rc = reduce_columns(c, op, &g, dt, ydt);
    if (rc <= 0) return rc;
  }
  Rows r = rows_pick_warp(g.nout, g.nred, contiguous);
  StrBuf *b = cg_src(c);
  char name[128], e[256], lit[96];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n",
            name, cg_ctype(dt), cg_ctype(ydt));
  rows_open(b, &r, g.nout);
  emit_offset(b, "base", "row", g.nk, g.kdim, g.kstr);
  if (fl) {
    const char *ct = facc(dt);
    Comb cb = op == R_PROD ? C_PROD : op == R_MAX || op == R_LOGSUMEXP ? C_MAX : op == R_MIN ? C_MIN : C_SUM;
    if (cb == C_MAX) inf_lit(lit, sizeof lit, ct, true);
    else if (cb == C_MIN) inf_lit(lit, sizeof lit, ct, false);
    else snprintf(lit, sizeof lit, "(%s)%d", ct, cb == C_PROD ? 1 : 0);
    sb_printf(b, "    %s acc = %s;\n", ct, lit);
    const char *map = op == R_L1 ? "fabs(v)" : op == R_L2 || op == R_SUMSQ ? "v * v" : "v";
    comb_expr(e, sizeof e, cb, "acc", map);
    reduce_loop(b, &r, &g, dt, ct);
    sb_printf(b, "acc = %s;\n    }\n", e);
    rows_reduce(b, &r, "acc", ct, cb);
    const char *res = "acc";
    char nan[64], fin[160];
    nan_lit(nan, sizeof nan, ct);
    switch (op) {
    case R_MEAN:
      if (g.nred) snprintf(fin, sizeof fin, "acc / (%s)%lld", ct, LL(g.nred));
      else snprintf(fin, sizeof fin, "%s", nan);
      res = fin;
      break;
    case R_LOGSUM: res = "log(acc)"; break;
    case R_L2: res = "sqrt(acc)"; break;
    case R_LOGSUMEXP:
      /* log(sum(exp(x - shift))) + shift, shift = the max when finite */
      sb_printf(b, "    %s sh = isfinite(acc) ? acc : (%s)0, s = 0;\n", ct, ct);
      reduce_loop(b, &r, &g, dt, ct);
      sb_printf(b, "s = s + exp(v - sh);\n    }\n");
      rows_reduce(b, &r, "s", ct, C_SUM);
      res = "(acc != acc ? acc : log(s) + sh)";
      break;
    default: break;
    }
    sb_printf(b, "    if (%s) ", rows_first(&r));
    cg_store(b, ydt, "y", "row", ct, res);
  } else {
    const char *lt = ival(dt);
    bool sum_like = op != R_MAX && op != R_MIN && op != R_LOGSUMEXP;
    const char *at = sum_like ? "unsigned long long" : lt;
    Comb cb = op == R_PROD ? C_PROD : op == R_MAX || op == R_LOGSUMEXP ? C_MAX : op == R_MIN ? C_MIN : C_SUM;
    if (cb == C_MAX) int_limit(dt, false, lit, sizeof lit);
    else if (cb == C_MIN) int_limit(dt, true, lit, sizeof lit);
    else snprintf(lit, sizeof lit, "%dULL", cb == C_PROD ? 1 : 0);
    sb_printf(b, "    %s acc = (%s)%s;\n", at, at, lit);
    const char *map = "v";
    if (sum_like) {
      if (op == R_L1) map = u64 ? "v" : "(v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v)";
      else if (op == R_L2 || op == R_SUMSQ) map = "(unsigned long long)v * (unsigned long long)v";
      else map = "(unsigned long long)v";
    }
    comb_expr(e, sizeof e, cb, "acc", map);
    reduce_loop(b, &r, &g, dt, lt);
    sb_printf(b, "acc = %s;\n    }\n", e);
    rows_reduce(b, &r, "acc", at, cb);
    const char *sd = u64 ? "(double)acc" : "(double)(long long)acc"; /* the value as a number */
    if (op == R_LOGSUMEXP && g.nred > 0) {
      sb_printf(b, "    double m = %s, s = 0;\n", sd);
      reduce_loop(b, &r, &g, dt, lt);
      sb_printf(b, "s = s + exp((double)v - m);\n    }\n");
      rows_reduce(b, &r, "s", "double", C_SUM);
    }
    sb_printf(b, "    if (%s) ", rows_first(&r));
    switch (op) {
    case R_MEAN:
      if (g.nred == 0) cg_store(b, dt, "y", "row", at, "0");
      else if (u64) {
        snprintf(e, sizeof e, "acc / %lldULL", LL(g.nred));
        cg_store(b, dt, "y", "row", at, e);
      } else {
        snprintf(e, sizeof e, "(long long)acc / %lldLL", LL(g.nred));
        cg_store(b, dt, "y", "row", at, e);
      }
      break;
    case R_L2: snprintf(e, sizeof e, "sqrt(%s)", sd); store_f64_as_int(b, dt, "y[row]", e); break;
    case R_LOGSUM: snprintf(e, sizeof e, "log(%s)", sd); store_f64_as_int(b, dt, "y[row]", e); break;
    case R_LOGSUMEXP:
      if (g.nred == 0) {
        inf_lit(lit, sizeof lit, "double", true);
        store_f64_as_int(b, dt, "y[row]", lit);
      } else {
        store_f64_as_int(b, dt, "y[row]", "log(s) + m");
      }
      break;
    default: cg_store(b, dt, "y", "row", at, "acc"); break;
    }
  }
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return rows_launch(c, &r, name, g.nout, 2, args);
}

int lower_ReduceL1(LowerCtx *c) { return reduce_lower(c, R_L1); }
int lower_ReduceL2(LowerCtx *c) { return reduce_lower(c, R_L2); }
int lower_ReduceLogSum(LowerCtx *c) { return reduce_lower(c, R_LOGSUM); }
int lower_ReduceLogSumExp(LowerCtx *c) { return reduce_lower(c, R_LOGSUMEXP); }
int lower_ReduceMax(LowerCtx *c) { return reduce_lower(c, R_MAX); }
int lower_ReduceMean(LowerCtx *c) { return reduce_lower(c, R_MEAN); }
int lower_ReduceMin(LowerCtx *c) { return reduce_lower(c, R_MIN); }
int lower_ReduceProd(LowerCtx *c) { return reduce_lower(c, R_PROD); }
int lower_ReduceSum(LowerCtx *c) { return reduce_lower(c, R_SUM); }
int lower_ReduceSumSquare(LowerCtx *c) { return reduce_lower(c, R_SUMSQ); }

/* ---- ArgMax / ArgMin ------------------------------------------------------ */

/* The first extreme index along the axis (the last with select_last_index);
 * NaN counts as the extreme. */
static int arg_lower(LowerCtx *c, bool is_max) {
  const Tensor *x = c->in[0];
  GpucDType dt = x->dt;
  if (dt == GPUC_DT_UNDEF || dt == GPUC_DT_BOOL) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  int axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 0), x->rank, &axis)) return -1;
  bool last = gpuc_attr_i(c->n, "select_last_index", 0) != 0;
  int64_t outer, n, inner;
  axis_view(x, axis, &outer, &n, &inner);
  int64_t rows = outer * inner;
  if (rows == 0) return 0;
  if (n == 0) return lower_fail(c, "axis %d is empty", axis);
  bool fl = is_flt(dt);
  const char *vt = fl ? facc(dt) : ival(dt);
  Rows r = rows_pick(rows, n, inner == 1);
  StrBuf *b = cg_src(c);
  char name[128], before[160];
  snprintf(before, sizeof before, "%s_before", c->kname);
  emit_before(b, before, vt, fl, is_max, true, last);
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, long long* __restrict__ y) {\n",
            name, cg_ctype(dt));
  rows_open(b, &r, rows);
  sb_printf(b, "    i64 base = (row / %lldLL) * %lldLL + row %% %lldLL;\n", LL(inner), LL(n * inner), LL(inner));
  sb_printf(b, "    %s bv = 0; i64 bi = -1;\n", vt);
  rows_for(b, &r, "j", n);
  sb_printf(b, " {\n      %s v = ", vt);
  char idx[96];
  snprintf(idx, sizeof idx, "base + j * %lldLL", LL(inner));
  cg_load(b, vt, dt, "x", idx);
  sb_printf(b, ";\n      if (%s(v, j, bv, bi)) { bv = v; bi = j; }\n    }\n", before);
  rows_argreduce(b, &r, "bv", "bi", vt, before);
  sb_printf(b, "    if (%s) y[row] = bi;\n  }\n}\n", rows_first(&r));
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return rows_launch(c, &r, name, rows, 2, args);
}

int lower_ArgMax(LowerCtx *c) { return arg_lower(c, true); }
int lower_ArgMin(LowerCtx *c) { return arg_lower(c, false); }

/* ---- Softmax / LogSoftmax / Hardmax --------------------------------------- */

typedef enum { SM_SOFTMAX, SM_LOGSOFTMAX, SM_HARDMAX } SmOp;

/* Rows of n elements with stride inner (the [outer, n, inner] view; 2-D
 * coercion before opset 13). Softmax: exp(x - max) / sum; LogSoftmax:
 * x - max - log(sum); Hardmax: one-hot of the first maximum (NaN counts as
 * the maximum). NaNs propagate through max and sum like the formula. */
/* Contiguous rows of 17..1024 elements (attention scores, classifier
 * logits): one warp per row, the row read once into registers, max and sum
 * by shuffles, written once. Same formula as the general kernel. */
static int softmax_warp(LowerCtx *c, SmOp op, int64_t rows, int64_t n) {
  GpucDType dt = c->in[0]->dt;
  const char *ct = facc(dt);
  char lit[96], mx[160];
  inf_lit(lit, sizeof lit, ct, true);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n",
            name, cg_ctype(dt), cg_ctype(dt));
  int vec = warp_rows_vec(n, dt, GPUC_DT_UNDEF, dt);
  warp_rows_open(b, rows, n, vec, ct, dt, GPUC_DT_UNDEF, false, lit);
  sb_printf(b, "    %s mx = %s;\n", ct, lit);
  comb_expr(mx, sizeof mx, C_MAX, "mx", "v[k]");
  warp_rows_for(b, n, vec);
  sb_printf(b, "      mx = %s;\n    }\n", mx);
  comb_expr(mx, sizeof mx, C_MAX, "a", "b");
  warp_rows_allreduce(b, n, vec, "mx", ct, mx);
  sb_printf(b, "    %s s = 0;\n", ct);
  warp_rows_for(b, n, vec);
  sb_printf(b, "      s = s + exp(v[k] - mx);\n    }\n");
  warp_rows_allreduce(b, n, vec, "s", ct, "a + b");
  if (op == SM_LOGSOFTMAX) sb_printf(b, "    const %s ls = log(s);\n", ct);
  warp_rows_store_begin(b, n, vec, dt);
  sb_printf(b, "      ");
  cg_store(b, dt, "r.v", "u", ct, op == SM_SOFTMAX ? "exp(v[k] - mx) / s" : "v[k] - mx - ls");
  warp_rows_store_end(b, vec, dt);
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return warp_rows_launch(c, name, rows, n, vec, 2, args);
}

static int softmax_lower(LowerCtx *c, SmOp op) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (!is_flt(dt) || y->dt != dt) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  int64_t outer, n, inner;
  if (gpuc_softmax_view(LOWER_OPCTX(c), &outer, &n, &inner)) return -1;
  int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return 0;
  if (op != SM_HARDMAX && inner == 1 && n > 16 && n <= WARP_ROW_MAX) return softmax_warp(c, op, rows, n);
  const char *ct = facc(dt);
  Rows r = rows_pick(rows, n, inner == 1);
  StrBuf *b = cg_src(c);
  char name[128], before[160], idx[96], lit[96], e[256];
  snprintf(idx, sizeof idx, "base + j * %lldLL", LL(inner));
  if (op == SM_HARDMAX) {
    snprintf(before, sizeof before, "%s_before", c->kname);
    emit_before(b, before, ct, true, true, true, false);
  }
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n",
            name, cg_ctype(dt), cg_ctype(dt));
  rows_open(b, &r, rows);
  sb_printf(b, "    i64 base = (row / %lldLL) * %lldLL + row %% %lldLL;\n", LL(inner), LL(n * inner), LL(inner));
#define ROW_LOOP_LOAD()                   \
  do {                                    \
    rows_for(b, &r, "j", n);              \
    sb_printf(b, " {\n      %s v = ", ct); \
    cg_load(b, ct, dt, "x", idx);         \
    sb_printf(b, ";\n      ");            \
  } while (0)
  if (op == SM_HARDMAX) {
    sb_printf(b, "    %s bv = 0; i64 bi = -1;\n", ct);
    ROW_LOOP_LOAD();
    sb_printf(b, "if (%s(v, j, bv, bi)) { bv = v; bi = j; }\n    }\n", before);
    rows_argreduce(b, &r, "bv", "bi", ct, before);
    rows_for(b, &r, "j", n);
    sb_printf(b, " ");
    snprintf(e, sizeof e, "j == bi ? (%s)1 : (%s)0", ct, ct);
    cg_store(b, dt, "y", idx, ct, e);
  } else {
    inf_lit(lit, sizeof lit, ct, true);
    sb_printf(b, "    %s mx = %s;\n", ct, lit);
    ROW_LOOP_LOAD();
    comb_expr(e, sizeof e, C_MAX, "mx", "v");
    sb_printf(b, "mx = %s;\n    }\n", e);
    rows_reduce(b, &r, "mx", ct, C_MAX);
    sb_printf(b, "    %s s = 0;\n", ct);
    ROW_LOOP_LOAD();
    sb_printf(b, "s = s + exp(v - mx);\n    }\n");
    rows_reduce(b, &r, "s", ct, C_SUM);
    if (op == SM_LOGSOFTMAX) sb_printf(b, "    %s ls = log(s);\n", ct);
    ROW_LOOP_LOAD();
    cg_store(b, dt, "y", idx, ct, op == SM_SOFTMAX ? "exp(v - mx) / s" : "v - mx - ls");
    sb_printf(b, "    }\n");
  }
#undef ROW_LOOP_LOAD
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return rows_launch(c, &r, name, rows, 2, args);
}

int lower_Softmax(LowerCtx *c) { return softmax_lower(c, SM_SOFTMAX); }
int lower_LogSoftmax(LowerCtx *c) { return softmax_lower(c, SM_LOGSOFTMAX); }
int lower_Hardmax(LowerCtx *c) { return softmax_lower(c, SM_HARDMAX); }

/* ---- CumSum ------------------------------------------------------------------ */

/* CumSum whose axis is only known at run time: the kernel reads it and
 * derives the [outer, n, inner] view from the baked shape; one thread per
 * row, sequential (the launch covers every element, so any axis fits). */
static int cumsum_runtime_axis(LowerCtx *c) {
  const Tensor *x = c->in[0];
  GpucDType dt = x->dt;
  bool excl = gpuc_attr_i(c->n, "exclusive", 0) != 0, rev = gpuc_attr_i(c->n, "reverse", 0) != 0;
  int64_t total = gpuc_numel(x);
  if (total == 0) return 0;
  const char *at = is_flt(dt) ? "double" : "unsigned long long";
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ axis, %s* __restrict__ y) {\n"
               "  const i64 dims[%d] = {", name, cg_ctype(dt), cg_ctype(c->in[1]->dt), cg_ctype(dt), x->rank);
  for (int d = 0; d < x->rank; d++) sb_printf(b, "%s%lldLL", d ? ", " : "", LL(x->dims[d]));
  sb_printf(b, "};\n"
               "  i64 a = (i64)axis[0];\n  if (a < 0) a += %d;\n  if (a < 0 || a >= %d) return;\n"
               "  i64 n = dims[a], inner = 1;\n  for (int d = (int)a + 1; d < %d; d++) inner *= dims[d];\n"
               "  if (n == 0) return;\n"
               "  GRID_STRIDE(row, %lldLL / n) {\n"
               "    i64 base = (row / inner) * n * inner + row %% inner;\n"
               "    %s s = 0;\n"
               "    for (i64 t = 0; t < n; t++) {\n"
               "      i64 at = base + (%s) * inner;\n"
               "      %s v = ",
            x->rank, x->rank, x->rank, LL(total), at, rev ? "n - 1 - t" : "t", at);
  cg_load(b, at, dt, "x", "at");
  sb_printf(b, ";\n");
  if (!excl) sb_printf(b, "      s = s + v;\n");
  sb_printf(b, "      ");
  cg_store(b, dt, "y", "at", at, "s");
  if (excl) sb_printf(b, "      s = s + v;\n");
  sb_printf(b, "    }\n  }\n}\n");
  uint32_t args[3] = {c->tin[0], c->tin[1], c->tout[0]};
  return cg_launch(c, name, (uint64_t)total, 256, 0, 3, args);
}

/* Running sums along the axis (exclusive leaves the element out, reverse
 * runs from the end); floats in double, integers wrapping in 64 bits.
 * Contiguous long rows: one block per row, chunked block scans with a
 * carry; otherwise one thread per row, sequential. */
int lower_CumSum(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  if (dt == GPUC_DT_UNDEF || dt == GPUC_DT_BOOL || y->dt != dt)
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  if (!c->in[1]->data) return cumsum_runtime_axis(c);
  int axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_get_i64(c->in[1], 0), x->rank, &axis)) return -1;
  bool excl = gpuc_attr_i(c->n, "exclusive", 0) != 0, rev = gpuc_attr_i(c->n, "reverse", 0) != 0;
  int64_t outer, n, inner;
  axis_view(x, axis, &outer, &n, &inner);
  int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return 0;
  const char *at = is_flt(dt) ? "double" : "unsigned long long";
  StrBuf *b = cg_src(c);
  char name[128], kexpr[96];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  if (rev) snprintf(kexpr, sizeof kexpr, "%lldLL - 1 - t", LL(n));
  else snprintf(kexpr, sizeof kexpr, "t");
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n",
            name, cg_ctype(dt), cg_ctype(dt));
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  if (inner == 1 && n > 64) {
    Rows r = rows_pick(rows, n, true);
    unsigned nw = r.threads / 32;
    rows_open(b, &r, rows);
    sb_printf(b, "    i64 base = row * %lldLL;\n    %s carry = 0;\n"
                 "    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n"
                 "    for (i64 c0 = 0; c0 < %lldLL; c0 += blockDim.x) {\n"
                 "      i64 t = c0 + threadIdx.x, k = %s;\n"
                 "      %s v = 0;\n      if (t < %lldLL) v = ",
              LL(n), at, LL(n), kexpr, at, LL(n));
    cg_load(b, at, dt, "x", "base + k");
    sb_printf(b, ";\n      %s s = v;\n"
                 "      for (int o = 1; o < 32; o <<= 1) { %s u = __shfl_up_sync(0xffffffffu, s, o); if (lane >= o) s = s + u; }\n"
                 "      %s ex = __shfl_up_sync(0xffffffffu, s, 1);\n"
                 "      if (lane == 0) ex = 0;\n"
                 "      __shared__ %s ws[32];\n"
                 "      if (lane == 31) ws[w] = s;\n"
                 "      __syncthreads();\n"
                 "      %s pre = carry, tot = carry;\n"
                 "      for (int q = 0; q < %u; q++) { if (q < w) pre = pre + ws[q]; tot = tot + ws[q]; }\n"
                 "      if (t < %lldLL) ",
              at, at, at, at, at, nw, LL(n));
    cg_store(b, dt, "y", "base + k", at, excl ? "pre + ex" : "pre + s");
    sb_printf(b, "      carry = tot;\n      __syncthreads();\n    }\n  }\n}\n");
    return rows_launch(c, &r, name, rows, 2, args);
  }
  sb_printf(b, "  GRID_STRIDE(row, %lldLL) {\n"
               "    i64 base = (row / %lldLL) * %lldLL + row %% %lldLL;\n"
               "    %s s = 0;\n"
               "    for (i64 t = 0; t < %lldLL; t++) {\n"
               "      i64 at = base + (%s) * %lldLL;\n"
               "      %s v = ",
            LL(rows), LL(inner), LL(n * inner), LL(inner), at, LL(n), kexpr, LL(inner), at);
  cg_load(b, at, dt, "x", "at");
  sb_printf(b, ";\n");
  if (!excl) sb_printf(b, "      s = s + v;\n");
  sb_printf(b, "      ");
  cg_store(b, dt, "y", "at", at, "s");
  if (excl) sb_printf(b, "      s = s + v;\n");
  sb_printf(b, "    }\n  }\n}\n");
  return cg_launch_items(c, name, (uint64_t)rows, 2, args);
}

/* ---- TopK ----------------------------------------------------------------------- */

/* The k largest (or smallest) along the axis, sorted; NaN sorts above
 * every number, equal values keep the lower index first. Selection: round
 * t picks the first element (in that total order) after round t-1's pick,
 * by a block arg-reduction over the row: O(k * n) per row, fine for small
 * k. */
int lower_TopK(LowerCtx *c) {
  const Tensor *x = c->in[0];
  GpucDType dt = x->dt;
  if (dt == GPUC_DT_UNDEF || dt == GPUC_DT_BOOL) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  int axis;
  int64_t k;
  if (gpuc_topk_params(LOWER_OPCTX(c), &axis, &k)) return -1;
  if (k < 0) return lower_unsupported(c, "K is not a constant");
  if (k > 1024) return lower_unsupported(c, "K = %lld is too large for the GPU kernel (at most 1024)", LL(k));
  bool largest = gpuc_attr_i(c->n, "largest", 1) != 0;
  int64_t outer, n, inner;
  axis_view(x, axis, &outer, &n, &inner);
  int64_t rows = outer * inner;
  if (rows == 0 || k == 0) return 0;
  bool fl = is_flt(dt), want_idx = c->nout > 1 && c->out[1] && c->tout[1] != UINT32_MAX;
  const char *vt = fl ? facc(dt) : ival(dt);
  Rows r = rows_pick(rows, n, inner == 1);
  StrBuf *b = cg_src(c);
  char name[128], before[160], idx[96];
  snprintf(before, sizeof before, "%s_before", c->kname);
  emit_before(b, before, vt, fl, largest, largest, false);
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ vals%s) {\n",
            name, cg_ctype(dt), cg_ctype(dt), want_idx ? ", long long* __restrict__ idxs" : "");
  rows_open(b, &r, rows);
  sb_printf(b, "    i64 base = (row / %lldLL) * %lldLL + row %% %lldLL;\n"
               "    i64 obase = (row / %lldLL) * %lldLL + row %% %lldLL;\n"
               "    %s pv = 0; i64 pi = -1;\n"
               "    for (i64 t = 0; t < %lldLL; t++) {\n"
               "    %s bv = 0; i64 bi = -1;\n",
            LL(inner), LL(n * inner), LL(inner), LL(inner), LL(k * inner), LL(inner), vt, LL(k), vt);
  snprintf(idx, sizeof idx, "base + j * %lldLL", LL(inner));
  rows_for(b, &r, "j", n);
  sb_printf(b, " {\n      %s v = ", vt);
  cg_load(b, vt, dt, "x", idx);
  sb_printf(b, ";\n      if ((pi < 0 || %s(pv, pi, v, j)) && %s(v, j, bv, bi)) { bv = v; bi = j; }\n    }\n",
            before, before);
  rows_argreduce(b, &r, "bv", "bi", vt, before);
  sb_printf(b, "    if (%s) {\n      vals[obase + t * %lldLL] = x[base + bi * %lldLL];\n", rows_first(&r),
            LL(inner), LL(inner));
  if (want_idx) sb_printf(b, "      idxs[obase + t * %lldLL] = bi;\n", LL(inner));
  sb_printf(b, "    }\n    pv = bv; pi = bi;\n    }\n  }\n}\n");
  uint32_t args[3] = {c->tin[0], c->tout[0], want_idx ? c->tout[1] : 0};
  return rows_launch(c, &r, name, rows, want_idx ? 3 : 2, args);
}
