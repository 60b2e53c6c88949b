#!/usr/bin/env python3
"""The NHWC depthwise kernel (codegen/lower_dwconv.c) and the NHWC
GlobalAveragePool kernels (codegen/lower_se.c) run on the host.

No GPU here, so the kernel's own text is checked instead: for each case a
tiny ONNX model (depthwise Conv + bias + activation, batch 2) is compiled
`-O2 --fp16` (or --bf16) for sm_90 with GPUC_SAVE_SOURCE set; the
depthwise kernel is cut out of the module source, compiled by the host C++
compiler under a small shim (half as _Float16, bf16 rounded to nearest
even, GRID_STRIDE as a plain loop over the items, `#pragma unroll`
ignored), and run on random NHWC inputs with the weights laid out as the
lowering lays them out (f32 [R,S,C], f32 bias). Its output must match a
float64 numpy depthwise convolution + activation of the same half-rounded
values within the half type's rounding of the result (fp16 2e-3, bf16
1.6e-2 of max |y|). Cases cover 3/5/7 and non-square kernels, strides 1
and 2, symmetric and asymmetric pads, C a multiple of 4 (8-byte vectors),
of 2 and odd (scalar), row tails (OW not a multiple of the pixels per
thread), each activation the fusion makes after the convolution and
input activations (applied as the kernel loads X). The pool's two kernels
(partial sums over pixel slices, then their fixed-order sum) run on
random fp16 [2,H,W,C] against numpy's mean (2e-3 of max |y|).
Both kernels of codegen/lower_dwconv.c: the tiled one (forced with
GPUC_DWCONV_TILED=1 in most cases; its CTAs run on host threads, one a
CUDA thread, __syncthreads a barrier), the row one (C not a multiple of 8
halves, and GPUC_DWCONV_V1=1), and the default choice between them; the
output is poisoned with NaN first, so an unwritten element fails.
usage: dwconv_host_test.py GPUC [WORKDIR]   (CXX picks the compiler; g++)
Prints one line per case and 'N passed, N failed'.
"""
import os, re, subprocess, sys, tempfile, zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
typedef long long i64;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __expf expf
typedef _Float16 __half;
struct __nv_bfloat16 { uint16_t b; };
static inline float ldf(float x) { return x; }
static inline float ldf(__half x) { return (float)x; }
static inline float ldf(__nv_bfloat16 x) { uint32_t u = (uint32_t)x.b << 16; float f; memcpy(&f, &u, 4); return f; }
template <class T> T stf(float x);
template <> float stf<float>(float x) { return x; }
template <> __half stf<__half>(float x) { return (__half)x; }
template <> __nv_bfloat16 stf<__nv_bfloat16>(float x) {
  uint32_t u; memcpy(&u, &x, 4); u += 0x7fffu + ((u >> 16) & 1u); return __nv_bfloat16{(uint16_t)(u >> 16)};
}
template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline unsigned short __half_as_ushort(__half h) { unsigned short u; memcpy(&u, &h, 2); return u; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.b; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
#define GRID_STRIDE(i, n) for (i64 i = 0; i < (n); i++)
/* the tiled kernel's CTAs: one host thread per CUDA thread, the CTAs in
 * turn, __syncthreads a barrier, __shared__ arrays static (one CTA at a
 * time uses them: a barrier ends each CTA) */
#include <barrier>
#include <thread>
#include <vector>
#define __shared__ static
#define DW_CP16(dst, src) memcpy((dst), (src), 16) /* cp.async */
#define DW_CP_WAIT()
/* the stream kernel: cp.async with zero fill, its groups, dynamic shared
 * memory (copies done at once, so the waits are nothing) */
#define DW_CP16Z(dst, src, ok) ((ok) ? (void)memcpy((dst), (src), 16) : (void)memset((dst), 0, 16))
#define DW_CP_COMMIT()
#define DW_CP_WAITN(n)
#define DW_SMEM(name, bytes) alignas(16) static unsigned char name[bytes]
#define __launch_bounds__(...)
struct Dim3 { unsigned x, y, z; };
static thread_local Dim3 threadIdx, blockIdx;
static Dim3 gridDim;
static std::barrier<> *cta_barrier;
#define __syncthreads() cta_barrier->arrive_and_wait()
template <class F> static void launch(unsigned gx, unsigned gy, unsigned gz, unsigned block, F kernel) {
  std::barrier<> bar(block);
  cta_barrier = &bar;
  gridDim = Dim3{gx, gy, gz};
  std::vector<std::thread> th;
  for (unsigned t = 0; t < block; t++)
    th.emplace_back([=, &bar] {
      threadIdx = Dim3{t, 0, 0};
      for (unsigned z = 0; z < gz; z++)
        for (unsigned y = 0; y < gy; y++)
          for (unsigned x = 0; x < gx; x++) {
            blockIdx = Dim3{x, y, z};
            kernel();
            bar.arrive_and_wait();
          }
    });
  for (auto &t : th) t.join();
}
"""

MAIN = r"""
static void *load(const char *p, size_t bytes) {
  void *b = aligned_alloc(64, (bytes + 63) / 64 * 64);
  FILE *f = fopen(p, "rb");
  if (!f || fread(b, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %s\n", p); exit(1); }
  fclose(f);
  return b;
}
int main(int argc, char **argv) {
  (void)argc;
  const size_t nx = %(nx)d, nw = %(nw)d, nc = %(nc)d, ny = %(ny)d;
  T *x = (T *)load(argv[1], nx * sizeof(T));
  float *w = (float *)load(argv[2], nw * sizeof(float)), *b = (float *)load(argv[3], nc * sizeof(float));
  T *y = (T *)aligned_alloc(64, (ny * sizeof(T) + 63) / 64 * 64);
  memset(y, 0xff, ny * sizeof(T)); /* NaN in every type: unwritten outputs fail */
  %(call)s;
  FILE *f = fopen(argv[4], "wb");
  if (!f || fwrite(y, sizeof(T), ny, f) != ny) return 1;
  fclose(f);
  return 0;
}
"""

ACTS = {  # name: (append the nodes computing out = act(x), the function)
    "relu": (lambda g, x, out: g.append(helper.make_node("Relu", [x], [out])), lambda v: np.maximum(v, 0)),
    "hardswish": (lambda g, x, out: g.append(helper.make_node("HardSwish", [x], [out])),
                  lambda v: v * np.clip(v / 6 + 0.5, 0, 1)),
    "silu": (lambda g, x, out: g.extend([helper.make_node("Sigmoid", [x], [out + "_s"]),
                                         helper.make_node("Mul", [x, out + "_s"], [out])]),
             lambda v: v / (1 + np.exp(-v))),
    "relu6": (lambda g, x, out: g.append(helper.make_node("Clip", [x, "lo", "hi"], [out])), lambda v: np.clip(v, 0, 6)),
    "mish": (lambda g, x, out: g.append(helper.make_node("Mish", [x], [out])),
             lambda v: v * np.tanh(np.logaddexp(0, v))),
}

# name, C, H, W, kernel (kh, kw), strides, pads (t, l, b, r), activation, precision[, input activation]
CASES = [
    ("pre_hardswish", 24, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", "hardswish"),
    ("pre_silu_k5s2", 32, 11, 11, (5, 5), (2, 2), (2, 2, 2, 2), "silu", "fp16", "silu"),
    ("k3s1_c16_tail", 16, 9, 9, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16"),
    ("k5s2_c72", 72, 15, 15, (5, 5), (2, 2), (2, 2, 2, 2), "relu", "fp16"),
    ("k7s1_c6_vec2", 6, 10, 10, (7, 7), (1, 1), (3, 3, 3, 3), "relu", "fp16"),
    ("k3s2_c5_asym", 5, 8, 12, (3, 3), (2, 2), (0, 0, 1, 1), "relu", "fp16"),
    ("k3x5_c12", 12, 7, 11, (3, 5), (1, 1), (1, 2, 1, 2), "relu", "fp16"),
    ("k7s1_c96_w14", 96, 14, 14, (7, 7), (1, 1), (3, 3, 3, 3), "relu", "fp16"),
    ("k3s1_c16_bf16", 16, 9, 9, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "bf16"),
    ("k3s1_hardswish", 24, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), "hardswish", "fp16"),
    ("k5s2_silu", 32, 11, 11, (5, 5), (2, 2), (2, 2, 2, 2), "silu", "fp16"),
    ("k3s2_relu6", 8, 9, 9, (3, 3), (2, 2), (1, 1, 1, 1), "relu6", "fp16"),
    ("k3s1_mish", 24, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), "mish", "fp16"),
    # the tiled kernel (C a multiple of 8): several tiles, batches at which
    # threads take 8, 7, 4 and 2 pixels, the last channel chunk partly idle
    # (C/8 = 23 over lanes of 8), stride 2 on odd sizes, a residual, bf16
    ("t_k3s1_n32_p8", 128, 56, 56, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", None, {"n": 32, "kind": "tiled"}),
    ("t_k3s2_n16_c96", 96, 57, 57, (3, 3), (2, 2), (1, 1, 1, 1), "silu", "fp16", "silu", {"n": 16, "kind": "tiled"}),
    ("t_k7s1_n32_c40", 40, 28, 28, (7, 7), (1, 1), (3, 3, 3, 3), "relu", "fp16", None, {"n": 32, "kind": "tiled"}),
    ("t_k5s2_c184", 184, 15, 13, (5, 5), (2, 2), (2, 2, 2, 2), "hardswish", "fp16", None, {"n": 8, "kind": "tiled"}),
    ("t_k3s1_res", 64, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", None, {"n": 8, "res": True, "kind": "tiled"}),
    ("t_k5s1_bf16", 48, 20, 20, (5, 5), (1, 1), (2, 2, 2, 2), "relu6", "bf16", "hardswish", {"n": 16, "kind": "tiled"}),
    ("t_k3s2_asym", 32, 12, 12, (3, 3), (2, 2), (0, 0, 1, 1), "relu", "fp16", None, {"kind": "tiled"}),
    # the halo staged by cp.async (GPUC_DWCONV_ASYNC=1)
    ("a_k3s1_silu", 128, 30, 30, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", "silu", {"n": 8, "async": True,
                                                                                       "kind": "tiled"}),
    ("a_k5s2_c184", 184, 15, 13, (5, 5), (2, 2), (2, 2, 2, 2), "relu6", "fp16", "relu6", {"n": 8, "async": True,
                                                                                         "kind": "tiled"}),
    ("a_k7s1_bf16", 40, 28, 28, (7, 7), (1, 1), (3, 3, 3, 3), "relu", "bf16", None, {"n": 16, "async": True,
                                                                                    "kind": "tiled"}),
    # the previous default (GPUC_DWCONV_PREV=1): the tiled kernel for an input SiLU/GELU/Mish, else rows
    ("p_silu_in", 64, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "silu", "fp16", "silu", {"n": 4, "prev": True,
                                                                                   "kind": "tiled"}),
    ("p_relu6_in", 64, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "relu6", "fp16", "relu6", {"n": 4, "prev": True,
                                                                                       "kind": "rows"}),
    # the stream kernel (the default where C is a multiple of 8 halves):
    # CTAs looping over tiles through two halo buffers (GPUC_DWCONV_CTAS
    # caps the grid so each CTA takes several tiles), image edges, stride
    # 2 on odd sizes, 5x5/7x7, C/8 not a multiple of the CTA's lanes
    # (184/8 = 23), a residual, bf16, asymmetric pads, 4- and 2-pixel
    # threads, 3 and 4 buffers (GPUC_DWCONV_BUFS)
    # the default choice: tiled for an input SiLU/GELU/Mish; stream (batch
    # 8 or more) for an input HardSwish or stride 2 into 56x56 or more; rows
    # elsewhere and where C is not a multiple of 8 halves
    ("d_silu_in", 64, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "silu", "fp16", "silu", {"n": 8, "default": True,
                                                                                   "kind": "tiled"}),
    ("d_hswish_in", 40, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "hardswish", "fp16", "hardswish",
     {"n": 8, "default": True, "kind": "stream"}),
    ("d_hswish_n2", 40, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "hardswish", "fp16", "hardswish",
     {"n": 2, "default": True, "kind": "rows"}),
    ("d_s2_112", 16, 112, 112, (3, 3), (2, 2), (1, 1, 1, 1), "relu6", "fp16", "relu6",
     {"n": 8, "default": True, "kind": "stream"}),
    ("d_s2_56", 16, 56, 56, (3, 3), (2, 2), (1, 1, 1, 1), "relu6", "fp16", "relu6",
     {"n": 8, "default": True, "kind": "rows"}),
    ("d_relu6_in", 64, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "relu6", "fp16", "relu6", {"n": 8, "default": True,
                                                                                       "kind": "rows"}),
    ("d_c12_rows", 12, 9, 9, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", None, {"default": True, "kind": "rows"}),
    ("s_k3s1_loop", 128, 30, 30, (3, 3), (1, 1), (1, 1, 1, 1), "silu", "fp16", "silu",
     {"n": 8, "stream": True, "ctas": 3, "kind": "stream"}),
    ("s_k3s2_odd", 96, 57, 57, (3, 3), (2, 2), (1, 1, 1, 1), "relu6", "fp16", "relu6",
     {"n": 6, "stream": True, "ctas": 5, "kind": "stream"}),
    ("s_k5s2_c184", 184, 15, 13, (5, 5), (2, 2), (2, 2, 2, 2), "hardswish", "fp16", "silu",
     {"n": 8, "stream": True, "ctas": 4, "kind": "stream"}),
    ("s_k7s1_bf16", 40, 28, 28, (7, 7), (1, 1), (3, 3, 3, 3), "relu", "bf16", None,
     {"n": 16, "stream": True, "ctas": 7, "kind": "stream"}),
    ("s_k5s1_res", 64, 20, 20, (5, 5), (1, 1), (2, 2, 2, 2), "relu", "fp16", None,
     {"n": 8, "res": True, "stream": True, "ctas": 3, "kind": "stream"}),
    ("s_k3s2_asym", 32, 12, 12, (3, 3), (2, 2), (0, 0, 1, 1), "relu", "fp16", "mish",
     {"n": 4, "stream": True, "ctas": 2, "kind": "stream"}),
    ("s_k7s1_w7", 320, 7, 7, (7, 7), (1, 1), (3, 3, 3, 3), "relu", "fp16", None,
     {"n": 8, "stream": True, "ctas": 5, "kind": "stream"}),
    ("s_k3s1_p8", 128, 56, 56, (3, 3), (1, 1), (1, 1, 1, 1), "relu6", "fp16", "relu6",
     {"n": 32, "stream": True, "kind": "stream"}),
    ("s_k3s1_bufs3", 64, 23, 23, (3, 3), (1, 1), (1, 1, 1, 1), "silu", "fp16", "silu",
     {"n": 8, "stream": True, "ctas": 7, "bufs": 3, "kind": "stream"}),
    ("s_k5s2_bufs4", 184, 15, 13, (5, 5), (2, 2), (2, 2, 2, 2), "relu6", "fp16", None,
     {"n": 8, "stream": True, "ctas": 3, "bufs": 4, "kind": "stream"}),
    ("s_k3x5_c24", 24, 11, 17, (3, 5), (1, 2), (1, 2, 1, 2), "relu", "fp16", "hardswish",
     {"n": 3, "stream": True, "ctas": 2, "kind": "stream"}),
    # the row kernel for the same shapes (GPUC_DWCONV_V1=1, the A/B switch)
    ("v1_k3s1_n8_c64", 64, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", "silu", {"n": 8, "v1": True,
                                                                                          "kind": "rows"}),
    ("v1_k3s1_res", 64, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", None, {"n": 2, "res": True, "v1": True}),
    # dilated (LR-ASPP's / DeepLabV3-MobileNetV3's atrous stages): the row
    # kernel whatever the choice (the others' halos are dense): 5x5
    # dilation 2 at batch 8 (the stream kernel's HardSwish case otherwise),
    # 3x3 stride 2 with dilation 2x3 and asymmetric pads, tiled forced, bf16
    ("dil_k5d2_hswish", 40, 10, 10, (5, 5), (1, 1), (4, 4, 4, 4), "hardswish", "fp16", "hardswish",
     {"n": 8, "dil": (2, 2), "default": True, "kind": "rows"}),
    ("dil_k3s2_d2x3", 24, 13, 11, (3, 3), (2, 2), (2, 3, 1, 2), "relu", "fp16", "relu6",
     {"dil": (2, 3), "kind": "rows"}),
    ("dil_k5d4_bf16", 16, 12, 12, (5, 5), (1, 1), (8, 8, 8, 8), "relu6", "bf16", None,
     {"n": 3, "dil": (4, 4), "kind": "rows"}),
    # grouped, few channels a group (codegen/lower_gconv.c; RegNetX's groups
    # of 24): stride 2 on odd sizes, row tails, a residual, 5x5, dilation,
    # bf16, asymmetric pads (the fusion passes give a grouped conv a Relu,
    # not an input activation: those run as kernels of their own)
    ("g24_k3s2_relu", 72, 15, 13, (3, 3), (2, 2), (1, 1, 1, 1), "relu", "fp16", None,
     {"n": 3, "groups": 3, "kind": "grouped"}),
    ("g8_k3s1_res", 48, 9, 10, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "fp16", None,
     {"n": 2, "groups": 6, "res": True, "kind": "grouped"}),
    ("g16_k5s1_c32", 32, 11, 7, (5, 5), (1, 1), (2, 2, 2, 2), "relu", "fp16", None,
     {"groups": 2, "kind": "grouped"}),
    ("g8_k3d2_bf16", 24, 12, 12, (3, 3), (1, 1), (2, 2, 2, 2), "relu", "bf16", None,
     {"groups": 3, "dil": (2, 2), "kind": "grouped"}),
    ("g8_k3s2_asym", 16, 9, 11, (3, 3), (2, 2), (0, 1, 1, 0), "relu", "fp16", None,
     {"groups": 2, "kind": "grouped"}),
]


def half_round(a, prec):
    if prec == "fp16":
        return a.astype(np.float16).astype(np.float64)
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def model(path, C, H, W, k, st, pads, act, rng, pre=None, n=2, res=False, dil=(1, 1), groups=None):
    groups = groups or C  # depthwise unless a case says otherwise
    w = (rng.standard_normal((C, C // groups, k[0], k[1])) * 0.3).astype(np.float32)
    b = (rng.standard_normal(C) * 0.5).astype(np.float32)
    nodes = []
    if pre:
        ACTS[pre][0](nodes, "x", "xa")
    nodes.append(helper.make_node("Conv", ["xa" if pre else "x", "w", "b"], ["c"], group=groups, kernel_shape=list(k),
                                  strides=list(st), pads=[pads[0], pads[1], pads[2], pads[3]], dilations=list(dil)))
    if res:  # act(conv(x) + x): the residual Z of the FusedConv
        nodes.append(helper.make_node("Add", ["c", "x"], ["cz"]))
    ACTS[act][0](nodes, "cz" if res else "c", "y")
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    oh = (H + pads[0] + pads[2] - (k[0] - 1) * dil[0] - 1) // st[0] + 1
    ow = (W + pads[1] + pads[3] - (k[1] - 1) * dil[1] - 1) // st[1] + 1
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, C, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, C, oh, ow])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)  # 18: Mish
    return w, b, oh, ow


def reference(x, w, b, k, st, pads, oh, ow, act, pre=None, res=False, prec="fp16", dil=(1, 1)):
    """x [N,H,W,C] float64, w [C,C/groups,kh,kw] -> act(conv(pre(x)) + b [+ x]) [N,OH,OW,C];
    pre(x) rounded to the half type, as the reference and the kernels round it"""
    x0 = x
    if pre:
        x = half_round(ACTS[pre][1](x), prec)
    n, h, wd, c = x.shape
    xp = np.zeros((n, h + pads[0] + pads[2] + k[0] * dil[0], wd + pads[1] + pads[3] + k[1] * dil[1], c))
    xp[:, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    y = np.zeros((n, oh, ow, c)) + b
    for r in range(k[0]):
        for s in range(k[1]):
            r0, s0 = r * dil[0], s * dil[1]
            win = xp[:, r0:r0 + st[0] * oh:st[0], s0:s0 + st[1] * ow:st[1]][:, :oh, :ow]  # [N,OH,OW,C]
            cg = w.shape[1]  # input channels a group: output channel k reads its group's cg inputs
            for e in range(cg):
                src = (np.arange(c) // cg) * cg + e
                y += win[..., src] * w[:, e, r, s]
    if res:
        y = y + x0
    return ACTS[act][1](y)


def kernel_text(src):
    """The depthwise (and grouped) kernels of a module: each from its comment to the next kernel."""
    out = []
    for head in ("/* depthwise ", "/* grouped "):
        at = src.find(head)
        while at >= 0:
            own = src.find('extern "C"', at)
            end = src.find('extern "C"', own + 1)
            out.append(src[at:end if end >= 0 else len(src)])
            at = src.find(head, at + 1)
    return out


GAP_MAIN = r"""
int main(int argc, char **argv) {
  (void)argc;
  const size_t nx = %(nx)d, np_ = %(np)d, ny = %(ny)d;
  T *x = (T *)load(argv[1], nx * sizeof(T));
  float *part = (float *)aligned_alloc(64, (np_ * sizeof(float) + 63) / 64 * 64);
  T *y = (T *)aligned_alloc(64, (ny * sizeof(T) + 63) / 64 * 64);
  %(k1)s(x, part);
  %(k2)s(part, y);
  FILE *f = fopen(argv[2], "wb");
  if (!f || fwrite(y, sizeof(T), ny, f) != ny) return 1;
  fclose(f);
  return 0;
}
"""

# NHWC GlobalAveragePool (codegen/lower_se.c): C, H, W of a depthwise
# conv -> pool model (the conv makes the region NHWC)
GAP_CASES = [("gap_c96_56", 96, 56, 56), ("gap_c5_7", 5, 7, 7), ("gap_c6_13x11", 6, 13, 11)]


def gap_case(gpuc, work, cxx, name, C, H, W):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    w = (rng.standard_normal((C, 1, 3, 3)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=C, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"])]
    g = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, C, 1, 1])],
                          [numpy_helper.from_array(w, "w")])
    onnx_path = os.path.join(work, name + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), onnx_path)
    src_path = os.path.join(work, name + ".cu")
    r = subprocess.run([gpuc, onnx_path, "-O2", "--fp16", "--arch", "sm_90", "-o", os.path.join(work, name + ".gpuc")],
                       capture_output=True, text=True, env=dict(os.environ, GPUC_SAVE_SOURCE=src_path))
    if r.returncode:
        return "compile failed: " + (r.stderr + r.stdout)[-300:]
    src = open(src_path).read()
    at = src.find("/* NHWC GlobalAveragePool, partial sums")
    if at < 0:
        return "no NHWC GlobalAveragePool kernel in the module"
    end = src.find('extern "C"', src.find('extern "C"', src.find('extern "C"', at) + 1) + 1)
    text = src[at:end if end >= 0 else len(src)]
    names = re.findall(r"void (\w+)\(", text)
    part = re.search(r"part \[(\d+),(\d+),(\d+)\]", text)
    if len(names) != 2 or not part:
        return "unexpected pool kernels: %s" % names
    npart = int(part.group(1)) * int(part.group(2)) * int(part.group(3))
    host = os.path.join(work, name + "_host.cpp")
    with open(host, "w") as f:
        f.write(SHIM + "typedef __half T;\n" + text + "\n" + MAIN.split("int main")[0] +
                GAP_MAIN % dict(nx=2 * H * W * C, np=npart, ny=2 * C, k1=names[0], k2=names[1]))
    exe = os.path.join(work, name + "_host")
    r = subprocess.run([cxx, "-O1", "-std=c++20", "-pthread", "-Wno-unknown-pragmas", host, "-o", exe],
                       capture_output=True, text=True)
    if r.returncode:
        return "host compile failed: " + r.stderr[-400:]
    x = rng.standard_normal((2, H, W, C)).astype(np.float16)
    x.tofile(os.path.join(work, "x.bin"))
    r = subprocess.run([exe, os.path.join(work, "x.bin"), os.path.join(work, "y.bin")], capture_output=True, text=True)
    if r.returncode:
        return "host run failed: " + r.stderr[-300:]
    y = np.fromfile(os.path.join(work, "y.bin"), dtype=np.float16).astype(np.float64)
    ref = x.astype(np.float64).mean(axis=(1, 2)).reshape(-1)
    err = np.abs(y - ref).max() if y.size == ref.size else np.inf
    tol = 2e-3 * max(1.0, np.abs(ref).max())
    if not np.isfinite(err) or err > tol:
        return "max |error| %.3g over %.3g" % (err, tol)
    print("PASS %-16s fp16 NHWC GlobalAveragePool [2,%d,%d,%d]: max |error| %.3g (tolerance %.3g)" %
          (name, H, W, C, err, tol))
    return None


def main():
    gpuc = os.path.abspath(sys.argv[1])
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="gpuc_dwconv_")
    os.makedirs(work, exist_ok=True)
    cxx = os.environ.get("CXX", "g++")
    passed = failed = 0
    for case in CASES:
        name, C, H, W, k, st, pads, act, prec = case[:9]
        pre = case[9] if len(case) > 9 else None
        opt = case[10] if len(case) > 10 else {}
        n, res, dil, groups = opt.get("n", 2), opt.get("res", False), opt.get("dil", (1, 1)), opt.get("groups")
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        onnx_path = os.path.join(work, name + ".onnx")
        w, b, oh, ow = model(onnx_path, C, H, W, k, st, pads, act, rng, pre, n, res, dil, groups)
        src_path = os.path.join(work, name + ".cu")
        env = dict(os.environ, GPUC_SAVE_SOURCE=src_path)
        for key in ("GPUC_DWCONV_V1", "GPUC_DWCONV_TILED", "GPUC_DWCONV_PREV", "GPUC_DWCONV_ASYNC", "GPUC_DWCONV_CTAS",
                    "GPUC_DWCONV_STREAM"):
            env.pop(key, None)
        env.pop("GPUC_DWCONV_BUFS", None)
        if opt.get("ctas"):
            env["GPUC_DWCONV_CTAS"] = str(opt["ctas"])
        if opt.get("bufs"):
            env["GPUC_DWCONV_BUFS"] = str(opt["bufs"])
        if opt.get("v1"):
            env["GPUC_DWCONV_V1"] = "1"
        elif opt.get("prev"):
            env["GPUC_DWCONV_PREV"] = "1"
        elif opt.get("stream"):
            env["GPUC_DWCONV_STREAM"] = "1"
        elif not opt.get("default"):  # the tiled kernel wherever it applies
            env["GPUC_DWCONV_TILED"] = "1"
        if opt.get("async"):
            env["GPUC_DWCONV_ASYNC"] = "1"
        r = subprocess.run([gpuc, onnx_path, "-O2", "--" + prec, "--arch", "sm_90", "-o",
                            os.path.join(work, name + ".gpuc")], capture_output=True, text=True, env=env)
        why = None
        if r.returncode:
            why = "compile failed: " + (r.stderr + r.stdout)[-300:]
        else:
            src = open(src_path).read()
            texts = kernel_text(src)
            if len(texts) != 1:
                why = "expected one depthwise kernel in the module, found %d" % len(texts)
        if why is None:
            text = texts[0]
            kname = re.search(r"__global__ void (?:__launch_bounds__\([\d, ]+\) )?(\w+)\(", text).group(1)
            t = re.search(r"\(const (\w+)\* __restrict__ x", text).group(1)
            has_z = "* z," in text
            args = "x, w, b, x, y" if has_z else "x, w, b, y"
            grid = re.search(r"grid \[(\d+),(\d+),(\d+)\] block (\d+)", text)
            kind = ("stream" if "halo buffers" in text else "tiled") if grid else \
                "grouped" if text.startswith("/* grouped ") else "rows"
            if (opt.get("v1") and kind != "rows") or (opt.get("kind") and opt["kind"] != kind):
                why = "the %s kernel was made" % kind
            elif res and not has_z:
                why = "no residual operand in the kernel"
            call = ("launch(%s, %s, %s, %s, [=] { %s(%s); })" % (grid.group(1), grid.group(2), grid.group(3),
                                                                grid.group(4), kname, args)
                    if grid else "%s(%s)" % (kname, args))
            host = os.path.join(work, name + "_host.cpp")
            with open(host, "w") as f:
                f.write(SHIM + "typedef %s T;\n" % t + text + "\n" +
                        MAIN % dict(nx=n * H * W * C, nw=w.size, nc=C, ny=n * oh * ow * C, call=call))
            exe = os.path.join(work, name + "_host")
            if why is None:
                r = subprocess.run([cxx, "-O1", "-std=c++20", "-pthread", "-Wno-unknown-pragmas", host, "-o", exe],
                                   capture_output=True, text=True)
                if r.returncode:
                    why = "host compile failed: " + r.stderr[-400:]
        if why is None:
            x = rng.standard_normal((n, H, W, C))
            xh = half_round(x, prec)
            wh, bh = half_round(w.astype(np.float64), prec), half_round(b.astype(np.float64), prec)
            xdt = np.float16 if prec == "fp16" else np.uint16
            xraw = xh.astype(np.float16) if prec == "fp16" else \
                (xh.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            xraw.astype(xdt).tofile(os.path.join(work, "x.bin"))
            # as the lowering lays them out: depthwise f32 [R,S,C], grouped f32 [R,S,Cg,K]
            wl = wh[:, 0].transpose(1, 2, 0) if kind != "grouped" else wh.transpose(2, 3, 1, 0)
            np.ascontiguousarray(wl).astype(np.float32).tofile(os.path.join(work, "w.bin"))
            bh.astype(np.float32).tofile(os.path.join(work, "b.bin"))
            r = subprocess.run([exe] + [os.path.join(work, f) for f in ("x.bin", "w.bin", "b.bin", "y.bin")],
                               capture_output=True, text=True)
            if r.returncode:
                why = "host run failed: " + r.stderr[-300:]
            else:
                raw = np.fromfile(os.path.join(work, "y.bin"), dtype=xdt)
                y = raw.astype(np.float64) if prec == "fp16" else \
                    (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
                ref = reference(xh, wh, bh, k, st, pads, oh, ow, act, pre, res, prec, dil)
                tol = (2e-3 if prec == "fp16" else 1.6e-2) * max(1.0, np.abs(ref).max())
                err = np.abs(y.reshape(ref.shape) - ref).max() if y.size == ref.size else np.inf
                if not np.isfinite(err) or err > tol:
                    why = "max |error| %.3g over %.3g" % (err, tol)
                else:
                    print("PASS %-16s %s %s N=%d C=%d %dx%d k%dx%d s%d pads %s %s%s%s: max |error| %.3g (tolerance %.3g)"
                          % (name, kind, prec, n, C, H, W, k[0], k[1], st[0], pads, act, ", input " + pre if pre else "",
                             ", residual" if res else "", err, tol))
        if why is None:
            passed += 1
        else:
            failed += 1
            print("FAIL %-16s %s" % (name, why))
    for name, C, H, W in GAP_CASES:
        why = gap_case(gpuc, work, cxx, name, C, H, W)
        if why is None:
            passed += 1
        else:
            failed += 1
            print("FAIL %-16s %s" % (name, why))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
