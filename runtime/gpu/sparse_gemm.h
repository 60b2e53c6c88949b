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
#include <stdint.h>

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
/* cuSPARSELt's kernel configuration of a GEMM: PlanGemm.sparse_cfg's
 * four values (CUSPARSELT_MATMUL_ALG_CONFIG_ID, SPLIT_K, SPLIT_K_MODE,
 * SPLIT_K_BUFFERS). setup uses the plan's when PLAN_GEMM_F_SPARSE_CFG is
 * set (and cuSPARSELt's default, with why in cfg_note, where this library
 * refuses it). */
/* cusparseLtMatmulSearch: cuSPARSELt times its configurations of s on this
 * GPU and keeps the fastest, whose values go to cfg[4]; *workspace: the
 * bytes its call needs now. 0; 1 when the search failed (why; s keeps its
 * configuration); -1 on a CUDA error. The activation and output are arena
 * bytes: only their time matters. */
int gpuc_sparse_gemm_search(SparseGemm *s, int32_t cfg[4], size_t *workspace, CUstream stream, char *why,
                            size_t nwhy, GpucErr *e);
/* Make s run configuration cfg (a cached search result): its plan made
 * again and the weight compressed again. 0; 1 when cuSPARSELt refuses it
 * (why; s back on its previous configuration); -1 on a CUDA error. */
int gpuc_sparse_gemm_configure(SparseGemm *s, const int32_t cfg[4], size_t *workspace, CUstream stream, char *why,
                               size_t nwhy, GpucErr *e);
/* Why the plan's configuration was not used at setup ("" when it was or
 * there was none). */
const char *gpuc_sparse_gemm_cfg_note(const SparseGemm *s);
/* Queue the GEMM on stream (capturable into a CUDA graph). */
int gpuc_sparse_gemm_run(SparseGemm *s, CUdeviceptr workspace, CUstream stream, GpucErr *e);
void gpuc_sparse_gemm_free(SparseGemm *s);
/* The cuSPARSELt library this build can open, e.g. "cuSPARSELt 0.10.0", or
 * why none ("built without cuSPARSELt headers", "libcusparseLt.so.0 not
 * found (tried ...)"). */
const char *gpuc_sparse_gemm_library(void);
#endif
