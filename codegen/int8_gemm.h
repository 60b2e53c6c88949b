/* gpuc's own int8 tensor-core GEMM (codegen/lower_int8_gemm.c): the
 * MatMulInt8 steps of --int8 and of imported quantized models on sm_80+,
 * with the DequantizeRows that reads the int32 sums (and the elementwise
 * ops fused after it: bias, GELU, residual, the cast to half) as its
 * epilogue. */
#ifndef GPUC_INT8_GEMM_H
#define GPUC_INT8_GEMM_H
#include "ew_kernel.h"

/* The own kernel takes Acc [m, n] = Xq [m, k] Wq [n, k]^T on this target
 * (epilogue: with a DequantizeRows group as its epilogue, else writing
 * int32): sm_80 or newer, k a multiple of 16 (16-byte row loads), n even
 * (pairs of columns a store), 64 tiles or more, and where it was measured
 * faster than cuBLASLt: on sm_90 (by default the TMA-fed warp-specialized
 * kernel at K >= 2048 or N >= 2048, Hopper's wgmma kernel elsewhere) every
 * such GEMM of n >= 256, epilogue or int32; elsewhere epilogue GEMMs of
 * n >= 2048. Environment (A/B and tests): GPUC_INT8_GEMM "cublaslt" keeps
 * cuBLASLt's IMMA GEMM + DequantizeRows everywhere, "own" takes this
 * kernel for every int8 GEMM it can compute. On sm_90 GPUC_INT8_WS=0 gives
 * the default before the TMA kernel (the wgmma kernel, epilogue GEMMs of
 * n >= 2048, or n >= 768 with k < 2048), =1 (cp.async loads) or =tma the
 * warp-specialized kernel wherever the wgmma one runs, with =0's choice of
 * GEMMs; GPUC_INT8_WS_TILE its tile (without GPUC_INT8_WS: every GEMM's,
 * TMA loads). Same bits whichever kernel. */
bool cg_int8_gemm_own(const CodegenOptions *o, int64_t m, int64_t n, int64_t k, bool epilogue);
/* MatMulInt8 node mm takes the reader of its sums as its epilogue on
 * target sm, by the builder's own test (cg_int8_epilogue_reader on the
 * fusion groups as they stand): PassOptions.int8_gemm_epilogue. False for
 * another node. */
bool cg_int8_gemm_takes_epilogue(const Graph *g, int mm, int sm);
/* The node that takes MatMulInt8 node mm's sums as its epilogue: a
 * DequantizeRows reading them as its input 0, their only reader, in an
 * elementwise fusion group (or alone) whose output rows are the GEMM's;
 * -1 when none (the GEMM writes int32). reader_group as for cg_lower_group. */
int cg_int8_epilogue_reader(const Graph *g, const CodegenOptions *o, int mm, const int *reader_group);
/* MatMulInt8 node mm and the fusion group m[0..nm) (one member its
 * epilogue reader) as one kernel: 0; 1 when the group is not one inlinable
 * program (nothing emitted: the caller lowers them apart); -1 error. */
int cg_lower_int8_epilogue(PlanBuilder *pb, const Graph *g, int mm, const int *m, int nm);
/* The GEMM kernel for node c->n: Xq tensor tx, Wq tensor tw; with epi
 * NULL it writes the int32 sums to tensor tacc, else epi's output (epi's
 * register input is the sum). */
int cg_int8_gemm(LowerCtx *c, uint32_t tx, uint32_t tw, int64_t m, int64_t n, int64_t k, const EwProgram *epi,
                 uint32_t tacc);
#endif
