/* Shape/dtype inference for the elementwise family: unary math and
 * activations, binary arithmetic/logic/comparison with numpy broadcasting,
 * the variadic Max/Min/Mean/Sum, Where, Cast/CastLike, Identity, Dropout.
 *
 * Every output has the broadcast shape of its inputs (unary ops: the input's
 * shape); only dtypes differ: comparisons, logic ops, IsInf/IsNaN give bool,
 * Cast gives 'to', Pow keeps the base's dtype. Unknown dims (-1) propagate
 * through gpuc_infer_broadcast. */
#include "infer_elementwise.h"
#include "infer_util.h"
#include <string.h>

#define DT(x) GPUC_DT_##x
static const GpucDType FLOATS[] = {DT(F32), DT(F16), DT(BF16), DT(F64), DT(UNDEF)};
static const GpucDType NUMERIC[] = {DT(F32), DT(F16), DT(BF16), DT(F64), DT(I8),  DT(U8),
                                    DT(I16), DT(U16), DT(I32),  DT(U32), DT(I64), DT(U64),
                                    DT(UNDEF)};
static const GpucDType ALL[] = {DT(F32), DT(F16), DT(BF16), DT(F64), DT(I8),   DT(U8),   DT(I16),
                                DT(U16), DT(I32), DT(U32),  DT(I64), DT(U64), DT(BOOL), DT(UNDEF)};
static const GpucDType BOOLS[] = {DT(BOOL), DT(UNDEF)};
static const GpucDType INTS[] = {DT(I8),  DT(U8),  DT(I16), DT(U16), DT(I32),
                                 DT(U32), DT(I64), DT(U64), DT(UNDEF)};
static const GpucDType UINTS[] = {DT(U8), DT(U16), DT(U32), DT(U64), DT(UNDEF)};

/* ---- shared with the reference kernels -------------------------------- */

GpucDType gpuc_ew_onnx_dtype(int64_t t) {
  switch (t) { /* TensorProto.DataType numbers, fixed by the ONNX spec */
  case 1: return DT(F32);
  case 2: return DT(U8);
  case 3: return DT(I8);
  case 4: return DT(U16);
  case 5: return DT(I16);
  case 6: return DT(I32);
  case 7: return DT(I64);
  case 9: return DT(BOOL);
  case 10: return DT(F16);
  case 11: return DT(F64);
  case 12: return DT(U32);
  case 13: return DT(U64);
  case 16: return DT(BF16);
  default: return DT(UNDEF);
  }
}

/* Cast-1 names the target type with a string. */
static GpucDType dtype_from_name(const char *s) {
  static const struct { const char *name; GpucDType dt; } names[] = {
      {"FLOAT", DT(F32)},  {"UINT8", DT(U8)},   {"INT8", DT(I8)},       {"UINT16", DT(U16)},
      {"INT16", DT(I16)},  {"INT32", DT(I32)},  {"INT64", DT(I64)},     {"BOOL", DT(BOOL)},
      {"FLOAT16", DT(F16)}, {"DOUBLE", DT(F64)}, {"UINT32", DT(U32)},   {"UINT64", DT(U64)},
      {"BFLOAT16", DT(BF16)},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(s, names[i].name)) return names[i].dt;
  return DT(UNDEF);
}

/* Legacy (opset < 7) binary broadcast: B aligned to A at 'axis'. */
static const Tensor *legacy_binary_view(OpCtx *c, Tensor *tmp) {
  const Tensor *a = c->in[0], *b = c->in[1];
  const Attr *ax = gpuc_attr(c->n, "axis");
  if (!ax || ax->kind != GPUC_ATTR_INT) return b; /* suffix alignment = numpy */
  int64_t axis = ax->i < 0 ? ax->i + a->rank : ax->i;
  if (axis < 0 || axis > a->rank - b->rank) {
    gpuc_op_fail(c, "legacy broadcast: axis %lld does not fit B of rank %d into A of rank %d",
                 (long long)ax->i, b->rank, a->rank);
    return NULL;
  }
  *tmp = *b;
  tmp->rank = (int)(a->rank - axis);
  for (int d = b->rank; d < tmp->rank; d++) tmp->dims[d] = 1;
  return tmp;
}

/* PRelu-6: slope is a scalar or per channel (X's dim 1). */
static const Tensor *legacy_prelu_view(OpCtx *c, Tensor *tmp) {
  const Tensor *x = c->in[0], *s = c->in[1];
  if (s->rank != 1 || s->dims[0] == 1 || x->rank < 2) return s;
  if (s->dims[0] >= 0 && x->dims[1] >= 0 && s->dims[0] != x->dims[1]) return s; /* numpy then */
  *tmp = *s;
  tmp->rank = x->rank - 1; /* [C] -> [C, 1, ..., 1] against [N, C, ...] */
  for (int d = 1; d < tmp->rank; d++) tmp->dims[d] = 1;
  return tmp;
}

const Tensor *gpuc_ew_bcast_view(OpCtx *c, int i, Tensor *tmp) {
  const Tensor *t = c->in[i];
  if (!t || c->g->opset >= 7 || i != 1 || c->nin != 2 || !c->in[0]) return t;
  if (c->n->op == GPUC_OP_PRELU) return legacy_prelu_view(c, tmp);
  if (gpuc_attr_i(c->n, "broadcast", 0)) return legacy_binary_view(c, tmp);
  return t;
}

/* ---- helpers ----------------------------------------------------------- */

/* The op's first min_in inputs must be present: an empty name in the middle
 * of a node's input list arrives as NULL. */
static int need_inputs(OpCtx *c) {
  int m = gpuc_ops[c->n->op].min_in;
  for (int k = 0; k < m && k < c->nin; k++)
    if (!c->in[k]) return gpuc_op_fail(c, "input %d is required", k);
  return 0;
}

static void set_dt(OpCtx *c, int o, GpucDType dt) {
  if (o < c->nout && c->out[o]) c->out[o]->dt = dt;
}

/* y = f(x): same shape, dtype out_dt (UNDEF: x's dtype). */
static int unary(OpCtx *c, const GpucDType *allowed, GpucDType out_dt) {
  if (need_inputs(c) || gpuc_check_dtype(c, 0, allowed)) return -1;
  gpuc_infer_same(c, 0, 0);
  if (out_dt != DT(UNDEF)) set_dt(c, 0, out_dt);
  return 0;
}

/* Inputs [first, first+count) that are present must share one dtype. */
static int same_dtypes(OpCtx *c, int first, int count) {
  int k0 = -1;
  for (int k = first; k < first + count && k < c->nin; k++) {
    if (!c->in[k]) continue;
    if (k0 < 0) k0 = k;
    else if (c->in[k]->dt != c->in[k0]->dt)
      return gpuc_op_fail(c, "input %d is %s, input %d is %s; they must match", k0,
                          gpuc_dtype_name(c->in[k0]->dt), k, gpuc_dtype_name(c->in[k]->dt));
  }
  return 0;
}

/* Output 0 = broadcast of in[0] and the (possibly legacy-viewed) in[1]. */
static int broadcast2(OpCtx *c, GpucDType out_dt) {
  Tensor tmp;
  const Tensor *b = gpuc_ew_bcast_view(c, 1, &tmp);
  if (!b) return -1;
  const Tensor *ins[2] = {c->in[0], b};
  OpCtx c2 = *c;
  c2.in = ins;
  c2.nin = 2;
  if (!c->out[0]) return 0;
  if (gpuc_infer_broadcast(&c2, 0, 2, c->out[0])) return -1;
  c->out[0]->dt = out_dt;
  return 0;
}

/* Binary op on one dtype from 'allowed'; output dtype out_dt (UNDEF: the
 * inputs'). */
static int binary(OpCtx *c, const GpucDType *allowed, GpucDType out_dt) {
  if (need_inputs(c) || gpuc_check_dtype(c, 0, allowed) || gpuc_check_dtype(c, 1, allowed) || same_dtypes(c, 0, 2))
    return -1;
  return broadcast2(c, out_dt != DT(UNDEF) ? out_dt : c->in[0]->dt);
}

/* Max/Min/Mean/Sum: any number of same-dtype inputs, all broadcast. */
static int variadic(OpCtx *c, const GpucDType *allowed) {
  if (c->nin < 1 || !c->in[0]) return gpuc_op_fail(c, "needs at least one input");
  for (int k = 0; k < c->nin; k++) {
    if (!c->in[k]) return gpuc_op_fail(c, "input %d is missing", k);
    if (gpuc_check_dtype(c, k, allowed)) return -1;
  }
  if (same_dtypes(c, 0, c->nin)) return -1;
  if (!c->out[0]) return 0;
  if (gpuc_infer_broadcast(c, 0, c->nin, c->out[0])) return -1;
  c->out[0]->dt = c->in[0]->dt;
  return 0;
}

/* A bound input (Clip min/max, Dropout ratio/training_mode) must hold one
 * value; a definite other count is an error. */
static int scalar_input(OpCtx *c, int i, const char *what) {
  if (!gpuc_has_in(c, i)) return 0;
  const Tensor *t = c->in[i];
  if (gpuc_shape_known(t) && gpuc_numel(t) != 1) {
    char s[128];
    gpuc_shape_str(t, s, sizeof s);
    return gpuc_op_fail(c, "%s must be a scalar, got shape %s", what, s);
  }
  return 0;
}

/* ---- unary math -------------------------------------------------------- */
#define FLOAT_UNARY(Name) \
  int infer_##Name(OpCtx *c) { return unary(c, FLOATS, DT(UNDEF)); }
FLOAT_UNARY(Acos)
FLOAT_UNARY(Acosh)
FLOAT_UNARY(Asin)
FLOAT_UNARY(Asinh)
FLOAT_UNARY(Atan)
FLOAT_UNARY(Atanh)
FLOAT_UNARY(Ceil)
FLOAT_UNARY(Cos)
FLOAT_UNARY(Cosh)
FLOAT_UNARY(Exp)
FLOAT_UNARY(Floor)
FLOAT_UNARY(Log)
FLOAT_UNARY(Reciprocal)
FLOAT_UNARY(Round)
FLOAT_UNARY(Sin)
FLOAT_UNARY(Sinh)
FLOAT_UNARY(Sqrt)
FLOAT_UNARY(Tan)
FLOAT_UNARY(Tanh)
FLOAT_UNARY(Sigmoid)
FLOAT_UNARY(Elu)
FLOAT_UNARY(Celu)
FLOAT_UNARY(Selu)
FLOAT_UNARY(LeakyRelu)
FLOAT_UNARY(HardSigmoid)
FLOAT_UNARY(HardSwish)
FLOAT_UNARY(Softplus)
FLOAT_UNARY(Softsign)
FLOAT_UNARY(ThresholdedRelu)
FLOAT_UNARY(Mish)
#undef FLOAT_UNARY

int gpuc_gelu_tanh(const Node *n) {
  const char *a = gpuc_attr_s(n, "approximate", "none");
  return strcmp(a, "none") == 0 ? 0 : strcmp(a, "tanh") == 0 ? 1 : -1;
}

int gpuc_bitshift_left(const Node *n) {
  const char *d = gpuc_attr_s(n, "direction", "");
  return strcmp(d, "LEFT") == 0 ? 1 : strcmp(d, "RIGHT") == 0 ? 0 : -1;
}

/* Gelu-20: float types; approximate is "none" or "tanh". */
int infer_Gelu(OpCtx *c) {
  if (gpuc_gelu_tanh(c->n) < 0)
    return gpuc_op_fail(c, "approximate must be \"none\" or \"tanh\", got \"%s\"",
                        gpuc_attr_s(c->n, "approximate", "none"));
  return unary(c, FLOATS, DT(UNDEF));
}

/* Erf-9 and later, Abs, Neg, Sign, Relu-14 and Shrink take integers too. */
int infer_Erf(OpCtx *c) { return unary(c, NUMERIC, DT(UNDEF)); }
int infer_Abs(OpCtx *c) { return unary(c, NUMERIC, DT(UNDEF)); }
int infer_Neg(OpCtx *c) { return unary(c, NUMERIC, DT(UNDEF)); }
int infer_Sign(OpCtx *c) { return unary(c, NUMERIC, DT(UNDEF)); }
int infer_Relu(OpCtx *c) { return unary(c, NUMERIC, DT(UNDEF)); }
int infer_Shrink(OpCtx *c) { return unary(c, NUMERIC, DT(UNDEF)); }
int infer_Not(OpCtx *c) { return unary(c, BOOLS, DT(UNDEF)); }
int infer_IsInf(OpCtx *c) { return unary(c, FLOATS, DT(BOOL)); }
int infer_IsNaN(OpCtx *c) { return unary(c, FLOATS, DT(BOOL)); }

/* Clip: bounds are attributes before opset 11, optional scalar inputs
 * (same dtype as X) from 11 on. */
int infer_Clip(OpCtx *c) {
  if (need_inputs(c) || gpuc_check_dtype(c, 0, c->g->opset >= 11 ? NUMERIC : FLOATS)) return -1;
  if (c->g->opset >= 11) {
    for (int i = 1; i < 3; i++) {
      if (!gpuc_has_in(c, i)) continue;
      if (c->in[i]->dt != c->in[0]->dt)
        return gpuc_op_fail(c, "%s is %s, X is %s", i == 1 ? "min" : "max",
                            gpuc_dtype_name(c->in[i]->dt), gpuc_dtype_name(c->in[0]->dt));
      if (scalar_input(c, i, i == 1 ? "min" : "max")) return -1;
    }
  } else if (gpuc_has_in(c, 1)) {
    return gpuc_op_fail(c, "Clip before opset 11 takes one input");
  }
  return gpuc_infer_same(c, 0, 0);
}

/* PRelu: slope broadcasts to X one way (opset >= 7), so Y has X's shape. */
int infer_PRelu(OpCtx *c) {
  if (need_inputs(c) || gpuc_check_dtype(c, 0, NUMERIC) || same_dtypes(c, 0, 2)) return -1;
  Tensor tmp, bc;
  const Tensor *s = gpuc_ew_bcast_view(c, 1, &tmp);
  if (!s) return -1;
  const Tensor *ins[2] = {c->in[0], s};
  OpCtx c2 = *c;
  c2.in = ins;
  if (gpuc_infer_broadcast(&c2, 0, 2, &bc)) return -1;
  /* the two-way broadcast must not grow X */
  const Tensor *x = c->in[0];
  bool ok = bc.rank == x->rank;
  for (int d = 0; ok && d < x->rank; d++)
    if (x->dims[d] >= 0 && bc.dims[d] >= 0 && x->dims[d] != bc.dims[d]) ok = false;
  if (!ok) {
    char a[128], b[128];
    gpuc_shape_str(x, a, sizeof a);
    gpuc_shape_str(c->in[1], b, sizeof b);
    return gpuc_op_fail(c, "slope of shape %s does not broadcast to X of shape %s", b, a);
  }
  return gpuc_infer_same(c, 0, 0);
}

/* ---- binary ------------------------------------------------------------ */
int infer_Add(OpCtx *c) { return binary(c, NUMERIC, DT(UNDEF)); }
int infer_Sub(OpCtx *c) { return binary(c, NUMERIC, DT(UNDEF)); }
int infer_Mul(OpCtx *c) { return binary(c, NUMERIC, DT(UNDEF)); }
int infer_Div(OpCtx *c) { return binary(c, NUMERIC, DT(UNDEF)); }
int infer_Mod(OpCtx *c) { return binary(c, NUMERIC, DT(UNDEF)); }
int infer_And(OpCtx *c) { return binary(c, BOOLS, DT(BOOL)); }
int infer_Or(OpCtx *c) { return binary(c, BOOLS, DT(BOOL)); }
int infer_Xor(OpCtx *c) { return binary(c, BOOLS, DT(BOOL)); }
/* Bitwise*-18 on integers (the inputs' dtype); BitShift on unsigned
 * integers (opset 11), signed ones too from opset 28; direction LEFT or
 * RIGHT. */
int infer_BitwiseAnd(OpCtx *c) { return binary(c, INTS, DT(UNDEF)); }
int infer_BitwiseOr(OpCtx *c) { return binary(c, INTS, DT(UNDEF)); }
int infer_BitwiseXor(OpCtx *c) { return binary(c, INTS, DT(UNDEF)); }
int infer_BitwiseNot(OpCtx *c) { return unary(c, INTS, DT(UNDEF)); }
int infer_BitShift(OpCtx *c) {
  if (gpuc_bitshift_left(c->n) < 0)
    return gpuc_op_fail(c, "direction must be \"LEFT\" or \"RIGHT\", got \"%s\"",
                        gpuc_attr_s(c->n, "direction", "(none)"));
  return binary(c, c->g->opset >= 28 ? INTS : UINTS, DT(UNDEF));
}
int infer_Equal(OpCtx *c) { return binary(c, ALL, DT(BOOL)); }
int infer_Greater(OpCtx *c) { return binary(c, ALL, DT(BOOL)); }
int infer_GreaterOrEqual(OpCtx *c) { return binary(c, ALL, DT(BOOL)); }
int infer_Less(OpCtx *c) { return binary(c, ALL, DT(BOOL)); }
int infer_LessOrEqual(OpCtx *c) { return binary(c, ALL, DT(BOOL)); }

/* Pow: base and exponent may differ in dtype (opset 12+); Y is the base's. */
int infer_Pow(OpCtx *c) {
  if (need_inputs(c) || gpuc_check_dtype(c, 0, NUMERIC) || gpuc_check_dtype(c, 1, NUMERIC)) return -1;
  return broadcast2(c, c->in[0]->dt);
}

/* Where(cond, X, Y): three-way broadcast; X and Y share the output dtype. */
int infer_Where(OpCtx *c) {
  if (need_inputs(c) || gpuc_check_dtype(c, 0, BOOLS) || gpuc_check_dtype(c, 1, ALL) || same_dtypes(c, 1, 2))
    return -1;
  if (!c->out[0]) return 0;
  if (gpuc_infer_broadcast(c, 0, 3, c->out[0])) return -1;
  c->out[0]->dt = c->in[1]->dt;
  return 0;
}

/* ---- variadic ---------------------------------------------------------- */
int infer_Max(OpCtx *c) { return variadic(c, NUMERIC); }
int infer_Min(OpCtx *c) { return variadic(c, NUMERIC); }
int infer_Sum(OpCtx *c) { return variadic(c, NUMERIC); }
int infer_Mean(OpCtx *c) { return variadic(c, FLOATS); }

/* ---- type and copies --------------------------------------------------- */
int infer_Cast(OpCtx *c) {
  const Attr *to = gpuc_attr(c->n, "to");
  if (!to) return gpuc_op_fail(c, "attribute 'to' is required");
  GpucDType dt = DT(UNDEF);
  if (to->kind == GPUC_ATTR_INT) dt = gpuc_ew_onnx_dtype(to->i);
  else if (to->kind == GPUC_ATTR_STRING) dt = dtype_from_name(to->s);
  if (dt == DT(UNDEF)) {
    if (to->kind == GPUC_ATTR_INT)
      return gpuc_op_unsupported(c, "cast to ONNX element type %lld is not supported", (long long)to->i);
    return gpuc_op_unsupported(c, "cast to '%s' is not supported",
                               to->kind == GPUC_ATTR_STRING ? to->s : "?");
  }
  return unary(c, ALL, dt);
}

/* CastLike(X, like): X's shape, like's dtype. */
int infer_CastLike(OpCtx *c) {
  if (need_inputs(c) || gpuc_check_dtype(c, 1, ALL)) return -1;
  return unary(c, ALL, c->in[1]->dt);
}

int infer_Identity(OpCtx *c) { return unary(c, ALL, DT(UNDEF)); }

/* Dropout: Y like X; the optional mask has X's shape, bool from opset 10
 * (X's dtype before). Opset 12+ takes ratio and training_mode as inputs. */
int infer_Dropout(OpCtx *c) {
  if (unary(c, FLOATS, DT(UNDEF))) return -1;
  if (c->g->opset >= 12) {
    if (gpuc_check_dtype(c, 1, FLOATS) || gpuc_check_dtype(c, 2, BOOLS) ||
        scalar_input(c, 1, "ratio") || scalar_input(c, 2, "training_mode"))
      return -1;
  } else if (c->nin > 1) {
    return gpuc_op_fail(c, "Dropout before opset 12 takes one input");
  }
  if (c->nout > 1 && c->out[1]) {
    const Tensor *x = c->in[0];
    gpuc_set_shape(c->out[1], c->g->opset >= 10 ? DT(BOOL) : x->dt, x->rank, x->dims);
  }
  return 0;
}
