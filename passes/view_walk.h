/* Strided views walked up through data-movement ops (passes/view_walk.c).
 *
 * A view reads a value as axes of extents n[] and element strides st[] from
 * an element offset, over the value's row-major storage. Walking up from a
 * value through its producer keeps the view exact where the producer only
 * moves data: Reshape, Flatten, Squeeze, Unsqueeze and Identity keep the
 * row-major order (the view is unchanged); Transpose, Split (output j: a
 * window of the axis), Slice (constant starts and ends, step 1: a window of
 * each axis; timm's qkv.unbind(0) from the dynamo exporter) and Gather of
 * one constant index pick elements by multi-index, and the view follows
 * when each of its axes lies inside one axis of the op's output (its stride
 * a multiple of that axis's stride, the offset plus extent never carrying
 * into the next axis) or, with `split`, covers whole inner axes, which then
 * become axes of the view of their own.
 * Used by passes/attention_views.c (Attention's Q/K/V as views of one GEMM
 * output) and passes/simplify_transpose.c (a Transpose-Reshape-Transpose
 * chain that moves nothing becomes a Reshape). */
#ifndef GPUC_VIEW_WALK_H
#define GPUC_VIEW_WALK_H
#include "passes.h"

#define GPUC_VIEW_MAX_AXES 16
typedef struct GpucView {
  int64_t off;
  int rank;
  int64_t st[GPUC_VIEW_MAX_AXES], n[GPUC_VIEW_MAX_AXES];
} GpucView;

/* the view that reads t as it is stored */
void gpuc_view_row_major(GpucView *v, const Tensor *t);
/* v reads a row-major block of numel elements from offset 0 (its axes,
 * merged where they are contiguous, are one axis of stride 1) */
bool gpuc_view_is_plain(const GpucView *v, int64_t numel);
/* v over y, whose element i lies in z at index zi[map[a]] = i[a] +
 * start[a] for each y axis a, and zi[x] = fixed[x] on the z axes no y axis
 * maps to (fixed[x] >= 0 there): true and v over z, or false (v as it was) */
bool gpuc_view_through(GpucView *v, const Tensor *y, const Tensor *z, const int *map, const int64_t *start,
                       const int64_t *fixed, bool split);
/* One step up from value y through its producer: the value the view now
 * reads (v updated), or -1 where the producer computes or the view does
 * not fit */
int gpuc_view_step(const Graph *g, int y, GpucView *v, bool split);
#endif
