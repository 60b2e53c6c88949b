"""The sm_90 int8 default (codegen/lower_int8_gemm.c: the TMA-fed
warp-specialized GEMM by shape, gpuc's kernel for every int8 GEMM of N >=
256) on whole models, against GPUC_INT8_WS=0 (the default before) and
--fp16; the model half of tests/gpu/int8_default_check.sh.

  small  bert_small (tests/gpu/hf_export.py: hidden 256, FFN 2048, 2
         layers) at b32 s128, --int8 (fp32) and --int8 --fp16: the default
         plan must run its int8 GEMMs on gpuc's kernel with TMA maps (FC1 K
         256 N 2048, FC2 K 2048), its GPU output bit-identical to the
         GPUC_INT8_WS=0 plan's (cuBLASLt + DequantizeRows there: the same
         int32 sums and epilogue steps) and within rel L2 2e-2 (fp32) / 5e-2
         (fp16) of `gpuc run --cpu` with the same flags (int8 steps moved by
         an ulp of LayerNorm or softmax upstream, as row_fusion_bench.py
         bounds them)
  time   BERT-base b32 s128 and the LLaMA decoder b8 s512: --fp16, --int8
         --fp16 with GPUC_INT8_WS=0, --int8 --fp16 by default, and by default
         without the row groups (GPUC_NO_ROW_FUSION=1: LLaMA's SwiGLU and its
         quantize as two kernels), each timed by `gpuc bench --iters ITERS
         --profile` (median; ITERS default 200), after the default plan's GPU
         output is compared with the other two int8 plans' (bit-identical
         wanted; rel L2 printed)

Writes the timing table to OUT/table.md, each bench output to
OUT/MODEL_PLAN_bench.txt. Models are exported into WORK (BERT_ONNX / LLAMA_ONNX / SMALL_ONNX=PATH use
a file instead; SHAPES=bert:4x64,... other sizes). CPU_ONLY=1 compiles and runs the CPU side only (no GPU:
to try the script); ARCH=sm_XX compiles for another target than the GPU's.
usage: int8_default_check.py GPUC WORK OUT [small] [time]
Prints PASS/FAIL lines; exit 1 on a failure."""
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

gpuc, work, out = sys.argv[1:4]
what = sys.argv[4:] or ["small", "time"]
arch = os.environ.get("ARCH", "native")
cpu_only = os.environ.get("CPU_ONLY") == "1"
iters = os.environ.get("ITERS", "200")
os.makedirs(work, exist_ok=True)
os.makedirs(out, exist_ok=True)
fails = 0
WS0 = {"GPUC_INT8_WS": "0"}
# the model files: name -> (env override, batch, seq)
MODELS = {"bert_small": ("SMALL_ONNX", 32, 128), "bert": ("BERT_ONNX", 32, 128), "llama": ("LLAMA_ONNX", 8, 512)}
for kv in os.environ.get("SHAPES", "").split(","):  # SHAPES=name:BxS,...: other sizes (a dry run's)
    if kv:
        k, v = kv.split(":")
        MODELS[k] = (MODELS[k][0],) + tuple(int(x) for x in v.split("x"))


def verdict(ok, line):
    global fails
    fails += 0 if ok else 1
    print(("PASS " if ok else "FAIL ") + line, flush=True)


def run(cmd, env=None, timeout=300):
    """(exit status, output, seconds); 124 past timeout (a hung kernel must not take the rest with it)"""
    e = dict(os.environ)
    e.update(env or {})
    t = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
        rc, txt = r.returncode, (r.stdout + r.stderr).strip()
    except subprocess.TimeoutExpired:
        rc, txt = 124, "timed out after %d s: %s" % (timeout, " ".join(cmd))
    return rc, txt, time.time() - t


def parallel(jobs):
    """{key: (cmd, env)} run at once: {key: (rc, out, secs)}"""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        futs = {k: ex.submit(run, cmd, env) for k, (cmd, env) in jobs.items()}
        return {k: f.result() for k, f in futs.items()}


def model_path(name):
    env, _, _ = MODELS[name]
    return os.environ.get(env) or os.path.join(work, name + ".onnx")


def export_all(names):
    """the models not there yet exported at once (tests/gpu/hf_export.py), one process each"""
    here = os.path.dirname(os.path.abspath(__file__))
    jobs = {n: ([sys.executable, "-c", "import sys; sys.path.insert(0, %r); from hf_export import export; "
                 "export(%r, %r)" % (here, n, model_path(n))], None) for n in names if not os.path.exists(model_path(n))}
    t = time.time()
    for n, (rc, msg, secs) in sorted(parallel(jobs).items()):
        if rc:
            verdict(False, "%s export failed: %s" % (n, msg[-300:]))
        else:
            print("%s exported in %.0f s" % (n, secs), flush=True)
    if jobs:
        print("exports: %d in %.0f s (in parallel)" % (len(jobs), time.time() - t), flush=True)


def shape_args(b, s):
    return ["--shape", "input_ids=%dx%d" % (b, s), "--shape", "attention_mask=%dx%d" % (b, s)]


def inputs(name, b, s):
    """input_ids below 64 (every model's vocabulary, the tiny zoo models' too) and a mask whose last quarter pads"""
    rng = np.random.default_rng(2026)
    ids, mask = os.path.join(work, "%s_ids.npy" % name), os.path.join(work, "%s_mask.npy" % name)
    np.save(ids, rng.integers(0, 64, (b, s)).astype(np.int64))
    m = np.ones((b, s), np.int64)
    m[:, s * 3 // 4:] = 0
    np.save(mask, m)
    return ["--input", "input_ids=" + ids, "--input", "attention_mask=" + mask]


def output(d):
    return np.load(os.path.join(d, "output.npy"))


def rel(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("nan")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def plan_gemms(plan):
    """(gpuc int8 GEMM kernels, of them with TMA maps, cuBLASLt int8 GEMMs, steps) of a plan, by gpuc inspect"""
    _, listing, _ = run([gpuc, "inspect", plan])
    own = re.findall(r"kernel k\d+_int8_gemm\S*.*", listing)
    steps = re.search(r"schedule \((\d+) steps", listing)
    return (len(own), sum("TMA maps" in ln for ln in own), len(re.findall(r"gemm int8", listing)),
            int(steps.group(1)) if steps else 0)


def same_outputs(tag, plans, ins):
    """run both plans on the GPU: (bit-identical, rel L2, the default's output) or None"""
    got = []
    for p in plans:
        d = p + ".out"
        rc, msg, _ = run([gpuc, "run", p, "--out", d] + ins, timeout=120)
        if rc:
            verdict(False, "%s: GPU run of %s failed: %s" % (tag, os.path.basename(p), msg[-300:]))
            return None
        got.append(output(d))
    a, b = got
    return a.shape == b.shape and np.array_equal(a, b), rel(a, b), a


def small():
    name = "bert_small"
    _, b, s = MODELS[name]
    path = model_path(name)
    if not os.path.exists(path):
        return
    ins = inputs(name, b, s)
    jobs = {}
    for prec in ([], ["--fp16"]):
        p = "fp16" if prec else "fp32"
        base = [gpuc, path, "--arch", arch, "--int8"] + prec + shape_args(b, s)
        jobs[(p, "default")] = (base + ["-o", os.path.join(work, "small_%s.gpuc" % p)], None)
        jobs[(p, "ws0")] = (base + ["-o", os.path.join(work, "small_%s_ws0.gpuc" % p)], WS0)
        jobs[(p, "cpu")] = ([gpuc, "run", path, "--cpu", "--int8", "--out", os.path.join(work, "small_%s_cpu" % p)] +
                            prec + ins, None)
    t = time.time()
    done = parallel(jobs)
    print("small: 4 compiles and 2 CPU references in %.0f s (in parallel)" % (time.time() - t), flush=True)
    for (p, kind), (rc, msg, secs) in sorted(done.items()):
        if rc:
            verdict(False, "bert_small %s %s failed after %.0f s: %s" % (p, kind, secs, msg[-300:]))
    for p, tol in (("fp32", 2e-2), ("fp16", 5e-2)):
        if any(done[(p, k)][0] for k in ("default", "ws0", "cpu")):
            continue
        plan, plan0 = os.path.join(work, "small_%s.gpuc" % p), os.path.join(work, "small_%s_ws0.gpuc" % p)
        own, tma, lt, _ = plan_gemms(plan)
        own0, _, lt0, _ = plan_gemms(plan0)
        # every int8 GEMM gpuc's (N >= 256, 64 tiles at 4096 rows), FC1 (N 2048) and FC2 (K 2048) of both
        # layers on the TMA kernel
        verdict(own == own0 + lt0 and own >= 8 and tma == 4 and lt == 0,
                "bert_small b%d s%d --int8 %s: default plan %d int8 GEMMs gpuc's (%d with TMA maps), %d cuBLASLt's "
                "(want all, 4, 0); GPUC_INT8_WS=0: %d gpuc's, %d cuBLASLt's" % (b, s, p, own, tma, lt, own0, lt0))
        if cpu_only:
            continue
        r = same_outputs("bert_small %s" % p, [plan, plan0], ins)
        if r is None:
            continue
        same, e, got = r
        verdict(same, "bert_small b%d s%d --int8 %s: GPU default vs GPUC_INT8_WS=0 bit-identical (rel L2 %.3g)" %
                (b, s, p, e))
        e_cpu = rel(got, output(os.path.join(work, "small_%s_cpu" % p)))
        verdict(e_cpu <= tol, "bert_small b%d s%d --int8 %s: GPU default vs gpuc run --cpu --int8: rel L2 %.3g (<= %g)" %
                (b, s, p, e_cpu, tol))


# the row groups off (passes/fuse_quantize_rows.c: LLaMA's GatedUnit quantizing its row among them)
UNFUSED = {"GPUC_NO_ROW_FUSION": "1"}
# the dequantizes in the row kernels even where the GEMM could take them
# (passes/fuse_quantize_rows.c dequant_in_gemm); with WS=0 too: the
# fifteenth session's default plan
ROW_DEQUANT = {"GPUC_INT8_ROW_DEQUANT": "1"}
CONFIGS = [("fp16", ["--fp16"], None), ("int8 WS=0", ["--int8", "--fp16"], dict(WS0, **ROW_DEQUANT)),
           ("int8 row-dequant", ["--int8", "--fp16"], ROW_DEQUANT), ("int8 default", ["--int8", "--fp16"], None),
           ("int8 unfused", ["--int8", "--fp16"], UNFUSED)]


def plan_file(name, tag):
    return os.path.join(work, "%s_%s.gpuc" % (name, tag.replace(" ", "_").replace("=", "")))


def bench(name, tag):
    """the plan's median latency (ms) by gpuc bench, its output kept in OUT; None on a failure"""
    rc, txt, _ = run([gpuc, "bench", plan_file(name, tag), "--iters", iters, "--profile"], timeout=120)
    with open(os.path.join(out, os.path.basename(plan_file(name, tag))[:-5] + "_bench.txt"), "w") as f:
        f.write(txt)
    lat = re.search(r"latency: median ([0-9.]+) ms", txt)
    if rc or not lat:
        verdict(False, "%s %s: bench failed: %s" % (name, tag, txt[-300:]))
        return None
    return float(lat.group(1))


def time_model(name, done):
    """one model's three plans (compiled: done[(name, tag)]): the int8 plans' outputs compared, each plan
    timed; the table's rows"""
    _, b, s = MODELS[name]
    res = {}
    for tag, _, _ in CONFIGS:
        rc, msg, _ = done[(name, tag)]
        if rc:
            verdict(False, "%s %s: compile failed: %s" % (name, tag, msg[-300:]))
            continue
        own, tma, lt, steps = plan_gemms(plan_file(name, tag))
        res[tag] = {"steps": steps, "gemms": "%d own (%d TMA), %d cuBLASLt" % (own, tma, lt)}
    if cpu_only:
        res = {t: dict(r, ms=None) for t, r in res.items()}
    else:
        for other, env in (("int8 WS=0", "GPUC_INT8_WS=0 GPUC_INT8_ROW_DEQUANT=1"),
                           ("int8 row-dequant", "GPUC_INT8_ROW_DEQUANT=1"), ("int8 unfused", "GPUC_NO_ROW_FUSION=1")):
            if other not in res or "int8 default" not in res:
                continue
            r = same_outputs("%s b%d s%d" % (name, b, s), [plan_file(name, "int8 default"), plan_file(name, other)],
                             inputs(name, b, s))
            if r:
                verdict(r[0], "%s b%d s%d --int8 --fp16: GPU default vs %s bit-identical (rel L2 %.3g)" %
                        (name, b, s, env, r[1]))
        for tag in res:
            res[tag]["ms"] = bench(name, tag)
    base, rows = res.get("fp16", {}).get("ms"), []
    for tag, r in res.items():
        ms = r["ms"]
        print("time %s b%d s%d %-13s %s; %d steps; int8 GEMMs %s" %
              (name, b, s, tag, "%.3f ms (%.2fx --fp16)" % (ms, base / ms) if ms and base else "not timed",
               r["steps"], r["gemms"]), flush=True)
        rows.append("| %s b%d s%d | %s | %s | %s | %d | %s |" %
                    (name, b, s, tag, "%.3f" % ms if ms else "-", "%.2fx" % (base / ms) if ms and base else "-",
                     r["steps"], r["gemms"]))
    old, new = res.get("int8 WS=0", {}).get("ms"), res.get("int8 default", {}).get("ms")
    if old and new:
        print("time %s: the default %.3f ms against GPUC_INT8_WS=0 %.3f ms: %.2fx" % (name, new, old, old / new),
              flush=True)
    return rows


def timed():
    """BERT-base and the LLaMA decoder: every plan compiled at once, then each model's checks and timings"""
    names = [n for n in ("bert", "llama") if os.path.exists(model_path(n))]
    t = time.time()
    done = parallel({(n, tag): ([gpuc, model_path(n), "--arch", arch, "-o", plan_file(n, tag)] + flags +
                                shape_args(*MODELS[n][1:]), env) for n in names for tag, flags, env in CONFIGS})
    print("time: %d compiles in %.0f s (in parallel)" % (len(done), time.time() - t), flush=True)
    rows = sum((time_model(n, done) for n in names), [])
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("| model | plan | median ms (bench --iters %s) | vs --fp16 | steps | int8 GEMMs |\n"
                "| --- | --- | --- | --- | --- | --- |\n" % iters)
        f.write("\n".join(rows) + "\n")


export_all((["bert_small"] if "small" in what else []) + (["bert", "llama"] if "time" in what else []))
if "small" in what:
    small()
if "time" in what:
    timed()
print("int8_default_check: %d failed" % fails)
print("PASS" if fails == 0 else "FAIL")
sys.exit(1 if fails else 0)
