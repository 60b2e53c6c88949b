/* NVRTC: CUDA C source -> PTX (compute_XX, for JIT on newer GPUs) and
 * CUBIN (sm_XX). Needs the CUDA headers folder for cuda_fp16.h. */
#include "codegen.h"
#include "cuda_api.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int compile_one(const char *src, const char *arch, bool want_cubin, char **out,
                       size_t *out_size, GpucErr *e) {
  nvrtcProgram prog;
  NVRTC_TRY(e, nvrtc.nvrtcCreateProgram(&prog, src, "gpuc_module.cu", 0, NULL, NULL));
  char arch_opt[64], inc_opt[4200];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  snprintf(inc_opt, sizeof inc_opt, "--include-path=%s", gpuc_cuda_include_dir());
  const char *opts[] = {arch_opt, inc_opt, "--std=c++17", "-default-device",
                        "-DNDEBUG"};
  nvrtcResult r = nvrtc.nvrtcCompileProgram(prog, sizeof opts / sizeof *opts, opts);
  if (r != NVRTC_SUCCESS) {
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
  size_t n = 0;
  if (want_cubin) NVRTC_TRY(e, nvrtc.nvrtcGetCUBINSize(prog, &n));
  else NVRTC_TRY(e, nvrtc.nvrtcGetPTXSize(prog, &n));
  char *buf = malloc(n + 1);
  if (!buf) { nvrtc.nvrtcDestroyProgram(&prog); return gpuc_err_set(e, "out of memory"); }
  if (want_cubin) NVRTC_TRY(e, nvrtc.nvrtcGetCUBIN(prog, buf));
  else NVRTC_TRY(e, nvrtc.nvrtcGetPTX(prog, buf));
  if (!want_cubin) { buf[n] = 0; n = strlen(buf) + 1; }
  nvrtc.nvrtcDestroyProgram(&prog);
  *out = buf;
  *out_size = n;
  return 0;
}

int gpuc_nvrtc_compile(const char *src, int sm, char **ptx, size_t *ptx_size, uint8_t **cubin,
                       size_t *cubin_size, GpucErr *e) {
  if (gpuc_load_nvrtc(e)) return -1;
  char arch[32];
  snprintf(arch, sizeof arch, "compute_%d", sm);
  if (compile_one(src, arch, false, ptx, ptx_size, e)) return -1;
  if (cubin) {
    snprintf(arch, sizeof arch, "sm_%d", sm);
    if (compile_one(src, arch, true, (char **)cubin, cubin_size, e)) {
      free(*ptx);
      *ptx = NULL;
      return -1;
    }
  }
  return 0;
}
