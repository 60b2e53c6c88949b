#!/usr/bin/env python3
"""Bundled models on the GPU against the CPU reference, on the GPU machine.

Each model is compiled -O2 in fp32 and fp16 (the fusion passes included),
run by `gpuc run` and by `gpuc run --cpu` on the same seeded random input,
and every output compared: relative L2 <= 1e-5 in fp32, <= 1e-2 in fp16.
Prints one line per model and precision (with how many of the plan's cuDNN
convolutions are NHWC: --fp16 runs 2-D convolutions channels-last), then
'N passed, N failed'. A fp16 plan of a model with convolutions and none
NHWC fails, except mobile_block (batch 1 with a depthwise convolution:
layout_nhwc keeps such a region NCHW, where it ran faster).

usage: bundled_vs_cpu.py GPUC MODELS_DIR WORKDIR
"""
import os, subprocess, sys

import numpy as np

MODELS = [("mlp.onnx", ["image=16x784"]), ("small_cnn.onnx", []), ("mobile_block.onnx", []),
          ("ffn_block.onnx", ["x=8x16x64"]), ("resnet18.onnx", ["input=2x3x224x224"]),
          ("resnet_block.onnx", []),
          # fused Attention kernels: 33 tokens (a partial query/key tile), D 16 and 32,
          # a [B,1,1,S] mask; then BERT-base's shape (B 2, H 12, S 128, D 64)
          ("attention.onnx", ["x=2x33x64", "mem=2x20x64", "mask=2x1x1x33"]),
          ("attention_bert.onnx", ["q=2x12x128x64", "k=2x12x128x64", "v=2x12x128x64", "mask=2x1x1x128"]),
          # kernel edge cases (D 128, full and rank-1 masks, D 7, one key)
          ("attention_shapes.onnx", []),
          # residual Add + LayerNormalization kernels: rows of 768 (one warp
          # per row), 2048 (one block), 16 (one thread), a broadcast scale
          ("add_layernorm.onnx", [])]
TOL = {"fp32": 1e-5, "fp16": 1e-2}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def rel(a, b):
    a = a.astype(np.float64).ravel(); b = b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    gpuc, models, work = sys.argv[1:4]
    passed = failed = 0
    for name, shapes in MODELS:
        path = os.path.join(models, name)
        if not os.path.exists(path):
            continue
        tag = name[:-5]
        sargs = sum((["--shape", s] for s in shapes), [])
        cpu = os.path.join(work, tag + "_cpu")
        rc, msg = run([gpuc, "run", path, "--cpu", "--out", cpu] + sargs)
        if rc:
            print("%s: CPU run failed: %s" % (tag, msg[-300:])); failed += 1; continue
        # inputs not given: both runs fill them from the same seed
        for prec, extra in (("fp32", []), ("fp16", ["--fp16"])):
            plan = os.path.join(work, "%s_%s.gpuc" % (tag, prec))
            out = os.path.join(work, "%s_%s" % (tag, prec))
            rc, msg = run([gpuc, path, "-O2", "-o", plan] + sargs + extra)
            if rc:
                print("%s %s: compile failed: %s" % (tag, prec, msg[-300:])); failed += 1; continue
            rc, msg = run([gpuc, "run", plan, "--out", out])
            if rc:
                print("%s %s: GPU run failed: %s" % (tag, prec, msg[-300:])); failed += 1; continue
            worst = 0.0
            for f in sorted(os.listdir(cpu)):
                c = np.load(os.path.join(cpu, f))
                gfile = os.path.join(out, f)
                if not os.path.exists(gfile):
                    worst = float("inf"); break
                worst = max(worst, rel(np.load(gfile), c))
            _, listing = run([gpuc, "inspect", plan])
            convs = listing.count("cudnn conv")
            nhwc = listing.count("cudnn conv2d nhwc")
            nchw_by_rule = name == "mobile_block.onnx"  # depthwise at batch 1 stays NCHW
            ok = worst <= TOL[prec] and not (prec == "fp16" and convs and not nhwc and not nchw_by_rule)
            passed += ok; failed += not ok
            print("%-14s %s rel L2 %.3g (tolerance %g), %d/%d convs NHWC %s" %
                  (tag, prec, worst, TOL[prec], nhwc, convs, "ok" if ok else "FAIL"))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
