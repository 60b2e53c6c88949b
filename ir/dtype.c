/* dtype table, f16/bf16 conversions and element access for tensors. */
#include "ir.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; size_t size; bool is_float, is_signed; } DTypeInfo;
static const DTypeInfo dtypes[GPUC_DT_COUNT] = {
  [GPUC_DT_UNDEF] = {"undef", 0, 0, 0},
#define DT_ROW(E, n, b, f, s) [GPUC_DT_##E] = {n, b, f, s},
  GPUC_DTYPES(DT_ROW)
#undef DT_ROW
};

static const DTypeInfo *dti(GpucDType dt) {
  return (unsigned)dt < GPUC_DT_COUNT ? &dtypes[dt] : &dtypes[0];
}
const char *gpuc_dtype_name(GpucDType dt) { return dti(dt)->name; }
size_t gpuc_dtype_size(GpucDType dt) { return dti(dt)->size; }
bool gpuc_dtype_is_float(GpucDType dt) { return dti(dt)->is_float; }
bool gpuc_dtype_is_signed(GpucDType dt) { return dti(dt)->is_signed; }
bool gpuc_dtype_is_int(GpucDType dt) {
  return dt != GPUC_DT_UNDEF && dt != GPUC_DT_BOOL && !dti(dt)->is_float &&
         (unsigned)dt < GPUC_DT_COUNT;
}

float gpuc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f,
           man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalize */
      int e = -1;
      do { e++; man <<= 1; } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t gpuc_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or nan */
    return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow */
  if (ax < 0x38800000u) { /* subnormal or zero in half */
    if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to 0 */
    uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
    int shift = 126 - (int)e; /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((ax >> 13) - ((127 - 15) << 10));
  uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

float gpuc_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t gpuc_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* ---- errors ---- */
/* A message is printed as one line ("gpuc: <msg>"), and the names in it come
 * from the model file: escape control characters, so a node named "a\nb"
 * cannot start a second line nor a name send escape sequences to a
 * terminal. Truncates at the buffer's end like vsnprintf. */
static void one_line(GpucErr *e) {
  const unsigned char *p = (const unsigned char *)e->msg;
  while (*p && *p >= 0x20 && *p != 0x7f) p++;
  if (!*p) return;
  char out[sizeof e->msg];
  size_t o = 0, cap = sizeof out;
  for (p = (const unsigned char *)e->msg; *p; p++) {
    char esc[8];
    int w;
    if (*p >= 0x20 && *p != 0x7f) { esc[0] = (char)*p; esc[1] = 0; w = 1; }
    else if (*p == '\n') w = snprintf(esc, sizeof esc, "\\n");
    else if (*p == '\r') w = snprintf(esc, sizeof esc, "\\r");
    else if (*p == '\t') w = snprintf(esc, sizeof esc, "\\t");
    else w = snprintf(esc, sizeof esc, "\\x%02x", *p);
    if (o + (size_t)w >= cap) break;
    memcpy(out + o, esc, (size_t)w);
    o += (size_t)w;
  }
  out[o] = 0;
  memcpy(e->msg, out, o + 1);
}

int gpuc_err_set(GpucErr *e, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    one_line(e);
    e->unsupported = false;
    e->out_of_memory = false;
  }
  return -1;
}

int gpuc_err_unsupported(GpucErr *e, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    one_line(e);
    e->unsupported = true;
    e->out_of_memory = false;
  }
  return -1;
}

int gpuc_err_prefix(GpucErr *e, const char *prefix) {
  if (e) {
    char tmp[sizeof e->msg];
    snprintf(tmp, sizeof tmp, "%s", e->msg);
    size_t pl = strlen(prefix);
    if (pl + 2 < sizeof e->msg) {
      memcpy(e->msg, prefix, pl);
      memcpy(e->msg + pl, ": ", 2);
      size_t room = sizeof e->msg - pl - 3, tl = strlen(tmp);
      memcpy(e->msg + pl + 2, tmp, tl < room ? tl : room);
      e->msg[pl + 2 + (tl < room ? tl : room)] = 0;
      one_line(e);
    }
  }
  return -1;
}

void gpuc_panic(const char *file, int line, const char *what) {
  fprintf(stderr, "gpuc: internal error at %s:%d: %s\n", file, line, what);
  abort();
}

/* FP8 E4M3 (OCP "e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits;
 * no infinities, S.1111.111 is NaN, so the largest finite value is
 * S.1111.110 = 448; subnormals are m/8 * 2^-6 (smallest 2^-9).
 *
 * gpuc_f32_to_f8e4m3 rounds as the GPU's cvt.rn.satfinite.e4m3x2.f32
 * (what --fp8's quantize kernels use, codegen/lower_fp8.c): round to
 * nearest, ties to even; anything whose magnitude is 448 or more (infinity
 * too) saturates to +-448; NaN becomes 0x7f. The sign is kept, also when
 * the value rounds to zero. Every step below is exact in f32 (scalings by
 * powers of two, rintf in the default round-to-nearest-even mode). */


float gpuc_f8e4m3_to_f32(uint8_t b) {
  float sign = (b & 0x80) ? -1.0f : 1.0f;
  int e = (b >> 3) & 0xf, m = b & 7;
  if (e == 0xf && m == 7) return NAN;
  if (e == 0) return sign * ldexpf((float)m, -9);
  return sign * ldexpf((float)(8 + m), e - 10);
}

uint8_t gpuc_f32_to_f8e4m3(float f) {
  if (isnan(f)) return 0x7f;
  uint8_t sign = signbit(f) ? 0x80 : 0;
  float a = fabsf(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0x1p-6f) /* subnormal: units of 2^-9; 8 units is the smallest normal 0x08 */
    return sign | (uint8_t)rintf(a * 0x1p9f);
  int e2;
  frexpf(a, &e2);               /* a = f * 2^e2, f in [0.5, 1): a = 1.m * 2^(e2-1) */
  int e = e2 - 1;               /* -6 .. 8 */
  int m = (int)rintf((ldexpf(a, -e) - 1.0f) * 8.0f);
  if (m == 8) { m = 0; e++; }
  int code = ((e + 7) << 3) | m;
  return sign | (uint8_t)(code > 0x7e ? 0x7e : code);
}
