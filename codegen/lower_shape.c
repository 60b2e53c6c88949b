/* GPU lowerings of the shape and data-movement ops: Shape Size Reshape
 * Flatten Squeeze Unsqueeze Transpose Concat Split Slice Expand Tile Pad
 * Trilu (semantics: runtime/ref/ref_shape.c).
 *
 * These ops move bytes, never values: kernels use the unsigned integer type
 * of the element's width ("bits" types), so every dtype (f16/bf16 included)
 * is a plain copy and constants (pad values) are baked as bit patterns.
 * Shapes and every data-dependent argument the output shape already fixed
 * (slice starts, pads, split sizes, repeats) are baked into the source;
 * they are recomputed at compile time with the planning functions the
 * reference kernels use (ir/infer_shape.c).
 *
 * Most ops are "strided views" of their input: output element at
 * multi-index i reads x[off + sum_k i_k * stride_k]. emit_view collapses
 * such a view (drops unit dims, merges dims contiguous in the source) and
 * emits one thread per output element; a view that is the whole input in
 * order becomes an alias (or a vectorized copy). Transposes that move the
 * innermost dim go through 32x32 shared-memory tiles so both the reads and
 * the writes are coalesced. */
#include "lower_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined in ir/infer_shape.c (see the prototypes in runtime/ref/ref_shape.c):
 * 0 known, 1 some argument unknown, -1 error with a message. */
int gpuc_slice_plan(OpCtx *c, int64_t *start, int64_t *step, int64_t *count);
int gpuc_pad_plan(OpCtx *c, int64_t *before, int64_t *after, int *mode);
int gpuc_split_plan(OpCtx *c, int *axis, int64_t *sizes);

#define VIEW_MAX (2 * GPUC_MAX_RANK)
typedef long long ll;

/* The node's view as the OpCtx the planning functions take (they only
 * read in[], the node and the counts; out[] is not written). */
static OpCtx plan_ctx(LowerCtx *c) {
  return (OpCtx){.g = c->g, .n = c->n, .nin = c->nin, .nout = c->nout, .in = c->in,
                 .out = (Tensor **)c->out, .err = c->err};
}

/* Output o becomes a view of src when the planner allows, else a copy. */
static int alias_or_copy(LowerCtx *c, int o, uint32_t src, uint64_t bytes) {
  int r = cg_alias(c, o, src);
  if (r <= 0) return r;
  return cg_copy(c, src, c->tout[o], bytes);
}

/* A kernel storing n baked elements (bit patterns, little-endian from
 * `data`) into dst. Used for Shape/Size: values known at compile time. */
static int emit_const_values(LowerCtx *c, uint32_t dst, GpucDType dt, int64_t n, const void *data) {
  if (n <= 0) return 0;
  if (n > 65536) return lower_unsupported(c, "a baked constant of %lld elements", (ll)n);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  const char *t = cg_bits_type(dt);
  size_t es = gpuc_dtype_size(dt);
  sb_printf(b, "__device__ const %s %s_vals[%lld] = {", t, name, (ll)n);
  for (int64_t i = 0; i < n; i++)
    sb_printf(b, "%s0x%llxULL", i ? ", " : "", cg_elem_bits(dt, (const char *)data + i * (int64_t)es));
  sb_printf(b, "};\nextern \"C\" __global__ void %s(%s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) y[i] = %s_vals[i];\n}\n", name, t, (ll)n, name);
  uint32_t args[1] = {dst};
  return cg_launch_items(c, name, (uint64_t)n, 1, args);
}

/* ---- strided views -------------------------------------------------------- */

typedef struct View {
  int rank;
  int64_t dims[VIEW_MAX], st[VIEW_MAX], off;
} View;

/* Drop unit dims; merge an outer dim into the next inner one when it is
 * contiguous with it in the source (st_outer == st_inner * dim_inner). */
static void view_collapse(View *v) {
  View o = {.rank = 0, .off = v->off};
  for (int k = 0; k < v->rank; k++) {
    if (v->dims[k] == 1) continue;
    o.dims[o.rank] = v->dims[k];
    o.st[o.rank] = v->st[k];
    o.rank++;
  }
  /* merge from the inside out */
  View m = {.rank = 0, .off = o.off};
  for (int k = o.rank - 1; k >= 0; k--) {
    if (m.rank > 0 && o.st[k] == m.st[0] * m.dims[0]) {
      m.dims[0] *= o.dims[k];
      continue;
    }
    memmove(m.dims + 1, m.dims, sizeof(int64_t) * (size_t)m.rank);
    memmove(m.st + 1, m.st, sizeof(int64_t) * (size_t)m.rank);
    m.dims[0] = o.dims[k];
    m.st[0] = o.st[k];
    m.rank++;
  }
  *v = m;
}

/* Emit "i64 r = <idx>, <acc> = <off>; ..." decomposing the row-major index
 * over the view's dims, innermost first, adding digit * stride to acc. */
static void emit_decompose(StrBuf *b, const char *idx, const char *acc, int rank, const int64_t *dims,
                           const int64_t *st, int64_t off, const char *indent) {
  sb_printf(b, "%si64 r_ = %s, %s = %lldLL;\n", indent, idx, acc, (ll)off);
  if (rank == 0) sb_printf(b, "%s(void)r_;\n", indent);
  for (int k = rank - 1; k >= 0; k--) {
    if (k == 0) {
      if (st[k]) sb_printf(b, "%s%s += r_ * %lldLL;\n", indent, acc, (ll)st[k]);
      else sb_printf(b, "%s(void)r_;\n", indent);
    } else {
      sb_printf(b, "%s{ i64 d_ = r_ %% %lldLL; r_ /= %lldLL; %s += d_ * %lldLL; }\n", indent,
                (ll)dims[k], (ll)dims[k], acc, (ll)st[k]);
    }
  }
}

/* Batched 2-D transpose through shared memory: view dim pa has source
 * stride 1 (the source's innermost dim), the view's last dim pb has
 * destination stride 1. Returns 1 when the grid would not fit (the caller
 * then uses the plain kernel). */
static int emit_transpose_tiled(LowerCtx *c, uint32_t src, uint32_t dst, GpucDType dt, const View *v,
                                int pa) {
  int R = v->rank, pb = R - 1;
  int64_t ost[VIEW_MAX]; /* row-major strides of the output (the view's dims) */
  int64_t s = 1;
  for (int k = R - 1; k >= 0; k--) { ost[k] = s; s *= v->dims[k]; }
  int64_t A = v->dims[pa], B = v->dims[pb], rest = 1;
  int64_t rd[VIEW_MAX], rxs[VIEW_MAX], rys[VIEW_MAX];
  int nr = 0;
  for (int k = 0; k < R; k++) {
    if (k == pa || k == pb) continue;
    rd[nr] = v->dims[k];
    rxs[nr] = v->st[k];
    rys[nr] = ost[k];
    rest *= v->dims[k];
    nr++;
  }
  int64_t gx = (A + 31) / 32, gy = (B + 31) / 32;
  if (gx > 0x7fffffff || gy > 65535) return 1;
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  const char *t = cg_bits_type(dt);
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(256) %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  __shared__ %s tile[32][33];\n"
               "  for (i64 z = blockIdx.z; z < %lldLL; z += gridDim.z) {\n",
            name, t, t, t, (ll)rest);
  /* base offsets of this (rest) index in x and y */
  sb_printf(b, "    i64 r_ = z, xb = %lldLL, yb = 0;\n", (ll)v->off);
  for (int k = nr - 1; k >= 0; k--)
    sb_printf(b, "    { i64 d_ = r_ %% %lldLL; r_ /= %lldLL; xb += d_ * %lldLL; yb += d_ * %lldLL; }\n",
              (ll)rd[k], (ll)rd[k], (ll)rxs[k], (ll)rys[k]);
  sb_printf(b, "    (void)r_;\n"
               "    i64 a0 = (i64)blockIdx.x * 32, b0 = (i64)blockIdx.y * 32;\n"
               "    for (int j = threadIdx.y; j < 32; j += 8) {\n"
               "      i64 a = a0 + threadIdx.x, bb = b0 + j;\n"
               "      if (a < %lldLL && bb < %lldLL) tile[j][threadIdx.x] = x[xb + bb * %lldLL + a];\n"
               "    }\n"
               "    __syncthreads();\n"
               "    for (int j = threadIdx.y; j < 32; j += 8) {\n"
               "      i64 a = a0 + j, bb = b0 + threadIdx.x;\n"
               "      if (a < %lldLL && bb < %lldLL) y[yb + a * %lldLL + bb] = tile[threadIdx.x][j];\n"
               "    }\n"
               "    __syncthreads();\n"
               "  }\n}\n",
            (ll)A, (ll)B, (ll)v->st[pb], (ll)A, (ll)B, (ll)ost[pa]);
  unsigned grid[3] = {(unsigned)gx, (unsigned)gy, (unsigned)(rest < 65535 ? rest : 65535)};
  unsigned block[3] = {32, 8, 1};
  uint32_t args[2] = {src, dst};
  return cg_launch_grid(c, name, grid, block, 0, 2, args);
}

/* dst (row-major over dims[0..rank)) [i] = src[off + sum_k i_k * st_k].
 * src_numel is the source's element count: a view that is exactly the
 * whole source in order becomes an alias of output o (or a byte copy).
 * `tiled` allows the shared-memory transpose kernel. */
static int emit_view(LowerCtx *c, int o, uint32_t src, int64_t src_numel, GpucDType dt, int rank,
                     const int64_t *dims, const int64_t *st, int64_t off, bool tiled) {
  uint32_t dst = c->tout[o];
  View v = {.rank = rank, .off = off};
  int64_t n = 1;
  for (int k = 0; k < rank; k++) {
    v.dims[k] = dims[k];
    v.st[k] = st[k];
    n *= dims[k];
  }
  if (n == 0) return 0; /* nothing to move */
  view_collapse(&v);
  size_t es = gpuc_dtype_size(dt);
  if (n == src_numel && off == 0 && (v.rank == 0 || (v.rank == 1 && v.st[0] == 1)))
    return alias_or_copy(c, o, src, (uint64_t)n * es);
  if (tiled && v.rank >= 2 && v.st[v.rank - 1] != 1) {
    int pa = -1;
    for (int k = 0; k < v.rank - 1; k++)
      if (v.st[k] == 1) pa = k;
    if (pa >= 0 && v.dims[pa] >= 8 && v.dims[v.rank - 1] >= 8) {
      int r = emit_transpose_tiled(c, src, dst, dt, &v, pa);
      if (r <= 0) return r;
    }
  }
  /* a contiguous innermost run moves as 16-, 8- or 4-byte words when every
   * stride and the offset allow (buffers are 256-byte aligned) */
  const char *t = cg_bits_type(dt);
  if (v.rank >= 1 && v.st[v.rank - 1] == 1) {
    static const struct { size_t bytes; const char *type; } words[] = {
        {16, "uint4"}, {8, "unsigned long long"}, {4, "unsigned int"}};
    for (int w = 0; w < 3; w++) {
      if (words[w].bytes <= es || words[w].bytes % es) continue;
      int64_t k = (int64_t)(words[w].bytes / es);
      bool ok = v.dims[v.rank - 1] % k == 0 && v.off % k == 0;
      for (int d = 0; d + 1 < v.rank && ok; d++) ok = v.st[d] % k == 0;
      if (!ok) continue;
      for (int d = 0; d + 1 < v.rank; d++) v.st[d] /= k;
      v.dims[v.rank - 1] /= k;
      v.off /= k;
      n /= k;
      t = words[w].type;
      break;
    }
  }
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
               "  GRID_STRIDE(i, %lldLL) {\n", name, t, t, (ll)n);
  emit_decompose(b, "i", "s", v.rank, v.dims, v.st, v.off, "    ");
  sb_printf(b, "    y[i] = x[s];\n  }\n}\n");
  uint32_t args[2] = {src, dst};
  return cg_launch_items(c, name, (uint64_t)n, 2, args);
}

/* ---- Shape, Size ------------------------------------------------------------ */

int lower_Shape(LowerCtx *c) {
  const Tensor *x = c->in[0];
  int64_t r = x->rank, start = gpuc_attr_i(c->n, "start", 0);
  if (start < 0) start += r;
  start = start < 0 ? 0 : start > r ? r : start;
  int64_t len = c->out[0]->dims[0], vals[GPUC_MAX_RANK];
  if (start + len > r) return lower_fail(c, "shape range out of the input's rank");
  for (int64_t i = 0; i < len; i++) vals[i] = x->dims[start + i];
  return emit_const_values(c, c->tout[0], GPUC_DT_I64, len, vals);
}

int lower_Size(LowerCtx *c) {
  int64_t n = gpuc_numel(c->in[0]);
  return emit_const_values(c, c->tout[0], GPUC_DT_I64, 1, &n);
}

/* ---- pure relabelling: same bytes, new shape ----------------------------- */

static int relabel(LowerCtx *c) {
  size_t bytes = gpuc_tensor_bytes(c->out[0]);
  if (bytes != gpuc_tensor_bytes(c->in[0]))
    return lower_fail(c, "output and input sizes differ (%zu vs %zu bytes)", bytes,
                      gpuc_tensor_bytes(c->in[0]));
  return alias_or_copy(c, 0, c->tin[0], bytes);
}

int lower_Reshape(LowerCtx *c) { return relabel(c); }
int lower_Flatten(LowerCtx *c) { return relabel(c); }
int lower_Squeeze(LowerCtx *c) { return relabel(c); }
int lower_Unsqueeze(LowerCtx *c) { return relabel(c); }

/* ---- Transpose, Concat, Split --------------------------------------------- */

int lower_Transpose(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int r = x->rank;
  int64_t xs[GPUC_MAX_RANK], st[GPUC_MAX_RANK];
  gpuc_strides(x, xs);
  const int64_t *perm;
  int n = gpuc_attr_ints(c->n, "perm", &perm);
  for (int k = 0; k < r; k++) {
    int64_t p = n < 0 ? r - 1 - k : perm[k] < 0 ? perm[k] + r : perm[k];
    if (p < 0 || p >= r || y->dims[k] != x->dims[p]) return lower_fail(c, "bad perm");
    st[k] = xs[p];
  }
  return emit_view(c, 0, c->tin[0], gpuc_numel(x), x->dt, r, y->dims, st, 0, true);
}

/* With the output seen as [outer, Yc] (Yc = the elements of one outer
 * index) input k, seen as [outer, Xc_k], lands at column offset
 * sum_{j<k} Xc_j. One kernel for all inputs, a thread a V-element chunk of Y (V: the most
 * elements up to 16 bytes that divide every input's run and offset along
 * the axis, so a chunk never straddles two inputs): its input found by its
 * column, read as one vector. Per-input kernels copying one element a
 * thread ran at 650 GB/s on the H200 (Swin V2's torch.roll, a Concat of two
 * Slices along H of [32,56,56,96] half); Y is written in order. */
int lower_Concat(LowerCtx *c) {
  const Tensor *y = c->out[0];
  int r = y->rank, axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 1), r, &axis)) return -1;
  int64_t outer = gpuc_shape_numel(axis, y->dims);
  int64_t Yc = gpuc_shape_numel(r - axis, y->dims + axis);
  size_t es = gpuc_dtype_size(y->dt);
  if (outer == 0 || Yc == 0) return 0;
  if (c->nin == 1) return alias_or_copy(c, 0, c->tin[0], gpuc_tensor_bytes(y));
  int V = es >= 1 && es <= 16 ? (int)(16 / es) : 1;
  for (int k = 0; k < c->nin; k++)
    while (V > 1 && gpuc_shape_numel(r - axis, c->in[k]->dims + axis) % V) V /= 2;
  static const char *vt[5] = {"unsigned char", "unsigned short", "unsigned int", "uint2", "uint4"};
  int lg = 0;
  while ((1u << lg) < (unsigned)(V * (int)es)) lg++;
  const char *t = V == 1 ? cg_bits_type(y->dt) : vt[lg]; /* V * es is 2..16 bytes */
  int64_t n = outer * (Yc / V), yc = Yc / V, off = 0;
  bool i32 = n <= 0x7fffffffLL;
  const char *it = i32 ? "unsigned" : "i64";
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  uint32_t args[GPUC_MAX_IO + 1];
  int na = 0;
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  for (int k = 0; k < c->nin; k++) {
    if (gpuc_shape_numel(r - axis, c->in[k]->dims + axis) == 0) continue;
    sb_printf(b, "const %s* __restrict__ x%d, ", t, k);
    args[na++] = c->tin[k];
  }
  sb_printf(b, "%s* __restrict__ y) {\n  GRID_STRIDE(i, %lldLL) {\n"
               "    const %s o = (%s)i / %lld%s, j = (%s)i - o * %lld%s;\n    ",
            t, (ll)n, it, it, (ll)yc, i32 ? "u" : "LL", it, (ll)yc, i32 ? "u" : "LL");
  args[na++] = c->tout[0];
  for (int k = 0; k < c->nin; k++) {
    int64_t xc = gpuc_shape_numel(r - axis, c->in[k]->dims + axis) / V;
    if (xc == 0) continue;
    bool last = off + xc == yc;
    if (!last) sb_printf(b, "if (j < %lld%s) ", (ll)(off + xc), i32 ? "u" : "LL");
    sb_printf(b, "y[i] = x%d[o * %lld%s + (j - %lld%s)];\n    %s", k, (ll)xc, i32 ? "u" : "LL", (ll)off,
              i32 ? "u" : "LL", last ? "" : "else ");
    off += xc;
  }
  sb_printf(b, "\n  }\n}\n");
  return cg_launch_items(c, name, (uint64_t)n, na, args);
}

/* The reverse of Concat: one kernel per used output. Sizes come from the
 * split plan; when the split input is not a constant, the used outputs'
 * shapes still tell theirs (an unused output in that case is unknown). */
int lower_Split(LowerCtx *c) {
  const Tensor *x = c->in[0];
  int axis = 0;
  int64_t *sizes = malloc(sizeof(int64_t) * (size_t)(c->nout + 1));
  if (!sizes) return lower_fail(c, "out of host memory");
  OpCtx oc = plan_ctx(c);
  int rc = gpuc_split_plan(&oc, &axis, sizes);
  if (rc < 0) { free(sizes); return -1; }
  if (rc == 1) {
    int64_t known = 0;
    int missing = -1, nmissing = 0;
    for (int k = 0; k < c->nout; k++) {
      if (c->out[k]) { sizes[k] = c->out[k]->dims[axis]; known += sizes[k]; }
      else { missing = k; nmissing++; }
    }
    if (nmissing > 1) {
      free(sizes);
      return lower_unsupported(c, "split sizes unknown at compile time with several unused outputs");
    }
    if (nmissing == 1) sizes[missing] = x->dims[axis] - known;
  }
  int64_t outer = gpuc_shape_numel(axis, x->dims);
  int64_t inner = gpuc_shape_numel(x->rank - axis - 1, x->dims + axis + 1);
  int64_t Xc = x->dims[axis] * inner, off = 0;
  const char *t = cg_bits_type(x->dt);
  for (int k = 0; k < c->nout; k++) {
    int64_t Yc = sizes[k] * inner;
    if (c->out[k] && Yc > 0 && outer > 0) {
      if (Yc == Xc) {
        if (alias_or_copy(c, k, c->tin[0], gpuc_tensor_bytes(c->out[k]))) { free(sizes); return -1; }
      } else {
        StrBuf *b = cg_src(c);
        const char *name = cg_kernel_name(c);
        sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, %s* __restrict__ y) {\n"
                     "  GRID_STRIDE(i, %lldLL) { i64 o = i / %lldLL, j = i - o * %lldLL; y[i] = x[o * %lldLL + %lldLL + j]; }\n}\n",
                  name, t, t, (ll)(outer * Yc), (ll)Yc, (ll)Yc, (ll)Xc, (ll)off);
        uint32_t args[2] = {c->tin[0], c->tout[k]};
        if (cg_launch_items(c, name, (uint64_t)(outer * Yc), 2, args)) { free(sizes); return -1; }
      }
    }
    off += Yc;
  }
  free(sizes);
  return 0;
}

/* ChannelShuffle with the channel axis last (NHWC): rows of C channels,
 * each input a [P, Ck] and each output a [P, nj] contiguous array. A block
 * of 256 threads takes TP rows: it copies every input's TP * Ck elements
 * (one contiguous run) into a shared [TP, C] tile in 16-byte vectors,
 * then writes every output's TP * nj elements in 16-byte vectors, each
 * element read from the tile at its source channel. TP is a multiple of
 * the vector, so every block's runs start 16-byte aligned; a last partial
 * vector of a run moves element by element. One element a thread (the
 * items kernel below) ran at 850 GB/s on the H200 (shufflenet_v2 b32,
 * [32,28,28,116] half). Returns 1 when the tile does not fit. */
static int shuffle_rows_tile(LowerCtx *c, int64_t P, int64_t C, int64_t group, const int64_t *st) {
  GpucDType dt = c->in[0]->dt;
  size_t es = gpuc_dtype_size(dt);
  if (es < 1 || es > 8 || 16 % es) return 1;
  int64_t V = 16 / (int64_t)es, cap = 24576 / (C * (int64_t)es), TP = (P + 263) / 264;
  cap -= cap % V;
  if (cap < V) return 1;
  TP = (TP + V - 1) / V * V;
  if (TP > cap) TP = cap;
  int64_t blocks = (P + TP - 1) / TP; /* a block's indices (< TP * C <= 24576) are ints */
  if (blocks > 0x7fffffffLL) return 1;
  const char *t = cg_bits_type(dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  uint32_t args[2 * GPUC_MAX_IO + 2];
  int na = 0;
  sb_printf(b, "extern \"C\" __global__ void __launch_bounds__(256) %s(", name);
  for (int k = 0; k < c->nin; k++) {
    sb_printf(b, "const %s* __restrict__ x%d, ", t, k);
    args[na++] = c->tin[k];
  }
  bool first = true;
  for (int j = 0; j < c->nout; j++) {
    if (!c->out[j]) continue;
    sb_printf(b, "%s%s* __restrict__ y%d", first ? "" : ", ", t, j);
    args[na++] = c->tout[j];
    first = false;
  }
  sb_printf(b, ") {\n  __shared__ %s sh[%lld];\n"
               "  const i64 p0 = (i64)blockIdx.x * %lldLL;\n"
               "  const i64 rows = %lldLL - p0 < %lldLL ? %lldLL - p0 : %lldLL;\n",
            t, (ll)(TP * C), (ll)TP, (ll)P, (ll)TP, (ll)P, (ll)TP);
  int64_t off = 0;
  for (int k = 0; k < c->nin; k++) {
    int64_t ck = c->in[k]->dims[c->in[k]->rank - 1];
    if (ck == 0) continue;
    sb_printf(b, "  { const int n = (int)rows * %lld; const %s* src = x%d + p0 * %lldLL;\n"
                 "    for (int e = (int)threadIdx.x * %lld; e < n; e += %lld) {\n"
                 "      Vec<%s, %lld> w;\n"
                 "      if (e + %lld <= n) w = *(const Vec<%s, %lld>*)(src + e);\n"
                 "      else for (int u = 0; u < %lld && e + u < n; u++) w.v[u] = src[e + u];\n"
                 "      for (int u = 0; u < %lld && e + u < n; u++) sh[((e + u) / %lld) * %lld + %lld + (e + u) %% %lld] = w.v[u];\n"
                 "    } }\n",
              (ll)ck, t, k, (ll)ck, (ll)V, (ll)(256 * V), t, (ll)V, (ll)V, t, (ll)V, (ll)V, (ll)V,
              (ll)ck, (ll)C, (ll)off, (ll)ck);
    off += ck;
  }
  sb_printf(b, "  __syncthreads();\n");
  for (int j = 0; j < c->nout; j++) {
    if (!c->out[j]) continue;
    int64_t n = c->out[j]->dims[c->out[j]->rank - 1];
    if (n == 0) continue;
    sb_printf(b, "  { const int n = (int)rows * %lld; %s* dst = y%d + p0 * %lldLL;\n"
                 "    for (int e = (int)threadIdx.x * %lld; e < n; e += %lld) {\n"
                 "      Vec<%s, %lld> w;\n"
                 "      for (int u = 0; u < %lld; u++) {\n"
                 "        const int q = e + u < n ? e + u : n - 1, ch = q %% %lld + %lld;\n"
                 "        w.v[u] = sh[(q / %lld) * %lld + (ch %% %lld) * %lld + ch / %lld];\n"
                 "      }\n"
                 "      if (e + %lld <= n) *(Vec<%s, %lld>*)(dst + e) = w;\n"
                 "      else for (int u = 0; u < %lld && e + u < n; u++) dst[e + u] = w.v[u];\n"
                 "    } }\n",
              (ll)n, t, j, (ll)n, (ll)V, (ll)(256 * V), t, (ll)V, (ll)V, (ll)n, (ll)st[j], (ll)n, (ll)C,
              (ll)group, (ll)(C / group), (ll)group, (ll)V, t, (ll)V, (ll)V);
  }
  sb_printf(b, "}\n");
  unsigned grid[3] = {(unsigned)blocks, 1, 1}, blk[3] = {256, 1, 1};
  return cg_launch_grid(c, name, grid, blk, 0, na, args);
}

/* ChannelShuffle (ir/ops.def): with the channel axis last, shuffle_rows_tile;
 * else one kernel for all outputs, a thread a V-element chunk of one
 * output's run along the inner dims (V: the most elements up to 16 bytes
 * dividing that run, so NCHW's H*W moves as vectors).
 * Output j's items come after output j-1's; a chunk's shuffled channel t
 * reads channel (t % g) * (C / g) + t / g of the concatenation, found in
 * its input by the running channel offsets. */
int lower_ChannelShuffle(LowerCtx *c) {
  const Tensor *x = c->in[0];
  int r = x->rank, axis;
  if (gpuc_norm_axis(LOWER_OPCTX(c), gpuc_attr_i(c->n, "axis", 1), r, &axis)) return -1;
  int64_t group = gpuc_attr_i(c->n, "group", 1), C = 0;
  const int64_t *st;
  if (gpuc_attr_ints(c->n, "starts", &st) != c->nout) return lower_fail(c, "needs a start per output");
  for (int k = 0; k < c->nin; k++) C += c->in[k]->dims[axis];
  int64_t outer = gpuc_shape_numel(axis, x->dims), inner = gpuc_shape_numel(r - axis - 1, x->dims + axis + 1);
  size_t es = gpuc_dtype_size(x->dt);
  int V = es >= 1 && es <= 16 ? (int)(16 / es) : 1;
  while (V > 1 && inner % V) V /= 2;
  static const char *vt[5] = {"unsigned char", "unsigned short", "unsigned int", "uint2", "uint4"};
  int lg = 0;
  while ((1u << lg) < (unsigned)(V * (int)es)) lg++;
  const char *t = V == 1 ? cg_bits_type(x->dt) : vt[lg];
  int64_t iv = inner / V, total = 0;
  for (int j = 0; j < c->nout; j++)
    if (c->out[j]) total += outer * c->out[j]->dims[axis] * iv;
  if (total == 0 || C == 0) return 0;
  if (inner == 1 && !getenv("GPUC_SHUFFLE_ITEMS")) { /* GPUC_SHUFFLE_ITEMS=1: the items kernel (A/B) */
    int rc = shuffle_rows_tile(c, outer, C, group, st);
    if (rc <= 0) return rc;
  }
  bool i32 = outer * C * iv <= 0x7fffffffLL && total <= 0x7fffffffLL;
  const char *it = i32 ? "unsigned" : "i64", *sf = i32 ? "u" : "LL";
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  uint32_t args[2 * GPUC_MAX_IO + 2];
  int na = 0;
  if (c->nin + c->nout > 2 * GPUC_MAX_IO) return lower_unsupported(c, "%d inputs and %d outputs", c->nin, c->nout);
  sb_printf(b, "extern \"C\" __global__ void %s(", name);
  for (int k = 0; k < c->nin; k++) {
    sb_printf(b, "const %s* __restrict__ x%d, ", t, k);
    args[na++] = c->tin[k];
  }
  bool first = true;
  for (int j = 0; j < c->nout; j++) {
    if (!c->out[j]) continue;
    sb_printf(b, "%s%s* __restrict__ y%d", first ? "" : ", ", t, j);
    args[na++] = c->tout[j];
    first = false;
  }
  sb_printf(b, ") {\n  GRID_STRIDE(i, %lldLL) {\n", (ll)total);
  int64_t base = 0;
  for (int j = 0; j < c->nout; j++) {
    if (!c->out[j]) continue;
    int64_t n = c->out[j]->dims[axis], items = outer * n * iv;
    if (base + items == total) sb_printf(b, "    %s{\n", base ? "else " : "");
    else sb_printf(b, "    %sif (i < %lld%s) {\n", base ? "else " : "", (ll)(base + items), sf);
    sb_printf(b, "      const %s q = (%s)i - %lld%s, w = q %% %lld%s, rc = q / %lld%s;\n"
                 "      const %s o = rc / %lld%s, t = rc %% %lld%s + %lld%s;\n"
                 "      const %s s = (t %% %lld%s) * %lld%s + t / %lld%s;\n",
              it, it, (ll)base, sf, (ll)iv, sf, (ll)iv, sf, it, (ll)n, sf, (ll)n, sf, (ll)st[j], sf,
              it, (ll)group, sf, (ll)(C / group), sf, (ll)group, sf);
    int64_t off = 0;
    for (int k = 0; k < c->nin; k++) {
      int64_t ck = c->in[k]->dims[axis];
      if (ck == 0) continue;
      sb_printf(b, "      %s", off ? "else " : "");
      if (off + ck < C) sb_printf(b, "if (s < %lld%s) ", (ll)(off + ck), sf);
      sb_printf(b, "y%d[q] = x%d[(o * %lld%s + (s - %lld%s)) * %lld%s + w];\n", j, k, (ll)ck, sf, (ll)off, sf,
                (ll)iv, sf);
      off += ck;
    }
    sb_printf(b, "    }\n");
    base += items;
  }
  sb_printf(b, "  }\n}\n");
  return cg_launch_items(c, name, (uint64_t)total, na, args);
}

/* ---- Slice, Expand, Tile ----------------------------------------------------- */

int lower_Slice(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int r = x->rank;
  int64_t start[GPUC_MAX_RANK], step[GPUC_MAX_RANK], count[GPUC_MAX_RANK], xs[GPUC_MAX_RANK],
      st[GPUC_MAX_RANK], off = 0;
  OpCtx oc = plan_ctx(c);
  int rc = gpuc_slice_plan(&oc, start, step, count);
  if (rc < 0) return -1;
  if (rc == 1) return lower_unsupported(c, "Slice whose starts/ends/axes/steps are not constants");
  gpuc_strides(x, xs);
  for (int k = 0; k < r; k++) {
    if (count[k] != y->dims[k]) return lower_fail(c, "slice plan disagrees with the output");
    off += start[k] * xs[k];
    st[k] = step[k] * xs[k];
  }
  return emit_view(c, 0, c->tin[0], gpuc_numel(x), x->dt, r, y->dims, st, off, false);
}

/* Broadcast x (right-aligned) to the output: stride 0 on dims of size 1. */
int lower_Expand(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int R = y->rank, off = R - x->rank;
  int64_t xs[GPUC_MAX_RANK], st[GPUC_MAX_RANK];
  if (off < 0) return lower_fail(c, "output rank below the input's");
  gpuc_strides(x, xs);
  for (int k = 0; k < R; k++) {
    int j = k - off;
    if (j >= 0 && x->dims[j] != 1 && x->dims[j] != y->dims[k])
      return lower_fail(c, "dim %d does not broadcast", k);
    st[k] = j >= 0 && x->dims[j] != 1 ? xs[j] : 0;
  }
  return emit_view(c, 0, c->tin[0], gpuc_numel(x), x->dt, R, y->dims, st, 0, false);
}

/* Output axis k (rep_k * d_k) is the pair (repeat, position): a rank-2r
 * view [rep0, d0, rep1, d1, ...] with strides [0, s0, 0, s1, ...]. */
int lower_Tile(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int r = x->rank;
  int64_t xs[GPUC_MAX_RANK], vd[VIEW_MAX], vs[VIEW_MAX];
  if (gpuc_numel(y) == 0) return 0;
  gpuc_strides(x, xs);
  for (int k = 0; k < r; k++) {
    if (x->dims[k] == 0 || y->dims[k] % x->dims[k])
      return lower_fail(c, "output dim %d is not a multiple of the input's", k);
    vd[2 * k] = y->dims[k] / x->dims[k];
    vs[2 * k] = 0;
    vd[2 * k + 1] = x->dims[k];
    vs[2 * k + 1] = xs[k];
  }
  return emit_view(c, 0, c->tin[0], gpuc_numel(x), x->dt, 2 * r, vd, vs, 0, false);
}

/* ---- Pad -------------------------------------------------------------------- */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP }; /* gpuc_pad_plan's order */

/* Per output element: along each axis the source coordinate is
 * pad_source() of ref_shape.c (the axis keeps [lo, lo + n) of the input
 * after cropping, pb elements are added in front); any axis landing in the
 * constant region makes the element the pad value. */
int lower_Pad(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int r = x->rank, mode;
  int64_t before[GPUC_MAX_RANK], after[GPUC_MAX_RANK], xs[GPUC_MAX_RANK];
  OpCtx oc = plan_ctx(c);
  int rc = gpuc_pad_plan(&oc, before, after, &mode);
  if (rc < 0) return -1;
  if (rc == 1) return lower_unsupported(c, "Pad whose pads/axes are not constants");
  int64_t n_out = gpuc_numel(y);
  if (n_out == 0) return 0;
  const char *t = cg_bits_type(x->dt);
  /* the pad value: the constant_value input (opset 11+; a runtime read when
   * it is not a constant), else the 'value' attribute, else zero */
  bool value_ptr = false;
  unsigned long long value = 0;
  if (c->nin > 2 && c->in[2]) {
    if (gpuc_numel(c->in[2]) >= 1) {
      if (c->in[2]->data) value = cg_elem_bits(x->dt, c->in[2]->data);
      else value_ptr = true;
    }
  } else {
    char elem[16] = {0};
    Tensor tv = {.dt = x->dt, .rank = 0, .data = elem};
    gpuc_set_f64(&tv, 0, gpuc_attr_f(c->n, "value", 0.0f));
    value = cg_elem_bits(x->dt, elem);
  }
  if (r == 0) return alias_or_copy(c, 0, c->tin[0], gpuc_tensor_bytes(y));
  gpuc_strides(x, xs);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, ", name, t);
  if (value_ptr) sb_printf(b, "const %s* __restrict__ pv, ", t);
  sb_printf(b, "%s* __restrict__ y) {\n", t);
  if (value_ptr) sb_printf(b, "  const %s v = pv[0];\n", t);
  else sb_printf(b, "  const %s v = (%s)0x%llxULL;\n", t, t, value);
  sb_printf(b, "  GRID_STRIDE(i, %lldLL) {\n    i64 r_ = i, s = 0, o, q;\n    bool ok = true;\n", (ll)n_out);
  for (int k = r - 1; k >= 0; k--) {
    int64_t lo = before[k] < 0 ? -before[k] : 0, pb = before[k] > 0 ? before[k] : 0;
    int64_t n = x->dims[k] - lo - (after[k] < 0 ? -after[k] : 0);
    if (y->dims[k] != n + pb + (after[k] > 0 ? after[k] : 0))
      return lower_fail(c, "pad plan disagrees with the output");
    if (k > 0) sb_printf(b, "    o = r_ %% %lldLL; r_ /= %lldLL;\n", (ll)y->dims[k], (ll)y->dims[k]);
    else sb_printf(b, "    o = r_;\n");
    if (pb == 0 && lo == 0 && n == y->dims[k]) { /* untouched axis */
      sb_printf(b, "    s += o * %lldLL;\n", (ll)xs[k]);
      continue;
    }
    sb_printf(b, "    q = o - %lldLL;\n    if (q < 0 || q >= %lldLL) {\n", (ll)pb, (ll)n);
    switch (mode) {
    case PAD_EDGE: sb_printf(b, "      q = q < 0 ? 0 : %lldLL;\n", (ll)(n - 1)); break;
    case PAD_WRAP: sb_printf(b, "      q = ((q %% %lldLL) + %lldLL) %% %lldLL;\n", (ll)n, (ll)n, (ll)n); break;
    case PAD_REFLECT:
      if (n == 1) sb_printf(b, "      q = 0;\n");
      else {
        int64_t p = 2 * (n - 1);
        sb_printf(b, "      q = ((q %% %lldLL) + %lldLL) %% %lldLL; q = q < %lldLL ? q : %lldLL - q;\n",
                  (ll)p, (ll)p, (ll)p, (ll)n, (ll)p);
      }
      break;
    default: sb_printf(b, "      ok = false; q = 0;\n"); break;
    }
    sb_printf(b, "    }\n    s += (q + %lldLL) * %lldLL;\n", (ll)lo, (ll)xs[k]);
  }
  sb_printf(b, "    y[i] = ok ? x[s] : v;\n  }\n}\n");
  uint32_t args[3] = {c->tin[0], value_ptr ? c->tin[2] : c->tout[0], c->tout[0]};
  return cg_launch_items(c, name, (uint64_t)n_out, value_ptr ? 3 : 2, args);
}

/* ---- Trilu ---------------------------------------------------------------- */

/* y = x with the elements outside the band zeroed: upper keeps
 * col >= row + k, lower keeps col <= row + k. k is baked when constant,
 * else read from its tensor; it is bounded to +-(rows + cols) first, beyond
 * which every k behaves the same (as in the reference). */
int lower_Trilu(LowerCtx *c) {
  const Tensor *x = c->in[0], *y = c->out[0];
  int r = x->rank;
  int64_t rows = x->dims[r - 2], cols = x->dims[r - 1], n = gpuc_numel(y), lim = rows + cols;
  bool upper = gpuc_attr_i(c->n, "upper", 1) != 0;
  const Tensor *kt = c->nin > 1 ? c->in[1] : NULL;
  bool k_ptr = kt && !kt->data;
  int64_t k = kt && kt->data ? gpuc_get_i64(kt, 0) : 0;
  k = k > lim ? lim : k < -lim ? -lim : k;
  if (n == 0) return 0;
  const char *t = cg_bits_type(x->dt);
  StrBuf *b = cg_src(c);
  const char *name = cg_kernel_name(c);
  sb_printf(b, "extern \"C\" __global__ void %s(const %s* __restrict__ x, ", name, t);
  if (k_ptr) sb_printf(b, "const %s* __restrict__ kp, ", cg_ctype(kt->dt));
  sb_printf(b, "%s* __restrict__ y) {\n", t);
  if (k_ptr)
    sb_printf(b, "  i64 k = (i64)kp[0]; k = k > %lldLL ? %lldLL : (k < -%lldLL ? -%lldLL : k);\n",
              (ll)lim, (ll)lim, (ll)lim, (ll)lim);
  else sb_printf(b, "  const i64 k = %lldLL;\n", (ll)k);
  sb_printf(b, "  GRID_STRIDE(i, %lldLL) {\n"
               "    i64 col = i %% %lldLL, row = (i / %lldLL) %% %lldLL;\n"
               "    y[i] = (col %s row + k) ? (%s)0 : x[i];\n  }\n}\n",
            (ll)n, (ll)cols, (ll)cols, (ll)rows, upper ? "<" : ">", t);
  uint32_t args[3] = {c->tin[0], k_ptr ? c->tin[1] : c->tout[0], c->tout[0]};
  return cg_launch(c, name, (uint64_t)n, 256, 0, k_ptr ? 3 : 2, args);
}
