#!/usr/bin/env python3
"""The GPU plans of LSTM, GRU and RNN (codegen/lower_rnn.c) run on the host.

No GPU here, so the plan itself is executed: for each case a one-node
model is compiled for sm_90 with GPUC_SAVE_SOURCE set; the module's kernels
(the source after the prelude) are compiled by the host C++ compiler into a
shared library under a small shim (GRID_STRIDE as a plain loop, one block
of one thread: the step counter's last-block bump runs once per launch),
and the plan file is read here (header, tensors, steps, arguments, GEMMs,
weights): its steps run in order over one arena, kernels through ctypes
and cuBLASLt GEMMs as numpy products with the plan's transposes, leading
dimensions and batch strides. Y, Y_h and Y_c must match `gpuc run --cpu`
(the reference, itself checked against numpy, PyTorch and the ONNX
conformance data) within 1e-5 rel L2. Cases: both directions and reverse,
layouts 0 and 1, sequence_lens (a reverse direction too, a length 0),
initial states, peepholes, clip, input_forget, GRU's two reset forms,
activations with alpha/beta, models stored in f16 (converted to f32 on the
device, outputs rounded to half) and f64; a sequence_lens value past the sequence is
reported in the device error record by the init kernel (a GRU case).
With MODELS_DIR (tests/models/rnn), the exported models' whole -O2 plans
(their Transpose, Concat, Slice and fused kernels too; half as _Float16 in
the shim) run the same way at batch 2 and 3 against PyTorch's stored
outputs: rel L2 <= 1e-4 fp32, <= 1e-2 --fp16.
usage: rnn_host_test.py GPUC WORKDIR [MODELS_DIR]   (CXX picks the compiler; g++)"""
import json
import ctypes, os, struct, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, save
from checks import check, finish

gpuc, work = sys.argv[1], sys.argv[2]
models = sys.argv[3] if len(sys.argv) > 3 else None
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(5)
cxx = os.environ.get("CXX", "g++")

SHIM = r"""
#include <cmath>
#include <cstdint>
typedef long long i64;
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
using std::tanh; using std::exp; using std::fmax; using std::fmin; using std::log1p; using std::fabs;
static inline i64 min(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 max(i64 a, i64 b) { return a > b ? a : b; }
struct Dim3 { unsigned x, y, z; };
static const Dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, gridDim = {1, 1, 1}, blockDim = {1, 1, 1};
static inline void __syncthreads() {}
static inline void __threadfence() {}
static inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long c, unsigned long long v) {
  unsigned long long o = *p; if (o == c) *p = v; return o;
}
#define GRID_STRIDE(i, n) for (i64 i = 0; i < (n); i++)
/* what the exported models' other kernels (Transpose, Concat, Slice, fused
 * elementwise groups) use, in fp32 */
#define __launch_bounds__(...)
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
typedef _Float16 __half;
static inline float ldf(float x) { return x; }
static inline float ldf(__half x) { return (float)x; }
template <class T> static inline T stf(float x) { return (T)x; }
template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };
using std::erf; using std::sqrt; using std::floor; using std::ceil; using std::log; using std::pow;
"""


def read_plan(path):
    """the sections this test needs, as numpy/struct views"""
    buf = open(path, "rb").read()
    magic, ver, hsize = struct.unpack_from("<8sII", buf, 0)
    nsec = struct.unpack_from("<I", buf, 8 + 4 + 4 + 16 + 4)[0]
    secs = {}
    for i in range(nsec):
        sid, _, off, size = struct.unpack_from("<IIQQ", buf, 64 + 24 * i)
        secs[sid] = buf[off:off + size]
    META, STRINGS, TENSORS, KERNELS, STEPS, ARGS, GEMMS, CONVS, WEIGHTS = range(1, 10)
    strings = secs[STRINGS]
    name = lambda o: strings[o:strings.index(b"\0", o)].decode()
    arena = struct.unpack_from("<Q", secs[META], 0)[0]
    tensors = []
    for o in range(0, len(secs[TENSORS]), 88):
        nm, dt, rank, mem, role = struct.unpack_from("<IBBBB", secs[TENSORS], o)
        dims = struct.unpack_from("<8q", secs[TENSORS], o + 8)[:rank]
        off, nbytes = struct.unpack_from("<QQ", secs[TENSORS], o + 72)
        tensors.append(dict(name=name(nm), dt=dt, dims=dims, mem=mem, role=role, offset=off, bytes=nbytes))
    kernels = [name(struct.unpack_from("<I", secs[KERNELS], o)[0]) for o in range(0, len(secs.get(KERNELS, b"")), 8)]
    steps = [struct.unpack_from("<12I", secs[STEPS], o) for o in range(0, len(secs[STEPS]), 48)]
    args = struct.unpack_from("<%dI" % (len(secs.get(ARGS, b"")) // 4), secs.get(ARGS, b""), 0)
    gemms = []
    g = secs.get(GEMMS, b"")
    for o in range(0, len(g), 176):
        a, b, c, y, ta, tb = struct.unpack_from("<6I", g, o)
        m, n, k, batch, lda, ldb, ldc, ldy, sa, sb, sc, sy = struct.unpack_from("<12q", g, o + 24)
        alpha, beta = struct.unpack_from("<2f", g, o + 120)
        dt, _, a_dt, b_dt, y_dt, compute, flags = struct.unpack_from("<7I", g, o + 128)
        gemms.append(dict(a=a, b=b, c=c, y=y, ta=ta & 1, epi=(ta >> 8) & 0xff, tb=tb, m=m, n=n, k=k, batch=batch,
                          lda=lda, ldb=ldb, ldc=ldc, ldy=ldy, sa=sa, sb=sb, sc=sc, sy=sy, alpha=alpha, beta=beta,
                          dt=dt, types=(a_dt, b_dt, y_dt), compute=compute, flags=flags))
    return dict(arena=arena, tensors=tensors, kernels=kernels, steps=steps, args=args, gemms=gemms,
                weights=secs.get(WEIGHTS, b""))


NP_DT = {1: np.float32, 2: np.float16, 4: np.float64}  # GpucDType F32, F16, F64 (ir/ir.h)


class Host:
    """one arena (and the weights) as byte arrays; tensor i's address"""

    def __init__(self, plan):
        self.p = plan
        self.arena = np.zeros(plan["arena"] + 64, np.uint8)
        self.weights = np.frombuffer(bytearray(plan["weights"] or b"\0"), np.uint8)

    def base(self, i):
        t = self.p["tensors"][i]
        while t["mem"] == 2:  # alias
            i = t["offset"]
            t = self.p["tensors"][i]
        return t

    def addr(self, i):
        t = self.base(i)
        buf = self.arena if t["mem"] == 0 else self.weights
        return buf.ctypes.data + t["offset"]

    def mat(self, i, start, shape, ld, dt=None):
        """matrix view of tensor i (its dtype, or dt) from element start: shape, row stride ld (0: one row repeated)"""
        t = self.base(i)
        buf = self.arena if t["mem"] == 0 else self.weights
        npt = NP_DT[dt or t["dt"]]
        es = np.dtype(npt).itemsize
        return np.ndarray(shape, npt, buffer=buf, offset=t["offset"] + es * start, strides=(ld * es, es))


def gemm(h, g):
    """Y[b] = alpha op(A[b]) op(B[b]) (+ C), row-major as plan.h defines PlanGemm (float
    GEMMs of one dtype, no epilogue activation: what these plans hold)"""
    if g["epi"] or g["flags"] or g["compute"] or len(set(g["types"])) != 1 or g["dt"] not in NP_DT:
        raise RuntimeError("GEMM the host runner does not emulate: %s" % g)
    for bt in range(g["batch"]):
        a = h.mat(g["a"], bt * g["sa"], (g["k"], g["m"]) if g["ta"] else (g["m"], g["k"]), g["lda"])
        b = h.mat(g["b"], bt * g["sb"], (g["n"], g["k"]) if g["tb"] else (g["k"], g["n"]), g["ldb"])
        res = g["alpha"] * ((a.T if g["ta"] else a).astype(np.float64) @ (b.T if g["tb"] else b).astype(np.float64))
        if g["c"] != 0xFFFFFFFF:
            c = h.mat(g["c"], bt * g["sc"], (g["m"], g["n"]), g["ldc"])
            res = res + (1.0 if g["ldc"] == 0 else g["beta"]) * c
        y = h.mat(g["y"], bt * g["sy"], (g["m"], g["n"]), g["ldy"])
        y[...] = res.astype(y.dtype)


def run_plan(plan, lib, inputs):
    h = Host(plan)
    for i, t in enumerate(plan["tensors"]):
        if t["role"] in (1, 4) and t["name"] in inputs:
            v = np.ascontiguousarray(inputs[t["name"]])
            ctypes.memmove(h.addr(i), v.ctypes.data, v.nbytes)
    for s in plan["steps"]:
        kind, index, a0, nargs = s[0], s[1], s[9], s[10]
        args = [plan["args"][a0 + k] for k in range(nargs)]
        if kind == 1:
            fn = getattr(lib, plan["kernels"][index])
            fn.restype = None
            fn(*[ctypes.c_void_p(h.addr(a)) for a in args])
        elif kind == 2:
            gemm(h, plan["gemms"][index])
        else:
            raise RuntimeError("step kind %d" % kind)
    outs = {}
    for i, t in enumerate(plan["tensors"]):
        if t["role"] in (2, 4):
            n = int(np.prod(t["dims"])) if t["dims"] else 1
            outs[t["name"]] = h.mat(i, 0, (1, n), n).reshape(t["dims"]).copy()
    return outs


def host_plan(stem, model, flags):
    """compile model for sm_90 (flags) and its module for the host: (plan, lib) or (None, why)"""
    src, plan_path = os.path.join(work, stem + ".cu"), os.path.join(work, stem + ".gpuc")
    p = subprocess.run([gpuc, model, "--arch", "sm_90", "-o", plan_path] + flags, capture_output=True, text=True,
                       env=dict(os.environ, GPUC_SAVE_SOURCE=src))
    if p.returncode:
        return None, "compile: " + p.stderr.strip()[-300:]
    text = open(src).read()
    key = "i += (i64)gridDim.x * blockDim.x)\n"
    cpp, so = os.path.join(work, stem + ".host.cpp"), os.path.join(work, stem + ".host.so")
    open(cpp, "w").write(SHIM + text[text.index(key) + len(key):])
    p = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", so, cpp], capture_output=True, text=True)
    if p.returncode:
        return None, "host compile: " + p.stderr.strip()[-600:]
    return read_plan(plan_path), ctypes.CDLL(so)


def node_model(path, op, ins, attrs, outs, out_type=TensorProto.FLOAT):
    names = [n if v is not None else "" for n, v in ins]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, outs, name="rec", **attrs)
    T = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
         np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int32): TensorProto.INT32}
    vis = [helper.make_tensor_value_info(n, T[v.dtype], list(v.shape)) for n, v in ins if v is not None]
    ovis = [helper.make_tensor_value_info(o, out_type, None) for o in outs]
    mdl = helper.make_model(helper.make_graph([node], "rec", vis, ovis), opset_imports=[helper.make_opsetid("", 14)])
    mdl.ir_version = 8
    save(mdl, path)


def rel_l2(a, b):
    n = np.linalg.norm(b.astype(np.float64))
    return np.linalg.norm(a.astype(np.float64) - b.astype(np.float64)) / (n if n else 1.0)


S, B, I, H = 5, 3, 4, 6
cases = [
    ("lstm_bidir_all", "LSTM", {"direction": "bidirectional"}, "b lens h0 c0 p"),
    ("lstm_bidir_layout1", "LSTM", {"direction": "bidirectional", "layout": 1}, "b lens h0 c0 p"),
    ("lstm_reverse_clip", "LSTM", {"direction": "reverse", "clip": 0.6}, "b p"),
    ("lstm_input_forget", "LSTM", {"input_forget": 1, "activations": ["HardSigmoid", "Softsign", "Tanh"],
                                   "activation_alpha": [0.3], "activation_beta": [0.4]}, "b h0 c0"),
    ("lstm_plain", "LSTM", {}, ""),
    ("gru_bidir_lens", "GRU", {"direction": "bidirectional"}, "b lens h0"),
    ("gru_lbr_bidir_lens", "GRU", {"direction": "bidirectional", "linear_before_reset": 1}, "b lens h0"),
    ("gru_reverse_layout1", "GRU", {"direction": "reverse", "layout": 1, "clip": 1.5}, "b h0"),
    ("gru_lbr_plain", "GRU", {"linear_before_reset": 1}, ""),
    ("rnn_relu_reverse_lens", "RNN", {"direction": "reverse", "activations": ["Relu"]}, "b lens"),
    ("rnn_bidir_leaky_layout1", "RNN", {"direction": "bidirectional", "layout": 1,
                                        "activations": ["LeakyRelu", "Tanh"], "activation_alpha": [0.2]}, "b h0"),
    # a model stored in half: inputs converted to f32 on the device, outputs rounded to half
    ("lstm_f16_bidir_layout1", "LSTM", {"direction": "bidirectional", "layout": 1}, "b lens h0 c0 p f16"),
    ("gru_f16_reverse", "GRU", {"direction": "reverse"}, "b h0 f16"),
    ("lstm_f64_bidir", "LSTM", {"direction": "bidirectional"}, "b lens h0 c0 p f64"),
]
for cname, op, attrs, has in cases:
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    lay = attrs.get("layout", 0)
    has = has.split()
    f32 = np.float16 if "f16" in has else np.float64 if "f64" in has else np.float32
    sb = (B, S) if lay else (S, B)
    ins = [("X", rng.standard_normal(sb + (I,)).astype(f32)),
           ("W", (rng.standard_normal((D, G * H, I)) * 0.5).astype(f32)),
           ("R", (rng.standard_normal((D, G * H, H)) * 0.5).astype(f32)),
           ("B", (rng.standard_normal((D, 2 * G * H)) * 0.3).astype(f32) if "b" in has else None),
           ("L", np.array([5, 2, 0], np.int32) if "lens" in has else None)]
    st = (B, D, H) if lay else (D, B, H)
    ins.append(("H0", rng.standard_normal(st).astype(f32) if "h0" in has else None))
    if op == "LSTM":
        ins += [("C0", rng.standard_normal(st).astype(f32) if "c0" in has else None),
                ("P", (rng.standard_normal((D, 3 * H)) * 0.5).astype(f32) if "p" in has else None)]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    path = os.path.join(work, cname + ".onnx")
    node_model(path, op, ins, dict(attrs, hidden_size=H), outs,
               TensorProto.FLOAT16 if "f16" in has else TensorProto.DOUBLE if "f64" in has else TensorProto.FLOAT)
    args = []
    feeds = {n: v for n, v in ins if v is not None}
    for n, v in feeds.items():
        f = os.path.join(work, "%s.%s.npy" % (cname, n))
        np.save(f, v)
        args += ["--input", "%s=%s" % (n, f)]
    out = os.path.join(work, cname + ".ref")
    p = subprocess.run([gpuc, "run", path, "--cpu", "--out", out] + args, capture_output=True, text=True)
    if p.returncode:
        check(False, "%s: reference: %s" % (cname, p.stderr.strip()[-300:]))
        continue
    plan, lib = host_plan(cname, path, [])
    if plan is None:
        check(False, "%s: %s" % (cname, lib))
        continue
    got = run_plan(plan, lib, feeds)
    for o in outs:
        want = np.load(os.path.join(out, o + ".npy"))
        g = got.get(o)
        r = rel_l2(g, want) if g is not None and g.shape == want.shape else None
        # half: the reference's f64 state against f32, both rounded on store; f64: the same math
        tol = 2e-3 if "f16" in has else 1e-12 if "f64" in has else 1e-5
        check(r is not None and r <= tol, "%s %s: rel L2 %s" % (cname, o, r))
    print("%s: plan of %d steps on the host" % (cname, len(plan["steps"])))
# a sequence_lens value past the sequence: the init kernel reports it in the
# device error record (runtime/device_fault.h: step + 1, kind
# GPUC_FAULT_SEQLEN 6, value, position, bound, axis -1); the steps clamp it
f32 = np.float32
feeds = {"X": rng.standard_normal((S, B, I)).astype(f32), "W": rng.standard_normal((1, 3 * H, I)).astype(f32),
         "R": rng.standard_normal((1, 3 * H, H)).astype(f32), "L": np.array([1, S + 2, 0], np.int32)}
path = os.path.join(work, "fault_seqlen.onnx")
node_model(path, "GRU", [(n, feeds[n]) for n in ("X", "W", "R")] + [("B", None), ("L", feeds["L"])],
           {"hidden_size": H}, ["Y", "Y_h"])
plan, lib = host_plan("fault_seqlen", path, [])
if plan is None:
    check(False, "fault_seqlen: %s" % lib)
else:
    run_plan(plan, lib, feeds)
    rec = list((ctypes.c_longlong * 6).in_dll(lib, "gpuc_fault"))
    init = [k for k, st in enumerate(plan["steps"]) if st[0] == 1][0]
    check(rec == [init + 1, 6, S + 2, 1, S, -1], "fault_seqlen: device error record %s" % rec)
    print("fault_seqlen: record %s" % rec)
# the exported models' whole plans
worst = {"fp32": 0.0, "fp16": 0.0}
for name, m in sorted(json.load(open(os.path.join(models, "manifest.json"))).items()) if models else []:
    for batch, prec in [(b, p) for b in ((2, 3) if m["dynamic"] else (2,)) for p in ("fp32", "fp16")]:
        x = np.load(os.path.join(models, "%s.b%d.in.x.npy" % (m["data"], batch)))
        plan, lib = host_plan("%s_b%d_%s" % (name, batch, prec), os.path.join(models, name + ".onnx"),
                              ["-O2", "--shape", "%s=%s" % (m["inputs"][0], "x".join(map(str, x.shape)))] +
                              (["--fp16"] if prec == "fp16" else []))
        if plan is None:
            check(False, "%s b%d %s: %s" % (name, batch, prec, lib))
            continue
        got = run_plan(plan, lib, {m["inputs"][0]: x})
        for k, oname in enumerate(m["outputs"]):
            want = np.load(os.path.join(models, "%s.b%d.out.%d.npy" % (m["data"], batch, k)))
            g = got.get(oname)
            r = rel_l2(g, want) if g is not None and g.shape == want.shape else None
            tol = 1e-4 if prec == "fp32" else 1e-2
            check(r is not None and r <= tol, "%s b%d %s %s: rel L2 %s (<= %g)" % (name, batch, prec, oname, r, tol))
            worst[prec] = max(worst[prec], r or 0)
        print("%s b%d %s: plan of %d steps on the host" % (name, batch, prec, len(plan["steps"])))
if models:
    print("exported plans: largest rel L2 fp32 %.3g, fp16 %.3g" % (worst["fp32"], worst["fp16"]))
finish()
