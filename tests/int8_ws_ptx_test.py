#!/usr/bin/env python3
"""The warp-specialized int8 wgmma GEMM (GPUC_INT8_WS=1, codegen/lower_int8_gemm.c)
as ptxas sees it, and the switch's reach. No GPU needed.

Linear layers y = act(x W + b) [+ r] (BERT-base's four GEMMs at 4096 rows,
--int8 --fp16, and the edge shapes of tests/gpu/int8_gemm_check.py in fp32
and fp16) compiled for sm_90 with GPUC_INT8_GEMM=own:
  - with GPUC_INT8_WS=1 the plan's PTX (read from the plan file) targets
    sm_90a and holds the ring's instructions (mbarrier.init,
    mbarrier.try_wait.parity, mbarrier.arrive, cp.async.mbarrier.arrive.noinc,
    fence.proxy.async, wgmma.mma_async, wgmma.wait_group); with
    GPUC_INT8_WS=tma the TMA ones instead of the cp.async producer's
    (mbarrier.arrive.expect_tx, cp.async.bulk.tensor.2d ... complete_tx,
    the maps as 64-byte-aligned 128-byte parameters); ptxas -v on it
    reports the GEMM kernel without spills, a stack frame or local memory;
    its registers and the plan step's grid and block are printed (the tiles
    GPUC_INT8_WS_TILE sweeps, too);
  - without the switch (the default, ws_choice) the TMA kernel where the
    H200 measured it faster, with the tile of the shape (the plan's TMA
    boxes: 64 x 256 ping-pong at K 768 N 2304, 64 x 128 ping-pong at N
    3072, 128 x 128 at K 3072), ptxas without spills; elsewhere (K 768 N
    768, the edge shapes) the same PTX as GPUC_INT8_WS=0, which has no
    mbarrier (the wgmma kernel, the default before);
  - a BERT-like FFN block (LayerNorm, 512 -> 2048 erf GELU -> 512, residual,
    LayerNorm; 4096 rows) compiled by default (no GPUC_INT8_GEMM either):
    both GEMMs the TMA kernel (4 tensor maps, no cuBLASLt int8 GEMM);
    with GPUC_INT8_WS=0 both cuBLASLt's, no mbarrier in the PTX;
  - with the switch on sm_80 (mma.sync there) the PTX is as without it.
usage: int8_ws_ptx_test.py GPUC PTXAS [WORKDIR]
Prints PASS/FAIL lines and 'N failed'."""
import os
import re
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GPUC, PTXAS = sys.argv[1], sys.argv[2]
WORK = sys.argv[3] if len(sys.argv) > 3 else "/tmp/gpuc_int8_ws_ptx"
os.makedirs(WORK, exist_ok=True)
fails = 0


def verdict(ok, line):
    global fails
    fails += 0 if ok else 1
    print(("PASS " if ok else "FAIL ") + line, flush=True)


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
    F = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", F, [M, K])]
    if res:
        nodes.append(helper.make_node("Add", [last, "r"], ["sum"], name="residual"))
        last = "sum"
        inputs.append(helper.make_tensor_value_info("r", F, [M, N]))
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    g = helper.make_graph(nodes, "int8_gemm", inputs, [helper.make_tensor_value_info("y", F, [M, N])],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def plan_ptx(plan):
    """the PTX section (id 10) of a plan file (runtime/plan.h: a 64-byte
    header, nsections at byte 36, then 24-byte section records)"""
    b = open(plan, "rb").read()
    assert b[:8] == b"GPUCPLAN", plan
    (ns,) = struct.unpack_from("<I", b, 36)
    for i in range(ns):
        sid, _, off, size = struct.unpack_from("<IIQQ", b, 64 + 24 * i)
        if sid == 10:
            return b[off:off + size].split(b"\0")[0].decode()
    raise AssertionError("no PTX section in " + plan)


def make_ffn(path, B, S, H, F, seed):
    """BERT's FFN block as PyTorch exports it: LayerNorm, Linear H -> F, erf
    GELU, Linear F -> H, residual Add, LayerNorm; x [B, S, H]"""
    rng = np.random.default_rng(seed)
    consts = {"W1": rng.standard_normal((H, F)) / np.sqrt(H), "b1": 0.1 * rng.standard_normal(F),
              "W2": rng.standard_normal((F, H)) / np.sqrt(F), "b2": 0.1 * rng.standard_normal(H),
              "g0": 1 + 0.1 * rng.standard_normal(H), "e0": 0.1 * rng.standard_normal(H),
              "g1": 1 + 0.1 * rng.standard_normal(H), "e1": 0.1 * rng.standard_normal(H),
              "sqrt2": np.array(1.4142135), "one": np.array(1.0), "half": np.array(0.5)}
    nodes = [helper.make_node("LayerNormalization", ["x", "g0", "e0"], ["n0"], name="ln0", axis=-1, epsilon=1e-12),
             helper.make_node("MatMul", ["n0", "W1"], ["h0"], name="fc1/MatMul"),
             helper.make_node("Add", ["h0", "b1"], ["h"], name="fc1/Add"),
             helper.make_node("Div", ["h", "sqrt2"], ["g1_"], name="gelu/Div"),
             helper.make_node("Erf", ["g1_"], ["g2"], name="gelu/Erf"),
             helper.make_node("Add", ["g2", "one"], ["g3"], name="gelu/Add"),
             helper.make_node("Mul", ["h", "g3"], ["g4"], name="gelu/Mul"),
             helper.make_node("Mul", ["g4", "half"], ["g5"], name="gelu/Mul_1"),
             helper.make_node("MatMul", ["g5", "W2"], ["o0"], name="fc2/MatMul"),
             helper.make_node("Add", ["o0", "b2"], ["o"], name="fc2/Add"),
             helper.make_node("Add", ["o", "n0"], ["r"], name="residual"),
             helper.make_node("LayerNormalization", ["r", "g1", "e1"], ["y"], name="ln1", axis=-1, epsilon=1e-12)]
    F32 = TensorProto.FLOAT
    g = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", F32, [B, S, H])],
                          [helper.make_tensor_value_info("y", F32, [B, S, H])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def compile_plan(job):
    """env: the case's variables over GPUC_INT8_GEMM=own; a None value unsets one"""
    path, plan, prec, arch, env = job
    e = dict(os.environ, GPUC_INT8_GEMM="own")
    e.pop("GPUC_INT8_WS", None)
    e.pop("GPUC_INT8_WS_TILE", None)
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    r = subprocess.run([GPUC, path, "-O2", "--int8", "--arch", arch, "-o", plan] + prec, env=e,
                       capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr)[-600:]


def plan_boxes(plan):
    """the rows of each TMA box of the plan's tensor maps (runtime/plan.h
    PlanTensorMap, section 18: 48-byte records, box[1] at byte 36)"""
    b = open(plan, "rb").read()
    (ns,) = struct.unpack_from("<I", b, 36)
    for i in range(ns):
        sid, _, off, size = struct.unpack_from("<IIQQ", b, 64 + 24 * i)
        if sid == 18:
            return [struct.unpack_from("<IIQQQIIII", b, off + 48 * j)[6] for j in range(size // 48)]
    return []


def int8_step(plan):
    """(kernel name, grid, block) of the plan's int8 GEMM step, by gpuc inspect"""
    out = subprocess.run([GPUC, "inspect", plan], capture_output=True, text=True).stdout
    m = re.search(r"kernel (k\d+_int8_gemm\S*)\s+grid (\d+) block (\d+)", out)
    return m.groups() if m else (None, None, None)


def ptxas_report(ptx_path, kernel):
    r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", ptx_path, "-o", os.devnull], capture_output=True, text=True)
    txt = r.stdout + r.stderr
    if r.returncode:
        return None, txt[-400:]
    m = re.search(r"Compiling entry function '%s'.*?Function properties for %s\n\s*(\d+) bytes stack frame, "
                  r"(\d+) bytes spill stores, (\d+) bytes spill loads\n.*?Used (\d+) registers" % (kernel, kernel),
                  txt, re.S)
    if not m:
        return None, "no ptxas report for " + kernel
    return tuple(int(v) for v in m.groups()), txt


SHAPES = [  # M, K, N, act, residual, precisions
    (4096, 768, 2304, "none", False, [["--fp16"]]),
    (4096, 768, 768, "none", True, [["--fp16"]]),
    (4096, 768, 3072, "relu", False, [["--fp16"]]),
    (4096, 3072, 768, "none", True, [["--fp16"]]),
    (777, 48, 132, "none", True, [[], ["--fp16"]]),
    (300, 1040, 520, "none", False, [[], ["--fp16"]]),
    (64, 16, 4, "none", False, [[]]),
]
TILES = ["ws128x256s4", "ws128x128s3", "ws128x128s4", "ws128x128s6", "ws64x256s4", "ws128x64s4", "ws256x128s3",
         "ws128x256s3", "pp64x256s4", "pp64x256s5", "pp64x128s4"]
TMA_TILES = ["ws128x256s4", "ws256x128s3", "pp64x256s4", "pp64x128s4"]
VARIANTS = [("ws", "sm_90", {"GPUC_INT8_WS": "1"}), ("tma", "sm_90", {"GPUC_INT8_WS": "tma"}),
            ("default", "sm_90", {}), ("ws0", "sm_90", {"GPUC_INT8_WS": "0"}),
            ("ws-sm80", "sm_80", {"GPUC_INT8_WS": "1"}), ("off-sm80", "sm_80", {})]
# the default's kernel by shape (ws_choice): the TMA boxes' rows (Xq's BM,
# Wq's BN), or None for the wgmma kernel (GPUC_INT8_WS=0's PTX)
def default_boxes(K, N):
    if K >= 2048:
        return [128, 128]
    return None if N < 2048 else [64, 256] if N < 3072 else [64, 128]
jobs, tags = [], []
for i, (M, K, N, act, res, precs) in enumerate(SHAPES):
    path = os.path.join(WORK, "s%d.onnx" % i)
    make(path, M, K, N, act, res, 200 + i)
    for prec in precs:
        tag = "M%d K%d N%d%s%s" % (M, K, N, " +res" if res else "", " fp16" if prec else " fp32")
        for v, arch, env in VARIANTS:
            if v.endswith("sm80") and M != 777:
                continue
            jobs.append((path, os.path.join(WORK, "s%d%s-%s.gpuc" % (i, "h" if prec else "f", v)), prec, arch, env))
            tags.append((tag, v))
        if M == 4096:  # the sweep's tiles at BERT's shapes, with cp.async and with TMA loads
            for t in TILES + ["tma:" + t for t in TMA_TILES]:
                jobs.append((path, os.path.join(WORK, "s%d-%s.gpuc" % (i, t.replace(":", "_"))), prec, "sm_90",
                             {"GPUC_INT8_WS": t.split(":")[0] if ":" in t else "1", "GPUC_INT8_WS_TILE": t.split(":")[-1]}))
                tags.append((tag, t))
# the BERT-like FFN block by default (no GPUC_INT8_GEMM) and with GPUC_INT8_WS=0
# and GPUC_INT8_ROW_DEQUANT=1 (the plan before both: the dequantizes in the
# row kernels, so neither GEMM has an epilogue, and both go to cuBLASLt)
FFN = os.path.join(WORK, "ffn.onnx")
make_ffn(FFN, 32, 128, 512, 2048, 300)
for v, env in (("ffn-default", {"GPUC_INT8_GEMM": None}),
               ("ffn-ws0", {"GPUC_INT8_GEMM": None, "GPUC_INT8_WS": "0", "GPUC_INT8_ROW_DEQUANT": "1"})):
    jobs.append((FFN, os.path.join(WORK, v + ".gpuc"), ["--fp16"], "sm_90", env))
    tags.append(("BERT-like FFN b32 s128 512-2048", v))
with ThreadPoolExecutor(max_workers=2) as ex:
    results = list(ex.map(compile_plan, jobs))

ptx = {}
for (tag, v), job, (rc, msg) in zip(tags, jobs, results):
    if rc:
        verdict(False, "%s %s: compile failed: %s" % (tag, v, msg))
        continue
    ptx[(tag, v)] = (job[1], plan_ptx(job[1]))

NEED = ["mbarrier.init", "mbarrier.try_wait.parity", "mbarrier.arrive", "cp.async.mbarrier.arrive.noinc",
        "fence.proxy.async", "wgmma.mma_async", "wgmma.wait_group", ".target sm_90a"]
# TMA: the loads are box copies counted on the full barrier, the maps 128-byte kernel parameters
NEED_TMA = ["mbarrier.init", "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx",
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes", ".param .align 64 .b8",
            "wgmma.mma_async", "wgmma.wait_group", ".target sm_90a"]

def shape_of(tag):
    return [int(x) for x in re.findall(r"[MKN](\d+)", tag)[:3]] if tag.startswith("M") else None


for (tag, v), (plan, text) in sorted(ptx.items()):
    dims = shape_of(tag)
    want = default_boxes(dims[1], dims[2]) if dims and v == "default" else None
    if want:
        boxes = plan_boxes(plan)
        verdict(boxes == want, "%s default: the TMA kernel with boxes of %s rows (Xq, Wq): %s" % (tag, want, boxes))
    if v in ("ws", "tma", "ffn-default") or v.split(":")[-1] in TILES or want:
        need = NEED_TMA if v.startswith("tma") or want or v == "ffn-default" else NEED
        missing = [s for s in need if s not in text]
        if v.startswith("tma") and "cp.async.mbarrier.arrive" in text:
            missing.append("(no cp.async producer)")
        kname, grid, block = int8_step(plan)
        verdict(not missing and kname is not None, "%s %s: the WS PTX has %s%s" %
                (tag, v, "all of " + ", ".join(need) if not missing else "NOT " + ", ".join(missing),
                 "" if kname else " (no int8 GEMM step in the plan)"))
        if not kname:
            continue
        p = plan + ".ptx"
        open(p, "w").write(text)
        rep, txt = ptxas_report(p, kname)
        if rep is None:
            verdict(False, "%s %s: ptxas: %s" % (tag, v, txt))
            continue
        stack, st, ld, regs = rep
        verdict(stack == 0 and st == 0 and ld == 0,
                "%s %s: ptxas sm_90a %s: %d registers, %d bytes stack, %d/%d bytes spilled; grid %s block %s" %
                (tag, v, kname, regs, stack, st, ld, grid, block))
for tag in sorted({t for t, _ in ptx}):
    dflt, ws0 = ptx.get((tag, "default")), ptx.get((tag, "ws0"))
    if ws0:
        verdict("mbarrier" not in ws0[1] and "wgmma.mma_async" in ws0[1],
                "%s: GPUC_INT8_WS=0: the wgmma kernel, no mbarrier in the PTX" % tag)
    dims = shape_of(tag)
    if dflt and ws0 and dims and not default_boxes(dims[1], dims[2]):
        verdict(dflt[1] == ws0[1], "%s: by default the same PTX as GPUC_INT8_WS=0 (the wgmma kernel)" % tag)
    a, b = ptx.get((tag, "ws-sm80")), ptx.get((tag, "off-sm80"))
    if a and b:
        verdict(a[1] == b[1] and "mbarrier" not in a[1], "%s: sm_80 with GPUC_INT8_WS=1: the PTX as without it" % tag)

def ffn_plan(v):
    """(int8 GEMM kernel steps, cuBLASLt int8 GEMMs, tensor maps, PTX) of the FFN plan v"""
    if ("BERT-like FFN b32 s128 512-2048", v) not in ptx:
        return None
    plan, text = ptx[("BERT-like FFN b32 s128 512-2048", v)]
    listing = subprocess.run([GPUC, "inspect", plan], capture_output=True, text=True).stdout
    return (len(re.findall(r"kernel k\d+_int8_gemm", listing)), len(re.findall(r"gemm int8", listing)),
            len(plan_boxes(plan)), text)


d, z = ffn_plan("ffn-default"), ffn_plan("ffn-ws0")
if d:
    verdict(d[0] == 2 and d[1] == 0 and d[2] == 4 and all(x in d[3] for x in NEED_TMA),
            "BERT-like FFN --int8 --fp16 sm_90 by default: %d int8 GEMMs gpuc's TMA kernel, %d cuBLASLt's, %d tensor "
            "maps (want 2, 0, 4), the TMA ring in the PTX" % d[:3])
if z:
    verdict(z[0] == 0 and z[1] == 2 and z[2] == 0 and "mbarrier" not in z[3],
            "BERT-like FFN with GPUC_INT8_WS=0 GPUC_INT8_ROW_DEQUANT=1: %d own GEMM kernels, %d cuBLASLt int8 GEMMs, %d tensor maps (want 0, 2, "
            "0), no mbarrier" % z[:3])
print("%d failed" % fails)
sys.exit(1 if fails else 0)
