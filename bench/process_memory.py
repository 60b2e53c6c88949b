#!/usr/bin/env python3
"""Device memory as nvidia-smi sees it: gpuc's fp16 plan beside PyTorch
eager fp16, each in a fresh process of its own on an otherwise idle GPU.

The number is the GPU's total - free (cuMemGetInfo / torch.cuda.mem_get_info)
after the model has run: the process's CUDA context, the libraries it loaded
(cuDNN, cuBLAS/cuBLASLt), their workspaces, the caching allocator's reserve
(PyTorch) or the plan's arena + workspace + weights (gpuc). Also printed: an
idle PyTorch process (context and CUDA runtime only), so the context's share
can be taken out by hand.

Run after bench/torch_models.py, which leaves the fp16 plans in WORK:
usage: process_memory.py --gpuc build/gpuc --work DIR --out DIR [--cases resnet50:1,...]
Writes OUT/process_memory.json and prints a table.
"""
import argparse, json, os, re, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_child(name, batch):
    """In the child: PyTorch eager fp16, 20 forwards, then the GPU's used bytes."""
    import numpy as np
    import torch
    sys.path.insert(0, HERE)
    import torch_models as tm
    if name == "idle":
        torch.zeros(1, device="cuda")
    else:
        model, spec = tm.build(name)
        half = tm.Wrap(model.cuda().eval().half(), name == "bert").eval()
        ins = tm.make_inputs(spec, batch, np.random.default_rng(7))
        tin = tuple(torch.from_numpy(v).cuda() for v in ins.values())
        tin = tuple(t.half() if t.is_floating_point() else t for t in tin)
        # building ran fp32 (BatchNorm calibration): give its cached blocks back,
        # so what remains is the fp16 model, its input and what inference takes
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            for _ in range(20):
                half(*tin)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    print(json.dumps(dict(used=total - free, reserved=torch.cuda.max_memory_reserved(),
                          allocated=torch.cuda.max_memory_allocated())))


def run_torch(name, batch):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "%s:%d" % (name, batch)],
                       capture_output=True, text=True)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else dict(error=(r.stderr.strip().splitlines() or ["?"])[-1])


def run_gpuc(gpuc, plan):
    r = subprocess.run([gpuc, "bench", plan, "--iters", "20", "--warmup", "5"], capture_output=True, text=True)
    used = re.search(r"GPU memory in use: (\d+)", r.stdout)
    plan_bytes = re.search(r"device memory: (\d+)", r.stdout)
    if not used:
        return dict(error=(r.stderr.strip().splitlines() or ["?"])[-1])
    return dict(used=int(used.group(1)), plan=int(plan_bytes.group(1)) if plan_bytes else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--gpuc")
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--cases", default="resnet50:1,resnet50:256,bert:1,bert:32")
    a = ap.parse_args()
    if a.child:
        name, batch = a.child.split(":")
        return torch_child(name, int(batch))
    rows = [dict(case="idle PyTorch process", torch=run_torch("idle", 1))]
    for case in a.cases.split(","):
        name, batch = case.split(":")
        plan = os.path.join(a.work, "%s_b%s_fp16.gpuc" % (name, batch))
        rows.append(dict(case=case, gpuc=run_gpuc(a.gpuc, plan) if os.path.exists(plan) else dict(error="no plan"),
                         torch=run_torch(name, int(batch))))
        print(json.dumps(rows[-1]), flush=True)
    mib = lambda d, k: "%.0f" % (d[k] / 2**20) if d.get(k) is not None else "-"
    print("| case | gpuc GPU used MiB | gpuc plan MiB | PyTorch GPU used MiB | PyTorch reserved MiB | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        g, t = r.get("gpuc", {}), r["torch"]
        ratio = "%.2f" % (g["used"] / t["used"]) if g.get("used") and t.get("used") else "-"
        print("| %s | %s | %s | %s | %s | %s |" % (r["case"], mib(g, "used"), mib(g, "plan"), mib(t, "used"),
                                                  mib(t, "reserved"), ratio))
    with open(os.path.join(a.out, "process_memory.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
