#!/usr/bin/env python3
"""--prune (passes/prune.c) on the CPU reference and in compiled plans.

A small model with a MatMul+Add (Linear, weight [K,N]), a Gemm with transB=1
(weight [N,K]), a Conv and a MatMul whose weight sits behind a Transpose
(folded first). For l1:0.3 and 2:4:
  - `gpuc run --cpu --prune X` equals, bit for bit, `gpuc run --cpu` of the
    same model with the zeros written in here by numpy (independent code:
    torch's rules, argsort by |w| stable for l1, the two largest of each
    group of 4 along K for 2:4);
  - the compile summary reports each layer's sparsity (30.00% for l1:0.3,
    50.00% for 2:4) and the note that unstructured zeros are no speedup;
  - a --fp16 --prune 2:4 plan marks its sparse GEMMs 2:4 in `gpuc inspect`
    (a round trip through the plan writer and the validating reader).
Bad values (--prune 3:4, l1:1.5, l1:-0.1, foo) are usage errors (exit 2).
usage: prune_test.py GPUC WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from checks import check, finish

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)


def l1_ref(w, f):
    """torch.nn.utils.prune.l1_unstructured: round(f*n) smallest |w| to 0
    (Python round: halves to even); equal magnitudes: lower index first."""
    w = w.copy()
    flat = w.reshape(-1)
    k = round(f * flat.size)
    order = np.argsort(np.abs(flat.astype(np.float64)), kind="stable")
    flat[order[:k]] = 0
    return w


def prune24_ref(w, kaxis):
    """2:4 along axis kaxis of a 2-D w: per group of 4 keep the two largest
    magnitudes, the lower index on a tie."""
    w = w.copy()
    m = w if kaxis == 1 else w.T  # rows of m run along K; m is a view
    for r in range(m.shape[0]):
        for k0 in range(0, m.shape[1], 4):
            g = np.abs(m[r, k0:k0 + 4].astype(np.float64))
            keep = np.argsort(-g, kind="stable")[:2]
            for j in range(4):
                if j not in keep:
                    m[r, k0 + j] = 0
    return w


rng = np.random.default_rng(7)
B, K, N, C = 16, 32, 48, 3  # multiples of 16: 2:4 GEMMs need them
W1 = rng.standard_normal((K, N)).astype(np.float32)          # MatMul B [K,N]
b1 = rng.standard_normal((N,)).astype(np.float32)
W2 = rng.standard_normal((32, N)).astype(np.float32)         # Gemm transB=1: B [N2=32, K=N]
b2 = rng.standard_normal((32,)).astype(np.float32)
W2[0, :4] = [0.5, -0.5, 0.5, 0.25]                           # ties inside a 2:4 group
W3t = rng.standard_normal((16, 32)).astype(np.float32)       # behind a Transpose: MatMul B = W3t^T [32,16]
Wc = rng.standard_normal((4, C, 3, 3)).astype(np.float32)    # Conv
Wc[0, 0, 0, :] = [0.1, -0.1, 0.1]                            # ties for l1


def build(path, w1, w2, w3t, wc):
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "W1"), (b1, "b1"), (w2, "W2"), (b2, "b2"), (w3t, "W3t"), (wc, "Wc")]]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "b1"], ["h2"], name="fc1_bias"),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("Gemm", ["h3", "W2", "b2"], ["h4"], name="fc2", transB=1),
        helper.make_node("Transpose", ["W3t"], ["W3"], perm=[1, 0]),
        helper.make_node("MatMul", ["h4", "W3"], ["y"], name="fc3"),
        helper.make_node("Conv", ["img", "Wc"], ["z"], name="conv", pads=[1, 1, 1, 1]),
    ]
    g = helper.make_graph(nodes, "prune_test",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, K]),
                           helper.make_tensor_value_info("img", TensorProto.FLOAT, [2, C, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, 16]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4, 6, 6])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def run(*args):
    return subprocess.run([gpuc, *args], capture_output=True, text=True)


def outputs(model, outdir, *flags):
    r = run("run", model, "--cpu", "--input", "x=" + xin, "--input", "img=" + imgin, "--out", outdir, *flags)
    check(r.returncode == 0, f"gpuc run {model} {flags}: {r.stderr.strip()}")
    try:
        return [np.load(os.path.join(outdir, n + ".npy")) for n in ("y", "z")]
    except OSError:
        return [None, None]


dense = os.path.join(work, "dense.onnx")
build(dense, W1, W2, W3t, Wc)
xin, imgin = os.path.join(work, "x.npy"), os.path.join(work, "img.npy")
np.save(xin, rng.standard_normal((B, K)).astype(np.float32))
np.save(imgin, rng.standard_normal((2, C, 6, 6)).astype(np.float32))

cases = {
    "l1:0.3": (l1_ref(W1, 0.3), l1_ref(W2, 0.3), l1_ref(W3t, 0.3), l1_ref(Wc, 0.3)),
    # 2:4: Linear layers only; W3t [16,32] is W3^T, W3 [32,16] has K on axis 0,
    # so W3t's groups run along its rows (axis 1)
    "2:4": (prune24_ref(W1, 0), prune24_ref(W2, 1), prune24_ref(W3t, 1), Wc),
}
for flag, (p1, p2, p3, pc) in cases.items():
    tag = flag.replace(":", "_")
    zeros = os.path.join(work, f"zeros_{tag}.onnx")
    build(zeros, p1, p2, p3, pc)
    got = outputs(dense, os.path.join(work, "out_" + tag), "--prune", flag)
    want = outputs(zeros, os.path.join(work, "want_" + tag))
    for name, a, b in zip(("y", "z"), got, want):
        check(a is not None and b is not None and np.array_equal(a, b),
              f"--prune {flag}: output {name} differs from the graph with the zeros written in")
    dense_out = outputs(dense, os.path.join(work, "dense_" + tag))
    check(dense_out[0] is not None and got[0] is not None and not np.array_equal(dense_out[0], got[0]),
          f"--prune {flag}: y should differ from the dense model's")
    if flag == "2:4":
        check(dense_out[1] is not None and got[1] is not None and np.array_equal(dense_out[1], got[1]),
              "--prune 2:4 must leave convolutions dense")

    plan = os.path.join(work, f"p_{tag}.gpuc")
    r = run(dense, "--arch", "sm_90", "--prune", flag, "-o", plan, *(["--fp16"] if flag == "2:4" else []))
    check(r.returncode == 0, f"compile --prune {flag}: {r.stderr.strip()}")
    out = r.stdout
    sizes = {"fc1": W1.size, "fc2": W2.size, "fc3": W3t.size, "conv": Wc.size}
    for layer in ("fc1", "fc2", "fc3") + (("conv",) if flag == "l1:0.3" else ()):
        n = sizes[layer]
        z = round(0.3 * n) if flag == "l1:0.3" else n // 2  # torch's count: Python round
        want = f"{100 * z / n:.2f}% zeros ({z} of {n})"
        line = [l for l in out.splitlines() if l.strip().startswith(layer + " (")]
        check(len(line) == 1 and want in line[0], f"compile --prune {flag}: no '{want}' line for {layer}:\n{out}")
    if flag == "l1:0.3":
        check("no layer faster by themselves" in out, "l1 summary lacks the no-speedup note")
    else:
        check("2:4 GEMMs: 3 of" in out, f"compile --prune 2:4: want 3 sparse GEMMs:\n{out}")
        r = run("inspect", plan)
        marked = [l for l in r.stdout.splitlines() if "2:4" in l]
        check(r.returncode == 0 and len(marked) >= 3, f"inspect marks {len(marked)} steps 2:4, want 3:\n{r.stdout}")
        r = run("inspect", os.path.join(work, "p_l1_0.3.gpuc"))
        check(r.returncode == 0 and not [l for l in r.stdout.splitlines() if "2:4" in l and "gemm" in l.lower()],
              "an l1 plan must have no 2:4 GEMM")

# 2:4 counted on a fp32 plan: the GEMMs run dense (cuSPARSELt here is half only)
r = run(dense, "--arch", "sm_90", "--prune", "2:4", "-o", os.path.join(work, "p32.gpuc"))
check(r.returncode == 0 and "2:4 GEMMs: 0 of" in r.stdout, f"fp32 --prune 2:4 should run dense:\n{r.stdout}{r.stderr}")

for bad_value in ("3:4", "l1:1.5", "l1:-0.1", "foo", "l1:", "l1:nan", "2:4x"):
    for args in (["run", dense, "--cpu", "--prune", bad_value], [dense, "--arch", "sm_90", "--prune", bad_value]):
        r = run(*args)
        check(r.returncode == 2 and "--prune wants" in r.stderr, f"gpuc {' '.join(args)}: exit {r.returncode}, {r.stderr.strip()}")
r = run("run", dense, "--cpu", "--prune")
check(r.returncode == 2, "--prune without a value must be a usage error")

finish()
