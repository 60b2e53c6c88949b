#!/usr/bin/env python3
"""The zoo's tiny exported models without a GPU (ctest zoo_models).

tests/models/zoo/ holds public architectures at tiny configs exported by
PyTorch with both exporters (export.py re-exports them) and PyTorch's fp32
outputs at batch 4. For each exported model this test
  * compiles it for sm_90 at batch 1 and 4, fp32 and --fp16
    (`gpuc M.onnx --arch sm_90 [--fp16] --shape NAME=DIMS...`): must succeed;
  * runs the CPU reference (`gpuc run M.onnx --cpu [-O2] --shape ...`: the
    graph as imported, and after the -O2 passes in fp32) on the stored
    inputs at batch 4 and on their first row at batch 1, against PyTorch's
    outputs (the first row at batch 1): rel L2 <= 1e-4 (fp32).
A model in XFAIL is expected to fail one of these today, for the reason
given; it is reported as XFAIL, and as XPASS (a failure of this test) once it
passes, so the list is kept to what still fails.

usage: zoo_models_test.py GPUC ZOO_DIR WORK_DIR [--jobs N] [--only SUBSTRING[,SUBSTRING...]]
"""
import concurrent.futures, json, os, shutil, subprocess, sys

try:
    import numpy as np
except ImportError:
    sys.exit("zoo_models_test: needs python3 with numpy (Debian: python3-numpy)")
# rel_l2 and first_error, shared with bench/zoo.py (numpy only, no torch)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from output_check import first_error, rel_l2  # noqa: E402

REL_L2_FP32 = 1e-4
ARCH = "sm_90"

# exported model (file name without .onnx) -> why it fails today.
# Remove an entry when the fix lands (the test then reports XPASS and fails).
XFAIL = {
    # none today: Gelu-20 (dynamo exporter) and GPT-2's batch-1 shape chain
    # were the last; add an entry here with the reason when a model regresses
}


def shape_flags(inputs, batch):
    out = []
    for name, v in inputs.items():
        out += ["--shape", "%s=%s" % (name, "x".join(str(d) for d in (batch,) + tuple(v.shape[1:])))]
    return out


LSAN_FATAL = "LeakSanitizer has encountered a fatal error"


def run_gpuc(cmd):
    """subprocess.run of a gpuc command; under the ASan build, once more
    with leak detection off when LeakSanitizer's own tracer crashed at exit
    ("Tracer caught signal 11", seen on tiny_llama_dynamo's compile when two
    run side by side: a failure of the leak checker, not of gpuc, which
    exited 0 otherwise). Any other sanitizer report still fails."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode and LSAN_FATAL in r.stderr:
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        print("note: %s: LeakSanitizer's tracer crashed; run again without leak detection" % " ".join(cmd[:2]))
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return r


def check_model(gpuc, zoo, work, onnx_name, spec):
    """Returns a list of failures (empty: passed) and a list of what was done."""
    path = os.path.join(zoo, onnx_name + ".onnx")
    mwork = os.path.join(work, onnx_name)
    shutil.rmtree(mwork, ignore_errors=True)
    os.makedirs(mwork)
    inputs = {k: np.load(os.path.join(zoo, v["file"])) for k, v in spec["inputs"].items()}
    ref = np.load(os.path.join(zoo, spec["output"]["file"]))
    fails, done = [], []
    for batch in (1, 4):
        for fp16 in (False, True):
            what = "compile b%d %s" % (batch, "fp16" if fp16 else "fp32")
            cmd = [gpuc, path, "--arch", ARCH, "-o", os.path.join(mwork, "b%d.gpuc" % batch)]
            cmd += shape_flags(inputs, batch) + (["--fp16"] if fp16 else [])
            r = run_gpuc(cmd)
            if r.returncode:
                fails.append("%s: %s" % (what, first_error(r.stderr + r.stdout)))
            elif not os.path.getsize(os.path.join(mwork, "b%d.gpuc" % batch)):
                fails.append("%s: empty plan" % what)
            done.append(what)
        # the CPU reference on the stored inputs (batch 1: their first row),
        # as imported and after the -O2 passes (in fp32)
        args = []
        for k, v in inputs.items():
            f = os.path.join(mwork, "in_b%d_%s.npy" % (batch, k))
            np.save(f, v[:batch])
            args += ["--input", "%s=%s" % (k, f)]
        for level in ("", "-O2"):
            what = "cpu ref b%d%s" % (batch, " " + level if level else "")
            out = os.path.join(mwork, "out_b%d%s" % (batch, level))
            r = run_gpuc([gpuc, "run", path, "--cpu", "--out", out] + ([level] if level else []) +
                         shape_flags(inputs, batch) + args)
            done.append(what)
            if r.returncode:
                fails.append("%s: %s" % (what, first_error(r.stderr + r.stdout)))
                continue
            files = sorted(f for f in os.listdir(out) if f.endswith(".npy"))
            if len(files) != 1:
                fails.append("%s: %d outputs written, expected 1" % (what, len(files)))
                continue
            e = rel_l2(np.load(os.path.join(out, files[0])), ref[:batch])
            if not e <= REL_L2_FP32:
                fails.append("%s: rel L2 %.2e > %.0e against PyTorch" % (what, e, REL_L2_FP32))
    shutil.rmtree(mwork, ignore_errors=True)
    return fails, done


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    gpuc, zoo, work = sys.argv[1:4]
    jobs, only = 2, ""
    rest = sys.argv[4:]
    while rest:
        if rest[0] == "--jobs" and len(rest) > 1:
            jobs, rest = int(rest[1]), rest[2:]
        elif rest[0] == "--only" and len(rest) > 1:
            only, rest = rest[1], rest[2:]
        else:
            sys.exit("zoo_models_test: unknown argument %r\n%s" % (rest[0], __doc__))
    with open(os.path.join(zoo, "manifest.json")) as f:
        man = json.load(f)
    os.makedirs(work, exist_ok=True)
    todo = [(e[:-5], spec) for spec in man["models"].values() for e in spec["exports"]
            if any(o in e for o in only.split(","))]
    unknown = sorted(set(XFAIL) - {n for n, _ in todo}) if not only else []
    if unknown:
        sys.exit("zoo_models_test: XFAIL names models that are not in the manifest: %s" % ", ".join(unknown))
    if not todo:
        sys.exit("zoo_models_test: no models match")
    counts = {"PASS": 0, "FAIL": 0, "XFAIL": 0, "XPASS": 0}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(check_model, gpuc, zoo, work, n, s): n for n, s in todo}
        for f in concurrent.futures.as_completed(futs):
            name = futs[f]
            fails, done = f.result()
            if name in XFAIL:
                status = "XPASS" if not fails else "XFAIL"
            else:
                status = "FAIL" if fails else "PASS"
            counts[status] += 1
            print("%-5s %s (%d checks)" % (status, name, len(done)), flush=True)
            for msg in fails:
                print("      %s" % msg)
            if status == "XFAIL":
                print("      expected: %s" % XFAIL[name])
            if status == "XPASS":
                print("      passes now: remove it from XFAIL in %s" % os.path.abspath(__file__))
    print("%d passed, %d failed, %d xfail, %d xpass" % (
        counts["PASS"], counts["FAIL"], counts["XFAIL"], counts["XPASS"]))
    sys.exit(1 if counts["FAIL"] or counts["XPASS"] else 0)


if __name__ == "__main__":
    main()
