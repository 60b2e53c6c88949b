/* What the C API's GPU checks share (capi_check.c, capi_buckets_check.c):
 * CHECK prints one PASS/FAIL line and counts it; cond is evaluated once,
 * since it is often a call that runs the plan, and a failure adds the
 * library's last error message. Then a monotonic clock in microseconds,
 * a comparator for medians, and element i of a host buffer as a double. */
#ifndef GPUC_TESTS_API_CHECK_H
#define GPUC_TESTS_API_CHECK_H
#include <gpuc/gpuc_runtime.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int passed, failed;
#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    bool ok_ = (cond);                                                      \
    if (ok_) { passed++; printf("PASS "); }                                 \
    else { failed++; printf("FAIL "); }                                     \
    printf(__VA_ARGS__);                                                    \
    if (!ok_) printf(" (last error: %s)", gpuc_last_error());               \
    printf("\n");                                                           \
    fflush(stdout);                                                         \
  } while (0)

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double half_to_f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return h & 0x8000 ? -v : v;
}

/* element i of a host buffer of dtype dt, as a double */
static double get(const void *p, gpuc_dtype dt, size_t i) {
  switch (dt) {
  case GPUC_DTYPE_F32: return ((const float *)p)[i];
  case GPUC_DTYPE_F64: return ((const double *)p)[i];
  case GPUC_DTYPE_F16: return half_to_f(((const uint16_t *)p)[i]);
  case GPUC_DTYPE_BF16: { uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16; float f; memcpy(&f, &u, 4); return f; }
  case GPUC_DTYPE_I64: return (double)((const int64_t *)p)[i];
  case GPUC_DTYPE_I32: return ((const int32_t *)p)[i];
  case GPUC_DTYPE_I8: return ((const int8_t *)p)[i];
  case GPUC_DTYPE_U8: case GPUC_DTYPE_BOOL: return ((const uint8_t *)p)[i];
  default: return NAN;
  }
}
#endif
