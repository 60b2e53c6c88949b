/* NVRTC: CUDA C source -> PTX (for JIT on newer GPUs) and CUBIN (sm_XX).
 * Needs the CUDA headers folder for cuda_fp16.h.
 *
 * Compile time is the bulk of `gpuc MODEL` (densenet121's 785 kernels:
 * NVRTC 33.3 s of 33.7), so one program compiled for sm_XX gives both:
 * its PTX is the same text a compute_XX compile gives (checked byte for
 * byte), and ptxas runs on SPLIT_COMPILE threads. NVRTC's split compile
 * optimizes the kernels in groups; each kernel's PTX is unchanged (only
 * their order in the module moves), and a fixed group count keeps the
 * plan's bytes the same on every machine. An NVRTC without the option compiles in one thread. */
#include "codegen.h"
#include "cuda_api.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPLIT_COMPILE "--split-compile=8"

/* Creates and compiles one program: 0 with *prog made and *r the compile's
 * result, or -1 (e set) when the program could not be created. */
static int compile_program(nvrtcProgram *prog, const char *src, const char *arch, bool split,
                           nvrtcResult *r, GpucErr *e) {
  NVRTC_TRY(e, nvrtc.nvrtcCreateProgram(prog, src, "gpuc_module.cu", 0, NULL, NULL));
  char arch_opt[64], inc_opt[4200];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  snprintf(inc_opt, sizeof inc_opt, "--include-path=%s", gpuc_cuda_include_dir());
  const char *opts[] = {arch_opt, inc_opt, "--std=c++17", "-default-device", "-DNDEBUG",
                        SPLIT_COMPILE};
  int n = (int)(sizeof opts / sizeof *opts) - (split ? 0 : 1);
  *r = nvrtc.nvrtcCompileProgram(*prog, n, opts);
  return 0;
}

static int compile_failed(nvrtcProgram prog, nvrtcResult r, const char *src, const char *arch,
                          GpucErr *e) {
  size_t log_size = 0;
  nvrtc.nvrtcGetProgramLogSize(prog, &log_size);
  char *log = calloc(1, log_size + 1);
  if (log) nvrtc.nvrtcGetProgramLog(prog, log);
  char path[] = "/tmp/gpuc_nvrtc_XXXXXX.cu";
  int fd = mkstemps(path, 3);
  if (fd >= 0) {
    ssize_t w = write(fd, src, strlen(src));
    (void)w;
    close(fd);
  }
  /* first lines of the log are the useful ones; keep the message bounded */
  gpuc_err_set(e, "NVRTC failed for %s (%s); generated source saved to %s; log: %.600s", arch,
               nvrtc.nvrtcGetErrorString(r), fd >= 0 ? path : "(could not save)", log ? log : "");
  for (char *p = e->msg; *p; p++) if (*p == '\n') *p = ' ';
  free(log);
  nvrtc.nvrtcDestroyProgram(&prog);
  return -1;
}

/* PTX always; CUBIN too when cubin != NULL (arch is then sm_XX). */
static int compile_one(const char *src, const char *arch, char **ptx, size_t *ptx_size,
                       uint8_t **cubin, size_t *cubin_size, GpucErr *e) {
  nvrtcProgram prog;
  nvrtcResult r;
  if (compile_program(&prog, src, arch, cubin != NULL, &r, e)) return -1;
  if (r == NVRTC_ERROR_INVALID_OPTION && cubin) { /* an NVRTC without --split-compile */
    nvrtc.nvrtcDestroyProgram(&prog);
    if (compile_program(&prog, src, arch, false, &r, e)) return -1;
  }
  if (r != NVRTC_SUCCESS) return compile_failed(prog, r, src, arch, e);
  size_t n = 0, nc = 0;
  nvrtcResult g = nvrtc.nvrtcGetPTXSize(prog, &n);
  if (g == NVRTC_SUCCESS && cubin) g = nvrtc.nvrtcGetCUBINSize(prog, &nc);
  char *buf = g == NVRTC_SUCCESS ? malloc(n + 1) : NULL;
  uint8_t *cbuf = g == NVRTC_SUCCESS && cubin ? malloc(nc ? nc : 1) : NULL;
  if (g == NVRTC_SUCCESS && (!buf || (cubin && !cbuf))) {
    free(buf);
    free(cbuf);
    nvrtc.nvrtcDestroyProgram(&prog);
    return gpuc_err_set(e, "out of memory");
  }
  if (g == NVRTC_SUCCESS) g = nvrtc.nvrtcGetPTX(prog, buf);
  if (g == NVRTC_SUCCESS && cubin) g = nvrtc.nvrtcGetCUBIN(prog, (char *)cbuf);
  nvrtc.nvrtcDestroyProgram(&prog);
  if (g != NVRTC_SUCCESS) {
    free(buf);
    free(cbuf);
    return gpuc_err_set(e, "NVRTC could not return the %s code: %s", arch,
                        nvrtc.nvrtcGetErrorString(g));
  }
  buf[n] = 0;
  *ptx = buf;
  *ptx_size = strlen(buf) + 1;
  if (cubin) {
    *cubin = cbuf;
    *cubin_size = nc;
  }
  return 0;
}

int gpuc_nvrtc_compile(const char *src, int sm, bool arch_specific, char **ptx, size_t *ptx_size, uint8_t **cubin,
                       size_t *cubin_size, GpucErr *e) {
  if (gpuc_load_nvrtc(e)) return -1;
  char arch[32];
  snprintf(arch, sizeof arch, cubin ? "sm_%d%s" : "compute_%d%s", sm, arch_specific ? "a" : "");
  return compile_one(src, arch, ptx, ptx_size, cubin, cubin_size, e);
}
