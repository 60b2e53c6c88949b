/* Conv as a cuDNN call (NCHW), with the bias added by a generated kernel.
 * cuDNN pads symmetrically: asymmetric pads (SAME_* with even kernels,
 * explicit pads) go through a generated zero-pad kernel first. 1-D
 * convolutions run as 2-D with a unit width. FusedConv with a Relu is one
 * fused cuDNN call; without one (activation 0) it is the convolution, then
 * bias (+ residual) in a generated kernel, as for Conv; with neither (a
 * projection shortcut whose bias passes/fuse_conv.c moved) no kernel. FusedConv layout 1
 * is NHWC: X, Z, Y [N,H,W,C], W [K,R,S,C/g]; the spatial dims are 1..2.
 * The training gradients ConvGradInput / ConvGradWeight are cuDNN's
 * backward-data and backward-filter calls on the same descriptors
 * (PlanConv.mode). */
#include "lower_util.h"
#include "infer_nn.h"
#include "conv_act.h"
#include <stdio.h>
#include <string.h>

/* Begin/end pads per spatial dim as ONNX defines them. */
static int conv_pads(LowerCtx *c, int ns, const int64_t *in_sp, const int64_t *k, const int64_t *st,
                     const int64_t *dil, const int64_t *out_sp, int64_t *pb, int64_t *pe) {
  const char *ap = gpuc_attr_s(c->n, "auto_pad", "NOTSET");
  const int64_t *pads;
  int np = gpuc_attr_ints(c->n, "pads", &pads);
  for (int i = 0; i < ns; i++) {
    if (!strcmp(ap, "NOTSET")) {
      pb[i] = np == 2 * ns ? pads[i] : 0;
      pe[i] = np == 2 * ns ? pads[i + ns] : 0;
    } else if (!strcmp(ap, "VALID")) {
      pb[i] = pe[i] = 0;
    } else {
      int64_t total = (out_sp[i] - 1) * st[i] + (k[i] - 1) * dil[i] + 1 - in_sp[i];
      if (total < 0) total = 0;
      bool upper = !strcmp(ap, "SAME_UPPER");
      pb[i] = upper ? total / 2 : total - total / 2;
      pe[i] = total - pb[i];
    }
  }
  return 0;
}

/* Conv and FusedConv: fused = bias (+ residual z) (+ relu) in cuDNN's call */
static int lower_conv(LowerCtx *c, bool fused) {
  const Tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  const Tensor *bias = c->nin > 2 ? c->in[2] : NULL, *z = c->nin > 3 ? c->in[3] : NULL;
  int64_t act = fused ? gpuc_attr_i(c->n, "activation", 0) : 0;
  bool nhwc = fused && gpuc_attr_i(c->n, "layout", GPUC_LAYOUT_NCHW) == GPUC_LAYOUT_NHWC;
  int sp0 = nhwc ? 1 : 2;         /* first spatial dim of X, Y (and W) */
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16)
    return lower_unsupported(c, "Conv of %s on the GPU", gpuc_dtype_name(x->dt));
  int ns = x->rank - 2;
  if (ns < 1 || ns > 3) return lower_unsupported(c, "Conv with %d spatial dims on the GPU", ns);
  if (nhwc && ns != 2) return lower_fail(c, "an NHWC convolution must be 2-D");
  int64_t k[3], st[3], dil[3], pb[3], pe[3];
  const int64_t *v;
  int n;
  for (int i = 0; i < ns; i++) { k[i] = w->dims[sp0 + i]; st[i] = dil[i] = 1; }
  if ((n = gpuc_attr_ints(c->n, "strides", &v)) == ns) for (int i = 0; i < ns; i++) st[i] = v[i];
  if ((n = gpuc_attr_ints(c->n, "dilations", &v)) == ns) for (int i = 0; i < ns; i++) dil[i] = v[i];
  conv_pads(c, ns, x->dims + sp0, k, st, dil, y->dims + sp0, pb, pe);
  /* depthwise: a generated kernel (codegen/lower_dwconv.c) where it
   * applies, with the input activation too */
  int rc = nhwc ? cg_dwconv_nhwc(c, pb, st, dil) : 1;
  if (rc <= 0) return rc;
  /* grouped with few channels a group (codegen/lower_gconv.c): likewise */
  if (nhwc && (rc = cg_gconv_nhwc(c, pb, st, dil)) <= 0) return rc;
  /* elsewhere the input activation (ir/conv_act.h) is a kernel of its own
   * writing the activated X, which the convolution then reads */
  LowerCtx cx;
  uint32_t tin_x[4];
  if (fused && gpuc_attr_i(c->n, "in_activation", 0) != GPUC_FCONV_ACT_NONE) {
    char expr[256];
    if (cg_conv_act_expr(expr, sizeof expr, c->n, true, "v")) return lower_fail(c, "internal: in_activation");
    uint32_t xa = cg_scratch(c, x->dt, x->rank, x->dims);
    const Tensor *ins[1] = {x}, *outs[1] = {x};
    uint32_t tins[1] = {c->tin[0]}, touts[1] = {xa};
    LowerCtx e = *c;
    e.in = ins;
    e.tin = tins;
    e.nin = 1;
    e.out = outs;
    e.tout = touts;
    static const int which[1] = {0};
    if (cg_elementwise(&e, which, 1, "float", "const float v = x0;", expr)) return -1;
    c->nkernels_emitted = e.nkernels_emitted;
    cx = *c;
    for (int i = 0; i < c->nin && i < 4; i++) tin_x[i] = c->tin[i];
    tin_x[0] = xa;
    cx.tin = tin_x;
    c = &cx;
  }
  /* 1x1: a GEMM (codegen/lower_se.c) where it applies */
  if (nhwc && (rc = cg_conv1x1_nhwc_gemm(c, pb, pe, st, dil)) <= 0) return rc;
  uint32_t xin = c->tin[0];
  bool asym = false;
  for (int i = 0; i < ns; i++) if (pb[i] != pe[i] || pb[i] < 0) asym = true;
  PlanConv cv = {.x = xin, .w = c->tin[1], .b = UINT32_MAX, .y = c->tout[0], .z = UINT32_MAX,
                 .nspatial = ns == 3 ? 3 : 2, .groups = (uint32_t)gpuc_attr_i(c->n, "group", 1),
                 .dt = x->dt, .algo = -1, .workspace = 0,
                 .act = GPUC_CONV_ACT_PACK(0, nhwc ? GPUC_LAYOUT_NHWC : GPUC_LAYOUT_NCHW)};
  if (asym) { /* zero-pad into a scratch tensor, then convolve unpadded */
    Tensor pd = *x;
    pd.data = NULL;
    for (int i = 0; i < ns; i++) pd.dims[sp0 + i] = x->dims[sp0 + i] + pb[i] + pe[i];
    uint32_t padded = cg_scratch(c, x->dt, pd.rank, pd.dims);
    StrBuf *b = cg_src(c);
    const char *name = cg_kernel_name(c);
    const char *t = cg_ctype(x->dt);
    sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
                 "  GRID_STRIDE(i, %lldLL) {\n    i64 r = i, src = 0, ok = 1, sx = 1;\n",
              name, t, t, (long long)gpuc_numel(&pd));
    /* walk dims from last: coordinate in the padded tensor -> source */
    sb_printf(b, "    i64 c;\n");
    for (int d = pd.rank - 1; d >= 0; d--) {
      int64_t off = d >= sp0 && d < sp0 + ns ? pb[d - sp0] : 0;
      sb_printf(b, "    c = r %% %lldLL - %lldLL; r /= %lldLL; ok &= (c >= 0 && c < %lldLL); src += c * sx; sx *= %lldLL;\n",
                (long long)pd.dims[d], (long long)off, (long long)pd.dims[d], (long long)x->dims[d],
                (long long)x->dims[d]);
    }
    sb_printf(b, "    y[i] = ok ? x[src] : (%s)0;\n  }\n}\n", t);
    uint32_t args[2] = {c->tin[0], padded};
    if (cg_launch_items(c, name, (uint64_t)gpuc_numel(&pd), 2, args)) return -1;
    cv.x = padded;
    for (int i = 0; i < ns; i++) pb[i] = 0;
    /* the conv reads `padded`'s shape from its plan tensor */
  }
  for (int i = 0; i < ns; i++) {
    cv.pads[i] = (int32_t)pb[i];
    cv.strides[i] = (int32_t)st[i];
    cv.dilations[i] = (int32_t)dil[i];
  }
  if (ns == 1) { cv.pads[1] = 0; cv.strides[1] = 1; cv.dilations[1] = 1; }
  /* cuDNN's workspace needs are only known with a GPU: the runtime picks an
   * algorithm that fits the plan's workspace at load time */
  /* bf16: cuDNN's fused bias-activation call documents fp32, fp64, fp16
   * and int8 configurations, not bf16; the convolution runs alone on
   * tensor cores and bias (+ z) + Relu follow in one generated kernel */
  /* activations other than Relu (ir/conv_act.h) are not cuDNN's: they
   * follow in the generated kernel too */
  bool act_kernel = fused && (act > GPUC_FCONV_ACT_RELU || (act == GPUC_FCONV_ACT_RELU && x->dt == GPUC_DT_BF16));
  if (fused && act == GPUC_FCONV_ACT_RELU && !act_kernel) {
    cv.b = c->tin[2];
    cv.z = z ? c->tin[3] : UINT32_MAX;
    cv.act = GPUC_CONV_ACT_PACK(1, GPUC_CONV_LAYOUT(cv.act));
    if (cg_conv(c, &cv)) return -1;
    /* cuDNN reads each z element in the epilogue that writes the same y
     * element, so y may take a dying residual's bytes */
    if (z) cg_in_place(c, cv.z, cv.y);
    return 0;
  }
  if (cg_conv(c, &cv)) return -1;
  if (!bias && !z && !act_kernel) return 0;
  /* y += bias viewed as [C,1,..] (NHWC: [C], the last dim) (+ z) (then
   * the activation), in place, one broadcasting kernel */
  const Tensor *ins[3] = {y};
  uint32_t tins[3] = {c->tout[0]};
  int nins = 1;
  Tensor bv;
  if (bias) {
    bv = *bias;
    bv.rank = nhwc ? 1 : y->rank - 1;
    for (int i = 1; i < bv.rank; i++) bv.dims[i] = 1;
    ins[nins] = &bv;
    tins[nins++] = c->tin[2];
  }
  if (z) { ins[nins] = z; tins[nins++] = c->tin[3]; }
  LowerCtx e = *c;
  e.in = ins;
  e.tin = tins;
  e.nin = nins;
  static const int which[3] = {0, 1, 2};
  static const char *sum[3] = {"const float v = x0;", "const float v = x0 + x1;", "const float v = x0 + x1 + x2;"};
  GPUC_ASSERT(nins >= 1 && nins <= 3);
  char expr[256];
  if (cg_conv_act_expr(expr, sizeof expr, c->n, false, "v") || !act_kernel) snprintf(expr, sizeof expr, "v");
  rc = cg_elementwise(&e, which, nins, "float", sum[nins - 1], expr);
  c->nkernels_emitted = e.nkernels_emitted;
  return rc;
}

int lower_Conv(LowerCtx *c) { return lower_conv(c, false); }
int lower_FusedConv(LowerCtx *c) { return lower_conv(c, true); }

/* ---- ConvGradInput / ConvGradWeight ------------------------------------- */

/* Copy a [N, C, S..] tensor between its plain shape `small` and the shape
 * padded by pb/pe per spatial dim: pad = true writes the padded tensor
 * (zeros around), false crops it back (padded -> small). One thread per
 * element of the destination; negative pads work both ways (elements with
 * no source get 0). */
static int pad_or_crop(LowerCtx *c, bool pad, GpucDType dt, int rank, const int64_t *small,
                       const int64_t *pb, const int64_t *pe, uint32_t src, uint32_t dst) {
  int64_t big[GPUC_MAX_RANK], total = 1;
  for (int d = 0; d < rank; d++) big[d] = d >= 2 ? small[d] + pb[d - 2] + pe[d - 2] : small[d];
  const int64_t *dd = pad ? big : small, *sd = pad ? small : big;
  for (int d = 0; d < rank; d++) total *= dd[d];
  if (total == 0) return 0;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  const char *t = cg_ctype(dt);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    i64 r = i, src = 0, ok = 1, sx = 1, q;\n",
            name, t, t, (long long)total);
  /* destination coordinate -> source coordinate, last dim first */
  for (int d = rank - 1; d >= 0; d--) {
    int64_t off = d < 2 ? 0 : pad ? -pb[d - 2] : pb[d - 2];
    sb_printf(b, "    q = r %% %lldLL + %lldLL; r /= %lldLL; ok &= (q >= 0 && q < %lldLL); src += q * sx; sx *= %lldLL;\n",
              (long long)dd[d], (long long)off, (long long)dd[d], (long long)sd[d], (long long)sd[d]);
  }
  sb_printf(b, "    y[i] = ok ? x[src] : (%s)0;\n  }\n}\n", t);
  uint32_t args[2] = {src, dst};
  return cg_launch_items(c, name, (uint64_t)total, 2, args);
}

/* ConvGradInput(X, W, dY) -> dX: cuDNN backward data (mode 1); with
 * asymmetric pads into a padded scratch dX, then cropped.
 * ConvGradWeight(X, W, dY) -> dW: cuDNN backward filter (mode 2); with
 * asymmetric pads X is zero-padded first. The window is the one the
 * reference uses (nn_conv_grad_window), so pads agree by construction. */
static int lower_conv_grad(LowerCtx *c, bool filter) {
  const Tensor *x = c->in[0];
  NnWindow w;
  if (nn_conv_grad_window(LOWER_OPCTX(c), &w)) return -1;
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16)
    return lower_unsupported(c, "%s of %s on the GPU", gpuc_op_name(c->n), gpuc_dtype_name(x->dt));
  int ns = w.nsp;
  if (ns > 3) return lower_unsupported(c, "%s with %d spatial dims on the GPU", gpuc_op_name(c->n), ns);
  if (gpuc_numel(c->out[0]) == 0) return 0;
  bool asym = false;
  for (int i = 0; i < ns; i++) if (w.pad_b[i] != w.pad_e[i] || w.pad_b[i] < 0) asym = true;
  PlanConv cv = {.x = c->tin[0], .w = c->tin[1], .b = UINT32_MAX, .y = c->tin[2], .z = UINT32_MAX,
                 .nspatial = ns == 3 ? 3 : 2, .groups = (uint32_t)w.group, .dt = x->dt, .algo = -1,
                 .mode = filter ? PLAN_CONV_BWD_FILTER : PLAN_CONV_BWD_DATA};
  if (filter) cv.w = c->tout[0];
  else cv.x = c->tout[0];
  uint32_t padded = UINT32_MAX;
  if (asym) { /* the padded X (or dX) as its own tensor; the conv is unpadded */
    int64_t pd[GPUC_MAX_RANK];
    for (int d = 0; d < x->rank; d++) pd[d] = d >= 2 ? x->dims[d] + w.pad_b[d - 2] + w.pad_e[d - 2] : x->dims[d];
    padded = cg_scratch(c, x->dt, x->rank, pd);
    if (filter && pad_or_crop(c, true, x->dt, x->rank, x->dims, w.pad_b, w.pad_e, c->tin[0], padded))
      return -1;
    cv.x = padded;
  }
  for (int i = 0; i < ns; i++) {
    cv.pads[i] = asym ? 0 : (int32_t)w.pad_b[i];
    cv.strides[i] = (int32_t)w.stride[i];
    cv.dilations[i] = (int32_t)w.dil[i];
  }
  if (ns == 1) { cv.pads[1] = 0; cv.strides[1] = 1; cv.dilations[1] = 1; }
  if (cg_conv(c, &cv)) return -1;
  if (asym && !filter)
    return pad_or_crop(c, false, x->dt, x->rank, x->dims, w.pad_b, w.pad_e, padded, c->tout[0]);
  return 0;
}

int lower_ConvGradInput(LowerCtx *c) { return lower_conv_grad(c, false); }
int lower_ConvGradWeight(LowerCtx *c) { return lower_conv_grad(c, true); }
