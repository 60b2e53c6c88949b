/* The device error record of a session (runtime/device_fault.h): found in
 * the module at load, copied into pinned host memory by the last node of
 * the captured CUDA graph (so reading it costs no extra call or sync),
 * read after the run, reset after an error so the session stays usable.
 * A plan whose kernels report nothing has no record and pays nothing. */
#include "session_internal.h"
#include "device_fault.h"
#include <stdlib.h>
#include <string.h>

enum { FAULT_BYTES = GPUC_FAULT_WORDS * sizeof(uint64_t) };

int gpuc_fault_setup(GpucSession *s, const char *what, GpucErr *e) {
  s->what = strdup(what ? what : "the plan");
  if (!s->what) return gpuc_err_set(e, "out of memory");
  /* a module without the record is not asked for it: the lookup would
   * fail, and compute-sanitizer's memcheck reports every failing call
   * (the one error it found on mlp and small_cnn, docs/SANITIZER.md) */
  if (!gpuc_fault_in_ptx(s->plan->ptx, s->plan->ptx_size)) return 0;
  CUdeviceptr d = 0;
  size_t bytes = 0;
  CUresult r = cu.cuModuleGetGlobal(&d, &bytes, s->module, GPUC_FAULT_SYMBOL);
  if (r == CUDA_ERROR_NOT_FOUND) return 0; /* no kernel reports */
  if (r != CUDA_SUCCESS) return gpuc_cu_fail(e, r, "cuModuleGetGlobal(" GPUC_FAULT_SYMBOL ")", __FILE__, __LINE__);
  if (bytes != FAULT_BYTES)
    return gpuc_err_set(e, "%s: the module's %s is %zu bytes, not %zu: rebuild the plan with this gpuc", s->what,
                        GPUC_FAULT_SYMBOL, bytes, (size_t)FAULT_BYTES);
  void *h = NULL;
  if (gpuc_session_inject("cuMemHostAlloc (device error record)", e)) return -1;
  CU_TRY(e, cu.cuMemHostAlloc(&h, FAULT_BYTES, 0));
  memset(h, 0, FAULT_BYTES);
  s->fault_host = h;
  s->fault = d;
  CU_TRY(e, cu.cuMemsetD8Async(d, 0, FAULT_BYTES, s->stream));
  CU_TRY(e, cu.cuStreamSynchronize(s->stream));
  return 0;
}

int gpuc_fault_enqueue(GpucSession *s, GpucErr *e) {
  if (s->fault) CU_TRY(e, cu.cuMemcpyDtoHAsync(s->fault_host, s->fault, FAULT_BYTES, s->stream));
  return 0;
}

int gpuc_fault_reset(GpucSession *s, GpucErr *e) {
  if (!s->fault) return 0;
  CU_TRY(e, cu.cuMemsetD8Async(s->fault, 0, FAULT_BYTES, s->stream));
  CU_TRY(e, cu.cuStreamSynchronize(s->stream));
  memset(s->fault_host, 0, FAULT_BYTES);
  return 0;
}

int gpuc_fault_check(GpucSession *s, GpucErr *e) {
  if (!s->fault || s->fault_host[0] == 0) return 0;
  uint64_t rec[GPUC_FAULT_WORDS];
  memcpy(rec, s->fault_host, sizeof rec);
  if (gpuc_fault_reset(s, e)) return -1; /* the next run starts clean */
  if (s->fault_quiet) return 0;
  gpuc_fault_message(s->plan, s->what, rec, e);
  return -1;
}

void gpuc_fault_free(GpucSession *s) {
  if (s->fault_host) cu.cuMemFreeHost(s->fault_host);
  s->fault_host = NULL;
  s->fault = 0;
}
