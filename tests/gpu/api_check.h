/* What the C API's GPU checks share (capi_check.c, capi_buckets_check.c):
 * CHECK prints one PASS/FAIL line and counts it; cond is evaluated once,
 * since it is often a call that runs the plan, and a failure adds the
 * library's last error message. */
#ifndef GPUC_TESTS_API_CHECK_H
#define GPUC_TESTS_API_CHECK_H
#include <gpuc/gpuc_runtime.h>
#include <stdbool.h>
#include <stdio.h>

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
#endif
