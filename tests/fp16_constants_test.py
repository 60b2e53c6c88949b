#!/usr/bin/env python3
"""--fp16's constants (passes/fp16.c, half_constant) through the CLI, on a
model written here with onnx.helper: F.normalize as both PyTorch exporters
write it, X / Expand(Clip(ReduceL2(X), min=1e-12)) and X / Max(ReduceL2(X),
1e-12), over rows of which some are all zero (swin_v2_t's zero-padded
windows). In fp16 1e-12 rounds to 0, so a zero row would be 0 / 0 = NaN;
the pass keeps the epsilon at fp16's smallest subnormal. `gpuc run --cpu
--fp16` (the same transformed graph the GPU runs) must be finite and
within 2e-3 rel L2 of numpy's fp64 reading, with the zero rows exactly
zero; fp32 within 1e-6; each model compiles for sm_90 with --fp16.
usage: fp16_constants_test.py GPUC WORKDIR"""
import os, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(12)
R, D = 16, 32


def normalize_model(path, use_max):
    eps = numpy_helper.from_array(np.array(1e-12, np.float32), "eps")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    shape = numpy_helper.from_array(np.array([R, D], np.int64), "shape")
    nodes = [helper.make_node("ReduceL2", ["X", "axes"], ["n"], name="norm", keepdims=1)]
    if use_max:  # the dynamo exporter's clamp_min
        nodes.append(helper.make_node("Max", ["n", "eps"], ["c"], name="clamp"))
    else:        # TorchScript's Clip with a min input
        nodes.append(helper.make_node("Clip", ["n", "eps"], ["c"], name="clamp"))
    nodes += [helper.make_node("Expand", ["c", "shape"], ["e"], name="expand"),
              helper.make_node("Div", ["X", "e"], ["Y"], name="div")]
    g = helper.make_graph(nodes, "normalize",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [R, D])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [R, D])],
                          [eps, axes, shape])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


x = rng.standard_normal((R, D)).astype(np.float32)
x[[1, 5, 6, 15]] = 0  # zero rows, as padding leaves them
xp = os.path.join(work, "x.npy")
np.save(xp, x)
xd = x.astype(np.float64)
norm = np.sqrt((xd * xd).sum(-1, keepdims=True))
want = xd / np.maximum(norm, 1e-12)

for use_max in (False, True):
    name = "normalize_%s" % ("max" if use_max else "clip")
    path = os.path.join(work, name + ".onnx")
    normalize_model(path, use_max)
    for flags, tol in (([], 1e-6), (["--fp16"], 2e-3)):
        out = os.path.join(work, "out_%s_%d" % (name, len(flags)))
        r = subprocess.run([gpuc, "run", path, "--cpu", "--input", "X=" + xp, "--out", out] + flags,
                           capture_output=True, text=True)
        what = "%s %s" % (name, " ".join(flags) or "fp32")
        check(r.returncode == 0, "%s: gpuc run --cpu exit %d: %s" % (what, r.returncode, r.stderr.strip()[-300:]))
        if r.returncode:
            continue
        files = sorted(f for f in os.listdir(out) if f.endswith(".npy"))
        y = np.load(os.path.join(out, files[0])).astype(np.float64)
        check(np.isfinite(y).all(), "%s: %d non-finite outputs" % (what, int((~np.isfinite(y)).sum())))
        check(np.all(y[[1, 5, 6, 15]] == 0), "%s: zero rows are not zero" % what)
        e = np.linalg.norm(np.nan_to_num(y) - want) / np.linalg.norm(want)
        check(e <= tol, "%s: rel L2 %.3g > %.1g" % (what, e, tol))
    r = subprocess.run([gpuc, path, "-O2", "--fp16", "--arch", "sm_90", "-o", os.path.join(work, name + ".gpuc")],
                       capture_output=True, text=True)
    check(r.returncode == 0, "%s: compile --fp16 sm_90 exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))

finish()
