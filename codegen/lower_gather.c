/* GPU lowerings of Gather GatherElements GatherND ScatterElements ScatterND
 * (semantics: runtime/ref/ref_gather.c). One thread per output element
 * (gathers) or per update element (scatters), shapes and strides baked.
 *
 * Indices are runtime tensors (int32 or int64): negative values count from
 * the back. Out-of-range indices: the CPU reference fails with a message
 * naming the index; here the kernel reports it (gpuc_fault_report,
 * runtime/device_fault.h) and the run fails with that message, and it
 * never reads or writes out of bounds meanwhile: a gather element whose
 * index is out of range is written as zero bits, a scatter update whose
 * index is out of range is skipped. Constant indices are checked here, at
 * compile time, with the same message, and their kernels report nothing.
 *
 * Elements move as their bit patterns (unsigned types of the element's
 * width); only scatter reductions do arithmetic, as the reference does:
 * floats combine in double and are rounded once on store (through float
 * for f16/bf16, like gpuc_set_f64), integers wrap in uint64 (u64 compares
 * unsigned, the rest signed after widening), bools store != 0. Concurrent
 * updates of one element go through atomics (native ones where they give
 * the reference's exact result, compare-and-swap loops otherwise; 1- and
 * 2-byte elements CAS their enclosing aligned 32-bit word, which lies in
 * the tensor's 256-byte-aligned arena block). With reduction "none" and
 * duplicate indices, which update lands is unspecified (the ONNX spec
 * leaves it so; the reference applies them in order, last wins); with
 * add/mul on floats the order of the combines may differ from the
 * reference's, changing the rounding. */
#include "lower_util.h"
#include <stdio.h>
#include <string.h>

typedef long long ll;

/* How a kernel's indices are checked: m-tuples (m = 1: single indices),
 * element p of the indices bounded by dims[p % m] on axis axis0 + p % m.
 * step < 0: constant indices, checked at compile time: nothing to report. */
typedef struct IndexCheck { long step; int m, axis0; const int64_t *dims; } IndexCheck;

/* Constant indices are checked now, with the reference's message; runtime
 * ones get the device error record. -1 on a bad constant index. */
static int index_check(LowerCtx *c, const Tensor *ind, int m, const int64_t *dims, int axis0, IndexCheck *ck) {
  *ck = (IndexCheck){.step = -1, .m = m, .axis0 = axis0, .dims = dims};
  if (!ind->data) { ck->step = (long)cg_fault_step(c); return 0; }
  int64_t n = gpuc_numel(ind);
  for (int64_t p = 0; p < n; p++) {
    int64_t v = gpuc_get_i64(ind, p), dim = dims[p % m];
    if (v < -dim || v >= dim)
      return lower_fail(c, "index %lld (element %lld of the indices) out of range [%lld, %lld) for axis %d", (ll)v,
                        (ll)p, (ll)-dim, (ll)dim, axis0 + (int)(p % m));
  }
  return 0;
}

/* Emit code setting `v` (i64) to index element `at` (tuple member j) of
 * `ind` wrapped by its dim, and clearing `ok` when it is out of
 * [-dim, dim), which the kernel then reports. */
static void emit_index(StrBuf *b, const char *indent, const char *v, const char *ind, const char *at, int j,
                       const IndexCheck *ck, const char *ok) {
  ll dim = (ll)ck->dims[j];
  sb_printf(b, "%s{ i64 w_ = (i64)%s[%s]; bool in_ = w_ >= -%lldLL && w_ < %lldLL;\n", indent, ind, at, dim, dim);
  if (ck->step >= 0)
    sb_printf(b, "%s  if (!in_) gpuc_fault_report(%ldu, %d, w_, (i64)(%s), %lldLL, %d);\n", indent, ck->step,
              GPUC_FAULT_INDEX, at, dim, ck->axis0 + j);
  sb_printf(b, "%s  if (w_ < 0) w_ += %lldLL; %s = %s && in_; %s = w_; }\n", indent, dim, ok, ok, v);
}

/* s = offset in x (strides xs) of the element at the index tuple of i over
 * dims (r_ holds i), with the coordinate on `axis` replaced by v: the
 * address GatherElements reads and ScatterElements writes. */
static void emit_element_offset(StrBuf *b, int r, int axis, const int64_t *dims, const int64_t *xs) {
  for (int k = r - 1; k >= 0; k--) {
    const char *digit = k == axis ? "v" : "d_";
    if (k > 0) sb_printf(b, "    { i64 d_ = r_ %% %lldLL; r_ /= %lldLL; s += %s * %lldLL; }\n",
                         (ll)dims[k], (ll)dims[k], digit, (ll)xs[k]);
    else sb_printf(b, "    { i64 d_ = r_; s += %s * %lldLL; (void)d_; }\n", digit, (ll)xs[k]);
  }
}

/* ---- Gather ----------------------------------------------------------------- */

/* data viewed as [outer, D, inner]; indices as [N] (flattened):
 * y[o, n, j] = x[o, indices[n], j]. */
int lower_Gather(LowerCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1], *y = c->out[0];
  int axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 0), x->rank, &axis)) return -1;
  int64_t D = x->dims[axis], N = gpuc_numel(ind), total = gpuc_numel(y);
  int64_t inner = gpuc_shape_numel(x->rank - axis - 1, x->dims + axis + 1);
  if (total == 0) return 0;
  IndexCheck ck;
  if (index_check(c, ind, 1, &D, axis, &ck)) return -1;
  /* each gathered slice of `inner` elements moves in the widest of 16, 8
   * and 4-byte words that divides it and leaves CG_MIN_VEC_ITEMS items
   * (the arena's tensors are 16-byte aligned): torch.roll's Gathers over
   * [N,H,W,C] halves move rows of C */
  const char *t = cg_bits_type(x->dt), *w = t; /* element, word */
  int64_t bytes = inner * (int64_t)gpuc_dtype_size(x->dt);
  static const struct { int w; const char *type; } words[3] = {{16, "uint4"}, {8, "uint2"}, {4, "unsigned int"}};
  for (int k = 0; k < 3; k++)
    if (bytes % words[k].w == 0 && words[k].w > (int)gpuc_dtype_size(x->dt) &&
        total / inner * (bytes / words[k].w) >= cg_min_vec_items()) {
      int64_t slices = total / inner;
      w = words[k].type;
      inner = bytes / words[k].w;
      total = slices * inner;
      break;
    }
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ ind, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 j = i %% %lldLL, t = i / %lldLL, n = t %% %lldLL, o = t / %lldLL, v;\n"
               "    bool ok = true;\n"
               "    const %s zero_ = {};\n",
            name, t, cg_ctype(ind->dt), t, (ll)total, (ll)inner, (ll)inner, (ll)N, (ll)N, w);
  emit_index(b, "    ", "v", "ind", "n", 0, &ck, "ok");
  sb_printf(b, "    ((%s*)y)[i] = ok ? ((const %s*)x)[(o * %lldLL + v) * %lldLL + j] : zero_;\n  }\n}\n", w, w, (ll)D,
            (ll)inner);
  uint32_t args[3] = {c->tin[0], c->tin[1], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 3, args);
}

/* y[i] = x[i with i[axis] replaced by indices[i]] (y has the indices' shape). */
int lower_GatherElements(LowerCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1];
  int r = x->rank, axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  if (ind->rank != r) return lower_fail(c, "indices and data ranks differ");
  for (int k = 0; k < r; k++)
    if (k != axis && ind->dims[k] > x->dims[k]) return lower_fail(c, "indices exceed data");
  int64_t xs[GPUC_MAX_RANK], N = gpuc_numel(ind);
  gpuc_strides(x, xs);
  if (N == 0) return 0;
  IndexCheck ck;
  if (index_check(c, ind, 1, &x->dims[axis], axis, &ck)) return -1;
  const char *t = cg_bits_type(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ ind, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 v, r_ = i, s = 0;\n"
               "    bool ok = true;\n",
            name, t, cg_ctype(ind->dt), t, (ll)N);
  emit_index(b, "    ", "v", "ind", "i", 0, &ck, "ok");
  emit_element_offset(b, r, axis, ind->dims, xs);
  sb_printf(b, "    y[i] = ok ? x[s] : (%s)0;\n  }\n}\n", t);
  uint32_t args[3] = {c->tin[0], c->tin[1], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)N, 3, args);
}

/* GatherND: per batch (the first b dims), each m-tuple of indices picks the
 * slice x[batch, i0, .., im-1, ...] of prod(x dims[b+m:]) elements; tuple T
 * (over all batches) fills y[T * slice .. (T + 1) * slice). */
int lower_GatherND(LowerCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1], *y = c->out[0];
  int r = x->rank, q = ind->rank, b0 = (int)gpuc_attr_i(c->n, "batch_dims", 0);
  if (q < 1 || b0 < 0 || b0 >= q || b0 > r) return lower_fail(c, "bad batch_dims");
  int m = (int)ind->dims[q - 1];
  if (m < 0 || b0 + m > r) return lower_fail(c, "index tuples longer than the data's rank");
  for (int k = 0; k < b0; k++)
    if (ind->dims[k] != x->dims[k]) return lower_fail(c, "batch dims differ");
  int64_t xs[GPUC_MAX_RANK];
  gpuc_strides(x, xs);
  int64_t per_batch = gpuc_shape_numel(q - 1 - b0, ind->dims + b0);
  int64_t slice = gpuc_shape_numel(r - b0 - m, x->dims + b0 + m);
  int64_t xbatch = gpuc_shape_numel(r - b0, x->dims + b0), total = gpuc_numel(y);
  if (total == 0) return 0;
  IndexCheck ck;
  if (index_check(c, ind, m ? m : 1, x->dims + b0, b0, &ck)) return -1;
  const char *t = cg_bits_type(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ ind, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 s = i %% %lldLL, T = i / %lldLL, off = (T / %lldLL) * %lldLL, v;\n"
               "    bool ok = true;\n",
            name, t, cg_ctype(ind->dt), t, (ll)total, (ll)slice, (ll)slice,
            (ll)(per_batch ? per_batch : 1), (ll)xbatch);
  for (int j = 0; j < m; j++) {
    char at[64];
    snprintf(at, sizeof at, "T * %lldLL + %d", (ll)m, j);
    emit_index(b, "    ", "v", "ind", at, j, &ck, "ok");
    sb_printf(b, "    off += v * %lldLL;\n", (ll)xs[b0 + j]);
  }
  sb_printf(b, "    (void)v;\n    y[i] = ok ? x[off + s] : (%s)0;\n  }\n}\n", t);
  uint32_t args[3] = {c->tin[0], c->tin[1], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 3, args);
}

/* ---- scatter ------------------------------------------------------------- */

typedef enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } Reduction;

static int get_reduction(LowerCtx *c, Reduction *red) {
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  const char *s = gpuc_attr_s(c->n, "reduction", "none");
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, names[i])) { *red = (Reduction)i; return 0; }
  return lower_fail(c, "unknown reduction '%s'", s);
}

/* Expressions converting an element of dt to/from its bit pattern. */
static void from_bits(char *buf, size_t n, GpucDType dt, const char *e) {
  switch (dt) {
  case GPUC_DT_F32: snprintf(buf, n, "__uint_as_float((unsigned int)(%s))", e); break;
  case GPUC_DT_F64: snprintf(buf, n, "__longlong_as_double((long long)(%s))", e); break;
  case GPUC_DT_F16: snprintf(buf, n, "__ushort_as_half((unsigned short)(%s))", e); break;
  case GPUC_DT_BF16: snprintf(buf, n, "__ushort_as_bfloat16((unsigned short)(%s))", e); break;
  default: snprintf(buf, n, "((%s)(%s))", cg_ctype(dt), e); break;
  }
}
static void to_bits(char *buf, size_t n, GpucDType dt, const char *e) {
  switch (dt) {
  case GPUC_DT_F32: snprintf(buf, n, "__float_as_uint(%s)", e); break;
  case GPUC_DT_F64: snprintf(buf, n, "(unsigned long long)__double_as_longlong(%s)", e); break;
  case GPUC_DT_F16: snprintf(buf, n, "__half_as_ushort(%s)", e); break;
  case GPUC_DT_BF16: snprintf(buf, n, "__bfloat16_as_ushort(%s)", e); break;
  default: snprintf(buf, n, "((%s)(%s))", cg_bits_type(dt), e); break;
  }
}

/* Emit `__device__ void <fn>(T* p, T u)`: *p = red(*p, u), atomically. */
static void emit_combine(StrBuf *b, const char *fn, GpucDType dt, Reduction red) {
  const char *T = cg_ctype(dt), *W = cg_bits_type(dt);
  size_t es = gpuc_dtype_size(dt);
  bool is_f = gpuc_dtype_is_float(dt);
  if (red == RED_NONE) {
    sb_printf(b, "static __device__ __forceinline__ void %s(%s* p, %s u) { *p = u; }\n", fn, T, T);
    return;
  }
  /* native atomics where their result is the reference's */
  if (red == RED_ADD && (dt == GPUC_DT_F32 || dt == GPUC_DT_F64 || dt == GPUC_DT_I32 || dt == GPUC_DT_U32)) {
    sb_printf(b, "static __device__ __forceinline__ void %s(%s* p, %s u) { atomicAdd(p, u); }\n", fn, T, T);
    return;
  }
  if (red == RED_ADD && (dt == GPUC_DT_I64 || dt == GPUC_DT_U64)) {
    sb_printf(b, "static __device__ __forceinline__ void %s(%s* p, %s u) { "
                 "atomicAdd((unsigned long long*)p, (unsigned long long)u); }\n", fn, T, T);
    return;
  }
  if ((red == RED_MAX || red == RED_MIN) &&
      (dt == GPUC_DT_I32 || dt == GPUC_DT_U32 || dt == GPUC_DT_I64 || dt == GPUC_DT_U64)) {
    sb_printf(b, "static __device__ __forceinline__ void %s(%s* p, %s u) { %s(p, u); }\n", fn, T, T,
              red == RED_MAX ? "atomicMax" : "atomicMin");
    return;
  }
  /* the combine itself, as the reference computes it */
  sb_printf(b, "static __device__ __forceinline__ %s %s_op(%s a_, %s b_) {\n", T, fn, T, T);
  if (is_f) {
    bool h = dt == GPUC_DT_F16 || dt == GPUC_DT_BF16;
    sb_printf(b, "  double a = (double)%s(a_), b = (double)%s(b_), v;\n", h ? "ldf" : "", h ? "ldf" : "");
    switch (red) {
    case RED_ADD: sb_printf(b, "  v = a + b;\n"); break;
    case RED_MUL: sb_printf(b, "  v = a * b;\n"); break;
    case RED_MAX: sb_printf(b, "  v = (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (a > b ? a : b);\n"); break;
    default: sb_printf(b, "  v = (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (a < b ? a : b);\n"); break;
    }
    if (h) sb_printf(b, "  return stf<%s>((float)v);\n}\n", T);
    else sb_printf(b, "  return (%s)v;\n}\n", T);
  } else {
    sb_printf(b, "  unsigned long long a = (unsigned long long)(long long)a_, b = (unsigned long long)(long long)b_, v;\n");
    bool u64 = dt == GPUC_DT_U64;
    switch (red) {
    case RED_ADD: sb_printf(b, "  v = a + b;\n"); break;
    case RED_MUL: sb_printf(b, "  v = a * b;\n"); break;
    case RED_MAX: sb_printf(b, u64 ? "  v = a > b ? a : b;\n" : "  v = (long long)a > (long long)b ? a : b;\n"); break;
    default: sb_printf(b, u64 ? "  v = a < b ? a : b;\n" : "  v = (long long)a < (long long)b ? a : b;\n"); break;
    }
    if (dt == GPUC_DT_BOOL) sb_printf(b, "  return (unsigned char)(v != 0);\n}\n");
    else sb_printf(b, "  return (%s)v;\n}\n", T);
  }
  /* compare-and-swap loop */
  char cur[160], nb[160];
  sb_printf(b, "static __device__ __forceinline__ void %s(%s* p, %s u) {\n", fn, T, T);
  if (es >= 4) {
    const char *A = es == 8 ? "unsigned long long" : "unsigned int";
    from_bits(cur, sizeof cur, dt, "as");
    to_bits(nb, sizeof nb, dt, "nv");
    sb_printf(b, "  %s* a = (%s*)p;\n  %s old = *a, as;\n"
                 "  do {\n    as = old;\n    %s nv = %s_op(%s, u);\n"
                 "    old = atomicCAS(a, as, (%s)%s);\n  } while (old != as);\n}\n",
              A, A, A, T, fn, cur, A, nb);
  } else {
    from_bits(cur, sizeof cur, dt, "(as >> sh) & MASK_");
    to_bits(nb, sizeof nb, dt, "nv");
    sb_printf(b, "  const unsigned int MASK_ = %s;\n"
                 "  unsigned int* a = (unsigned int*)((unsigned long long)p & ~3ULL);\n"
                 "  unsigned int sh = ((unsigned int)(unsigned long long)p & 3u) * 8u;\n"
                 "  unsigned int old = *a, as;\n"
                 "  do {\n    as = old;\n    %s nv = %s_op(%s, u);\n"
                 "    unsigned int nw = (as & ~(MASK_ << sh)) | (((unsigned int)(%s) & MASK_) << sh);\n"
                 "    old = atomicCAS(a, as, nw);\n  } while (old != as);\n}\n",
              es == 1 ? "0xffu" : "0xffffu", T, fn, cur, nb);
  }
  (void)W;
}

/* y = data (a copy), then the update kernel. */
static int scatter_prologue(LowerCtx *c) {
  return cg_copy(c, c->tin[0], c->tout[0], gpuc_tensor_bytes(c->out[0]));
}

/* y = data; for each position i of indices:
 * y[i with i[axis] = indices[i]] = red(that, updates[i]). */
int lower_ScatterElements(LowerCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1], *upd = c->in[2];
  int r = x->rank, axis;
  Reduction red;
  if (get_reduction(c, &red)) return -1;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 0), r, &axis)) return -1;
  if (ind->rank != r || upd->rank != r || upd->dt != x->dt)
    return lower_fail(c, "indices, updates and data shapes disagree");
  for (int k = 0; k < r; k++)
    if ((k != axis && ind->dims[k] > x->dims[k]) || ind->dims[k] != upd->dims[k])
      return lower_fail(c, "indices, updates and data shapes disagree");
  int64_t xs[GPUC_MAX_RANK], N = gpuc_numel(ind);
  gpuc_strides(x, xs);
  if (scatter_prologue(c)) return -1;
  if (N == 0) return 0;
  IndexCheck ck;
  if (index_check(c, ind, 1, &x->dims[axis], axis, &ck)) return -1;
  const char *T = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  char fn[160];
  snprintf(fn, sizeof fn, "%s_combine", name);
  emit_combine(b, fn, x->dt, red);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ ind, const %s* __restrict__ u, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 v, r_ = i, s = 0;\n"
               "    bool ok = true;\n",
            name, cg_ctype(ind->dt), T, T, (ll)N);
  emit_index(b, "    ", "v", "ind", "i", 0, &ck, "ok");
  sb_printf(b, "    if (!ok) continue;\n");
  emit_element_offset(b, r, axis, ind->dims, xs);
  sb_printf(b, "    %s(y + s, u[i]);\n  }\n}\n", fn);
  uint32_t args[3] = {c->tin[1], c->tin[2], c->tout[0]};
  return cg_launch(c, name, (uint64_t)N, 256, 0, 3, args);
}

/* y = data; for each k-tuple n of indices the slice y[tuple, ...] of
 * prod(data dims[k:]) elements combines with updates[n, ...]. */
int lower_ScatterND(LowerCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1], *upd = c->in[2];
  int r = x->rank, q = ind->rank;
  if (q < 1) return lower_fail(c, "indices must have rank >= 1");
  int k = (int)ind->dims[q - 1];
  if (k < 0 || k > r) return lower_fail(c, "index tuples longer than the data's rank");
  Reduction red;
  if (get_reduction(c, &red)) return -1;
  if (upd->dt != x->dt) return lower_fail(c, "updates and data dtypes differ");
  int64_t xs[GPUC_MAX_RANK];
  gpuc_strides(x, xs);
  int64_t N = gpuc_shape_numel(q - 1, ind->dims), slice = gpuc_shape_numel(r - k, x->dims + k);
  if (gpuc_numel(upd) != N * slice) return lower_fail(c, "updates have the wrong size");
  if (scatter_prologue(c)) return -1;
  int64_t total = N * slice;
  if (total == 0) return 0;
  IndexCheck ck;
  if (index_check(c, ind, k ? k : 1, x->dims, 0, &ck)) return -1;
  const char *T = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  char fn[160];
  snprintf(fn, sizeof fn, "%s_combine", name);
  emit_combine(b, fn, x->dt, red);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ ind, const %s* __restrict__ u, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 s = i %% %lldLL, n = i / %lldLL, off = 0, v;\n"
               "    bool ok = true;\n",
            name, cg_ctype(ind->dt), T, T, (ll)total, (ll)slice, (ll)slice);
  for (int j = 0; j < k; j++) {
    char at[64];
    snprintf(at, sizeof at, "n * %dLL + %d", k, j);
    emit_index(b, "    ", "v", "ind", at, j, &ck, "ok");
    sb_printf(b, "    off += v * %lldLL;\n", (ll)xs[j]);
  }
  sb_printf(b, "    (void)v; (void)n;\n    if (!ok) continue;\n    %s(y + off + s, u[i]);\n  }\n}\n", fn);
  uint32_t args[3] = {c->tin[1], c->tin[2], c->tout[0]};
  return cg_launch(c, name, (uint64_t)total, 256, 0, 3, args);
}
