#!/usr/bin/env python3
"""Hopper's int8 wgmma GEMM kernels (codegen/lower_int8_gemm.c) run on the host:
the warp-specialized one (GPUC_INT8_WS=1 or =tma, and the default's choice
of it and its tile by shape, checked too) and, as the emulator's own check,
the wgmma one (GPUC_INT8_WS=0) that the H200 runs bit-exact.

No GPU here. Each case's Linear layer y = (x W + b) + r (fp32, --int8,
GPUC_INT8_GEMM=own, sm_90) is compiled with GPUC_SAVE_SOURCE set; the GEMM
kernel (its DequantizeRows + residual epilogue) and the device helpers it
calls (i8_sw, wg_desc, i8_load / i8_wg_mainloop or ws_produce / ws_consume /
ws_skip)
are cut out of the module source and compiled by the host C++ compiler
under a shim that runs every CUDA thread of a CTA as a ucontext coroutine,
the CTAs one after another over a grid (the plan's, and a grid of 2 CTAs
so each takes several tiles around the persistent ring). What the shim
models, and so checks:
  - cp.async is asynchronous: each thread's copies (16 bytes, zero-filled
    past the data) sit in a FIFO that a random progress engine drains
    while threads run; cp.async.wait_group drains committed groups;
    cp.async.mbarrier.arrive.noinc is an arrival queued behind the
    thread's copies. Shared memory starts as 0xA5 bytes.
  - mbarriers: init, arrive, try_wait.parity (a fresh barrier's parity 1
    phase counts as completed); a wait on an incomplete phase yields.
  - wgmma.mma_async m64nNk32 .s32.s8.s8: the descriptor decoded (start
    address, LBO 1, SBO 1024 bytes, 128B swizzle: byte b of row r at
    swz(start + r * 128 + b), swz(a) = a ^ ((a >> 7 & 7) << 4)), each
    thread's fragment (warp w of the warpgroup rows 16 w + lane / 4 (+ 8),
    columns 8 j + 2 (lane % 4) (+ 1)) computed when issued and again when
    wgmma.wait_group retires its group, which must agree (else a stage was
    refilled under a wgmma still reading it: a race, exit 4), and written
    to the accumulators at retirement (scale-d 0: D = A B).
    wgmma.wait_group's lanes of a warp pass it together (.sync.aligned);
    elsewhere the threads of a warp run as independent coroutines.
  - a deadlock (every thread waiting, nothing in flight) exits 3.
The output must equal numpy's float32 steps on the exact int32 sums bit
for bit: ((acc * xs) * ws + b) + r. What this cannot see: timing, the
real hardware's proxy rules (fence.proxy.async is a no-op here), bank
conflicts, register pressure (ptxas: tests/int8_ws_ptx_test.sh).
usage: int8_ws_host_test.py GPUC [WORKDIR]   (CXX picks the compiler; g++)
Prints one line per case and 'N passed, N failed'."""
import os
import re
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GPUC = sys.argv[1] if len(sys.argv) > 1 else "build/gpuc"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/gpuc_int8_ws_host"
CXX = os.environ.get("CXX", "g++")

SHIM = r"""
#include <ucontext.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <vector>
typedef long long i64;
struct Dim3 { unsigned x, y, z; };
template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
#define MAXT 1024
static Dim3 blockIdx, gridDim, blockDim, g_thr[MAXT];
static int g_cur, g_nt;
#define threadIdx (g_thr[g_cur])
static ucontext_t sched_ctx, ctxs[MAXT];
static bool g_done[MAXT];
static unsigned g_rng = 12345;
static unsigned rnd() { g_rng = g_rng * 1103515245u + 12345u; return g_rng >> 8; }
static void yield_() { swapcontext(&ctxs[g_cur], &sched_ctx); }
static void maybe_yield() { if (rnd() % 4 == 0) yield_(); }

/* shared memory: one CTA's, 1024-aligned, shared addresses are offsets */
alignas(1024) static unsigned char g_smem[232 * 1024];
static unsigned long long __cvta_generic_to_shared(const void* p) {
  return (unsigned long long)((const unsigned char*)p - g_smem);
}

/* __syncthreads over the threads still running */
static int g_bar_count, g_bar_gen;
static void __syncthreads() {
  int gen = g_bar_gen;
  if (++g_bar_count == g_nt) { g_bar_count = 0; g_bar_gen++; return; }
  while (g_bar_gen == gen) yield_();
}

/* mbarriers by shared address: arrivals and (TMA) transaction bytes */
struct MBar { int expected, pending; unsigned phase; long tx; };
static std::map<unsigned, MBar> g_mbar;
static unsigned ws_sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
static void ws_bar_init(unsigned long long* bar, unsigned count) { g_mbar[ws_sa(bar)] = {(int)count, (int)count, 0, 0}; }
static MBar& mbar_at(unsigned a) {
  auto it = g_mbar.find(a);
  if (it == g_mbar.end()) { fprintf(stderr, "arrive on an uninitialized mbarrier %u\n", a); exit(5); }
  return it->second;
}
/* the phase completes once every arrival and every expected byte is in */
static void mbar_settle(MBar& b) {
  if (b.pending < 0 || b.tx < 0) { fprintf(stderr, "mbarrier: too many arrivals or bytes\n"); exit(5); }
  if (b.pending == 0 && b.tx == 0) { b.phase++; b.pending = b.expected; }
}
static void mbar_arrive_at(unsigned a) { MBar& b = mbar_at(a); b.pending--; mbar_settle(b); }
static void ws_bar_arrive(unsigned long long* bar) { mbar_arrive_at(ws_sa(bar)); }
static void ws_bar_wait(unsigned long long* bar, unsigned parity) {
  for (;;) {
    auto it = g_mbar.find(ws_sa(bar));
    if (it == g_mbar.end()) { fprintf(stderr, "wait on an uninitialized mbarrier\n"); exit(5); }
    if ((it->second.phase & 1u) != (parity & 1u)) return; /* that parity's phase completed */
    yield_();
  }
}

/* TMA: a 2-D map of bytes (the session's cuTensorMapEncodeTiled stands here) */
struct TmaMap { const unsigned char* base; unsigned long long dims[2], stride; unsigned box[2]; };
/* cp.async: per thread a FIFO of copies, group ends and queued arrivals; TMA box loads too */
struct AsyncItem { int kind; unsigned char* dst; const void* src; bool ok; unsigned bar; TmaMap map; int c0, c1; };
enum { A_COPY, A_COMMIT, A_ARRIVE, A_TMA };
static std::deque<AsyncItem> g_async[MAXT];
/* a box of map at (byte c0, row c1) into dst in the 128-byte swizzle: chunk c
 * of box row r at r * 128 + ((c ^ (r % 8)) << 4); bytes outside read 0 */
static void tma_box(const AsyncItem& it) {
  if (__cvta_generic_to_shared(it.dst) % 1024 || it.map.box[0] != 128) { fprintf(stderr, "TMA box not as the 128B swizzle wants\n"); exit(6); }
  for (unsigned r = 0; r < it.map.box[1]; r++)
    for (unsigned b = 0; b < it.map.box[0]; b++) {
      const unsigned long long row = (unsigned long long)it.c1 + r, col = (unsigned long long)it.c0 + b;
      const bool in = it.c0 >= 0 && it.c1 >= 0 && row < it.map.dims[1] && col < it.map.dims[0];
      it.dst[r * 128 + ((((b >> 4) ^ (r & 7))) << 4) + (b & 15)] = in ? it.map.base[row * it.map.stride + col] : 0;
    }
  MBar& m = mbar_at(it.bar);
  m.tx -= (long)it.map.box[0] * it.map.box[1];
  mbar_settle(m);
}
static void async_step(int t) {
  AsyncItem it = g_async[t].front();
  g_async[t].pop_front();
  if (it.kind == A_COPY) { if (it.ok) memcpy(it.dst, it.src, 16); else memset(it.dst, 0, 16); }
  if (it.kind == A_ARRIVE) mbar_arrive_at(it.bar);
  if (it.kind == A_TMA) tma_box(it);
}
static void ws_bar_expect(unsigned long long* bar, unsigned bytes) {
  MBar& m = mbar_at(ws_sa(bar));
  m.tx += bytes;
  m.pending--;
  mbar_settle(m);
}
static void ws_tma_load(unsigned char* dst, const TmaMap* map, int c0, int c1, unsigned long long* bar) {
  AsyncItem it{};
  it.kind = A_TMA; it.dst = dst; it.map = *map; it.c0 = c0; it.c1 = c1; it.bar = ws_sa(bar);
  g_async[g_cur].push_back(it);
  maybe_yield();
}
/* the hardware's progress: some of every thread's oldest items land */
static bool async_progress(bool all) {
  bool any = false;
  for (int t = 0; t < g_nt; t++)
    while (!g_async[t].empty() && (all || rnd() % 3)) { async_step(t); any = true; }
  return any;
}
static void cp_async16_z(void* dst, const void* src, bool ok) {
  AsyncItem it{};
  it.kind = A_COPY; it.dst = (unsigned char*)dst; it.src = src; it.ok = ok;
  g_async[g_cur].push_back(it);
  maybe_yield();
}
static void cp_async_commit() { AsyncItem it{}; it.kind = A_COMMIT; g_async[g_cur].push_back(it); }
template <int N> void cp_async_wait() {
  auto& q = g_async[g_cur];
  auto groups = [&]() { int n = 0; for (auto& i : q) n += i.kind == A_COMMIT; return n; };
  if (N == 0) { while (!q.empty()) async_step(g_cur); return; }
  while (groups() > N) async_step(g_cur);
}
static void ws_bar_arrive_cp(unsigned long long* bar) {
  AsyncItem it{};
  it.kind = A_ARRIVE; it.bar = ws_sa(bar);
  g_async[g_cur].push_back(it);
}

/* wgmma m64nBNk32 s8: each thread's part, issued into groups, applied when retired */
static void check_desc(unsigned long long d) {
  if (((d >> 16) & 0x3FFF) != 1 || ((d >> 32) & 0x3FFF) != 1024 / 16 || (d >> 62) != 1 || ((d >> 46) & 0xFFFF)) {
    fprintf(stderr, "unexpected wgmma descriptor %llx\n", d); exit(6);
  }
}
static int sbyte(unsigned start, int r, int b) {
  unsigned a = start + (unsigned)r * 128 + (unsigned)b;
  a ^= ((a >> 7) & 7) << 4;
  return (signed char)g_smem[a];
}
struct WgOp { int* d; unsigned long long da, db; int acc, bn; std::vector<int> v; };
static std::vector<std::vector<WgOp>> g_wg[MAXT]; /* per thread: committed groups, then the open one */
static std::vector<WgOp> g_wg_open[MAXT];
static void wg_compute(const WgOp& op, std::vector<int>& v) {
  const int t = threadIdx.x & 127, w = t >> 5, l = t & 31;
  const unsigned sa = (unsigned)(op.da & 0x3FFF) << 4, sb = (unsigned)(op.db & 0x3FFF) << 4;
  v.assign(op.bn / 2, 0);
  for (int j = 0; j < op.bn / 8; j++)
    for (int e = 0; e < 4; e++) {
      const int row = 16 * w + (l >> 2) + 8 * (e >> 1), col = 8 * j + 2 * (l & 3) + (e & 1);
      int s = 0;
      for (int k = 0; k < 32; k++) s += sbyte(sa, row, k) * sbyte(sb, col, k);
      v[4 * j + e] = s;
    }
}
template <int BN> void wgmma_s8(int* d, unsigned long long da, unsigned long long db, int acc) {
  check_desc(da); check_desc(db);
  WgOp op{d, da, db, acc, BN, {}};
  wg_compute(op, op.v);
  g_wg_open[g_cur].push_back(op);
}
static void wg_fence() {}
static void wg_commit() { g_wg[g_cur].push_back(g_wg_open[g_cur]); g_wg_open[g_cur].clear(); maybe_yield(); }
template <int N> void wg_retire();
/* wgmma.wait_group is .sync.aligned: a warp's lanes pass it together, so
 * one lane's arrival after it speaks for its warp */
static int g_wbar_count[MAXT / 32], g_wbar_gen[MAXT / 32];
static void warp_sync() {
  const int w = g_cur >> 5, gen = g_wbar_gen[w];
  if (++g_wbar_count[w] == 32) { g_wbar_count[w] = 0; g_wbar_gen[w]++; return; }
  while (g_wbar_gen[w] == gen) yield_();
}
template <int N> void wg_wait() {
  warp_sync();
  wg_retire<N>();
  warp_sync();
}
template <int N> void wg_retire() {
  auto& gs = g_wg[g_cur];
  while ((int)gs.size() > N) {
    for (auto& op : gs.front()) {
      std::vector<int> now;
      wg_compute(op, now);
      if (now != op.v) { fprintf(stderr, "race: a stage changed under a wgmma in flight (thread %d)\n", g_cur); exit(4); }
      for (int i = 0; i < op.bn / 2; i++) op.d[i] = (op.acc ? op.d[i] : 0) + now[i];
    }
    gs.erase(gs.begin());
  }
}
template <int R> void wg_fence_acc(int*) {}
"""

MAIN = r"""
static void entry();
@KSTUB@
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb");
  const long M = atol(argv[2]), N = atol(argv[3]), K = atol(argv[4]);
  std::vector<signed char> x(M * K), w(N * K);
  std::vector<float> xs(M), ws(N), b(N), r(M * N), y(M * N, -12345.f);
  fread(x.data(), 1, M * K, f); fread(w.data(), 1, N * K, f);
  fread(xs.data(), 4, M, f); fread(ws.data(), 4, N, f); fread(b.data(), 4, N, f); fread(r.data(), 4, M * N, f);
  fclose(f);
  g_x = x.data(); g_w = w.data(); g_xs = xs.data(); g_ws = ws.data(); g_b = b.data(); g_r = r.data(); g_y = y.data();
  if (argc >= 18) { /* the plan's two maps: row bytes, rows, row stride, box bytes, box rows */
    TmaMap* ms[2] = {&g_tmx, &g_tmw};
    const unsigned char* bases[2] = {(const unsigned char*)x.data(), (const unsigned char*)w.data()};
    for (int j = 0; j < 2; j++)
      *ms[j] = {bases[j], {(unsigned long long)atoll(argv[8 + 5 * j]), (unsigned long long)atoll(argv[9 + 5 * j])},
                (unsigned long long)atoll(argv[10 + 5 * j]), {(unsigned)atoi(argv[11 + 5 * j]), (unsigned)atoi(argv[12 + 5 * j])}};
  }
  gridDim = {(unsigned)atoi(argv[6]), @GY@, 1};
  blockDim = {@NT@, 1, 1};
  g_nt = @NT@;
  g_rng = (unsigned)atoi(argv[7]);
  std::vector<char> stacks((size_t)@NT@ * 65536);
  for (unsigned by = 0; by < gridDim.y; by++)
  for (unsigned bx = 0; bx < gridDim.x; bx++) {
    blockIdx = {bx, by, 0};
    memset(g_smem, 0xA5, sizeof g_smem);
    g_mbar.clear();
    g_bar_count = 0;
    memset(g_wbar_count, 0, sizeof g_wbar_count);
    for (int t = 0; t < @NT@; t++) {
      g_thr[t] = {(unsigned)t, 0, 0}; g_done[t] = false;
      g_async[t].clear(); g_wg[t].clear(); g_wg_open[t].clear();
      getcontext(&ctxs[t]);
      ctxs[t].uc_stack.ss_sp = &stacks[(size_t)t * 65536]; ctxs[t].uc_stack.ss_size = 65536; ctxs[t].uc_link = &sched_ctx;
      makecontext(&ctxs[t], entry, 0);
    }
    long idle = 0;
    for (;;) {
      bool any = false;
      static const unsigned primes[] = {1, 7, 11, 13, 17, 19, 23, 29}; /* prime to the block size: a permutation */
      const unsigned off = rnd(), stride = primes[rnd() % 8];
      for (int i = 0; i < @NT@; i++) {
        int t = (int)((i * stride + off) % @NT@);
        if (g_done[t]) continue;
        g_cur = t; swapcontext(&sched_ctx, &ctxs[t]);
      }
      for (int t = 0; t < @NT@; t++) any |= !g_done[t];
      bool moved = async_progress(false);
      if (!any) { async_progress(true); break; }
      idle = moved ? 0 : idle + 1;
      if (idle > 200000) { fprintf(stderr, "deadlock in CTA %u\n", bx); return 3; }
    }
  }
  f = fopen(argv[5], "wb"); fwrite(y.data(), 4, M * N, f); fclose(f);
  return 0;
}
"""


def model(path, M, K, N, seed):
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    b = (0.1 * rng.standard_normal(N)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["lin"]),
             helper.make_node("Add", ["lin", "r"], ["sum"]), helper.make_node("Identity", ["sum"], ["y"])]
    F = TensorProto.FLOAT
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [M, K]),
                                       helper.make_tensor_value_info("r", F, [M, N])],
                          [helper.make_tensor_value_info("y", F, [M, N])],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def cut(text, start):
    """the definition that starts at `start` (a regex), through its matching brace"""
    m = re.search(start, text)
    assert m, "not in the module: " + start
    i = text.index("{", m.end() - 1 if text[m.end() - 1] == "{" else m.end())
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[m.start():j + 1] + "\n"
    raise AssertionError("unbalanced: " + start)


def host_source(text):
    """(threads, kernel name, host C++ of the kernel and its helpers, TMA
    maps as parameters, warp-specialized)"""
    m = re.search(r'extern "C" __global__ void __launch_bounds__\((\d+)(?:, \d+)?\) (k\d+_int8_gemm_epilogue\d*)\(([^)]*)\) \{',
                  text)
    assert m, "no int8 GEMM kernel in the module"
    ws = "ws_consume<" in cut(text, re.escape(m.group(0)))
    helpers = [cut(text, r"template <int BK> __device__ __forceinline__ int i8_sw"),
               cut(text, r"__device__ __forceinline__ unsigned long long wg_desc")]
    if ws:
        helpers += [cut(text, r"template <int BM, int BN, int ST>\n__device__ __forceinline__ void ws_produce_tma"),
                    cut(text, r"template <int BM, int BN, int ST, int NP>\n__device__ __forceinline__ void ws_produce"),
                    cut(text, r"template <int BM, int BN, int ST>\n__device__ __forceinline__ void ws_consume"),
                    cut(text, r"template <int ST> __device__ __forceinline__ void ws_skip")]
    else:
        helpers += [cut(text, r"template <int BM, int BN, int BK, int NTH>\n__device__ __forceinline__ void i8_load"),
                    cut(text, r"template <int BM, int BN, int ST>\n__device__ __forceinline__ void i8_wg_mainloop")]
    nt, name, params = int(m.group(1)), m.group(2), m.group(3)
    kern = cut(text, re.escape(m.group(0)))
    kern = kern.replace(m.group(0), "void %s(%s) {" % (name, params.replace("const __grid_constant__ TmaMap", "const TmaMap")))
    kern = kern.replace("extern __shared__ __align__(1024) unsigned char smem_raw_[];",
                        "unsigned char* smem_raw_ = g_smem;")
    body = "".join(helpers) + kern
    body = body.replace("__device__ __forceinline__", "static inline").replace("__restrict__", "__restrict")
    body = body.replace('asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");', "/* proxy fence */")
    # the epilogue's inputs: xs by row, ws and b by column, r by element (the model's order)
    for pat in (r"in1\[row_\]", r"in2\[\(j0_ \+ u\)\]", r"in3\[\(j0_ \+ u\)\]", r"in4\[i\]"):
        assert re.search(pat, kern), "epilogue input not as expected: " + pat
    return nt, name, body, "TmaMap tmx_" in params, ws


def plan_tmaps(plan):
    """the plan's TMA records (runtime/plan.h PlanTensorMap, section 18: step,
    tensor, dims[2], row_stride, box[2], swizzle, reserved) as (row bytes,
    rows, row stride, box bytes, box rows)"""
    b = open(plan, "rb").read()
    (ns,) = struct.unpack_from("<I", b, 36)
    for i in range(ns):
        sid, _, off, size = struct.unpack_from("<IIQQ", b, 64 + 24 * i)
        if sid == 18:
            recs = [struct.unpack_from("<IIQQQIIII", b, off + 48 * j) for j in range(size // 48)]
            assert all(r[7] == 3 and r[8] == 0 for r in recs), recs  # 128B swizzle
            return [(r[2], r[3], r[4], r[5], r[6]) for r in recs]
    return []


def run_case(M, K, N, ws, grid_override, seed, env=None, work=WORK):
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "m.onnx")
    model(path, M, K, N, seed)
    src = os.path.join(work, "m.cu")
    plan = os.path.join(work, "m.gpuc")
    e = dict(os.environ, GPUC_SAVE_SOURCE=src, GPUC_INT8_GEMM="own", **(env or {}))
    e.pop("GPUC_INT8_WS", None)
    if ws is not None:  # None: the default's choice (lower_int8_gemm.c, ws_choice)
        e["GPUC_INT8_WS"] = (env or {}).get("GPUC_INT8_WS", "1") if ws else "0"
    r = subprocess.run([GPUC, path, "-O2", "--int8", "--arch", "sm_90", "-o", plan], env=e, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    text = open(src).read()
    nt, name, body, tma, ws_kernel = host_source(text)
    if ws is not None:
        assert ws_kernel == ws, "GPUC_INT8_WS=%s: the warp-specialized kernel %s" % (e["GPUC_INT8_WS"], ws_kernel)
    ws = ws_kernel
    maps = plan_tmaps(plan) if tma else []
    if tma:  # Xq [M, K] and Wq [N, K] as the plan's records say (the session encodes them so)
        assert len(maps) == 2 and maps[0][:3] == (K, M, K) and maps[1][:3] == (K, N, K) and \
            all(m[3] == 128 for m in maps), maps
    ins = subprocess.run([GPUC, "inspect", plan], capture_output=True, text=True).stdout
    g = re.search(r"kernel %s\s+grid (\d+)(?:x(\d+))?" % name, ins)
    assert g, "no grid for %s in gpuc inspect" % name
    gx, gy = int(g.group(1)), 1
    t = re.search(r"const int m0 = blockIdx.y \* (\d+), n0 = blockIdx.x \* (\d+);", body)
    if not ws:  # inspect counts a 2-D grid's CTAs: the tile's N x M grid
        assert t, "no tile in the kernel"
        gx, gy = (N + int(t.group(2)) - 1) // int(t.group(2)), (M + int(t.group(1)) - 1) // int(t.group(1))
        assert gx * gy == int(g.group(1)), (gx, gy, g.group(1))
    if grid_override:
        gx = grid_override
    stub = ("static signed char *g_x, *g_w; static float *g_xs, *g_ws, *g_b, *g_r, *g_y;\n" + body +
            "static TmaMap g_tmx, g_tmw;\n"
            "static void entry() { %s(g_x, g_w, g_xs, g_ws, g_b, g_r, g_y%s); g_done[g_cur] = true; }\n" %
            (name, ", g_tmx, g_tmw" if tma else ""))
    cpp = SHIM + MAIN.replace("@GY@", str(gy)).replace("@NT@", str(nt)).replace("@KSTUB@", stub)
    open(os.path.join(work, "emu.cpp"), "w").write(cpp)
    exe = os.path.join(work, "emu")
    r = subprocess.run([CXX, "-O2", "-std=c++17", "-ffp-contract=off", "-fno-strict-aliasing", "-w",
                        os.path.join(work, "emu.cpp"), "-o", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:3000]
    rng = np.random.default_rng(seed)
    x = rng.integers(-127, 128, (M, K), dtype=np.int8)
    w = rng.integers(-127, 128, (N, K), dtype=np.int8)
    xs = rng.uniform(1e-3, 2e-2, M).astype(np.float32)
    wsc = rng.uniform(1e-3, 2e-2, N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    res = rng.standard_normal((M, N)).astype(np.float32)
    inp = os.path.join(work, "in.bin")
    with open(inp, "wb") as f:
        for a in (x, w, xs, wsc, b, res):
            f.write(np.ascontiguousarray(a).tobytes())
    outp = os.path.join(work, "out.bin")
    r = subprocess.run([exe, inp, str(M), str(N), str(K), outp, str(gx), str(seed)] + [str(v) for m in maps for v in m],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, "emulation exit %d: %s" % (r.returncode, r.stderr.strip()[-300:])
    got = np.fromfile(outp, np.float32).reshape(M, N)
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    want = ((acc.astype(np.float32) * xs[:, None]) * wsc[None, :] + b[None, :]) + res
    bad = int(np.count_nonzero(got.view(np.int32) != want.view(np.int32)))
    return bad, got.size, "%s%s, %d threads, grid %dx%d%s" % ("WS" if ws else "wgmma", " TMA" if tma else "", nt, gx, gy,
                                                             ", boxes %s" % [m[4] for m in maps] if maps else "")


CASES = [  # M, K, N, warp-specialized (None: as the default picks), grid (None: the plan's), env
    (777, 48, 132, False, None, {}),          # the emulator against the kernel the H200 runs bit-exact
    (300, 1040, 520, False, None, {}),
    (777, 48, 132, True, None, {}),           # WS: M, N, K edges, one tile a CTA
    (777, 48, 132, True, 2, {}),              # WS: 2 CTAs, 7 and 7 tiles around the ring
    (300, 1040, 520, True, 3, {}),            # K 1040: a 16-byte tail K step, ring wrapping inside a tile
    (64, 16, 4, True, None, {}),              # one 16-byte K chunk, 4 columns
    (200, 256, 520, True, 2, {}),             # 2 K steps a tile, 3 stages: the ring's phase flips mid-tile
    (200, 256, 520, True, 2, {"GPUC_INT8_WS_TILE": "ws128x256s4"}),  # N >= 2048's default tile, a producer warpgroup
    (200, 256, 136, True, 2, {"GPUC_INT8_WS_TILE": "ws64x128s2"}),
    (300, 384, 200, True, 2, {"GPUC_INT8_WS_TILE": "ws128x64s5"}),
    (300, 384, 200, True, 2, {"GPUC_INT8_WS_TILE": "ws256x128s3"}),  # four consumer warpgroups
    (300, 384, 200, True, 2, {"GPUC_INT8_WS_TILE": "pp64x128s2"}),   # ping-pong: 5 x 2 tiles each CTA, 3 K steps
    (777, 48, 132, True, 3, {"GPUC_INT8_WS_TILE": "pp64x256s4"}),    # ping-pong, an odd count of tiles a CTA
    (200, 1040, 136, True, 2, {"GPUC_INT8_WS_TILE": "pp64x64s3"}),  # ping-pong, 9 K steps (ring wraps in a tile)
    # TMA loads (GPUC_INT8_WS=tma): boxes zero-filled past M, N and K, the expect_tx byte counts
    (777, 48, 132, True, 2, {"GPUC_INT8_WS": "tma"}),
    (300, 1040, 520, True, 3, {"GPUC_INT8_WS": "tma"}),
    (64, 16, 4, True, None, {"GPUC_INT8_WS": "tma"}),
    (200, 256, 520, True, 2, {"GPUC_INT8_WS": "tma", "GPUC_INT8_WS_TILE": "ws128x256s4"}),
    (300, 384, 200, True, 2, {"GPUC_INT8_WS": "tma", "GPUC_INT8_WS_TILE": "ws256x128s3"}),
    (777, 48, 132, True, 3, {"GPUC_INT8_WS": "tma", "GPUC_INT8_WS_TILE": "pp64x256s4"}),
    (200, 1040, 136, True, 2, {"GPUC_INT8_WS": "tma", "GPUC_INT8_WS_TILE": "pp64x64s3"}),
    # the default (no GPUC_INT8_WS): TMA where ws_choice takes it, with the
    # shape's tile: K >= 2048 128 x 128 (K 2080: a 16-byte tail), N 2048 to
    # 3071 ping-pong 64 x 256, N >= 3072 ping-pong 64 x 128; the wgmma kernel
    # below both
    (130, 2080, 136, None, 2, {}),
    (70, 48, 2056, None, 3, {}),
    (70, 80, 3080, None, 5, {}),
    (300, 1040, 520, None, None, {}),
]
# what the default must pick for the cases above (ws_choice): the kernel, and the TMA boxes' rows (Xq's, Wq's)
DEFAULT_WANT = {(130, 2080, 136): ("WS TMA", "boxes [128, 128]"), (70, 48, 2056): ("WS TMA", "boxes [64, 256]"),
                (70, 80, 3080): ("WS TMA", "boxes [64, 128]"), (300, 1040, 520): ("wgmma,", "")}

if __name__ == "__main__":
    npass = nfail = 0
    for i, (M, K, N, ws, grid, env) in enumerate(CASES):
        try:
            bad, n, how = run_case(M, K, N, ws, grid, 1000 + i, env)
            ok = bad == 0
            if ws is None:  # the default's kernel and tile as ws_choice says
                kind, boxes = DEFAULT_WANT[(M, K, N)]
                ok = ok and how.startswith(kind) and boxes in how
            why = "%d of %d differ (%s)" % (bad, n, how)
        except Exception as e:  # noqa: BLE001
            ok, why = False, str(e).strip().splitlines()[-1][:300] if str(e).strip() else repr(e)
        npass += ok
        nfail += not ok
        print("%s M%d K%d N%d %s%s %s: %s" % ("PASS" if ok else "FAIL", M, K, N,
                                             "default" if ws is None else "ws" if ws else "wgmma",
                                             " grid %d" % grid if grid else "",
                                             " ".join("%s=%s" % kv for kv in env.items()), why), flush=True)
    print("%d passed, %d failed" % (npass, nfail))
    sys.exit(1 if nfail else 0)
