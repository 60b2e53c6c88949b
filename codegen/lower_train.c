/* GPU lowerings of the internal training ops of the loss and transformer
 * rules: SoftmaxCrossEntropyLossGrad, GatherGrad and DropoutTrain
 * (semantics: runtime/ref/ref_train.c, ref_train_tf.c). The CNN ones are
 * in lower_train_nn.c.
 *
 * Labels and indices are runtime tensors (int32 or int64). The reference
 * fails on an out-of-range label or index; here the kernel reports it
 * (gpuc_fault_report, runtime/device_fault.h: the run fails with the
 * reference's message) and meanwhile a label outside [0, C) that is not
 * ignore_index gives a NaN gradient row, and a GatherGrad index outside
 * [-D, D) is skipped (as lower_gather.c's scatters do). */
#include "lower_util.h"
#include "dropout_rng.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LL(v) ((long long)(v))

/* SoftmaxCrossEntropyLossGrad(dloss, log_prob [N, C, D..], labels [N, D..],
 * weights [C]?) -> dX [N, C, D..]:
 *   dx[n,k,d] = s(n,d) * w[label] * (exp(log_prob[n,k,d]) - [k == label])
 * with s = dloss (sum), dloss / (sum of w[label] over the entries not
 * ignored) (mean), dloss[n,d] (none); ignored entries get 0.
 * mean with weights or ignore_index: kernel 1 (one block) sums the weights
 * in double into a one-value scratch; otherwise the divisor is N*D, baked.
 * Kernel 2: one thread per dX element, the scale in double, the softmax
 * term in float (exp of the log-probability, as the reference's f32 path). */
int lower_SoftmaxCrossEntropyLossGrad(LowerCtx *c) {
  const Tensor *dl = c->in[0], *lp = c->in[1], *t = c->in[2], *dx = c->out[0];
  const Tensor *w = c->nin > 3 && c->in[3] ? c->in[3] : NULL;
  if (!is_flt(dl->dt) || !is_flt(lp->dt) || (w && !is_flt(w->dt)))
    return lower_unsupported(c, "dtype %s", gpuc_dtype_name(lp->dt));
  if (t->dt != GPUC_DT_I64 && t->dt != GPUC_DT_I32)
    return lower_unsupported(c, "labels of dtype %s", gpuc_dtype_name(t->dt));
  if (lp->rank < 2) return lower_fail(c, "log_prob must have rank >= 2");
  int64_t N = lp->dims[0], C = lp->dims[1], D = gpuc_shape_numel(lp->rank - 2, lp->dims + 2);
  if (D < 0 || gpuc_numel(t) != N * D) return lower_fail(c, "labels do not match log_prob");
  if (w && gpuc_numel(w) != C) return lower_fail(c, "weights do not have C elements");
  const char *red = gpuc_attr_s(c->n, "reduction", "mean");
  bool none = !strcmp(red, "none"), mean = !strcmp(red, "mean");
  if (none ? gpuc_numel(dl) != N * D : gpuc_numel(dl) != 1)
    return lower_fail(c, "dloss has the wrong number of elements");
  const Attr *ii = gpuc_attr(c->n, "ignore_index");
  bool has_ii = ii && ii->kind == GPUC_ATTR_INT;
  long long ignore = has_ii ? (long long)ii->i : 0;
  int64_t total = gpuc_numel(dx);
  if (total == 0) return 0;
  StrBuf *b = cg_src(c);
  char name[128], ign[96], wl[96];
  snprintf(ign, sizeof ign, "%s", has_ii ? "" : "false");
  if (has_ii) snprintf(ign, sizeof ign, "(label == %lldLL)", ignore);
  /* w[label] as double (1 without weights) */
  if (w) {
    StrBuf tmp = {0};
    cg_load(&tmp, "double", w->dt, "w", "label");
    snprintf(wl, sizeof wl, "%s", tmp.s ? tmp.s : "0");
    free(tmp.s);
  } else {
    snprintf(wl, sizeof wl, "1.0");
  }
  uint32_t wsum = UINT32_MAX;
  bool divide = mean && (w || has_ii);
  if (divide) { /* kernel 1: the mean's divisor */
    int64_t one[1] = {1};
    wsum = cg_scratch(c, GPUC_DT_F64, 1, one);
    snprintf(name, sizeof name, "%s", cg_kernel_name(c));
    sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ lab, %s%s%sdouble* __restrict__ wsum) {\n"
                 "  double s = 0;\n"
                 "  for (i64 j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n"
                 "    const i64 label = (i64)lab[j];\n"
                 "    if (%s) continue;\n"
                 "    s += label >= 0 && label < %lldLL ? %s : 0.0;\n  }\n"
                 "  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
                 "  __shared__ double sh[32];\n"
                 "  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;\n"
                 "  __syncthreads();\n"
                 "  if (threadIdx.x == 0) {\n"
                 "    for (int k = 1; k < (int)(blockDim.x >> 5); k++) s += sh[k];\n"
                 "    wsum[0] = s;\n  }\n}\n",
              name, cg_ctype(t->dt), w ? "const " : "", w ? cg_ctype(w->dt) : "",
              w ? "* __restrict__ w, " : "", LL(N * D), has_ii ? ign : "false", LL(C), wl);
    uint32_t args[3];
    int na = 0;
    args[na++] = c->tin[2];
    if (w) args[na++] = c->tin[3];
    args[na++] = wsum;
    unsigned grid[3] = {1, 1, 1}, block[3] = {1024, 1, 1};
    if (cg_launch_grid(c, name, grid, block, 0, na, args)) return -1;
  }
  /* kernel 2: one thread per element of dX */
  unsigned fstep = cg_fault_step(c);
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ dl, const %s* __restrict__ lp, "
               "const %s* __restrict__ lab, ",
            name, cg_ctype(dl->dt), cg_ctype(lp->dt), cg_ctype(t->dt));
  if (w) sb_printf(b, "const %s* __restrict__ w, ", cg_ctype(w->dt));
  if (divide) sb_printf(b, "const double* __restrict__ wsum, ");
  sb_printf(b, "%s* __restrict__ dx) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    const i64 d = i %% %lldLL, k = i / %lldLL %% %lldLL, j = i / %lldLL * %lldLL + d;\n"
               "    const i64 label = (i64)lab[j];\n",
            cg_ctype(dx->dt), LL(total), LL(D), LL(D), LL(C), LL(C * D), LL(D));
  /* s: the per-(n, d) scale before the weight */
  sb_printf(b, "    double s = ");
  if (none) cg_load(b, "double", dl->dt, "dl", "j");
  else cg_load(b, "double", dl->dt, "dl", "0");
  if (mean && divide) sb_printf(b, " / wsum[0]");
  else if (mean) sb_printf(b, " / %.1f", (double)(N * D));
  sb_printf(b, ";\n    float v;\n");
  sb_printf(b, "    if (%s) v = 0.0f;\n"
               "    else if (label < 0 || label >= %lldLL) {\n"
               "      v = __int_as_float(0x7fc00000);\n"
               "      gpuc_fault_report(%uu, %d, label, j, %lldLL, -1);\n"
               "    } else {\n      s *= %s;\n      const float p = expf(",
            has_ii ? ign : "false", LL(C), fstep, GPUC_FAULT_LABEL_GRAD, LL(C), wl);
  cg_load(b, "float", lp->dt, "lp", "i");
  sb_printf(b, ");\n      v = (float)(s * ((double)p - (k == label ? 1.0 : 0.0)));\n    }\n    ");
  cg_store(b, dx->dt, "dx", "i", "float", "v");
  sb_printf(b, "  }\n}\n");
  uint32_t args[6];
  int na = 0;
  args[na++] = c->tin[0];
  args[na++] = c->tin[1];
  args[na++] = c->tin[2];
  if (w) args[na++] = c->tin[3];
  if (divide) args[na++] = wsum;
  args[na++] = c->tout[0];
  return cg_launch_items(c, name, (uint64_t)total, na, args);
}

/* GatherGrad(dy [outer, N, inner], indices [N..], shape) -> out = zeros of
 * `shape` [outer, D, inner] with out[o, idx[n], i] += dy[o, n, i].
 * Kernel 1 zeroes the accumulator, kernel 2 adds one dy element per thread
 * with atomicAdd: the order of the adds (and so the rounding) is not fixed
 * when indices repeat, unlike the reference's f64 sum in index order. f32
 * and f64 accumulate in place; f16/bf16 in an f32 scratch that kernel 3
 * rounds into the output. */
int lower_GatherGrad(LowerCtx *c) {
  const Tensor *dy = c->in[0], *ind = c->in[1], *out = c->out[0];
  if (!is_flt(out->dt) || !is_flt(dy->dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(out->dt));
  if (ind->dt != GPUC_DT_I64 && ind->dt != GPUC_DT_I32)
    return lower_unsupported(c, "indices of dtype %s", gpuc_dtype_name(ind->dt));
  int axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 0), out->rank, &axis)) return -1;
  int64_t D = out->dims[axis], N = gpuc_numel(ind);
  int64_t outer = gpuc_shape_numel(axis, out->dims);
  int64_t inner = gpuc_shape_numel(out->rank - axis - 1, out->dims + axis + 1);
  if (gpuc_numel(dy) != outer * N * inner) return lower_fail(c, "dy does not match indices and shape");
  int64_t total = gpuc_numel(out), ndy = gpuc_numel(dy);
  if (total == 0) return 0;
  bool direct = out->dt == GPUC_DT_F32 || out->dt == GPUC_DT_F64;
  GpucDType at = out->dt == GPUC_DT_F64 ? GPUC_DT_F64 : GPUC_DT_F32;
  const char *act = at == GPUC_DT_F64 ? "double" : "float";
  uint32_t acc = direct ? c->tout[0] : cg_scratch(c, at, out->rank, out->dims);
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(%s* __restrict__ acc) {\n"
               "  GRID_STRIDE(i, %lldLL) acc[i] = 0;\n}\n", name, act, LL(total));
  if (cg_launch_items(c, name, (uint64_t)total, 1, &acc)) return -1;
  if (ndy > 0) {
    unsigned fstep = cg_fault_step(c);
    snprintf(name, sizeof name, "%s", cg_kernel_name(c));
    sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ dy, const %s* __restrict__ ind, %s* acc) {\n"
                 "  GRID_STRIDE(i, %lldLL) {\n"
                 "    const i64 in_ = i %% %lldLL, n = i / %lldLL %% %lldLL, o = i / %lldLL;\n"
                 "    const i64 w = (i64)ind[n];\n"
                 "    i64 v = w < 0 ? w + %lldLL : w;\n"
                 "    if (v < 0 || v >= %lldLL) { gpuc_fault_report(%uu, %d, w, n, %lldLL, -1); continue; }\n"
                 "    atomicAdd(acc + (o * %lldLL + v) * %lldLL + in_, ",
              name, cg_ctype(dy->dt), cg_ctype(ind->dt), act, LL(ndy), LL(inner), LL(inner), LL(N),
              LL(N * inner), LL(D), LL(D), fstep, GPUC_FAULT_INDEX_NOAXIS, LL(D), LL(D), LL(inner));
    cg_load(b, act, dy->dt, "dy", "i");
    sb_printf(b, ");\n  }\n}\n");
    uint32_t args[3] = {c->tin[0], c->tin[1], acc};
    if (cg_launch(c, name, (uint64_t)ndy, 256, 0, 3, args)) return -1;
  }
  if (direct) return 0;
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "extern \"C\" __global__ void %s(const float* __restrict__ acc, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) ", name, cg_ctype(out->dt), LL(total));
  cg_store(b, out->dt, "y", "i", "float", "acc[i]");
  sb_printf(b, "}\n");
  uint32_t args[2] = {acc, c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)total, 2, args);
}

/* DropoutTrain(X [n], counter int64 [2] = (seed, step)) -> Y [n], mask?
 * [n] bool: one thread per element. The draw is ir/dropout_rng.h's text
 * (emitted once per module), the reference's own, so the masks are
 * bit-identical. The counter is read from device memory, not baked: the
 * trainer writes it before each replay of the captured graph. Threshold
 * and 1 / (1 - ratio) (rounded to float, as the reference does, except
 * for f64) are baked. Half X loads and Y stores through float (--amp). */
int lower_DropoutTrain(LowerCtx *c) {
  const Tensor *x = c->in[0], *k = c->in[1];
  if (!is_flt(x->dt)) return lower_unsupported(c, "dtype %s", gpuc_dtype_name(x->dt));
  if (k->dt != GPUC_DT_I64 || gpuc_numel(k) != 2) return lower_fail(c, "counter must be int64 [2]");
  bool has_y = c->out[0] && c->tout[0] != UINT32_MAX;
  bool has_m = c->nout > 1 && c->out[1] && c->tout[1] != UINT32_MAX;
  int64_t n = gpuc_numel(x);
  if (n == 0 || (!has_y && !has_m)) return 0;
  double ratio = gpuc_attr_f(c->n, "ratio", 0.5f);
  const char *ct = x->dt == GPUC_DT_F64 ? "double" : "float";
  char scale[64];
  cg_float_lit(scale, sizeof scale, gpuc_dropout_scale(ratio), ct);
  StrBuf *b = cg_src(c);
  char name[128];
  snprintf(name, sizeof name, "%s", cg_kernel_name(c));
  sb_printf(b, "%s", GPUC_DROPOUT_RNG_SRC);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, const i64* __restrict__ ctr",
            name, cg_ctype(x->dt));
  if (has_y) sb_printf(b, ", %s* __restrict__ y", cg_ctype(x->dt));
  if (has_m) sb_printf(b, ", unsigned char* __restrict__ mask");
  sb_printf(b, ") {\n"
               "  const unsigned long long key = gpuc_dropout_key((unsigned long long)ctr[0], "
               "(unsigned long long)ctr[1], %lluull);\n"
               "  GRID_STRIDE(i, %lldLL) {\n"
               "    const bool keep = gpuc_dropout_bits(key, (unsigned long long)i) >= %uu;\n",
            (unsigned long long)gpuc_attr_i(c->n, "salt", 0), LL(n), gpuc_dropout_threshold(ratio));
  if (has_y) {
    sb_printf(b, "    const %s v = keep ? ", ct);
    cg_load(b, ct, x->dt, "x", "i");
    sb_printf(b, " * %s : (%s)0;\n    ", scale, ct);
    cg_store(b, x->dt, "y", "i", ct, "v");
  }
  if (has_m) sb_printf(b, "    mask[i] = keep ? 1 : 0;\n");
  sb_printf(b, "  }\n}\n");
  uint32_t args[4];
  int na = 0;
  args[na++] = c->tin[0];
  args[na++] = c->tin[1];
  if (has_y) args[na++] = c->tout[0];
  if (has_m) args[na++] = c->tout[1];
  return cg_launch(c, name, (uint64_t)n, 256, 0, na, args);
}
