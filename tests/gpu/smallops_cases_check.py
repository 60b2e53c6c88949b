#!/usr/bin/env python3
"""The one-node cases of tests/models/smallops_host (issue 11's ops) on the
GPU against the CPU reference, on the GPU machine: each model compiled
(sm of this GPU), run by `gpuc run PLAN` and by `gpuc run MODEL --cpu` on
its stored inputs, compared (moves and integers exactly; floats within 1e-5
of max |y| in f32, 1e-12 in f64, 2e-3 in f16); a case with a bad runtime
input (a sequence length, an unpool index) must fail with the reference's
message, read back from the device error record. bf16 cases are skipped
(gpuc writes no bf16 .npy; tests/smallops_host_test.py covers them).
usage: smallops_cases_check.py GPUC CASES_DIR OUTDIR
Prints PASS/FAIL lines and 'N passed, N failed'.
"""
import json, os, subprocess, sys

import numpy as np

TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-3}
MSG = {6: "sequence length %d (element %d of sequence_lens) is outside [0, %d]",
       7: "index %d (element %d of I) is outside [0, %d)"}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    gpuc, cases, out = sys.argv[1:4]
    passed = failed = 0
    for case in sorted(os.listdir(cases)):
        d, w = os.path.join(cases, case), os.path.join(out, case)
        os.makedirs(w, exist_ok=True)
        meta = json.load(open(os.path.join(d, "case.json")))
        if "ref_model" in meta:
            continue
        ins = lambda m: sum((["--input", "%s=%s" % (k, os.path.join(d, v))] for k, v in m.items()), [])
        model, plan = os.path.join(d, "model.onnx"), os.path.join(w, "p.gpuc")
        steps = [[gpuc, model, "-O2", "-o", plan], [gpuc, "run", model, "--cpu", "--out", os.path.join(w, "cpu")] + ins(meta["inputs"]),
                 [gpuc, "run", plan, "--out", os.path.join(w, "gpu")] + ins(meta["inputs"])]
        msg = ""
        for s in steps:
            rc, msg = run(s)
            if rc:
                break
        if rc:
            print("FAIL %s: %s" % (case, msg[-300:])); failed += 1; continue
        ref, got = np.load(os.path.join(w, "cpu", "y.npy")), np.load(os.path.join(w, "gpu", "y.npy"))
        exact = ref.dtype.kind in "iub" or case.startswith(("revseq", "maxunpool", "ccp"))
        if exact:
            ok, detail = got.tobytes() == ref.tobytes(), "exact"
        else:
            g, r = got.astype(np.float64), ref.astype(np.float64)
            err = float(np.max(np.abs(g - r))) / max(float(np.max(np.abs(r))), 1e-30)
            ok, detail = err <= TOL[ref.dtype], "max err %.3g of max |y|" % err
        print("%s %s: GPU vs CPU %s" % ("PASS" if ok else "FAIL", case, detail)); passed += ok; failed += not ok
        bad = meta.get("bad")
        if bad:
            k, v, p, b = bad["fault"]
            want = MSG[k] % (v, p, b)
            rc, msg = run([gpuc, "run", plan, "--out", os.path.join(w, "bad")] + ins(bad["inputs"]))
            ok = rc != 0 and want in msg
            print("%s %s: bad input: %s" % ("PASS" if ok else "FAIL", case, msg.splitlines()[-1] if msg else "(no message)"))
            passed += ok; failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
