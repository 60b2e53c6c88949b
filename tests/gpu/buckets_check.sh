#!/usr/bin/env bash
# Bucket plans on the GPU (issue 15): one plan for a range of shapes.
#   BERT-base (HF BertModel, random weights, TorchScript export with dynamic
#   batch and sequence axes) in one --fp16 plan for batch 1..32 x sequence
#   16..128 (24 buckets: 1,2,4,8,16,32 x 16,32,64,128), and ResNet-50
#   (torchvision, random weights, BatchNorm statistics from random batches)
#   for batch 1..256 (9 buckets). Exported here by tests/gpu/buckets_export.py.
# Checks, one line each, then PASS or FAIL (exit 1 on any failure):
#   sizes    the bucket plan's file against the plan compiled for the top
#            shape alone: under 1.3x (the weights are stored once)
#   latency  every bucket, run inside the bucket plan at its own shape
#            (`gpuc bench PLAN --each-bucket`), against a plan compiled for
#            that shape alone (`gpuc bench`): within 5% (medians of CUDA-event
#            timed CUDA-graph replays; a bucket over 5% is timed again, both
#            sides, up to twice, and keeps its best medians)
#   correct  shapes between buckets (padded and sliced: BERT 2x20, 3x37,
#            5x16, 1x128; ResNet-50 batch 3 and 1) run by `gpuc run PLAN` on
#            fresh random inputs (BERT's attention mask ends in zeros),
#            against `gpuc run MODEL.onnx --cpu --fp16` on the same inputs:
#            rel L2 <= 1e-2 (fp16; 3e-2 for ResNet-50), the output's shape the actual one, no NaN
#   refused  a shape outside the compiled range names the range
#   -O3      mlp.onnx (bundled) tuned per bucket, then run at batch 5 vs the CPU
# Writes $OUT/buckets_check.log, $OUT/buckets.md (the table for
# docs/BENCHMARKS.md) and the compile logs. Run from the repository root:
#   OUT=/tmp/out tests/gpu/buckets_check.sh [GPUC] [MODELS_DIR]
# (defaults build/gpuc, build/models; MODELS=bert,resnet50 picks models;
# SINGLES=some compiles and times the one-shape plans of a few buckets only;
# JOBS sets the parallel compiles (default: the CPUs); PYTHON needs numpy,
# torch, torchvision, transformers.) About 6-8 minutes on an H200 host.
set -u
GPUC=$(realpath "${1:-build/gpuc}")
MODELS_DIR=$(realpath "${2:-build/models}")
OUT=${OUT:-/tmp/buckets_check_out}
WORK=${WORK:-/tmp/buckets_check_work}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
JOBS=${JOBS:-$(nproc)}
HERE=$(cd "$(dirname "$0")" && pwd)
"$PY" - "$GPUC" "$MODELS_DIR" "$WORK" "$OUT" "$HERE" "${MODELS:-bert,resnet50}" "${SINGLES:-all}" "$JOBS" <<'PYEOF' 2>&1 | tee "$OUT/buckets_check.log"
import concurrent.futures as cf, os, re, subprocess, sys, time

import numpy as np

gpuc, models_dir, work, out, here, which, singles, jobs = sys.argv[1:9]
jobs = int(jobs)
which = which.split(",")
t0 = time.time()
failed = passed = 0
rows_md = []


def log(*a):
    print("[%5.0f s] " % (time.time() - t0) + " ".join(str(x) for x in a), flush=True)


def run(cmd, env=None, logfile=None):
    t = time.time()
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, env=e)
    text = (r.stdout + r.stderr).strip()
    if logfile:
        open(logfile, "w").write(" ".join(cmd) + "\n" + text + "\n")
    return r.returncode, text, time.time() - t


def verdict(ok, line):
    global failed, passed
    passed += bool(ok)
    failed += not ok
    log("%-6s %s" % ("ok" if ok else "FAIL", line))


def rel(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("nan")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


SPECS = {
    "bert": dict(onnx="bert_dyn.onnx", shape="input_ids=1..32x16..128", flags=["--fp16"],
                 one=lambda s: ["--shape", "input_ids=%dx%d" % (s[0], s[1])],
                 correct=[(2, 20), (3, 37), (5, 16), (1, 128)], outside=["--shape", "input_ids=33x16"],
                 outside_msg="outside the range 1..32"),
    "resnet50": dict(onnx="resnet50_dyn.onnx", shape="input=1..256x3x224x224", flags=["--fp16"],
                     one=lambda s: ["--shape", "input=%dx3x224x224" % s[0]],
                     correct=[(3,), (1,)], outside=["--shape", "input=300x3x224x224"],
                     outside_msg="outside the range 1..256"),
}

# 1. export
need = [m for m in which if not os.path.exists(os.path.join(work, SPECS[m]["onnx"]))]
if need:
    log("exporting", need)
    rc, text, secs = run([sys.executable, os.path.join(here, "buckets_export.py"), work] + need,
                         logfile=os.path.join(out, "export.log"))
    if rc:
        verdict(False, "export failed: " + text[-600:])
        sys.exit(1)
    log("exported in %.0f s" % secs)


def bench_median(args):
    rc, text, _ = run([gpuc, "bench"] + args + ["--iters", "200", "--warmup", "20"])
    m = re.search(r"latency: median ([0-9.]+) ms", text)
    return (float(m.group(1)) if m else None), text


def bench_each(plan):
    rc, text, _ = run([gpuc, "bench", plan, "--each-bucket", "--iters", "200", "--warmup", "20"])
    got = {}
    for m in re.finditer(r"^bucket\s+(\d+)((?: \S+=\d+)+): median ([0-9.]+) ms", text, re.M):
        got[tuple(int(x) for x in re.findall(r"=(\d+)", m.group(2)))] = float(m.group(3))
    return got, text


for name in which:
    sp = SPECS[name]
    onnx = os.path.join(work, sp["onnx"])
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    plan = os.path.join(d, "buckets.gpuc")
    # 2. the bucket plan
    rc, text, secs = run([gpuc, onnx, "-o", plan, "--shape", sp["shape"]] + sp["flags"], env={"GPUC_JOBS": str(jobs)},
                         logfile=os.path.join(out, name + "_compile.log"))
    if rc:
        verdict(False, "%s: bucket plan compile failed: %s" % (name, text[-600:]))
        continue
    log("%s: bucket plan compiled in %.0f s: %s" % (name, secs, text.splitlines()[-1]))
    rc, listing, _ = run([gpuc, "inspect", plan], logfile=os.path.join(out, name + "_inspect.txt"))
    buckets = [tuple(int(x) for x in m.group(1).split("x"))
               for m in re.finditer(r"^\s+bucket\s+\d+ (\S+)\s+\d+ steps", listing, re.M)]
    log("%s: %d buckets: %s" % (name, len(buckets), " ".join("x".join(map(str, b)) for b in buckets)))
    # 3. one plan per bucket shape, compiled alone
    pick = buckets if singles == "all" else sorted(set([buckets[0], buckets[len(buckets) // 2], buckets[-1]]))
    one_plans = {}

    def compile_one(b):
        p = os.path.join(d, "one_%s.gpuc" % "x".join(map(str, b)))
        rc, text, _ = run([gpuc, onnx, "-o", p] + sp["one"](b) + sp["flags"], env={"GPUC_JOBS": "1"},
                          logfile=p + ".log")
        return b, p, rc, text

    t1 = time.time()
    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        for b, p, rc, text in ex.map(compile_one, pick):
            if rc:
                verdict(False, "%s %s: one-shape compile failed: %s" % (name, b, text[-300:]))
            else:
                one_plans[b] = p
    log("%s: %d one-shape plans compiled in %.0f s" % (name, len(one_plans), time.time() - t1))
    top = buckets[-1]
    if top in one_plans:
        sb, so = os.path.getsize(plan), os.path.getsize(one_plans[top])
        verdict(sb < 1.3 * so, "%s sizes: bucket plan %d bytes (%d buckets), the %s plan alone %d bytes: %.3fx "
                "(target < 1.3x)" % (name, sb, len(buckets), "x".join(map(str, top)), so, sb / so))
        rows_md.append("| %s | plan file | %d buckets: %.1f MB | %s alone: %.1f MB | %.3fx |" %
                       (name, len(buckets), sb / 1e6, "x".join(map(str, top)), so / 1e6, sb / so))
    # 4. latency, bucket by bucket
    each, text = bench_each(plan)
    open(os.path.join(out, name + "_bench_each.txt"), "w").write(text)
    if not each:
        verdict(False, "%s: bench --each-bucket failed: %s" % (name, text[-400:]))
        continue
    for b in buckets:
        if b not in one_plans:
            continue
        mb = each.get(b)
        mo, otext = bench_median([one_plans[b]])
        tries = 0
        while mb and mo and mb > 1.05 * mo and tries < 2:  # noise: both sides again, best medians kept
            tries += 1
            again, _ = bench_each(plan)
            mb = min(mb, again.get(b, mb))
            m2, _ = bench_median([one_plans[b]])
            mo = min(mo, m2 or mo)
        if mb is None or mo is None:
            verdict(False, "%s %s: no timing (%s)" % (name, b, otext[-300:]))
            continue
        label = "x".join(map(str, b))
        verdict(mb <= 1.05 * mo, "%s latency %-7s in the bucket plan %.4f ms, compiled alone %.4f ms: %.3fx "
                "(target <= 1.05)" % (name, label, mb, mo, mb / mo))
        rows_md.append("| %s | %s | %.4f ms | %.4f ms | %.3fx |" % (name, label, mb, mo, mb / mo))
    # 5. correctness between buckets, against the CPU reference
    rng = np.random.default_rng(2026)
    cases = []
    for s in sp["correct"]:
        cd = os.path.join(d, "case_" + "x".join(map(str, s)))
        os.makedirs(cd, exist_ok=True)
        args = []
        if name == "bert":
            ids = rng.integers(0, 30522, s).astype(np.int64)
            mask = np.ones(s, np.int64)
            mask[:, s[1] * 3 // 4:] = 0  # the model's own padding too
            np.save(os.path.join(cd, "input_ids.npy"), ids)
            np.save(os.path.join(cd, "attention_mask.npy"), mask)
            args = ["--input", "input_ids=" + os.path.join(cd, "input_ids.npy"),
                    "--input", "attention_mask=" + os.path.join(cd, "attention_mask.npy")]
        else:
            x = rng.standard_normal((s[0], 3, 224, 224)).astype(np.float32)
            np.save(os.path.join(cd, "input.npy"), x)
            args = ["--input", "input=" + os.path.join(cd, "input.npy")]
        cases.append((s, cd, args))

    def cpu_case(c):
        s, cd, args = c
        return run([gpuc, "run", onnx, "--cpu", "--out", os.path.join(cd, "cpu")] + sp["flags"] + args,
                   logfile=os.path.join(cd, "cpu.log"))

    t1 = time.time()
    with cf.ThreadPoolExecutor(max_workers=max(1, min(jobs, len(cases)))) as ex:
        cpu_results = list(ex.map(cpu_case, cases))
    log("%s: CPU reference of %d shapes in %.0f s" % (name, len(cases), time.time() - t1))
    for (s, cd, args), (crc, ctext, _) in zip(cases, cpu_results):
        label = "x".join(map(str, s))
        grc, gtext, _ = run([gpuc, "run", plan, "--out", os.path.join(cd, "gpu")] + args,
                            logfile=os.path.join(cd, "gpu.log"))
        if crc or grc:
            verdict(False, "%s correct %s: run failed: %s" % (name, label, (ctext if crc else gtext)[-400:]))
            continue
        worst, shapes = 0.0, []
        for f in sorted(os.listdir(os.path.join(cd, "cpu"))):
            c = np.load(os.path.join(cd, "cpu", f))
            g = np.load(os.path.join(cd, "gpu", f))
            shapes.append("%s %s" % (f[:-4], "x".join(map(str, g.shape))))
            r = rel(g, c) if g.shape == c.shape else float("nan")
            worst = r if (r != r or r > worst) else worst
        # fp16 bound: 1e-2, 3e-2 for ResNet-50, whose 53 fp16 convolutions
        # differ from the CPU's by 1.1e-2 even unpadded (batch 1, its own
        # bucket, on the H200) and PyTorch's own fp16 output differs from
        # fp32 by 2.9e-2 (docs/ZOO.md)
        bound = 3e-2 if name == "resnet50" else 1e-2
        verdict(worst <= bound, "%s correct %-7s (padded into its bucket, sliced back: %s) GPU vs CPU --fp16 rel L2 "
                "%.3g (bound %g)" % (name, label, ", ".join(shapes), worst, bound))
    # 6. outside the range
    rc, text, _ = run([gpuc, "run", plan] + sp["outside"])
    verdict(rc == 1 and sp["outside_msg"] in text, "%s refuses %s: %s" % (name, sp["outside"][1], text[-200:]))

# 7. -O3 per bucket, on a small bundled model
mlp = os.path.join(models_dir, "mlp.onnx")
if os.path.exists(mlp):
    d = os.path.join(work, "mlp_O3")
    os.makedirs(d, exist_ok=True)
    plan = os.path.join(d, "mlp.gpuc")
    rc, text, secs = run([gpuc, mlp, "-O3", "-o", plan, "--shape", "image=1..64x784", "--buckets", "1,16",
                          "--tune-cache", "none"], logfile=os.path.join(out, "mlp_O3_compile.log"))
    tuned = len(re.findall(r"autotuned on this GPU", text))
    x = np.random.default_rng(5).uniform(-1, 1, (5, 784)).astype(np.float32)
    np.save(os.path.join(d, "image.npy"), x)
    a = ["--input", "image=" + os.path.join(d, "image.npy")]
    r1 = run([gpuc, "run", plan, "--out", os.path.join(d, "gpu")] + a)
    r2 = run([gpuc, "run", mlp, "--cpu", "--out", os.path.join(d, "cpu")] + a)
    ok = rc == 0 and r1[0] == 0 and r2[0] == 0 and tuned == 3
    err = rel(np.load(os.path.join(d, "gpu", "logits.npy")), np.load(os.path.join(d, "cpu", "logits.npy"))) if ok else -1
    verdict(ok and err <= 1e-4, "mlp -O3: %d of 3 buckets autotuned, batch 5 GPU vs CPU rel L2 %.3g (fp32, bound 1e-4)%s"
            % (tuned, err, "" if rc == 0 else ": " + text[-300:]))

open(os.path.join(out, "buckets.md"), "w").write(
    "| model | bucket | in the bucket plan | compiled alone | ratio |\n| --- | --- | --- | --- | --- |\n" +
    "\n".join(rows_md) + "\n")
log("%d passed, %d failed in %.0f s" % (passed, failed, time.time() - t0))
print("PASS" if failed == 0 else "FAIL")
sys.exit(1 if failed else 0)
PYEOF
rc=${PIPESTATUS[0]}
exit "$rc"
