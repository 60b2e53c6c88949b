/* The elementwise kernel emitter (see ew_kernel.h).
 *
 * Shape of the generated kernel, for output y of n elements:
 *   grid-stride over n / V chunks of V consecutive elements (V = 16 bytes
 *   over the widest contiguous tensor's element, at most 8: 4 for f32, 8
 *   for f16; halved until it divides n; 1 for 8-byte elements);
 *   inputs with y's shape are loaded as vectors, scalars once, broadcast
 *   inputs per element through baked strides (32-bit index math when n
 *   fits); each term is evaluated in its own compute type into a register;
 *   the last term is stored. Intermediates of 16-bit float dtypes stay in
 *   float (more precise than storing them would be); other dtypes are
 *   rounded to their type, as a store and reload would. */
#include "ew_kernel.h"
#include "lower_rows.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ew_capture_clear(EwCapture *cap) {
  free(cap->pre);
  free(cap->expr);
  memset(cap, 0, sizeof *cap);
}

void ew_captures_free(EwCapture *caps, int n) {
  if (!caps) return;
  for (int t = 0; t < n; t++) ew_capture_clear(&caps[t]);
  free(caps);
}

static bool same_dims(const Tensor *a, const Tensor *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

static int add_ext(EwProgram *p, uint32_t tensor, const Tensor *view, const int64_t *stride) {
  for (int k = 0; k < p->next; k++) {
    const EwExt *x = &p->ext[k];
    if (x->cat || x->pool || x->tensor != tensor || x->view.dt != view->dt || !same_dims(&x->view, view) ||
        x->strided != !!stride)
      continue;
    if (!stride || !memcmp(x->stride, stride, sizeof(int64_t) * (size_t)view->rank)) return k;
  }
  if (p->next == EW_MAX_EXT) return -1;
  EwExt *x = &p->ext[p->next];
  memset(x, 0, sizeof *x);
  x->tensor = tensor;
  x->view = *view;
  x->view.data = NULL;
  x->strided = stride != NULL;
  if (stride) memcpy(x->stride, stride, sizeof(int64_t) * (size_t)view->rank);
  return p->next++;
}

int ew_ext(EwProgram *p, uint32_t tensor, const Tensor *view) { return add_ext(p, tensor, view, NULL); }
int ew_ext_strided(EwProgram *p, uint32_t tensor, const Tensor *view, const int64_t *stride) {
  return add_ext(p, tensor, view, stride);
}

const char *ew_natural_type(GpucDType dt) {
  if (dt == GPUC_DT_F64) return "double";
  if (gpuc_dtype_is_int(dt) || dt == GPUC_DT_BOOL) return "long long";
  return "float";
}

/* the type a term's value is held in */
static const char *value_type(GpucDType dt) {
  return dt == GPUC_DT_F16 || dt == GPUC_DT_BF16 ? "float" : cg_ctype(dt);
}

/* EXT_ROW, EXT_COL: only in the row kernels (cg_ew_rows_quantize), a
 * broadcast input read once per row (a per-row scale, [..., 1]) or per
 * column of the row (a bias or per-channel scale, [k]), indexed directly
 * instead of through the element's coordinates */
/* EXT_SVEC: a strided input (a Transpose read in place) whose vectors
 * are contiguous in its own bytes too, loaded as vectors at the offset of
 * the vector's first element. */
/* EXT_REG: the enclosing kernel's value reg_[u] (an epilogue's input). */
/* EXT_CAT: a Concat of pieces (EwProgram.cat), loaded as the vector a<k>
 * from the piece the vector's column falls in (cg_ew_program only). */
/* EXT_POOL: an NHWC AveragePool of the tensor (EwProgram.pool), loaded as
 * the vector a<k> (cg_ew_program only). */
enum { EXT_SCALAR, EXT_SAME, EXT_BCAST, EXT_ROW, EXT_COL, EXT_SVEC, EXT_REG, EXT_CAT, EXT_POOL };

static int ext_kind(const EwExt *x, const Tensor *y) {
  if (x->reg) return EXT_REG;
  if (x->cat) return EXT_CAT;
  if (x->pool) return EXT_POOL;
  if (gpuc_numel(&x->view) == 1) return EXT_SCALAR;
  if (x->strided) return EXT_BCAST; /* explicit strides: per-element index */
  return same_dims(&x->view, y) ? EXT_SAME : EXT_BCAST;
}

/* Input k may share the output's bytes: read at the output's own index
 * (same shape, not strided), elements of the output's size, and no other
 * input reads the same bytes through another view (which would see
 * elements already overwritten). */
static bool in_place_candidate(LowerCtx *c, const EwProgram *p, int k, const int *kind) {
  const EwExt *x = &p->ext[k];
  if (kind[k] != EXT_SAME || gpuc_dtype_size(x->view.dt) != gpuc_dtype_size(p->y->dt)) return false;
  const Plan *plan = cg_builder_plan(c->pb);
  uint32_t base = gpuc_plan_base_tensor(plan, x->tensor);
  for (int j = 0; j < p->next; j++) {
    if (p->ext[j].cat) {
      for (int q = 0; q < p->cat.n; q++)
        if (gpuc_plan_base_tensor(plan, p->cat.tensor[q]) == base) return false;
    } else if (j != k && gpuc_plan_base_tensor(plan, p->ext[j].tensor) == base) return false;
  }
  return gpuc_plan_base_tensor(plan, p->ty) != base;
}

/* The element at index i (declared by the caller): its coordinates when
 * an input is broadcast, the external inputs e<k> (vector lane u when vec
 * > 1) and the terms v0..v<nterms-1>, each in its own scope. */
static void emit_element(StrBuf *b, const EwProgram *p, const int *kind, int vec, bool need_idx, bool idx32) {
  const Tensor *y = p->y;
  int r = y->rank;
  if (need_idx) {
    const char *it = idx32 ? "unsigned" : "i64";
    sb_printf(b, "    %s rem = (%s)i;\n", it, it);
    for (int d = r - 1; d >= 0; d--)
      sb_printf(b, "    %s d%d = rem %% %lld%s; rem /= %lld%s;\n", it, d, (long long)y->dims[d],
                idx32 ? "u" : "LL", (long long)y->dims[d], idx32 ? "u" : "LL");
  }
  /* external inputs, in their natural types */
  for (int k = 0; k < p->next; k++) {
    const Tensor *x = &p->ext[k].view;
    char idx[32], arg[16];
    snprintf(arg, sizeof arg, "in%d", k);
    if (kind[k] == EXT_SCALAR) snprintf(idx, sizeof idx, "0");
    else if (kind[k] == EXT_SAME) snprintf(idx, sizeof idx, "i");
    else if (kind[k] == EXT_ROW) snprintf(idx, sizeof idx, "row_");
    else if (kind[k] == EXT_COL) snprintf(idx, sizeof idx, "(j0_ + u)");
    else if (kind[k] == EXT_SVEC || kind[k] == EXT_REG || kind[k] == EXT_CAT || kind[k] == EXT_POOL)
      snprintf(idx, sizeof idx, "0"); /* a<k> or reg_[u] */
    else {
      snprintf(idx, sizeof idx, "o%d", k);
      sb_printf(b, "    const i64 o%d = 0", k);
      if (p->ext[k].strided) {
        for (int d = 0; d < r; d++)
          if (y->dims[d] != 1) sb_printf(b, " + (i64)d%d * %lldLL", d, (long long)p->ext[k].stride[d]);
      } else {
        int off = r - x->rank;
        int64_t s = 1;
        for (int d = x->rank - 1; d >= 0; d--) {
          if (x->dims[d] != 1) sb_printf(b, " + (i64)d%d * %lldLL", d + off, (long long)s);
          s *= x->dims[d];
        }
      }
      sb_printf(b, ";\n");
    }
    sb_printf(b, "    const %s e%d = ", ew_natural_type(x->dt), k);
    if (kind[k] == EXT_REG) {
      sb_printf(b, "(%s)reg_[u];\n", ew_natural_type(x->dt));
      continue;
    }
    if (((kind[k] == EXT_SAME || kind[k] == EXT_SVEC) && vec > 1) || kind[k] == EXT_CAT || kind[k] == EXT_POOL) {
      char va[16];
      snprintf(va, sizeof va, "a%d.v", k);
      cg_load(b, ew_natural_type(x->dt), x->dt, va, "u");
    } else {
      cg_load(b, ew_natural_type(x->dt), x->dt, arg, idx);
    }
    sb_printf(b, ";\n");
  }
  /* terms, each in its own scope: x<k> and the term's `pre` names stay local */
  for (int t = 0; t < p->nterms; t++) {
    const EwTerm *m = &p->term[t];
    const char *vt = value_type(m->dt);
    sb_printf(b, "    %s v%d;\n    {\n", vt, t);
    for (int k = 0; k < m->nargs; k++) {
      if (m->arg[k].ext >= 0) sb_printf(b, "      const %s x%d = (%s)e%d;\n", m->ct, k, m->ct, m->arg[k].ext);
      else sb_printf(b, "      const %s x%d = (%s)v%d;\n", m->ct, k, m->ct, m->arg[k].term);
    }
    if (m->pre) sb_printf(b, "      %s\n", m->pre);
    if (m->dt == GPUC_DT_BOOL) sb_printf(b, "      v%d = (unsigned char)((%s) != 0);\n    }\n", t, m->expr);
    else sb_printf(b, "      v%d = (%s)(%s);\n    }\n", t, vt, m->expr);
  }
}

/* ext_kind, with EXT_ROW / EXT_COL for broadcast inputs that follow the
 * rows of k elements (y's last dim k), numpy-aligned from the right: a
 * column [.., 1, k] (every other dim 1: read at the element's column), or
 * a row value [d0, .., dr-2, 1] whose dims are y's leading ones (y's
 * extra leading dims 1: read at the row's index). */
static int row_kind(const EwExt *x, const Tensor *y, int64_t k) {
  int kind = ext_kind(x, y);
  const Tensor *v = &x->view;
  if (kind != EXT_BCAST || x->strided || y->rank < 1 || y->dims[y->rank - 1] != k || v->rank < 1 ||
      v->rank > y->rank)
    return kind;
  if (v->dims[v->rank - 1] == k && gpuc_numel(v) == k) return EXT_COL;
  if (v->dims[v->rank - 1] != 1) return kind;
  int off = y->rank - v->rank;
  for (int d = 0; d < off; d++)
    if (y->dims[d] != 1) return kind;
  for (int d = 0; d < v->rank - 1; d++)
    if (v->dims[d] != y->dims[d + off]) return kind;
  return EXT_ROW;
}

int ew_epilogue_params(StrBuf *b, const EwProgram *p, uint32_t *args) {
  int n = 0;
  for (int k = 0; k < p->next; k++) {
    if (p->ext[k].reg) continue;
    sb_printf(b, "const %s* __restrict__ in%d, ", cg_ctype(p->ext[k].view.dt), k);
    args[n++] = p->ext[k].tensor;
  }
  return n;
}

void ew_epilogue_pair(StrBuf *b, const EwProgram *p, int64_t n) {
  const Tensor *y = p->y;
  int kind[EW_MAX_EXT];
  bool need_idx = false;
  for (int k = 0; k < p->next; k++) {
    kind[k] = row_kind(&p->ext[k], y, n);
    need_idx |= kind[k] == EXT_BCAST;
  }
  const char *t = cg_ctype(y->dt);
  sb_printf(b, "    Vec<%s, 2> res;\n#pragma unroll\n    for (int u = 0; u < 2; u++) {\n    const i64 i = i0_ + u;\n", t);
  emit_element(b, p, kind, 1, need_idx, gpuc_numel(y) <= 0x7fffffffLL);
  char last[16];
  snprintf(last, sizeof last, "v%d", p->nterms - 1);
  sb_printf(b, "    ");
  cg_store(b, y->dt, "res.v", "u", p->term[p->nterms - 1].ct, last);
  sb_printf(b, "    }\n    *(Vec<%s, 2>*)(out0 + i0_) = res;\n", t);
}

/* pieces lo..hi of the Concat (starting at column start): a binary search
 * on the vector's column c_ down to one piece, whose vector is loaded */
static void emit_cat_tree(StrBuf *b, const EwProgram *p, int k, int vec, int lo, int hi, int64_t start, int depth) {
  const char *t = cg_ctype(p->ext[k].view.dt);
  if (lo == hi) {
    sb_printf(b, "%*sa%d = *(const Vec<%s, %d>*)(in%d_%d + (i64)o_ * %lldLL + (c_ - %lldLL));\n", 2 * depth, "", k, t,
              vec, k, lo, (long long)p->cat.len[lo], (long long)start);
    return;
  }
  int mid = (lo + hi) / 2;
  int64_t split = start;
  for (int q = lo; q <= mid; q++) split += p->cat.len[q];
  sb_printf(b, "%*sif (c_ < %lldLL) {\n", 2 * depth, "", (long long)split);
  emit_cat_tree(b, p, k, vec, lo, mid, start, depth + 1);
  sb_printf(b, "%*s} else {\n", 2 * depth, "");
  emit_cat_tree(b, p, k, vec, mid + 1, hi, split, depth + 1);
  sb_printf(b, "%*s}\n", 2 * depth, "");
}

/* a<k>: the vector j (elements j * vec ..) of the Concat input k */
static void emit_cat_load(StrBuf *b, const EwProgram *p, int k, int vec, bool idx32) {
  const char *it = idx32 ? "unsigned" : "i64", *sfx = idx32 ? "u" : "LL";
  sb_printf(b, "    Vec<%s, %d> a%d;\n    {\n      const %s f_ = (%s)j * %d%s;\n"
               "      const %s o_ = f_ / %lld%s, c_ = f_ - o_ * %lld%s;\n",
            cg_ctype(p->ext[k].view.dt), vec, k, it, it, vec, sfx, it, (long long)p->cat.run, sfx,
            (long long)p->cat.run, sfx);
  emit_cat_tree(b, p, k, vec, 0, p->cat.n - 1, 0, 3);
  sb_printf(b, "    }\n");
}

/* a<k>: the vector j (channels c0.. of one output pixel) of the NHWC
 * AveragePool of input k: the taps in row-major order, float sums, the
 * divisor as codegen/lower_pool.c counts it, rounded to the input's dtype */
static void emit_pool_load(StrBuf *b, const EwProgram *p, int k, int vec) {
  const EwPool *w = &p->pool[p->ext[k].pool - 1];
  const char *t = cg_ctype(p->ext[k].view.dt);
  long long C = (long long)w->C, OW = (long long)w->OW, OH = (long long)w->OH;
  sb_printf(b, "    Vec<%s, %d> a%d;\n    {\n      const i64 f_ = (i64)j * %d, c0_ = f_ %% %lldLL, px_ = f_ / %lldLL;\n"
               "      const i64 o1 = px_ %% %lldLL, o0 = (px_ / %lldLL) %% %lldLL, n_ = px_ / %lldLL;\n"
               "      float acc_[%d];\n      for (int u = 0; u < %d; u++) acc_[u] = 0.f;\n      i64 cnt = 1;\n",
            t, vec, k, vec, C, C, OW, OW, OH, OW * OH, vec, vec);
  for (int d = 0; d < 2; d++) {
    int64_t in = d ? w->W : w->H;
    int64_t lo = w->include_pad ? -w->pad_b[d] : 0, hi = w->include_pad ? in + w->pad_e[d] : in;
    sb_printf(b, "      { i64 m_ = 0; for (i64 t = 0; t < %lldLL; t++) { i64 q = o%d * %lldLL - %lldLL + t * %lldLL; "
                 "m_ += q >= %lldLL && q < %lldLL; } cnt *= m_; }\n",
              (long long)w->k[d], d, (long long)w->stride[d], (long long)w->pad_b[d], (long long)w->dil[d],
              (long long)lo, (long long)hi);
  }
  for (int d = 0; d < 2; d++) {
    int64_t in = d ? w->W : w->H;
    sb_printf(b, "%*s      for (i64 t%d = 0; t%d < %lldLL; t%d++) {\n", 2 * d, "", d, d, (long long)w->k[d], d);
    sb_printf(b, "%*s        const i64 p%d = o%d * %lldLL - %lldLL + t%d * %lldLL;\n", 2 * d, "", d, d,
              (long long)w->stride[d], (long long)w->pad_b[d], d, (long long)w->dil[d]);
    sb_printf(b, "%*s        if (p%d < 0 || p%d >= %lldLL) continue;\n", 2 * d, "", d, d, (long long)in);
  }
  sb_printf(b, "          const Vec<%s, %d> q_ = *(const Vec<%s, %d>*)(in%d + ((n_ * %lldLL + p0) * %lldLL + p1) * %lldLL + c0_);\n"
               "          for (int u = 0; u < %d; u++) acc_[u] += ldf(q_.v[u]);\n        }\n      }\n"
               "      for (int u = 0; u < %d; u++) a%d.v[u] = stf<%s>(cnt ? acc_[u] / (float)cnt : 0.f);\n    }\n",
            t, vec, t, vec, k, (long long)w->H, (long long)w->W, C, vec, vec, k, t);
}

int cg_ew_program(LowerCtx *c, const EwProgram *p) {
  const Tensor *y = p->y;
  int64_t n = gpuc_numel(y);
  int kind[EW_MAX_EXT];
  bool need_idx = false;
  /* V: 16-byte vectors for the widest contiguous tensor (f32: 4, f16: 8):
   * a memory-bound kernel on the H200 needs that many bytes in flight per
   * thread (8-byte f16 vectors reached 37% of DRAM bandwidth) */
  size_t widest = gpuc_dtype_size(y->dt);
  for (int k = 0; k < p->next; k++) {
    kind[k] = ext_kind(&p->ext[k], y);
    if (kind[k] == EXT_BCAST) need_idx = true;
    if ((kind[k] == EXT_SAME || kind[k] == EXT_CAT || kind[k] == EXT_POOL) && gpuc_dtype_size(p->ext[k].view.dt) > widest)
      widest = gpuc_dtype_size(p->ext[k].view.dt);
  }
  int vec = widest <= 4 && widest > 0 ? (int)(16 / widest) : 1;
  /* a 16-bit output of wider inputs (int32 sums dequantized to half):
   * 16-byte stores, its inputs read as two 16-byte halves */
  if (gpuc_dtype_size(y->dt) == 2 && widest <= 4) vec = 8;
  if (vec > 8) vec = 8;
  while (vec > 1 && (n <= 0 || n % vec != 0)) vec /= 2;
  for (int q = 0; q < p->cat.n; q++) /* a vector within one piece */
    while (vec > 1 && p->cat.len[q] % vec) vec /= 2;
  for (int q = 0; q < p->npools; q++) /* a vector within one pixel's channels */
    while (vec > 1 && p->pool[q].C % vec) vec /= 2;
  bool idx32 = n <= 0x7fffffffLL;
  /* a bias or per-channel row [k] and a per-row value [..., 1] over rows
   * of y's last dim k: the row and column once per vector (k a multiple of
   * the vector) instead of every element's coordinates */
  int64_t klast = y->rank ? y->dims[y->rank - 1] : 1;
  bool rowcol = false;
  if (klast > 0 && klast % vec == 0) {
    need_idx = false;
    for (int k = 0; k < p->next; k++) {
      if (kind[k] == EXT_BCAST) kind[k] = row_kind(&p->ext[k], y, klast);
      need_idx |= kind[k] == EXT_BCAST;
      rowcol |= kind[k] == EXT_ROW || kind[k] == EXT_COL;
    }
  }
  bool in_place[EW_MAX_EXT], any_in_place = false;
  for (int k = 0; k < p->next; k++) any_in_place |= in_place[k] = in_place_candidate(c, p, k, kind);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  uint32_t args[EW_MAX_EXT + EW_MAX_CAT + 1];
  int na = 0;
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  /* a pointer the output may share is not __restrict__, nor is the output */
  for (int k = 0; k < p->next; k++) {
    if (kind[k] == EXT_CAT) { /* its pieces */
      for (int q = 0; q < p->cat.n; q++) {
        sb_printf(b, "const %s* __restrict__ in%d_%d, ", cg_ctype(p->ext[k].view.dt), k, q);
        args[na++] = p->cat.tensor[q];
      }
      continue;
    }
    sb_printf(b, "const %s* %sin%d, ", cg_ctype(p->ext[k].view.dt), in_place[k] ? "" : "__restrict__ ", k);
    args[na++] = p->ext[k].tensor;
  }
  sb_printf(b, "%s* %sout0) {\n", cg_ctype(y->dt), any_in_place ? "" : "__restrict__ ");
  args[na++] = p->ty;
  sb_printf(b, "  GRID_STRIDE(j, %lldLL) {\n", (long long)(n / vec));
  if (rowcol)
    sb_printf(b, "    const %s jv_ = (%s)j * %d;\n    const i64 row_ = (i64)(jv_ / %lld%s);\n"
                 "    const int j0_ = (int)(jv_ %% %lld%s);\n    (void)row_; (void)j0_;\n",
              idx32 ? "unsigned" : "i64", idx32 ? "unsigned" : "i64", vec, (long long)klast, idx32 ? "u" : "LL",
              (long long)klast, idx32 ? "u" : "LL");
  for (int k = 0; k < p->next; k++) {
    if (kind[k] == EXT_CAT) emit_cat_load(b, p, k, vec, idx32);
    if (kind[k] == EXT_POOL) emit_pool_load(b, p, k, vec);
  }
  if (vec > 1) {
    for (int k = 0; k < p->next; k++)
      if (kind[k] == EXT_SAME)
        sb_printf(b, "    const Vec<%s, %d> a%d = ((const Vec<%s, %d>*)in%d)[j];\n", cg_ctype(p->ext[k].view.dt),
                  vec, k, cg_ctype(p->ext[k].view.dt), vec, k);
    sb_printf(b, "    Vec<%s, %d> res;\n", cg_ctype(y->dt), vec);
    sb_printf(b, "#pragma unroll\n    for (int u = 0; u < %d; u++) {\n    const i64 i = j * %d + u;\n", vec, vec);
  } else {
    sb_printf(b, "    {\n    const i64 i = j;\n    const int u = 0; (void)u;\n");
  }
  emit_element(b, p, kind, vec, need_idx, idx32);
  char last[16];
  snprintf(last, sizeof last, "v%d", p->nterms - 1);
  sb_printf(b, "    ");
  if (vec > 1) {
    cg_store(b, y->dt, "res.v", "u", p->term[p->nterms - 1].ct, last);
    sb_printf(b, "    }\n    ((Vec<%s, %d>*)out0)[j] = res;\n  }\n}\n", cg_ctype(y->dt), vec);
  } else {
    cg_store(b, y->dt, "out0", "i", p->term[p->nterms - 1].ct, last);
    sb_printf(b, "    }\n  }\n}\n");
  }
  if (cg_launch_items(c, name, (uint64_t)(n / vec), na, args)) return -1;
  for (int k = 0; k < p->next; k++)
    if (in_place[k]) cg_in_place(c, p->ext[k].tensor, p->ty);
  return 0;
}

/* Rows of k consecutive output elements (the last dim, or a Reshape's
 * last dim: the same elements in the same order) in the multi-row layout
 * (lower_rows.h: a warp a row up to 1024 elements, 2-8 warps a longer
 * row, several rows a block of 256, 16-byte vectors of the narrowest
 * stored element: inputs of y's shape loaded as vectors of that many,
 * wider ones in two 16-byte halves), the row held in registers: each
 * element's terms as above, the last one rounded to y's dtype (the value
 * the unfused graph stores and QuantizeRows reads back), then the row's
 * absmax (warp shuffles, then across the row's warps) and the row
 * quantized by QuantizeRows' rule (ir/quant_int8.h) or QuantizeRowsF8's
 * (absmax / 448, cvt.rn.satfinite e4m3) into q (vec bytes a store) and
 * s[row]. The layout changes which thread computes an element, never how:
 * the same bits as the unfused kernels. y itself is not stored: the
 * quantize step was its only reader. 1: rows too long for the registers
 * (the caller lowers the nodes one by one). */
int cg_ew_rows_quantize(LowerCtx *c, const EwProgram *p, int64_t k, bool f8, uint32_t tq, uint32_t ts) {
  const Tensor *y = p->y;
  int64_t n = gpuc_numel(y), rows = k > 0 ? n / k : 0;
  if (n <= 0 || k <= 0 || n % k || (y->dt != GPUC_DT_F32 && y->dt != GPUC_DT_F16 && y->dt != GPUC_DT_BF16) || p->cat.n ||
      p->npools)
    return 1;
  int kind[EW_MAX_EXT];
  bool need_idx = false;
  size_t narrow = gpuc_dtype_size(y->dt);
  for (int x = 0; x < p->next; x++) {
    kind[x] = row_kind(&p->ext[x], y, k);
    if (kind[x] == EXT_BCAST) need_idx = true;
    if (kind[x] == EXT_SAME && gpuc_dtype_size(p->ext[x].view.dt) < narrow) narrow = gpuc_dtype_size(p->ext[x].view.dt);
  }
  int want = narrow >= 1 && narrow <= 4 ? (int)(16 / narrow) : 1;
  RowLayout L;
  if (row_layout_pick(&L, rows, k, want > 8 ? 8 : want)) return 1;
  const int V = L.vec;
  for (int x = 0; x < p->next && V > 1; x++) {
    const EwExt *e = &p->ext[x];
    bool contiguous = e->strided && e->stride[y->rank - 1] == 1 && y->dims[y->rank - 1] % V == 0;
    for (int d = 0; d < y->rank - 1 && contiguous; d++) contiguous = y->dims[d] == 1 || e->stride[d] % V == 0;
    if (contiguous) kind[x] = EXT_SVEC;
  }
  need_idx = false;
  for (int x = 0; x < p->next; x++) need_idx |= kind[x] == EXT_BCAST;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  uint32_t args[EW_MAX_EXT + 2];
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", ROW_LAYOUT_BLOCK, name);
  for (int x = 0; x < p->next; x++) {
    sb_printf(b, "const %s* __restrict__ in%d, ", cg_ctype(p->ext[x].view.dt), x);
    args[x] = p->ext[x].tensor;
  }
  sb_printf(b, "float* __restrict__ qs, unsigned char* __restrict__ qo) {\n");
  row_layout_open(b, &L);
  sb_printf(b, "    float w_[%d];\n", L.groups * V);
  row_layout_for_vec(b, &L);
  sb_printf(b, "        const i64 i0_ = base_ + j0_;\n");
  for (int x = 0; x < p->next; x++) {
    const char *t = cg_ctype(p->ext[x].view.dt);
    if (kind[x] == EXT_SAME && V > 1)
      sb_printf(b, "        const Vec<%s, %d> a%d = *(const Vec<%s, %d>*)(in%d + i0_);\n", t, V, x, t, V, x);
    if (kind[x] != EXT_SVEC) continue;
    /* the vector's first element's offset in the strided input */
    sb_printf(b, "        i64 so%d = 0;\n        { i64 q_ = i0_;\n", x);
    for (int d = y->rank - 1; d >= 0; d--)
      sb_printf(b, "          so%d += (q_ %% %lldLL) * %lldLL; q_ /= %lldLL;\n", x, (long long)y->dims[d],
                (long long)(y->dims[d] == 1 ? 0 : p->ext[x].stride[d]), (long long)y->dims[d]);
    sb_printf(b, "        }\n        const Vec<%s, %d> a%d = *(const Vec<%s, %d>*)(in%d + so%d);\n", t, V, x, t, V, x, x);
  }
  sb_printf(b, "#pragma unroll\n        for (int u = 0; u < %d; u++) {\n    const i64 i = i0_ + u;\n", V);
  emit_element(b, p, kind, V, need_idx, n <= 0x7fffffffLL);
  sb_printf(b, "    w_[g * %d + u] = ldf(stf<%s>((float)v%d));\n        }\n"
               "      } else {\n#pragma unroll\n        for (int u = 0; u < %d; u++) w_[g * %d + u] = 0.0f;\n      }\n    }\n",
            V, cg_ctype(y->dt), p->nterms - 1, V, V);
  row_layout_quantize(b, &L, f8);
  sb_printf(b, "  }\n}\n");
  args[p->next] = ts;
  args[p->next + 1] = tq;
  return row_layout_launch(c, &L, name, p->next + 2, args) ? -1 : 0;
}
