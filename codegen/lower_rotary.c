/* RotaryHalf (internal, ir/ops.def; passes/fuse_rotary.c makes it): one
 * thread a pair of features (j, j + D/2) of a row of X (or 16-byte
 * vectors of pairs: rotary_vec), both outputs:
 *   y[j]       = x[j] cos[j] - x[j + D/2] sin[j]
 *   y[j + D/2] = x[j + D/2] cos[j + D/2] + x[j] sin[j + D/2]
 * X read through its Transpose `perm` when given, Cos and Sin through
 * broadcast strides (0 on their size-1 or missing dims), all baked in. f32 math with __fmul_rn / __fadd_rn: each product and
 * the sum rounded as the Muls and the Add it replaces (no FMA
 * contraction), so f32 plans give the reference's bits
 * (runtime/ref/ref_rotary.c); half plans round once, on the store. */
#include "codegen.h"
#include "lower_util.h"
#include "rotary.h"
#include <stdio.h>

typedef long long ll;

/* The vector kernel: a thread takes vec consecutive pairs (j .. j+vec-1,
 * j a multiple of vec inside the first half) of one row, X, Cos, Sin and
 * Y moved as 16-byte vectors. X's strides other than the last are
 * multiples of D (its last axis stays last), so with D/2 % vec == 0 every
 * vector is aligned; Cos and Sin need a contiguous last axis. The
 * arithmetic per element is the scalar kernel's. */
static int rotary_vec(const Tensor *x, const int64_t *sc, const int64_t *ss, int r, int64_t h, int64_t pairs) {
  int vec = (int)(16 / gpuc_dtype_size(x->dt));
  if (vec > 8) vec = 8;
  while (vec > 1 && pairs / vec < cg_min_vec_items()) vec /= 2; /* LLaMA at batch 1: enough threads first */
  if (vec == 1 || h % vec || sc[r - 1] != 1 || ss[r - 1] != 1) return 1;
  for (int k = 0; k < r - 1; k++)
    if (sc[k] % vec || ss[k] % vec) return 1;
  return vec;
}

int lower_RotaryHalf(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16)
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(x->dt));
  int r = y->rank;
  int64_t d = y->dims[r - 1], h = d / 2, pairs = gpuc_numel(y) / 2;
  if (pairs == 0) return 0;
  int64_t sc[GPUC_MAX_RANK], ss[GPUC_MAX_RANK];
  cg_bcast_strides(c->in[1]->rank, c->in[1]->dims, r, sc);
  cg_bcast_strides(c->in[2]->rank, c->in[2]->dims, r, ss);
  const char *t = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  int64_t xs[GPUC_MAX_RANK]; /* X's element stride along Y's axis k (X read through perm) */
  gpuc_rotary_half_strides(c->n, x, xs);
  int vec = rotary_vec(x, sc, ss, r, h, pairs);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ cs, "
               "const %s* __restrict__ sn, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(p, %lldLL) {\n"
               "    const i64 i1 = (p * %d / %lldLL) * %lldLL + p * %d %% %lldLL, i2 = i1 + %lldLL;\n"
               "    i64 rest = i1, ox = 0, oc = 0, os = 0;\n",
            name, t, t, t, t, (ll)(pairs / vec), vec, (ll)h, (ll)d, vec, (ll)h, (ll)h);
  /* i1's coordinates, last dim first; i2 differs by h in the last one,
   * where X, Y (and Cos/Sin unless broadcast) have stride 1 */
  for (int k = r - 1; k >= 0; k--)
    sb_printf(b, "    { const i64 q = rest %% %lldLL; rest /= %lldLL; ox += q * %lldLL; oc += q * %lldLL; "
                 "os += q * %lldLL; }\n",
              (ll)y->dims[k], (ll)y->dims[k], (ll)xs[k], (ll)sc[k], (ll)ss[k]);
  char i2x[48], i2c[48], i2s[48];
  snprintf(i2x, sizeof i2x, "ox + %lldLL", (ll)h);
  snprintf(i2c, sizeof i2c, "oc + %lldLL", (ll)(h * sc[r - 1]));
  snprintf(i2s, sizeof i2s, "os + %lldLL", (ll)(h * ss[r - 1]));
  if (vec > 1) {
    /* vectors of x1, x2, c1, s1, c2, s2 as loaded; y1, y2 as stored */
    const char *src[6][2] = {{"x", "ox"}, {"x", i2x}, {"cs", "oc"}, {"sn", "os"}, {"cs", i2c}, {"sn", i2s}};
    const char *nm[6] = {"x1v", "x2v", "c1v", "s1v", "c2v", "s2v"};
    for (int k = 0; k < 6; k++)
      sb_printf(b, "    const Vec<%s, %d> %s = *(const Vec<%s, %d>*)(%s + %s);\n", t, vec, nm[k], t, vec, src[k][0],
                src[k][1]);
    sb_printf(b, "    Vec<%s, %d> y1v, y2v;\n#pragma unroll\n    for (int u = 0; u < %d; u++) {\n"
                 "      const float x1 = ldf(x1v.v[u]), x2 = ldf(x2v.v[u]), c1 = ldf(c1v.v[u]), s1 = ldf(s1v.v[u]), "
                 "c2 = ldf(c2v.v[u]), s2 = ldf(s2v.v[u]);\n      ",
              t, vec, vec);
    cg_store(b, x->dt, "y1v.v", "u", "float", "__fadd_rn(__fmul_rn(x1, c1), __fmul_rn(-x2, s1))");
    sb_printf(b, "      ");
    cg_store(b, x->dt, "y2v.v", "u", "float", "__fadd_rn(__fmul_rn(x2, c2), __fmul_rn(x1, s2))");
    sb_printf(b, "    }\n    *(Vec<%s, %d>*)(y + i1) = y1v;\n    *(Vec<%s, %d>*)(y + i2) = y2v;\n  }\n}\n", t, vec, t,
              vec);
  } else {
    sb_printf(b, "    const float x1 = ");
    cg_load(b, "float", x->dt, "x", "ox");
    sb_printf(b, ", x2 = ");
    cg_load(b, "float", x->dt, "x", i2x);
    sb_printf(b, ";\n    const float c1 = ");
    cg_load(b, "float", x->dt, "cs", "oc");
    sb_printf(b, ", s1 = ");
    cg_load(b, "float", x->dt, "sn", "os");
    sb_printf(b, ", c2 = ");
    cg_load(b, "float", x->dt, "cs", i2c);
    sb_printf(b, ", s2 = ");
    cg_load(b, "float", x->dt, "sn", i2s);
    sb_printf(b, ";\n    ");
    cg_store(b, x->dt, "y", "i1", "float", "__fadd_rn(__fmul_rn(x1, c1), __fmul_rn(-x2, s1))");
    sb_printf(b, "    ");
    cg_store(b, x->dt, "y", "i2", "float", "__fadd_rn(__fmul_rn(x2, c2), __fmul_rn(x1, s2))");
    sb_printf(b, "  }\n}\n");
  }
  uint32_t args[4] = {c->tin[0], c->tin[1], c->tin[2], c->tout[0]};
  return cg_launch(c, name, (uint64_t)(pairs / vec), 256, 0, 4, args);
}
