/* Direct-kernel GPU lowerings: ConvTranspose, MatMulInteger and Einsum.
 * One thread per output element, shapes baked in. Semantics follow
 * runtime/ref/ref_conv.c, ref_linalg.c and ref_einsum.c.
 *
 * ConvTranspose gathers instead of scattering: output position o takes tap
 * t from input position q where q * stride - pad_b + t * dil == o, i.e.
 * q = (o + pad_b - t * dil) / stride when that divides exactly and lands
 * inside X. The window geometry comes from nn_convt_window, shared with
 * shape inference and the reference. */
#include "lower_util.h"
#include "infer_nn.h"
#include "infer_linalg.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LL(v) ((long long)(v))

static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

/* ---- ConvTranspose ---------------------------------------------------------- */

/* X [N, C, in...], W [C, M/group, k...], optional B [M] -> Y [N, M, out...].
 * y[n, m, o] = B[m] + sum over the group's input channels ci and taps t of
 * x[n, g*Cg + ci, q(o, t)] * W[g*Cg + ci, m % Mg, t]. */
int lower_ConvTranspose(LowerCtx *c) {
  const Tensor *x = c->in[0], *wt = c->in[1], *y = c->out[0];
  const Tensor *bias = c->nin > 2 ? c->in[2] : NULL;
  GpucDType dt = x->dt;
  if (!is_flt(dt) || wt->dt != dt || (bias && bias->dt != dt))
    return lower_unsupported(c, "ConvTranspose of %s", gpuc_dtype_name(dt));
  NnWindow w;
  if (nn_convt_window(LOWER_OPCTX(c), &w)) return -1;
  int nsp = w.nsp;
  int64_t HWin = prod(w.in, nsp), HWout = prod(w.out, nsp), K = prod(w.k, nsp);
  int64_t Cg = w.c_in / w.group, Mg = w.c_out / w.group, MK = Mg * K;
  int64_t total = w.n * w.c_out * HWout;
  if (total != gpuc_numel(y)) return lower_fail(c, "internal: ConvTranspose output size mismatch");
  if (total == 0) return 0;
  int64_t xs[NN_MAX_SP], ks[NN_MAX_SP], s = 1;
  for (int d = nsp - 1; d >= 0; d--) { xs[d] = s; s *= w.in[d]; }
  s = 1;
  for (int d = nsp - 1; d >= 0; d--) { ks[d] = s; s *= w.k[d]; }
  const char *ct = dt == GPUC_DT_F64 ? "double" : "float";
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  const char *t = cg_ctype(dt);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const %s* __restrict__ w, ", name, t, t);
  if (bias) sb_printf(b, "const %s* __restrict__ bias, ", t);
  sb_printf(b, "%s* __restrict__ y) {\n  GRID_STRIDE(i, %lldLL) {\n    i64 r = i;\n", cg_ctype(y->dt), LL(total));
  for (int d = nsp - 1; d >= 0; d--)
    sb_printf(b, "    i64 o%d = r %% %lldLL; r /= %lldLL;\n", d, LL(w.out[d]), LL(w.out[d]));
  sb_printf(b, "    i64 m = r %% %lldLL, n = r / %lldLL, g = m / %lldLL, ml = m %% %lldLL;\n"
               "    const %s* xg = x + (n * %lldLL + g * %lldLL) * %lldLL;\n"
               "    const %s* wg = w + g * %lldLL * %lldLL + ml * %lldLL;\n"
               "    %s acc = 0;\n",
            LL(w.c_out), LL(w.c_out), LL(Mg), LL(Mg), t, LL(w.c_in), LL(Cg), LL(HWin), t, LL(Cg), LL(MK),
            LL(K), ct);
  for (int d = 0; d < nsp; d++) {
    int ind = 4 + 2 * d;
    sb_printf(b, "%*sfor (i64 t%d = 0; t%d < %lldLL; t%d++) {\n", ind, "", d, d, LL(w.k[d]), d);
    sb_printf(b, "%*s  i64 q%d = o%d + %lldLL - t%d * %lldLL;\n", ind, "", d, d, LL(w.pad_b[d]), d, LL(w.dil[d]));
    if (w.stride[d] == 1)
      sb_printf(b, "%*s  if (q%d < 0 || q%d >= %lldLL) continue;\n", ind, "", d, d, LL(w.in[d]));
    else
      sb_printf(b, "%*s  if (q%d < 0 || q%d %% %lldLL) continue;\n%*s  q%d /= %lldLL;\n%*s  if (q%d >= %lldLL) continue;\n",
                ind, "", d, d, LL(w.stride[d]), ind, "", d, LL(w.stride[d]), ind, "", d, LL(w.in[d]));
  }
  int ind = 4 + 2 * nsp;
  sb_printf(b, "%*si64 xo = 0", ind, "");
  for (int d = 0; d < nsp; d++) sb_printf(b, " + q%d * %lldLL", d, LL(xs[d]));
  sb_printf(b, ", wo = 0");
  for (int d = 0; d < nsp; d++) sb_printf(b, " + t%d * %lldLL", d, LL(ks[d]));
  sb_printf(b, ";\n%*sfor (i64 ci = 0; ci < %lldLL; ci++)\n%*s  acc += ", ind, "", LL(Cg), ind, "");
  char idx[96];
  snprintf(idx, sizeof idx, "xo + ci * %lldLL", LL(HWin));
  cg_load(b, ct, dt, "xg", idx);
  sb_printf(b, " * ");
  snprintf(idx, sizeof idx, "wo + ci * %lldLL", LL(MK));
  cg_load(b, ct, dt, "wg", idx);
  sb_printf(b, ";\n");
  for (int d = nsp - 1; d >= 0; d--) sb_printf(b, "%*s}\n", 4 + 2 * d, "");
  if (bias) {
    sb_printf(b, "    acc += ");
    cg_load(b, ct, dt, "bias", "m");
    sb_printf(b, ";\n");
  }
  sb_printf(b, "    ");
  cg_store(b, y->dt, "y", "i", ct, "acc");
  sb_printf(b, "  }\n}\n");
  uint32_t args[4];
  int na = 0;
  args[na++] = c->tin[0];
  args[na++] = c->tin[1];
  if (bias) args[na++] = c->tin[2];
  args[na++] = c->tout[0];
  return cg_launch_items(c, name, (uint64_t)total, na, args);
}

/* ---- MatMulInteger ------------------------------------------------------------ */

/* Element strides, per dim of x (rank xr), of zero point z broadcast to x's
 * shape (right-aligned numpy rules; 0 where z has no such dim or it is 1).
 * A 1-D per-row zero point of A ([M]) is viewed as [M, 1]. */
static void zp_strides(const Tensor *z, const Tensor *x, bool row, int64_t *st) {
  int zr = z->rank;
  int64_t zd[GPUC_MAX_RANK];
  for (int d = 0; d < zr; d++) zd[d] = z->dims[d];
  if (row && zr == 1) { zd[1] = 1; zr = 2; }
  cg_bcast_strides(zr, zd, x->rank, st);
}

/* int32 Y = (A - a_zero_point) @ (B - b_zero_point), A and B u8/i8, numpy
 * matmul broadcasting; the sum wraps in 32 bits like the reference's
 * int64 sum truncated to int32. */
int lower_MatMulInteger(LowerCtx *c) {
  const Tensor *a = c->in[0], *bt = c->in[1], *y = c->out[0];
  const Tensor *za = c->nin > 2 ? c->in[2] : NULL, *zb = c->nin > 3 ? c->in[3] : NULL;
  bool ok8 = (a->dt == GPUC_DT_U8 || a->dt == GPUC_DT_I8) && (bt->dt == GPUC_DT_U8 || bt->dt == GPUC_DT_I8);
  if (!ok8 || y->dt != GPUC_DT_I32) return lower_unsupported(c, "MatMulInteger of %s x %s", gpuc_dtype_name(a->dt),
                                                             gpuc_dtype_name(bt->dt));
  int ra = a->rank, rb = bt->rank;
  if (ra < 1 || rb < 1) return lower_fail(c, "inputs must have rank >= 1");
  int64_t M = ra >= 2 ? a->dims[ra - 2] : 1, K = a->dims[ra - 1], N = rb >= 2 ? bt->dims[rb - 1] : 1;
  int nbatch = y->rank - (ra >= 2) - (rb >= 2);
  int64_t total = gpuc_numel(y);
  if (total == 0) return 0;
  /* per output batch dim: A/B offset strides (0 when broadcast) */
  int64_t sa[GPUC_MAX_RANK], sb[GPUC_MAX_RANK], zsa[GPUC_MAX_RANK] = {0}, zsb[GPUC_MAX_RANK] = {0};
  int64_t zsa_x[GPUC_MAX_RANK] = {0}, zsb_x[GPUC_MAX_RANK] = {0};
  if (za) zp_strides(za, a, true, zsa_x);
  if (zb) zp_strides(zb, bt, false, zsb_x);
  int nxa = ra > 2 ? ra - 2 : 0, nxb = rb > 2 ? rb - 2 : 0;
  int64_t s1 = M * K, s2 = K * N;
  for (int d = nbatch - 1; d >= 0; d--) {
    int da = d - (nbatch - nxa), db = d - (nbatch - nxb);
    if (da < 0 || a->dims[da] == 1) { sa[d] = 0; zsa[d] = 0; }
    else { sa[d] = s1; s1 *= a->dims[da]; zsa[d] = zsa_x[da]; }
    if (db < 0 || bt->dims[db] == 1) { sb[d] = 0; zsb[d] = 0; }
    else { sb[d] = s2; s2 *= bt->dims[db]; zsb[d] = zsb_x[db]; }
  }
  int64_t za_m = ra >= 2 ? zsa_x[ra - 2] : 0, za_k = zsa_x[ra - 1];
  int64_t zb_k = rb >= 2 ? zsb_x[rb - 2] : zsb_x[0], zb_n = rb >= 2 ? zsb_x[rb - 1] : 0;
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ A, const %s* __restrict__ B, ", name,
            cg_ctype(a->dt), cg_ctype(bt->dt));
  if (za) sb_printf(b, "const %s* __restrict__ ZA, ", cg_ctype(za->dt));
  if (zb) sb_printf(b, "const %s* __restrict__ ZB, ", cg_ctype(zb->dt));
  sb_printf(b, "int* __restrict__ Y) {\n  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 n = i %% %lldLL, r = i / %lldLL, m = r %% %lldLL;\n    r /= %lldLL;\n"
               "    i64 ao = m * %lldLL, bo = n, zao = m * %lldLL, zbo = n * %lldLL;\n",
            LL(total), LL(N), LL(N), LL(M), LL(M), LL(K), LL(za_m), LL(zb_n));
  for (int d = nbatch - 1; d >= 0; d--)
    sb_printf(b, "    { i64 q = r %% %lldLL; r /= %lldLL; ao += q * %lldLL; bo += q * %lldLL; zao += q * %lldLL; zbo += q * %lldLL; }\n",
              LL(y->dims[d]), LL(y->dims[d]), LL(sa[d]), LL(sb[d]), LL(zsa[d]), LL(zsb[d]));
  char zae[96] = "", zbe[96] = "";
  if (za) snprintf(zae, sizeof zae, " - (int)ZA[zao + k * %lldLL]", LL(za_k));
  if (zb) snprintf(zbe, sizeof zbe, " - (int)ZB[zbo + k * %lldLL]", LL(zb_k));
  sb_printf(b, "    unsigned int acc = 0;\n    for (i64 k = 0; k < %lldLL; k++) {\n"
               "      int av = (int)A[ao + k]%s, bv = (int)B[bo + k * %lldLL]%s;\n",
            LL(K), zae, LL(N), zbe);
  sb_printf(b, "      acc += (unsigned int)(av * bv);\n    }\n    Y[i] = (int)acc;\n  }\n}\n");
  uint32_t args[5];
  int na = 0;
  args[na++] = c->tin[0];
  args[na++] = c->tin[1];
  if (za) args[na++] = c->tin[2];
  if (zb) args[na++] = c->tin[3];
  args[na++] = c->tout[0];
  return cg_launch_items(c, name, (uint64_t)total, na, args);
}

/* ---- Einsum ---------------------------------------------------------------------- */

/* One thread per output element: the output's labels fix its coordinates,
 * nested loops run over the summed labels, and each input is addressed by
 * per-label strides (a label repeated within an input adds its axes'
 * strides: diagonals; broadcast axes of size 1 get stride 0). Floats
 * accumulate in float (double for f64), integers wrap in 64 bits. */
int lower_Einsum(LowerCtx *c) {
  const Tensor *y = c->out[0];
  GpucDType dt = c->in[0]->dt;
  if (dt == GPUC_DT_UNDEF || dt == GPUC_DT_BOOL) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(dt));
  for (int k = 0; k < c->nin; k++)
    if (!c->in[k] || c->in[k]->dt != dt) return lower_unsupported(c, "inputs of mixed dtypes");
  if (c->nin > 16) return lower_unsupported(c, "Einsum with %d inputs", c->nin);
  GpucEinsum es;
  if (gpuc_einsum_parse(LOWER_OPCTX(c), &es)) return -1;
  int order[GPUC_EINSUM_MAX_LABELS], pos[GPUC_EINSUM_MAX_LABELS], L = 0;
  bool in_out[GPUC_EINSUM_MAX_LABELS] = {false};
  for (int d = 0; d < es.out_rank; d++) { order[L++] = es.out_lab[d]; in_out[es.out_lab[d]] = true; }
  for (int l = 0; l < es.nlab; l++) if (!in_out[l]) order[L++] = l;
  for (int j = 0; j < L; j++) pos[order[j]] = j;
  int64_t st[16][GPUC_EINSUM_MAX_LABELS];
  int64_t dim[GPUC_EINSUM_MAX_LABELS];
  memset(st, 0, sizeof st);
  for (int j = 0; j < L; j++) dim[j] = es.dim[order[j]];
  for (int k = 0; k < c->nin; k++) {
    const Tensor *x = c->in[k];
    int64_t str[GPUC_MAX_RANK];
    gpuc_strides(x, str);
    for (int a = 0; a < x->rank; a++)
      if (x->dims[a] != 1) st[k][pos[es.in_lab[k][a]]] += str[a];
  }
  int out_rank = es.out_rank;
  gpuc_einsum_free(&es);
  int64_t total = gpuc_numel(y);
  if (total == 0) return 0;
  bool fl = is_flt(dt);
  const char *ct = !fl ? "unsigned long long" : dt == GPUC_DT_F64 ? "double" : "float";
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  for (int k = 0; k < c->nin; k++) sb_printf(b, "const %s* __restrict__ x%d, ", cg_ctype(dt), k);
  sb_printf(b, "%s* __restrict__ y) {\n  GRID_STRIDE(i, %lldLL) {\n    i64 r = i;\n", cg_ctype(y->dt), LL(total));
  for (int k = 0; k < c->nin; k++) sb_printf(b, "    i64 f%d = 0;\n", k);
  for (int d = out_rank - 1; d >= 0; d--) {
    sb_printf(b, "    { i64 q = r %% %lldLL; r /= %lldLL;", LL(y->dims[d]), LL(y->dims[d]));
    for (int k = 0; k < c->nin; k++)
      if (st[k][d]) sb_printf(b, " f%d += q * %lldLL;", k, LL(st[k][d]));
    sb_printf(b, " }\n");
  }
  sb_printf(b, "    %s acc = 0;\n", ct);
  for (int j = out_rank; j < L; j++) {
    int ind = 4 + 2 * (j - out_rank);
    sb_printf(b, "%*sfor (i64 s%d = 0; s%d < %lldLL; s%d++) {\n", ind, "", j, j, LL(dim[j]), j);
  }
  int ind = 4 + 2 * (L - out_rank);
  sb_printf(b, "%*sacc += (%s)1", ind, "", ct);
  for (int k = 0; k < c->nin; k++) {
    char idx[512];
    int n = snprintf(idx, sizeof idx, "f%d", k);
    for (int j = out_rank; j < L && n < (int)sizeof idx - 48; j++)
      if (st[k][j]) n += snprintf(idx + n, sizeof idx - (size_t)n, " + s%d * %lldLL", j, LL(st[k][j]));
    char arg[16];
    snprintf(arg, sizeof arg, "x%d", k);
    sb_printf(b, " * ");
    cg_load(b, ct, dt, arg, idx);
  }
  sb_printf(b, ";\n");
  for (int j = L - 1; j >= out_rank; j--) sb_printf(b, "%*s}\n", 4 + 2 * (j - out_rank), "");
  sb_printf(b, "    ");
  cg_store(b, y->dt, "y", "i", ct, "acc");
  sb_printf(b, "  }\n}\n");
  uint32_t args[17];
  for (int k = 0; k < c->nin; k++) args[k] = c->tin[k];
  args[c->nin] = c->tout[0];
  return cg_launch_items(c, name, (uint64_t)total, c->nin + 1, args);
}
