/* Reference GridSample and AffineGrid (semantics: ir/grid_sample.h, whose
 * per-axis functions this file and the GPU kernels of codegen/lower_grid.c
 * share). Math in float for f32/f16/bf16 (PyTorch's and the generated
 * kernels' precision), double for f64; the sum over the tap grid in the
 * kernels' order: axis 0 outermost, weights multiplied axis 0 first. */
#include "ref.h"
#include "grid_sample.h"

/* One output point's taps: per spatial axis d, k[d] taps at idx (-1: a
 * zero) with weights; axes past r have one tap of weight 1 at 0. */
typedef struct {
  int k[GPUC_GS_MAX_SPATIAL];
  long long idx[GPUC_GS_MAX_SPATIAL][4];
  float wf[GPUC_GS_MAX_SPATIAL][4];
  double wd[GPUC_GS_MAX_SPATIAL][4];
  int64_t stride[GPUC_GS_MAX_SPATIAL];
} Taps;

/* X's element (base + offset of the taps) summed over the tap grid */
static double sample(const Tensor *x, int64_t base, const Taps *t, bool dbl, bool nearest) {
  float accf = 0;
  double accd = 0;
  for (int a = 0; a < t->k[0]; a++) {
    if (t->idx[0][a] < 0) continue;
    for (int b = 0; b < t->k[1]; b++) {
      if (t->idx[1][b] < 0) continue;
      for (int e = 0; e < t->k[2]; e++) {
        if (t->idx[2][e] < 0) continue;
        int64_t off = base + t->idx[0][a] * t->stride[0] + t->idx[1][b] * t->stride[1] + t->idx[2][e] * t->stride[2];
        double v = gpuc_get_f64(x, off);
        if (nearest) return v; /* one tap: the element itself, bits kept */
        if (dbl) accd += t->wd[0][a] * t->wd[1][b] * t->wd[2][e] * v;
        else accf += t->wf[0][a] * t->wf[1][b] * t->wf[2][e] * (float)v;
      }
    }
  }
  return dbl ? accd : accf;
}

int ref_GridSample(OpCtx *c) {
  GridSampleGeom g;
  if (gpuc_grid_sample_geom(c, &g)) return -1;
  const Tensor *x = c->in[0], *grid = c->in[1];
  Tensor *y = c->out[0];
  if (gpuc_numel(y) == 0) return 0;
  bool dbl = x->dt == GPUC_DT_F64;
  int r = g.r;
  int64_t osp = 1, xsp = 1;
  for (int d = 0; d < r; d++) osp *= g.out[d], xsp *= g.in[d];
  Taps t = {{1, 1, 1}, {{0}, {0}, {0}}, {{1}, {1}, {1}}, {{1}, {1}, {1}}, {0, 0, 0}};
  for (int d = r - 1; d >= 0; d--) t.stride[d] = d == r - 1 ? 1 : t.stride[d + 1] * g.in[d + 1];
  for (int64_t n = 0; n < g.N; n++)
    for (int64_t o = 0; o < osp; o++) {
      /* grid component k is axis r - 1 - k's coordinate */
      for (int d = 0; d < r; d++) {
        double gn = gpuc_get_f64(grid, (n * osp + o) * r + (r - 1 - d));
        if (dbl) {
          double u = gpuc_gsd_unnorm(gn, g.in[d], g.align);
          t.k[d] = gpuc_gsd_axis(u, g.in[d], g.align, g.mode, g.pad, t.idx[d], t.wd[d]);
        } else {
          float u = gpuc_gsf_unnorm((float)gn, g.in[d], g.align);
          t.k[d] = gpuc_gsf_axis(u, g.in[d], g.align, g.mode, g.pad, t.idx[d], t.wf[d]);
        }
      }
      for (int64_t ch = 0; ch < g.C; ch++) {
        double v = sample(x, (n * g.C + ch) * xsp, &t, dbl, g.mode == GPUC_GS_NEAREST);
        gpuc_set_f64(y, (n * g.C + ch) * osp + o, v);
      }
    }
  return 0;
}

int ref_AffineGrid(OpCtx *c) {
  AffineGridGeom g;
  if (gpuc_affine_grid_geom(c, &g)) return -1;
  const Tensor *th = c->in[0];
  Tensor *y = c->out[0];
  int r = g.r;
  bool dbl = th->dt == GPUC_DT_F64;
  /* sp[] is (H, W) or (D, H, W); the grid's components are (x, y[, z]):
   * x along the last axis */
  int64_t pts = 1;
  for (int d = 0; d < r; d++) pts *= g.sp[d];
  if (pts == 0 || g.N == 0) return 0;
  for (int64_t n = 0; n < g.N; n++)
    for (int64_t p = 0; p < pts; p++) {
      double base[4]; /* x, y, [z,] 1 */
      int64_t q = p;
      for (int d = r - 1; d >= 0; d--) {
        base[r - 1 - d] = gpuc_gsd_base(q % g.sp[d], g.sp[d], g.align);
        q /= g.sp[d];
      }
      base[r] = 1;
      for (int k = 0; k < r; k++) {
        const int64_t row = (n * r + k) * (r + 1);
        double accd = 0;
        float accf = 0;
        for (int j = 0; j <= r; j++) {
          double tv = gpuc_get_f64(th, row + j);
          if (dbl) accd += tv * base[j];
          else accf += (float)tv * (float)base[j];
        }
        gpuc_set_f64(y, (n * pts + p) * r + k, dbl ? accd : accf);
      }
    }
  return 0;
}
