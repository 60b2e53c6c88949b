#!/usr/bin/env python3
"""Find the first value where a gpuc --fp16 plan departs from its fp32 plan.

Every float intermediate of MODEL becomes a graph output (shape inference
gives the types), the model is compiled -O2 in fp32 and fp16, both run on
the same random input, and each value's relative L2 (fp16 vs fp32) is
printed in graph order. Fusion stops at values that are outputs, so this
also separates "wrong in a kernel" from "wrong in a fused pattern": the
whole-model errors at -O0/-O1/-O2 are printed first.

usage: bisect_fp16.py GPUC MODEL.onnx WORKDIR NAME=DIMS [NAME=DIMS...]
"""
import os, subprocess, sys

import numpy as np
import onnx
from onnx import shape_inference


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print("FAILED:", " ".join(cmd), "\n", (r.stdout + r.stderr)[-2000:])
    return r.returncode == 0


def rel(a, b):
    a = a.astype(np.float64).ravel(); b = b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    gpuc, model, work = sys.argv[1:4]
    shapes = sys.argv[4:]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(7)
    args = []
    for s in shapes:
        name, dims = s.split("=")
        x = rng.standard_normal([int(d) for d in dims.split("x")]).astype(np.float32)
        np.save(os.path.join(work, name + ".npy"), x)
        args += ["--input", "%s=%s" % (name, os.path.join(work, name + ".npy"))]
    shape_args = sum((["--shape", s] for s in shapes), [])

    def plan_out(m, tag, extra):
        plan = os.path.join(work, tag + ".gpuc")
        out = os.path.join(work, tag)
        if not run([gpuc, m, "-o", plan] + shape_args + extra):
            return None
        if not run([gpuc, "run", plan, "--out", out] + args):
            return None
        return out

    # 1. the whole model at each level
    outname = onnx.load(model, load_external_data=False).graph.output[0].name
    ref = plan_out(model, "whole_f32", ["-O2"])
    for lvl in ["-O0", "-O1", "-O2"]:
        o = plan_out(model, "whole_f16" + lvl, [lvl, "--fp16"])
        if ref and o:
            print("whole model %s --fp16 vs fp32: rel L2 %.3g" % (
                lvl, rel(np.load(os.path.join(o, outname + ".npy")), np.load(os.path.join(ref, outname + ".npy")))))

    # 2. every float intermediate as an output
    m = shape_inference.infer_shapes(onnx.load(model))
    have = {o.name for o in m.graph.output}
    order = []
    for vi in m.graph.value_info:
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and vi.name not in have:
            m.graph.output.append(vi)
            order.append(vi.name)
    node_of = {}
    for n in m.graph.node:
        for o in n.output:
            node_of[o] = "%s(%s)" % (n.op_type, n.name)
    all_path = os.path.join(work, "all_outputs.onnx")
    onnx.save(m, all_path)
    a32 = plan_out(all_path, "all_f32", ["-O2"])
    a16 = plan_out(all_path, "all_f16", ["-O2", "--fp16"])
    if not (a32 and a16):
        return 1
    files = {f[:-4] for f in os.listdir(a32) if f.endswith(".npy")}
    first = None
    # graph order of producers
    for n in m.graph.node:
        for o in n.output:
            fn = o.replace("/", "_")
            cand = [f for f in files if f == o or f == fn]
            if not cand:
                continue
            x32 = np.load(os.path.join(a32, cand[0] + ".npy"))
            try:
                x16 = np.load(os.path.join(a16, cand[0] + ".npy"))
            except OSError:
                continue
            r = rel(x16, x32)
            flag = ""
            if r > 1e-2 and first is None:
                first = o
                flag = "   <== first > 1e-2"
            print("%-40s %-40s rel %.3g max|32| %.3g max|16| %.3g%s" % (
                o[:40], node_of.get(o, "?")[:40], r, float(np.abs(x32).max()),
                float(np.abs(x16.astype(np.float32)).max()), flag))
    print("first departing value:", first)
    return 0


if __name__ == "__main__":
    sys.exit(main())
