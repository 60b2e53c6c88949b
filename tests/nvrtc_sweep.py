#!/usr/bin/env python3
"""Compile every in-scope ONNX conformance model and the bundled models with
gpuc for several target archs, with NVRTC and no GPU, so every kernel
template the code generator emits is compiled in CI.

A model whose shapes are not static without its test inputs, or that uses
an op without a GPU lowering, is a skip; an NVRTC failure, a crash or a
timeout is a failure. Prints 'N passed, N failed, N skipped'.

usage: nvrtc_sweep.py GPUC OP_TYPES MODELS_DIR [--archs sm_80,...] [--data DIR]
"""
import argparse, concurrent.futures as cf, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(__file__))
from conformance import SUITES, op_types  # noqa: E402


def compile_one(gpuc, model, arch, extra, out_dir):
    plan = os.path.join(out_dir, "p_%d.gpuc" % abs(hash((model, arch, tuple(extra)))))
    try:
        r = subprocess.run([gpuc, model, "--arch", arch, "-o", plan] + extra,
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "fail", "timeout"
    if os.path.exists(plan):
        os.unlink(plan)
    msg = (r.stdout + r.stderr).strip().splitlines()
    last = msg[-1] if msg else ""
    if r.returncode == 0:
        return "pass", ""
    if r.returncode != 1 or "NVRTC" in last or "internal error" in last:
        return "fail", last[:300]
    return "skip", last[:200]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpuc")
    ap.add_argument("op_types")
    ap.add_argument("models")
    ap.add_argument("--archs", default="sm_80,sm_89,sm_90,sm_120")
    ap.add_argument("--data", default="/usr/share/libonnx-testdata/data")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--suites", default=",".join(SUITES), help="folders of --data to compile")
    ap.add_argument("--no-bundled", action="store_true", help="only the --data models")
    ap.add_argument("--fp16-too", action="store_true", help="compile the --data models with --fp16 too")
    a = ap.parse_args()
    jobs = []
    archs = a.archs.split(",")
    bundled = [("mlp.onnx", ["--shape", "image=8x784"]), ("small_cnn.onnx", []),
               ("resnet18.onnx", ["--shape", "input=1x3x224x224"]),
               ("resnet50.onnx", ["--shape", "input=1x3x224x224"]),
               ("ffn_block.onnx", ["--shape", "x=4x16x64"]), ("mobile_block.onnx", []),
               ("resnet_block.onnx", []),  # --fp16: NHWC convolutions and their Transposes
               ("attention.onnx", ["--shape", "x=2x33x64", "--shape", "mem=2x20x64",
                                   "--shape", "mask=2x1x1x33"]),
               ("attention_bert.onnx", ["--shape", "q=2x12x128x64", "--shape", "k=2x12x128x64",
                                        "--shape", "v=2x12x128x64", "--shape", "mask=2x1x1x128"]),
               ("attention_shapes.onnx", []),
               ("add_layernorm.onnx", [])]  # AddLayerNormalization: warp, block, thread rows
    for arch in [] if a.no_bundled else archs:
        for m, extra in bundled:
            for half in ([], ["--fp16"], ["--bf16"]):
                jobs.append((os.path.join(a.models, m), arch, extra + half, True))
    for s in a.suites.split(","):
        root = os.path.join(a.data, s)
        for t in sorted(os.listdir(root)):
            model = os.path.join(root, t, "model.onnx")
            ops = op_types(a.op_types, model) if os.path.isfile(model) else None
            if not ops or not all(ok for ok, _ in ops):
                continue
            for arch in archs:
                for extra in ([], ["--fp16"]) if a.fp16_too else ([],):
                    jobs.append((model, arch, extra, False))
    tmp = tempfile.mkdtemp()
    counts = {"pass": 0, "fail": 0, "skip": 0}
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        futs = {ex.submit(compile_one, a.gpuc, m, arch, extra, tmp): (m, arch, extra, must)
                for m, arch, extra, must in jobs}
        for f in cf.as_completed(futs):
            m, arch, extra, must = futs[f]
            status, why = f.result()
            if must and status != "pass":  # the bundled models must compile
                status = "fail"
            counts[status] += 1
            if status == "fail":
                print("FAIL %s %s %s: %s" % (m, arch, " ".join(extra), why))
    print("%d passed, %d failed, %d skipped" % (counts["pass"], counts["fail"], counts["skip"]))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
