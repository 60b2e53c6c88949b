/* L2NormRows (internal, ir/ops.def; passes/fuse_l2norm.c makes it):
 * y = x / max(||x||_2, epsilon) * scale over each row of Y's last axis of
 * D, X read through the node's strided view (ir/l2norm.h; Swin V2's q and
 * k straight out of the QKV GEMM's output, no Transpose or Gather copy).
 *
 * L lanes a row (warp_rows_lanes: the power of two covering D's vectors,
 * 4 to 32), 32/L rows a warp, a vector of V elements a lane at a time: 16 bytes (8 half,
 * 4 float) where D, the view's offset and its row strides are multiples
 * of V and the last axis is contiguous, else one element. Pass 1 sums the
 * squares in f32 and reduces them across the L lanes by shuffles; pass 2
 * reads the row again (from L1/L2: the row was just read) and stores
 * x / n * scale, computed in f32 and rounded once. The loop runs over
 * warp-sized groups of rows, so every lane reaches every shuffle. */
#include "codegen.h"
#include "lower_util.h"
#include "lower_rows.h"
#include "l2norm.h"
#include <stdio.h>

typedef long long ll;

int lower_L2NormRows(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  const Tensor *s = c->nin > 1 ? c->in[1] : NULL;
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16)
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(x->dt));
  L2NormGeom r;
  if (gpuc_l2norm_geom(LOWER_OPCTX(c), &r)) return -1;
  if (r.rows == 0 || r.d == 0) return 0;
  int R = r.rank;
  int64_t last = r.xs[R - 1];
  int vec = (int)(16 / gpuc_dtype_size(x->dt));
  bool vok = last == 1 && r.d % vec == 0 && r.off % vec == 0;
  for (int k = 0; k + 1 < R; k++) vok = vok && r.xs[k] % vec == 0;
  if (!vok) vec = 1;
  int64_t chunks = r.d / vec;
  int L = warp_rows_lanes(r.d, vec); /* the lanes covering a row's vectors, as the warp-rows kernels take */
  int rpw = 32 / L;
  int64_t ss[GPUC_MAX_RANK] = {0}; /* Scale's element stride along Y's axis k */
  if (s) cg_bcast_strides(s->rank, s->dims, R, ss);
  const char *t = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s%s%s%s* __restrict__ y) {\n"
               "  const int lane = threadIdx.x & 31, sub = lane %% %d, seg = lane / %d;\n"
               "  for (i64 base = ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * %d; base < %lldLL;\n"
               "       base += (i64)gridDim.x * (blockDim.x >> 5) * %d) {\n"
               "    const i64 row = base + seg;\n"
               "    const bool ok = row < %lldLL;\n"
               "    i64 rest = row, xo = %lldLL, so = 0;\n",
            name, t, s ? "const " : "", s ? t : "", s ? "* __restrict__ s, " : "", t, L, L, rpw, (ll)r.rows, rpw,
            (ll)r.rows, (ll)r.off);
  for (int k = R - 2; k >= 0; k--)
    sb_printf(b, "    { const i64 q = rest %% %lldLL; rest /= %lldLL; xo += q * %lldLL; so += q * %lldLL; }\n",
              (ll)r.dims[k], (ll)r.dims[k], (ll)r.xs[k], (ll)ss[k]);
  /* the body that loads a lane's chunk cc of the row into v[0..vec) */
  char load[256];
  if (vec > 1)
    snprintf(load, sizeof load, "const Vec<%s, %d> w = *(const Vec<%s, %d>*)(x + xo + cc * %d); float v[%d];\n"
                                "#pragma unroll\n        for (int k = 0; k < %d; k++) v[k] = ldf(w.v[k]);\n",
             t, vec, t, vec, vec, vec, vec);
  else
    snprintf(load, sizeof load, "float v[1]; v[0] = ldf(x[xo + cc * %lldLL]);\n", (ll)last);
  sb_printf(b, "    float sq = 0.f;\n"
               "    if (ok)\n"
               "      for (i64 cc = sub; cc < %lldLL; cc += %d) {\n"
               "        %s"
               "#pragma unroll\n        for (int k = 0; k < %d; k++) sq += v[k] * v[k];\n"
               "      }\n",
            (ll)chunks, L, load, vec);
  for (int m = L / 2; m > 0; m /= 2) sb_printf(b, "    sq += __shfl_xor_sync(0xffffffffu, sq, %d);\n", m);
  char eps[64];
  cg_float_lit(eps, sizeof eps, r.eps, "float");
  sb_printf(b, "    if (!ok) continue;\n"
               "    const float nrm = fmaxf(sqrtf(sq), %s), sc = %s;\n"
               "    for (i64 cc = sub; cc < %lldLL; cc += %d) {\n"
               "      %s",
            eps, s ? "ldf(s[so])" : "1.f", (ll)chunks, L, load);
  if (vec > 1) {
    sb_printf(b, "      Vec<%s, %d> o;\n#pragma unroll\n      for (int k = 0; k < %d; k++) o.v[k] = stf<%s>(v[k] / nrm * sc);\n"
                 "      *(Vec<%s, %d>*)(y + row * %lldLL + cc * %d) = o;\n",
              t, vec, vec, t, t, vec, (ll)r.d, vec);
  } else {
    sb_printf(b, "      ");
    char at[64];
    snprintf(at, sizeof at, "row * %lldLL + cc", (ll)r.d);
    cg_store(b, y->dt, "y", at, "float", "v[0] / nrm * sc");
  }
  sb_printf(b, "    }\n  }\n}\n");
  uint32_t args[3] = {c->tin[0], s ? c->tin[1] : c->tout[0], c->tout[0]};
  uint64_t warps = (uint64_t)((r.rows + rpw - 1) / rpw);
  return cg_launch(c, name, warps * 32, 256, 0, s ? 3 : 2, args);
}
