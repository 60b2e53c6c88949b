/* CUDA libraries, loaded at run time with dlopen: the gpuc binary starts on
 * machines without a GPU, a driver, cuBLAS or cuDNN (CI, CPU-only users),
 * and says what is missing only when a GPU path is asked for.
 *
 * Every call goes through a checking macro that reports file and line:
 *   CU_TRY(e, cu.cuMemAlloc(&p, n));      -> returns -1 with a message
 * Headers give the types; the function pointers are filled by dlsym. */
#ifndef GPUC_CUDA_API_H
#define GPUC_CUDA_API_H
#include "ir.h"
#include <cuda.h>
#include <nvrtc.h>
#include <cublasLt.h>
#define CUDNN_DEPRECATED /* the legacy convolution API is what we use */
#include <cudnn.h>

#define STR2(x) #x
#define STR(x) STR2(x)

/* X(name): the name as the header spells it; macros in cuda.h map some
 * names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2), and STR(name)
 * expands them, so dlsym looks up the right one. */
#define GPUC_CU_FUNCS(X)                                                            \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount)                \
  X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceTotalMem)                    \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)       \
  X(cuCtxSynchronize) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction) \
  X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH)      \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) \
  X(cuMemcpy2DAsync) X(cuMemsetD2D8Async)                                           \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate)      \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)    \
  X(cuGetErrorString) X(cuGetErrorName) X(cuMemGetInfo) X(cuStreamBeginCapture)     \
  X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphDestroy)    \
  X(cuGraphExecDestroy) X(cuFuncSetAttribute) X(cuMemHostAlloc) X(cuMemFreeHost)       \
  X(cuStreamWaitEvent) X(cuFuncGetAttribute) X(cuModuleGetGlobal) X(cuGraphExecUpdate) \
  X(cuTensorMapEncodeTiled)

#define GPUC_NVRTC_FUNCS(X)                                                         \
  X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcCompileProgram)                      \
  X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetPTXSize) X(nvrtcGetPTX) \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcDestroyProgram) X(nvrtcGetErrorString)

#define GPUC_CUBLASLT_FUNCS(X)                                                      \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate)                  \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)                    \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                      \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)             \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)        \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul) X(cublasLtGetStatusString)

#define GPUC_CUDNN_FUNCS(X)                                                         \
  X(cudnnGetVersion) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)               \
  X(cudnnGetErrorString) X(cudnnCreateTensorDescriptor)                             \
  X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptor)                     \
  X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor)                    \
  X(cudnnSetFilterNdDescriptor) X(cudnnCreateConvolutionDescriptor)                 \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)           \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)                   \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnFindConvolutionForwardAlgorithm) \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnConvolutionForward)               \
  X(cudnnConvolutionBiasActivationForward) X(cudnnCreateActivationDescriptor)        \
  X(cudnnSetActivationDescriptor) X(cudnnDestroyActivationDescriptor)                \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                     \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnConvolutionBackwardData)    \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                   \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) X(cudnnConvolutionBackwardFilter)

#define FN_PTR(name) __typeof__(name) *name;
typedef struct CudaDriverApi { GPUC_CU_FUNCS(FN_PTR) } CudaDriverApi;
typedef struct NvrtcApi { GPUC_NVRTC_FUNCS(FN_PTR) } NvrtcApi;
typedef struct CublasLtApi { GPUC_CUBLASLT_FUNCS(FN_PTR) } CublasLtApi;
typedef struct CudnnApi { GPUC_CUDNN_FUNCS(FN_PTR) } CudnnApi;
#undef FN_PTR

extern CudaDriverApi cu;
extern NvrtcApi nvrtc;
extern CublasLtApi cublaslt;
extern CudnnApi cudnn;

/* Load each library once; -1 with a message saying what is missing and
 * where it was looked for. */
int gpuc_load_cuda_driver(GpucErr *e);
int gpuc_load_nvrtc(GpucErr *e);
int gpuc_load_cublaslt(GpucErr *e);
int gpuc_load_cudnn(GpucErr *e);

/* Checked calls: on failure set e with "<what> failed at file:line: <error
 * string>" and return -1 from the enclosing function. */
int gpuc_cu_fail(GpucErr *e, CUresult r, const char *what, const char *file, int line);
int gpuc_nvrtc_fail(GpucErr *e, nvrtcResult r, const char *what, const char *file, int line);
int gpuc_cublas_fail(GpucErr *e, cublasStatus_t r, const char *what, const char *file, int line);
int gpuc_cudnn_fail(GpucErr *e, cudnnStatus_t r, const char *what, const char *file, int line);
#define CU_TRY(e, call) \
  do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) return gpuc_cu_fail(e, r_, #call, __FILE__, __LINE__); } while (0)
#define NVRTC_TRY(e, call) \
  do { nvrtcResult r_ = (call); if (r_ != NVRTC_SUCCESS) return gpuc_nvrtc_fail(e, r_, #call, __FILE__, __LINE__); } while (0)
#define CUBLAS_TRY(e, call) \
  do { cublasStatus_t r_ = (call); if (r_ != CUBLAS_STATUS_SUCCESS) return gpuc_cublas_fail(e, r_, #call, __FILE__, __LINE__); } while (0)
#define CUDNN_TRY(e, call) \
  do { cudnnStatus_t r_ = (call); if (r_ != CUDNN_STATUS_SUCCESS) return gpuc_cudnn_fail(e, r_, #call, __FILE__, __LINE__); } while (0)

/* Folder holding the CUDA headers NVRTC needs (cuda_fp16.h): $GPUC_CUDA_HOME
 * or $CUDA_HOME /include, else /usr/local/cuda/include. */
const char *gpuc_cuda_include_dir(void);
#endif
