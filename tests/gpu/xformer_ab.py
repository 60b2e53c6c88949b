"""Before/after of passes/attention_views.c on the GPU machine, for plans
bench/zoo.py just compiled (run by tests/gpu/xformer_check.sh after the zoo):
for each model's TorchScript export at batch 32, the -O2 --fp16 plan as
compiled ("after") and the same compile with GPUC_NO_ATTENTION_VIEWS=1
("before": the Split/Transpose copies and three Q/K/V GEMMs kept); with
EXPORTER and SWITCH given, that export and that variable instead
(dynamo GPUC_NO_CAUSAL_MASK: passes/causal_mask.c's float-min masks). Each
inspected (steps, bytes moved from the IR's cost model) and timed with `gpuc
bench`; the after plan's slowest steps from `gpuc bench --profile`. The
before plans compile in parallel; benches stop when XFORMER_AB_BUDGET
seconds (default 90) are spent. One line a model:
  AB gpt2 ts b32: steps 143 -> 95, MB moved 3333 -> 2276, gpuc 2.190 -> 1.900 ms
AB_OFF names another pass's off switch for the "before" compile when no
SWITCH is given (tests/gpu/patchify_check.sh: AB_OFF=GPUC_NO_PATCHIFY).
usage: xformer_ab.py GPUC WORK_DIR MODELS(comma list) [BATCH [EXPORTER SWITCH]]"""
import concurrent.futures
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import zoo_models as zm  # noqa: E402

gpuc, work, models = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 32
exporter, switch = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 6 else (
    "ts", os.environ.get("AB_OFF", "GPUC_NO_ATTENTION_VIEWS"))
deadline = time.time() + float(os.environ.get("XFORMER_AB_BUDGET", "90"))


def run(cmd, env=None, timeout=240):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        return 124, "timed out: " + " ".join(cmd)


def plan_cost(plan):
    rc, out = run([gpuc, "inspect", plan])
    m = re.search(r"schedule \((\d+) steps; (\d+) bytes moved", out)
    return (int(m.group(1)), int(m.group(2))) if rc == 0 and m else (None, None)


def bench(plan, profile=False):
    rc, out = run([gpuc, "bench", plan, "--iters", "100", "--warmup", "10"] + (["--profile"] if profile else []))
    m = re.search(r"median ([0-9.]+) ms", out)
    return (float(m.group(1)) if m else None), out


def top_steps(text, n=8):
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+(kernel|cublasLt|cudnn)\s+([0-9.]+)\s+([0-9.]+)%", line)
        if m:
            rows.append((float(m.group(3)), " ".join(line.split())))
    rows.sort(key=lambda r: -r[0])
    return [r[1][:220] for r in rows[:n]]


# the before plans, compiled in parallel (one NVRTC process each)
jobs = {}
for name in models:
    model = zm.BY_NAME[name]
    onnx = os.path.join(work, name, "%s_%s.onnx" % (name, exporter))
    after = os.path.join(work, name, "%s_%s_b%d-O2_fp16.gpuc" % (name, exporter, batch))
    before = os.path.join(work, name, "%s_%s_b%d-O2_fp16_%s.gpuc" % (name, exporter, batch, switch.lower()))
    if not (os.path.exists(onnx) and os.path.exists(after)):
        print("AB %s %s b%d: SKIP (the zoo run left no model or plan in %s)" % (name, exporter, batch, work))
        continue
    shapes = []
    for k, (shape, _, _) in model.spec.items():
        shapes += ["--shape", "%s=%s" % (k, "x".join(str(d) for d in (batch,) + tuple(shape)))]
    env = dict(os.environ, **{switch: "1"})
    jobs[name] = (after, before, [gpuc, onnx, "-O2", "--fp16", "-o", before] + shapes, env)
with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
    done = {name: pool.submit(run, j[2], j[3]) for name, j in jobs.items()}
    compiled = {name: f.result() for name, f in done.items()}

bad = 0
for name, (after, before, _, _) in jobs.items():
    rc, out = compiled[name]
    if rc:
        bad += 1
        print("AB %s %s b%d: FAIL compiling the before plan: %s" % (name, exporter, batch, out.strip()[-300:]))
        continue
    if time.time() > deadline:
        print("AB %s %s b%d: SKIP (XFORMER_AB_BUDGET spent)" % (name, exporter, batch))
        continue
    (s0, b0), (s1, b1) = plan_cost(before), plan_cost(after)
    t0, _ = bench(before)
    t1, prof = bench(after, profile=True)
    fmt = lambda v, f: f % v if v is not None else "?"
    print("AB %s %s b%d (%s=1 before): steps %s -> %s, MB moved %s -> %s, gpuc %s -> %s ms" % (
        name, exporter, batch, switch, s0, s1, fmt(b0 and b0 / 1e6, "%.0f"), fmt(b1 and b1 / 1e6, "%.0f"), fmt(t0, "%.3f"),
        fmt(t1, "%.3f")))
    for line in top_steps(prof):
        print("    " + line)
    if t1 is None or s1 is None:
        bad += 1
sys.exit(1 if bad else 0)
