/* GPU lowerings of Resize / Upsample and the block rearrangements
 * DepthToSpace / SpaceToDepth. Semantics follow runtime/ref/ref_resize.c.
 *
 * Resize is separable: for every axis and output index the reference lists
 * the input indices ("taps") and weights that contribute. Those tables
 * depend only on shapes and attributes, so they are computed here on the
 * host with the reference's own code (in double) and baked into the module
 * as __device__ arrays, one set per resized axis; axes that map every
 * output index to the same input index with weight 1 get no table. The
 * kernel runs one thread per output element: nearest copies the element
 * bit-exactly, linear/cubic sum weight products over the taps (float
 * accumulation; double for f64 and integer inputs). Every mode the
 * reference supports is covered (all coordinate transformations,
 * nearest modes, cubic with exclude_outside, antialias,
 * tf_crop_and_resize with extrapolation). */
#include "lower_util.h"
#include "infer_nn.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LL(v) ((long long)(v))
/* taps over all axes baked into the source, at most */
#define MAX_TABLE_TAPS ((int64_t)1 << 20)


/* True when axis taps are the identity: one tap per output, index o,
 * weight 1, never outside. */
static bool taps_identity(const NnAxisTaps *t, int64_t in, int64_t out) {
  if (in != out) return false;
  for (int64_t o = 0; o < out; o++)
    if (t->first[o] != o || t->idx[o] != o || t->w[o] != 1 || t->outside[o]) return false;
  return t->first[out] == out;
}

/* K when every output index of the axis has K taps (first[o] = o*K), else 0 */
static int64_t taps_uniform(const NnAxisTaps *t, int64_t out) {
  if (out < 1) return 0;
  int64_t k = t->first[1] - t->first[0];
  if (k < 1 || k > 8) return 0;
  for (int64_t o = 0; o <= out; o++)
    if (t->first[o] != o * k) return 0;
  return k;
}

static bool any_outside(const NnAxisTaps *t, int64_t out) {
  for (int64_t o = 0; o < out; o++) if (t->outside[o]) return true;
  return false;
}

static void emit_i64_table(StrBuf *b, const char *type, const char *name, const int64_t *v, int64_t n) {
  sb_printf(b, "__device__ const %s %s[%lld] = {", type, name, LL(n ? n : 1));
  for (int64_t i = 0; i < n; i++) sb_printf(b, "%s%lld", !i ? "\n  " : i % 16 ? "," : ",\n  ", LL(v[i]));
  if (!n) sb_printf(b, "0");
  sb_printf(b, "};\n");
}

static int resize_lower(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  GpucDType dt = x->dt;
  NnResize p;
  int rc = nn_resize_params(LOWER_OPCTX(c), &p);
  if (rc < 0) return -1;
  if (rc > 0) return lower_unsupported(c, "scales/sizes are not constants");
  /* nn_resize_params keeps the default roi when the roi input's values are
   * unknown (import time); the kernel needs the real one baked in */
  if (p.coord == NN_CT_TF_CROP_AND_RESIZE && c->n->op == GPUC_OP_RESIZE && c->nin > 1 && c->in[1] &&
      gpuc_numel(c->in[1]) != 0 && !c->in[1]->data)
    return lower_unsupported(c, "roi is not a constant");
  int r = p.rank;
  int64_t total = gpuc_numel(y);
  if (total == 0) return 0;
  if (dt == GPUC_DT_UNDEF || (p.mode != NN_RS_NEAREST && dt == GPUC_DT_BOOL))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  for (int d = 0; d < r; d++) {
    if (x->dims[d] == 0) return lower_fail(c, "cannot resize an empty axis %d", d);
    if (p.out[d] != y->dims[d]) return lower_fail(c, "internal: resize output shape mismatch");
  }
  int64_t xs[GPUC_MAX_RANK];
  gpuc_strides(x, xs);
  NnAxisTaps taps[GPUC_MAX_RANK];
  memset(taps, 0, sizeof taps);
  bool ident[GPUC_MAX_RANK], outside[GPUC_MAX_RANK], any_out = false;
  int64_t ntab = 0;
  rc = 0;
  for (int d = 0; d < r && !rc; d++) {
    rc = nn_resize_taps(LOWER_OPCTX(c), &p, d, x->dims[d], MAX_TABLE_TAPS, &taps[d]);
    if (rc) break;
    ident[d] = taps_identity(&taps[d], x->dims[d], p.out[d]);
    outside[d] = any_outside(&taps[d], p.out[d]);
    any_out |= outside[d];
    if (!ident[d]) ntab += taps[d].first[p.out[d]] + p.out[d];
  }
  if (!rc && ntab > MAX_TABLE_TAPS)
    rc = lower_unsupported(c, "resize tables of %lld entries are too large for the GPU kernel", LL(ntab));
  if (rc) goto done;
  bool nearest = p.mode == NN_RS_NEAREST;
  /* math type: float for f32/f16/bf16, double for f64 and integers */
  const char *ct = dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16 ? "float" : "double";
  StrBuf *b = cg_src(c);
  const char *kn = c->kname;
  char name[128], tn[192];
  for (int d = 0; d < r; d++) {
    if (outside[d]) {
      sb_printf(b, "__device__ const unsigned char %s_x%d[%lld] = {", kn, d, LL(p.out[d]));
      for (int64_t o = 0; o < p.out[d]; o++) sb_printf(b, "%s%d", !o ? "\n  " : o % 32 ? "," : ",\n  ", taps[d].outside[o]);
      sb_printf(b, "};\n");
    }
    if (ident[d]) continue;
    int64_t nt = taps[d].first[p.out[d]];
    snprintf(tn, sizeof tn, "%s_i%d", kn, d);
    emit_i64_table(b, "int", tn, taps[d].idx, nt);
    if (nearest) continue;
    snprintf(tn, sizeof tn, "%s_f%d", kn, d);
    emit_i64_table(b, "int", tn, taps[d].first, p.out[d] + 1);
    sb_printf(b, "__device__ const %s %s_w%d[%lld] = {", ct, kn, d, LL(nt ? nt : 1));
    for (int64_t k = 0; k < nt; k++) sb_printf(b, "%s%.17g", !k ? "\n  " : k % 8 ? "," : ",\n  ", taps[d].w[k]);
    if (!nt) sb_printf(b, "0");
    sb_printf(b, "};\n");
  }
  /* index math in 32 bits where every offset fits (a 64-bit division by
   * a constant is several times the instructions: the x8 bilinear
   * upsampling of a segmentation head's [32,21,40,40] ran at 0.29 TB/s
   * with it), and a tap loop of a constant count where every output index
   * has the same number of taps (linear 2, cubic 4): unrolled, its table
   * slots o*K + k */
  bool narrow = total <= INT32_MAX && gpuc_numel(x) <= INT32_MAX;
  const char *it = narrow ? "unsigned" : "i64", *sfx = narrow ? "u" : "LL";
  int64_t uniform[GPUC_MAX_RANK];
  for (int d = 0; d < r; d++) uniform[d] = ident[d] || nearest ? 0 : taps_uniform(&taps[d], p.out[d]);
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    %s r = (%s)i;\n",
            name, cg_ctype(dt), cg_ctype(y->dt), LL(total), it, it);
  for (int d = r - 1; d > 0; d--)
    sb_printf(b, "    %s o%d = r %% %lld%s; r /= %lld%s;\n", it, d, LL(p.out[d]), sfx, LL(p.out[d]), sfx);
  sb_printf(b, "    %s o0 = r;\n", it);
  if (any_out) {
    char lit[64];
    sb_printf(b, "    if (0");
    for (int d = 0; d < r; d++) if (outside[d]) sb_printf(b, " || %s_x%d[o%d]", kn, d, d);
    sb_printf(b, ") {\n      ");
    cg_float_lit(lit, sizeof lit, p.extrapolation, "double");
    if (gpuc_dtype_is_int(dt)) sb_printf(b, "y[i] = (%s)(long long)%s;\n", cg_ctype(dt), lit);
    else cg_store(b, y->dt, "y", "i", "double", lit);
    sb_printf(b, "      continue;\n    }\n");
  }
  if (nearest) {
    sb_printf(b, "    %s off = 0", it);
    for (int d = 0; d < r; d++) {
      if (ident[d]) sb_printf(b, " + o%d * %lld%s", d, LL(xs[d]), sfx);
      else sb_printf(b, " + (%s)%s_i%d[o%d] * %lld%s", it, kn, d, d, LL(xs[d]), sfx);
    }
    sb_printf(b, ";\n    y[i] = x[off];\n  }\n}\n");
  } else {
    /* one nesting level per axis: a<d>/w<d> are the offset and weight
     * product so far; identity axes add a single term */
    sb_printf(b, "    %s acc = 0;\n", ct);
    char pa[16] = "0", pw[48];
    snprintf(pw, sizeof pw, "(%s)1", ct);
    for (int d = 0; d < r; d++) {
      int ind = 4 + 2 * d;
      if (ident[d]) {
        sb_printf(b, "%*s{ %s a%d = %s + o%d * %lld%s; %s w%d = %s;\n", ind, "", it, d, pa, d, LL(xs[d]), sfx, ct, d,
                  pw);
      } else {
        if (uniform[d])
          sb_printf(b, "%*s#pragma unroll\n%*sfor (int j%d = 0; j%d < %lld; j%d++) { const %s k%d = o%d * %lld%s + j%d;\n",
                    ind, "", ind, "", d, d, LL(uniform[d]), d, it, d, d, LL(uniform[d]), sfx, d);
        else
          sb_printf(b, "%*sfor (int k%d = %s_f%d[o%d]; k%d < %s_f%d[o%d + 1]; k%d++) {\n", ind, "", d, kn, d, d, d,
                    kn, d, d, d);
        sb_printf(b, "%*s  %s a%d = %s + (%s)%s_i%d[k%d] * %lld%s; %s w%d = %s * %s_w%d[k%d];\n", ind, "", it, d,
                  pa, it, kn, d, d, LL(xs[d]), sfx, ct, d, pw, kn, d, d);
      }
      snprintf(pa, sizeof pa, "a%d", d);
      snprintf(pw, sizeof pw, "w%d", d);
    }
    sb_printf(b, "%*sacc += %s * ", 4 + 2 * r, "", pw);
    cg_load(b, ct, dt, "x", pa);
    sb_printf(b, ";\n");
    for (int d = r - 1; d >= 0; d--) sb_printf(b, "%*s}\n", 4 + 2 * d, "");
    sb_printf(b, "    ");
    if (gpuc_dtype_is_int(dt)) sb_printf(b, "y[i] = (%s)(long long)acc;\n", cg_ctype(dt));
    else cg_store(b, y->dt, "y", "i", ct, "acc");
    sb_printf(b, "  }\n}\n");
  }
  {
    uint32_t args[2] = {c->tin[0], c->tout[0]};
    rc = cg_launch_items(c, name, (uint64_t)total, 2, args);
  }
done:
  for (int d = 0; d < r; d++) nn_free_taps(&taps[d]);
  return rc;
}

int lower_Resize(LowerCtx *c) { return resize_lower(c); }
int lower_Upsample(LowerCtx *c) { return resize_lower(c); }

/* ---- DepthToSpace / SpaceToDepth ------------------------------------------ */

/* Deep side [N, C*b*b, H, W], spatial side [N, C, H*b, W*b]; the deep
 * channel of (c, bh, bw) is (bh*b + bw)*C + c (DCR) or c*b*b + bh*b + bw
 * (CRD). One thread per output element, copying the element. */
static int block_move(LowerCtx *c, bool to_space, bool crd) {
  const Tensor *x = c->in[0], *y = c->out[0];
  if (x->rank != 4) return lower_fail(c, "X must be 4-D");
  const Tensor *deep = to_space ? x : y, *sp = to_space ? y : x;
  int64_t bs = gpuc_attr_i(c->n, "blocksize", 1);
  int64_t C = sp->dims[1], H = deep->dims[2], W = deep->dims[3];
  int64_t total = gpuc_numel(y);
  if (total == 0) return 0;
  if (x->dt == GPUC_DT_UNDEF) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(x->dt));
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  const char *t = cg_ctype(x->dt);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    i64 r = i;\n", name, t, t, LL(total));
  if (to_space) { /* output spatial [N, C, H*b, W*b] */
    sb_printf(b, "    i64 ww = r %% %lldLL; r /= %lldLL;\n"
                 "    i64 hh = r %% %lldLL; r /= %lldLL;\n"
                 "    i64 ch = r %% %lldLL, n = r / %lldLL;\n"
                 "    i64 h = hh / %lldLL, bh = hh %% %lldLL, w = ww / %lldLL, bw = ww %% %lldLL;\n",
              LL(W * bs), LL(W * bs), LL(H * bs), LL(H * bs), LL(C), LL(C), LL(bs), LL(bs), LL(bs), LL(bs));
    if (crd) sb_printf(b, "    i64 dc = ch * %lldLL + bh * %lldLL + bw;\n", LL(bs * bs), LL(bs));
    else sb_printf(b, "    i64 dc = (bh * %lldLL + bw) * %lldLL + ch;\n", LL(bs), LL(C));
    sb_printf(b, "    y[i] = x[((n * %lldLL + dc) * %lldLL + h) * %lldLL + w];\n", LL(C * bs * bs), LL(H), LL(W));
  } else { /* output deep [N, C*b*b, H, W], DCR */
    sb_printf(b, "    i64 w = r %% %lldLL; r /= %lldLL;\n"
                 "    i64 h = r %% %lldLL; r /= %lldLL;\n"
                 "    i64 dc = r %% %lldLL, n = r / %lldLL;\n"
                 "    i64 ch = dc %% %lldLL, q = dc / %lldLL, bh = q / %lldLL, bw = q %% %lldLL;\n"
                 "    y[i] = x[((n * %lldLL + ch) * %lldLL + h * %lldLL + bh) * %lldLL + w * %lldLL + bw];\n",
              LL(W), LL(W), LL(H), LL(H), LL(C * bs * bs), LL(C * bs * bs), LL(C), LL(C), LL(bs), LL(bs),
              LL(C), LL(H * bs), LL(bs), LL(W * bs), LL(bs));
  }
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 2, args);
}

int lower_DepthToSpace(LowerCtx *c) {
  return block_move(c, true, !strcmp(gpuc_attr_s(c->n, "mode", "DCR"), "CRD"));
}
int lower_SpaceToDepth(LowerCtx *c) { return block_move(c, false, false); }
