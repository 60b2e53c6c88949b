#!/usr/bin/env python3
"""gpuc beside PyTorch on real models, in one run on the GPU machine.

For each model (ResNet-50, MobileNetV2, BERT-base; random weights, seeded):
export to ONNX with this machine's PyTorch, compile with gpuc, run gpuc and
PyTorch on the same fresh random input, print the relative L2 error, then
time gpuc (`gpuc bench`: CUDA-graph replays, CUDA events, median) and
PyTorch eager fp32/fp16 (CUDA events, median) in the same process run.

usage: torch_models.py --gpuc build/gpuc --work DIR --out DIR [--models a,b] [--quick] [--compile]
(--compile: torch.compile(mode="reduce-overhead") fp16 timed in the same run)
Writes OUT/models.json and OUT/models.md.
"""
import argparse, json, os, re, subprocess, sys, time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_models import cuda_median_ms  # noqa: E402  (shared with bench/zoo.py)

# fp32 means fp32 on both sides: no TF32 in PyTorch's convolutions/GEMMs
# (gpuc's fp32 plans use FMA math), so relative L2 can be held to 1e-4.
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False


def log(*a):
    print(*a, flush=True)


def calibrate_batchnorm(m, spec, batches=4, batch=32):
    """Random weights with BatchNorm's default running statistics (mean 0,
    var 1) let activations shrink layer after layer: in torchvision's
    MobileNetV2 they reach 1e-8 by the last block, below half precision's
    smallest subnormal (6e-8), so any fp16 run (PyTorch's too) returns
    zeros. A trained network's BatchNorm keeps activations near unit scale;
    running the model in train mode over a few random batches (cumulative
    average: momentum None) sets the statistics the same way, so the
    comparison measures arithmetic, not underflow."""
    bns = [x for x in m.modules() if isinstance(x, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return m
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    m.train()
    rng = np.random.default_rng(99)
    with torch.no_grad():
        for _ in range(batches):
            x = make_inputs(spec, batch, rng)
            m(*(torch.from_numpy(v).to(next(m.parameters()).device) for v in x.values()))
    return m.eval()


def build(name):
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50(weights=None)
        spec = {"input": (3, 224, 224, "float")}
        return calibrate_batchnorm(m.cuda(), spec), spec
    if name == "mobilenet_v2":
        import torchvision
        m = torchvision.models.mobilenet_v2(weights=None)
        spec = {"input": (3, 224, 224, "float")}
        return calibrate_batchnorm(m.cuda(), spec), spec
    if name == "bert":
        from transformers import BertConfig, BertModel
        m = BertModel(BertConfig(), add_pooling_layer=False)
        return m, {"input_ids": (128, "ids"), "attention_mask": (128, "mask")}
    raise SystemExit("unknown model " + name)


def make_inputs(spec, batch, rng):
    out = {}
    for k, v in spec.items():
        kind = v[-1]
        shape = (batch,) + tuple(v[:-1])
        if kind == "float":
            out[k] = rng.standard_normal(shape).astype(np.float32)
        elif kind == "ids":
            out[k] = rng.integers(0, 30522, size=shape).astype(np.int64)
        else:
            out[k] = np.ones(shape, dtype=np.int64)
    return out


class Wrap(torch.nn.Module):
    """BERT returns a ModelOutput; export its last_hidden_state only."""
    def __init__(self, m, bert):
        super().__init__()
        self.m, self.bert = m, bert

    def forward(self, *a):
        y = self.m(*a)
        return y.last_hidden_state if self.bert else y


def export(model, name, spec, path):
    names = list(spec)
    dummy = tuple(torch.from_numpy(v).cuda() for v in make_inputs(spec, 2, np.random.default_rng(1)).values())
    axes = {k: {0: "batch"} for k in names}
    axes["output"] = {0: "batch"}
    kw = dict(input_names=names, output_names=["output"], dynamic_axes=axes, opset_version=17)
    try:
        torch.onnx.export(model, dummy, path, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(model, dummy, path, **kw)


def rel_l2(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


OPT = "-O2"  # --opt: the level gpuc compiles at (-O3 autotunes on this GPU)


def gpuc_compile(gpuc, onnx, plan, spec, batch, extra):
    shapes = []
    for k, v in spec.items():
        dims = "x".join(str(d) for d in (batch,) + tuple(v[:-1]))
        shapes += ["--shape", "%s=%s" % (k, dims)]
    cmd = [gpuc, onnx, OPT, "-o", plan] + shapes + extra
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    log(r.stdout.strip() or r.stderr.strip())
    return r.returncode == 0, time.time() - t, (r.stdout + r.stderr).strip()


def gpuc_run(gpuc, plan, inputs, work):
    args = [gpuc, "run", plan, "--out", os.path.join(work, "gpuc_out")]
    for k, v in inputs.items():
        p = os.path.join(work, k + ".npy")
        np.save(p, v)
        args += ["--input", "%s=%s" % (k, p)]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip()
    return np.load(os.path.join(work, "gpuc_out", "output.npy")), ""


def gpuc_bench(gpuc, plan, iters):
    r = subprocess.run([gpuc, "bench", plan, "--iters", str(iters), "--warmup", "10"],
                       capture_output=True, text=True)
    m = re.search(r"median ([0-9.]+) ms", r.stdout)
    mem = re.search(r"device memory: (\d+)", r.stdout)
    return (float(m.group(1)) if m else None), (int(mem.group(1)) if mem else None), (r.stdout + r.stderr).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert")
    ap.add_argument("--quick", action="store_true", help="batch 1 only, fewer iterations")
    ap.add_argument("--compile", action="store_true", help="also torch.compile(mode='reduce-overhead') fp16")
    ap.add_argument("--opt", default="-O2", choices=["-O1", "-O2", "-O3"], help="gpuc's level")
    a = ap.parse_args()
    global OPT
    OPT = a.opt
    os.makedirs(a.work, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        log("==", name)
        model, spec = build(name)
        model = model.cuda().eval()
        wrapped = Wrap(model, name == "bert").eval()
        onnx = os.path.join(a.work, name + ".onnx")
        try:
            with torch.no_grad():
                export(wrapped, name, spec, onnx)
        except Exception as ex:  # report, go on with the next model
            rows.append(dict(model=name, error="export failed: %s" % ex))
            continue
        batches = [1] if a.quick else ([1, 256] if name != "bert" else [1, 32])
        for batch in batches:
            row = dict(model=name, batch=batch)
            plan = os.path.join(a.work, "%s_b%d.gpuc" % (name, batch))
            plan16 = os.path.join(a.work, "%s_b%d_fp16.gpuc" % (name, batch))
            ok, secs, msg = gpuc_compile(a.gpuc, onnx, plan, spec, batch, [])
            ok16, secs16, msg16 = gpuc_compile(a.gpuc, onnx, plan16, spec, batch, ["--fp16"])
            row["compile_s"] = round(secs, 2)
            inputs = make_inputs(spec, batch, np.random.default_rng(1234 + batch))
            with torch.no_grad():
                tin = tuple(torch.from_numpy(v).cuda() for v in inputs.values())
                ref = wrapped(*tin).float().cpu().numpy()
                row["torch_fp32_ms"] = cuda_median_ms(lambda: wrapped(*tin), iters=20 if a.quick else 50)
                half = Wrap(build(name)[0].cuda().eval().half(), name == "bert").eval()
                half.load_state_dict({k: v.half() if v.is_floating_point() else v for k, v in wrapped.state_dict().items()})
                tin16 = tuple(t.half() if t.is_floating_point() else t for t in tin)
                # what half precision itself costs: PyTorch fp16 against PyTorch fp32
                ref16 = half(*tin16).float().cpu().numpy()
                row["rel_l2_torch_fp16"] = rel_l2(ref16, ref)
                # the model's conditioning: fp32 arithmetic on the input rounded
                # to half moves the output this much (no fp16 run can do better)
                tin_r = tuple(t.half().float() if t.is_floating_point() else t for t in tin)
                row["rel_l2_input_rounding"] = rel_l2(wrapped(*tin_r).float().cpu().numpy(), ref)
                row["torch_fp16_ms"] = cuda_median_ms(lambda: half(*tin16), iters=20 if a.quick else 50)
                # PyTorch eager fp16's peak: weights + the most activations live at once (the issue's
                # memory target compares gpuc's plan against it)
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()  # also holds the fp32 model: counted out
                half(*tin16)
                torch.cuda.synchronize()
                own = sum(t.numel() * t.element_size() for t in list(half.parameters()) + list(half.buffers()))
                own += sum(t.numel() * t.element_size() for t in tin16)
                row["torch_fp16_peak_bytes"] = torch.cuda.max_memory_allocated() - base + own
                if a.compile:  # the baseline: torch.compile(mode="reduce-overhead") fp16
                    try:
                        t0 = time.time()
                        comp = torch.compile(half, mode="reduce-overhead")
                        for _ in range(3):
                            comp(*tin16)
                        torch.cuda.synchronize()
                        row["torch_compile_s"] = round(time.time() - t0, 1)
                        row["torch_compile_fp16_ms"] = cuda_median_ms(lambda: comp(*tin16), iters=50)
                        del comp
                    except Exception as ex:  # report, go on
                        row["torch_compile_error"] = str(ex).splitlines()[0][:200]
                del half
            if not ok:
                row["error"] = "gpuc compile failed: " + msg.splitlines()[-1][:300]
                rows.append(row)
                continue
            out, err = gpuc_run(a.gpuc, plan, inputs, a.work)
            if out is None:
                row["error"] = "gpuc run failed: " + err[:300]
                rows.append(row)
                continue
            row["rel_l2_fp32"] = rel_l2(out, ref)
            ms, mem, bmsg = gpuc_bench(a.gpuc, plan, 20 if a.quick else 100)
            row["gpuc_fp32_ms"] = ms
            row["gpuc_device_bytes"] = mem
            if ok16:
                out16, err16 = gpuc_run(a.gpuc, plan16, inputs, a.work)
                if out16 is not None:
                    row["rel_l2_fp16"] = rel_l2(out16, ref)
                    row["rel_l2_fp16_vs_torch_fp16"] = rel_l2(out16, ref16)
                    row["gpuc_fp16_ms"], row["gpuc_fp16_device_bytes"], _ = gpuc_bench(a.gpuc, plan16, 20 if a.quick else 100)
                else:
                    row["fp16_error"] = err16[:300]
            else:
                row["fp16_error"] = msg16.splitlines()[-1][:300] if msg16 else "compile failed"
            log(json.dumps(row))
            rows.append(row)
            torch.cuda.empty_cache()
    with open(os.path.join(a.out, "models.json"), "a") as f:
        json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    lines = ["| model | batch | rel L2 fp32 | rel L2 fp16 | PyTorch fp16 rel L2 | input rounding floor | gpuc %s fp32 ms | gpuc %s --fp16 ms | PyTorch eager fp32 ms | PyTorch eager fp16 ms | torch.compile fp16 ms | note |" % (OPT, OPT),
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        f = lambda k, fmt="%.3f": (fmt % r[k]) if r.get(k) is not None else "-"
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r.get("batch", "-"), f("rel_l2_fp32", "%.2e"), f("rel_l2_fp16", "%.2e"),
            f("rel_l2_torch_fp16", "%.2e"), f("rel_l2_input_rounding", "%.2e"),
            f("gpuc_fp32_ms"), f("gpuc_fp16_ms"), f("torch_fp32_ms"), f("torch_fp16_ms"),
            f("torch_compile_fp16_ms"),
            (r.get("error", "") + " " + r.get("fp16_error", "") + " " + r.get("torch_compile_error", "")).strip()))
    with open(os.path.join(a.out, "models.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log("\n".join(lines))


if __name__ == "__main__":
    main()
