/* GridSample-16/20 and AffineGrid-20: the checked geometry (ir/infer_grid.c)
 * and the per-axis arithmetic, written once and used twice, as
 * ir/dropout_rng.h does: the CPU reference (runtime/ref/ref_grid.c)
 * expands GPUC_GRID_SAMPLE_MATH as C functions, codegen
 * (codegen/lower_grid.c) emits the same macro's text into the NVRTC module
 * as __device__ functions, so both sample the same taps with the same
 * weights.
 *
 * GridSample: X [N, C, D1..Dr], grid [N, O1..Or, r] -> Y [N, C, O1..Or].
 * grid[n, o, k] is a normalized coordinate in [-1, 1] along X's spatial
 * axis r - 1 - k (component 0 is the last axis: x = width). Per axis of
 * size L (ONNX's reference implementation, onnx/reference/ops/
 * op_grid_sample.py, which follows PyTorch's GridSampler.h):
 *   source x = ((n + 1) / 2) (L - 1)     align_corners = 1
 *            = ((n + 1) L - 1) / 2        align_corners = 0
 *   nearest: x = rint(x) (ties to even, PyTorch's nearbyint)
 *   x outside [lo, hi] ([0, L-1] aligned, [-0.5, L-0.5] not):
 *     border: x clamped to [0, L-1]; reflection: x reflected at lo and hi
 *     until inside; zeros: kept
 *   taps: nearest (long)x; linear floor(x), +1 with weights 1-t, t;
 *   cubic floor(x)-1..+2 with Keys' weights (A = -0.75), t = x - floor(x)
 *   a tap index outside [0, L): zeros reads 0, border clamps it,
 *   reflection reflects it (as above).
 * Y = sum over the tap grid of prod(weights) * X (nearest: the element).
 * Beyond the reference (where it raises or is undefined): a coordinate that
 * is NaN, or so far out that every tap is outside, reads only zeros
 * (PyTorch's rule for non-finite coordinates); a reflection on an axis of
 * one element (aligned: lo == hi) gives 0.
 *
 * AffineGrid: theta [N, 2, 3] and size (N, C, H, W) -> grid [N, H, W, 2],
 * or theta [N, 3, 4] and size (N, C, D, H, W) -> grid [N, D, H, W, 3]:
 * grid[n, ..., k] = theta[n, k, :] . (x, y, [z,] 1) with the base
 * coordinates of each output position (x along W, y along H, z along D):
 *   base(i, L) = -1 + 2 i / (L - 1)      align_corners = 1
 *              = -1 + (2 i + 1) / L      align_corners = 0
 *              = 0 when L == 1           (torch.nn.functional.affine_grid)
 */
#ifndef GPUC_GRID_SAMPLE_H
#define GPUC_GRID_SAMPLE_H
#include "ir.h"
#include <math.h>

/* modes and padding modes: plain numbers, so the device text keeps them */
#define GPUC_GS_NEAREST 0
#define GPUC_GS_LINEAR 1
#define GPUC_GS_CUBIC 2
#define GPUC_GS_ZEROS 0
#define GPUC_GS_BORDER 1
#define GPUC_GS_REFLECTION 2
#define GPUC_GS_MAX_SPATIAL 3 /* spatial axes gpuc samples: 1-D, 2-D (images) and 3-D (volumes) */

typedef struct GridSampleGeom {
  int r;                                /* spatial axes */
  int mode, pad, align;                 /* GPUC_GS_*, align_corners */
  int64_t N, C;
  int64_t in[GPUC_GS_MAX_SPATIAL];      /* X's spatial dims D1..Dr (-1 unknown at import) */
  int64_t out[GPUC_GS_MAX_SPATIAL];     /* grid's O1..Or */
} GridSampleGeom;

/* Checks the node (attributes by opset, ranks, dims, dtypes) and fills g;
 * an error or unsupported message names the node. ir/infer_grid.c */
int gpuc_grid_sample_geom(OpCtx *c, GridSampleGeom *g);

typedef struct AffineGridGeom {
  int r;                                /* 2 (theta [N,2,3]) or 3 (theta [N,3,4]) */
  int align;
  int64_t N;
  int64_t sp[3];                        /* H, W or D, H, W; -1 when size is unknown */
} AffineGridGeom;
int gpuc_affine_grid_geom(OpCtx *c, AffineGridGeom *g);

/* T is the coordinate type (float, or double for f64 X), P the functions'
 * prefix, FLOOR/RINT/FMOD T's math functions. Only arithmetic that means
 * the same in C and CUDA C. */
#define GPUC_GRID_SAMPLE_MATH(QUAL, T, P, FLOOR, RINT, FMOD)                                             \
  /* the source coordinate of normalized n on an axis of L elements */                                \
  QUAL T P##_unnorm(T n, long long L, int align) {                                                     \
    return align ? (n + 1) / 2 * (T)(L - 1) : ((n + 1) * (T)L - 1) / 2;                                \
  }                                                                                                    \
  /* x reflected at lo and hi until it lies in [lo, hi] */                                             \
  QUAL T P##_reflect(T x, T lo, T hi) {                                                                \
    T span = hi - lo;                                                                                  \
    if (!(span > 0)) return lo;                                                                        \
    if (x < lo) {                                                                                      \
      T m = FMOD(lo - x, 2 * span);                                                                    \
      return m < span ? lo + m : hi - (m - span);                                                      \
    }                                                                                                  \
    if (x > hi) {                                                                                      \
      T m = FMOD(x - hi, 2 * span);                                                                    \
      return m < span ? hi - m : lo + (m - span);                                                      \
    }                                                                                                  \
    return x;                                                                                          \
  }                                                                                                    \
  /* tap index i on an axis of L elements: the element read, -1 for a zero */                          \
  QUAL long long P##_tap(long long i, long long L, int align, int pad) {                               \
    if (i >= 0 && i < L) return i;                                                                     \
    if (pad == GPUC_GS_ZEROS) return -1;                                                               \
    if (pad == GPUC_GS_BORDER) return i < 0 ? 0 : L - 1;                                               \
    T lo = align ? (T)0 : (T)-0.5, hi = align ? (T)(L - 1) : (T)L - (T)0.5;                            \
    long long j = (long long)P##_reflect((T)i, lo, hi);                                                \
    return j < 0 ? 0 : j >= L ? L - 1 : j;                                                             \
  }                                                                                                    \
  /* the taps (idx, -1 reads 0) and weights w of source coordinate x on an                            \
   * axis of L elements; returns their count: 1, 2 or 4 by mode */                                     \
  QUAL int P##_axis(T x, long long L, int align, int mode, int pad, long long *idx, T *w) {            \
    int k = mode == GPUC_GS_CUBIC ? 4 : mode == GPUC_GS_LINEAR ? 2 : 1;                                \
    if (mode == GPUC_GS_NEAREST) x = RINT(x);                                                          \
    T lo = align ? (T)0 : (T)-0.5, hi = align ? (T)(L - 1) : (T)L - (T)0.5;                            \
    if (x < lo || x > hi) {                                                                            \
      if (pad == GPUC_GS_BORDER) x = x < 0 ? (T)0 : x > (T)(L - 1) ? (T)(L - 1) : x;                   \
      else if (pad == GPUC_GS_REFLECTION) x = P##_reflect(x, lo, hi);                                  \
    }                                                                                                  \
    if (!(x > lo - 4 && x < hi + 4)) { /* NaN, or every tap outside: integer casts stay defined */     \
      for (int j = 0; j < k; j++) idx[j] = -1, w[j] = 0;                                               \
      return k;                                                                                        \
    }                                                                                                  \
    if (mode == GPUC_GS_NEAREST) {                                                                     \
      idx[0] = P##_tap((long long)x, L, align, pad), w[0] = 1;                                         \
      return 1;                                                                                        \
    }                                                                                                  \
    T f = FLOOR(x), t = x - f;                                                                         \
    long long i0 = (long long)f;                                                                       \
    if (mode == GPUC_GS_LINEAR) {                                                                      \
      idx[0] = P##_tap(i0, L, align, pad), idx[1] = P##_tap(i0 + 1, L, align, pad);                    \
      w[0] = 1 - t, w[1] = t;                                                                          \
      return 2;                                                                                        \
    }                                                                                                  \
    const T A = (T)-0.75;                                                                              \
    T t1 = t + 1, s = 1 - t, s1 = 2 - t;                                                               \
    w[0] = ((A * t1 - 5 * A) * t1 + 8 * A) * t1 - 4 * A;                                               \
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;                                                        \
    w[2] = ((A + 2) * s - (A + 3)) * s * s + 1;                                                        \
    w[3] = ((A * s1 - 5 * A) * s1 + 8 * A) * s1 - 4 * A;                                               \
    for (int j = 0; j < 4; j++) idx[j] = P##_tap(i0 - 1 + j, L, align, pad);                           \
    return 4;                                                                                          \
  }                                                                                                    \
  /* AffineGrid's base coordinate of index i on an axis of L elements */                              \
  QUAL double P##_base(long long i, long long L, int align) {                                          \
    if (L <= 1) return 0;                                                                              \
    return align ? -1 + 2.0 * (double)i / (double)(L - 1) : -1 + (2.0 * (double)i + 1) / (double)L;   \
  }

#define GPUC_GS_TEXT2(...) #__VA_ARGS__
#define GPUC_GS_TEXT(...) GPUC_GS_TEXT2(__VA_ARGS__)
/* The device copies (float: gpuc_gsf_*, double: gpuc_gsd_*), each guarded
 * so a module with several nodes defines them once. */
#define GPUC_GRID_SAMPLE_SRC_F                                                                         \
  "#ifndef GPUC_GSF_DEFINED\n#define GPUC_GSF_DEFINED\n" GPUC_GS_TEXT(GPUC_GRID_SAMPLE_MATH(           \
      static __device__ __forceinline__, float, gpuc_gsf, floorf, rintf, fmodf)) "\n#endif\n"
#define GPUC_GRID_SAMPLE_SRC_D                                                                         \
  "#ifndef GPUC_GSD_DEFINED\n#define GPUC_GSD_DEFINED\n" GPUC_GS_TEXT(GPUC_GRID_SAMPLE_MATH(           \
      static __device__ __forceinline__, double, gpuc_gsd, floor, rint, fmod)) "\n#endif\n"

GPUC_GRID_SAMPLE_MATH(static inline, float, gpuc_gsf, floorf, rintf, fmodf)
GPUC_GRID_SAMPLE_MATH(static inline, double, gpuc_gsd, floor, rint, fmod)

#endif
