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
