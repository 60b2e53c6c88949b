/* GPU lowerings of ReverseSequence, MaxUnpool, Col2Im and CenterCropPad
 * (semantics: runtime/ref/ref_rearrange.c, geometry: ir/rearrange.h).
 * One thread per output element (MaxUnpool: a zeroing kernel, then one
 * thread per input element scattering), shapes baked into the source.
 * Elements move as bit patterns (cg_bits_type), except Col2Im, which sums
 * in float (double for f64) and rounds once on store.
 *
 * Runtime data that would index out of range (a sequence length past the
 * time axis, an unpool index past the unpooled shape) is reported through
 * the device error record (runtime/device_fault.h) with the reference's
 * message, and never read or written out of bounds: that element is
 * copied unreversed, or skipped. Constant sequence_lens / I are checked
 * here, at compile time, with that message. */
#include "lower_util.h"
#include "rearrange.h"
#include <stdio.h>
#include <string.h>

typedef long long ll;

/* ---- ReverseSequence ------------------------------------------------------- */

/* X viewed [A0, A1, inner] (axes 0 and 1 are batch and time either way):
 * y[a0, a1, j] = x[.., src, .., j] with src = len - 1 - t for t < len. */
int lower_ReverseSequence(LowerCtx *c) {
  const Tensor *x = c->in[0], *len = c->in[1], *y = c->out[0];
  int ba, ta;
  if (gpuc_revseq_axes(LOWER_OPCTX(c), &ba, &ta)) return -1;
  int64_t A1 = x->dims[1], B = x->dims[ba], T = x->dims[ta], n = gpuc_numel(y);
  int64_t inner = gpuc_shape_numel(x->rank - 2, x->dims + 2);
  if (gpuc_numel(len) != B) return lower_fail(c, "sequence_lens has %lld values for %lld batch entries", (ll)gpuc_numel(len), (ll)B);
  long step = -1;
  if (len->data) {
    for (int64_t b = 0; b < B; b++) {
      int64_t L = gpuc_get_i64(len, b);
      if (L < 0 || L > T)
        return lower_fail(c, "sequence length %lld (element %lld of sequence_lens) is outside [0, %lld]", (ll)L, (ll)b, (ll)T);
    }
  } else {
    step = (long)cg_fault_step(c);
  }
  if (n == 0) return 0;
  const char *t = cg_bits_type(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const i64* __restrict__ len, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 j = i %% %lldLL, r = i / %lldLL, a1 = r %% %lldLL, a0 = r / %lldLL;\n"
               "    i64 b = %s, t = %s, L = len[b], src = t;\n",
            name, t, t, (ll)n, (ll)inner, (ll)inner, (ll)A1, (ll)A1, ba == 0 ? "a0" : "a1", ta == 0 ? "a0" : "a1");
  if (step >= 0)
    sb_printf(b, "    if (L < 0 || L > %lldLL) { if (t == 0 && j == 0) gpuc_fault_report(%ldu, %d, L, b, %lldLL, -1); L = 0; }\n",
              (ll)T, step, GPUC_FAULT_SEQ_LEN, (ll)T);
  sb_printf(b, "    if (t < L) src = L - 1 - t;\n"
               "    y[i] = x[((%s) * %lldLL + (%s)) * %lldLL + j];\n  }\n}\n",
            ta == 0 ? "src" : "a0", (ll)A1, ta == 1 ? "src" : "a1", (ll)inner);
  uint32_t args[3] = {c->tin[0], c->tin[1], c->tout[0]};
  return cg_launch(c, name, (uint64_t)n, 256, 0, 3, args);
}

/* ---- MaxUnpool ------------------------------------------------------------- */

/* Y = 0; then thread i writes x[i] at I[i]'s coordinates in the unpooled
 * shape id (Y's strides). Duplicate indices: which write lands is
 * unspecified (the reference applies them in order). */
int lower_MaxUnpool(LowerCtx *c) {
  const Tensor *x = c->in[0], *ind = c->in[1], *y = c->out[0];
  int64_t yd[GPUC_MAX_RANK], id[GPUC_MAX_RANK], ys[GPUC_MAX_RANK];
  if (gpuc_maxunpool_plan(LOWER_OPCTX(c), yd, id)) return -1;
  int r = x->rank;
  int64_t n = gpuc_numel(x), ny = gpuc_numel(y), ni = gpuc_shape_numel(r, id);
  gpuc_strides(y, ys);
  long step = -1;
  if (ind->data) {
    for (int64_t i = 0; i < n; i++) {
      int64_t v = gpuc_get_i64(ind, i);
      if (v < 0 || v >= ni) return lower_fail(c, "index %lld (element %lld of I) is outside [0, %lld)", (ll)v, (ll)i, (ll)ni);
    }
  } else {
    step = (long)cg_fault_step(c);
  }
  if (ny == 0) return 0;
  const char *t = cg_bits_type(x->dt);
  StrBuf *b = cg_src(c);
  char zero[128];
  snprintf(zero, sizeof zero, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(%s* __restrict__ y) {\n  GRID_STRIDE(i, %lldLL) y[i] = (%s)0;\n}\n", zero, t,
            (ll)ny, t);
  uint32_t zargs[1] = {c->tout[0]};
  if (cg_launch(c, zero, (uint64_t)ny, 256, 0, 1, zargs)) return -1;
  if (n == 0) return 0;
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const i64* __restrict__ ind, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 v = ind[i], off = 0;\n",
            name, t, t, (ll)n);
  sb_printf(b, "    if (v < 0 || v >= %lldLL) {", (ll)ni);
  if (step >= 0) sb_printf(b, " gpuc_fault_report(%ldu, %d, v, i, %lldLL, -1);", step, GPUC_FAULT_FLAT_INDEX, (ll)ni);
  sb_printf(b, " continue; }\n");
  for (int d = r - 1; d >= 0 && ni > 0; d--) /* ni == 0: every index was out of range above */
    sb_printf(b, "    off += v %% %lldLL * %lldLL; v /= %lldLL;\n", (ll)id[d], (ll)ys[d], (ll)id[d]);
  sb_printf(b, "    y[off] = x[i];\n  }\n}\n");
  uint32_t args[3] = {c->tin[0], c->tin[1], c->tout[0]};
  return cg_launch(c, name, (uint64_t)n, 256, 0, 3, args);
}

/* ---- Col2Im ---------------------------------------------------------------- */

/* Thread per Y element [n, c, pos..]: sum of x[n, c * kprod + k, l] over
 * the block offsets k whose block l exists: per dim, pos_d + pad_b_d -
 * k_d * dil_d = l_d * stride_d with 0 <= l_d < blocks_d. One loop per dim,
 * nested, each skipping the offsets that miss, so a thread visits about
 * sum(block_d) offsets rather than prod(block_d). */
int lower_Col2Im(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  Col2ImPlan p;
  if (gpuc_col2im_plan(LOWER_OPCTX(c), &p)) return -1;
  int64_t ny = gpuc_numel(y), img = gpuc_shape_numel(p.nsp, p.image);
  if (ny == 0) return 0;
  bool f64 = x->dt == GPUC_DT_F64;
  const char *T = cg_ctype(x->dt), *acc = f64 ? "double" : "float";
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    const i64 nc = i / %lldLL;\n"
               "    i64 rem = i %% %lldLL;\n",
            name, T, T, (ll)ny, (ll)img, (ll)img);
  for (int d = p.nsp - 1; d >= 0; d--)
    sb_printf(b, "    const i64 p%d = rem %% %lldLL; rem /= %lldLL;\n", d, (ll)p.image[d], (ll)p.image[d]);
  sb_printf(b, "    %s s = 0;\n    const %s* xs = x + nc * %lldLL;\n    const i64 k_ = 0, l_ = 0;\n", acc, T,
            (ll)(p.kprod * p.L));
  /* k<d> / l<d>: the flat block offset and block index over dims 0..d */
  for (int d = 0; d < p.nsp; d++) {
    char kp[16] = "k_", lp[16] = "l_";
    if (d) { snprintf(kp, sizeof kp, "k%d", d - 1); snprintf(lp, sizeof lp, "l%d", d - 1); }
    int ind = 4 + 2 * d;
    sb_printf(b, "%*sfor (i64 kd%d = 0; kd%d < %lldLL; kd%d++) {\n", ind, "", d, d, (ll)p.block[d], d);
    sb_printf(b, "%*s  const i64 t%d = p%d + %lldLL - kd%d * %lldLL;\n", ind, "", d, d, (ll)p.pad_b[d], d, (ll)p.dil[d]);
    sb_printf(b, "%*s  if (t%d < 0 || t%d %% %lldLL != 0 || t%d / %lldLL >= %lldLL) continue;\n", ind, "", d, d,
              (ll)p.stride[d], d, (ll)p.stride[d], (ll)p.blocks[d]);
    sb_printf(b, "%*s  const i64 k%d = %s * %lldLL + kd%d, l%d = %s * %lldLL + t%d / %lldLL;\n", ind, "", d, kp,
              (ll)p.block[d], d, d, lp, (ll)p.blocks[d], d, (ll)p.stride[d]);
  }
  sb_printf(b, "%*s  s += %s(xs[k%d * %lldLL + l%d]);\n", 4 + 2 * (p.nsp - 1), "", f64 ? "(double)" : "ldf",
            p.nsp - 1, (ll)p.L, p.nsp - 1);
  for (int d = p.nsp - 1; d >= 0; d--) sb_printf(b, "%*s}\n", 4 + 2 * d, "");
  sb_printf(b, "    (void)k_; (void)l_;\n");
  if (f64) sb_printf(b, "    y[i] = s;\n  }\n}\n");
  else sb_printf(b, "    y[i] = stf<%s>(s);\n  }\n}\n", T);
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch(c, name, (uint64_t)ny, 256, 0, 2, args);
}

/* ---- CenterCropPad --------------------------------------------------------- */

/* y[i] = x[coords(i) + shift] inside X, else 0 */
int lower_CenterCropPad(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int64_t yd[GPUC_MAX_RANK], shift[GPUC_MAX_RANK], xs[GPUC_MAX_RANK];
  if (gpuc_ccp_plan(LOWER_OPCTX(c), yd, shift)) return -1;
  int64_t ny = gpuc_numel(y);
  if (ny == 0) return 0;
  gpuc_strides(x, xs);
  const char *t = cg_bits_type(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n    i64 rem = i, off = 0, s;\n    bool in = true;\n",
            name, t, t, (ll)ny);
  for (int d = x->rank - 1; d >= 0; d--) {
    sb_printf(b, "    s = rem %% %lldLL + %lldLL; rem /= %lldLL;\n", (ll)yd[d], (ll)shift[d], (ll)yd[d]);
    if (shift[d] != 0 || yd[d] != x->dims[d]) sb_printf(b, "    in = in && s >= 0 && s < %lldLL;\n", (ll)x->dims[d]);
    sb_printf(b, "    off += s * %lldLL;\n", (ll)xs[d]);
  }
  sb_printf(b, "    y[i] = in ? x[off] : (%s)0;\n  }\n}\n", t);
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch(c, name, (uint64_t)ny, 256, 0, 2, args);
}
