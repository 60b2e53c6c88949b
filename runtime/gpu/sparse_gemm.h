/* 2:4 sparse GEMMs on sparse tensor cores through cuSPARSELt (dlopen'ed,
 * like the other libraries): the GEMMs a plan marks PLAN_GEMM_F_SPARSE24.
 * Built only where cuSPARSELt's headers were found (GPUC_HAVE_CUSPARSELT;
 * scripts/deps.sh fetches them); elsewhere, and wherever the library or the
 * GPU cannot run one, setup says why and the session runs it dense with
 * cuBLASLt: the same zeros, the same result up to summation order. */
#ifndef GPUC_SPARSE_GEMM_H
#define GPUC_SPARSE_GEMM_H
#include "plan.h"
#include <cuda.h>
#include <stddef.h>

typedef struct SparseGemm SparseGemm;

/* GEMM g (flagged SPARSE24, validated by the plan reader) with device
 * pointers a, b (the dense 2:4 weight, compressed here into a buffer of
 * its own), bias (or 0) and y. Returns 0 with *out set and *workspace the
 * scratch its call needs; 1 when it cannot run sparse here (why in `why`:
 * no library, an unsupported GPU or shape) and the caller runs it dense;
 * -1 on a CUDA error. */
int gpuc_sparse_gemm_setup(const PlanGemm *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr y,
                           CUstream stream, SparseGemm **out, size_t *workspace, char *why, size_t nwhy,
                           GpucErr *e);
/* Queue the GEMM on stream (capturable into a CUDA graph). */
int gpuc_sparse_gemm_run(SparseGemm *s, CUdeviceptr workspace, CUstream stream, GpucErr *e);
void gpuc_sparse_gemm_free(SparseGemm *s);
/* The cuSPARSELt library this build can open, e.g. "cuSPARSELt 0.10.0", or
 * why none ("built without cuSPARSELt headers", "libcusparseLt.so.0 not
 * found (tried ...)"). */
const char *gpuc_sparse_gemm_library(void);
#endif
