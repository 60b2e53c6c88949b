/* GPU lowerings of the generators: Constant ConstantOfShape EyeLike OneHot
 * Range (semantics: runtime/ref/ref_generate.c). Output shapes are static;
 * values known at compile time are baked into the source as bit patterns
 * (computed on the host with the reference's own conversions), values that
 * are runtime tensors (OneHot's off/on, Range's start/delta) are read by
 * the kernel. */
#include "lower_util.h"
#include <stdio.h>
#include <string.h>

typedef long long ll;

/* Bits of the value v stored in dtype dt the way the reference stores it. */
static unsigned long long value_bits(GpucDType dt, double v) {
  char elem[16] = {0};
  Tensor t = {.dt = dt, .rank = 0, .data = elem};
  gpuc_set_f64(&t, 0, v);
  return cg_elem_bits(dt, elem);
}

/* Fill all n elements of output 0 with one bit pattern. */
static int emit_fill(LowerCtx *c, unsigned long long bits) {
  const Tensor *y = c->out[0];
  int64_t n = gpuc_numel(y);
  if (n == 0) return 0;
  const char *t = cg_bits_type(y->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(%s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) y[i] = (%s)0x%llxULL;\n}\n",
            name, t, (ll)n, t, bits);
  uint32_t args[1] = {c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)n, 1, args);
}

/* ---- Constant, ConstantOfShape ----------------------------------------------- */

/* The frontend turns Constant nodes into constant values; one that reaches
 * codegen gets its attribute's bytes baked into a table the kernel copies
 * (a fill when every element is the same). */
int lower_Constant(LowerCtx *c) {
  const Node *n = c->n;
  const Tensor *y = c->out[0];
  if (n->nattr != 1) return lower_fail(c, "needs exactly one value attribute, has %d", n->nattr);
  const Attr *a = &n->attrs[0];
  int64_t cnt = gpuc_numel(y);
  size_t es = gpuc_dtype_size(y->dt);
  const void *data;
  float f;
  int64_t i64;
  switch (a->kind) {
  case GPUC_ATTR_TENSOR:
    if (!a->t || gpuc_tensor_bytes(a->t) != gpuc_tensor_bytes(y)) return lower_fail(c, "value size mismatch");
    data = a->t->data;
    break;
  case GPUC_ATTR_FLOAT: f = a->f; data = &f; break;
  case GPUC_ATTR_INT: i64 = a->i; data = &i64; break;
  case GPUC_ATTR_FLOATS: data = a->floats; break;
  case GPUC_ATTR_INTS: data = a->ints; break;
  default: return lower_unsupported(c, "constant attribute '%s' is not supported", a->name);
  }
  if (cnt == 0) return 0;
  bool same = true;
  for (int64_t i = 1; i < cnt && same; i++)
    same = !memcmp((const char *)data + i * (int64_t)es, data, es);
  if (same) return emit_fill(c, cg_elem_bits(y->dt, data));
  if (cnt > 65536) return lower_unsupported(c, "a Constant node of %lld elements", (ll)cnt);
  const char *t = cg_bits_type(y->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "__device__ const %s %s_vals[%lld] = {", t, name, (ll)cnt);
  for (int64_t i = 0; i < cnt; i++)
    sb_printf(b, "%s0x%llxULL", i ? ", " : "", cg_elem_bits(y->dt, (const char *)data + i * (int64_t)es));
  sb_printf(b, "};\nextern \"C\" __global__ void %s(%s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) y[i] = %s_vals[i];\n}\n", name, t, (ll)cnt, name);
  uint32_t args[1] = {c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)cnt, 1, args);
}

/* Every element = the 'value' attribute's single element (f32 0 without). */
int lower_ConstantOfShape(LowerCtx *c) {
  const Tensor *y = c->out[0];
  const Attr *a = gpuc_attr(c->n, "value");
  char zero[16] = {0};
  const void *v = a && a->kind == GPUC_ATTR_TENSOR && a->t && a->t->data ? a->t->data : zero;
  if (a && a->t && a->t->dt != y->dt) return lower_fail(c, "value dtype differs from the output's");
  return emit_fill(c, cg_elem_bits(y->dt, v));
}

/* ---- EyeLike, OneHot, Range ------------------------------------------------ */

/* Zeros with ones at [i, i + k]. */
int lower_EyeLike(LowerCtx *c) {
  const Tensor *y = c->out[0];
  int64_t rows = y->dims[0], cols = y->dims[1], k = gpuc_attr_i(c->n, "k", 0), n = gpuc_numel(y);
  if (n == 0) return 0;
  if (k >= cols || k <= -rows) return emit_fill(c, 0);
  const char *t = cg_bits_type(y->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(%s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) { i64 row = i / %lldLL, col = i - row * %lldLL;\n"
               "    y[i] = col - row == %lldLL ? (%s)0x%llxULL : (%s)0; }\n}\n",
            name, t, (ll)n, (ll)cols, (ll)cols, (ll)k, t, value_bits(y->dt, 1.0), t);
  uint32_t args[1] = {c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)n, 1, args);
}

/* Output [outer, depth, inner] around the axis is values[0] (off) except
 * y[o, v, n] = values[1] (on) where v = indices[o, n] (+ depth when
 * negative); indices outside [-depth, depth) give an all-off row. Float
 * indices truncate toward zero (NaN is off). */
int lower_OneHot(LowerCtx *c) {
  const Tensor *ind = c->in[0], *vals = c->in[2], *y = c->out[0];
  int R = y->rank, axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", -1), R, &axis)) return -1;
  if (gpuc_numel(vals) != 2) return lower_fail(c, "values must have 2 elements");
  if (vals->dt != y->dt) return lower_fail(c, "values dtype differs from the output's");
  int64_t depth = y->dims[axis], n = gpuc_numel(y);
  int64_t inner = gpuc_shape_numel(ind->rank - axis, ind->dims + axis);
  if (n == 0) return 0;
  const char *t = cg_bits_type(y->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ ind, const %s* __restrict__ vals, %s* __restrict__ y) {\n"
               "  const %s off = vals[0], on = vals[1];\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 j = i %% %lldLL, t = i / %lldLL, d = t %% %lldLL, o = t / %lldLL, v;\n"
               "    bool ok = true;\n",
            name, cg_ctype(ind->dt), t, t, t, (ll)n, (ll)inner, (ll)inner, (ll)depth, (ll)depth);
  const char *src = "ind[o * %lldLL + j]";
  char at[96];
  snprintf(at, sizeof at, src, (ll)inner);
  if (gpuc_dtype_is_float(ind->dt)) {
    bool h = ind->dt == GPUC_DT_F16 || ind->dt == GPUC_DT_BF16;
    sb_printf(b, "    double f = (double)%s(%s);\n"
                 "    ok = f > -(double)%lldLL - 1 && f < (double)%lldLL;\n"
                 "    v = ok ? (i64)f : 0;\n",
              h ? "ldf" : "", at, (ll)depth, (ll)depth);
  } else {
    sb_printf(b, "    v = (i64)%s;\n", at);
  }
  sb_printf(b, "    ok = ok && v >= -%lldLL && v < %lldLL;\n"
               "    if (v < 0) v += %lldLL;\n"
               "    y[i] = ok && v == d ? on : off;\n  }\n}\n",
            (ll)depth, (ll)depth, (ll)depth);
  uint32_t args[3] = {c->tin[0], c->tin[2], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)n, 3, args);
}

/* y[i] = start + i * delta; the count is the output's length. Floats in
 * double (stored as the reference stores f64 values), integers in int64. */
int lower_Range(LowerCtx *c) {
  const Tensor *s = c->in[0], *d = c->in[2], *y = c->out[0];
  int64_t n = y->dims[0];
  if (n == 0) return 0;
  GpucDType dt = y->dt;
  if (dt == GPUC_DT_BOOL || dt == GPUC_DT_U64)
    return lower_unsupported(c, "Range of %s", gpuc_dtype_name(dt));
  const char *T = cg_ctype(dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ s, const %s* __restrict__ d, %s* __restrict__ y) {\n",
            name, cg_ctype(s->dt), cg_ctype(d->dt), T);
  if (gpuc_dtype_is_float(dt)) {
    bool h = dt == GPUC_DT_F16 || dt == GPUC_DT_BF16;
    sb_printf(b, "  const double sv = (double)%s(s[0]), dv = (double)%s(d[0]);\n", h ? "ldf" : "", h ? "ldf" : "");
    if (h) sb_printf(b, "  GRID_STRIDE(i, %lldLL) y[i] = stf<%s>((float)(sv + (double)i * dv));\n}\n", (ll)n, T);
    else sb_printf(b, "  GRID_STRIDE(i, %lldLL) y[i] = (%s)(sv + (double)i * dv);\n}\n", (ll)n, T);
  } else {
    sb_printf(b, "  const i64 sv = (i64)s[0], dv = (i64)d[0];\n"
                 "  GRID_STRIDE(i, %lldLL) y[i] = (%s)(i64)((unsigned long long)sv + (unsigned long long)i * (unsigned long long)dv);\n}\n",
              (ll)n, T);
  }
  uint32_t args[3] = {c->tin[0], c->tin[2], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)n, 3, args);
}
