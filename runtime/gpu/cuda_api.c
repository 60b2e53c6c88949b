/* dlopen loaders for the CUDA driver, NVRTC, cuBLASLt and cuDNN. */
#include "cuda_api.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CudaDriverApi cu;
NvrtcApi nvrtc;
CublasLtApi cublaslt;
CudnnApi cudnn;

/* Try each candidate; the first that opens wins. */
static void *open_first(const char *const *names, char *tried, size_t n) {
  size_t len = 0;
  tried[0] = 0;
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    len += (size_t)snprintf(tried + len, len < n ? n - len : 0, "%s%s", i ? ", " : "", names[i]);
  }
  return NULL;
}

#define LOAD_SYM(name)                                                       \
  if (!(api->name = (__typeof__(api->name))dlsym(h, STR(name))))             \
    return gpuc_err_set(e, "%s: symbol %s not found", lib, STR(name));

#define DEFINE_LOADER(fn, type, var, FUNCS, lib, ...)                        \
  int fn(GpucErr *e) {                                                       \
    static int state; /* 0 not tried, 1 loaded, -1 failed */                 \
    static GpucErr saved;                                                    \
    if (state == 1) return 0;                                                \
    if (state == -1) { if (e) *e = saved; return -1; }                       \
    static const char *const names[] = {__VA_ARGS__, NULL};                  \
    char tried[1024];                                                        \
    void *h = open_first(names, tried, sizeof tried);                        \
    type *api = &var;                                                        \
    int rc = 0;                                                              \
    if (!h) rc = gpuc_err_set(&saved, "%s not found (tried %s)", lib, tried); \
    else rc = load_##var(h, api, lib, &saved);                               \
    state = rc ? -1 : 1;                                                     \
    if (rc && e) *e = saved;                                                 \
    return rc;                                                               \
  }

static int load_cu(void *h, CudaDriverApi *api, const char *lib, GpucErr *e) {
  GPUC_CU_FUNCS(LOAD_SYM)
  return 0;
}
static int load_nvrtc(void *h, NvrtcApi *api, const char *lib, GpucErr *e) {
  GPUC_NVRTC_FUNCS(LOAD_SYM)
  return 0;
}
static int load_cublaslt(void *h, CublasLtApi *api, const char *lib, GpucErr *e) {
  GPUC_CUBLASLT_FUNCS(LOAD_SYM)
  return 0;
}
static int load_cudnn(void *h, CudnnApi *api, const char *lib, GpucErr *e) {
  GPUC_CUDNN_FUNCS(LOAD_SYM)
  return 0;
}

DEFINE_LOADER(gpuc_load_cuda_driver, CudaDriverApi, cu, GPUC_CU_FUNCS,
              "the CUDA driver (libcuda.so.1; is an NVIDIA GPU and driver present?)",
              "libcuda.so.1", "libcuda.so")
DEFINE_LOADER(gpuc_load_nvrtc, NvrtcApi, nvrtc, GPUC_NVRTC_FUNCS, "NVRTC (libnvrtc.so.13)",
              "libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.13", "libnvrtc.so")
DEFINE_LOADER(gpuc_load_cublaslt, CublasLtApi, cublaslt, GPUC_CUBLASLT_FUNCS,
              "cuBLASLt (libcublasLt.so.13)", "libcublasLt.so.13",
              "/usr/local/cuda/lib64/libcublasLt.so.13", "libcublasLt.so")
DEFINE_LOADER(gpuc_load_cudnn, CudnnApi, cudnn, GPUC_CUDNN_FUNCS,
              "cuDNN 9 (libcudnn.so.9; set LD_LIBRARY_PATH to its folder)", "libcudnn.so.9",
              "/usr/local/cuda/lib/libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9",
              "libcudnn.so")

int gpuc_cu_fail(GpucErr *e, CUresult r, const char *what, const char *file, int line) {
  const char *s = NULL, *n = NULL;
  if (cu.cuGetErrorString) cu.cuGetErrorString(r, &s);
  if (cu.cuGetErrorName) cu.cuGetErrorName(r, &n);
  gpuc_err_set(e, "CUDA error %s (%d: %s) in %s at %s:%d", n ? n : "?", (int)r, s ? s : "?", what, file, line);
  if (e) e->out_of_memory = r == CUDA_ERROR_OUT_OF_MEMORY;
  return -1;
}
int gpuc_nvrtc_fail(GpucErr *e, nvrtcResult r, const char *what, const char *file, int line) {
  return gpuc_err_set(e, "NVRTC error %s in %s at %s:%d",
                      nvrtc.nvrtcGetErrorString ? nvrtc.nvrtcGetErrorString(r) : "?", what, file, line);
}
int gpuc_cublas_fail(GpucErr *e, cublasStatus_t r, const char *what, const char *file, int line) {
  gpuc_err_set(e, "cuBLASLt error %s in %s at %s:%d",
               cublaslt.cublasLtGetStatusString ? cublaslt.cublasLtGetStatusString(r) : "?", what, file, line);
  if (e) e->out_of_memory = r == CUBLAS_STATUS_ALLOC_FAILED;
  return -1;
}
int gpuc_cudnn_fail(GpucErr *e, cudnnStatus_t r, const char *what, const char *file, int line) {
  gpuc_err_set(e, "cuDNN error %s in %s at %s:%d", cudnn.cudnnGetErrorString ? cudnn.cudnnGetErrorString(r) : "?",
               what, file, line);
  if (e) e->out_of_memory = r == CUDNN_STATUS_ALLOC_FAILED;
  return -1;
}

const char *gpuc_cuda_include_dir(void) {
  static char buf[4096];
  const char *h = getenv("GPUC_CUDA_HOME");
  if (!h) h = getenv("CUDA_HOME");
  if (!h) h = "/usr/local/cuda";
  snprintf(buf, sizeof buf, "%s/include", h);
  return buf;
}
