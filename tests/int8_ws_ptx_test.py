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
  - without the switch, and with GPUC_INT8_WS=0, the plan's PTX is the
    same text and has no mbarrier (the default kernel is untouched);
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


def compile_plan(job):
    path, plan, prec, arch, env = job
    e = dict(os.environ, GPUC_INT8_GEMM="own")
    e.pop("GPUC_INT8_WS", None)
    e.pop("GPUC_INT8_WS_TILE", None)
    e.update(env)
    r = subprocess.run([GPUC, path, "-O2", "--int8", "--arch", arch, "-o", plan] + prec, env=e,
                       capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr)[-600:]


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
            ("off", "sm_90", {}), ("ws0", "sm_90", {"GPUC_INT8_WS": "0"}),
            ("ws-sm80", "sm_80", {"GPUC_INT8_WS": "1"}), ("off-sm80", "sm_80", {})]
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
for (tag, v), (plan, text) in sorted(ptx.items()):
    if v in ("ws", "tma") or v.split(":")[-1] in TILES:
        need = NEED_TMA if v.startswith("tma") else NEED
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
    off, ws0 = ptx.get((tag, "off")), ptx.get((tag, "ws0"))
    if off and ws0:
        verdict(off[1] == ws0[1] and "mbarrier" not in off[1] and "wgmma.mma_async" in off[1],
                "%s: without the switch and with GPUC_INT8_WS=0 the same PTX, wgmma and no mbarrier" % tag)
    a, b = ptx.get((tag, "ws-sm80")), ptx.get((tag, "off-sm80"))
    if a and b:
        verdict(a[1] == b[1] and "mbarrier" not in a[1], "%s: sm_80 with GPUC_INT8_WS=1: the PTX as without it" % tag)
print("%d failed" % fails)
sys.exit(1 if fails else 0)
