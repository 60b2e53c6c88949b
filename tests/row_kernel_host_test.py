#!/usr/bin/env python3
"""The --int8 fused row kernels (codegen/ew_kernel.c cg_ew_rows_quantize,
the multi-row layout of codegen/lower_rows.h) and DynamicQuantizeLinear's
kernels run on the host.

No GPU here, so the kernel's own text is run: for each case a tiny ONNX
model is compiled `--int8` (fp32 or --fp16) for sm_90 with
GPUC_SAVE_SOURCE set, the fused `k*_Fused*Quantize` kernel is cut out of
the module source and compiled by the host C++ compiler under a shim that
runs a block's threads as host threads (warp shuffles and __syncthreads
as barriers, __shared__ arrays static: blocks run one at a time), and run
on random inputs with the plan's launch shape and again with one block
(the grid-stride loop over blocks of rows). The int8 row and its scale
must equal, bit for bit, numpy's float32 evaluation of the same rule
(each multiply and add rounded, the row rounded to the stored dtype, then
absmax, 127 / m, rint, clamp to +-127; ir/quant_int8.h), except GELU,
whose erf may differ from the host's by an ulp: there at most 1 in 200 of
the int8 values may be one step off, the scales within 1e-6.
Cases: rows a multiple of the rows a block and not (13, 5, 3 rows), rows
of 36 (vectors of 4, not 8), 768 (a warp a row, vectors of 8), 1028 (two
warps a row) and 2052 (four warps, vectors of 4), fp32 rows (vectors of 4),
the dequantize + bias + Relu / GELU groups and the heads-merging Transpose
(strided vector loads); the unfused dequantize group (an items kernel
indexing its bias and scale by row and column); QuantizeRows alone
(codegen/lower_int8.c: rows in registers and the two-pass loop) bit for
bit; DynamicQuantizeLinear
(codegen/lower_quant.c: partial ranges over several blocks, their range,
the quantize) against numpy's reading of the ONNX rule, bit for bit;
InstanceNormalization over few, long planes (codegen/lower_norm.c's split
path: per-part statistics, merged per plane, the normalize) against numpy
in float64, fp32 and fp16; ReduceL2 / ReduceMax over many short rows (a
warp a row, codegen/lower_reduce.c) against numpy.
usage: row_kernel_host_test.py GPUC [WORKDIR]   (CXX picks the compiler)
Prints one line per case and 'N passed, N failed'."""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
typedef long long i64;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
typedef _Float16 __half;
struct Dim { unsigned x, y, z; };
static thread_local Dim threadIdx, blockIdx;
static Dim blockDim, gridDim;
static std::barrier<> *block_bar, *warp_bar[32];
static uint64_t slot_[1024];
static void __syncthreads() { block_bar->arrive_and_wait(); }
template <class T> static T __shfl_xor_sync(unsigned, T v, int o) {
  unsigned t = threadIdx.x;
  memcpy(&slot_[t], &v, sizeof v);
  warp_bar[t >> 5]->arrive_and_wait();
  T r;
  memcpy(&r, &slot_[t ^ (unsigned)o], sizeof r);
  warp_bar[t >> 5]->arrive_and_wait();
  return r;
}
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __fadd_rn(float a, float b) { return a + b; }
template <class T> static inline float ldf(T x) { return (float)x; }
template <class T> static inline T stf(float x) { return (T)x; }
template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };
struct uint2 { unsigned x, y; };
struct alignas(16) float4 { float x, y, z, w; };
using std::isinf;
using std::rint;
static void gpuc_fault_report(unsigned, int, long long, long long, long long, int) { abort(); }
#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                               i += (i64)gridDim.x * blockDim.x)
"""

MAIN = r"""
static void *load(const char *p, size_t bytes) {
  void *b = aligned_alloc(256, (bytes + 255) / 256 * 256);
  FILE *f = fopen(p, "rb");
  if (!f || fread(b, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %%s\n", p); exit(1); }
  fclose(f);
  return b;
}
int main(int argc, char **argv) {
  (void)argc;
  unsigned grid = (unsigned)atoi(argv[1]), block = (unsigned)atoi(argv[2]);
%(loads)s
  float *qs = (float *)aligned_alloc(256, %(rows)d * 4 + 256);
  unsigned char *qo = (unsigned char *)aligned_alloc(256, %(numel)d * %(ysize)d + 256);
  memset(qo, 0xAA, %(numel)d * %(ysize)d);
  blockDim = Dim{block, 1, 1};
  gridDim = Dim{grid, 1, 1};
  for (unsigned bx = 0; bx < grid; bx++) {
    std::barrier<> bb((std::ptrdiff_t)block);
    block_bar = &bb;
    std::vector<std::barrier<> *> wb;
    for (unsigned w = 0; w < block / 32; w++) wb.push_back(warp_bar[w] = new std::barrier<>(32));
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block; t++)
      ts.emplace_back([=] { threadIdx = Dim{t, 0, 0}; blockIdx = Dim{bx, 0, 0}; %(kernel)s(%(args)s); });
    for (auto &t : ts) t.join();
    for (auto *w : wb) delete w;
  }
  FILE *f = fopen(argv[3], "wb");
  if (!f || fwrite(qs, 4, %(rows)d, f) != %(rows)d || fwrite(qo, %(ysize)d, %(numel)d, f) != %(numel)d) return 1;
  fclose(f);
  return 0;
}
"""

gpuc = sys.argv[1]
work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="gpuc_rowhost_")
os.makedirs(work, exist_ok=True)
cxx = os.environ.get("CXX", "g++")
passed = failed = 0


def verdict(ok, line):
    global passed, failed
    passed += ok
    failed += not ok
    print("%-72s %s" % (line, "ok" if ok else "FAIL"), flush=True)


def host_build(name, d, source):
    """source compiled by the host C++ compiler: the executable, or None after a failed verdict"""
    cpp, exe = os.path.join(d, "k.cpp"), os.path.join(d, "k")
    open(cpp, "w").write(source)
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-w", cpp, "-o", exe],
                       capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host compile failed: %s" % (name, r.stderr[-600:]))
        return None
    return exe


def host_run(name, exe, args, out):
    """exe run with args (its output file out last): out's bytes, or None after a failed verdict"""
    r = subprocess.run([exe] + args + [out], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
        return None
    return np.fromfile(out, np.uint8)


def linear_model(path, rows, k0, c, act, rng):
    """x [rows, k0] -> Linear(k0 -> c) -> act -> Linear(c -> 8): the second
    Linear's QuantizeRows joins the first's DequantizeRows and act."""
    w1 = (rng.standard_normal((k0, c)) * 0.2).astype(np.float32)
    b1 = (rng.standard_normal(c) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((c, 8)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"])]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["hb"], ["a"]))
    else:  # the erf GELU as BERT's exporters write it
        nodes += [helper.make_node("Div", ["hb", "sqrt2"], ["g0"]), helper.make_node("Erf", ["g0"], ["g1"]),
                  helper.make_node("Add", ["g1", "one"], ["g2"]), helper.make_node("Mul", ["hb", "g2"], ["g3"]),
                  helper.make_node("Mul", ["g3", "half"], ["a"])]
    nodes.append(helper.make_node("MatMul", ["a", "w2"], ["y"]))
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    g = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k0])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def heads_model(path, b, h, s, d, rng):
    """x [b, h, s, d] -> Transpose(0, 2, 1, 3) -> Reshape [b, s, h*d] -> Linear(h*d -> 8)"""
    w = (rng.standard_normal((h * d, 8)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([b, s, h * d], np.int64), "shape")]
    g = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, h, s, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def ptype(param):
    """'const int* __restrict__ in0' -> 'const int*'"""
    return param[:param.index("*") + 1].strip()


def kernel_text(src, pattern, first_param, nparams):
    """the last kernel named by pattern with nparams parameters, the first of type first_param"""
    found = (None, None, None)
    for m in re.finditer(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(' + pattern + r')\((.*?)\) \{\n', src):
        params = [p.strip() for p in m.group(2).split(",")]
        if ptype(params[0]) == first_param and len(params) == nparams:
            end = src.index("\n}\n", m.end())
            found = (m.group(1), src[m.start():end + 3], params)
    return found


def launch_of(plan, kname):
    out = subprocess.run([gpuc, "inspect", plan], capture_output=True, text=True).stdout
    m = re.search(r"kernel %s\s+grid (\d+) block (\d+)" % re.escape(kname), out)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def quantize(v):
    """QuantizeRows' rule on float32 rows v [rows, c]"""
    m = np.max(np.abs(v), axis=1).astype(np.float32)
    inv = np.where(m > 0, np.float32(127) / np.where(m > 0, m, 1), 0).astype(np.float32)
    q = np.clip(np.rint((v * inv[:, None]).astype(np.float32)), -127, 127).astype(np.int8)
    s = np.where(m > 0, m / np.float32(127), 1).astype(np.float32)
    return q, s


def erf32(x):
    from math import erf
    return np.vectorize(lambda t: np.float32(erf(float(t))), otypes=[np.float32])(x)


def run_case(name, kind, fp16, rows, c, act=None, heads=None, unfused=False):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(abs(hash(name)) % (1 << 32))
    onnx_path, plan, src_path = os.path.join(d, "m.onnx"), os.path.join(d, "m.gpuc"), os.path.join(d, "m.cu")
    if kind == "linear":
        linear_model(onnx_path, rows, 16, c, act, rng)
    else:
        heads_model(onnx_path, *heads, rng)
    env = dict(os.environ, GPUC_SAVE_SOURCE=src_path)
    if unfused:  # the dequantize group as its own elementwise kernel, which stores the half row
        env["GPUC_NO_ROW_FUSION"] = "1"
    r = subprocess.run([gpuc, onnx_path, "--arch", "sm_90", "--int8", "-o", plan] + (["--fp16"] if fp16 else []),
                       capture_output=True, text=True, env=env)
    if r.returncode:
        verdict(False, "%s: compile failed: %s" % (name, (r.stdout + r.stderr)[-300:]))
        return
    kname, text, params = kernel_text(open(src_path).read(), r"k\d+_Fused\d+" if unfused else r"k\d+_Fused\d+Quantize",
                                      "const int*" if kind == "linear" else "const float*",
                                      3 if kind == "heads" else 5 if unfused else 6)
    if not kname:
        verdict(False, "%s: no fused row kernel in the module" % name)
        return
    grid, block = launch_of(plan, kname)
    ydt = np.float16 if fp16 else np.float32
    numel = rows * c
    bufs = []  # (param, array)
    if kind == "linear":
        # in0 acc int32 [rows, c], in1 xs f32 [rows, 1], in2 ws f32 [c], in3 bias (y's dtype) [c]
        want_types = ["const int*", "const float*", "const float*", "const __half*" if fp16 else "const float*"]
        got_types = [ptype(p) for p in params[:4]]
        if got_types != want_types or len(params) != (5 if unfused else 6):
            verdict(False, "%s: parameters %s, want %s + qs, qo" % (name, params, want_types))
            return
        acc = rng.integers(-3000, 3000, (rows, c)).astype(np.int32)
        xs = rng.uniform(1e-3, 2e-2, (rows, 1)).astype(np.float32)
        ws = rng.uniform(1e-3, 2e-2, c).astype(np.float32)
        bias = (rng.standard_normal(c) * 0.5).astype(ydt)
        bufs = [acc, xs, ws, bias]
        v = (acc.astype(np.float32) * xs).astype(np.float32)
        v = (v * ws[None, :]).astype(np.float32)
        v = (v + bias.astype(np.float32)[None, :]).astype(np.float32)
        if act == "relu":
            v = np.maximum(v, np.float32(0))
        else:  # 0.5 * x * (1 + erf(x * 0.70710678)) in float, as the GELU term
            v = (np.float32(0.5) * v * (np.float32(1) + erf32((v * np.float32(0.7071067811865476)).astype(np.float32))))
            v = v.astype(np.float32)
    else:
        b, h, s, dd = heads
        want_types = ["const float*"]  # the model's input, cast to half (fp16) inside the kernel
        if [ptype(p) for p in params[:1]] != want_types or len(params) != 3:
            verdict(False, "%s: parameters %s, want %s + qs, qo" % (name, params, want_types))
            return
        x = rng.standard_normal((b, h, s, dd)).astype(np.float32)
        bufs = [x]
        v = x.astype(ydt).transpose(0, 2, 1, 3).reshape(rows, c).astype(np.float32)
    v = v.astype(ydt).astype(np.float32)  # the row as the unfused graph stores it
    q_want, s_want = quantize(v)
    loads, args = [], []
    for k, a in enumerate(bufs):
        f = os.path.join(d, "in%d.bin" % k)
        a.tofile(f)
        t = ptype(params[k]).replace("const ", "")
        loads.append("  %s in%d_ = (%s)load(\"%s\", %d);" % (t, k, t, f, a.nbytes))
        args.append("in%d_" % k)
    harness = SHIM + text + MAIN % {"loads": "\n".join(loads), "rows": rows, "numel": numel, "kernel": kname,
                                    "args": ", ".join(args + (["(%s*)qo" % ("__half" if fp16 else "float")] if unfused
                                                              else ["qs", "qo"])),
                                    "ysize": 2 if unfused and fp16 else 4 if unfused else 1}
    exe = host_build(name, d, harness)
    if exe is None:
        return
    for g in sorted({grid, 1}):
        raw = host_run(name, exe, [str(g), str(block)], os.path.join(d, "out_g%d.bin" % g))
        if raw is None:
            return
        if unfused:
            y_got = raw[rows * 4:].view(ydt).reshape(rows, c)
            bad = np.count_nonzero(y_got.view(np.uint16 if fp16 else np.uint32) != v.astype(ydt).view(
                np.uint16 if fp16 else np.uint32))
            verdict(bad == 0, "%s: %s rows %d x %d, grid %d block %d: %d values differ" %
                    (name, kname, rows, c, g, block, bad))
            continue
        s_got = raw[:rows * 4].view(np.float32)
        q_got = raw[rows * 4:].view(np.int8).reshape(rows, c)
        diff = np.abs(q_got.astype(np.int32) - q_want.astype(np.int32))
        if act == "gelu":
            ok = diff.max() <= 1 and np.count_nonzero(diff) * 200 <= diff.size and \
                np.allclose(s_got, s_want, rtol=1e-6, atol=0)
        else:
            ok = diff.max() == 0 and np.array_equal(s_got.view(np.uint32), s_want.view(np.uint32))
        verdict(ok, "%s: %s rows %d x %d, grid %d block %d: %d int8 values differ (max %d), scales %s" %
                (name, kname, rows, c, g, block, np.count_nonzero(diff), diff.max(),
                 "equal" if np.array_equal(s_got, s_want) else "differ"))


run_case("relu_fp16_r13_c36", "linear", True, 13, 36, "relu")     # vectors of 4, a partial block of rows
run_case("relu_fp16_r9_c768", "linear", True, 9, 768, "relu")     # a warp a row, vectors of 8
run_case("relu_fp16_r5_c1028", "linear", True, 5, 1028, "relu")   # two warps a row, vectors of 4
run_case("relu_fp16_r3_c2052", "linear", True, 3, 2052, "relu")   # four warps a row
run_case("relu_fp32_r11_c20", "linear", False, 11, 20, "relu")    # fp32 rows, vectors of 4
run_case("gelu_fp16_r6_c3072", "linear", True, 6, 3072, "gelu")   # BERT's intermediate row
run_case("heads_fp16_b2_h12_s3_d64", "heads", True, 6, 768, heads=(2, 12, 3, 64))  # strided vectors of 8
run_case("heads_fp16_b1_h3_s5_d4", "heads", True, 5, 12, heads=(1, 3, 5, 4))      # strided vectors of 4
DQL_MAIN = r"""
static void *load(const char *p, size_t bytes) {
  void *b = aligned_alloc(256, (bytes + 255) / 256 * 256);
  FILE *f = fopen(p, "rb");
  if (!f || fread(b, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %%s\n", p); exit(1); }
  fclose(f);
  return b;
}
template <class F> static void launch(unsigned grid, unsigned block, F f) {
  blockDim = Dim{block, 1, 1};
  gridDim = Dim{grid, 1, 1};
  for (unsigned bx = 0; bx < grid; bx++) {
    std::barrier<> bb((std::ptrdiff_t)block);
    block_bar = &bb;
    std::vector<std::barrier<> *> wb;
    for (unsigned w = 0; w < block / 32; w++) wb.push_back(warp_bar[w] = new std::barrier<>(32));
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block; t++)
      ts.emplace_back([=] { threadIdx = Dim{t, 0, 0}; blockIdx = Dim{bx, 0, 0}; f(); });
    for (auto &t : ts) t.join();
    for (auto *w : wb) delete w;
  }
}
int main(int argc, char **argv) {
  (void)argc;
  float *x = (float *)load(argv[1], %(n)d * 4);
  float *part = (float *)aligned_alloc(256, 2 * %(g)d * 4 + 256), *qp = (float *)aligned_alloc(256, 256);
  float *ys = (float *)aligned_alloc(256, 256);
  unsigned char *yz = (unsigned char *)aligned_alloc(256, 256), *y = (unsigned char *)aligned_alloc(256, %(n)d + 256);
  launch(%(g)d, 256, [=] { %(k1)s(x, part); });
  launch(1, 1024, [=] { %(k2)s(part, qp, ys, yz); });
  launch(%(g3)d, 256, [=] { %(k3)s(x, qp, y); });
  FILE *f = fopen(argv[2], "wb");
  if (!f || fwrite(ys, 4, 1, f) != 1 || fwrite(yz, 1, 1, f) != 1 || fwrite(y, 1, %(n)d, f) != %(n)d) return 1;
  fclose(f);
  return 0;
}
"""


def module_kernels(name, d, graph, flags, op, env=None):
    """Saves graph as d/m.onnx, compiles it for sm_90 (+ flags, + env) with
    GPUC_SAVE_SOURCE; returns (plan, [(kernel, its parameter list)] of the
    kernels lowered from op, their text), or None after a failed verdict."""
    os.makedirs(d, exist_ok=True)
    onnx_path, plan, src_path = os.path.join(d, "m.onnx"), os.path.join(d, "m.gpuc"), os.path.join(d, "m.cu")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), onnx_path)
    r = subprocess.run([gpuc, onnx_path, "--arch", "sm_90", "-o", plan] + flags, capture_output=True, text=True,
                       env=dict(os.environ, GPUC_SAVE_SOURCE=src_path, **(env or {})))
    if r.returncode:
        verdict(False, "%s: compile failed: %s" % (name, (r.stdout + r.stderr)[-300:]))
        return None
    src = open(src_path).read()
    head = r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?'
    ks = re.findall(head + r'(k\d+_' + op + r'\w*)\((.*?)\) \{', src)
    text = ""
    for k, _ in ks:
        m = re.search(head + k + r'\(', src)
        text += src[m.start():src.index("\n}\n", m.end()) + 3]
    return plan, ks, text


def dql_case(name, shape):
    """DynamicQuantizeLinear (codegen/lower_quant.c): partial ranges over
    several blocks, their range, then the quantize, against numpy's reading
    of the ONNX rule in float32"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])]
    g = helper.make_graph(nodes, "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, list(shape)),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("z", TensorProto.UINT8, [])])
    got = module_kernels(name, d, g, [], "DynamicQuantizeLinear")
    if got is None:
        return
    plan, kp, text = got
    ks = [k for k, _ in kp]
    if len(ks) != 3:
        verdict(False, "%s: %d kernels, want 3" % (name, len(ks)))
        return
    g1, _ = launch_of(plan, ks[0])
    g3, _ = launch_of(plan, ks[2])
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32)
    x.tofile(os.path.join(d, "x.bin"))
    n = x.size
    harness = SHIM + text + DQL_MAIN % {"n": n, "g": g1, "g3": g3, "k1": ks[0], "k2": ks[1], "k3": ks[2]}
    exe = host_build(name, d, harness)
    if exe is None:
        return
    out = os.path.join(d, "out.bin")
    r = subprocess.run([exe, os.path.join(d, "x.bin"), out], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
        return
    raw = np.fromfile(out, np.uint8)
    s_got, z_got, y_got = raw[:4].view(np.float32)[0], raw[4], raw[5:]
    mn, mx = np.float32(min(0.0, x.min())), np.float32(max(0.0, x.max()))
    scale = np.float32((mx - mn) / np.float32(255))
    zp = np.clip(np.rint(np.float32(-mn) / scale), 0, 255)
    q = (x / scale).astype(np.float32).astype(np.float64)
    y_want = np.clip(np.rint(q) + zp, 0, 255).astype(np.uint8).ravel()
    bad = np.count_nonzero(y_got != y_want)
    verdict(bad == 0 and s_got == scale and z_got == zp,
            "%s: x %s, %d blocks of partial ranges: scale %s, zero point %s, %d of %d values differ" %
            (name, "x".join(map(str, shape)), g1, "equal" if s_got == scale else "%g != %g" % (s_got, scale),
             "equal" if z_got == zp else "%d != %d" % (z_got, zp), bad, n))


EW_MAIN = DQL_MAIN.split("int main")[0] + r"""
int main(int argc, char **argv) {
  (void)argc;
%(loads)s
  float *y = (float *)aligned_alloc(256, %(n)d * 4 + 256);
  launch(%(grid)d, %(block)d, [=] { %(kernel)s(%(args)s, y); });
  FILE *f = fopen(argv[1], "wb");
  if (!f || fwrite(y, 4, %(n)d, f) != %(n)d) return 1;
  fclose(f);
  return 0;
}
"""


def ew_case(name, xs, operands):
    """y = x * o0 + o1 + ... (fp32): an elementwise group whose broadcast
    inputs are read by row, by column, or through the element's
    coordinates (codegen/ew_kernel.c row_kind): against numpy, bit for bit"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(3)
    nodes, inits, prev = [], [], "x"
    vals = []
    for k, shape in enumerate(operands):
        a = rng.standard_normal(shape).astype(np.float32)
        vals.append(a)
        inits.append(numpy_helper.from_array(a, "o%d" % k))
        nodes.append(helper.make_node("Mul" if k == 0 else "Add", [prev, "o%d" % k], ["t%d" % k]))
        prev = "t%d" % k
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    g = helper.make_graph(nodes, "ew", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(xs))], inits)
    onnx_path, plan, src_path = os.path.join(d, "m.onnx"), os.path.join(d, "m.gpuc"), os.path.join(d, "m.cu")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), onnx_path)
    r = subprocess.run([gpuc, onnx_path, "--arch", "sm_90", "-o", plan], capture_output=True, text=True,
                       env=dict(os.environ, GPUC_SAVE_SOURCE=src_path))
    if r.returncode:
        verdict(False, "%s: compile failed: %s" % (name, (r.stdout + r.stderr)[-300:]))
        return
    kname, text, params = kernel_text(open(src_path).read(), r"k\d+_Fused\d+", "const float*", len(operands) + 2)
    if not kname:
        verdict(False, "%s: no fused elementwise kernel of %d inputs" % (name, len(operands) + 1))
        return
    grid, block = launch_of(plan, kname)
    x = rng.standard_normal(xs).astype(np.float32)
    want = x
    for k, a in enumerate(vals):
        want = (want * a if k == 0 else want + a).astype(np.float32)
    want = np.maximum(want, np.float32(0))
    loads, args = [], []
    for k, a in enumerate([x] + vals):  # the program's inputs in order of first use
        f = os.path.join(d, "in%d.bin" % k)
        a.tofile(f)
        loads.append("  float *in%d_ = (float *)load(\"%s\", %d);" % (k, f, a.nbytes))
        args.append("in%d_" % k)
    harness = SHIM + text + EW_MAIN % {"loads": "\n".join(loads), "n": x.size, "grid": grid, "block": block,
                                       "kernel": kname, "args": ", ".join(args)}
    exe = host_build(name, d, harness)
    if exe is None:
        return
    out = os.path.join(d, "out.bin")
    r = subprocess.run([exe, out], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
        return
    got = np.fromfile(out, np.float32).reshape(xs)
    rowcol = "row_" in text
    bad = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    verdict(bad == 0, "%s: %s with %s (%s): %d of %d values differ" %
            (name, "x".join(map(str, xs)), ", ".join("x".join(map(str, o)) for o in operands),
             "by row/column" if rowcol else "by coordinates", bad, x.size))


IN_MAIN = DQL_MAIN.split("int main")[0] + r"""
int main(int argc, char **argv) {
  (void)argc;
  %(xt)s *x = (%(xt)s *)load(argv[1], %(n)d * sizeof(%(xt)s));
  %(st)s *scale = (%(st)s *)load(argv[2], %(c)d * sizeof(%(st)s));
  %(bt)s *bias = (%(bt)s *)load(argv[3], %(c)d * sizeof(%(bt)s));
  double *part = (double *)aligned_alloc(256, 3 * %(g1)d * 8 + 256);
  float *ab = (float *)aligned_alloc(256, 2 * %(rows)d * 4 + 256);
  %(yt)s *y = (%(yt)s *)aligned_alloc(256, %(n)d * sizeof(%(yt)s) + 256);
  launch(%(g1)d, %(b1)d, [=] { %(k1)s(x, part); });
  launch(2, %(b2)d, [=] { %(k2)s(part, scale, bias, ab); });
  launch(3, %(b3)d, [=] { %(k3)s(x, ab, y); });
  FILE *f = fopen(argv[4], "wb");
  if (!f || fwrite(y, sizeof(%(yt)s), %(n)d, f) != %(n)d) return 1;
  fclose(f);
  return 0;
}
"""


def instnorm_case(name, shape, fp16):
    """InstanceNormalization over few, long planes (codegen/lower_norm.c,
    instance_norm_split): per-part statistics over the plan's grid of
    blocks, merged per plane, then the normalize (the items kernels with 2
    and 3 blocks: their grid-stride loops), against numpy in float64 on the
    same (half-rounded) input: max |error| <= 2e-5 (fp32) or 4e-3 (fp16,
    the output's rounding)"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(11)
    C = shape[1]
    scale = rng.uniform(0.5, 1.5, C).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    g = helper.make_graph([node], "inorm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                          [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b")])
    got = module_kernels(name, d, g, ["--fp16"] if fp16 else [], "InstanceNormalization")
    if got is None:
        return
    plan, ks, text = got
    if len(ks) != 3:
        verdict(False, "%s: %d InstanceNormalization kernels, want the split path's 3" % (name, len(ks)))
        return
    types = [[ptype(p.strip()).replace("const ", "").rstrip("*").strip() for p in params.split(",")]
             for _, params in ks]
    (g1, b1), (_, b2), (_, b3) = [launch_of(plan, k) for k, _ in ks]
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 0.7
    xt, st, bt, yt = types[0][0], types[1][1], types[1][2], types[2][2]
    npt = {"float": np.float32, "__half": np.float16}
    xs = x.astype(npt[xt])
    xs.tofile(os.path.join(d, "x.bin"))
    scale.astype(npt[st]).tofile(os.path.join(d, "s.bin"))
    bias.astype(npt[bt]).tofile(os.path.join(d, "b.bin"))
    rows = shape[0] * C
    harness = SHIM + text + IN_MAIN % dict(xt=xt, st=st, bt=bt, yt=yt, n=x.size, c=C, rows=rows, g1=g1, b1=b1,
                                           b2=b2, b3=b3, k1=ks[0][0], k2=ks[1][0], k3=ks[2][0])
    cpp, exe = os.path.join(d, "k.cpp"), os.path.join(d, "k")
    open(cpp, "w").write(harness)
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", "-w", cpp, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host compile failed: %s" % (name, r.stderr[-600:]))
        return
    out = os.path.join(d, "out.bin")
    r = subprocess.run([exe] + [os.path.join(d, f) for f in ("x.bin", "s.bin", "b.bin")] + [out],
                       capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
        return
    got = np.fromfile(out, npt[yt]).astype(np.float64).reshape(shape)
    xd = xs.astype(np.float64).reshape(shape[0], C, -1)
    sd = scale.astype(npt[st]).astype(np.float64)[None, :, None]
    bd = bias.astype(npt[bt]).astype(np.float64)[None, :, None]
    mean = xd.mean(-1, keepdims=True)
    var = ((xd - mean) ** 2).mean(-1, keepdims=True)
    want = ((xd - mean) / np.sqrt(var + 1e-5) * sd + bd).reshape(shape)
    err = np.abs(got - want).max()
    tol = 4e-3 if fp16 else 2e-5
    verdict(err <= tol, "%s: %s %s, %d blocks of parts: max |error| %.3g (tolerance %.0e)" %
            (name, "x".join(map(str, shape)), xt, g1, err, tol))


GN_MAIN = DQL_MAIN.split("int main")[0] + r"""
int main(int argc, char **argv) {
  (void)argc;
  float *x = (float *)load(argv[1], %(n)d * 4), *s = (float *)load(argv[2], 4), *b = (float *)load(argv[3], 4);
  float *w = (float *)load(argv[4], %(c)d * 4), *bb = (float *)load(argv[5], %(c)d * 4);
  double *part = (double *)aligned_alloc(256, 3 * %(g1)d * 8 + 256);
  float *ta = (float *)aligned_alloc(256, %(rows)d * 4 + 256), *tb = (float *)aligned_alloc(256, %(rows)d * 4 + 256);
  float *y = (float *)aligned_alloc(256, %(n)d * 4 + 256);
  launch(%(g1)d, %(b1)d, [=] { %(k1)s(x, part); });
  launch(2, %(b2)d, [=] { %(k2)s(part, s, b, ta, tb); });
  launch(3, %(bf)d, [=] { %(kf)s(x, ta, tb, w, bb, y); });
  FILE *f = fopen(argv[6], "wb");
  if (!f || fwrite(y, 4, %(n)d, f) != %(n)d) return 1;
  fclose(f);
  return 0;
}
"""


def gnorm_case(name, shape):
    """GroupNorm(1 group) as the TorchScript exporter writes it (Reshape
    [N,1,-1], InstanceNormalization, Reshape back) with a per-channel affine
    Mul and Add and a Relu (PoolFormer's norms): the norm heads the
    elementwise group (passes/fuse_elementwise.c attach_norm_heads,
    codegen/lower_fused.c), its two statistics kernels writing a and b, one
    kernel computing x * a + b and the members (its grid-stride loop over 3
    blocks); against numpy in float64: max |error| <= 2e-5"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(12)
    N, C = shape[0], shape[1]
    s1 = np.array([1.3], np.float32)
    b1 = np.array([-0.2], np.float32)
    w = rng.uniform(0.5, 1.5, (C, 1, 1)).astype(np.float32)
    bb = rng.standard_normal((C, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("InstanceNormalization", ["xf", "s", "b"], ["yn"], epsilon=1e-5),
             helper.make_node("Reshape", ["yn", "back"], ["y4"]),
             helper.make_node("Mul", ["y4", "w"], ["ym"]),
             helper.make_node("Add", ["ym", "bb"], ["ya"]),
             helper.make_node("Relu", ["ya"], ["y"])]
    inits = [numpy_helper.from_array(np.array([N, 1, -1], np.int64), "flat"),
             numpy_helper.from_array(np.array(shape, np.int64), "back"), numpy_helper.from_array(s1, "s"),
             numpy_helper.from_array(b1, "b"), numpy_helper.from_array(w, "w"), numpy_helper.from_array(bb, "bb")]
    g = helper.make_graph(nodes, "gnorm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)
    got = module_kernels(name, d, g, ["-O2"], r"(?:InstanceNormalization|Fused\d+)")
    if got is None:
        return
    plan, ks, text = got
    names = [k for k, _ in ks]
    if len(ks) != 3 or "Fused" not in names[2]:
        verdict(False, "%s: kernels %s, want the norm's 2 statistics kernels and one fused kernel" % (name, names))
        return
    (g1, b1_), (_, b2), (_, bf) = [launch_of(plan, k) for k in names]
    x = (rng.standard_normal(shape) * 2 + 0.7).astype(np.float32)
    files = []
    for k, a in (("x", x), ("s", s1), ("b", b1), ("w", w), ("bb", bb)):
        files.append(os.path.join(d, k + ".bin"))
        a.tofile(files[-1])
    harness = SHIM + text + GN_MAIN % dict(n=x.size, c=C, rows=N, g1=g1, b1=b1_, b2=b2, bf=bf, k1=names[0],
                                           k2=names[1], kf=names[2])
    cpp, exe = os.path.join(d, "k.cpp"), os.path.join(d, "k")
    open(cpp, "w").write(harness)
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", "-w", cpp, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host compile failed: %s" % (name, r.stderr[-600:]))
        return
    out = os.path.join(d, "out.bin")
    r = subprocess.run([exe] + files + [out], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
        return
    got = np.fromfile(out, np.float32).astype(np.float64).reshape(shape)
    xd = x.astype(np.float64).reshape(N, -1)
    mean = xd.mean(-1, keepdims=True)
    var = ((xd - mean) ** 2).mean(-1, keepdims=True)
    yn = ((xd - mean) / np.sqrt(var + 1e-5) * 1.3 - 0.2).reshape(shape)
    want = np.maximum(yn * w.astype(np.float64) + bb.astype(np.float64), 0)
    err = np.abs(got - want).max()
    verdict(err <= 2e-5, "%s: %s, norm + affine + Relu in one kernel: max |error| %.3g (tolerance 2e-05)" %
            (name, "x".join(map(str, shape)), err))


RED_MAIN = DQL_MAIN.split("int main")[0] + r"""
int main(int argc, char **argv) {
  (void)argc;
  %(xt)s *x = (%(xt)s *)load(argv[1], %(n)d * sizeof(%(xt)s));
  %(xt)s *y = (%(xt)s *)aligned_alloc(256, %(rows)d * sizeof(%(xt)s) + 256);
  launch(atoi(argv[3]), %(b)d, [=] { %(k)s(x, y); });
  FILE *f = fopen(argv[2], "wb");
  if (!f || fwrite(y, sizeof(%(xt)s), %(rows)d, f) != %(rows)d) return 1;
  fclose(f);
  return 0;
}
"""


def reduce_case(name, op, shape, fp16):
    """Reduce* over the last axis of many short contiguous rows
    (codegen/lower_reduce.c with rows_pick_warp: a warp a row, 8 rows a
    block, shuffles only): the kernel run with the plan's grid and with 3
    blocks (the warps' grid-stride loop over rows), against numpy in
    float64 on the same input: relative error <= 1e-6 (fp32) or 2e-3
    (fp16, the output's rounding)"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(5)
    node = helper.make_node(op, ["x"], ["y"], axes=[-1], keepdims=1)
    oshape = list(shape[:-1]) + [1]
    g = helper.make_graph([node], "red", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, oshape)])
    got = module_kernels(name, d, g, ["--fp16"] if fp16 else [], op)
    if got is None:
        return
    plan, ks, text = got
    if len(ks) != 1 or "& 31) == 0" not in text:
        verdict(False, "%s: want one warp-a-row kernel, got %d kernels:\n%s" % (name, len(ks), text[:400]))
        return
    xt = ptype(ks[0][1].split(",")[0].strip()).replace("const ", "").rstrip("*").strip()
    grid, block = launch_of(plan, ks[0][0])
    npt = {"float": np.float32, "__half": np.float16}[xt]
    x = (rng.standard_normal(shape) * 3).astype(npt)
    x.tofile(os.path.join(d, "x.bin"))
    rows = int(np.prod(shape[:-1]))
    cpp, exe = os.path.join(d, "k.cpp"), os.path.join(d, "k")
    open(cpp, "w").write(SHIM + text + RED_MAIN % dict(xt=xt, n=x.size, rows=rows, b=block, k=ks[0][0]))
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", "-w", cpp, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host compile failed: %s" % (name, r.stderr[-600:]))
        return
    xd = x.astype(np.float64).reshape(rows, -1)
    want = np.sqrt((xd * xd).sum(1)) if op == "ReduceL2" else xd.max(1)
    for blocks in (grid, 3):
        out = os.path.join(d, "y%d.bin" % blocks)
        r = subprocess.run([exe, os.path.join(d, "x.bin"), out, str(blocks)], capture_output=True, text=True)
        if r.returncode:
            verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
            return
        err = np.abs(np.fromfile(out, npt).astype(np.float64) - want).max() / np.abs(want).max()
        tol = 2e-3 if fp16 else 1e-6
        verdict(err <= tol, "%s: %s %s, %d rows of %d, %d blocks of %d: max rel error %.3g (tolerance %.0e)" %
                (name, op, xt, rows, shape[-1], blocks, block, err, tol))


COL_MAIN = DQL_MAIN.split("int main")[0] + r"""
int main(int argc, char **argv) {
  (void)argc;
  %(xt)s *x = (%(xt)s *)load(argv[1], %(n)d * sizeof(%(xt)s));
  float *part = (float *)aligned_alloc(256, %(rows)d * 64 * 4 + 256);
  %(yt)s *y = (%(yt)s *)aligned_alloc(256, %(rows)d * sizeof(%(yt)s) + 256);
  %(launches)s
  FILE *f = fopen(argv[2], "wb");
  if (!f || fwrite(y, sizeof(%(yt)s), %(rows)d, f) != %(rows)d) return 1;
  fclose(f);
  return 0;
}
"""


def column_case(name, op, shape, fp16):
    """Reduce* over H, W of an NHWC-shaped [N,H,W,C] value (codegen/lower_reduce.c
    reduce_columns: blocks of column vectors by rows, P split over blocks,
    a second kernel adding the partials; GRN's norms in ConvNeXt V2). With
    --fp16 a Relu makes the input half and the ReduceL2 island reads it
    directly (gpuc_out_f32): half in, f32 out. Against numpy in float64:
    relative error <= 1e-5 (f32 sums)"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    oshape = [shape[0], 1, 1, shape[3]]
    inits = []
    if op == "ReduceSum":  # axes as an input from opset 13
        red = helper.make_node(op, ["r", "axes"], ["y"], keepdims=1)
        inits.append(numpy_helper.from_array(np.array([1, 2], np.int64), "axes"))
    else:
        red = helper.make_node(op, ["r"], ["y"], axes=[1, 2], keepdims=1)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), red]
    g = helper.make_graph(nodes, "col", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, oshape)], inits)
    got = module_kernels(name, d, g, ["--fp16"] if fp16 else [], op)
    if got is None:
        return
    plan, ks, text = got
    if not 1 <= len(ks) <= 2 or "__shared__ float sh" not in text:
        verdict(False, "%s: want the column kernels, got %d kernels:\n%s" % (name, len(ks), text[:400]))
        return
    xt = ptype(ks[0][1].split(",")[0].strip()).replace("const ", "").rstrip("*").strip()
    yt = ptype(ks[-1][1].split(",")[-1].strip()).rstrip("*").strip()
    if fp16 and (xt, yt) != ("__half", "float"):
        verdict(False, "%s: --fp16 kernel reads %s, writes %s (want __half, float)" % (name, xt, yt))
        return
    npt = {"float": np.float32, "__half": np.float16}
    x = np.maximum(rng.standard_normal(shape) * 3, 0).astype(npt[xt])  # what the Relu feeds it
    x.tofile(os.path.join(d, "x.bin"))
    rows = shape[0] * shape[3]
    launches = []
    for i, (k, _) in enumerate(ks):
        grid, block = launch_of(plan, k)
        args = ("x, part" if len(ks) == 2 else "x, y") if i == 0 else "part, y"
        launches.append("launch(%d, %d, [=] { %s(%s); });" % (grid, block, k, args))
    cpp, exe = os.path.join(d, "k.cpp"), os.path.join(d, "k")
    open(cpp, "w").write(SHIM + text + COL_MAIN % dict(xt=xt, yt=yt, n=x.size, rows=rows, launches="\n  ".join(launches)))
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", "-w", cpp, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host compile failed: %s" % (name, r.stderr[-600:]))
        return
    out = os.path.join(d, "y.bin")
    r = subprocess.run([exe, os.path.join(d, "x.bin"), out], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
        return
    xd = x.astype(np.float64)
    want = {"ReduceL2": lambda: np.sqrt((xd * xd).sum((1, 2))), "ReduceSum": lambda: xd.sum((1, 2)),
            "ReduceMean": lambda: xd.mean((1, 2))}[op]().reshape(-1)
    err = np.abs(np.fromfile(out, npt[yt]).astype(np.float64) - want).max() / np.abs(want).max()
    verdict(err <= 1e-5, "%s: %s %s -> %s, %s, %d kernel(s): max rel error %.3g (tolerance 1e-05)" %
            (name, op, xt, yt, "x".join(map(str, shape)), len(ks), err))


NORM_MAIN = DQL_MAIN.split("int main")[0] + r"""
int main(int argc, char **argv) {
  (void)argc;
  %(xt)s *x = (%(xt)s *)load(argv[1], %(n)d * sizeof(%(xt)s));
  %(decl)s
  %(xt)s *y = (%(xt)s *)aligned_alloc(256, %(n)d * sizeof(%(xt)s) + 256);
  launch(atoi(argv[3]), %(b)d, [=] { %(k)s(%(args)s); });
  FILE *f = fopen(argv[2], "wb");
  if (!f || fwrite(y, sizeof(%(xt)s), %(n)d, f) != %(n)d) return 1;
  fclose(f);
  return 0;
}
"""


def warp_norm_case(name, op, shape, fp16):
    """LayerNormalization / Softmax over the last axis as the warp-rows
    kernel (codegen/lower_rows.h: a row's vectors over `lanes` lanes,
    32 / lanes rows a warp: rows of 96 halves take 16 lanes, of 24 halves
    4 lanes, 8 rows a warp, the last warp's rows partly dead): the kernel
    run with the plan's grid and with 3 blocks (the grid-stride loop),
    against numpy in float64: max error <= 2e-3 (fp16) or 1e-5 (fp32) of
    max |y|"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(9)
    c = shape[-1]
    sc = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bi = rng.uniform(-0.3, 0.3, c).astype(np.float32)
    inits = []
    if op == "LayerNormalization":
        node = helper.make_node(op, ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)
        inits = [numpy_helper.from_array(sc, "s"), numpy_helper.from_array(bi, "b")]
    else:
        node = helper.make_node(op, ["x"], ["y"], axis=-1)
    g = helper.make_graph([node], "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], initializer=inits)
    got = module_kernels(name, d, g, ["--fp16"] if fp16 else [], op)
    if got is None:
        return
    plan, ks, text = got
    if len(ks) != 1 or "live_" not in text:
        verdict(False, "%s: want one warp-rows kernel, got %d kernels:\n%s" % (name, len(ks), text[:400]))
        return
    params = [p.strip() for p in ks[0][1].split(",")]
    xt = ptype(params[0]).replace("const ", "").rstrip("*").strip()
    npt = {"float": np.float32, "__half": np.float16}
    x = (rng.standard_normal(shape) * 3).astype(npt[xt])
    x.tofile(os.path.join(d, "x.bin"))
    decl, args = "", ["x"]
    for k, (nm, arr) in enumerate((("s", sc), ("b", bi))[:len(params) - 2]):
        t = ptype(params[k + 1]).replace("const ", "").rstrip("*").strip()
        arr.astype(npt[t]).tofile(os.path.join(d, nm + ".bin"))
        decl += "%s *%s = (%s *)load(argv[%d], %d * sizeof(%s));\n  " % (t, nm, t, 4 + k, c, t)
        args.append(nm)
    args.append("y")
    grid, block = launch_of(plan, ks[0][0])
    cpp, exe = os.path.join(d, "k.cpp"), os.path.join(d, "k")
    open(cpp, "w").write(SHIM + text + NORM_MAIN % dict(xt=xt, n=x.size, b=block, k=ks[0][0], decl=decl,
                                                        args=", ".join(args)))
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", "-w", cpp, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        verdict(False, "%s: host compile failed: %s" % (name, r.stderr[-600:]))
        return
    xd = x.astype(np.float64).reshape(-1, c)
    if op == "LayerNormalization":
        m = xd.mean(1, keepdims=True)
        want = (xd - m) / np.sqrt(((xd - m) ** 2).mean(1, keepdims=True) + 1e-5) * sc + bi
    else:
        e = np.exp(xd - xd.max(1, keepdims=True))
        want = e / e.sum(1, keepdims=True)
    for blocks in (grid, 3):
        out = os.path.join(d, "y%d.bin" % blocks)
        r = subprocess.run([exe, os.path.join(d, "x.bin"), out, str(blocks)] +
                           [os.path.join(d, nm + ".bin") for nm in args[1:-1]], capture_output=True, text=True)
        if r.returncode:
            verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
            return
        err = np.abs(np.fromfile(out, npt[xt]).astype(np.float64).reshape(-1, c) - want).max() / np.abs(want).max()
        tol = 2e-3 if fp16 else 1e-5
        verdict(err <= tol, "%s: %s %s, %d rows of %d, %d blocks of %d: max error %.3g of max |y| (tolerance %.0e)" %
                (name, op, xt, xd.shape[0], c, blocks, block, err, tol))



def fused_pair(name, d, g, flags, op, nf, nu, want):
    """The plan's fused row kernel of op (nf parameters) and the unfused
    plan's (GPUC_NO_ROW_FUSION=1, nu parameters): (fused kernel, unfused
    kernel renamed unfused_*, both texts, the fused launch, the unfused
    launch), or None after a failed verdict (want names the parameters)"""
    fused = module_kernels(name, d, g, flags, op)
    unfused = module_kernels(name, os.path.join(d, "unfused"), g, flags, op, {"GPUC_NO_ROW_FUSION": "1"})
    if fused is None or unfused is None:
        return None
    (plan, ks, text), (uplan, uks, utext) = fused, unfused
    if len(ks) != 1 or len(ks[0][1].split(",")) != nf or len(uks) != 1 or len(uks[0][1].split(",")) != nu:
        verdict(False, "%s: want one %s kernel %s: %s, %s" % (name, op, want, ks, uks))
        return None
    uk = "unfused_" + uks[0][0]
    return (ks[0][0], uk, text + utext.replace(uks[0][0] + "(", uk + "("), launch_of(plan, ks[0][0]),
            launch_of(uplan, uks[0][0]))


def norm_quantize_case(name, rows, c, fp16):
    """A LayerNormalization quantized for the next Linear, rows past a
    warp's 1024 (codegen/lower_norm.c layernorm_rows: 2 to 8 warps a row):
    x [rows, c] (in the row's dtype) -> LayerNormalization -> Linear(c ->
    8), --int8. The fused norm + quantize kernel and the unfused plan's
    norm kernel (GPUC_NO_ROW_FUSION=1) run on the same x; the fused
    kernel's int8 row and scale (plan's grid and one block) must equal
    QuantizeRows' rule (numpy) on the unfused kernel's Y bit for bit, and
    that Y must be within 2e-3 (fp16) / 1e-5 (fp32) of numpy's float64
    norm, relative to max |y|."""
    d = os.path.join(work, name)
    rng = np.random.default_rng(23)
    npt = np.float16 if fp16 else np.float32
    ty = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    sc = rng.uniform(0.5, 1.5, c).astype(npt)
    bi = rng.uniform(-0.3, 0.3, c).astype(npt)
    w = (rng.standard_normal((c, 8)) * 0.2).astype(npt)
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["h"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    g = helper.make_graph(nodes, "lnq", [helper.make_tensor_value_info("x", ty, [rows, c])],
                          [helper.make_tensor_value_info("y", ty, [rows, 8])],
                          [numpy_helper.from_array(a, k) for a, k in ((sc, "s"), (bi, "b"), (w, "w"))])
    pair = fused_pair(name, d, g, ["--int8"], "LayerNormalization", 5, 4, "(x, s, b, qs, qo) fused, (x, s, b, y) unfused")
    if pair is None:
        return
    fk, uk, text, (grid, block), (ug, ub) = pair
    xt = "__half" if fp16 else "float"
    x = (rng.standard_normal((rows, c)) * 3).astype(npt)
    for nm, a in (("x", x), ("s", sc), ("b", bi)):
        a.tofile(os.path.join(d, nm + ".bin"))
    decl = "%s *s = (%s *)load(argv[4], %d * sizeof(%s)), *b = (%s *)load(argv[5], %d * sizeof(%s));" % (
        xt, xt, c, xt, xt, c, xt)
    exe = host_build(name, d, SHIM + text + GATED_MAIN % dict(xt=xt, nx=x.size, ny=x.size, rows=rows, ug=ug, ub=ub,
                                                              uk=uk, fb=block, fk=fk, decl=decl, params="s, b, "))
    if exe is None:
        return
    xd = x.astype(np.float64)
    m = xd.mean(1, keepdims=True)
    want = (xd - m) / np.sqrt(((xd - m) ** 2).mean(1, keepdims=True) + 1e-5) * sc.astype(np.float64) + bi
    for blocks in sorted({grid, 1}):
        out = os.path.join(d, "out%d.bin" % blocks)
        r = subprocess.run([exe, os.path.join(d, "x.bin"), out, str(blocks), os.path.join(d, "s.bin"),
                            os.path.join(d, "b.bin")], capture_output=True, text=True)
        if r.returncode:
            verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
            return
        raw = np.fromfile(out, np.uint8)
        ny = x.size * np.dtype(npt).itemsize
        y = raw[:ny].view(npt).reshape(rows, c).astype(np.float32)
        s_got, q_got = raw[ny:ny + rows * 4].view(np.float32), raw[ny + rows * 4:].view(np.int8).reshape(rows, c)
        q_want, s_want = quantize(y)
        err = np.abs(y.astype(np.float64) - want).max() / np.abs(want).max()
        bad = int(np.count_nonzero(q_got != q_want))
        tol = 2e-3 if fp16 else 1e-5
        verdict(bad == 0 and np.array_equal(s_got.view(np.uint32), s_want.view(np.uint32)) and err <= tol,
                "%s: %s %d rows of %d, %d blocks of %d: %d int8 values differ from the unfused norm's Y quantized, "
                "scales %s; Y max error %.3g (tolerance %.0e)" %
                (name, fk, rows, c, blocks, block, bad, "equal" if np.array_equal(s_got, s_want) else "differ", err, tol))


# an unfused kernel (uk: X -> Y) and the fused one (fk: X -> the int8 row
# and its scale) on the same X, %(decl)s loading the parameters both take
# (argv[4]...); writes Y, the scales, the int8 rows
GATED_MAIN = DQL_MAIN.split("int main")[0] + r"""
int main(int argc, char **argv) {
  (void)argc;
  %(xt)s *x = (%(xt)s *)load(argv[1], %(nx)d * sizeof(%(xt)s));
  %(decl)s
  %(xt)s *y = (%(xt)s *)aligned_alloc(256, %(ny)d * sizeof(%(xt)s) + 256);
  float *qs = (float *)aligned_alloc(256, %(rows)d * 4 + 256);
  unsigned char *qo = (unsigned char *)aligned_alloc(256, %(ny)d + 256);
  memset(qo, 0xAA, %(ny)d);
  launch(%(ug)d, %(ub)d, [=] { %(uk)s(x, %(params)sy); });
  launch(atoi(argv[3]), %(fb)d, [=] { %(fk)s(x, %(params)sqs, qo); });
  FILE *f = fopen(argv[2], "wb");
  if (!f || fwrite(y, sizeof(%(xt)s), %(ny)d, f) != %(ny)d || fwrite(qs, 4, %(rows)d, f) != %(rows)d ||
      fwrite(qo, 1, %(ny)d, f) != %(ny)d) return 1;
  fclose(f);
  return 0;
}
"""


def gated_case(name, rows, f, fp16):
    """LLaMA's SwiGLU quantized for the next Linear (codegen/lower_gated.c):
    x [rows, 16] -> gate, up (16 -> f) -> Mul(Mul(g, Sigmoid(g)), u) -> down
    (f -> 8), --int8. The GatedUnit + quantize row kernel of the plan and
    the unfused plan's GatedUnit kernel (GPUC_NO_ROW_FUSION=1) run on the
    same X [rows, 2f] (the gate/up GEMM's dequantized output); the fused
    kernel's int8 row and scale (with the plan's grid and with one block)
    must equal QuantizeRows' rule (numpy) on the unfused kernel's Y bit for
    bit: the same element expression, the same rounding to Y's dtype."""
    d = os.path.join(work, name)
    rng = np.random.default_rng(11)
    w = [(rng.standard_normal(shp) * 0.2).astype(np.float32) for shp in ((16, f), (16, f), (f, 8))]
    nodes = [helper.make_node("MatMul", ["x", "wg"], ["g"]), helper.make_node("MatMul", ["x", "wu"], ["u"]),
             helper.make_node("Sigmoid", ["g"], ["sg"]), helper.make_node("Mul", ["g", "sg"], ["s"]),
             helper.make_node("Mul", ["s", "u"], ["h"]), helper.make_node("MatMul", ["h", "wd"], ["y"])]
    g = helper.make_graph(nodes, "swiglu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 8])],
                          [numpy_helper.from_array(a, k) for a, k in zip(w, ("wg", "wu", "wd"))])
    flags = ["--int8"] + (["--fp16"] if fp16 else [])
    pair = fused_pair(name, d, g, flags, "GatedUnit", 3, 2, "(x, qs, qo) fused, (x, y) unfused")
    if pair is None:
        return
    fk, uk, text, (grid, block), (ug, ub) = pair
    xt = "__half" if fp16 else "float"
    npt = np.float16 if fp16 else np.float32
    x = (rng.standard_normal((rows, 2 * f)) * 2).astype(npt)
    x.tofile(os.path.join(d, "x.bin"))
    exe = host_build(name, d, SHIM + "struct alignas(16) uint4 { unsigned x, y, z, w; };\n" + text +
                     GATED_MAIN % dict(xt=xt, nx=x.size, ny=rows * f, rows=rows, ug=ug, ub=ub, uk=uk, fb=block, fk=fk,
                                       decl="", params=""))
    if exe is None:
        return
    for blocks in sorted({grid, 1}):
        out = os.path.join(d, "out%d.bin" % blocks)
        r = subprocess.run([exe, os.path.join(d, "x.bin"), out, str(blocks)], capture_output=True, text=True)
        if r.returncode:
            verdict(False, "%s: host run failed: %s" % (name, r.stderr[-300:]))
            return
        raw = np.fromfile(out, np.uint8)
        ny = rows * f * np.dtype(npt).itemsize
        y = raw[:ny].view(npt).reshape(rows, f).astype(np.float32)
        s_got, q_got = raw[ny:ny + rows * 4].view(np.float32), raw[ny + rows * 4:].view(np.int8).reshape(rows, f)
        q_want, s_want = quantize(y)
        bad = int(np.count_nonzero(q_got != q_want))
        verdict(bad == 0 and np.array_equal(s_got.view(np.uint32), s_want.view(np.uint32)) and np.isfinite(y).all(),
                "%s: %s %d rows of %d, %d blocks of %d: %d int8 values differ from the unfused GatedUnit's Y "
                "quantized, scales %s" % (name, fk, rows, f, blocks, block, bad,
                                          "equal" if np.array_equal(s_got, s_want) else "differ"))


# LLaMA's SwiGLU row (2048: two warps a row, 13 rows: a partial block),
# rows of 36 (vectors of 4), fp32 rows
gated_case("gated_fp16_13x2048", 13, 2048, True)
gated_case("gated_fp16_5x36", 5, 36, True)
gated_case("gated_fp32_7x520", 7, 520, False)

def qrows_case(name, rows, c, fp16):
    """QuantizeRows alone (codegen/lower_int8.c): x [rows, c] (a graph
    input in the row's dtype, so nothing fuses with it) -> Linear(c -> 8),
    --int8. Its int8 row and scale, with the plan's grid and with one
    block, must equal QuantizeRows' rule (numpy) bit for bit: rows held in
    registers (up to 16 loads a lane, the last partial) and the two-pass
    loop beyond."""
    d = os.path.join(work, name)
    rng = np.random.default_rng(17)
    npt = np.float16 if fp16 else np.float32
    w = (rng.standard_normal((c, 8)) * 0.2).astype(npt)
    ty = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "qrows",
                          [helper.make_tensor_value_info("x", ty, [rows, c])],
                          [helper.make_tensor_value_info("y", ty, [rows, 8])], [numpy_helper.from_array(w, "w")])
    got = module_kernels(name, d, g, ["--int8"], "QuantizeRows")
    if got is None:
        return
    plan, ks, text = got
    if len(ks) != 1 or len(ks[0][1].split(",")) != 3:
        verdict(False, "%s: want one QuantizeRows kernel (x, s, q): %s" % (name, ks))
        return
    kname = ks[0][0]
    grid, block = launch_of(plan, kname)
    x = (rng.standard_normal((rows, c)) * 3).astype(npt)
    x[0, c // 2] = 40  # one row's absmax well above the rest
    x[-1] = 0          # an all-zero row: scale 1, zeros
    xf = os.path.join(d, "x.bin")
    x.tofile(xf)
    t = "__half" if fp16 else "float"
    harness = (SHIM + "struct alignas(16) uint4 { unsigned x, y, z, w; };\n"
               "static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }\n" +
               text + MAIN % {"loads": '  %s* in0_ = (%s*)load("%s", %d);' % (t, t, xf, x.nbytes), "rows": rows,
                              "numel": rows * c, "kernel": kname, "args": "in0_, qs, (signed char*)qo", "ysize": 1})
    exe = host_build(name, d, harness)
    if exe is None:
        return
    q_want, s_want = quantize(x.astype(np.float32))
    for blocks in sorted({grid, 1}):
        raw = host_run(name, exe, [str(blocks), str(block)], os.path.join(d, "out%d.bin" % blocks))
        if raw is None:
            return
        s_got, q_got = raw[:rows * 4].view(np.float32), raw[rows * 4:].view(np.int8).reshape(rows, c)
        bad = int(np.count_nonzero(q_got != q_want))
        verdict(bad == 0 and np.array_equal(s_got.view(np.uint32), s_want.view(np.uint32)),
                "%s: %s %d rows of %d, %d blocks of %d: %d int8 values differ, scales %s" %
                (name, kname, rows, c, blocks, block, bad, "equal" if np.array_equal(s_got, s_want) else "differ"))


# BERT's FC1 row (3072 halves: 12 loads a lane in registers), 768, a row
# narrower than a warp's loads (40), rows of fp32 ending in a partial load
# (1028: 9 a lane), and rows past 16 loads a lane (the two-pass loop)
qrows_case("qrows_fp16_13x3072", 13, 3072, True)
qrows_case("qrows_fp16_9x768", 9, 768, True)
qrows_case("qrows_fp16_5x40", 5, 40, True)
qrows_case("qrows_fp32_7x1028", 7, 1028, False)
qrows_case("qrows_fp32_3x4100", 3, 4100, False)
qrows_case("qrows_fp16_4x4104", 4, 4104, True)

# a per-row [4,6,1] and a column [8] by row and column; [6,1] (rows of
# another shape) and [4,4] against [4,4,4] (numpy aligns it to the last two
# dims, not the rows) through the coordinates
ew_case("ew_rowcol_4x6x8", (4, 6, 8), [(4, 6, 1), (8,), (6, 1)])
ew_case("ew_square_4x4x4", (4, 4, 4), [(4, 4), (4, 4, 1)])
dql_case("dql_37x520", (37, 520))   # 5 blocks of partial ranges, float4 loads
dql_case("dql_7x13", (7, 13))       # one block, scalar loads (91 elements)
# the dequantize + bias + Relu group on its own (GPUC_NO_ROW_FUSION=1): an
# items kernel whose bias and per-row scale are indexed by row and column
run_case("dequant_relu_fp16_r13_c36", "linear", True, 13, 36, "relu", unfused=True)
run_case("dequant_relu_fp16_r9_c768", "linear", True, 9, 768, "relu", unfused=True)
run_case("dequant_relu_fp32_r11_c20", "linear", False, 11, 20, "relu", unfused=True)
# InstanceNormalization's split path: 6 planes of 16384 (4 parts each), one
# plane of 40000 (a ragged last part; PoolFormer's GroupNorm(1) shape), fp16
instnorm_case("instnorm_2x3x128x128", (2, 3, 128, 128), False)
# Swin V2's cosine attention: ReduceL2 over 32-element heads, 2304 rows (a
# warp a row; compiled --fp16, where the norm stays an f32 island)
reduce_case("reducel2_2304x32", "ReduceL2", (2, 3, 384, 32), True)
reduce_case("reducemax_2100x100", "ReduceMax", (21, 100, 100), False)
instnorm_case("instnorm_1x1x40000_fp16", (1, 1, 40000), True)
# the norm heading the affine group (PoolFormer's GroupNorm(1)): 2 samples
# of 8 x 64 x 64, 1 sample of 3 x 100 x 100
gnorm_case("gnorm_2x8x64x64", (2, 8, 64, 64))
gnorm_case("gnorm_1x3x100x100", (1, 3, 100, 100))
# GRN's norms over H, W of NHWC values: P split over blocks (two kernels),
# 16-byte half vectors, f32 vectors of 4 (a ragged last tile of columns),
# and one block per column tile (one kernel)
column_case("col_l2_fp16_2x40x40x24", "ReduceL2", (2, 40, 40, 24), True)
column_case("col_mean_fp32_3x33x35x40", "ReduceMean", (3, 33, 35, 40), False)
column_case("col_sum_fp16_2x8x8x16", "ReduceSum", (2, 8, 8, 16), True)
column_case("col_l2_fp32_1x20x20x520", "ReduceL2", (1, 20, 20, 520), False)
# the warp-rows kernels: 16 lanes a row (96 halves: Swin's and ConvNeXt's
# stage-1 LayerNorms), 4 lanes (24 halves, 13 rows: the last warp partly
# dead), a whole warp (768: BERT's), f32 vectors of 4 (40: 16 lanes)
warp_norm_case("ln_fp16_37x96", "LayerNormalization", (37, 96), True)
warp_norm_case("ln_fp16_13x24", "LayerNormalization", (13, 24), True)
warp_norm_case("ln_fp16_9x768", "LayerNormalization", (9, 768), True)
warp_norm_case("ln_fp32_21x40", "LayerNormalization", (21, 40), False)
warp_norm_case("softmax_fp16_19x96", "Softmax", (19, 96), True)
# rows past a warp (layernorm_rows): 2 warps a row (1536: 3 vectors a lane,
# 4 rows a block, the last block's rows partly dead), 4 (4100 fp32, vectors
# of 4) and 8 (8192: one row a block)
warp_norm_case("ln_fp16_6x1536", "LayerNormalization", (6, 1536), True)
warp_norm_case("ln_fp32_3x4100", "LayerNormalization", (3, 4100), False)
warp_norm_case("ln_fp16_2x8192", "LayerNormalization", (2, 8192), True)
# and quantized for the next Linear in the same kernel
norm_quantize_case("lnq_fp16_7x2048", 7, 2048, True)
norm_quantize_case("lnq_fp32_3x4100", 3, 4100, False)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
