/* GatedUnit {silu} (internal, ir/ops.def; passes/fuse_gated_mlp.c makes
 * it): Y [rows, N] = silu(X[:, :N]) * X[:, N:] from the merged gate/up
 * GEMM's output X [rows, 2N], a 16-byte vector of Y a thread (one
 * element where N is no multiple of the vector). The sigmoid
 * is Sigmoid's kernel expression (codegen/lower_elementwise.c); f32 math,
 * rounded once on the store. */
#include "codegen.h"
#include "lower_util.h"
#include <stdio.h>

int lower_GatedUnit(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  if (x->dt != GPUC_DT_F32 && x->dt != GPUC_DT_F16 && x->dt != GPUC_DT_BF16)
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(x->dt));
  long long n = y->dims[y->rank - 1], total = gpuc_numel(y);
  if (total == 0) return 0;
  /* 16-byte vectors of VEC elements when a row's N holds whole vectors
   * (then every g, u and y vector is 16-byte aligned: the arena's offsets
   * are), else one element a thread */
  int vec = (int)(16 / gpuc_dtype_size(x->dt));
  if (n % vec) vec = 1;
  const char *t = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(v, %lldLL) {\n"
               "    const i64 i = v * %d, g_at = (i / %lldLL) * %lldLL + i %% %lldLL;\n",
            name, t, t, total / vec, vec, n, 2 * n, n);
  if (vec > 1)
    sb_printf(b, "    const uint4 gr = *(const uint4*)(x + g_at), ur = *(const uint4*)(x + g_at + %lldLL);\n"
                 "    uint4 yr;\n"
                 "    const %s* gp = (const %s*)&gr; const %s* up = (const %s*)&ur; %s* yp = (%s*)&yr;\n",
              n, t, t, t, t, t, t);
  else
    sb_printf(b, "    const %s* gp = x + g_at; const %s* up = x + g_at + %lldLL; %s* yp = y + i;\n", t, t, n, t);
  sb_printf(b, "#pragma unroll\n    for (int k = 0; k < %d; k++) {\n      const float g = ", vec);
  cg_load(b, "float", x->dt, "gp", "k");
  sb_printf(b, ", u = ");
  cg_load(b, "float", x->dt, "up", "k");
  sb_printf(b, ";\n      const float s = g >= 0 ? 1 / (1 + exp(-g)) : exp(g) / (1 + exp(g));\n      ");
  cg_store(b, y->dt, "yp", "k", "float", "(g * s) * u");
  sb_printf(b, "    }\n");
  if (vec > 1) sb_printf(b, "    *(uint4*)(y + i) = yr;\n");
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch(c, name, (uint64_t)(total / vec), 256, 0, 2, args);
}
