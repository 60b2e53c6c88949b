#!/usr/bin/env python3
"""The zoo: public models from both PyTorch exporters through gpuc, checked
against PyTorch and timed beside it, in one run (docs/ZOO.md).

For each model (bench/zoo_models.py: torchvision, timm, Hugging Face configs;
random weights, no downloads) and each exporter (ts: TorchScript, opset 17;
dynamo: torch.onnx.export's default), with a dynamic batch axis (and sequence
axis for text):
  * compile `gpuc M.onnx OPT [--fp16] --shape NAME=B x ...` for every batch B,
    optimization level and precision (in parallel, --jobs);
  * GPU mode: run each plan on fresh random inputs and compare with PyTorch
    (fp32: TF32 off, rel L2 <= 1e-4; fp16: rel L2 against PyTorch fp32 within
    max(2e-2, 2 x PyTorch fp16's own rel L2 on the same input)), then time it
    (`gpuc bench`, CUDA-graph replays, median) beside PyTorch eager fp16 and
    torch.compile(mode="reduce-overhead") fp16 (channels_last for images),
    CUDA events, medians; a plan slower than torch.compile gets the top steps
    of `gpuc bench --profile`.
  * --cpu-only: no GPU: compile for --arch (sm_90) and check
    `gpuc run M.onnx --cpu` against PyTorch on the CPU at --cpu-batch.
Every (model, exporter, batch) is a row, failures with their reason. Rows go
to OUT/zoo.jsonl as they are made and OUT/zoo.md is rewritten after each
model, so a run stopped by a time limit still leaves its table.

usage: zoo.py --gpuc build/gpuc --out DIR [--models a,b|all|default] [--shard I/N]
              [--exporters ts,dynamo] [--batches 1,32] [--opts -O2[,-O3]]
              [--budget SECONDS] [--timeout-per-model SECONDS] [--quick] [--no-compile-baseline]
              [--cpu-only [--arch sm_90] [--cpu-batch 1]]
       zoo.py --table OUT1/zoo.jsonl OUT2/zoo.jsonl ... --out DIR   (merge shards)
"""
import argparse, concurrent.futures, contextlib, fcntl, json, math, os, re, shutil, signal, subprocess, sys, time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from output_check import first_error, rel_l2  # noqa: E402

FP32_LIMIT = 1e-4
FP16_FLOOR = 2e-2
START = time.time()


WORKER = ""  # "[w2] " in a --workers child


def log(*a):
    print("[%6.1fs] %s" % (time.time() - START, WORKER) + " ".join(str(x) for x in a), flush=True)


GPU_LOCK = None  # --gpu-lock: the file the --workers children share


@contextlib.contextmanager
def gpu_use(on=True):
    """With --workers, several zoo processes share one GPU, and every GPU use
    (a correctness run, PyTorch's forwards, a timing, -O3's block-size
    measurements) holds this lock, so a timing never overlaps another
    process's GPU work. Exports, compiles and torch.compile's compilation
    (CPU work) run beside it. (The first worker run, 2026-12-02, left the
    correctness runs unlocked: a 100-replay timing of a 0.5 ms plan lasts
    50 ms, which one other gpuc run could cover, and the same graph's ts and
    dynamo plans were timed up to 5x apart.)"""
    if not GPU_LOCK or not on:
        yield
        return
    with open(GPU_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class ModelTimeout(Exception):
    pass


def on_alarm(signum, frame):
    raise ModelTimeout("timed out (--timeout-per-model)")


# ---- gpuc ------------------------------------------------------------------

def shape_args(names_dims):
    out = []
    for name, dims in names_dims:
        out += ["--shape", "%s=%s" % (name, "x".join(str(d) for d in dims))]
    return out


def onnx_io(path):
    """Input names (in order) and output names of an exported model."""
    import onnx
    g = onnx.load(path, load_external_data=False).graph
    inits = {i.name for i in g.initializer}
    return [i.name for i in g.input if i.name not in inits], [o.name for o in g.output]


def gpuc_inspect(a, onnx, shapes, opt, fp16, timeout):
    """--inspect-only: the passes of `gpuc inspect --dump` instead of a
    compile (no NVRTC: seconds instead of minutes on a loaded CPU). A value
    left with a symbolic dim ('?') after the passes is what stops codegen
    ('has no static shape'); a lowering or NVRTC failure is not seen here."""
    cmd = [a.gpuc, "inspect", onnx, opt, "--dump"] + shape_args(shapes) + (["--fp16"] if fp16 else [])
    t = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(ok=False, error="gpuc inspect timed out after %ds" % timeout)
    res = dict(ok=r.returncode == 0, inspect_only=True, compile_s=round(time.time() - t, 2))
    if r.returncode:
        res["error"] = first_error(r.stderr + r.stdout)
        return res
    for line in r.stdout.splitlines():  # '  %691:f32[?,?] = Reshape(...)  # /m/h.2/attn/c_attn/Reshape'
        m = re.match(r"\s*%\S+:\w+\[([^\]]*)\]", line)
        if m and "?" in m.group(1):
            where = line.split("#", 1)[1].strip() if "#" in line else line.strip()
            res.update(ok=False, error="after the passes the output of '%s' has no static shape "
                       "(gpuc inspect --dump)" % where)
            break
    return res


def gpuc_compile(a, onnx, plan, shapes, opt, fp16, timeout):
    if a.inspect_only:
        return gpuc_inspect(a, onnx, shapes, opt, fp16, timeout)
    cmd = [a.gpuc, onnx, opt, "-o", plan] + shape_args(shapes)
    if fp16:
        cmd.append("--fp16")
    if a.cpu_only:
        cmd += ["--arch", a.arch]
    t = time.time()
    # -O3 measures block sizes and algorithms on the GPU: gpuc takes the
    # workers' lock itself for that part only (GPUC_GPU_LOCK), so the code
    # generation and NVRTC of one worker's -O3 plan overlap the others' work
    env = dict(os.environ, GPUC_GPU_LOCK=GPU_LOCK) if GPU_LOCK and opt == "-O3" else None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(ok=False, error="gpuc compile timed out after %ds" % timeout)
    res = dict(ok=r.returncode == 0, compile_s=round(time.time() - t, 2))
    if r.returncode:
        res["error"] = first_error(r.stderr + r.stdout)
    return res


def save_inputs(inputs, names, work):
    args = []
    for name, v in zip(names, inputs.values()):
        p = os.path.join(work, "in_%s.npy" % re.sub(r"[^A-Za-z0-9_.-]", "_", name))
        np.save(p, v)
        args += ["--input", "%s=%s" % (name, p)]
    return args


def gpuc_run(a, target, in_args, extra, work, timeout):
    """Runs a plan (or the model on the CPU reference: extra = ['--cpu', ...]);
    returns (first output as numpy, '') or (None, reason)."""
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    try:
        with gpu_use(not a.cpu_only):
            r = subprocess.run([a.gpuc, "run", target] + extra + in_args + ["--out", out],
                               capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "gpuc run timed out after %ds" % timeout
    if r.returncode:
        return None, first_error(r.stderr + r.stdout)
    files = sorted(f for f in os.listdir(out) if f.endswith(".npy")) if os.path.isdir(out) else []
    if len(files) != 1:
        return None, "gpuc run wrote %d outputs, expected 1" % len(files)
    return np.load(os.path.join(out, files[0])), ""


def gpuc_bench(a, plan, timeout, profile=False):
    cmd = [a.gpuc, "bench", plan, "--iters", str(a.iters), "--warmup", "10"]
    if profile:
        cmd.append("--profile")
    try:
        with gpu_use():
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "gpuc bench timed out"
    m = re.search(r"median ([0-9.]+) ms", r.stdout)
    if not m:
        return None, first_error(r.stderr + r.stdout)
    return float(m.group(1)), r.stdout


def profile_top(text, n=6):
    """The n slowest steps of a `gpuc bench --profile` table."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+(kernel|cublasLt|cudnn)\s+([0-9.]+)\s+([0-9.]+)%", line)
        if m:
            rows.append((float(m.group(3)), " ".join(line.split())))
    rows.sort(key=lambda r: -r[0])
    return [r[1][:200] for r in rows[:n]]


# ---- PyTorch -----------------------------------------------------------------

def torch_side(a, torch, zm, m, model, batch, inputs):
    """PyTorch's numbers for one (model, batch): fp32 reference output, fp16
    output error, eager fp16 and torch.compile fp16 times (GPU mode); with
    --workers also a function that times the compiled module again (else
    None; the caller drops it after gpuc's timings: see run_model)."""
    dev = "cpu" if a.cpu_only else "cuda"
    tin = [torch.from_numpy(v).to(dev) for v in inputs.values()]
    res, retime = {}, None
    with torch.no_grad():
        with gpu_use(not a.cpu_only):
            ref = m(*tin).float().cpu().numpy()
        if a.cpu_only:
            return ref, res, None
        image = not zm.is_text(model.spec)
        half = zm.half_copy(m)
        t16 = [t.half() if t.is_floating_point() else t for t in tin]
        if image:  # channels_last for images, as the baseline does
            half = half.to(memory_format=torch.channels_last)
            t16 = [t.to(memory_format=torch.channels_last) if t.dim() == 4 else t for t in t16]
        with gpu_use():
            out16 = half(*t16).float().cpu().numpy()
        res["torch_fp16_err"] = rel_l2(out16, ref)
        with gpu_use():
            res["torch_fp32_ms"] = zm.cuda_median_ms(lambda: m(*tin), a.torch_iters, warmup=5)
            res["eager_fp16_ms"] = zm.cuda_median_ms(lambda: half(*t16), a.torch_iters, warmup=5)
        if not a.no_compile_baseline:
            try:
                t0 = time.time()
                comp = torch.compile(half, mode="reduce-overhead", dynamic=False)
                comp(*t16)  # compiles (CPU) and runs once
                with gpu_use():  # CUDA-graph recording
                    for _ in range(2):
                        comp(*t16)
                    torch.cuda.synchronize()
                res["torch_compile_s"] = round(time.time() - t0, 1)
                timing = lambda: zm.cuda_median_ms(lambda: comp(*t16), a.torch_iters, warmup=5)
                with gpu_use():
                    res["compile_fp16_ms"] = timing()
                if GPU_LOCK:  # kept for a second timing: another worker's unlocked compile may overlap either
                    retime = timing
                else:
                    del comp
            except ModelTimeout:
                raise
            except Exception as ex:  # report, go on
                res["compile_error"] = zm._short(ex, 200)
        del half
    return ref, res, retime


def model_timeout(a, name):
    """--timeout-per-model, or this model's --timeout-for."""
    for item in filter(None, a.timeout_for.split(",")):
        n, _, sec = item.partition("=")
        if n == name:
            return float(sec)
    return a.timeout_per_model


def fp64_reference(a, torch, zm, m, inputs):
    """PyTorch's output in fp64 (a copy of the model, float inputs as
    double): asked only when a gpuc fp32 plan misses 1e-4, to tell gpuc's
    rounding from the fp32 rounding PyTorch's own output carries (deep
    random-weight nets amplify both). The array, or the reason it failed."""
    import copy
    dev = "cpu" if a.cpu_only else "cuda"
    try:
        with torch.no_grad(), gpu_use(not a.cpu_only):  # the copies are GPU work too
            m64 = copy.deepcopy(m).double()
            t64 = [torch.from_numpy(v).to(dev) for v in inputs.values()]
            t64 = [t.double() if t.is_floating_point() else t for t in t64]
            out = m64(*t64)
            out = (out[0] if isinstance(out, (tuple, list)) else out).cpu().numpy()
        del m64
        return out
    except Exception as e:  # report, go on
        return "fp64 reference failed: " + zm._short(e, 200)


# ---- one model -----------------------------------------------------------------

def plan_keys(a):
    """(opt, precision) pairs compiled per exporter and batch (--fp32-opt: the
    fp32 plans, a correctness check, at that one level)."""
    keys = [(o, p) for o in a.opts for p in a.precisions if p != "fp32" or not a.fp32_opt]
    if a.fp32_opt and "fp32" in a.precisions:
        keys.insert(0, (a.fp32_opt, "fp32"))
    return keys


def run_model(a, torch, zm, model, emit):
    work = os.path.join(a.work, model.name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    dev = "cpu" if a.cpu_only else "cuda"
    deadline = time.time() + model_timeout(a, model.name)
    left = lambda: max(5, int(deadline - time.time()))
    rows = {}  # (exporter, batch) -> row
    exported = {}
    t0 = time.time()
    with gpu_use(not a.cpu_only):  # building runs train-mode batches (BatchNorm statistics) on the GPU
        m = zm.build(model, dev)
    build_s = round(time.time() - t0, 1)
    for ex in a.exporters:
        path = os.path.join(work, "%s_%s.onnx" % (model.name, ex))
        t0 = time.time()
        try:
            note = zm.export(m, model, ex, path)
            names, outs = onnx_io(path)
            if len(names) != len(model.spec) or len(outs) != 1:
                raise RuntimeError("the exported model has inputs %s and %d outputs; expected %d inputs "
                                   "(%s) and 1 output" % (names, len(outs), len(model.spec), list(model.spec)))
            exported[ex] = (path, names, note)
            log("  export %s: %.1fs %s" % (ex, time.time() - t0, note))
        except ModelTimeout:
            raise
        except Exception as e:
            err = "export failed: " + zm._short(e)
            log("  export %s: %s" % (ex, err))
            for b in a.batches:
                rows[(ex, b)] = dict(model=model.name, family=model.family, exporter=ex, batch=b,
                                     export_error=err)
        with gpu_use(not a.cpu_only):
            m = m.to(dev)
    # every plan, compiled in parallel
    jobs = []
    for ex, (path, names, note) in exported.items():
        for b in a.batches:
            shapes = [(n, (b,) + tuple(s[0])) for n, s in zip(names, model.spec.values())]
            row = dict(model=model.name, family=model.family, exporter=ex, batch=b, build_s=build_s)
            if note:
                row["note"] = note
            rows[(ex, b)] = row
            for opt, prec in plan_keys(a):
                plan = os.path.join(work, "%s_%s_b%d%s_%s.gpuc" % (model.name, ex, b, opt, prec))
                jobs.append((ex, b, opt, prec, path, plan, shapes))
    # -O3 measures block sizes on the GPU (not with --cpu-only): those plans
    # compile one at a time, after the others (their measuring holds the lock)
    tuned = [j for j in jobs if j[2] == "-O3" and not a.cpu_only]
    for group, width in (([j for j in jobs if j not in tuned], a.jobs), (tuned, 1)):
        with concurrent.futures.ThreadPoolExecutor(max_workers=width) as pool:
            futs = {pool.submit(gpuc_compile, a, j[4], j[5], j[6], j[2], j[3] == "fp16", left()): j
                    for j in group}
            for f in concurrent.futures.as_completed(futs):
                ex, b, opt, prec, path, plan, shapes = futs[f]
                rows[(ex, b)]["%s_%s" % (opt, prec)] = dict(f.result(), plan=plan)
    log("  compiled %d plans" % len(jobs))
    # PyTorch and the checks, batch by batch
    for b in a.batches:
        if time.time() > deadline:
            raise ModelTimeout("timed out (--timeout-per-model) before batch %d" % b)
        inputs = zm.make_inputs(model.spec, b, np.random.default_rng(1234 + b))
        check_here = (not a.cpu_only) or b == a.cpu_batch
        ref = tres = retime = None
        if check_here:
            try:
                ref, tres, retime = torch_side(a, torch, zm, m, model, b, inputs)
            except ModelTimeout:
                raise
            except Exception as e:
                tres = dict(torch_error=zm._short(e))
        for ex in a.exporters:
            row = rows[(ex, b)]
            if tres:
                row.update(tres)
            if ex not in exported or ref is None:
                continue
            path, names, _ = exported[ex]
            in_args = save_inputs(inputs, names, work)
            shapes = [(n, v.shape) for n, v in zip(names, inputs.values())]
            if a.cpu_only:  # the CPU reference on the exported model
                out, err = gpuc_run(a, path, in_args, ["--cpu"] + shape_args(shapes), work, left())
                row["cpu_ref_rel_l2"] = rel_l2(out, ref) if out is not None else None
                if err:
                    row["cpu_ref_error"] = err
                continue
            for opt, prec in plan_keys(a):
                c = row["%s_%s" % (opt, prec)]
                if not c["ok"]:
                    continue
                out, err = gpuc_run(a, c["plan"], in_args, [], work, left())
                if out is None:
                    c["run_error"] = err
                    continue
                e = rel_l2(out, ref)
                c["rel_l2"] = e
                if prec == "fp32":
                    c["pass"] = e <= FP32_LIMIT
                    c["limit"] = FP32_LIMIT
                    if not c["pass"]:  # how far PyTorch's own fp32 is from fp64, beside gpuc's
                        if "ref64" not in row:
                            row["ref64"] = fp64_reference(a, torch, zm, m, inputs)
                        r64 = row["ref64"]
                        if isinstance(r64, np.ndarray):
                            row["torch_fp32_vs_fp64"] = rel_l2(ref, r64)
                            c["rel_l2_fp64"] = rel_l2(out, r64)
                        else:
                            row["fp64_error"] = r64
                else:
                    tf = row.get("torch_fp16_err", float("inf"))
                    c["limit"] = max(FP16_FLOOR, 2 * tf) if math.isfinite(tf) else FP16_FLOOR
                    c["pass"] = e <= c["limit"]
                if prec not in a.timed:
                    continue
                ms, text = gpuc_bench(a, c["plan"], left())
                if ms is None:
                    c["bench_error"] = text
                    continue
                c["ms"] = ms
                cms = row.get("compile_fp16_ms")
                if prec == "fp16" and cms and ms > cms and retime:
                    # with --workers, torch.compile's first call (compiling, autotuning, the first forward) is
                    # the one GPU use outside the lock, and it may have landed in either timing: both sides
                    # again, each side's better median kept
                    ms2, _ = gpuc_bench(a, c["plan"], left())
                    with gpu_use():
                        cms2 = retime()
                    c["ms"] = ms = min(ms, ms2) if ms2 else ms
                    row["compile_fp16_ms"] = cms = min(cms, cms2)
                    c["retimed"] = True
                if prec == "fp16" and cms and ms > cms:
                    _, prof = gpuc_bench(a, c["plan"], left(), profile=True)
                    c["profile_top"] = profile_top(prof or "")
        retime = None  # the compiled module and its CUDA graphs go
        for ex in a.exporters:
            rows[(ex, b)].pop("ref64", None)
            emit(rows[(ex, b)])
    if not a.keep_work:
        shutil.rmtree(work, ignore_errors=True)  # ONNX files of big models are hundreds of MB


# ---- the table -------------------------------------------------------------------

def cell_check(c, cpu_only):
    if c is None:
        return "-"
    if not c.get("ok"):
        return "no compile"
    if cpu_only:
        return "passes*" if c.get("inspect_only") else "ok"
    if c.get("run_error"):
        return "no run"
    if "rel_l2" not in c:
        return "compiled"
    return ("%.1e" % c["rel_l2"]) + ("" if c.get("pass") else " FAIL")


def strip_path(msg):
    """'gpuc: /tmp/.../m.onnx: node ...' -> 'node ...' (the row names the model)."""
    return re.sub(r"^gpuc: [^ ]+\.(onnx|gpuc): ", "", msg)


def reasons(r, a_keys, seen=None):
    """Why a row is not all good, each distinct message once."""
    seen = set() if seen is None else seen
    out = []

    def add(prefix, msg):
        msg = strip_path(msg)
        if msg and msg not in seen:
            seen.add(msg)
            out.append(prefix + msg)
    for k in ("export_error", "torch_error", "cpu_ref_error", "compile_error", "note", "skipped"):
        if r.get(k):
            add("torch.compile: " if k == "compile_error" else "", r[k])
    for k in a_keys:
        c = r.get(k) or {}
        for f in ("error", "run_error", "bench_error"):
            if c.get(f):
                add("%s: " % k.replace("_", " "), c[f])
        if c.get("pass") is False:
            msg = "%s: rel L2 %.2e over the limit %.2e" % (k.replace("_", " "), c["rel_l2"], c["limit"])
            if c.get("rel_l2_fp64") is not None and r.get("torch_fp32_vs_fp64") is not None:
                msg += " (against fp64: gpuc %.2e, PyTorch fp32 %.2e)" % (c["rel_l2_fp64"], r["torch_fp32_vs_fp64"])
            out.append(msg)
    if r.get("fp64_error"):
        add("", r["fp64_error"])
    return "; ".join(out).replace("|", "/")


def fmt(v, f="%.3f"):
    if not isinstance(v, (int, float)):
        return "-"
    return f % v if math.isfinite(v) else str(v)


def plan_cols(rows):
    keys = []
    for r in rows:
        for k in r:
            if re.match(r"-O\d_fp(32|16)$", k) and k not in keys:
                keys.append(k)
    return sorted(keys, key=lambda k: (k[:3], k[4:] != "fp32"))


def speed_key(keys):
    """The fp16 plan the speedup is taken from: the highest level run."""
    f16 = [k for k in keys if k.endswith("fp16")]
    return f16[-1] if f16 else None


def write_table(rows, out_dir, header):
    cpu_only = any(r.get("mode") == "cpu-only" for r in rows)
    keys = plan_cols(rows)
    sk = speed_key(keys)
    L = [header, ""]
    if cpu_only:  # one line per (model, exporter): every batch's plans side by side
        batches = sorted({r["batch"] for r in rows})
        cols = ["b%d %s" % (b, k.replace("_", " ")) for b in batches for k in keys]
        L += ["ok: the plan was compiled for --arch (nothing launched); passes*: --inspect-only, the "
              "passes and the static-shape rule of `gpuc inspect --dump` held (no NVRTC compile); "
              "CPU reference: `gpuc run M.onnx --cpu` at --cpu-batch against PyTorch fp32 on the CPU", ""]
        L += ["| model | family | exporter | " + " | ".join(cols) + " | CPU reference rel L2 vs PyTorch | reasons |",
              "|" + " --- |" * (5 + len(cols))]
        groups = {}
        for r in rows:
            groups.setdefault((r["model"], r["exporter"]), {})[r["batch"]] = r
        for (model, ex), by_b in groups.items():
            any_r = next(iter(by_b.values()))
            cells = [cell_check(by_b[b].get(k), True) if b in by_b else "-" for b in batches for k in keys]
            errs = [("%.1e" % r["cpu_ref_rel_l2"]) + ("" if r["cpu_ref_rel_l2"] <= FP32_LIMIT else " FAIL")
                    for r in by_b.values() if r.get("cpu_ref_rel_l2") is not None]
            why, seen = [], set()
            for b in batches:
                if b in by_b:
                    msg = reasons(by_b[b], keys, seen)
                    if msg:
                        why.append("b%d: %s" % (b, msg))
            L.append("| %s | %s | %s | %s | %s | %s |" % (model, any_r.get("family", ""), ex, " | ".join(cells),
                                                    ", ".join(errs) or "-", "; ".join(why)))
    else:
        L += ["| model | exporter | batch | " + " | ".join("%s rel L2" % k.replace("_", " ") for k in keys)
              + " | PyTorch fp16 rel L2 | " + " | ".join("gpuc %s ms" % k.replace("_", " ") for k in keys)
              + " | eager fp16 ms | torch.compile fp16 ms | speedup vs torch.compile | reasons |",
              "|" + " --- |" * (8 + 2 * len(keys))]
        for r in rows:
            c = r.get(sk) or {}
            sp = r["compile_fp16_ms"] / c["ms"] if c.get("ms") and r.get("compile_fp16_ms") else None
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["model"], r["exporter"], r["batch"],
                " | ".join(cell_check(r.get(k), False) for k in keys),
                fmt(r.get("torch_fp16_err"), "%.1e"),
                " | ".join(fmt((r.get(k) or {}).get("ms")) for k in keys),
                fmt(r.get("eager_fp16_ms")), fmt(r.get("compile_fp16_ms")),
                fmt(sp, "%.2fx"), reasons(r, keys)))
    L += ["", "## Summary", ""] + summary(rows, keys, sk, cpu_only)
    prof = [r for r in rows if any((r.get(k) or {}).get("profile_top") for k in keys)]
    if prof:
        L += ["", "## Slower than torch.compile: top steps of `gpuc bench --profile`", ""]
        for r in prof:
            for k in keys:
                top = (r.get(k) or {}).get("profile_top")
                if top:
                    L += ["%s %s batch %d %s (%.3f ms vs torch.compile %.3f ms):" % (
                        r["model"], r["exporter"], r["batch"], k, r[k]["ms"], r["compile_fp16_ms"]), "```"]
                    L += top + ["```"]
    with open(os.path.join(out_dir, "zoo.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    return L


def summary(rows, keys, sk, cpu_only):
    L = []
    models = sorted({r["model"] for r in rows})
    L.append("%d models, %d rows" % (len(models), len(rows)))
    for ex in sorted({r["exporter"] for r in rows}):
        for b in sorted({r["batch"] for r in rows}):
            sel = [r for r in rows if r["exporter"] == ex and r["batch"] == b]
            if not sel:
                continue
            parts = []
            for k in keys:
                cs = [r.get(k) or {} for r in sel]
                n_ok = sum(1 for c in cs if c.get("ok"))
                s = "%s compiles %d/%d" % (k.replace("_", " "), n_ok, len(sel))
                if not cpu_only:
                    s += ", correct %d/%d" % (sum(1 for c in cs if c.get("pass")), len(sel))
                parts.append(s)
            if cpu_only:
                cr = [r for r in sel if "cpu_ref_rel_l2" in r or "cpu_ref_error" in r]
                if cr:
                    good = sum(1 for r in cr if r.get("cpu_ref_rel_l2") is not None
                               and r["cpu_ref_rel_l2"] <= FP32_LIMIT)
                    parts.append("CPU reference within %.0e: %d/%d" % (FP32_LIMIT, good, len(cr)))
            L.append("- %s batch %d: %s" % (ex, b, "; ".join(parts)))
    if not cpu_only and sk:
        for ex in sorted({r["exporter"] for r in rows}):
            for b in sorted({r["batch"] for r in rows}):
                sp = [r["compile_fp16_ms"] / r[sk]["ms"] for r in rows
                      if r["exporter"] == ex and r["batch"] == b and r.get("compile_fp16_ms")
                      and (r.get(sk) or {}).get("ms") and r[sk].get("pass")]
                if sp:
                    g = math.exp(sum(math.log(x) for x in sp) / len(sp))
                    L.append("- speedup gpuc %s vs torch.compile fp16, %s batch %d: geometric mean %.2fx over %d "
                             "correct models, %d at least as fast" % (sk.replace("_", " "), ex, b, g, len(sp),
                                                                       sum(1 for x in sp if x >= 1)))
    return L


def load_rows(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(l) for l in f if l.strip()]
    return rows


# ---- main ---------------------------------------------------------------------------

def child_argv(argv, drop):
    """sys.argv without the options in drop (and their values)."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        key = x.split("=", 1)[0]
        if key in drop:
            skip = "=" not in x
            continue
        out.append(x)
    return out


def claim_next(queue):
    """--workers' shared queue: (index, name) of the next model no worker has
    taken, or None when all are taken."""
    with open(queue, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        q = json.load(f)
        if q["next"] >= len(q["names"]):
            return None
        k = q["next"]
        q["next"] = k + 1
        f.seek(0)
        f.truncate()
        json.dump(q, f)
        return k, q["names"][k]


def run_workers(a, names):
    """--workers N: N child zoo processes taking models from one queue, sharing
    one GPU lock; their rows are merged into OUT/zoo.jsonl and OUT/zoo.md."""
    w = min(a.workers, len(names))
    os.makedirs(a.work, exist_ok=True)
    lock = os.path.join(a.work, "gpu.lock")
    base = child_argv(sys.argv, {"--workers", "--shard", "--models", "--out", "--work", "--jobs",
                                 "--budget", "--gpu-lock", "--worker-tag", "--shared-jsonl", "--queue"})
    jobs = max(1, (os.cpu_count() or 2) // w)
    budget = a.budget - (time.time() - START)
    # each worker appends its rows to OUT/zoo.jsonl as it makes them, so a run
    # stopped by the device's time limit keeps them (zoo.py --table remakes zoo.md)
    shared = os.path.join(a.out, "zoo.jsonl")
    # one queue of models in --models order: a worker takes the next one when
    # it is free (big models first in the list keep the end of a run even)
    queue = os.path.join(a.work, "queue.json")
    with open(queue, "w") as f:
        json.dump(dict(names=names, next=0), f)
    log("queue of %d models, %d workers: %s" % (len(names), w, ",".join(names)))
    procs, outs = [], []
    for k in range(w):
        out = os.path.join(a.work, "w%d" % (k + 1))
        shutil.rmtree(out, ignore_errors=True)
        outs.append(os.path.join(out, "zoo.jsonl"))
        cmd = [sys.executable] + base + ["--models", ",".join(names), "--queue", queue, "--out", out,
                                         "--work", os.path.join(a.work, "w%d_work" % (k + 1)),
                                         "--jobs", str(jobs), "--budget", "%.0f" % budget,
                                         "--gpu-lock", lock, "--worker-tag", str(k + 1),
                                         "--shared-jsonl", shared]
        procs.append(subprocess.Popen(cmd))
    for p in procs:
        p.wait()
    rows = load_rows([o for o in outs if os.path.exists(o)])
    header = "# Zoo gpu, %d workers: %s\n\ncommand: %s" % (
        w, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), " ".join(sys.argv))
    print("\n".join(write_table(rows, a.out, header)))
    bad = [k + 1 for k, p in enumerate(procs) if p.returncode]
    if bad:
        raise SystemExit("zoo.py: worker(s) %s exited non-zero" % bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpuc", default="build/gpuc")
    ap.add_argument("--out", required=True, help="zoo.jsonl and zoo.md go here")
    ap.add_argument("--work", default="/tmp/gpuc_zoo", help="ONNX files and plans (removed per model)")
    ap.add_argument("--keep-work", action="store_true", help="leave each model's ONNX files and plans in "
                    "--work (tests/gpu/xformer_ab.py compiles and times them again)")
    ap.add_argument("--models", default="default", help="comma list, 'all' or 'default'; --list shows them")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--shard", default="1/1", help="I/N: the I-th of N slices of --models")
    ap.add_argument("--exporters", default="ts,dynamo")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--opts", default="-O2", help="gpuc levels, e.g. -O2,-O3")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--timed", default="fp32,fp16", help="precisions whose plans `gpuc bench` times "
                    "(the others are only checked)")
    ap.add_argument("--fp32-opt", help="compile the fp32 plans at this level only (e.g. -O2 with "
                    "--opts -O3: fp32 checks correctness, fp16 is timed)")
    ap.add_argument("--budget", type=float, default=540, help="seconds for the whole run: "
                    "no model is started after budget - timeout-per-model/2")
    ap.add_argument("--timeout-per-model", type=float, default=240)
    ap.add_argument("--timeout-for", default="", help="NAME=SECONDS[,...]: a longer (or shorter) limit for "
                    "these models (maxvit_t: torch.compile's compilation at batch 32 took over 380 s)")
    ap.add_argument("--quick", action="store_true", help="fewer timing iterations, no torch.compile")
    ap.add_argument("--no-compile-baseline", action="store_true", help="skip torch.compile")
    ap.add_argument("--iters", type=int, default=100, help="gpuc bench iterations")
    ap.add_argument("--torch-iters", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=min(8, max(1, (os.cpu_count() or 2) // 2)))
    ap.add_argument("--cpu-only", action="store_true",
                    help="no GPU: compile for --arch, check gpuc run --cpu against PyTorch on the CPU")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--cpu-batch", type=int, default=1, help="--cpu-only: the batch checked on the CPU")
    ap.add_argument("--inspect-only", action="store_true", help="--cpu-only: `gpuc inspect --dump` "
                    "(passes, static shapes) instead of compiling; cells say passes*")
    ap.add_argument("--table", nargs="+", help="only merge these zoo.jsonl files into OUT/zoo.md")
    ap.add_argument("--workers", type=int, default=1, help="run the models in N processes at once "
                    "(exports and compiles overlap); on the GPU every GPU use holds one lock, so no "
                    "timing overlaps other GPU work")
    ap.add_argument("--gpu-lock", help=argparse.SUPPRESS)   # set by --workers for its children
    ap.add_argument("--worker-tag", help=argparse.SUPPRESS)
    ap.add_argument("--shared-jsonl", help=argparse.SUPPRESS)
    ap.add_argument("--queue", help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.table:
        print("\n".join(write_table(load_rows(a.table), a.out, "# Zoo (merged: %s)" % ", ".join(a.table))))
        return
    import torch
    import zoo_models as zm
    if a.list:
        for m in zm.MODELS:
            print("%-28s %-16s %s" % (m.name, m.family, {k: v[0] for k, v in m.spec.items()}))
        return
    if a.inspect_only and not a.cpu_only:
        raise SystemExit("zoo.py: --inspect-only goes with --cpu-only")
    if a.quick:
        a.iters, a.torch_iters, a.no_compile_baseline = 30, 20, True
    a.exporters = a.exporters.split(",")
    a.batches = [int(b) for b in a.batches.split(",")]
    a.opts = a.opts.split(",")
    a.precisions = a.precisions.split(",")
    a.timed = a.timed.split(",")
    a.gpuc = os.path.abspath(a.gpuc)
    names = [m.name for m in zm.MODELS] if a.models == "all" else \
        zm.DEFAULT if a.models == "default" else a.models.split(",")
    bad = [n for n in names if n not in zm.BY_NAME]
    if bad:
        raise SystemExit("zoo.py: unknown model(s) %s; --list shows them" % ",".join(bad))
    i, n = (int(x) for x in a.shard.split("/"))
    names = names[i - 1::n]
    global GPU_LOCK, WORKER
    GPU_LOCK = a.gpu_lock
    WORKER = "[w%s] " % a.worker_tag if a.worker_tag else ""
    if a.workers > 1:
        run_workers(a, names)
        return
    # fp32 is fp32 on both sides: no TF32 in PyTorch (gpuc's fp32 plans use FMA math)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    if a.cpu_only:
        torch.set_num_threads(max(1, a.jobs))
    mode = "cpu-only" if a.cpu_only else "gpu"
    dev = "cpu (references), gpuc --arch %s" % a.arch if a.cpu_only else torch.cuda.get_device_name()
    header = ("# Zoo %s: %s, torch %s, %s\n\ncommand: %s" % (
        mode, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), torch.__version__, dev,
        " ".join(sys.argv)))
    jl = os.path.join(a.out, "zoo.jsonl")
    rows = []

    def emit(row):
        row["mode"] = mode
        rows.append(row)
        for path in [jl] + ([a.shared_jsonl] if a.shared_jsonl else []):
            with open(path, "a") as f:  # a worker's rows also go to the parent's file, whole lines
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write(json.dumps(row) + "\n")
                fcntl.flock(f, fcntl.LOCK_UN)

    signal.signal(signal.SIGALRM, on_alarm)
    if a.queue:
        log("zoo: models from the shared queue, %s" % mode)
        order = iter(lambda: claim_next(a.queue), None)
    else:
        log("zoo: %d models (%s), %s" % (len(names), ",".join(names), mode))
        order = enumerate(names)
    for k, name in order:
        model = zm.BY_NAME[name]
        if time.time() - START > a.budget - a.timeout_per_model / 2:
            for ex in a.exporters:
                for b in a.batches:
                    emit(dict(model=name, family=model.family, exporter=ex, batch=b,
                              skipped="not run: --budget %.0fs spent" % a.budget))
            continue
        log("== %s (%d/%d)" % (name, k + 1, len(names)))
        n_before = len(rows)
        signal.alarm(int(model_timeout(a, name)))
        try:
            run_model(a, torch, zm, model, emit)
        except Exception as e:  # a timeout or a crash of this model: its rows say why
            done = {(r["exporter"], r["batch"]) for r in rows[n_before:]}
            for ex in a.exporters:
                for b in a.batches:
                    if (ex, b) not in done:
                        emit(dict(model=name, family=model.family, exporter=ex, batch=b,
                                  skipped=zm._short(e)))
        finally:
            signal.alarm(0)
        if not a.cpu_only:
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        write_table(rows, a.out, header)
    L = write_table(rows, a.out, header)
    if not a.worker_tag:  # a --workers child's rows are printed by the parent
        print("\n".join(L))


if __name__ == "__main__":
    main()
