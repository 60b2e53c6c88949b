/* GatedUnit {silu} (internal, ir/ops.def; passes/fuse_gated_mlp.c makes
 * it): Y [rows, N] = silu(X[:, :N]) * X[:, N:] from the merged gate/up
 * GEMM's output X [rows, 2N], a 16-byte vector of Y a thread (one
 * element where N is no multiple of the vector). The sigmoid
 * is Sigmoid's kernel expression (codegen/lower_elementwise.c); f32 math,
 * rounded once on the store.
 *
 * With LowerCtx.row (passes/fuse_quantize_rows.c: the QuantizeRows(F8) of
 * the next Linear layer reads Y; LLaMA's down projection) one kernel also
 * quantizes Y per row: rows of N in the multi-row layout of lower_rows.h
 * (BERT-size rows of 2048: 2 warps a row), each element computed as above
 * and rounded to Y's dtype as the unfused kernel stores it, then the row's
 * absmax and QuantizeRows' rule (row_layout_quantize); Y stored only when
 * something else reads it. Same bits as the two kernels. */
#include "codegen.h"
#include "lower_rows.h"
#include "lower_util.h"
#include <stdio.h>

static bool float_dt(GpucDType dt) { return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16; }

/* ys[k] = (g * s) * u, s = sigmoid(g), for g = gp[k] and u = up[k] (X's
 * dtype xdt, Y's ydt): one element; the loop over k is the caller's */
static void gated_element(StrBuf *b, GpucDType xdt, GpucDType ydt, const char *ys) {
  sb_printf(b, "      const float g = ");
  cg_load(b, "float", xdt, "gp", "k");
  sb_printf(b, ", u = ");
  cg_load(b, "float", xdt, "up", "k");
  sb_printf(b, ";\n      const float s = g >= 0 ? 1 / (1 + exp(-g)) : exp(g) / (1 + exp(g));\n      ");
  cg_store(b, ydt, ys, "k", "float", "(g * s) * u");
}

bool cg_gated_row_fusable(const Graph *g, const Node *n) {
  if (n->op != GPUC_OP_GATEDUNIT || n->nin < 1 || n->in[0] < 0 || n->out[0] < 0) return false;
  const Tensor *x = &g->values[n->in[0]].t, *y = &g->values[n->out[0]].t;
  int64_t cols = y->rank ? y->dims[y->rank - 1] : 0;
  return float_dt(x->dt) && y->dt == x->dt && cols >= 1 && cols <= ROW_LAYOUT_MAX_N && gpuc_numel(y) > 0 &&
         gpuc_numel(x) == 2 * gpuc_numel(y);
}

/* The GatedUnit + quantize row kernel (LowerCtx.row, quantize only). */
static int gated_rows_quantize(LowerCtx *c) {
  const RowFuse *rf = c->row;
  const Tensor *x = c->in[0], *y = c->out[0];
  const int64_t n = y->dims[y->rank - 1];
  RowLayout L;
  if (rf->dq >= 0 || rf->q < 0 || !cg_gated_row_fusable(c->g, c->n) ||
      row_layout_pick(&L, gpuc_numel(y) / n, n, (int)(16 / gpuc_dtype_size(x->dt))))
    return lower_fail(c, "internal: GatedUnit's row group is not one the row kernel takes");
  const bool f8 = c->g->nodes[rf->q].op == GPUC_OP_QUANTIZEROWSF8, ky = !rf->drop_y;
  const int V = L.vec;
  const char *t = cg_ctype(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const %s* __restrict__ x, ", ROW_LAYOUT_BLOCK,
            name, t);
  if (ky) sb_printf(b, "%s* __restrict__ y, ", t);
  sb_printf(b, "float* __restrict__ qs, unsigned char* __restrict__ qo) {\n");
  row_layout_open(b, &L);
  sb_printf(b, "    float w_[%d];\n", L.groups * V);
  row_layout_for_vec(b, &L);
  /* g and u: the vector at column j0_ of X's row halves (16-byte aligned: N a multiple of V) */
  sb_printf(b, "        const Vec<%s, %d> gr = *(const Vec<%s, %d>*)(x + row_ * %lldLL + j0_), "
               "ur = *(const Vec<%s, %d>*)(x + row_ * %lldLL + %lldLL + j0_);\n"
               "        Vec<%s, %d> yr;\n"
               "        const %s* gp = gr.v; const %s* up = ur.v; float* wv_ = w_ + g * %d;\n"
               "#pragma unroll\n        for (int k = 0; k < %d; k++) {\n",
            t, V, t, V, (long long)(2 * n), t, V, (long long)(2 * n), (long long)n, t, V, t, t, V, V);
  gated_element(b, x->dt, y->dt, "yr.v");
  sb_printf(b, "      wv_[k] = ldf(yr.v[k]); /* Y as stored: what QuantizeRows reads */\n        }\n");
  if (ky) sb_printf(b, "        *(Vec<%s, %d>*)(y + base_ + j0_) = yr;\n", t, V);
  sb_printf(b, "      } else {\n#pragma unroll\n        for (int k = 0; k < %d; k++) w_[g * %d + k] = 0.0f;\n      }\n    }\n",
            V, V);
  row_layout_quantize(b, &L, f8);
  sb_printf(b, "  }\n}\n");
  uint32_t args[4];
  int na = 0;
  args[na++] = c->tin[0];
  if (ky) args[na++] = c->tout[0];
  args[na++] = rf->ts;
  args[na++] = rf->tq;
  return row_layout_launch(c, &L, name, na, args);
}

int lower_GatedUnit(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  if (!float_dt(x->dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(x->dt));
  if (c->row) return gated_rows_quantize(c);
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
  sb_printf(b, "#pragma unroll\n    for (int k = 0; k < %d; k++) {\n", vec);
  gated_element(b, x->dt, y->dt, "yp");
  sb_printf(b, "    }\n");
  if (vec > 1) sb_printf(b, "    *(uint4*)(y + i) = yr;\n");
  sb_printf(b, "  }\n}\n");
  uint32_t args[2] = {c->tin[0], c->tout[0]};
  return cg_launch(c, name, (uint64_t)(total / vec), 256, 0, 2, args);
}
