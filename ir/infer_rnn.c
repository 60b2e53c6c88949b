/* Shape inference of LSTM, GRU and RNN (ir/rnn.h has the shapes). One
 * parser, gpuc_rnn_spec, checks the attributes and every shape known here
 * and fills an RnnSpec that the reference and the GPU lowering read, so
 * the three agree on what a node means. */
#include "infer_util.h"
#include "rnn.h"
#include <math.h>
#include <strings.h>
#include <string.h>

#define RNN_DIM_LIMIT (1LL << 31) /* hidden_size past any real weight */

/* name, kind, how many of activation_alpha / activation_beta it takes and
 * their defaults (those of the ONNX ops of the same names) */
static const struct {
  const char *name;
  RnnActKind kind;
  int nparams;
  float alpha, beta;
} acts[] = {
    {"Relu", RNN_ACT_RELU, 0, 0, 0},           {"Tanh", RNN_ACT_TANH, 0, 0, 0},
    {"Sigmoid", RNN_ACT_SIGMOID, 0, 0, 0},     {"Affine", RNN_ACT_AFFINE, 2, 1.0f, 0.0f},
    {"LeakyRelu", RNN_ACT_LEAKYRELU, 1, 0.01f, 0}, {"ThresholdedRelu", RNN_ACT_THRESHOLDEDRELU, 1, 1.0f, 0},
    {"ScaledTanh", RNN_ACT_SCALEDTANH, 2, 1.0f, 1.0f}, {"HardSigmoid", RNN_ACT_HARDSIGMOID, 2, 0.2f, 0.5f},
    {"Elu", RNN_ACT_ELU, 1, 1.0f, 0},          {"Softsign", RNN_ACT_SOFTSIGN, 0, 0, 0},
    {"Softplus", RNN_ACT_SOFTPLUS, 0, 0, 0},
};

double gpuc_rnn_act(const RnnAct *a, double x) {
  switch (a->kind) {
  case RNN_ACT_RELU: return x > 0 ? x : 0;
  case RNN_ACT_TANH: return tanh(x);
  case RNN_ACT_SIGMOID: return 1 / (1 + exp(-x));
  case RNN_ACT_AFFINE: return a->alpha * x + a->beta;
  case RNN_ACT_LEAKYRELU: return x >= 0 ? x : a->alpha * x;
  case RNN_ACT_THRESHOLDEDRELU: return x > a->alpha ? x : 0;
  case RNN_ACT_SCALEDTANH: return a->alpha * tanh(a->beta * x);
  case RNN_ACT_HARDSIGMOID: return fmax(0, fmin(1, a->alpha * x + a->beta));
  case RNN_ACT_ELU: return x >= 0 ? x : a->alpha * (exp(x) - 1);
  case RNN_ACT_SOFTSIGN: return x / (1 + fabs(x));
  case RNN_ACT_SOFTPLUS: return log1p(exp(x));
  }
  return x;
}

/* The attributes each op has (opset 7 and 14); anything else is refused
 * rather than silently ignored. */
static bool known_attr(GpucOp op, const char *name) {
  static const char *common[] = {"activation_alpha", "activation_beta", "activations", "clip",
                                 "direction", "hidden_size", "layout"};
  for (size_t i = 0; i < sizeof common / sizeof *common; i++)
    if (!strcmp(name, common[i])) return true;
  if (op == GPUC_OP_LSTM) return !strcmp(name, "input_forget");
  if (op == GPUC_OP_GRU) return !strcmp(name, "linear_before_reset");
  return false;
}

/* The activations attribute (nact per direction, or nact for both
 * directions) with activation_alpha/beta consumed in order by the
 * functions that take them (onnxruntime's reading); defaults
 * Sigmoid/Tanh/Tanh (LSTM), Sigmoid/Tanh (GRU), Tanh (RNN). */
static int parse_acts(OpCtx *c, RnnSpec *s) {
  static const char *dflt[3][3] = {{"Sigmoid", "Tanh", "Tanh"}, {"Sigmoid", "Tanh"}, {"Tanh"}};
  const char *const *dnames = dflt[s->op == GPUC_OP_LSTM ? 0 : s->op == GPUC_OP_GRU ? 1 : 2];
  const Attr *an = gpuc_attr(c->n, "activations");
  int n = s->nact * s->dirs;
  const char *names[6];
  if (an) {
    if (an->kind != GPUC_ATTR_STRINGS) return gpuc_op_fail(c, "attribute activations must be strings");
    if (an->n != n && !(s->dirs == 2 && an->n == s->nact))
      return gpuc_op_fail(c, "attribute activations has %d names; %d directions of this op take %d", an->n,
                          s->dirs, n);
    for (int k = 0; k < n; k++) names[k] = an->strings[an->n == n ? k : k % s->nact];
  } else {
    for (int k = 0; k < n; k++) names[k] = dnames[k % s->nact];
  }
  const float *alpha = NULL, *beta = NULL;
  int na = gpuc_attr_floats(c->n, "activation_alpha", &alpha), nb = gpuc_attr_floats(c->n, "activation_beta", &beta);
  int ia = 0, ib = 0;
  for (int k = 0; k < n; k++) {
    size_t j = 0;
    while (j < sizeof acts / sizeof *acts && strcasecmp(acts[j].name, names[k] ? names[k] : "")) j++;
    if (j == sizeof acts / sizeof *acts)
      return gpuc_op_unsupported(c, "activation '%s' is not supported (Relu, Tanh, Sigmoid, Affine, LeakyRelu, "
                                 "ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus are)",
                                 names[k] ? names[k] : "");
    RnnAct a = {.kind = acts[j].kind, .alpha = acts[j].alpha, .beta = acts[j].beta};
    if (acts[j].nparams >= 1 && ia < na) a.alpha = alpha[ia++];
    if (acts[j].nparams >= 2 && ib < nb) a.beta = beta[ib++];
    if (!isfinite(a.alpha) || !isfinite(a.beta))
      return gpuc_op_fail(c, "activation %s has a parameter that is not finite", acts[j].name);
    s->act[k / s->nact][k % s->nact] = a;
  }
  if (s->dirs == 1) memcpy(s->act[1], s->act[0], sizeof s->act[0]);
  return 0;
}

/* *v is a dim of the op (-1 unknown): unify it with dim d of input i. */
static int unify(OpCtx *c, int64_t *v, int i, int d, const char *what) {
  int64_t x = c->in[i]->dims[d];
  if (x < 0) return 0;
  if (*v < 0) { *v = x; return 0; }
  if (x != *v)
    return gpuc_op_fail(c, "input %d has %lld in dim %d where %s is %lld", i, (long long)x, d, what,
                        (long long)*v);
  return 0;
}

/* Input i of rank `rank` and X's dtype (its presence checked by the caller). */
static int check_in(OpCtx *c, int i, int rank, const char *name) {
  const Tensor *t = c->in[i];
  if (t->rank != rank) return gpuc_op_fail(c, "%s (input %d) has rank %d, expected %d", name, i, t->rank, rank);
  if (t->dt != c->in[0]->dt)
    return gpuc_op_fail(c, "%s (input %d) is %s, X is %s", name, i, gpuc_dtype_name(t->dt),
                        gpuc_dtype_name(c->in[0]->dt));
  return 0;
}

/* An input of shape [D, B, H] (layout 0) or [B, D, H] (layout 1). */
static int check_state(OpCtx *c, RnnSpec *s, int i, const char *name) {
  if (check_in(c, i, 3, name)) return -1;
  int64_t dirs = s->dirs;
  int db = s->layout ? 0 : 1, dd = s->layout ? 1 : 0;
  if (unify(c, &dirs, i, dd, "num_directions") || unify(c, &s->batch, i, db, "the batch size") ||
      unify(c, &s->hidden, i, 2, "hidden_size"))
    return -1;
  return 0;
}

/* dim d of input i is k times hidden_size (-1: it is not; the caller says
 * why); sets hidden_size when it is still unknown */
static int check_times_hidden(OpCtx *c, RnnSpec *s, int i, int d, int k) {
  int64_t x = c->in[i]->dims[d];
  if (x < 0) return 0;
  if (x % k || (s->hidden >= 0 && x / k != s->hidden)) return -1;
  if (s->hidden < 0) s->hidden = x / k;
  return 0;
}

int gpuc_rnn_spec(OpCtx *c, RnnSpec *s) {
  const Node *n = c->n;
  *s = (RnnSpec){.op = n->op, .seq = -1, .batch = -1, .input = -1, .hidden = -1};
  s->gates = n->op == GPUC_OP_LSTM ? 4 : n->op == GPUC_OP_GRU ? 3 : 1;
  s->nact = n->op == GPUC_OP_LSTM ? 3 : n->op == GPUC_OP_GRU ? 2 : 1;
  for (int k = 0; k < n->nattr; k++) {
    const Attr *a = &n->attrs[k];
    if (!known_attr(n->op, a->name)) return gpuc_op_unsupported(c, "attribute '%s' is not supported", a->name);
    bool str = !strcmp(a->name, "direction"), strs = !strcmp(a->name, "activations");
    bool flts = !strcmp(a->name, "activation_alpha") || !strcmp(a->name, "activation_beta");
    GpucAttrKind want = str ? GPUC_ATTR_STRING : strs ? GPUC_ATTR_STRINGS : flts ? GPUC_ATTR_FLOATS
                      : !strcmp(a->name, "clip") ? GPUC_ATTR_FLOAT : GPUC_ATTR_INT;
    if (a->kind != want) return gpuc_op_fail(c, "attribute %s has the wrong type", a->name);
  }
  const char *dir = gpuc_attr_s(n, "direction", "forward");
  if (!strcmp(dir, "forward")) s->dirs = 1;
  else if (!strcmp(dir, "reverse")) s->dirs = 1, s->reverse = true;
  else if (!strcmp(dir, "bidirectional")) s->dirs = 2;
  else return gpuc_op_fail(c, "attribute direction is '%s', not forward, reverse or bidirectional", dir);
  int64_t layout = gpuc_attr_i(n, "layout", 0);
  if (layout != 0 && layout != 1) return gpuc_op_fail(c, "attribute layout is %lld, not 0 or 1", (long long)layout);
  s->layout = (int)layout;
  if (gpuc_attr(n, "clip")) {
    s->has_clip = true;
    s->clip = gpuc_attr_f(n, "clip", 0);
    if (!(s->clip > 0)) return gpuc_op_fail(c, "attribute clip is %g; it must be positive", (double)s->clip);
  }
  int64_t inf = gpuc_attr_i(n, "input_forget", 0);
  if (inf != 0 && inf != 1) return gpuc_op_fail(c, "attribute input_forget is %lld, not 0 or 1", (long long)inf);
  s->input_forget = inf;
  s->linear_before_reset = gpuc_attr_i(n, "linear_before_reset", 0) != 0;
  if (parse_acts(c, s)) return -1;
  if (gpuc_attr(n, "hidden_size")) {
    s->hidden = gpuc_attr_i(n, "hidden_size", 0);
    if (s->hidden <= 0 || s->hidden > RNN_DIM_LIMIT)
      return gpuc_op_fail(c, "attribute hidden_size is %lld, not a size", (long long)s->hidden);
  }

  static const GpucDType floats[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, RNN_IN_X, floats)) return -1;
  if (check_in(c, RNN_IN_X, 3, "X") || check_in(c, RNN_IN_W, 3, "W") || check_in(c, RNN_IN_R, 3, "R"))
    return -1;
  s->seq = c->in[0]->dims[s->layout ? 1 : 0];
  s->batch = c->in[0]->dims[s->layout ? 0 : 1];
  s->input = c->in[0]->dims[2];
  int64_t dirs = s->dirs;
  if (unify(c, &dirs, RNN_IN_W, 0, "num_directions") || unify(c, &dirs, RNN_IN_R, 0, "num_directions") ||
      unify(c, &s->input, RNN_IN_W, 2, "X's input size") || unify(c, &s->hidden, RNN_IN_R, 2, "hidden_size"))
    return -1;
  if (check_times_hidden(c, s, RNN_IN_W, 1, s->gates) || check_times_hidden(c, s, RNN_IN_R, 1, s->gates))
    return gpuc_op_fail(c, "W and R must have %d x hidden_size (%lld) rows", s->gates, (long long)s->hidden);
  if (gpuc_has_in(c, RNN_IN_B)) {
    if (check_in(c, RNN_IN_B, 2, "B") || unify(c, &dirs, RNN_IN_B, 0, "num_directions")) return -1;
    if (check_times_hidden(c, s, RNN_IN_B, 1, 2 * s->gates))
      return gpuc_op_fail(c, "B must have 2 x %d x hidden_size (%lld) values per direction", s->gates,
                          (long long)s->hidden);
  }
  if (gpuc_has_in(c, RNN_IN_SEQLENS)) {
    const Tensor *t = c->in[RNN_IN_SEQLENS];
    if (t->dt != GPUC_DT_I32) return gpuc_op_fail(c, "sequence_lens is %s, not int32", gpuc_dtype_name(t->dt));
    if (t->rank != 1) return gpuc_op_fail(c, "sequence_lens has rank %d, expected 1 [batch]", t->rank);
    if (unify(c, &s->batch, RNN_IN_SEQLENS, 0, "the batch size")) return -1;
    if (t->data && s->seq >= 0)
      for (int64_t b = 0; b < t->dims[0]; b++) {
        int32_t v = ((const int32_t *)t->data)[b];
        if (v < 0 || v > s->seq)
          return gpuc_op_fail(c, "sequence length %d (element %lld of sequence_lens) is outside [0, %lld]", v,
                              (long long)b, (long long)s->seq);
      }
  }
  if (gpuc_has_in(c, RNN_IN_H0) && check_state(c, s, RNN_IN_H0, "initial_h")) return -1;
  if (n->op == GPUC_OP_LSTM && gpuc_has_in(c, RNN_IN_C0) && check_state(c, s, RNN_IN_C0, "initial_c")) return -1;
  if (n->op == GPUC_OP_LSTM && gpuc_has_in(c, RNN_IN_P)) {
    if (check_in(c, RNN_IN_P, 2, "P") || unify(c, &dirs, RNN_IN_P, 0, "num_directions")) return -1;
    if (check_times_hidden(c, s, RNN_IN_P, 1, 3))
      return gpuc_op_fail(c, "P must have 3 x hidden_size (%lld) values per direction", (long long)s->hidden);
  }
  if (s->hidden > RNN_DIM_LIMIT) return gpuc_op_fail(c, "hidden size %lld is past any real model", (long long)s->hidden);
  return 0;
}

/* Output o's shape from the op's dims (-1 stays unknown), checked for size. */
static int set_out(OpCtx *c, int o, int rank, const int64_t *dims) {
  if (o >= c->nout || !c->out[o]) return 0;
  gpuc_set_shape(c->out[o], c->in[0]->dt, rank, dims);
  if (!gpuc_shape_known(c->out[o])) return 0;
  int64_t n = gpuc_numel(c->out[o]), es = (int64_t)gpuc_dtype_size(c->in[0]->dt);
  if (n < 0 || n > GPUC_MAX_TENSOR_BYTES / es) {
    char str[160];
    gpuc_shape_str(c->out[o], str, sizeof str);
    return gpuc_op_fail(c, "output %d of shape %s is over the %lld MiB limit for one tensor", o, str,
                        (long long)(GPUC_MAX_TENSOR_BYTES >> 20));
  }
  return 0;
}

static int infer_rnn(OpCtx *c) {
  RnnSpec s;
  if (gpuc_rnn_spec(c, &s)) return -1;
  int64_t S = s.seq, B = s.batch, D = s.dirs, H = s.hidden;
  int64_t y0[4] = {S, D, B, H}, y1[4] = {B, S, D, H}, h0[3] = {D, B, H}, h1[3] = {B, D, H};
  if (set_out(c, RNN_OUT_Y, 4, s.layout ? y1 : y0)) return -1;
  for (int o = RNN_OUT_YH; o <= RNN_OUT_YC; o++)
    if (set_out(c, o, 3, s.layout ? h1 : h0)) return -1;
  return 0;
}

int infer_LSTM(OpCtx *c) { return infer_rnn(c); }
int infer_GRU(OpCtx *c) { return infer_rnn(c); }
int infer_RNN(OpCtx *c) { return infer_rnn(c); }
