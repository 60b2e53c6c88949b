#!/usr/bin/env python3
"""An Expand read by a broadcasting op (passes/dce.c, skip_expand) through
the CLI, on models written here with onnx.helper:
  gate:   Mul(X [2,8,4,4], Expand(G [2,8,1,1], [2,8,4,4]))  (timm's ECA gate)
          -> the Mul reads G, and -O2 leaves no Expand;
  widen:  Mul(X [2,8,1,1], Expand(G [1,8,1,1], [2,8,4,4])) -> the Expand
          sets the output shape, so it stays;
  shared: the Expand's output is also a graph output -> it stays, the Mul
          still skips it.
`gpuc run --cpu` at -O2 against numpy (1e-6) and `gpuc inspect -O2` for
the Expand count; each compiles for sm_90.
usage: expand_broadcast_test.py GPUC WORKDIR"""
import os, re, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(7)
F = TensorProto.FLOAT


def model(name, xs, gs, shape, expand_out=False):
    nodes = [helper.make_node("Expand", ["G", "shape"], ["E"], name="expand"),
             helper.make_node("Mul", ["X", "E"], ["Y"], name="mul")]
    outs = [helper.make_tensor_value_info("Y", F, None)]
    if expand_out:
        outs.append(helper.make_tensor_value_info("E", F, None))
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", F, xs),
                                        helper.make_tensor_value_info("G", F, gs)], outs,
                          [numpy_helper.from_array(np.array(shape, np.int64), "shape")])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


CASES = [("gate", [2, 8, 4, 4], [2, 8, 1, 1], [2, 8, 4, 4], False, 0),
         ("widen", [2, 8, 1, 1], [1, 8, 1, 1], [2, 8, 4, 4], False, 1),
         ("shared", [2, 8, 4, 4], [2, 8, 1, 1], [2, 8, 4, 4], True, 1)]
for name, xs, gs, shape, expand_out, want_expand in CASES:
    path = model(name, xs, gs, shape, expand_out)
    x = rng.standard_normal(xs).astype(np.float32)
    gt = rng.standard_normal(gs).astype(np.float32)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "g.npy"), gt)
    want = x * np.broadcast_to(gt, shape)
    out = os.path.join(work, "out_" + name)
    r = subprocess.run([gpuc, "run", path, "--cpu", "-O2", "--input", "X=" + os.path.join(work, "x.npy"),
                        "--input", "G=" + os.path.join(work, "g.npy"), "--out", out],
                       capture_output=True, text=True)
    check(r.returncode == 0, "%s: gpuc run --cpu exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))
    if r.returncode == 0:
        y = np.load(os.path.join(out, "Y.npy"))
        check(y.shape == want.shape and np.abs(y - want).max() <= 1e-6,
              "%s: Y %s differs from numpy" % (name, y.shape))
    r = subprocess.run([gpuc, "inspect", path, "-O2"], capture_output=True, text=True)
    m = re.search(r"^\s*Expand\s+(\d+)", r.stdout, re.M)
    n = int(m.group(1)) if m else 0
    check(r.returncode == 0 and n == want_expand, "%s: %d Expand nodes after -O2, want %d" % (name, n, want_expand))
    r = subprocess.run([gpuc, path, "-O2", "--arch", "sm_90", "-o", os.path.join(work, name + ".gpuc")],
                       capture_output=True, text=True)
    check(r.returncode == 0, "%s: compile sm_90 exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))

finish()
