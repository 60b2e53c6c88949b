/* Shape inference of GridSample (opset 16: 4-D X, modes bilinear/nearest/
 * bicubic; opset 20: N-D, modes linear/nearest/cubic; gpuc reads both
 * spellings and 1 to 3 spatial axes in every opset) and AffineGrid
 * (opset 20). Semantics and shapes: ir/grid_sample.h. Every inconsistency
 * the known shapes show is an error naming the node; dtypes gpuc does not
 * sample (integer X) are unsupported, not errors. */
#include "infer_util.h"
#include "grid_sample.h"
#include <string.h>

/* The node's attributes must be among `names` and of their kinds. */
static int check_attrs(OpCtx *c, const char *const *names, const GpucAttrKind *kinds, int count) {
  for (int k = 0; k < c->n->nattr; k++) {
    const Attr *a = &c->n->attrs[k];
    int j = 0;
    while (j < count && strcmp(a->name, names[j])) j++;
    if (j == count) return gpuc_op_fail(c, "unknown attribute '%s'", a->name);
    if (a->kind != kinds[j])
      return gpuc_op_fail(c, "attribute %s must be %s", a->name, kinds[j] == GPUC_ATTR_INT ? "an int" : "a string");
  }
  return 0;
}

static int read_align(OpCtx *c, int *align) {
  int64_t a = gpuc_attr_i(c->n, "align_corners", 0);
  if (a != 0 && a != 1) return gpuc_op_fail(c, "attribute align_corners is %lld, not 0 or 1", (long long)a);
  *align = (int)a;
  return 0;
}

/* mode and padding_mode. Opset 20 renamed bilinear/bicubic to linear/cubic;
 * both spellings are read in every opset (onnxruntime does too), so a model
 * converted between opsets without renaming still runs. */
static int read_modes(OpCtx *c, GridSampleGeom *g) {
  bool v20 = c->g->opset >= 20;
  const char *m = gpuc_attr_s(c->n, "mode", v20 ? "linear" : "bilinear");
  if (!strcmp(m, "nearest")) g->mode = GPUC_GS_NEAREST;
  else if (!strcmp(m, "linear") || !strcmp(m, "bilinear")) g->mode = GPUC_GS_LINEAR;
  else if (!strcmp(m, "cubic") || !strcmp(m, "bicubic")) g->mode = GPUC_GS_CUBIC;
  else return gpuc_op_fail(c, "attribute mode is '%s'; GridSample-%d has %s", m, v20 ? 20 : 16,
                           v20 ? "linear, nearest and cubic" : "bilinear, nearest and bicubic");
  const char *p = gpuc_attr_s(c->n, "padding_mode", "zeros");
  if (!strcmp(p, "zeros")) g->pad = GPUC_GS_ZEROS;
  else if (!strcmp(p, "border")) g->pad = GPUC_GS_BORDER;
  else if (!strcmp(p, "reflection")) g->pad = GPUC_GS_REFLECTION;
  else return gpuc_op_fail(c, "attribute padding_mode is '%s', not zeros, border or reflection", p);
  return read_align(c, &g->align);
}

int gpuc_grid_sample_geom(OpCtx *c, GridSampleGeom *g) {
  static const char *const names[] = {"mode", "padding_mode", "align_corners"};
  static const GpucAttrKind kinds[] = {GPUC_ATTR_STRING, GPUC_ATTR_STRING, GPUC_ATTR_INT};
  if (c->g->opset < 16)
    return gpuc_op_fail(c, "GridSample is an opset 16 op; the model imports opset %lld", (long long)c->g->opset);
  memset(g, 0, sizeof *g);
  if (check_attrs(c, names, kinds, 3) || read_modes(c, g)) return -1;
  const Tensor *x = c->in[0], *grid = c->in[1];
  int r = x->rank - 2;
  /* GridSample-16 defines 4-D X only; 20 extends the same arithmetic to
   * N-D. PyTorch's dynamo exporter writes 5-D GridSample into opset-18
   * models, so every opset reads N-D. */
  if (r < 1) return gpuc_op_fail(c, "X has rank %d; it must be [N, C, D1, ...] with a spatial axis", x->rank);
  if (r > GPUC_GS_MAX_SPATIAL)
    return gpuc_op_unsupported(c, "X has %d spatial axes; gpuc samples 1 to %d", r, GPUC_GS_MAX_SPATIAL);
  if (grid->rank != x->rank)
    return gpuc_op_fail(c, "grid has rank %d; for X of rank %d it must be [N, O1..O%d, %d]", grid->rank, x->rank,
                        r, r);
  if (grid->dims[r + 1] >= 0 && grid->dims[r + 1] != r)
    return gpuc_op_fail(c, "grid's last dim is %lld; it must be %d, X's spatial axes", (long long)grid->dims[r + 1], r);
  if (x->dims[0] >= 0 && grid->dims[0] >= 0 && x->dims[0] != grid->dims[0])
    return gpuc_op_fail(c, "X has batch %lld, grid %lld", (long long)x->dims[0], (long long)grid->dims[0]);
  static const GpucDType xt[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};
  if (!gpuc_dtype_is_float(grid->dt))
    return gpuc_op_fail(c, "grid is %s; it must be a float tensor", gpuc_dtype_name(grid->dt));
  if (gpuc_check_dtype(c, 0, xt) || gpuc_check_dtype(c, 1, xt)) return -1;
  g->r = r;
  g->N = x->dims[0] >= 0 ? x->dims[0] : grid->dims[0];
  g->C = x->dims[1];
  for (int d = 0; d < r; d++) g->in[d] = x->dims[2 + d], g->out[d] = grid->dims[1 + d];
  return 0;
}

int infer_GridSample(OpCtx *c) {
  GridSampleGeom g;
  if (gpuc_grid_sample_geom(c, &g)) return -1;
  /* sampling an empty axis reads nothing: only an empty output allows it */
  bool empty_out = g.N == 0 || g.C == 0;
  for (int d = 0; d < g.r; d++) empty_out |= g.out[d] == 0;
  for (int d = 0; d < g.r && !empty_out; d++)
    if (g.in[d] == 0) return gpuc_op_fail(c, "X's spatial dim %d is 0: there is nothing to sample", 2 + d);
  int64_t dims[GPUC_MAX_RANK] = {g.N, g.C};
  for (int d = 0; d < g.r; d++) dims[2 + d] = g.out[d];
  gpuc_set_shape(c->out[0], c->in[0]->dt, g.r + 2, dims);
  return 0;
}

int gpuc_affine_grid_geom(OpCtx *c, AffineGridGeom *g) {
  static const char *const names[] = {"align_corners"};
  static const GpucAttrKind kinds[] = {GPUC_ATTR_INT};
  if (c->g->opset < 20)
    return gpuc_op_fail(c, "AffineGrid is an opset 20 op; the model imports opset %lld", (long long)c->g->opset);
  memset(g, 0, sizeof *g);
  if (check_attrs(c, names, kinds, 1) || read_align(c, &g->align)) return -1;
  const Tensor *th = c->in[0], *sz = c->in[1];
  static const GpucDType ft[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};
  if (!gpuc_dtype_is_float(th->dt))
    return gpuc_op_fail(c, "theta is %s; it must be a float tensor", gpuc_dtype_name(th->dt));
  if (gpuc_check_dtype(c, 0, ft)) return -1;
  if (th->rank != 3)
    return gpuc_op_fail(c, "theta has rank %d; it must be [N, 2, 3] (2-D) or [N, 3, 4] (3-D)", th->rank);
  if (th->dims[1] >= 0 && th->dims[1] != 2 && th->dims[1] != 3)
    return gpuc_op_fail(c, "theta is [N, %lld, %lld]; it must be [N, 2, 3] or [N, 3, 4]", (long long)th->dims[1],
                        (long long)th->dims[2]);
  if (sz->dt != GPUC_DT_I64) return gpuc_op_fail(c, "size is %s; it must be int64", gpuc_dtype_name(sz->dt));
  if (sz->rank != 1) return gpuc_op_fail(c, "size has rank %d; it must be 1-D (N, C, [D,] H, W)", sz->rank);
  /* 2-D or 3-D: from theta's rows, else from size's length */
  int r = th->dims[1] >= 0 ? (int)th->dims[1] : sz->dims[0] >= 0 ? (int)(sz->dims[0] - 2) : -1;
  if (r != 2 && r != 3) {
    if (sz->dims[0] >= 0)
      return gpuc_op_fail(c, "size has %lld values; it must be 4 (N, C, H, W) or 5 (N, C, D, H, W)",
                          (long long)sz->dims[0]);
    return gpuc_op_unsupported(c, "neither theta's rows nor size's length is known: the grid's rank is not");
  }
  g->r = r;
  if (th->dims[2] >= 0 && th->dims[2] != r + 1)
    return gpuc_op_fail(c, "theta is [N, %d, %lld]; a %d-D grid needs [N, %d, %d]", r, (long long)th->dims[2], r, r,
                        r + 1);
  if (sz->dims[0] >= 0 && sz->dims[0] != r + 2)
    return gpuc_op_fail(c, "size has %lld values; theta [N, %d, %d] needs %d (N, C, %s)", (long long)sz->dims[0], r,
                        r + 1, r + 2, r == 2 ? "H, W" : "D, H, W");
  g->N = th->dims[0];
  for (int d = 0; d < r; d++) g->sp[d] = -1;
  if (sz->data) {
    int64_t v[5];
    for (int k = 0; k < r + 2; k++) v[k] = gpuc_get_i64(sz, k);
    for (int k = 0; k < r + 2; k++)
      if (v[k] < 0) return gpuc_op_fail(c, "size[%d] is %lld, a negative dim", k, (long long)v[k]);
    if (g->N >= 0 && v[0] != g->N)
      return gpuc_op_fail(c, "size[0] (batch) is %lld, theta's batch %lld", (long long)v[0], (long long)g->N);
    g->N = v[0];
    for (int d = 0; d < r; d++) g->sp[d] = v[2 + d];
  }
  return 0;
}

int infer_AffineGrid(OpCtx *c) {
  AffineGridGeom g;
  if (gpuc_affine_grid_geom(c, &g)) return -1;
  /* size unknown (not a constant): rank known, spatial dims not */
  int64_t dims[GPUC_MAX_RANK] = {g.N};
  for (int d = 0; d < g.r; d++) dims[1 + d] = g.sp[d];
  dims[1 + g.r] = g.r;
  gpuc_set_shape(c->out[0], c->in[0]->dt, g.r + 2, dims);
  return 0;
}
