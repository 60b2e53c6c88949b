/* LSTM, GRU and RNN (ir/rnn.h) on the GPU. Shapes are static, so the
 * recurrence is unrolled into the plan:
 *
 *   init      hs, cs [D, B, H] = initial_h / initial_c (or 0); step counter 0
 *   GEMM      xw [D, S*B, G*H] = X [S*B, I] . W[d]^T     (every step's input
 *             projection at once; batched over the D directions)
 *   per step k = 0 .. S-1 (direction 1 and "reverse" walk t = S-1-k):
 *     GEMM    hr [D, B, G*H] = hs[d] [B, H] . R[d]^T
 *     (GRU without linear_before_reset: a kernel rh = r * hs, and a GEMM
 *      rhh [D, B, H] = rh[d] . R_h[d]^T, R_h copied once into rcopy)
 *     cell    one thread per (d, b, j): gates from xw + hr + Wb + Rb (+
 *             peepholes), clip, activations; writes hs, cs and Y's slice;
 *             past sequence_lens[b] it writes 0 to Y and keeps the state;
 *             the last block to finish advances the step counter
 *   finish    Y_h, Y_c from hs, cs (layout 1: [B, D, H])
 *
 * Kernels take only tensor pointers, so the step index lives in a device
 * counter (int32 [2]: step, blocks done) that the init kernel zeroes and
 * each cell launch advances: one cell kernel in the module however long
 * the sequence. The state and the math are f32 (f64 for f64 nodes):
 * --fp16/--bf16 keep these ops f32 (passes/fp16.c makes them fp32
 * islands), and a node stored in half has its inputs converted to f32 once
 * and its outputs rounded on store, so the state never rounds to half. */
#include "lower_util.h"
#include "rnn.h"
#include <string.h>

/* steps unrolled into one plan at most: 2-4 plan steps each */
#define RNN_MAX_STEPS 4096

/* activation a of variable v (compute type ct) as an expression */
static void act_expr(char *buf, size_t n, const RnnAct *a, const char *v, const char *ct) {
  char al[64], be[64], one[32], zero[32];
  cg_float_lit(al, sizeof al, a->alpha, ct);
  cg_float_lit(be, sizeof be, a->beta, ct);
  snprintf(one, sizeof one, "((%s)1)", ct);
  snprintf(zero, sizeof zero, "((%s)0)", ct);
  switch (a->kind) {
  case RNN_ACT_RELU: snprintf(buf, n, "(%s > %s ? %s : %s)", v, zero, v, zero); break;
  case RNN_ACT_TANH: snprintf(buf, n, "tanh(%s)", v); break;
  case RNN_ACT_SIGMOID: snprintf(buf, n, "(%s / (%s + exp(-%s)))", one, one, v); break;
  case RNN_ACT_AFFINE: snprintf(buf, n, "(%s * %s + %s)", al, v, be); break;
  case RNN_ACT_LEAKYRELU: snprintf(buf, n, "(%s >= %s ? %s : %s * %s)", v, zero, v, al, v); break;
  case RNN_ACT_THRESHOLDEDRELU: snprintf(buf, n, "(%s > %s ? %s : %s)", v, al, v, zero); break;
  case RNN_ACT_SCALEDTANH: snprintf(buf, n, "(%s * tanh(%s * %s))", al, be, v); break;
  case RNN_ACT_HARDSIGMOID: snprintf(buf, n, "fmax(%s, fmin(%s, %s * %s + %s))", zero, one, al, v, be); break;
  case RNN_ACT_ELU: snprintf(buf, n, "(%s >= %s ? %s : %s * (exp(%s) - %s))", v, zero, v, al, v, one); break;
  case RNN_ACT_SOFTSIGN: snprintf(buf, n, "(%s / (%s + fabs(%s)))", v, one, v); break;
  case RNN_ACT_SOFTPLUS: snprintf(buf, n, "log1p(exp(%s))", v); break;
  }
}


typedef struct {
  LowerCtx *c;
  RnnSpec s;
  const char *T, *ct;            /* element and compute type of the state and GEMMs: f32 or f64 */
  const char *To;                /* Y, Y_h, Y_c's element type: T, or a half type */
  bool half;                     /* the node is f16/bf16: inputs converted to f32, outputs rounded */
  int64_t S, B, I, H, D, G;
  bool reset_first;              /* GRU without linear_before_reset: (r * H) R_h^T */
  char kn[96];                   /* prefix of the device helpers */
} Rnn;

static bool in_present(const LowerCtx *c, int i) { return i < c->nin && c->in[i] && c->tin[i] != UINT32_MAX; }
static bool out_present(const LowerCtx *c, int o) { return o < c->nout && c->out[o] && c->tout[o] != UINT32_MAX; }

/* device helpers <kn>_act<d><slot>(v) (direction d's activation f, g, h)
 * and <kn>_clip(v) */
static void emit_helpers(Rnn *r) {
  StrBuf *b = cg_src(r->c);
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < r->s.nact; k++) {
      char e[320];
      act_expr(e, sizeof e, &r->s.act[d][k], "v", r->ct);
      sb_printf(b, "__device__ __forceinline__ %s %s_act%d%d(%s v) { return %s; }\n", r->ct, r->kn, d, k, r->ct, e);
    }
  char lim[64], body[200] = "v";
  cg_float_lit(lim, sizeof lim, r->s.has_clip ? r->s.clip : 0, r->ct);
  if (r->s.has_clip) snprintf(body, sizeof body, "fmin(fmax(v, -%s), %s)", lim, lim);
  sb_printf(b, "__device__ __forceinline__ %s %s_clip(%s v) { return %s; }\n", r->ct, r->kn, r->ct, body);
}

/* Start of a step kernel's item loop: d, bb, j of item i = (d * B + bb) *
 * H + j, this direction's time t at step k (the counter), the length of
 * row bb, x and h (gate 0 of the item's xw and hr rows), wb and rb (gate 0
 * of its biases), yo (its place in Y). */
static void emit_item_prologue(Rnn *r, bool lens, bool bias) {
  StrBuf *b = cg_src(r->c);
  long long S = r->S, B = r->B, H = r->H, D = r->D, GH = r->G * r->H;
  char row[96], yo[128];
  /* xw's rows are X's: (t, b) for layout 0, (b, t) for layout 1 */
  snprintf(row, sizeof row, r->s.layout ? "bb * %lldLL + t" : "t * %lldLL + bb", r->s.layout ? S : B);
  if (r->s.layout) snprintf(yo, sizeof yo, "((bb * %lldLL + t) * %lldLL + d) * %lldLL + j", S, D, H);
  else snprintf(yo, sizeof yo, "((t * %lldLL + d) * %lldLL + bb) * %lldLL + j", D, B, H);
  /* a counter out of range (never, if the plan runs whole) touches nothing */
  sb_printf(b, "  const i64 k = (i64)*(volatile const int *)ctr;\n  if (k < 0 || k >= %lldLL) return;\n", S);
  sb_printf(b, "  GRID_STRIDE(i, %lldLL) {\n", D * B * H);
  sb_printf(b, "    const i64 d = i / %lldLL, bb = (i / %lldLL) %% %lldLL, j = i %% %lldLL;\n", B * H, H, B, H);
  sb_printf(b, "    const i64 t = (d == 1 || %d) ? %lldLL - 1 - k : k;\n", r->s.reverse ? 1 : 0, S);
  if (lens) sb_printf(b, "    const i64 len = min(max((i64)lens[bb], 0LL), %lldLL);\n", S);
  else sb_printf(b, "    const i64 len = %lldLL;\n", S);
  sb_printf(b, "    const i64 yo = %s;\n", yo);
  sb_printf(b, "    const %s *x = xw + (d * %lldLL + %s) * %lldLL + j;\n", r->T, S * B, row, GH);
  sb_printf(b, "    const %s *h = hr + (d * %lldLL + bb) * %lldLL + j;\n", r->T, B, GH);
  if (bias) sb_printf(b, "    const %s *wb = bias + d * %lldLL + j, *rb = wb + %lldLL;\n", r->T, 2 * GH, GH);
  sb_printf(b, "    (void)yo; (void)len; (void)x; (void)h;\n");
}

/* End of a step kernel: the last block to finish advances the counter
 * (every block read it before any block finished, so all saw step k). */
static void emit_bump(Rnn *r) {
  sb_printf(cg_src(r->c),
            "  __syncthreads();\n"
            "  if (threadIdx.x == 0) {\n"
            "    __threadfence();\n"
            "    if (atomicAdd((unsigned *)&ctr[1], 1u) == gridDim.x - 1) {\n"
            "      ctr[1] = 0;\n"
            "      ctr[0] = (int)k + 1;\n"
            "      __threadfence();\n"
            "    }\n"
            "  }\n");
}

/* gate g's pre-activation sum without the peepholes: X W^T + H R^T + Wb + Rb */
static void gate(char *buf, size_t n, const Rnn *r, int g, bool bias) {
  long long H = r->H;
  if (bias)
    snprintf(buf, n, "((%s)x[%lld] + (%s)h[%lld] + (%s)wb[%lld] + (%s)rb[%lld])", r->ct, g * H, r->ct, g * H,
             r->ct, g * H, r->ct, g * H);
  else snprintf(buf, n, "((%s)x[%lld] + (%s)h[%lld])", r->ct, g * H, r->ct, g * H);
}

/* activation slot k of this item's direction applied to clip(e) */
static void act(char *buf, size_t n, const Rnn *r, int k, const char *e) {
  if (r->D == 1) snprintf(buf, n, "%s_act0%d(%s_clip(%s))", r->kn, k, r->kn, e);
  else snprintf(buf, n, "(d == 0 ? %s_act0%d(%s_clip(%s)) : %s_act1%d(%s_clip(%s)))", r->kn, k, r->kn, e, r->kn,
                k, r->kn, e);
}

/* value v (of the state's type) stored into an output element */
static void store(char *buf, size_t n, const Rnn *r, const char *v) {
  if (r->half) snprintf(buf, n, "stf<%s>((float)(%s))", r->To, v);
  else snprintf(buf, n, "(%s)(%s)", r->To, v);
}

/* LSTM gate sum g plus peephole pp[off] times the cell state c */
static void peephole(char *buf, size_t n, const Rnn *r, const char *g, bool peep, long long off, const char *c) {
  if (peep) snprintf(buf, n, "(%s + (%s)pp[%lld] * %s)", g, r->ct, off, c);
  else snprintf(buf, n, "%s", g);
}

/* The cell kernel: args xw, hr, [bias], [P], [lens], [rhh], hs, [cs], [y], ctr */
static int emit_cell(Rnn *r, const char *name, bool bias, bool peep, bool lens, bool y) {
  StrBuf *b = cg_src(r->c);
  const char *T = r->T, *ct = r->ct;
  bool lstm = r->s.op == GPUC_OP_LSTM, gru = r->s.op == GPUC_OP_GRU;
  long long H = r->H;
  sb_printf(b, "extern \"C\" __global__ void %s(const %s *__restrict__ xw, const %s *__restrict__ hr", name, T, T);
  if (bias) sb_printf(b, ", const %s *__restrict__ bias", T);
  if (peep) sb_printf(b, ", const %s *__restrict__ peep", T);
  if (lens) sb_printf(b, ", const int *__restrict__ lens");
  if (r->reset_first) sb_printf(b, ", const %s *__restrict__ rhh", T);
  sb_printf(b, ", %s *__restrict__ hs", T);
  if (lstm) sb_printf(b, ", %s *__restrict__ cs", T);
  if (y) sb_printf(b, ", %s *__restrict__ y", r->To);
  sb_printf(b, ", int *ctr) {\n");
  emit_item_prologue(r, lens, bias);
  char st0[96], sth[96];
  store(st0, sizeof st0, r, "0");
  store(sth, sizeof sth, r, "hn");
  if (y) sb_printf(b, "    if (t >= len) { y[yo] = %s; continue; }\n", st0);
  else sb_printf(b, "    if (t >= len) continue;\n");
  char g0[256], g1[256], g2[256], g3[256], e[600], a0[900], a1[900], a2[900];
  gate(g0, sizeof g0, r, 0, bias);
  gate(g1, sizeof g1, r, 1, bias);
  if (r->s.op == GPUC_OP_RNN) {
    act(a0, sizeof a0, r, 0, g0);
    sb_printf(b, "    const %s hn = %s;\n", ct, a0);
  } else if (gru) { /* gates z, r, h */
    gate(g2, sizeof g2, r, 2, false); /* x and h of gate h, biases added apart */
    act(a0, sizeof a0, r, 0, g0);
    sb_printf(b, "    const %s z = %s;\n", ct, a0);
    char wbh[96] = "", rbh[96] = "";
    if (bias) {
      snprintf(wbh, sizeof wbh, " + (%s)wb[%lld]", ct, 2 * H);
      snprintf(rbh, sizeof rbh, " + (%s)rb[%lld]", ct, 2 * H);
    }
    if (r->reset_first) {
      snprintf(e, sizeof e, "((%s)x[%lld]%s + (%s)rhh[i]%s)", ct, 2 * H, wbh, ct, rbh);
    } else {
      act(a1, sizeof a1, r, 0, g1);
      sb_printf(b, "    const %s rg = %s;\n", ct, a1);
      snprintf(e, sizeof e, "((%s)x[%lld]%s + rg * ((%s)h[%lld]%s))", ct, 2 * H, wbh, ct, 2 * H, rbh);
    }
    act(a2, sizeof a2, r, 1, e);
    sb_printf(b, "    const %s hh = %s;\n", ct, a2);
    sb_printf(b, "    const %s hn = ((%s)1 - z) * hh + z * (%s)hs[i];\n", ct, ct, ct);
  } else { /* LSTM: gates i, o, f, c; peepholes i, o, f */
    gate(g2, sizeof g2, r, 2, bias);
    gate(g3, sizeof g3, r, 3, bias);
    sb_printf(b, "    const %s cp = (%s)cs[i];\n", ct, ct);
    if (peep) sb_printf(b, "    const %s *pp = peep + d * %lldLL + j;\n", T, 3 * H);
    peephole(e, sizeof e, r, g0, peep, 0, "cp");
    act(a0, sizeof a0, r, 0, e);
    sb_printf(b, "    const %s gi = %s;\n", ct, a0);
    if (r->s.input_forget) {
      sb_printf(b, "    const %s gf = (%s)1 - gi;\n", ct, ct);
    } else {
      peephole(e, sizeof e, r, g2, peep, 2 * H, "cp");
      act(a0, sizeof a0, r, 0, e);
      sb_printf(b, "    const %s gf = %s;\n", ct, a0);
    }
    act(a1, sizeof a1, r, 1, g3);
    sb_printf(b, "    const %s cn = gf * cp + gi * %s;\n", ct, a1);
    peephole(e, sizeof e, r, g1, peep, H, "cn");
    act(a0, sizeof a0, r, 0, e);
    sb_printf(b, "    const %s go = %s;\n", ct, a0);
    snprintf(a2, sizeof a2, r->D == 1 ? "%s_act02(cn)" : "(d == 0 ? %s_act02(cn) : %s_act12(cn))", r->kn, r->kn);
    sb_printf(b, "    const %s hn = go * %s;\n", ct, a2);
    sb_printf(b, "    cs[i] = (%s)cn;\n", T);
  }
  sb_printf(b, "    hs[i] = (%s)hn;\n", T);
  if (y) sb_printf(b, "    y[yo] = %s;\n", sth);
  sb_printf(b, "  }\n");
  emit_bump(r);
  sb_printf(b, "}\n");
  return 0;
}

/* GRU without linear_before_reset: rh = r * hs, r from gate r's sum
 * (args xw, hr, [bias], hs, rh, ctr) */
static void emit_reset(Rnn *r, const char *name, bool bias) {
  StrBuf *b = cg_src(r->c);
  const char *T = r->T;
  sb_printf(b, "extern \"C\" __global__ void %s(const %s *__restrict__ xw, const %s *__restrict__ hr", name, T, T);
  if (bias) sb_printf(b, ", const %s *__restrict__ bias", T);
  sb_printf(b, ", const %s *__restrict__ hs, %s *__restrict__ rh, const int *ctr) {\n", T, T);
  emit_item_prologue(r, false, bias);
  char g1[256], a1[900];
  gate(g1, sizeof g1, r, 1, bias);
  act(a1, sizeof a1, r, 0, g1);
  sb_printf(b, "    rh[i] = (%s)(%s * (%s)hs[i]);\n  }\n}\n", T, a1, r->ct);
}

/* hs, cs = initial_h, initial_c (layout 1: [B, D, H]) or 0; counter 0
 * (args [h0], [c0], [lens], hs, [cs], ctr); a length outside [0, S] is
 * reported as the reference fails (runtime/device_fault.h; the cell
 * kernels clamp it, touching nothing out of range) */
static void emit_init(Rnn *r, const char *name, bool h0, bool c0, bool lens, unsigned fstep) {
  StrBuf *b = cg_src(r->c);
  const char *T = r->T;
  bool lstm = r->s.op == GPUC_OP_LSTM;
  long long B = r->B, H = r->H, D = r->D;
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  if (h0) sb_printf(b, "const %s *__restrict__ h0, ", T);
  if (c0) sb_printf(b, "const %s *__restrict__ c0, ", T);
  if (lens) sb_printf(b, "const int *__restrict__ lens, ");
  sb_printf(b, "%s *__restrict__ hs, ", T);
  if (lstm) sb_printf(b, "%s *__restrict__ cs, ", T);
  sb_printf(b, "int *ctr) {\n  GRID_STRIDE(i, %lldLL) {\n", D * B * H);
  sb_printf(b, "    const i64 d = i / %lldLL, bb = (i / %lldLL) %% %lldLL, j = i %% %lldLL;\n", B * H, H, B, H);
  if (r->s.layout) sb_printf(b, "    const i64 src = (bb * %lldLL + d) * %lldLL + j;\n", D, H);
  else sb_printf(b, "    const i64 src = i;\n");
  sb_printf(b, "    (void)src; (void)d; (void)bb; (void)j;\n");
  sb_printf(b, "    hs[i] = %s;\n", h0 ? "h0[src]" : "0");
  if (lstm) sb_printf(b, "    cs[i] = %s;\n", c0 ? "c0[src]" : "0");
  if (lens)
    sb_printf(b, "    if (i < %lldLL && (lens[i] < 0 || lens[i] > %lld)) gpuc_fault_report(%uu, %d, lens[i], i, %lldLL, -1);\n",
              B, (long long)r->S, fstep, GPUC_FAULT_SEQ_LEN, (long long)r->S);
  sb_printf(b, "    if (i == 0) { ctr[0] = 0; ctr[1] = 0; }\n  }\n}\n");
}

/* rcopy [D, H, H] = rows 2H..3H of each R[d] (GRU's R_h, for its GEMM) */
static void emit_rcopy(Rnn *r, const char *name) {
  long long H = r->H, D = r->D;
  sb_printf(cg_src(r->c),
            "extern \"C\" __global__ void %s(const %s *__restrict__ R, %s *__restrict__ rc) {\n"
            "  GRID_STRIDE(i, %lldLL) rc[i] = R[(i / %lldLL) * %lldLL + %lldLL + i %% %lldLL];\n}\n",
            name, r->T, r->T, D * H * H, H * H, 3 * H * H, 2 * H * H, H * H);
}

/* Y_h, Y_c from hs, cs (args hs, [cs], [yh], [yc]) */
static void emit_finish(Rnn *r, const char *name, bool yh, bool yc) {
  StrBuf *b = cg_src(r->c);
  const char *T = r->T;
  long long B = r->B, H = r->H, D = r->D;
  sb_printf(b, "extern \"C\" __global__ void %s(const %s *__restrict__ hs", name, T);
  if (yc) sb_printf(b, ", const %s *__restrict__ cs", T);
  if (yh) sb_printf(b, ", %s *__restrict__ yh", r->To);
  if (yc) sb_printf(b, ", %s *__restrict__ yc", r->To);
  sb_printf(b, ") {\n  GRID_STRIDE(i, %lldLL) {\n", D * B * H);
  if (r->s.layout)
    sb_printf(b, "    const i64 o = ((i / %lldLL) %% %lldLL * %lldLL + i / %lldLL) * %lldLL + i %% %lldLL;\n", H, B, D,
              B * H, H, H);
  else sb_printf(b, "    const i64 o = i;\n");
  char sh[96], sc[96];
  store(sh, sizeof sh, r, "hs[i]");
  store(sc, sizeof sc, r, "cs[i]");
  if (yh) sb_printf(b, "    yh[o] = %s;\n", sh);
  if (yc) sb_printf(b, "    yc[o] = %s;\n", sc);
  sb_printf(b, "  }\n}\n");
}

/* a GEMM Y[d] = A[d] . Bm[d]^T batched over the directions (row-major;
 * Bm stored [N, K] per direction); sa/sb/sy: batch strides in elements */
static int gemm_nt(Rnn *r, uint32_t a, uint32_t bm, uint32_t y, int64_t m, int64_t n, int64_t k, int64_t lda,
                   int64_t ldy, int64_t sa, int64_t sb, int64_t sy) {
  PlanGemm g = {.a = a, .b = bm, .c = UINT32_MAX, .y = y, .trans_b = 1, .m = m, .n = n, .k = k,
                .batch = r->D, .lda = lda, .ldb = k, .ldy = ldy, .stride_a = sa, .stride_b = sb,
                .stride_y = sy, .alpha = 1, .dt = r->half ? GPUC_DT_F32 : r->c->in[0]->dt};
  return cg_gemm(r->c, &g);
}

/* *t = an f32 copy of half input i (one kernel, launched now) */
static int to_f32(Rnn *r, int i, uint32_t *t) {
  LowerCtx *c = r->c;
  const Tensor *x = c->in[i];
  *t = cg_scratch(c, GPUC_DT_F32, x->rank, x->dims);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(cg_src(c),
            "extern \"C\" __global__ void %s(const %s *__restrict__ x, float *__restrict__ y) {\n"
            "  GRID_STRIDE(i, %lldLL) y[i] = ldf(x[i]);\n}\n",
            name, r->To, (long long)gpuc_numel(x));
  return gpuc_numel(x) ? cg_launch(c, name, (uint64_t)gpuc_numel(x), 256, 0, 2, (uint32_t[]){c->tin[i], *t}) : 0;
}

static int lower_rnn(LowerCtx *c) {
  Rnn r = {.c = c};
  if (gpuc_rnn_spec(LOWER_OPCTX(c), &r.s)) return -1;
  /* half nodes (a model stored in half; --fp16 keeps these ops f32) run
   * in f32: their inputs converted once, their outputs rounded on store */
  r.half = c->in[0]->dt == GPUC_DT_F16 || c->in[0]->dt == GPUC_DT_BF16;
  GpucDType dt = r.half ? GPUC_DT_F32 : c->in[0]->dt;
  r.T = cg_ctype(dt);
  r.To = cg_ctype(c->in[0]->dt);
  r.ct = cg_compute_type(dt);
  r.S = r.s.seq, r.B = r.s.batch, r.I = r.s.input, r.H = r.s.hidden, r.D = r.s.dirs, r.G = r.s.gates;
  r.reset_first = r.s.op == GPUC_OP_GRU && !r.s.linear_before_reset;
  if (r.S > RNN_MAX_STEPS)
    return lower_unsupported(c, "a sequence of %lld steps: the plan unrolls at most %d (compile with a shorter "
                             "sequence, or split it)", (long long)r.S, RNN_MAX_STEPS);
  if (r.B == 0 || r.H == 0) return 0; /* every output is empty */
  if (r.I == 0 && r.S > 0) return lower_unsupported(c, "an input size of 0 on the GPU");
  snprintf(r.kn, sizeof r.kn, "%s", c->kname);
  bool bias = in_present(c, RNN_IN_B), lens = in_present(c, RNN_IN_SEQLENS);
  bool lstm = r.s.op == GPUC_OP_LSTM, peep = lstm && in_present(c, RNN_IN_P);
  bool h0 = in_present(c, RNN_IN_H0), c0 = lstm && in_present(c, RNN_IN_C0);
  bool y = out_present(c, RNN_OUT_Y), yh = out_present(c, RNN_OUT_YH), yc = lstm && out_present(c, RNN_OUT_YC);
  int64_t S = r.S, B = r.B, I = r.I, H = r.H, D = r.D, GH = r.G * r.H, DBH = D * B * H;
  uint32_t tin[8]; /* the float inputs as the steps read them (f32 copies of half ones) */
  for (int i = 0; i < 8; i++) tin[i] = i < c->nin ? c->tin[i] : UINT32_MAX;
  for (int i = 0; r.half && i < 8; i++)
    if (i != RNN_IN_SEQLENS && in_present(c, i) && to_f32(&r, i, &tin[i])) return -1;

  /* scratch: the projections, the state, the counter */
  int64_t dxw[3] = {D, S * B, GH}, dhr[3] = {D, B, GH}, dst[3] = {D, B, H}, dctr[1] = {2}, drc[3] = {D, H, H};
  uint32_t txw = S ? cg_scratch(c, dt, 3, dxw) : UINT32_MAX, thr = cg_scratch(c, dt, 3, dhr);
  uint32_t ths = cg_scratch(c, dt, 3, dst), tcs = lstm ? cg_scratch(c, dt, 3, dst) : UINT32_MAX;
  uint32_t tctr = cg_scratch(c, GPUC_DT_I32, 1, dctr);
  uint32_t trh = UINT32_MAX, trhh = UINT32_MAX, trc = UINT32_MAX;
  if (r.reset_first) {
    trh = cg_scratch(c, dt, 3, dst);
    trhh = cg_scratch(c, dt, 3, dst);
    trc = cg_scratch(c, dt, 3, drc);
  }
  emit_helpers(&r);
  char kinit[128], kcell[128], kreset[128] = "", kcopy[128] = "", kfin[128];
  /* lengths not known here are checked on the device (constant ones were at import) */
  bool lens_check = lens && !c->in[RNN_IN_SEQLENS]->data;
  unsigned fstep = lens_check ? cg_fault_step(c) : 0; /* the init kernel is this node's first launch */
  snprintf(kinit, sizeof kinit, "%s", cg_kernel_name(c));
  emit_init(&r, kinit, h0, c0, lens_check, fstep);
  snprintf(kcell, sizeof kcell, "%s", cg_kernel_name(c));
  emit_cell(&r, kcell, bias, peep, lens, y);
  if (r.reset_first) {
    snprintf(kreset, sizeof kreset, "%s", cg_kernel_name(c));
    emit_reset(&r, kreset, bias);
    snprintf(kcopy, sizeof kcopy, "%s", cg_kernel_name(c));
    emit_rcopy(&r, kcopy);
  }
  snprintf(kfin, sizeof kfin, "%s", cg_kernel_name(c));
  emit_finish(&r, kfin, yh, yc);

  uint32_t args[12];
  int na = 0;
  if (h0) args[na++] = tin[RNN_IN_H0];
  if (c0) args[na++] = tin[RNN_IN_C0];
  if (lens_check) args[na++] = c->tin[RNN_IN_SEQLENS];
  args[na++] = ths;
  if (lstm) args[na++] = tcs;
  args[na++] = tctr;
  if (cg_launch(c, kinit, (uint64_t)DBH, 256, 0, na, args)) return -1;
  if (r.reset_first && cg_launch(c, kcopy, (uint64_t)(D * H * H), 256, 0, 2, (uint32_t[]){tin[RNN_IN_R], trc}))
    return -1;
  /* every step's input projection: xw[d] [S*B, GH] = X [S*B, I] . W[d]^T */
  if (S && gemm_nt(&r, tin[RNN_IN_X], tin[RNN_IN_W], txw, S * B, GH, I, I, GH, 0, GH * I, S * B * GH))
    return -1;
  for (int64_t k = 0; k < S; k++) {
    /* hr[d] [B, GH or 2H] = hs[d] [B, H] . R[d]^T (GRU's h gate below when reset first) */
    if (gemm_nt(&r, ths, tin[RNN_IN_R], thr, B, r.reset_first ? 2 * H : GH, H, H, GH, B * H, GH * H, B * GH))
      return -1;
    if (r.reset_first) {
      na = 0;
      args[na++] = txw, args[na++] = thr;
      if (bias) args[na++] = tin[RNN_IN_B];
      args[na++] = ths, args[na++] = trh, args[na++] = tctr;
      if (cg_launch(c, kreset, (uint64_t)DBH, 256, 0, na, args)) return -1;
      if (gemm_nt(&r, trh, trc, trhh, B, H, H, H, H, B * H, H * H, B * H)) return -1;
    }
    na = 0;
    args[na++] = txw, args[na++] = thr;
    if (bias) args[na++] = tin[RNN_IN_B];
    if (peep) args[na++] = tin[RNN_IN_P];
    if (lens) args[na++] = c->tin[RNN_IN_SEQLENS];
    if (r.reset_first) args[na++] = trhh;
    args[na++] = ths;
    if (lstm) args[na++] = tcs;
    if (y) args[na++] = c->tout[RNN_OUT_Y];
    args[na++] = tctr;
    if (cg_launch(c, kcell, (uint64_t)DBH, 256, 0, na, args)) return -1;
  }
  if (!yh && !yc) return 0;
  na = 0;
  args[na++] = ths;
  if (yc) args[na++] = tcs;
  if (yh) args[na++] = c->tout[RNN_OUT_YH];
  if (yc) args[na++] = c->tout[RNN_OUT_YC];
  return cg_launch(c, kfin, (uint64_t)DBH, 256, 0, na, args);
}

int lower_LSTM(LowerCtx *c) { return lower_rnn(c); }
int lower_GRU(LowerCtx *c) { return lower_rnn(c); }
int lower_RNN(LowerCtx *c) { return lower_rnn(c); }
