#!/usr/bin/env python3
"""The tensor-core streaming attention kernels (codegen/lower_attention_stream.c:
attention_flash, GPUC_ATTN_FLASH_V1=1, and attention_flash2 in its default
and GPUC_ATTN_FLASH_CFG shapes) run on the host.

No GPU here: each case's fp32 attention graph (MatMul(Q, K^T) * 1/sqrt(D),
+ a padding row input [B,1,1,S] (mask), + a constant 0/-inf triangle
(causal), or + a per-score input [1,H,S,S] (bias), Softmax, MatMul by V) is
compiled -O2 --fp16 for sm_90 with GPUC_SAVE_SOURCE set, the Attention
kernel is cut out of the module source and compiled by the host C++
compiler under a shim that runs every CUDA thread of a CTA as a ucontext
coroutine: __syncthreads, __syncwarp and the warp collectives (shfl,
ldmatrix with and without .trans, mma.sync m16n8k16 with the PTX fragment
layouts) go through per-warp exchange buffers and barriers, cp.async is a
plain copy, ex2.approx is exp2f, half is _Float16. The CTAs run one after
another over the kernel's grid. Its output on random fp16 Q/K/V (and
mask) must match numpy float64 attention of the same halves within rel L2
5e-3 (fp16 output rounding is about 2.5e-4), with no NaN. What this cannot
see: races between cp.async and its readers (the copy is synchronous),
performance, bf16.
usage: attn_flash_host_test.py GPUC [WORKDIR]   (CXX picks the compiler; g++)
Prints one line per case and 'N passed, N failed'."""
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GPUC = sys.argv[1] if len(sys.argv) > 1 else "build/gpuc"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/gpuc_attn_flash_host"
CXX = os.environ.get("CXX", "g++")

SHIM = r"""
// Host emulation of one CTA of an attention kernel: each CUDA thread a
// ucontext coroutine, warp collectives (shfl, ldmatrix, mma.sync) through
// per-warp exchange buffers and barriers.
#include <ucontext.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
typedef long long i64;
typedef _Float16 __half;
struct __nv_bfloat16 { uint16_t b; };
struct Dim3 { unsigned x, y, z; };
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
#define MAXT 512
static Dim3 blockIdx, gridDim, g_thr[MAXT];
static int g_cur, g_nt;
#define threadIdx (g_thr[g_cur])
static ucontext_t sched_ctx, ctxs[MAXT];
static bool g_done[MAXT];
static long g_yields;
static void yield_() { g_yields++; swapcontext(&ctxs[g_cur], &sched_ctx); }
struct Bar { int n, count, gen; };
static Bar g_cta, g_warp[MAXT / 32];
static void bar_wait(Bar &b) {
  int gg = b.gen;
  if (++b.count == b.n) { b.count = 0; b.gen++; return; }
  long guard = 0;
  while (b.gen == gg) { yield_(); if (++guard > 100000000) { fprintf(stderr, "deadlock\n"); exit(3); } }
}
static void __syncthreads() { bar_wait(g_cta); }
static void __syncwarp() { bar_wait(g_warp[g_cur >> 5]); }
struct WarpX { const void *addr[32]; unsigned a[32][4], b[32][2]; float f[32]; };
static WarpX g_x[MAXT / 32];
#define LANE (g_cur & 31)
#define WX (g_x[g_cur >> 5])
static float __shfl_xor_sync(unsigned, float v, int m) {
  WX.f[LANE] = v; __syncwarp();
  float r = WX.f[LANE ^ m]; __syncwarp();
  return r;
}
static float __shfl_sync(unsigned, float v, int src) {
  WX.f[LANE] = v; __syncwarp();
  float r = WX.f[src]; __syncwarp();
  return r;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float ldf(float x) { return x; }
static inline float ldf(__half x) { return (float)x; }
template <class T> T stf(float x) { return (T)x; }
static inline float exp2f_(float x) { return exp2f(x); }
static inline float ex2_approx(float x) { return exp2f(x); }
static inline uint16_t hb(__half h) { uint16_t u; memcpy(&u, &h, 2); return u; }
static inline float hf(uint16_t u) { __half h; memcpy(&h, &u, 2); return (float)h; }
template <class T> unsigned pack2(float lo, float hi) { return hb((__half)lo) | (unsigned)hb((__half)hi) << 16; }
template <class T> void mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  int L = LANE;
  for (int i = 0; i < 4; i++) WX.a[L][i] = a[i];
  WX.b[L][0] = b0; WX.b[L][1] = b1;
  __syncwarp();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
      int r = g + (i & 1) * 8, k = 2 * t + (i >> 1) * 8;
      A[r][k] = hf(WX.a[l][i] & 0xffff); A[r][k + 1] = hf(WX.a[l][i] >> 16);
    }
    for (int i = 0; i < 2; i++) {
      int k = 2 * t + i * 8;
      B[k][g] = hf(WX.b[l][i] & 0xffff); B[k + 1][g] = hf(WX.b[l][i] >> 16);
    }
  }
  __syncwarp();
  int g = L >> 2, t = L & 3;
  for (int i = 0; i < 4; i++) {
    int r = g + (i >> 1) * 8, n = 2 * t + (i & 1);
    float s = c[i];
    for (int k = 0; k < 16; k++) s += A[r][k] * B[k][n];
    c[i] = s;
  }
}
static void ldsm_(unsigned *r, const void *p, int nm, bool trans) {
  int L = LANE;
  WX.addr[L] = p; __syncwarp();
  int g = L >> 2, t = L & 3;
  for (int i = 0; i < nm; i++) {
    if (!trans) {
      const uint16_t *row = (const uint16_t *)WX.addr[8 * i + g];
      r[i] = row[2 * t] | (unsigned)row[2 * t + 1] << 16;
    } else {
      const uint16_t *r0 = (const uint16_t *)WX.addr[8 * i + 2 * t], *r1 = (const uint16_t *)WX.addr[8 * i + 2 * t + 1];
      r[i] = r0[g] | (unsigned)r1[g] << 16;
    }
  }
  __syncwarp();
}
static void ldsm_x4(unsigned *r, const void *p) { ldsm_(r, p, 4, false); }
static void ldsm_x4_trans(unsigned *r, const void *p) { ldsm_(r, p, 4, true); }
static void ldsm_x2_trans(unsigned *r, const void *p) { ldsm_(r, p, 2, true); }
static void cp_async16(void *d, const void *s) { memcpy(d, s, 16); }
static void cp_async_commit() {}
template <int N> void cp_async_wait() {}
alignas(16) unsigned char attn_smem_[232 * 1024];
template <bool B> struct BoolC { static constexpr bool value = B; };
"""


def model(path, kind, B, H, S, D):
    F = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(n, F, [B, H, S, D]) for n in ("q", "k", "v")]
    inits = [numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32), "sc")]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "sc"], ["s1"])]
    last = "s1"
    if kind in ("mask", "bias"):
        n, shape = ("pad", [B, 1, 1, S]) if kind == "mask" else ("rb", [1, H, S, S])
        ins.append(helper.make_tensor_value_info(n, F, shape))
        nodes.append(helper.make_node("Add", [last, n], ["s2"]))
        last = "s2"
    if kind == "causal":
        inits.append(numpy_helper.from_array(np.triu(np.full((S, S), -np.inf, np.float32), 1), "cm"))
        nodes.append(helper.make_node("Add", [last, "cm"], ["s2"]))
        last = "s2"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    g = helper.make_graph(nodes, "att", ins, [helper.make_tensor_value_info("y", F, [B, H, S, D])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


MAIN = r"""
static int g_tail;
static void entry();
KSTUB
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb");
  long nq = atol(argv[2]), nk = atol(argv[3]), nm = atol(argv[4]), ny = atol(argv[5]);
  std::vector<__half> q(nq), k(nk), v(nk), m(nm > 0 ? nm : 1), y(ny, (__half)NAN);
  fread(q.data(), 2, nq, f); fread(k.data(), 2, nk, f); fread(v.data(), 2, nk, f); if (nm > 0) fread(m.data(), 2, nm, f);
  fclose(f);
  g_q = q.data(); g_k = k.data(); g_v = v.data(); g_m = m.data(); g_y = y.data();
  gridDim = {GX, GY, 1};
  g_nt = NT;
  std::vector<char> stacks((size_t)NT * 65536);
  for (unsigned by = 0; by < GY; by++)
  for (unsigned bx = 0; bx < GX; bx++) {
    blockIdx = {bx, by, 0};
    g_cta = {NT, 0, 0};
    for (int w = 0; w < NT / 32; w++) g_warp[w] = {32, 0, 0};
    for (int t = 0; t < NT; t++) {
      g_thr[t] = {(unsigned)t, 0, 0}; g_done[t] = false;
      getcontext(&ctxs[t]);
      ctxs[t].uc_stack.ss_sp = &stacks[(size_t)t * 65536]; ctxs[t].uc_stack.ss_size = 65536; ctxs[t].uc_link = &sched_ctx;
      makecontext(&ctxs[t], entry, 0);
    }
    for (;;) {
      bool any = false;
      for (int t = 0; t < NT; t++) if (!g_done[t]) { any = true; g_cur = t; swapcontext(&sched_ctx, &ctxs[t]); }
      if (!any) break;
    }
  }
  f = fopen(argv[6], "wb"); fwrite(y.data(), 2, ny, f); fclose(f);
  return 0;
}
"""
def run_case(kind, B, H, S, D, env, work=WORK):
    os.makedirs(work, exist_ok=True)
    open(os.path.join(work, "shim.h"), "w").write(SHIM)
    onnx_p = os.path.join(work, "m.onnx")
    model(onnx_p, kind, B, H, S, D)
    src = os.path.join(work, "m.cu")
    e = dict(os.environ, GPUC_SAVE_SOURCE=src, **env)
    r = subprocess.run([GPUC, onnx_p, "--fp16", "-O2", "--arch", "sm_90", "-o", os.path.join(work, "m.gpuc")], env=e, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    text = open(src).read()
    m = re.search(r'(/\* attention[^\n]*\*/\n)extern "C" __global__ void __launch_bounds__\((\d+)\) (k\d+_Attention)\(([^)]*)\) \{\n(.*?)\n\}\n', text, re.S)
    assert m, "no attention kernel"
    comment, nt, name, params, body = m.group(1), int(m.group(2)), m.group(3), m.group(4), m.group(5)
    body = body.replace("extern __shared__ __align__(16) unsigned char attn_smem_[];", "extern unsigned char attn_smem_[];")
    body = re.sub(r"__shared__ __align__\(16\)", "alignas(16) static", body)
    body = body.replace("__shared__", "static")
    hasmask = "mask" in params
    if "row tiles" in comment:
        nw, wm = map(int, re.search(r"(\d+) warps x (\d+) row tiles", comment).groups())
        bm = 16 * nw * wm
        gx, gy = (S + bm - 1) // bm * B * H, 1
    else:
        gx, gy = B * H, (S + 63) // 64
    stub = ("static __half *g_q, *g_k, *g_v, *g_m, *g_y;\n"
            "void %s(%s) {\n%s\n}\n" % (name, params.replace("__restrict__", "__restrict"), body) +
            "static void entry() { %s(g_q, g_k, g_v, %sg_y); g_done[g_cur] = true; }\n" % (name, "g_m, " if hasmask else ""))
    cpp = '#include "shim.h"\n' + MAIN.replace("GX", str(gx)).replace("GY", str(gy)).replace("NT", str(nt)).replace("KSTUB", stub)
    open(os.path.join(work, "emu.cpp"), "w").write(cpp)
    r = subprocess.run([CXX, "-O1", "-std=c++17", "-fno-strict-aliasing", "-w", "-I" + work, os.path.join(work, "emu.cpp"), "-o", os.path.join(work, "emu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:3000]
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float16) for _ in range(3))
    scale = 1 / np.sqrt(D)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * np.float64(np.float32(scale))
    mk = np.zeros(0, np.float16)
    if kind == "mask":
        pad = np.where(rng.random((B, 1, 1, S)) < 0.25, -np.inf, rng.uniform(-3, 0, (B, 1, 1, S))).astype(np.float16)
        pad[..., 0] = 0
        mk = pad; s = s + pad.astype(np.float64)
    if kind == "bias":
        rb = (rng.standard_normal((1, H, S, S)) * 2).astype(np.float16)
        mk = rb; s = s + rb.astype(np.float64)
    if kind == "causal":
        s = s + np.triu(np.full((S, S), -np.inf), 1)
    assert hasmask == (mk.size > 0), (hasmask, mk.size)
    p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    want = np.einsum("bhqk,bhkd->bhqd", p, v.astype(np.float64))
    inp = os.path.join(work, "in.bin")
    with open(inp, "wb") as f:
        for a in (q, k, v, mk):
            f.write(np.ascontiguousarray(a).tobytes())
    outp = os.path.join(work, "out.bin")
    r = subprocess.run([os.path.join(work, "emu"), inp, str(q.size), str(k.size), str(mk.size), str(q.size), outp], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(outp, np.float16).reshape(want.shape).astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    return err, np.isnan(got).sum(), comment.strip()[:90]


CASES = [  # (kind, B, H, S, D, env)
    ("none", 1, 2, 200, 64, {"GPUC_ATTN_FLASH_V1": "1"}),
    ("causal", 1, 1, 300, 64, {"GPUC_ATTN_FLASH_V1": "1"}),
    ("none", 1, 2, 333, 64, {}),
    ("mask", 1, 2, 333, 64, {}),
    ("causal", 1, 2, 333, 64, {}),
    ("bias", 1, 2, 333, 64, {}),
    ("none", 1, 1, 256, 64, {}),
    ("causal", 1, 1, 256, 64, {}),
    ("none", 1, 1, 197, 128, {}),
    ("causal", 1, 1, 197, 128, {}),
    ("mask", 1, 1, 197, 128, {}),
    ("mask", 1, 1, 260, 64, {"GPUC_ATTENTION_FULL_TILES": "1"}),
    ("causal", 1, 1, 260, 64, {"GPUC_ATTENTION_FULL_TILES": "1"}),
    ("mask", 2, 1, 333, 64, {"GPUC_ATTN_FLASH_CFG": "4,2,128,3,1"}),
    ("causal", 2, 1, 333, 64, {"GPUC_ATTN_FLASH_CFG": "8,1,128,2,1"}),
    ("causal", 1, 2, 333, 64, {"GPUC_ATTN_FLASH_CFG": "8,1,64,2,0"}),
    ("bias", 1, 2, 333, 64, {"GPUC_ATTN_FLASH_CFG": "4,1,64,2,1"}),
]

if __name__ == "__main__":
    npass = nfail = 0
    for kind, B, H, S, D, env in CASES:
        try:
            err, nnan, c = run_case(kind, B, H, S, D, env)
            ok = err < 5e-3 and nnan == 0
            why = "rel L2 %.2e, NaN %d" % (err, nnan)
        except Exception as e:  # noqa: BLE001
            ok, why = False, str(e).strip().splitlines()[-1][:200] if str(e).strip() else repr(e)
        npass += ok
        nfail += not ok
        print("%s %s B%d H%d S%d D%d %s: %s" % ("PASS" if ok else "FAIL", kind, B, H, S, D,
                                                " ".join("%s=%s" % kv for kv in env.items()) or "default", why),
              flush=True)
    print("%d passed, %d failed" % (npass, nfail))
    sys.exit(1 if nfail else 0)
