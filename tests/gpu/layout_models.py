#!/usr/bin/env python3
"""Layout and fusion on models beyond ResNet-50/BERT (issue 11), on the GPU.

For each model (torchvision ConvNeXt-tiny, MobileNetV3-Large,
EfficientNet-B0; timm CoAtNet-0 and MaxViT-tiny; random weights, seeded,
BatchNorm statistics calibrated as in bench/torch_models.py): export with
the TorchScript exporter (dynamo=False, opset 17, dynamic batch), then per
batch (1 and 32):
  - fp16 -O2 plan, run on a fresh random input: PASS when its rel L2 to
    PyTorch fp32 is within max(2e-2, 2 x PyTorch fp16's own rel L2 to fp32);
  - at batch 1 also the fp32 -O2 plan (rel L2 < 1e-4 to PyTorch fp32, no
    TF32) and `gpuc run --cpu` (the reference, rel L2 < 1e-4);
  - the plan's step count and kinds (Transposes, conv bias kernels, GEMMs
    with an activation epilogue), gpuc bench's median beside
    torch.compile(mode="reduce-overhead") fp16 channels_last, and the
    plan's top steps from `gpuc bench --profile`.
usage: layout_models.py --gpuc build-gpu/gpuc --work DIR --out DIR [--models a,b] [--batches 1,32]
Prints PASS/FAIL lines; writes OUT/layout.json and OUT/profile_*.txt.
"""
import argparse, json, os, re, subprocess, sys, time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_models import calibrate_batchnorm, cuda_median_ms, rel_l2  # noqa: E402

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
SPEC = {"input": (3, 224, 224, "float")}


def log(*a):
    print(*a, flush=True)


def build(name):
    torch.manual_seed(0)
    if name in ("coatnet", "maxvit"):
        import timm
        m = timm.create_model("coatnet_0_rw_224" if name == "coatnet" else "maxvit_tiny_tf_224", pretrained=False)
    else:
        import torchvision
        m = getattr(torchvision.models, name)(weights=None)
    return calibrate_batchnorm(m.cuda(), SPEC).eval()


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def plan_summary(gpuc, plan):
    """steps, Transposes, conv bias kernels, GEMM epilogues from gpuc inspect"""
    _, s = run([gpuc, "inspect", plan])
    m = re.search(r"schedule \((\d+) steps", s)
    steps = [l for l in s.splitlines() if re.match(r"\s+\d+ (kernel|cudnn|cublasLt)", l)]
    return dict(steps=int(m.group(1)) if m else -1,
                transposes=sum("_Transpose " in l for l in steps),
                conv_bias=sum("_FusedConv " in l or "_Conv " in l for l in steps),
                gemm_act=sum("+bias+" in l for l in steps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="convnext_tiny,mobilenet_v3_large,efficientnet_b0,coatnet,maxvit")
    ap.add_argument("--batches", default="1,32")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    gpuc = os.path.abspath(a.gpuc)
    rows, failed = [], 0

    def verdict(ok, what):
        nonlocal failed
        failed += not ok
        log("%s %s" % ("PASS" if ok else "FAIL", what))

    for name in a.models.split(","):
        try:
            m = build(name)
        except Exception as ex:
            verdict(False, "%s: build: %s" % (name, str(ex).splitlines()[0][:200])); continue
        onnx = os.path.join(a.work, name + ".onnx")
        try:
            with torch.no_grad():
                torch.onnx.export(m, (torch.randn(2, 3, 224, 224, device="cuda"),), onnx, dynamo=False,
                                  input_names=["input"], output_names=["output"], opset_version=17,
                                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        except Exception as ex:
            verdict(False, "%s: export: %s" % (name, str(ex).splitlines()[0][:200])); continue
        half = build(name).half().to(memory_format=torch.channels_last)
        half.load_state_dict({k: v.half() if v.is_floating_point() else v for k, v in m.state_dict().items()})
        for batch in [int(b) for b in a.batches.split(",")]:
            row = dict(model=name, batch=batch)
            tag = "%s b%d" % (name, batch)
            x = np.random.default_rng(100 + batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
            xf = os.path.join(a.work, "%s_b%d_x.npy" % (name, batch))
            np.save(xf, x)
            shape = ["--shape", "input=%dx3x224x224" % batch]
            with torch.no_grad():
                tx = torch.from_numpy(x).cuda()
                ref = m(tx).float().cpu().numpy()
                tx16 = tx.half().to(memory_format=torch.channels_last)
                row["torch_fp16_rel_l2"] = rel_l2(half(tx16).float().cpu().numpy(), ref)
            plans = [("fp16", ["--fp16"])] + ([("fp32", [])] if batch == 1 else [])
            for kind, flags in plans:
                plan = os.path.join(a.work, "%s_b%d_%s.gpuc" % (name, batch, kind))
                rc, msg = run([gpuc, onnx, "-O2", "--arch", "native", "-o", plan] + shape + flags)
                if rc:
                    verdict(False, "%s %s: compile: %s" % (tag, kind, msg[-300:])); continue
                out = os.path.join(a.work, "out_%s_b%d_%s" % (name, batch, kind))
                rc, msg = run([gpuc, "run", plan, "--input", "input=" + xf, "--out", out])
                if rc:
                    verdict(False, "%s %s: run: %s" % (tag, kind, msg[-300:])); continue
                err = rel_l2(np.load(os.path.join(out, "output.npy")), ref)
                tol = max(2e-2, 2 * row["torch_fp16_rel_l2"]) if kind == "fp16" else 1e-4
                row["gpuc_%s_rel_l2" % kind] = err
                verdict(err <= tol, "%s %s: rel L2 %.3g vs PyTorch fp32 (tolerance %.3g)" % (tag, kind, err, tol))
                if kind == "fp16":
                    row.update(plan_summary(gpuc, plan))
                    med = run([gpuc, "bench", plan, "--iters", "100", "--warmup", "20"])[1]
                    mm = re.search(r"median ([0-9.]+) ms", med)
                    row["gpuc_fp16_ms"] = float(mm.group(1)) if mm else None
                    prof = run([gpuc, "bench", plan, "--iters", "20", "--profile"])[1]
                    with open(os.path.join(a.out, "profile_%s_b%d.txt" % (name, batch)), "w") as f:
                        f.write(prof + "\n")
                    table = [l for l in prof.splitlines() if re.match(r"\s+\d+\s+\S+\s+[0-9.]+\s+[0-9.]+%", l)]
                    table.sort(key=lambda l: -float(l.split()[2]))
                    row["top_steps"] = [l.strip()[:160] for l in table[:8]]
            if batch == 1:  # the CPU reference on the same input
                out = os.path.join(a.work, "cpu_%s" % name)
                rc, msg = run([gpuc, "run", onnx, "--cpu", "--input", "input=" + xf, "--out", out] + shape)
                if rc:
                    verdict(False, "%s cpu: %s" % (tag, msg[-300:]))
                else:
                    err = rel_l2(np.load(os.path.join(out, "output.npy")), ref)
                    row["cpu_rel_l2"] = err
                    verdict(err < 1e-4, "%s cpu reference: rel L2 %.3g vs PyTorch fp32" % (tag, err))
            log("%-22s steps %4s (Transposes %s, conv bias kernels %s, GEMM+act %s)  gpuc fp16 %s ms" % (
                tag, row.get("steps"), row.get("transposes"), row.get("conv_bias"), row.get("gemm_act"),
                row.get("gpuc_fp16_ms")))
            for l in row.get("top_steps", []):
                log("    " + l)
            try:
                with torch.no_grad():
                    comp = torch.compile(half, mode="reduce-overhead")
                    for _ in range(3):
                        comp(tx16)
                    torch.cuda.synchronize()
                    row["torch_compile_fp16_ms"] = cuda_median_ms(lambda: comp(tx16), iters=50)
                    del comp
                torch._dynamo.reset()
            except Exception as ex:
                row["torch_compile_error"] = str(ex).splitlines()[0][:200]
            log("%-22s gpuc fp16 %s ms  torch.compile(reduce-overhead) fp16 channels_last %s ms" % (
                tag, row.get("gpuc_fp16_ms"), "%.3f" % row["torch_compile_fp16_ms"]
                if "torch_compile_fp16_ms" in row else row.get("torch_compile_error")))
            rows.append(row)
            with open(os.path.join(a.out, "layout.json"), "w") as f:
                json.dump(rows, f, indent=1)
    log("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
