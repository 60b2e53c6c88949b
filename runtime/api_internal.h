/* What the C API's two halves share (runtime/api_runtime.c, the runtime;
 * tools/api_compiler.c, the compiler): the plan handle's insides and the
 * per-thread error message. Not installed. */
#ifndef GPUC_API_INTERNAL_H
#define GPUC_API_INTERNAL_H
#include "gpuc/gpuc_compiler.h"
#include "plan.h"

struct gpuc_plan {
  Plan *p;
  bool owned;                    /* false: a session's view of its own plan */
  char what[512];                /* the file or "<plan bytes>", for messages */
  uint32_t *io[2];               /* plan tensor index of each input / output */
  uint32_t n[2];
};

/* Set this thread's message (e's, or the formatted one) and return st; a
 * GPUC_ERR_BAD_INPUT whose e is marked unsupported becomes
 * GPUC_ERR_UNSUPPORTED. */
gpuc_status api_fail(gpuc_status st, const GpucErr *e);
gpuc_status api_failf(gpuc_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new handle owning p (freed on failure too). */
gpuc_status api_plan_new(Plan *p, const char *what, gpuc_plan **out);
/* Fill h as a view of p (owned or not). */
gpuc_status api_plan_wrap(Plan *p, const char *what, bool owned, gpuc_plan *h);
/* Open the CUDA driver, cuBLASLt and cuDNN once per process. */
void api_open_libs(void);
/* The lock a session's setup, first capture and teardown take (the
 * libraries' process-wide state); the compiler takes it around -O3's
 * tuning session. Never take the compiler's lock while holding it. */
void api_session_lock(void);
void api_session_unlock(void);
#endif
