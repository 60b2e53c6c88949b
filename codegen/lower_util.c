/* Generic kernels: broadcasting elementwise, byte copies. */
#include "lower_util.h"
#include "ew_kernel.h"
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

bool is_flt(GpucDType dt) {
  return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16 || dt == GPUC_DT_F64;
}

const char *cg_compute_type(GpucDType dt) {
  if (dt == GPUC_DT_F64) return "double";
  if (gpuc_dtype_is_int(dt)) return "long long";
  return "float";
}

void cg_load(StrBuf *b, const char *ct, GpucDType dt, const char *arg, const char *idx) {
  if (dt == GPUC_DT_F16 || dt == GPUC_DT_BF16) sb_printf(b, "((%s)ldf(%s[%s]))", ct, arg, idx);
  else sb_printf(b, "((%s)%s[%s])", ct, arg, idx);
}

void cg_store(StrBuf *b, GpucDType dt, const char *dst, const char *idx, const char *ct, const char *val) {
  if (dt == GPUC_DT_F16 || dt == GPUC_DT_BF16)
    sb_printf(b, "%s[%s] = stf<%s>((float)(%s));\n", dst, idx, cg_ctype(dt), val);
  else if (dt == GPUC_DT_BOOL)
    sb_printf(b, "%s[%s] = (unsigned char)((%s) != 0);\n", dst, idx, val);
  else
    sb_printf(b, "%s[%s] = (%s)(%s);\n", dst, idx, cg_ctype(dt), val);
  (void)ct;
}

void cg_float_lit(char *buf, size_t n, double v, const char *ct) {
  if (isnan(v)) snprintf(buf, n, "(%s)__int_as_float(0x7fc00000)", ct);
  else if (isinf(v)) snprintf(buf, n, "(%s)(%s__int_as_float(0x7f800000))", ct, v < 0 ? "-" : "");
  else snprintf(buf, n, "((%s)%.17g)", ct, v);
}

int cg_elementwise(LowerCtx *c, const int *which, int nwhich, const char *ct, const char *pre,
                   const char *expr) {
  if (nwhich > EW_MAX_ARGS) return lower_fail(c, "internal: elementwise op with %d inputs", nwhich);
  if (c->capture) { /* fusion: record the expression, emit nothing */
    EwCapture *cap = c->capture;
    if (cap->calls++) { cap->other = true; return 0; }
    cap->nargs = nwhich;
    for (int k = 0; k < nwhich; k++) {
      cap->slot[k] = which[k];
      cap->view[k] = *c->in[which[k]];
      cap->view[k].data = NULL;
    }
    snprintf(cap->ct, sizeof cap->ct, "%s", ct);
    cap->pre = pre ? strdup(pre) : NULL;
    cap->expr = strdup(expr);
    if (!cap->expr || (pre && !cap->pre)) return lower_fail(c, "out of memory");
    return 0;
  }
  EwProgram *p = calloc(1, sizeof *p);
  if (!p) return lower_fail(c, "out of memory");
  p->y = c->out[0];
  p->ty = c->tout[0];
  p->nterms = 1;
  EwTerm *t = &p->term[0];
  t->nargs = nwhich;
  t->ct = ct;
  t->pre = pre;
  t->expr = expr;
  t->dt = c->out[0]->dt;
  for (int k = 0; k < nwhich; k++) {
    t->arg[k].ext = ew_ext(p, c->tin[which[k]], c->in[which[k]]);
    t->arg[k].term = -1;
  }
  int rc = cg_ew_program(c, p);
  free(p);
  return rc;
}

int cg_copy(LowerCtx *c, uint32_t src, uint32_t dst, uint64_t bytes) {
  if (c->capture) { c->capture->other = true; return 0; }
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  /* 16-byte vectors when both ends are aligned (arena/weights offsets are
   * 256-aligned) and the size allows; bytes otherwise */
  if (bytes % 16 == 0) {
    sb_printf(b, "extern \"C\" __global__ void %s(const uint4* __restrict__ src, uint4* __restrict__ dst) {\n"
                 "  GRID_STRIDE(i, %lluLL) dst[i] = src[i];\n}\n", name, (unsigned long long)(bytes / 16));
    uint32_t args[2] = {src, dst};
    return cg_launch_items(c, name, bytes / 16, 2, args);
  }
  sb_printf(b, "extern \"C\" __global__ void %s(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst) {\n"
               "  GRID_STRIDE(i, %lluLL) dst[i] = src[i];\n}\n", name, (unsigned long long)bytes);
  uint32_t args[2] = {src, dst};
  return cg_launch_items(c, name, bytes, 2, args);
}

const char *cg_bits_type(GpucDType dt) {
  switch (gpuc_dtype_size(dt)) {
  case 1: return "unsigned char";
  case 2: return "unsigned short";
  case 4: return "unsigned int";
  default: return "unsigned long long";
  }
}

unsigned long long cg_elem_bits(GpucDType dt, const void *p) {
  switch (gpuc_dtype_size(dt)) {
  case 1: return *(const uint8_t *)p;
  case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
  case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
  default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

void cg_bcast_strides(int trank, const int64_t *tdims, int yrank, int64_t *st) {
  int64_t s = 1, ts[GPUC_MAX_RANK];
  for (int d = trank - 1; d >= 0; d--) { ts[d] = tdims[d] == 1 ? 0 : s; s *= tdims[d]; }
  for (int d = 0; d < yrank; d++) {
    int k = d - (yrank - trank);
    st[d] = k < 0 ? 0 : ts[k];
  }
}

int64_t cg_min_vec_items(void) {
  const char *v = getenv("GPUC_MIN_VEC_ITEMS");
  if (v && *v) {
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end == 0 && n >= 1) return n;
  }
  return CG_MIN_VEC_ITEMS;
}
