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
activations with alpha/beta; a sequence_lens value past the sequence is
reported in the device error record by the init kernel (a GRU case).
usage: rnn_host_test.py GPUC WORKDIR   (CXX picks the compiler; g++)"""
import ctypes, os, struct, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, save

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(5)
fails = passes = 0

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
"""


def check(ok, what):
    global fails, passes
    if ok:
        passes += 1
    else:
        fails += 1
        print("FAIL", what)


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
        gemms.append(dict(a=a, b=b, c=c, y=y, ta=ta & 1, tb=tb, m=m, n=n, k=k, batch=batch, lda=lda, ldb=ldb,
                          ldc=ldc, ldy=ldy, sa=sa, sb=sb, sc=sc, sy=sy, alpha=alpha, beta=beta))
    return dict(arena=arena, tensors=tensors, kernels=kernels, steps=steps, args=args, gemms=gemms,
                weights=secs.get(WEIGHTS, b""))


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

    def mat(self, i, start, shape, ld):
        """f32 matrix view of tensor i from element start: shape, row stride ld (0: one row repeated)"""
        t = self.base(i)
        buf = self.arena if t["mem"] == 0 else self.weights
        return np.ndarray(shape, np.float32, buffer=buf, offset=t["offset"] + 4 * start, strides=(ld * 4, 4))


def gemm(h, g):
    """Y[b] = alpha op(A[b]) op(B[b]) (+ C), row-major as plan.h defines PlanGemm"""
    for bt in range(g["batch"]):
        a = h.mat(g["a"], bt * g["sa"], (g["k"], g["m"]) if g["ta"] else (g["m"], g["k"]), g["lda"])
        b = h.mat(g["b"], bt * g["sb"], (g["n"], g["k"]) if g["tb"] else (g["k"], g["n"]), g["ldb"])
        res = g["alpha"] * ((a.T if g["ta"] else a).astype(np.float64) @ (b.T if g["tb"] else b).astype(np.float64))
        if g["c"] != 0xFFFFFFFF:
            c = h.mat(g["c"], bt * g["sc"], (g["m"], g["n"]), g["ldc"])
            res = res + (1.0 if g["ldc"] == 0 else g["beta"]) * c
        h.mat(g["y"], bt * g["sy"], (g["m"], g["n"]), g["ldy"])[...] = res.astype(np.float32)


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


def node_model(path, op, ins, attrs, outs):
    names = [n if v is not None else "" for n, v in ins]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, outs, name="rec", **attrs)
    T = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    vis = [helper.make_tensor_value_info(n, T[v.dtype], list(v.shape)) for n, v in ins if v is not None]
    ovis = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
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
]
cxx = os.environ.get("CXX", "g++")
for cname, op, attrs, has in cases:
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    lay = attrs.get("layout", 0)
    f32 = np.float32
    has = has.split()
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
    node_model(path, op, ins, dict(attrs, hidden_size=H), outs)
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
    src, plan_path = os.path.join(work, cname + ".cu"), os.path.join(work, cname + ".gpuc")
    env = dict(os.environ, GPUC_SAVE_SOURCE=src)
    p = subprocess.run([gpuc, path, "--arch", "sm_90", "-o", plan_path], capture_output=True, text=True, env=env)
    if p.returncode:
        check(False, "%s: compile: %s" % (cname, p.stderr.strip()[-300:]))
        continue
    text = open(src).read()
    cut = text.index("i += (i64)gridDim.x * blockDim.x)\n") + len("i += (i64)gridDim.x * blockDim.x)\n")
    cpp, so = os.path.join(work, cname + ".host.cpp"), os.path.join(work, cname + ".host.so")
    open(cpp, "w").write(SHIM + text[cut:])
    p = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", so, cpp], capture_output=True, text=True)
    if p.returncode:
        check(False, "%s: host compile: %s" % (cname, p.stderr.strip()[-600:]))
        continue
    got = run_plan(read_plan(plan_path), ctypes.CDLL(so), feeds)
    for o in outs:
        want = np.load(os.path.join(out, o + ".npy"))
        g = got.get(o)
        r = rel_l2(g, want) if g is not None and g.shape == want.shape else None
        check(r is not None and r <= 1e-5, "%s %s: rel L2 %s" % (cname, o, r))
    print("%s: plan of %d steps on the host" % (cname, len(read_plan(plan_path)["steps"])))
# a sequence_lens value past the sequence: the init kernel reports it in the
# device error record (runtime/device_fault.h: step + 1, kind
# GPUC_FAULT_SEQLEN 6, value, position, bound, axis -1); the steps clamp it
f32 = np.float32
feeds = {"X": rng.standard_normal((S, B, I)).astype(f32), "W": rng.standard_normal((1, 3 * H, I)).astype(f32),
         "R": rng.standard_normal((1, 3 * H, H)).astype(f32), "L": np.array([1, S + 2, 0], np.int32)}
path = os.path.join(work, "fault_seqlen.onnx")
node_model(path, "GRU", [(n, feeds[n]) for n in ("X", "W", "R")] + [("B", None), ("L", feeds["L"])],
           {"hidden_size": H}, ["Y", "Y_h"])
src, plan_path = os.path.join(work, "fault_seqlen.cu"), os.path.join(work, "fault_seqlen.gpuc")
p = subprocess.run([gpuc, path, "--arch", "sm_90", "-o", plan_path], capture_output=True, text=True,
                   env=dict(os.environ, GPUC_SAVE_SOURCE=src))
text = open(src).read() if p.returncode == 0 else ""
cut = text.find("i += (i64)gridDim.x * blockDim.x)\n") + len("i += (i64)gridDim.x * blockDim.x)\n")
cpp, so = os.path.join(work, "fault_seqlen.host.cpp"), os.path.join(work, "fault_seqlen.host.so")
open(cpp, "w").write(SHIM + text[cut:])
p = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", so, cpp], capture_output=True, text=True)
if p.returncode:
    check(False, "fault_seqlen: host compile: %s" % p.stderr.strip()[-600:])
else:
    lib = ctypes.CDLL(so)
    plan = read_plan(plan_path)
    run_plan(plan, lib, feeds)
    rec = list((ctypes.c_longlong * 6).in_dll(lib, "gpuc_fault"))
    init = [k for k, st in enumerate(plan["steps"]) if st[0] == 1][0]
    check(rec == [init + 1, 6, S + 2, 1, S, -1], "fault_seqlen: device error record %s" % rec)
    print("fault_seqlen: record %s" % rec)
print("%d checks, %d failed" % (passes + fails, fails))
sys.exit(1 if fails else 0)
