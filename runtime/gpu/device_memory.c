/* Device memory a session asks for, checked against what the GPU has free
 * before it allocates: a plan compiled for a batch the GPU cannot hold
 * fails at session creation with the bytes it needs and the bytes free,
 * not with a bare "out of memory" from the first allocation that misses. */
#include "session_internal.h"

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }

int gpuc_session_fits(GpucSession *s, const char *what, uint64_t bytes, const char *parts, GpucErr *e) {
  size_t free_b = 0, total_b = 0;
  CU_TRY(e, cu.cuMemGetInfo(&free_b, &total_b));
  if (bytes <= free_b) return 0;
  return gpuc_err_set(e, "%s: the plan needs %llu bytes (%.2f GiB) of device memory (%s), the GPU (%s) has %llu "
                      "bytes (%.2f GiB) free of %llu: compile for a smaller batch (--shape) or check it with "
                      "--mem-limit", what, (unsigned long long)bytes, gib(bytes), parts, s->devname,
                      (unsigned long long)free_b, gib(free_b), (unsigned long long)total_b);
}
