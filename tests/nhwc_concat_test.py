#!/usr/bin/env python3
"""Concat and AveragePool inside an NHWC region (passes/layout_nhwc.c,
concat_channels, pool2d) through the CLI, on models written here with
onnx.helper:
  channels: two conv+Relu branches of X [2,8,12,12], Concat(axis=1 or -3),
            a conv -> -O2 --fp16 keeps one region: 2 Transposes (the input
            in, the output out), none around the Concat;
  height:   the same with Concat(axis=2) -> the Concat ends the region:
            more Transposes;
  avgpool:  conv, AveragePool (3x3 stride 2, pads, ceil_mode, with and
            without count_include_pad), conv -> one region, 2 Transposes;
  eca:      ECA's ReduceMean over (2, 3) without keepdims -> a
            GlobalAveragePool + Reshape, no ReduceMean left;
  grn:      ConvNeXt V2's GRN (ReduceL2 over H, W, ReduceMean over C) ->
            both stay in the region, the ReduceL2 reading half (no f32
            copy of the activation).
`gpuc run --cpu -O2 --fp16` (the NHWC graph on the reference) against the
fp32 reference: rel L2 <= 5e-3; each compiles for sm_90 with --fp16.
usage: nhwc_concat_test.py GPUC WORKDIR"""
import os, re, subprocess, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from checks import check, finish

gpuc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(3)
F = TensorProto.FLOAT


def model(name, axis):
    w1 = (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((10, 8, 1, 1)) * 0.3).astype(np.float32)
    w3 = (rng.standard_normal((4, 16 if axis in (1, -3) else 6, 3, 3)) * 0.2).astype(np.float32)
    if axis not in (1, -3):
        w2 = (rng.standard_normal((6, 8, 1, 1)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["X", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="r1"),
             helper.make_node("Conv", ["X", "w2"], ["b"], name="c2"),
             helper.make_node("Relu", ["b"], ["br"], name="r2"),
             helper.make_node("Concat", ["ar", "br"], ["cat"], name="cat", axis=axis),
             helper.make_node("Conv", ["cat", "w3"], ["Y"], name="c3", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", F, [2, 8, 12, 12])],
                          [helper.make_tensor_value_info("Y", F, None)],
                          [numpy_helper.from_array(w, n) for n, w in (("w1", w1), ("w2", w2), ("w3", w3))])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def avgpool_model(name, include_pad):
    w1 = (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((4, 6, 1, 1)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["X", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["a"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=include_pad),
             helper.make_node("Conv", ["p", "w2"], ["Y"], name="c2")]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", F, [2, 8, 12, 12])],
                          [helper.make_tensor_value_info("Y", F, None)],
                          [numpy_helper.from_array(w, n) for n, w in (("w1", w1), ("w2", w2))])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def eca_model(name):
    """ECA (eca_nfnet): a = conv(X); gate = Sigmoid(Conv1d(mean(a, (2, 3)) without keepdims as [N,1,C]));
    Y = conv(a * gate[N,C,1,1])"""
    w1 = (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32)
    wg = (rng.standard_normal((1, 1, 3)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((4, 6, 1, 1)) * 0.3).astype(np.float32)
    i64 = lambda v: numpy_helper.from_array(np.array(v, np.int64), "s%d" % len(v))
    nodes = [helper.make_node("Conv", ["X", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["a"], ["m"], name="mean", axes=[2, 3], keepdims=0),
             helper.make_node("Reshape", ["m", "s3"], ["m3"], name="view"),
             helper.make_node("Conv", ["m3", "wg"], ["g1"], name="gate_conv", pads=[1, 1]),
             helper.make_node("Sigmoid", ["g1"], ["g2"], name="gate"),
             helper.make_node("Reshape", ["g2", "s4"], ["g4"], name="view4"),
             helper.make_node("Mul", ["a", "g4"], ["b"], name="scale"),
             helper.make_node("Conv", ["b", "w2"], ["Y"], name="c2")]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", F, [2, 8, 12, 12])],
                          [helper.make_tensor_value_info("Y", F, None)],
                          [numpy_helper.from_array(w, n) for n, w in (("w1", w1), ("wg", wg), ("w2", w2))] +
                          [i64([2, 1, 6]), i64([2, 6, 1, 1])])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def grn_model(name):
    """ConvNeXt V2's GRN on NCHW (timm, conv_mlp): g = ReduceL2(a, (2, 3)), n = g / (ReduceMean(g, 1) + eps),
    b = a + beta + gamma * (a * n); then a conv"""
    w1 = (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((4, 6, 1, 1)) * 0.3).astype(np.float32)
    gamma = (rng.standard_normal((1, 6, 1, 1)) * 0.5).astype(np.float32)
    beta = (rng.standard_normal((1, 6, 1, 1)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["X", "w1"], ["a0"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a0"], ["a"], name="act"),
             helper.make_node("ReduceL2", ["a"], ["g"], name="l2", axes=[2, 3], keepdims=1),
             helper.make_node("ReduceMean", ["g"], ["m"], name="mean", axes=[1], keepdims=1),
             helper.make_node("Add", ["m", "eps"], ["me"], name="add_eps"),
             helper.make_node("Div", ["g", "me"], ["n"], name="div"),
             helper.make_node("Mul", ["a", "n"], ["an"], name="mul"),
             helper.make_node("Mul", ["gamma", "an"], ["ga"], name="mul_gamma"),
             helper.make_node("Add", ["beta", "ga"], ["gb"], name="add_beta"),
             helper.make_node("Add", ["a", "gb"], ["b"], name="residual"),
             helper.make_node("Conv", ["b", "w2"], ["Y"], name="c2")]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", F, [2, 8, 12, 12])],
                          [helper.make_tensor_value_info("Y", F, None)],
                          [numpy_helper.from_array(w, n) for n, w in (("w1", w1), ("w2", w2), ("gamma", gamma),
                                                                     ("beta", beta))] +
                          [numpy_helper.from_array(np.array(1e-6, np.float32), "eps")])
    path = os.path.join(work, name + ".onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
xp = os.path.join(work, "x.npy")
np.save(xp, x)


def run(path, flags, tag):
    out = os.path.join(work, "out_" + tag)
    r = subprocess.run([gpuc, "run", path, "--cpu", "--input", "X=" + xp, "--out", out] + flags,
                       capture_output=True, text=True)
    check(r.returncode == 0, "%s: gpuc run --cpu %s exit %d: %s" % (tag, " ".join(flags), r.returncode,
                                                                   r.stderr.strip()[-300:]))
    return np.load(os.path.join(out, "Y.npy")).astype(np.float64) if r.returncode == 0 else None


CASES = [("channels", lambda: model("channels", 1), True),
         ("channels_neg", lambda: model("channels_neg", -3), True),
         ("height", lambda: model("height", 2), False),
         ("avgpool_pad", lambda: avgpool_model("avgpool_pad", 1), True),
         ("avgpool_nopad", lambda: avgpool_model("avgpool_nopad", 0), True)]
for name, make, in_region in CASES:
    path = make()
    ref = run(path, [], name + "_fp32")
    got = run(path, ["-O2", "--fp16"], name + "_fp16")
    if ref is not None and got is not None:
        e = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        check(np.isfinite(got).all() and e <= 5e-3, "%s: -O2 --fp16 rel L2 %.3g vs fp32 (<= 5e-3)" % (name, e))
    r = subprocess.run([gpuc, "inspect", path, "-O2", "--fp16"], capture_output=True, text=True)
    m = re.search(r"^\s*Transpose\s+(\d+)", r.stdout, re.M)
    nt = int(m.group(1)) if m else 0
    if in_region:
        check(r.returncode == 0 and nt == 2, "%s: %d Transposes at -O2 --fp16, want 2 (in and out)" % (name, nt))
    else:
        check(r.returncode == 0 and nt > 2, "%s: %d Transposes at -O2 --fp16, want more than 2" % (name, nt))
    r = subprocess.run([gpuc, path, "-O2", "--fp16", "--arch", "sm_90", "-o", os.path.join(work, name + ".gpuc")],
                       capture_output=True, text=True)
    check(r.returncode == 0, "%s: compile --fp16 sm_90 exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))

# ECA's pool without keepdims becomes a GlobalAveragePool (+ Reshape) inside
# the region: no ReduceMean left, so no fp32 island and no Transpose of the
# whole [2,6,12,12] value out of the region for it
path = eca_model("eca")
ref = run(path, [], "eca_fp32")
got = run(path, ["-O2", "--fp16"], "eca_fp16")
if ref is not None and got is not None:
    e = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    check(np.isfinite(got).all() and e <= 5e-3, "eca: -O2 --fp16 rel L2 %.3g vs fp32 (<= 5e-3)" % e)
r = subprocess.run([gpuc, "inspect", path, "-O2", "--fp16"], capture_output=True, text=True)
counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\s+(\d+)", r.stdout, re.M)}
check(r.returncode == 0 and counts.get("ReduceMean", 0) == 0 and counts.get("GlobalAveragePool", 0) == 1,
      "eca: -O2 --fp16 has %d ReduceMean, %d GlobalAveragePool (want 0, 1)" %
      (counts.get("ReduceMean", 0), counts.get("GlobalAveragePool", 0)))
r = subprocess.run([gpuc, path, "-O2", "--fp16", "--arch", "sm_90", "-o", os.path.join(work, "eca.gpuc")],
                   capture_output=True, text=True)
check(r.returncode == 0, "eca: compile --fp16 sm_90 exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))

# GRN's reductions stay inside the region (their axes moved to NHWC), and
# the fp32 island of ReduceL2 reads the half activation itself: 2
# Transposes, no f32 copy of the [2,12,12,6] activation
path = grn_model("grn")
ref = run(path, [], "grn_fp32")
got = run(path, ["-O2", "--fp16"], "grn_fp16")
if ref is not None and got is not None:
    e = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    check(np.isfinite(got).all() and e <= 5e-3, "grn: -O2 --fp16 rel L2 %.3g vs fp32 (<= 5e-3)" % e)
r = subprocess.run([gpuc, "inspect", path, "-O2", "--fp16"], capture_output=True, text=True)
m = re.search(r"^\s*Transpose\s+(\d+)", r.stdout, re.M)
nt = int(m.group(1)) if m else 0
check(r.returncode == 0 and nt == 2, "grn: %d Transposes at -O2 --fp16, want 2 (in and out)" % nt)
r = subprocess.run([gpuc, "inspect", path, "-O2", "--fp16", "--dump"], capture_output=True, text=True)
big = re.findall(r"%\d+:f32\[2,(?:12,12,6|6,12,12)\]", r.stdout)
check(r.returncode == 0 and not big and "gpuc_out_f32=1" in r.stdout,
      "grn: %d f32 copies of the activation at -O2 --fp16 (want 0, the ReduceL2 reading half)" % len(big))
r = subprocess.run([gpuc, path, "-O2", "--fp16", "--arch", "sm_90", "-o", os.path.join(work, "grn.gpuc")],
                   capture_output=True, text=True)
check(r.returncode == 0, "grn: compile --fp16 sm_90 exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))

finish()
