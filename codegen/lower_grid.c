/* GPU lowerings of GridSample and AffineGrid: one thread per output
 * element. The per-axis arithmetic (source coordinate, padding, taps and
 * weights) is ir/grid_sample.h's text, the functions the reference
 * (runtime/ref/ref_grid.c) runs on the host, with the mode, padding and
 * sizes baked in as constants so NVRTC folds the branches away.
 *
 * GridSample: thread (n, c, o) reads grid[n, o, :] (r coordinates), works
 * out each axis' 1, 2 or 4 taps, and sums prod(weights) * X over the tap
 * grid in the reference's order (float math for f32/f16/bf16 via ldf/stf,
 * double for f64). Nearest copies the element. The grid is read in its own
 * dtype; --fp16 keeps it fp32 (passes/fp16.c), since half coordinates are
 * off by up to (size / 2) * 2^-11 elements.
 * AffineGrid: thread (n, position, k) forms theta[n, k, :] . (x, y, [z,] 1). */
#include "lower_util.h"
#include "grid_sample.h"
#include <stdio.h>

#define LL(v) ((long long)(v))

int lower_GridSample(LowerCtx *c) {
  GridSampleGeom g;
  if (gpuc_grid_sample_geom(LOWER_OPCTX(c), &g)) return -1;
  const Tensor *x = c->in[0], *grid = c->in[1], *y = c->out[0];
  int64_t total = gpuc_numel(y);
  if (total == 0) return 0;
  int r = g.r;
  int64_t osp = 1, xsp = 1, xs[GPUC_GS_MAX_SPATIAL];
  for (int d = 0; d < r; d++) osp *= g.out[d], xsp *= g.in[d];
  for (int d = r - 1; d >= 0; d--) xs[d] = d == r - 1 ? 1 : xs[d + 1] * g.in[d + 1];
  bool dbl = x->dt == GPUC_DT_F64, nearest = g.mode == GPUC_GS_NEAREST;
  const char *T = dbl ? "double" : "float", *P = dbl ? "gpuc_gsd" : "gpuc_gsf";
  StrBuf *b = cg_src(c);
  sb_printf(b, "%s", dbl ? GPUC_GRID_SAMPLE_SRC_D : GPUC_GRID_SAMPLE_SRC_F);
  char name[128], gi[96];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b,
            "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ g, %s* __restrict__ y) {\n"
            "  GRID_STRIDE(i, %lldLL) {\n"
            "    i64 r = i;\n"
            "    i64 o = r %% %lldLL; r /= %lldLL;\n" /* y [N, C, O1..Or]: o the flat output point */
            "    i64 ch = r %% %lldLL, n = r / %lldLL;\n"
            "    i64 gb = (n * %lldLL + o) * %d;\n",
            name, cg_ctype(x->dt), cg_ctype(grid->dt), cg_ctype(y->dt), LL(total), LL(osp), LL(osp), LL(g.C),
            LL(g.C), LL(osp), r);
  /* axis d's coordinate is grid component r - 1 - d */
  for (int d = 0; d < r; d++) {
    snprintf(gi, sizeof gi, "gb + %d", r - 1 - d);
    /* nearest has one tap per axis: its count is not read */
    sb_printf(b, "    long long i%d[4]; %s w%d[4];\n    ", d, T, d);
    if (!nearest) sb_printf(b, "int k%d = ", d);
    sb_printf(b, "%s_axis(%s_unnorm(", P, P);
    cg_load(b, T, grid->dt, "g", gi);
    sb_printf(b, ", %lldLL, %d), %lldLL, %d, %d, %d, i%d, w%d);\n", LL(g.in[d]), g.align, LL(g.in[d]), g.align,
              g.mode, g.pad, d, d);
  }
  sb_printf(b, "    i64 xb = (n * %lldLL + ch) * %lldLL;\n", LL(g.C), LL(xsp));
  if (nearest) { /* one tap per axis: copy the element, or store a zero */
    sb_printf(b, "    if (i0[0] >= 0");
    for (int d = 1; d < r; d++) sb_printf(b, " && i%d[0] >= 0", d);
    sb_printf(b, ") y[i] = x[xb");
    for (int d = 0; d < r; d++) sb_printf(b, " + i%d[0] * %lldLL", d, LL(xs[d]));
    sb_printf(b, "];\n    else ");
    cg_store(b, y->dt, "y", "i", T, "0");
  } else {
    sb_printf(b, "    %s acc = 0;\n", T);
    for (int d = 0; d < r; d++)
      sb_printf(b, "%*sfor (int a%d = 0; a%d < k%d; a%d++) {\n%*s  if (i%d[a%d] < 0) continue;\n", 4 + 2 * d, "", d,
                d, d, d, 4 + 2 * d, "", d, d);
    char off[256], wp[160];
    int lo = snprintf(off, sizeof off, "xb"), lw = snprintf(wp, sizeof wp, "w0[a0]");
    for (int d = 0; d < r; d++) lo += snprintf(off + lo, sizeof off - (size_t)lo, " + i%d[a%d] * %lldLL", d, d, LL(xs[d]));
    for (int d = 1; d < r; d++) lw += snprintf(wp + lw, sizeof wp - (size_t)lw, " * w%d[a%d]", d, d);
    sb_printf(b, "%*sacc += %s * ", 4 + 2 * r, "", wp);
    cg_load(b, T, x->dt, "x", off);
    sb_printf(b, ";\n");
    for (int d = r - 1; d >= 0; d--) sb_printf(b, "%*s}\n", 4 + 2 * d, "");
    sb_printf(b, "    ");
    cg_store(b, y->dt, "y", "i", T, "acc");
  }
  sb_printf(b, "  }\n}\n");
  uint32_t args[3] = {c->tin[0], c->tin[1], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 3, args);
}

int lower_AffineGrid(LowerCtx *c) {
  AffineGridGeom g;
  if (gpuc_affine_grid_geom(LOWER_OPCTX(c), &g)) return -1;
  const Tensor *th = c->in[0], *y = c->out[0];
  int r = g.r;
  for (int d = 0; d < r; d++)
    if (g.sp[d] < 0) return lower_unsupported(c, "size is not a constant");
  int64_t total = gpuc_numel(y);
  if (total == 0) return 0;
  bool dbl = th->dt == GPUC_DT_F64;
  const char *T = dbl ? "double" : "float", *P = dbl ? "gpuc_gsd" : "gpuc_gsf";
  int64_t pts = total / (g.N * r);
  StrBuf *b = cg_src(c);
  sb_printf(b, "%s", dbl ? GPUC_GRID_SAMPLE_SRC_D : GPUC_GRID_SAMPLE_SRC_F);
  char name[128], ti[64];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  /* y [N, (D,) H, W, r]: q the flat position, k the component */
  sb_printf(b,
            "extern \"C\" __global__ void %s(const %s* __restrict__ th, %s* __restrict__ y) {\n"
            "  GRID_STRIDE(i, %lldLL) {\n"
            "    i64 q = i / %d;\n"
            "    int k = (int)(i %% %d);\n"
            "    i64 n = q / %lldLL, p = q %% %lldLL;\n",
            name, cg_ctype(th->dt), cg_ctype(y->dt), LL(total), r, r, LL(pts), LL(pts));
  /* base coordinate j (x, y, z) is along spatial axis r - 1 - j */
  for (int j = 0; j < r; j++) {
    int d = r - 1 - j;
    sb_printf(b, "    %s b%d = (%s)%s_base(p %% %lldLL, %lldLL, %d); p /= %lldLL;\n", T, j, T, P, LL(g.sp[d]),
              LL(g.sp[d]), g.align, LL(g.sp[d]));
  }
  sb_printf(b, "    i64 tb = (n * %d + k) * %d;\n    %s acc = 0;\n", r, r + 1, T);
  for (int j = 0; j <= r; j++) {
    snprintf(ti, sizeof ti, "tb + %d", j);
    sb_printf(b, "    acc += ");
    cg_load(b, T, th->dt, "th", ti);
    if (j < r) sb_printf(b, " * b%d;\n", j);
    else sb_printf(b, ";\n");
  }
  sb_printf(b, "    ");
  cg_store(b, y->dt, "y", "i", T, "acc");
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 2, args);
}
