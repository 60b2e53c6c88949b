/* ONNX Attention (opset 23/24) expanded into primitive ops at import.
 *
 * torch.onnx.export(dynamo=True, opset_version=23) writes one Attention
 * node per scaled_dot_product_attention. gpuc has its own internal
 * Attention (ir/ops.def, made by passes/fuse_attention.c), so the standard
 * op is not a row of the table: it becomes the graph ONNX defines it by,
 *   S = MatMul(Q, Transpose(K, [0,1,3,2])) * scale
 *   S = softcap * Tanh(S / softcap)                    (softcap > 0)
 *   M = Where(mask, 0, -inf) | mask  (+ causal -inf above the diagonal)
 *   P = Softmax(S + M, axis -1), with a mask Where(IsNaN(P), 0, P): a fully
 *       masked row gives Y = 0, as the spec says
 *   Y = MatMul(P, V)
 * which pass_fuse_attention matches again (one kernel on the GPU) and the
 * CPU reference runs as is. The default scale 1/sqrt(D) is computed from
 * Shape(Q) (folded to a constant once shapes are static); 3-D inputs
 * [B, S, H*D] with q_num_heads are split into heads by Reshape/Transpose
 * and merged back. Whether attn_mask is bool (keep/drop) or added must be
 * known here, before shape inference: from the model's value_info, inputs
 * or initializers (exporters declare it), else the node is refused.
 * Refused as unsupported: past_key/past_value and the present/qk outputs
 * (KV caches), nonpad_kv_seqlen, grouped-query heads (q_num_heads !=
 * kv_num_heads; with 4-D inputs the head counts are not known here and
 * the MatMul's shape inference refuses them), attributes of later opsets
 * (windows). Why not a row of the op table: the name is taken by the
 * internal fused op, and the primitive ops reach the existing fusion, the
 * fp16 policy and the reference without new kernels. */
#include "onnx_expand.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ONNX_BOOL = 9 };

typedef struct {
  Inliner *I;
  char prefix[96];
  int k;                         /* nodes made so far */
  int q_type;                    /* Q's declared TensorProto type, 0 unknown */
} Ex;

static const char *str0(const char *s) { return s ? s : ""; }

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *np, const char *name) {
  for (size_t i = 0; i < np->n_attribute; i++)
    if (!strcmp(str0(np->attribute[i]->name), name)) return np->attribute[i];
  return NULL;
}

static int64_t attr_i(const Onnx__NodeProto *np, const char *name, int64_t dflt) {
  const Onnx__AttributeProto *a = find_attr(np, name);
  return a && a->has_i ? a->i : dflt;
}

/* a value name private to this expansion */
static char *tmp(Ex *x, const char *what) { return fx_cat(x->I, x->prefix, what); }

/* op(ins...) -> out (NULL: a fresh name); returns the node (its output is
 * node->output[0]) or NULL when out of memory. */
static Onnx__NodeProto *mk(Ex *x, const char *op, int nin, const char *const *ins, const char *out) {
  Inliner *I = x->I;
  Onnx__NodeProto *n = fx_own(I, malloc(sizeof *n));
  if (!n) return NULL;
  onnx__node_proto__init(n);
  char label[48];
  snprintf(label, sizeof label, "%s_%d", op, x->k++);
  n->name = tmp(x, label);
  n->op_type = (char *)op;
  n->domain = "";
  n->input = fx_own(I, calloc((size_t)nin + 1, sizeof *n->input));
  n->output = fx_own(I, calloc(2, sizeof *n->output));
  n->attribute = fx_own(I, calloc(3, sizeof *n->attribute));
  if (!n->name || !n->input || !n->output || !n->attribute) return NULL;
  for (int i = 0; i < nin; i++) n->input[i] = (char *)ins[i];
  n->n_input = (size_t)nin;
  n->output[0] = out ? (char *)out : tmp(x, label);
  n->n_output = 1;
  if (!n->output[0] || fx_push(I, n)) return NULL;
  return n;
}

static Onnx__AttributeProto *attr(Ex *x, Onnx__NodeProto *n, const char *name, int type) {
  Onnx__AttributeProto *a = fx_own(x->I, malloc(sizeof *a));
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  n->attribute[n->n_attribute++] = a;
  return a;
}

static const char *v1(Ex *x, const char *op, const char *a) {
  Onnx__NodeProto *n = mk(x, op, 1, &a, NULL);
  return n ? n->output[0] : NULL;
}
static const char *v2(Ex *x, const char *op, const char *a, const char *b) {
  const char *ins[2] = {a, b};
  Onnx__NodeProto *n = mk(x, op, 2, ins, NULL);
  return n ? n->output[0] : NULL;
}

static const char *transpose(Ex *x, const char *a, int p0, int p1, int p2, int p3) {
  Onnx__NodeProto *n = mk(x, "Transpose", 1, &a, NULL);
  Onnx__AttributeProto *at = n ? attr(x, n, "perm", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS) : NULL;
  int64_t *p = fx_own(x->I, malloc(4 * sizeof *p));
  if (!at || !p) return NULL;
  p[0] = p0; p[1] = p1; p[2] = p2; p[3] = p3;
  at->ints = p;
  at->n_ints = 4;
  return n->output[0];
}

/* Constant value_ints / value_float / value_int */
static const char *const_ints(Ex *x, int cnt, const int64_t *v) {
  Onnx__NodeProto *n = mk(x, "Constant", 0, NULL, NULL);
  Onnx__AttributeProto *at = n ? attr(x, n, "value_ints", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS) : NULL;
  int64_t *p = fx_own(x->I, malloc((size_t)cnt * sizeof *p));
  if (!at || !p) return NULL;
  memcpy(p, v, (size_t)cnt * sizeof *p);
  at->ints = p;
  at->n_ints = (size_t)cnt;
  return n->output[0];
}
static const char *const_float(Ex *x, float f) {
  Onnx__NodeProto *n = mk(x, "Constant", 0, NULL, NULL);
  Onnx__AttributeProto *at = n ? attr(x, n, "value_float", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) : NULL;
  if (!at) return NULL;
  at->has_f = 1;
  at->f = f;
  return n->output[0];
}
static const char *const_int(Ex *x, int64_t v) {
  Onnx__NodeProto *n = mk(x, "Constant", 0, NULL, NULL);
  Onnx__AttributeProto *at = n ? attr(x, n, "value_int", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) : NULL;
  if (!at) return NULL;
  at->has_i = 1;
  at->i = v;
  return n->output[0];
}

/* a (computed) float value in Q's dtype: a Cast to Q's declared type,
 * which constant folding removes (the attention fusion needs constant
 * scalings), else a CastLike of Q */
static const char *like_q(Ex *x, const char *a, const char *q) {
  if (!x->q_type) return v2(x, "CastLike", a, q);
  Onnx__NodeProto *n = mk(x, "Cast", 1, &a, NULL);
  Onnx__AttributeProto *to = n ? attr(x, n, "to", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) : NULL;
  if (!to) return NULL;
  to->has_i = 1;
  to->i = x->q_type;
  return n->output[0];
}
static const char *scalar_like(Ex *x, float f, const char *q) {
  const char *c = const_float(x, f);
  return c ? like_q(x, c, q) : NULL;
}

/* [B, S, H*D] -> [B, H, S, D] */
static const char *split_heads(Ex *x, const char *a, int64_t h) {
  int64_t shape[4] = {0, 0, h, -1};
  const char *s = const_ints(x, 4, shape);
  const char *r = s ? v2(x, "Reshape", a, s) : NULL;
  return r ? transpose(x, r, 0, 2, 1, 3) : NULL;
}

#define TRY(p) do { if (!(p)) return fx_oom(I); } while (0)

int gpuc_onnx_expand_attention(Inliner *I, const Onnx__NodeProto *np, const char *nname) {
  const char *path = fx_path(I);
  GpucErr *e = fx_err(I);
  size_t nin = np->n_input, nout = np->n_output;
  while (nin > 0 && !*str0(np->input[nin - 1])) nin--;
  while (nout > 0 && !*str0(np->output[nout - 1])) nout--;
  if (nin < 3 || nout < 1 || !*str0(np->input[0]) || !*str0(np->input[1]) || !*str0(np->input[2]) ||
      !*str0(np->output[0]))
    return gpuc_err_set(e, "%s: node '%s' (Attention): needs inputs Q, K, V and output Y", path, nname);
  if (nin > 4 || nout > 1)
    return gpuc_err_unsupported(e, "%s: node '%s' (Attention): past_key/past_value, nonpad_kv_seqlen "
                                "and the present_key/present_value/qk_matmul_output outputs (KV caches) are "
                                "not supported", path, nname);
  static const char *known[] = {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                "scale", "softcap", "softmax_precision"};
  for (size_t i = 0; i < np->n_attribute; i++) {
    const char *an = str0(np->attribute[i]->name);
    bool ok = false;
    for (size_t j = 0; j < sizeof known / sizeof known[0]; j++) ok = ok || !strcmp(an, known[j]);
    if (!ok)
      return gpuc_err_unsupported(e, "%s: node '%s' (Attention): attribute '%s' is not supported", path,
                                  nname, an);
  }
  int64_t qh = attr_i(np, "q_num_heads", 0), kvh = attr_i(np, "kv_num_heads", 0);
  if ((qh || kvh) && (qh < 1 || qh != kvh || qh > (1 << 20)))
    return gpuc_err_unsupported(e, "%s: node '%s' (Attention): q_num_heads %lld and kv_num_heads %lld: "
                                "only equal head counts (no grouped-query attention) are supported",
                                path, nname, (long long)qh, (long long)kvh);
  int64_t causal = attr_i(np, "is_causal", 0);
  const Onnx__AttributeProto *sa = find_attr(np, "scale"), *ca = find_attr(np, "softcap");
  float softcap = ca && ca->has_f ? ca->f : 0.0f;
  if (!isfinite(softcap) || softcap < 0)
    return gpuc_err_set(e, "%s: node '%s' (Attention): softcap %g is not a finite value >= 0", path, nname,
                        (double)softcap);
  const char *mask = nin > 3 && *str0(np->input[3]) ? np->input[3] : NULL;
  int mask_type = mask ? fx_elem_type(I, mask) : 0;
  if (mask && !mask_type)
    return gpuc_err_unsupported(e, "%s: node '%s' (Attention): the model does not declare attn_mask '%s''s "
                                "element type (value_info), which decides between a bool and an added mask",
                                path, nname, mask);

  Ex x = {.I = I, .q_type = fx_elem_type(I, np->input[0])};
  snprintf(x.prefix, sizeof x.prefix, "attn:%.48s.%llu/", nname, (unsigned long long)fx_next_call(I));
  const char *q = np->input[0], *k = np->input[1], *v = np->input[2];
  if (qh) {
    TRY(q = split_heads(&x, q, qh));
    TRY(k = split_heads(&x, k, kvh));
    TRY(v = split_heads(&x, v, kvh));
  }
  /* S = Q K^T * scale */
  const char *kt, *s, *sc;
  TRY(kt = transpose(&x, k, 0, 1, 3, 2));
  TRY(s = v2(&x, "MatMul", q, kt));
  if (sa && sa->has_f) {
    TRY(sc = scalar_like(&x, sa->f, q));
  } else { /* 1 / sqrt(D), D = Q's last dim */
    Onnx__NodeProto *shp = mk(&x, "Shape", 1, &q, NULL);
    Onnx__AttributeProto *st = shp ? attr(&x, shp, "start", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) : NULL;
    TRY(st);
    st->has_i = 1;
    st->i = -1;
    Onnx__NodeProto *cast = mk(&x, "Cast", 1, (const char *const *)shp->output, NULL);
    Onnx__AttributeProto *to = cast ? attr(&x, cast, "to", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) : NULL;
    TRY(to);
    to->has_i = 1;
    to->i = 1; /* float */
    const char *r;
    TRY(r = v1(&x, "Sqrt", cast->output[0]));
    TRY(r = v1(&x, "Reciprocal", r));
    TRY(sc = like_q(&x, r, q));
  }
  TRY(s = v2(&x, "Mul", s, sc));
  if (softcap > 0) {
    const char *cap;
    TRY(cap = scalar_like(&x, softcap, q));
    TRY(s = v2(&x, "Div", s, cap));
    TRY(s = v1(&x, "Tanh", s));
    TRY(s = v2(&x, "Mul", s, cap));
  }
  /* one additive mask: the given one (bool: 0 where kept, -inf where not)
   * plus, when causal, -inf above the diagonal (top-left aligned) */
  const char *m = NULL;
  if (mask && mask_type == ONNX_BOOL) {
    const char *zero, *ninf;
    TRY(zero = scalar_like(&x, 0.0f, q));
    TRY(ninf = scalar_like(&x, -INFINITY, q));
    const char *ins[3] = {mask, zero, ninf};
    Onnx__NodeProto *w = mk(&x, "Where", 3, ins, NULL);
    TRY(w);
    m = w->output[0];
  } else if (mask) {
    m = mask;
  }
  if (causal) {
    Onnx__NodeProto *shp = mk(&x, "Shape", 1, &s, NULL);
    Onnx__AttributeProto *st = shp ? attr(&x, shp, "start", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) : NULL;
    TRY(st);
    st->has_i = 1;
    st->i = -2;
    const char *z, *ninf, *one, *tri;
    TRY(z = v1(&x, "ConstantOfShape", shp->output[0])); /* f32 zeros [Sq, Sk] */
    TRY(z = like_q(&x, z, q));
    TRY(ninf = scalar_like(&x, -INFINITY, q));
    TRY(z = v2(&x, "Add", z, ninf));
    TRY(one = const_int(&x, 1));
    Onnx__NodeProto *t = mk(&x, "Trilu", 2, (const char *const[]){z, one}, NULL);
    Onnx__AttributeProto *up = t ? attr(&x, t, "upper", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) : NULL;
    TRY(up);
    up->has_i = 1;
    up->i = 1;
    tri = t->output[0];
    if (m) TRY(m = v2(&x, "Add", m, tri));
    else m = tri;
  }
  if (m) TRY(s = v2(&x, "Add", s, m));
  Onnx__NodeProto *sm = mk(&x, "Softmax", 1, &s, NULL);
  Onnx__AttributeProto *ax = sm ? attr(&x, sm, "axis", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) : NULL;
  TRY(ax);
  ax->has_i = 1;
  ax->i = -1;
  const char *p = sm->output[0];
  if (m) { /* a fully masked row (all -inf) gives Y = 0, not NaN */
    const char *zero, *isn;
    TRY(zero = scalar_like(&x, 0.0f, q));
    TRY(isn = v1(&x, "IsNaN", p));
    const char *ins[3] = {isn, zero, p};
    Onnx__NodeProto *w = mk(&x, "Where", 3, ins, NULL);
    TRY(w);
    p = w->output[0];
  }
  const char *y = qh ? NULL : np->output[0];
  const char *pv[2] = {p, v};
  Onnx__NodeProto *mm = mk(&x, "MatMul", 2, pv, y);
  TRY(mm);
  if (qh) { /* [B, H, S, Dv] -> [B, S, H*Dv] */
    const char *t, *shape;
    TRY(t = transpose(&x, mm->output[0], 0, 2, 1, 3));
    int64_t merged[3] = {0, 0, -1};
    TRY(shape = const_ints(&x, 3, merged));
    const char *ins[2] = {t, shape};
    TRY(mk(&x, "Reshape", 2, ins, np->output[0]));
  }
  return 0;
}
