/* Attention streamed over K/V blocks (codegen/lower_attention_stream.c):
 * grouped-query heads, causal masks, and half-precision sequences longer
 * than the K/V-resident kernel of lower_attention.c takes. */
#ifndef GPUC_LOWER_ATTENTION_STREAM_H
#define GPUC_LOWER_ATTENTION_STREAM_H
#include "codegen.h"
#include "infer_linalg.h"

/* the tensor-core streaming kernel takes this geometry, dtype and arch */
bool attention_flash_fits(const GpucAttnGeom *a, GpucDType dt, int sm);
/* Attention node c (geometry a, mask strides ms) as one streaming kernel:
 * the tensor-core one where tensor_cores and attention_flash_fits, else
 * a warp per query row (any float dtype). */
/* "constexpr i64 QS0 .. YS2" (Q, K, V, Y strides) and "QO, KO, VO" (the
 * view offsets) for a kernel body (lower_attention.c) */
void attention_emit_strides(StrBuf *b, const GpucAttnGeom *a);
/* the mask's batch index in a kernel body: "b", or "(b % P)" with
 * attribute mask_period P (the mask repeats every P batches) */
void attention_mask_batch(const GpucAttnGeom *a, char *buf, size_t n);
int lower_attention_stream(LowerCtx *c, const GpucAttnGeom *a, const int64_t ms[4], bool tensor_cores);
/* The mask's term in a tensor-core kernel body (mask strides ms, batch
 * index mb): rowbias (one row for every query) as the expression `bias`
 * (char[256]) of key j staged per block; else, with a mask, the statement
 * `madd` (char[320]) adding it to score x at (row, col); "0.f" and "" for
 * the term left out. */
void attention_mask_terms(bool mask, bool rowbias, const char *mb, const int64_t ms[4], char bias[256],
                          char madd[320]);
/* the tensor-core kernels skip the warps past Sq and the 16-key groups past
 * the last key (false: GPUC_ATTENTION_FULL_TILES=1, for a GPU A/B) */
bool attention_trim_tiles(void);
#endif
