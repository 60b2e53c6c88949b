/* Reference LSTM, GRU and RNN (ONNX, ir/rnn.h), step by step as the
 * operator definition writes them, in f64 (the state too; outputs round on
 * store). Gate pre-activations are clipped (attribute clip) after the
 * biases and peepholes are added, as onnxruntime does. With sequence_lens,
 * batch row b runs its first len[b] steps (the reverse direction from
 * step len[b] - 1 down): Y is 0 past them and Y_h/Y_c hold the last valid
 * state. */
#include "ref_util.h"
#include "rnn.h"
#include <stdlib.h>

/* input i as f64 (NULL when absent), or *oom set */
static double *load(const OpCtx *c, int i, bool *oom) {
  if (!gpuc_has_in(c, i)) return NULL;
  const Tensor *t = c->in[i];
  int64_t n = gpuc_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!v) { *oom = true; return NULL; }
  for (int64_t k = 0; k < n; k++) v[k] = gpuc_get_f64(t, k);
  return v;
}

static double clip(const RnnSpec *s, double x) {
  if (!s->has_clip) return x;
  return x < -s->clip ? -s->clip : x > s->clip ? s->clip : x;
}

typedef struct {
  const RnnSpec *s;
  const double *x, *w, *r, *bias, *p;  /* bias, p may be NULL */
  double *xw, *hr, *rh;                /* per gate row: X W^T + Wb, H R^T + Rb; GRU r * H */
} Cell;

/* out[j] (j < H) = sum_k v[k] * m[row0 + j][k] over k < K, rows of m K long */
static void matvec(double *out, const double *v, const double *m, int64_t row0, int64_t H, int64_t K) {
  for (int64_t j = 0; j < H; j++) {
    double acc = 0;
    const double *row = m + (row0 + j) * K;
    for (int64_t k = 0; k < K; k++) acc += v[k] * row[k];
    out[j] = acc;
  }
}

/* One step of direction d for one batch row: x [I], state h [H] and c [H]
 * (LSTM) updated in place. */
static void step(Cell *cl, int d, const double *x, double *h, double *cst) {
  const RnnSpec *s = cl->s;
  int64_t H = s->hidden, I = s->input, G = s->gates;
  const double *w = cl->w + d * G * H * I, *r = cl->r + d * G * H * H;
  const double *wb = cl->bias ? cl->bias + d * 2 * G * H : NULL, *rb = wb ? wb + G * H : NULL;
  const RnnAct *a = s->act[d];
  bool gru_reset_first = s->op == GPUC_OP_GRU && !s->linear_before_reset;
  matvec(cl->xw, x, w, 0, G * H, I);
  /* GRU's h gate without linear_before_reset multiplies r * H by R_h: later */
  matvec(cl->hr, h, r, 0, gru_reset_first ? 2 * H : G * H, H);
  for (int64_t j = 0; j < (gru_reset_first ? 2 : G) * H; j++)
    if (wb) cl->hr[j] += rb[j];
  for (int64_t j = 0; j < G * H; j++)
    if (wb) cl->xw[j] += wb[j];
  if (s->op == GPUC_OP_RNN) {
    for (int64_t j = 0; j < H; j++) h[j] = gpuc_rnn_act(&a[0], clip(s, cl->xw[j] + cl->hr[j]));
    return;
  }
  if (s->op == GPUC_OP_GRU) { /* gates z, r, h */
    double *z = cl->rh + H, *rr = cl->rh + 2 * H;
    for (int64_t j = 0; j < H; j++) {
      z[j] = gpuc_rnn_act(&a[0], clip(s, cl->xw[j] + cl->hr[j]));
      rr[j] = gpuc_rnn_act(&a[0], clip(s, cl->xw[H + j] + cl->hr[H + j]));
    }
    if (gru_reset_first) {
      for (int64_t j = 0; j < H; j++) cl->rh[j] = rr[j] * h[j];
      matvec(cl->hr + 2 * H, cl->rh, r, 2 * H, H, H);
      for (int64_t j = 0; j < H; j++) cl->hr[2 * H + j] += rb ? rb[2 * H + j] : 0;
    }
    for (int64_t j = 0; j < H; j++) {
      double hh = gru_reset_first ? cl->hr[2 * H + j] : rr[j] * cl->hr[2 * H + j];
      hh = gpuc_rnn_act(&a[1], clip(s, cl->xw[2 * H + j] + hh));
      h[j] = (1 - z[j]) * hh + z[j] * h[j];
    }
    return;
  }
  /* LSTM: gates i, o, f, c; peepholes i, o, f */
  const double *p = cl->p ? cl->p + d * 3 * H : NULL;
  for (int64_t j = 0; j < H; j++) {
    double pre[4];
    for (int g = 0; g < 4; g++) pre[g] = cl->xw[g * H + j] + cl->hr[g * H + j];
    double cprev = cst[j];
    double gi = gpuc_rnn_act(&a[0], clip(s, pre[0] + (p ? p[j] * cprev : 0)));
    double gf = s->input_forget ? 1 - gi : gpuc_rnn_act(&a[0], clip(s, pre[2] + (p ? p[2 * H + j] * cprev : 0)));
    double gc = gpuc_rnn_act(&a[1], clip(s, pre[3]));
    double cn = gf * cprev + gi * gc;
    double go = gpuc_rnn_act(&a[0], clip(s, pre[1] + (p ? p[H + j] * cn : 0)));
    cst[j] = cn;
    h[j] = go * gpuc_rnn_act(&a[2], cn);
  }
}

static int ref_rnn(OpCtx *c) {
  RnnSpec s;
  if (gpuc_rnn_spec(c, &s)) return -1;
  int64_t S = s.seq, B = s.batch, I = s.input, H = s.hidden, D = s.dirs, G = s.gates;
  bool oom = false;
  Cell cl = {.s = &s};
  cl.x = load(c, RNN_IN_X, &oom);
  cl.w = load(c, RNN_IN_W, &oom);
  cl.r = load(c, RNN_IN_R, &oom);
  cl.bias = load(c, RNN_IN_B, &oom);
  bool lstm = s.op == GPUC_OP_LSTM;
  cl.p = lstm ? load(c, RNN_IN_P, &oom) : NULL;
  double *h0 = load(c, RNN_IN_H0, &oom), *c0 = lstm ? load(c, RNN_IN_C0, &oom) : NULL;
  cl.xw = malloc(sizeof(double) * (size_t)(G * H));
  cl.hr = malloc(sizeof(double) * (size_t)(G * H));
  cl.rh = malloc(sizeof(double) * (size_t)(3 * H));
  double *h = malloc(sizeof(double) * (size_t)(H > 0 ? H : 1)), *cs = malloc(sizeof(double) * (size_t)(H > 0 ? H : 1));
  const int32_t *lens = gpuc_has_in(c, RNN_IN_SEQLENS) ? c->in[RNN_IN_SEQLENS]->data : NULL;
  Tensor *y = c->nout > RNN_OUT_Y ? c->out[RNN_OUT_Y] : NULL;
  Tensor *yh = c->nout > RNN_OUT_YH ? c->out[RNN_OUT_YH] : NULL, *yc = c->nout > RNN_OUT_YC ? c->out[RNN_OUT_YC] : NULL;
  int rc = 0;
  if (oom || !cl.xw || !cl.hr || !cl.rh || !h || !cs) { rc = gpuc_op_fail(c, "out of memory"); goto done; }
  for (int64_t b = 0; lens && b < B; b++)
    if (lens[b] < 0 || lens[b] > S) {
      rc = gpuc_op_fail(c, "sequence length %d (element %lld of sequence_lens) is outside [0, %lld]", lens[b],
                        (long long)b, (long long)S);
      goto done;
    }
  for (int64_t d = 0; d < D; d++) {
    bool rev = s.reverse || d == 1;
    for (int64_t b = 0; b < B; b++) {
      int64_t len = lens ? lens[b] : S;
      /* initial_h [D, B, H] (layout 1: [B, D, H]), as Y_h */
      int64_t st = (s.layout ? b * D + d : d * B + b) * H;
      for (int64_t j = 0; j < H; j++) {
        h[j] = h0 ? h0[st + j] : 0;
        cs[j] = c0 ? c0[st + j] : 0;
      }
      for (int64_t k = 0; k < S; k++) {
        int64_t t = rev ? S - 1 - k : k;
        int64_t yo = (s.layout ? (b * S + t) * D + d : (t * D + d) * B + b) * H;
        if (t >= len) {
          for (int64_t j = 0; y && j < H; j++) gpuc_set_f64(y, yo + j, 0);
          continue;
        }
        step(&cl, (int)d, cl.x + (s.layout ? b * S + t : t * B + b) * I, h, cs);
        for (int64_t j = 0; y && j < H; j++) gpuc_set_f64(y, yo + j, h[j]);
      }
      for (int64_t j = 0; j < H; j++) {
        if (yh) gpuc_set_f64(yh, st + j, h[j]);
        if (yc) gpuc_set_f64(yc, st + j, cs[j]);
      }
    }
  }
done:
  free((void *)cl.x), free((void *)cl.w), free((void *)cl.r), free((void *)cl.bias), free((void *)cl.p);
  free(h0), free(c0), free(cl.xw), free(cl.hr), free(cl.rh), free(h), free(cs);
  return rc;
}

int ref_LSTM(OpCtx *c) { return ref_rnn(c); }
int ref_GRU(OpCtx *c) { return ref_rnn(c); }
int ref_RNN(OpCtx *c) { return ref_rnn(c); }
