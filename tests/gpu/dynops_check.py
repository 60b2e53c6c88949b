#!/usr/bin/env python3
"""The dynamo-exported models of tests/models/dynops_* on the GPU against
the CPU reference, on the GPU machine.

Each model is compiled -O2 in fp32 and fp16 (Gelu in fused elementwise
kernels, LayerNorm/RMSNorm/GroupNorm kernels, the Attention-23 expansion
fused back into the attention kernel), run by `gpuc run PLAN` and by `gpuc
run MODEL --cpu` on the same fresh random inputs (floats normal, token ids
uniform over the ids the stored input uses and above, attention masks 0/1
with the first position kept), and compared: relative L2 <= 1e-5 in fp32,
<= 1e-2 in fp16; then timed with `gpuc bench`. Prints PASS/FAIL lines and
'N passed, N failed'; logs under OUTDIR.

usage: dynops_check.py GPUC MODELS_DIR OUTDIR [SEED [PREFIX]]
(PREFIX, default dynops_: smallops_ checks tests/models/smallops_*)
"""
import glob, os, subprocess, sys

import numpy as np

TOL = {"fp32": 1e-5, "fp16": 1e-2}


def run(cmd, log):
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ %s\n%s%s\n" % (" ".join(cmd), r.stdout, r.stderr))
    return r.returncode, (r.stdout + r.stderr).strip()


def rel(a, b):
    a = a.astype(np.float64).ravel(); b = b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    gpuc, models, out = sys.argv[1:4]
    rng = np.random.default_rng(int(sys.argv[4]) if len(sys.argv) > 4 else 11)
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "dynops_check.log")
    passed = failed = 0
    prefix = sys.argv[5] if len(sys.argv) > 5 else "dynops_"
    for path in sorted(glob.glob(os.path.join(models, prefix + "*.onnx"))):
        tag = os.path.basename(path)[:-5]
        work = os.path.join(out, tag)
        os.makedirs(work, exist_ok=True)
        inputs = []
        for f in sorted(glob.glob(os.path.join(models, tag + ".in.*.npy"))):
            name = f[len(os.path.join(models, tag + ".in.")):-4]
            old = np.load(f)
            if old.dtype.kind == "f":
                new = rng.standard_normal(old.shape).astype(old.dtype)
            elif "mask" in name:
                new = rng.integers(0, 2, old.shape).astype(old.dtype)
                new[..., 0] = 1
            else:
                new = rng.integers(0, int(old.max()) + 1, old.shape).astype(old.dtype)
            p = os.path.join(work, "in_%s.npy" % name)
            np.save(p, new)
            inputs += ["--input", "%s=%s" % (name, p)]
        cpu = os.path.join(work, "cpu")
        rc, msg = run([gpuc, "run", path, "--cpu", "--out", cpu] + inputs, log)
        if rc:
            print("FAIL %s: CPU run: %s" % (tag, msg[-300:])); failed += 1; continue
        for prec, extra in (("fp32", []), ("fp16", ["--fp16"])):
            plan = os.path.join(work, prec + ".gpuc")
            rc, msg = run([gpuc, path, "-O2", "-o", plan] + extra, log)
            if rc:
                print("FAIL %s %s: compile: %s" % (tag, prec, msg[-300:])); failed += 1; continue
            gout = os.path.join(work, prec)
            rc, msg = run([gpuc, "run", plan, "--out", gout] + inputs, log)
            if rc:
                print("FAIL %s %s: GPU run: %s" % (tag, prec, msg[-300:])); failed += 1; continue
            worst = 0.0
            for ref in sorted(glob.glob(os.path.join(cpu, "*.npy"))):
                got = np.load(os.path.join(gout, os.path.basename(ref)))
                r = rel(got, np.load(ref)) if np.all(np.isfinite(got)) else float("inf")
                worst = max(worst, r)
            ok = worst <= TOL[prec]
            rc, bench = run([gpuc, "bench", plan, "--iters", "200"], log)
            timing = bench.splitlines()[-1] if bench else ""
            print("%s %s %s: rel L2 %.3g (tol %g); %s" % ("PASS" if ok else "FAIL", tag, prec, worst,
                                                       TOL[prec], timing))
            passed += ok; failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
