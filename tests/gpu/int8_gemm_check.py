#!/usr/bin/env python3
"""gpuc's own int8 tensor-core GEMM (codegen/lower_int8_gemm.c) on the GPU.

Models made here with onnx.helper: y = act(x W + b) [+ r], x [M, K] and r
[M, N] inputs, W [K, N] and b [N] random constants (seeded), act none or
Relu. Each is compiled --int8 (fp32) and --int8 --fp16 with
GPUC_INT8_GEMM=own (the kernel at every size), run on the GPU, and
compared with `gpuc run MODEL.onnx --cpu --int8 [--fp16]` on the same
inputs: the int8 values and int32 sums are exact and the epilogue takes
the reference's f32 steps (acc * xs * ws + b, then the act and the
residual), so both must be BIT-EXACT (max |diff| 0). The shapes cover
M, N and K past the tiles (M 777, N 132, K 48/80/1040: zero-filled loads,
guarded stores), both tile heights (BM 64 and 128) and BERT-base's four
GEMMs at b32 s128.

(--fp16: rel L2 1e-3 against the reference, whose fused groups store
half intermediates the GPU's keep in float (measured: 1 ulp apart where
a residual is cast to half first), and bit-exact against the cuBLASLt
plan's GPU output, which runs the same program after its GEMM.)

Then time (BERT shapes, `gpuc bench --profile`, median of 200): the
GEMM step of the own kernel (with its fused epilogue), cuBLASLt's IMMA GEMM
+ its DequantizeRows kernel (GPUC_INT8_GEMM=cublaslt), and the fp16 GEMM
of the plain --fp16 plan.

With SWEEP="BMxBNxBKsST ..." each BERT shape's GEMM is also timed under
each tile (GPUC_INT8_TILE), for choosing the default (lower_int8_gemm.c).

With WS="1 tma" (either or both) the warp-specialized wgmma kernel
(sm_90; GPUC_INT8_WS=1: cp.async loads, GPUC_INT8_WS=tma: TMA loads) too:
each case compiled with each, its output bit-exact against the CPU
reference (fp32) and against the default kernel's GPU output (both
precisions: same sums, same epilogue program), and timed beside the
others ("ws", "ws-tma"); WS=0 does the same for GPUC_INT8_WS=0, the
wgmma kernel everywhere (sm_90's default is the TMA kernel where
lower_int8_gemm.c's ws_choice takes it: the last three shapes, and three
of BERT's four); WS_SWEEP="[MODE:]TILE ..." (TILE wsBMxBNsST[gG]
or pp64xBNsST[gG], MODE 1 or tma, default 1) times each BERT shape under
each WS tile (GPUC_INT8_WS_TILE). ONLY_TIMED=1 checks the four BERT
shapes only (a shorter run).

usage: int8_gemm_check.py GPUC WORK    prints PASS/FAIL lines; exit 1 on a failure
"""
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

gpuc, work = sys.argv[1], sys.argv[2]
arch = ["--arch", os.environ.get("ARCH", "native")]
os.makedirs(work, exist_ok=True)
fails = 0


def verdict(ok, line):
    global fails
    fails += 0 if ok else 1
    print(("PASS " if ok else "FAIL ") + line, flush=True)


def run(cmd, env=None, timeout=300):
    """(exit status, output); 124 when it ran past timeout seconds (a hung
    kernel must not take the rest of the checks with it)"""
    e = dict(os.environ)
    e.update(env or {})
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "timed out after %d s: %s" % (timeout, " ".join(cmd))
    return r.returncode, (r.stdout + r.stderr).strip()


def make(path, M, K, N, act, res, seed):
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    b = (0.1 * rng.standard_normal(N)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="fc/MatMul"),
             helper.make_node("Add", ["mm", "b"], ["lin"], name="fc/Add")]
    last = "lin"
    if act == "relu":
        nodes.append(helper.make_node("Relu", [last], ["act"], name="relu"))
        last = "act"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])]
    if res:
        nodes.append(helper.make_node("Add", [last, "r"], ["sum"], name="residual"))
        last = "sum"
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [M, N]))
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    g = helper.make_graph(nodes, "int8_gemm", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    ins = []
    x = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    np.save(path + ".x.npy", x)
    ins += ["--input", "x=" + path + ".x.npy"]
    if res:
        np.save(path + ".r.npy", rng.uniform(-1, 1, (M, N)).astype(np.float32))
        ins += ["--input", "r=" + path + ".r.npy"]
    return ins


def output(d):
    return np.load(os.path.join(d, "y.npy")).astype(np.float64)


CASES = [  # M, K, N, act, residual, timed
    (4096, 768, 2304, "none", False, True),   # BERT's fused Q/K/V
    (4096, 768, 768, "none", True, True),     # attention out + residual
    (4096, 768, 3072, "relu", False, True),   # FFN in (GELU there)
    (4096, 3072, 768, "none", True, True),    # FFN out + residual
    (777, 48, 132, "none", True, False),
    (1000, 80, 200, "relu", False, False),
    (300, 1040, 520, "none", False, False),
    (64, 16, 4, "none", False, False),
    # sm_90's default takes the TMA kernel here (lower_int8_gemm.c, ws_choice),
    # each with its own tile: K >= 2048 (a 16-byte K tail) 128 x 128,
    # N 2048-3071 ping-pong 64 x 256, N >= 3072 ping-pong 64 x 128
    (777, 2080, 136, "none", True, False),
    (300, 48, 2056, "relu", False, False),
    (200, 80, 3080, "none", True, False),
]
OWN = {"GPUC_INT8_GEMM": "own"}
WS = os.environ.get("WS", "").split()  # GPUC_INT8_WS values to check: "1", "tma"


def ws_name(mode):
    return "ws" if mode == "1" else "ws-" + mode
if os.environ.get("ONLY_TIMED") == "1":
    CASES = [c for c in CASES if c[5]]
timed = []
jobs = []  # (tag, p, path, plan, ins, prec): compiles and CPU references first, all at once
for i, (M, K, N, act, res, t) in enumerate(CASES):
    tag = "M%d K%d N%d %s%s" % (M, K, N, act, " +res" if res else "")
    path = os.path.join(work, "g%d.onnx" % i)
    ins = make(path, M, K, N, act, res, 100 + i)
    for prec in ([], ["--fp16"]):
        p = "-fp16" if prec else ""
        jobs.append((tag, p, path, os.path.join(work, "g%d%s.gpuc" % (i, p)), ins, prec, t))


def prepare(j):
    tag, p, path, plan, ins, prec, _ = j
    lt = []
    if prec:  # --fp16: cuBLASLt's GEMM + the same elementwise program as a kernel of its own
        lt = [run([gpuc, path, "-O2", "--int8", "-o", plan + ".lt"] + arch + prec, {"GPUC_INT8_GEMM": "cublaslt"})]
    ws = [run([gpuc, path, "-O2", "--int8", "-o", plan + "." + ws_name(m)] + arch + prec, dict(OWN, GPUC_INT8_WS=m))
          for m in WS]
    return (run([gpuc, path, "-O2", "--int8", "-o", plan] + arch + prec, OWN),
            run([gpuc, "run", path, "--cpu", "-O2", "--int8", "--out", plan + ".cpu"] + prec + ins), ws) + tuple(lt)


with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
    prepared = list(ex.map(prepare, jobs))
def check_ws(tag, p, plan, ins, prec, wsruns):
    for mode, wsrun in zip(WS, wsruns):
        check_ws_mode(tag, p, plan, ins, prec, ws_name(mode), wsrun)


def check_ws_mode(tag, p, plan, ins, prec, name, wsrun):
    """the WS kernel's plan (plan.<name>): its GEMM gpuc's, its output
    bit-exact against the CPU reference (fp32) and the default kernel's
    GPU output (plan.gpu)"""
    rc, msg = wsrun
    p = p + " " + name
    if rc:
        verdict(False, "%s%s: compile failed: %s" % (tag, p, msg[-400:]))
        return
    _, listing = run([gpuc, "inspect", plan + "." + name])
    m = re.search(r"kernel (k\d+_int8_gemm\S*)\s+grid (\d+) block (\d+)", listing)
    verdict(m is not None and "gemm int8" not in listing,
            "%s%s: the plan's int8 GEMM is gpuc's kernel%s" % (tag, p, " (grid %s block %s)" % m.groups()[1:] if m else ""))
    rc, msg = run([gpuc, "run", plan + "." + name, "--out", plan + ".gpu-" + name] + ins, timeout=60)
    if rc:
        verdict(False, "%s%s: run failed: %s" % (tag, p, msg[-400:]))
        return
    got = output(plan + ".gpu-" + name)
    if not prec:
        d = np.abs(got - output(plan + ".cpu"))
        verdict(np.isfinite(got).all() and int(np.count_nonzero(d)) == 0,
                "%s%s: GPU vs CPU reference bit-exact: %d of %d differ, max |diff| %.3g" %
                (tag, p, int(np.count_nonzero(d)), got.size, float(d.max())))
    d = np.abs(got - output(plan + ".gpu"))
    verdict(np.isfinite(got).all() and int(np.count_nonzero(d)) == 0,
            "%s%s: GPU vs the default kernel's GPU output bit-exact: %d of %d differ, max |diff| %.3g" %
            (tag, p, int(np.count_nonzero(d)), got.size, float(d.max())))


for (tag, p, path, plan, ins, prec, t), ((rc, msg), (rc2, msg2), wsruns, *ltrun) in zip(jobs, prepared):
    if rc:
        verdict(False, "%s%s: compile failed: %s" % (tag, p, msg[-400:]))
        continue
    _, listing = run([gpuc, "inspect", plan])
    own = len(re.findall(r"kernel k\d+_int8_gemm\S*\s.*tensor cores", listing))
    lt = len(re.findall(r"gemm int8", listing))
    verdict(own == 1 and lt == 0, "%s%s: the plan's int8 GEMM is gpuc's kernel (%d own, %d cuBLASLt)" % (tag, p, own, lt))
    rc, msg = run([gpuc, "run", plan, "--out", plan + ".gpu"] + ins)
    if rc or rc2:
        verdict(False, "%s%s: run failed: %s" % (tag, p, (msg if rc else msg2)[-400:]))
        continue
    got, want = output(plan + ".gpu"), output(plan + ".cpu")
    diff = np.abs(got - want)
    bad = int(np.count_nonzero(diff))
    if not prec:
        verdict(np.isfinite(got).all() and bad == 0,
                "%s%s: GPU vs CPU reference bit-exact: %d of %d differ, max |diff| %.3g" %
                (tag, p, bad, got.size, float(diff.max())))
        check_ws(tag, p, plan, ins, prec, wsruns)
    else:
        # a fused group keeps half intermediates (r.f16) in float where the
        # reference stores them: one half ulp apart at most (ew_kernel.c);
        # cuBLASLt's plan runs the same program after its GEMM: bit-exact
        r = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        verdict(np.isfinite(got).all() and r <= 1e-3,
                "%s%s: GPU vs CPU reference rel L2 %.3g (<= 1e-3; %d of %d differ, max |diff| %.3g)" %
                (tag, p, r, bad, got.size, float(diff.max())))
        (rc3, msg3), = ltrun
        rc4, msg4 = (rc3, msg3) if rc3 else run([gpuc, "run", plan + ".lt", "--out", plan + ".ltgpu"] + ins)
        if rc3 or rc4:
            verdict(False, "%s%s: cuBLASLt plan failed: %s" % (tag, p, (msg3 if rc3 else msg4)[-300:]))
        else:
            d2 = np.abs(got - output(plan + ".ltgpu"))
            verdict(int(np.count_nonzero(d2)) == 0, "%s%s: GPU vs cuBLASLt's int8 plan bit-exact: %d differ, max |diff| %.3g" %
                    (tag, p, int(np.count_nonzero(d2)), float(d2.max())))
        check_ws(tag, p, plan, ins, prec, wsruns)
    if t and prec:
        timed.append((tag, path, plan))

# timings: the GEMM step and what follows it for the same Linear
PROF = re.compile(r"^\s*(\d+)\s+(\S+)\s+([0-9.]+)\s")


def profile(plan):
    rc, txt = run([gpuc, "bench", plan, "--iters", "200", "--profile"], timeout=90)
    if rc:
        return None, txt
    rows = []
    for ln in txt.splitlines():
        m = PROF.match(ln)
        if m and len(ln.split()) > 11:
            rows.append((int(m.group(1)), m.group(2), float(m.group(3)), ln.split("  ")[-1].strip()))
    return rows, txt


for tag, path, own_plan in timed:
    lt_plan, f16_plan = own_plan.replace(".gpuc", "-lt.gpuc"), own_plan.replace(".gpuc", "-f16.gpuc")
    rc1, m1 = run([gpuc, path, "-O2", "--int8", "--fp16", "-o", lt_plan] + arch, {"GPUC_INT8_GEMM": "cublaslt"})
    rc2, m2 = run([gpuc, path, "-O2", "--fp16", "-o", f16_plan] + arch)
    if rc1 or rc2:
        verdict(False, "%s: timing compiles failed: %s" % (tag, (m1 if rc1 else m2)[-300:]))
        continue
    got = {}
    named = [("own", own_plan), ("cublaslt", lt_plan), ("fp16", f16_plan)]
    for m in reversed(WS):
        if os.path.exists(own_plan + "." + ws_name(m)):
            named.insert(1, (ws_name(m), own_plan + "." + ws_name(m)))
    for name, plan in named:
        rows, txt = profile(plan)
        if rows is None:
            verdict(False, "%s %s: bench failed: %s" % (tag, name, txt[-300:]))
            continue
        with open(plan + ".bench.txt", "w") as f:
            f.write(txt)
        # the GEMM and its epilogue: every step covering fc/ (quantize of x excluded)
        gemm = sum(ms for _, k, ms, cov in rows if "fc/" in cov and ".quantize" not in cov.split(",")[0])
        lat = re.search(r"latency: median ([0-9.]+) ms", txt)
        got[name] = gemm
        print("time %-28s %-8s GEMM + epilogue steps %.4f ms; plan latency %s ms" %
              (tag, name, gemm, lat.group(1) if lat else "?"), flush=True)
    M, K, N = [int(v) for v in re.findall(r"\d+", tag)[:3]]
    for name in ["own"] + [ws_name(m) for m in WS]:
        if got.get(name, 0) > 0 and "cublaslt" in got and "fp16" in got:
            print("time %-28s %-6s %.1f TOP/s: %.2fx cuBLASLt int8 + DequantizeRows, %.2fx cuBLASLt fp16%s" %
                  (tag, name, 2 * M * N * K / got[name] / 1e9, got["cublaslt"] / got[name], got["fp16"] / got[name],
                   ", %.2fx the default kernel (own)" % (got["own"] / got[name]) if name != "own" and got.get("own") else ""),
                  flush=True)

# the tile sweeps (SWEEP="128x128x64s4 ...", WS_SWEEP="ws128x256s4 ..."): the GEMM step of each timed shape under each tile
tiles = [(t, {"GPUC_INT8_GEMM": "own", "GPUC_INT8_TILE": t}) for t in os.environ.get("SWEEP", "").split()]
tiles += [(t, dict(OWN, GPUC_INT8_WS=t.split(":")[0] if ":" in t else "1", GPUC_INT8_WS_TILE=t.split(":")[-1]))
          for t in os.environ.get("WS_SWEEP", "").split()]
if tiles:
    sj = [(tag, path, t, own_plan.replace(".gpuc", "-%s.gpuc" % t.replace(":", "_")), env) for tag, path, own_plan in timed
          for t, env in tiles]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        comp = list(ex.map(lambda j: run([gpuc, j[1], "-O2", "--int8", "--fp16", "-o", j[3]] + arch, j[4]), sj))
    for (tag, path, t, plan, _), (rc, msg) in zip(sj, comp):
        rows, txt = (None, msg) if rc else profile(plan)
        if rows is None:
            verdict(False, "sweep %s %s: %s" % (tag, t, txt[-300:]))
            continue
        ms = sum(x for _, k, x, cov in rows if "fc/" in cov and ".quantize" not in cov.split(",")[0])
        M, K, N = [int(v) for v in re.findall(r"\d+", tag)[:3]]
        print("sweep %-28s tile %-14s %.4f ms  %.1f TOP/s" % (tag, t, ms, 2 * M * N * K / ms / 1e9 if ms else 0), flush=True)

print("%d failed" % fails)
sys.exit(1 if fails else 0)
