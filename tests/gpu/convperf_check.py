#!/usr/bin/env python3
"""Convnets at batch 32 on the GPU (issue 11): the NHWC depthwise kernel,
the activation / squeeze-excitation fusions, checked and timed beside
torch.compile in one run. Reuses bench/zoo.py's and bench/zoo_models.py's
functions (model builds, export, compile, run, bench, profile, PyTorch side).

For each model (torchvision convnext_tiny, mobilenet_v3_large,
efficientnet_b0; random weights, BatchNorm calibrated as the zoo does):
  - export with the TorchScript exporter (opset 17, dynamic batch);
  - compile `gpuc M.onnx -O2 --fp16`, `-O3 --fp16` and `-O2` (fp32) at
    --batch (32);
  - run each plan on a fresh random input and compare with PyTorch fp32
    (TF32 off): fp32 within 1e-4, fp16 within max(2e-2, 2 x PyTorch fp16's
    own rel L2 on the same input), as bench/zoo.py judges;
  - at --cpu-batch (2) also the -O2 --fp16 plan against `gpuc run --cpu
    --fp16` (the reference running the -O2 --fp16 rewritten graph) within
    max(2e-2, 2 x PyTorch fp16's error);
  - print the plan's top steps of `gpuc bench --profile`, and gpuc bench's
    median beside torch.compile(mode="reduce-overhead") fp16 channels_last.
PASS/FAIL lines; OUT/convperf.json, OUT/convperf_profiles.txt.
usage: convperf_check.py --gpuc build/gpuc --out DIR [--models a,b] [--batch 32] [--opts -O2,-O3]
"""
import argparse, concurrent.futures, json, math, os, sys, time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import zoo  # noqa: E402
import zoo_models as zm  # noqa: E402
from output_check import rel_l2  # noqa: E402

START = time.time()


def log(*a):
    print("[%6.1fs]" % (time.time() - START), *a, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuc", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/gpuc_convperf")
    ap.add_argument("--models", default="convnext_tiny,mobilenet_v3_large,efficientnet_b0")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cpu-batch", type=int, default=2, help="0: no CPU-reference check")
    ap.add_argument("--opts", default="-O2,-O3", help="fp16 plans at these levels (-O2 fp32 always)")
    ap.add_argument("--budget", type=float, default=450, help="no model starts after this many seconds")
    a = ap.parse_args()
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    # the namespace bench/zoo.py's helpers read
    z = argparse.Namespace(gpuc=os.path.abspath(a.gpuc), inspect_only=False, cpu_only=False, arch="native",
                           iters=100, torch_iters=50, no_compile_baseline=False)
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    rows, failed = [], 0
    prof_path = os.path.join(a.out, "convperf_profiles.txt")
    open(prof_path, "w").close()

    def verdict(ok, what):
        nonlocal failed
        failed += not ok
        log("%s %s" % ("PASS" if ok else "FAIL", what))

    for name in a.models.split(","):
        if time.time() - START > a.budget:
            verdict(False, "%s: not run, --budget %.0fs spent" % (name, a.budget))
            continue
        model = zm.BY_NAME[name]
        log("== %s" % name)
        m = zm.build(model, "cuda")
        onnx = os.path.join(a.work, name + ".onnx")
        try:
            zm.export(m, model, "ts", onnx)
        except Exception as ex:
            verdict(False, "%s: export: %s" % (name, zm._short(ex)))
            continue
        m = m.cuda()
        names, _ = zoo.onnx_io(onnx)
        b = a.batch
        shapes = [(n, (b,) + tuple(s[0])) for n, s in zip(names, model.spec.values())]
        plans = [(o, "fp16") for o in a.opts.split(",")] + [("-O2", "fp32")]
        row = dict(model=name, batch=b)
        cb = a.cpu_batch
        small_plan = os.path.join(a.work, "%s_b%d-O2_fp16.gpuc" % (name, cb))
        cshapes = [(n, (cb,) + tuple(s[0])) for n, s in zip(names, model.spec.values())]
        jobs = [(opt, prec, os.path.join(a.work, "%s_b%d%s_%s.gpuc" % (name, b, opt, prec)), shapes)
                for opt, prec in plans] + ([("-O2", "small", small_plan, cshapes)] if cb > 0 else [])
        # in parallel, except -O3 (it times candidates on this GPU): alone, after
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            futs = {pool.submit(zoo.gpuc_compile, z, onnx, j[2], j[3], j[0], j[1] != "fp32", 300): j
                    for j in jobs if j[0] != "-O3"}
            done = [(futs[f], f.result()) for f in concurrent.futures.as_completed(futs)]
        done += [(j, zoo.gpuc_compile(z, onnx, j[2], j[3], j[0], True, 300)) for j in jobs if j[0] == "-O3"]
        for (opt, prec, plan, _), r in done:
            row["%s_%s" % (opt, prec)] = dict(r, plan=plan)
            log("  compiled %s %s: %s" % (opt, prec, "ok %.1fs" % r["compile_s"] if r["ok"] else r["error"]))
        inputs = zm.make_inputs(model.spec, b, np.random.default_rng(4321 + b))
        ref, tres = zoo.torch_side(z, torch, zm, m, model, b, inputs)
        row.update(tres)
        tf = row.get("torch_fp16_err", float("inf"))
        limit16 = max(zoo.FP16_FLOOR, 2 * tf) if math.isfinite(tf) else zoo.FP16_FLOOR
        in_args = zoo.save_inputs(inputs, names, a.work)
        for opt, prec in plans:
            c = row["%s_%s" % (opt, prec)]
            tag = "%s b%d %s %s" % (name, b, opt, prec)
            if not c["ok"]:
                verdict(False, "%s: compile: %s" % (tag, c["error"]))
                continue
            out, err = zoo.gpuc_run(z, c["plan"], in_args, [], a.work, 120)
            if out is None:
                verdict(False, "%s: run: %s" % (tag, err))
                continue
            e = rel_l2(out, ref)
            lim = zoo.FP32_LIMIT if prec == "fp32" else limit16
            c.update(rel_l2=e, limit=lim)
            verdict(e <= lim, "%s: rel L2 %.3g vs PyTorch fp32 (limit %.3g; PyTorch fp16's own %.3g)" %
                    (tag, e, lim, tf))
            ms, text = zoo.gpuc_bench(z, c["plan"], 120)
            c["ms"] = ms
            if prec == "fp16" and opt == "-O2":
                _, prof = zoo.gpuc_bench(z, c["plan"], 120, profile=True)
                c["profile_top"] = zoo.profile_top(prof or "", 8)
                with open(prof_path, "a") as f:
                    f.write("== %s\n%s\n" % (tag, prof))
                log("  top steps of gpuc bench --profile (%s):" % tag)
                for line in c["profile_top"]:
                    log("    " + line)
        cms = row.get("compile_fp16_ms")
        for opt, prec in plans:
            c = row["%s_%s" % (opt, prec)]
            if prec == "fp16" and c.get("ms"):
                log("%s b%d %s fp16: gpuc %.3f ms, torch.compile(reduce-overhead) fp16 channels_last %s ms%s" % (
                    name, b, opt, c["ms"], "%.3f" % cms if cms else row.get("compile_error"),
                    ", speedup %.2fx" % (cms / c["ms"]) if cms else ""))
        # the same rewritten graph on the CPU reference, small batch
        if cb > 0:
            r, plan = row.pop("-O2_small"), small_plan
            small = zm.make_inputs(model.spec, cb, np.random.default_rng(99))
            cargs = zoo.save_inputs(small, names, a.work)
            tag = "%s b%d -O2 fp16" % (name, cb)
            if not r["ok"]:
                verdict(False, "%s: compile: %s" % (tag, r["error"]))
            else:
                gout, gerr = zoo.gpuc_run(z, plan, cargs, [], a.work, 120)
                cout, cerr = zoo.gpuc_run(z, onnx, cargs, ["--cpu", "--fp16"] + zoo.shape_args(cshapes),
                                          a.work, 240)
                if gout is None or cout is None:
                    verdict(False, "%s vs gpuc run --cpu --fp16: %s" % (tag, gerr or cerr))
                else:
                    e = rel_l2(gout, cout)
                    row["cpu_ref_rel_l2"] = e
                    verdict(e <= limit16, "%s: rel L2 %.3g vs gpuc run --cpu --fp16 (limit %.3g)" %
                            (tag, e, limit16))
        rows.append(row)
        with open(os.path.join(a.out, "convperf.json"), "w") as f:
            json.dump(rows, f, indent=1)
        del m
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    log("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
