/* Generic kernels: broadcasting elementwise, byte copies. */
#include "lower_util.h"
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
  const Tensor *y = c->out[0];
  int r = y->rank;
  int64_t n = gpuc_numel(y);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  uint32_t args[GPUC_MAX_IO + 1];
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  for (int k = 0; k < nwhich; k++) {
    sb_printf(b, "const %s* __restrict__ in%d, ", cg_ctype(c->in[which[k]]->dt), k);
    args[k] = c->tin[which[k]];
  }
  sb_printf(b, "%s* __restrict__ out0) {\n", cg_ctype(y->dt));
  args[nwhich] = c->tout[0];
  sb_printf(b, "  GRID_STRIDE(i, %lldLL) {\n", (long long)n);
  /* per input: same shape -> index i; else decompose i with baked strides */
  bool need_idx = false;
  for (int k = 0; k < nwhich; k++) {
    const Tensor *x = c->in[which[k]];
    bool same = x->rank == r && !memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)r);
    if (!same && gpuc_numel(x) != 1) need_idx = true;
  }
  if (need_idx) {
    sb_printf(b, "    i64 rem = i;\n");
    for (int d = r - 1; d >= 0; d--) sb_printf(b, "    i64 d%d = rem %% %lldLL; rem /= %lldLL;\n", d,
                                               (long long)y->dims[d], (long long)y->dims[d]);
  }
  for (int k = 0; k < nwhich; k++) {
    const Tensor *x = c->in[which[k]];
    bool same = x->rank == r && !memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)r);
    char idx[32];
    if (gpuc_numel(x) == 1) snprintf(idx, sizeof idx, "0");
    else if (same) snprintf(idx, sizeof idx, "i");
    else {
      snprintf(idx, sizeof idx, "o%d", k);
      sb_printf(b, "    i64 o%d = 0", k);
      int off = r - x->rank;
      int64_t s = 1;
      for (int d = x->rank - 1; d >= 0; d--) {
        if (x->dims[d] != 1) sb_printf(b, " + d%d * %lldLL", d + off, (long long)s);
        s *= x->dims[d];
      }
      sb_printf(b, ";\n");
    }
    char arg[16];
    snprintf(arg, sizeof arg, "in%d", k);
    sb_printf(b, "    %s x%d = ", ct, k);
    cg_load(b, ct, x->dt, arg, idx);
    sb_printf(b, ";\n");
  }
  if (pre) sb_printf(b, "    %s\n", pre);
  sb_printf(b, "    ");
  cg_store(b, y->dt, "out0", "i", ct, expr);
  sb_printf(b, "  }\n}\n");
  return cg_launch(c, name, (uint64_t)n, 256, 0, nwhich + 1, args);
}

int cg_copy(LowerCtx *c, uint32_t src, uint32_t dst, uint64_t bytes) {
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  /* 16-byte vectors when both ends are aligned (arena/weights offsets are
   * 256-aligned) and the size allows; bytes otherwise */
  if (bytes % 16 == 0) {
    sb_printf(b, "extern \"C\" __global__ void %s(const uint4* __restrict__ src, uint4* __restrict__ dst) {\n"
                 "  GRID_STRIDE(i, %lluLL) dst[i] = src[i];\n}\n", name, (unsigned long long)(bytes / 16));
    uint32_t args[2] = {src, dst};
    return cg_launch(c, name, bytes / 16, 256, 0, 2, args);
  }
  sb_printf(b, "extern \"C\" __global__ void %s(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst) {\n"
               "  GRID_STRIDE(i, %lluLL) dst[i] = src[i];\n}\n", name, (unsigned long long)bytes);
  uint32_t args[2] = {src, dst};
  return cg_launch(c, name, bytes, 256, 0, 2, args);
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
