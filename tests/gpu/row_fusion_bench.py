"""The --int8 / --fp8 row fusions on the GPU (passes/fuse_quantize_rows.c,
codegen/lower_row_group.c), and the compression flags timed side by side.

  check   the fused plans against the same plans compiled without the row
          groups (GPUC_NO_ROW_FUSION=1) on the GPU, on the same fresh
          inputs: the fused kernels round every intermediate as the
          unfused ones store it, so the outputs should be the same bits
          (reported); bound rel L2 1e-5 (fp32) / 1e-3 (fp16). And against
          the CPU reference (`gpuc run MODEL --cpu` with the same flags):
          ffn_block 1e-3 (fp32; 2e-3 for fp8, whose e4m3 steps an ulp of
          LayerNorm can flip: 1.33e-3 on the H200, 2026-12-03, with the
          fused and unfused plans bit for bit equal) and 1e-2 (fp16), the tiny
          zoo BERT and GPT-2 (LayerNorm, GELU, attention heads, GPT-2's
          Conv1D reshapes) 2e-2 / 5e-2 for int8, 4e-2 / 8e-2 for fp8 (an
          ulp upstream may move an activation one quantization step). The
          fused plans must hold fused row kernels (gpuc inspect). NaN fails.
  bert    BERT-base (HF BertConfig() defaults, random seeded weights,
          TorchScript exporter) at b32 s128, and
  llama   a LLaMA-style decoder of GPT-2 small's size (hidden 768, 12
          layers, 12 heads, 4 KV heads, SwiGLU 2048; RMSNorm, rotary) at
          b8 s512, timed as gpt2 is;
  gpt2    GPT-2 small (GPT2Config() defaults) at b8 s512: each compiled
          --fp16, --int8 --fp16, --fp8 --fp16, --prune 2:4 --fp16 and
          --int8 --fp16 without the row groups, then --prune 2:4 --fp16
          at -O3 (2:4 GEMMs sparse or dense by timing), timed by
          `gpuc bench --iters 100 --profile` in this one run: latency,
          speed against --fp16 (issue 12's target for --int8: >= 1.4x), the
          plan's bytes (gpuc inspect) and the profile's top steps.

  round   issue 12's BERT-base b32 s128 round (bert_round below): --fp16,
          --int8 --fp16 with and without the row groups, --prune 2:4 --fp16
          at -O2 (cuSPARSELt's default configuration; GPUC_SPARSE_SEARCH=1:
          its search at load) and at -O3 (the searched configuration kept in
          the plan, sparse vs dense per GEMM), timed by bench --profile with
          the row kernels' times and bandwidth, and each -O2 plan's graph at
          b2 against `gpuc run --cpu` with the same flags (int8-ws, int8-ws-own,
          int8-tma, int8-tma-own: the warp-specialized int8 GEMM,
          GPUC_INT8_WS=1 or =tma, where the default takes gpuc's kernel / for
          every int8 GEMM; the -own plans' b2 outputs must be int8-own's bit
          for bit). Compiles and CPU
          references run in parallel (about 3-4 minutes on the H200 machine).
          BERT_ONNX=PATH uses an exported model instead of exporting one.

ROWFUSE_CONFIGS=fp16,int8,... times only those configurations (tags of
CONFIGS below).

usage: row_fusion_bench.py GPUC MODELS_DIR ZOO_DIR WORK [check] [bert] [gpt2] [llama] [round]
Prints one line per case and PASS/FAIL; exit 1 on a failure. ARCH=sm_XX
compiles for another target than the GPU's; CPU_ONLY=1 compiles and runs
only the CPU side (no GPU needed: to try the script)."""
import os
import re
import subprocess
import sys
import time

import numpy as np

from hf_export import export  # tests/gpu/hf_export.py: the Hugging Face models, exported

gpuc, models, zoo, work = sys.argv[1:5]
what = sys.argv[5:] or ["check", "bert", "gpt2"]
arch = os.environ.get("ARCH", "native")
cpu_only = os.environ.get("CPU_ONLY") == "1"
os.makedirs(work, exist_ok=True)
failed = passed = 0


def run(cmd, env=None, log=None, timeout=None):
    e = dict(os.environ)
    e.update(env or {})
    t = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
        rc, out = r.returncode, (r.stdout + r.stderr).strip()
    except subprocess.TimeoutExpired:  # a hung kernel (GPUC_INT8_WS's ring) must not take the round with it
        rc, out = 124, "timed out after %s s" % timeout
    if log:
        with open(os.path.join(work, log), "w") as f:
            f.write(" ".join(cmd) + "\n" + out + "\n")
    return rc, out, time.time() - t


def verdict(ok, line):
    global failed, passed
    passed += bool(ok)
    failed += not ok
    print("%s  %s" % (line, "ok" if ok else "FAIL"), flush=True)


def rel(a, b):
    a = a.astype(np.float64).ravel(); b = b.astype(np.float64).ravel()
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("nan")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


UNFUSED = {"GPUC_NO_ROW_FUSION": "1"}


def fused_steps(listing):
    """kernel steps that are row groups: a quantize inside a norm or
    elementwise kernel, or a norm that dequantizes"""
    n = 0
    for line in listing.splitlines():
        if not re.match(r"^\s+\d+ kernel ", line):
            continue
        name = line.split()[2]
        covers = line.split("<-", 1)[-1]
        quant_in = ("Quantize" in name and "QuantizeRows" not in name) or \
                   (("Normalization" in name or "GatedUnit" in name) and ".quantize" in covers)
        dq_in = "Normalization" in name and ".dequantize" in covers
        n += quant_in or dq_in
    return n


def inputs_for(plan, d, rng):
    _, listing, _ = run([gpuc, "inspect", plan])
    args = []
    for m in re.finditer(r"^\s*input\s+(\S+): (\S+) (\S+)", listing, re.M):
        name, dims, dt = m.group(1), [int(x) for x in m.group(2).split("x")], m.group(3)
        f = os.path.join(d, name + ".npy")
        if dt == "i64" and "mask" in name:
            x = np.ones(dims, np.int64)
            x[..., dims[-1] * 3 // 4:] = 0
        elif dt == "i64":
            x = rng.integers(0, 64, dims).astype(np.int64)  # the tiny zoo models' vocabulary is 64+
        else:
            x = rng.uniform(-1, 1, dims).astype(np.float32)
        np.save(f, x)
        args += ["--input", "%s=%s" % (name, f)]
    return args


def outputs(d):
    return {f: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))} if os.path.isdir(d) else {}


def check_model(tag, path, shapes, prec, fp16, tol_cpu):
    flags = (["--int8"] if prec == "int8" else ["--fp8"]) + (["--fp16"] if fp16 else [])
    name = "%s %s%s" % (tag, prec, " fp16" if fp16 else "")
    d = os.path.join(work, "check", name.replace(" ", "_"))
    os.makedirs(d, exist_ok=True)
    sargs = sum((["--shape", s] for s in shapes), [])
    plans = {}
    for kind, env in (("fused", None), ("unfused", UNFUSED)):
        plans[kind] = os.path.join(d, kind + ".gpuc")
        rc, msg, _ = run([gpuc, path, "--arch", arch, "-o", plans[kind]] + flags + sargs, env=env,
                         log=os.path.join(d, "compile_%s.log" % kind))
        if rc:
            verdict(False, "%-24s %s compile failed: %s" % (name, kind, msg[-300:]))
            return
    _, listing, _ = run([gpuc, "inspect", plans["fused"]])
    _, listing_u, _ = run([gpuc, "inspect", plans["unfused"]])
    nf = fused_steps(listing)
    ins = inputs_for(plans["fused"], d, np.random.default_rng(2026))
    cpu = os.path.join(d, "cpu")
    rc, msg, _ = run([gpuc, "run", path, "--cpu", "--out", cpu] + flags + sargs + ins)
    if rc:
        verdict(False, "%-24s CPU run failed: %s" % (name, msg[-300:]))
        return
    if cpu_only:
        verdict(nf > 0 and fused_steps(listing_u) == 0,
                "%-24s %d fused row kernels (unfused plan: %d); CPU reference ran (CPU_ONLY: no GPU run)"
                % (name, nf, fused_steps(listing_u)))
        return
    got = {}
    for kind in ("fused", "unfused"):
        rc, msg, _ = run([gpuc, "run", plans[kind], "--out", os.path.join(d, kind)] + ins)
        if rc:
            verdict(False, "%-24s GPU %s run failed: %s" % (name, kind, msg[-300:]))
            return
        got[kind] = outputs(os.path.join(d, kind))
    want = outputs(cpu)
    worst_ab = worst_cpu = 0.0
    bitwise = True
    for f, c in want.items():
        a, u = got["fused"].get(f), got["unfused"].get(f)
        if a is None or u is None:
            worst_ab = worst_cpu = float("nan")
            continue
        bitwise &= a.shape == u.shape and np.array_equal(a, u)
        e_ab, e_cpu = rel(a, u), rel(a, c)
        worst_ab = e_ab if e_ab != e_ab or e_ab > worst_ab else worst_ab
        worst_cpu = e_cpu if e_cpu != e_cpu or e_cpu > worst_cpu else worst_cpu
    tol_ab = 1e-3 if fp16 else 1e-5
    verdict(nf > 0 and worst_ab <= tol_ab and worst_cpu <= tol_cpu,
            "%-24s %d fused row kernels; GPU fused vs unfused %.3g%s (<= %g); GPU fused vs CPU %.3g (<= %g)"
            % (name, nf, worst_ab, ", bitwise" if bitwise else "", tol_ab, worst_cpu, tol_cpu))


# the four first; the int8 plan without the row groups last (before/after)
CONFIGS = [("fp16", ["--fp16"], None), ("int8", ["--int8", "--fp16"], None), ("fp8", ["--fp8", "--fp16"], None),
           ("prune2:4", ["--prune", "2:4", "--fp16"], None), ("int8-unfused", ["--int8", "--fp16"], UNFUSED),
           # -O3 times each 2:4 GEMM sparse against dense on this GPU and keeps the faster (autotune.c)
           ("prune2:4-O3", ["-O3", "--tune-cache", "none", "--prune", "2:4", "--fp16"], None)]


def bench(kind, b, s):
    onnx = os.path.join(work, "%s.onnx" % kind)
    try:
        if not os.path.exists(onnx):
            export(kind, onnx)
    except Exception as ex:
        verdict(False, "%s export failed: %s" % (kind, str(ex).splitlines()[0][:300]))
        return
    sargs = ["--shape", "input_ids=%dx%d" % (b, s), "--shape", "attention_mask=%dx%d" % (b, s)]
    res = {}
    only = os.environ.get("ROWFUSE_CONFIGS")
    for tag, flags, env in CONFIGS:
        if only and tag not in only.split(","):
            continue
        plan = os.path.join(work, "%s_%s.gpuc" % (kind, tag.replace(":", "")))
        rc, msg, secs = run([gpuc, onnx, "--arch", arch, "-o", plan] + flags + sargs, env=env,
                            log="%s_%s_compile.log" % (kind, tag.replace(":", "")))
        if rc:
            verdict(False, "%s b%d s%d %s: compile failed: %s" % (kind, b, s, tag, msg[-300:]))
            continue
        _, listing, _ = run([gpuc, "inspect", plan], log="%s_%s_inspect.txt" % (kind, tag.replace(":", "")))
        m = re.search(r"schedule \((\d+) steps; (\d+) bytes moved", listing)
        steps, gbytes = (int(m.group(1)), int(m.group(2)) / 1e9) if m else (0, 0.0)
        if cpu_only:
            print("%s b%d s%d %-13s compiled in %.0f s: %d steps, %.3f GB moved" % (kind, b, s, tag, secs, steps, gbytes),
                  flush=True)
            continue
        rc, txt, _ = run([gpuc, "bench", plan, "--iters", "100", "--profile"],
                         log="%s_%s_bench.txt" % (kind, tag.replace(":", "")))
        lat = re.search(r"latency: median ([0-9.]+) ms", txt)
        if rc or not lat:
            verdict(False, "%s b%d s%d %s: bench failed: %s" % (kind, b, s, tag, txt[-300:]))
            continue
        res[tag] = float(lat.group(1))
        rows = []
        for line in txt.splitlines():
            f = line.split()
            if len(f) > 11 and f[0].isdigit():
                rows.append((float(f[2]), f[1], f[0], line.split("  ")[-1].strip()[:90]))
        sums = {}
        for ms, k, _, _ in rows:
            sums[k] = sums.get(k, 0.0) + ms
        print("%s b%d s%d %-13s latency %.3f ms (%s); %d steps, %.3f GB moved; profile by kind: %s" %
              (kind, b, s, tag, res[tag], "%.2fx --fp16" % (res["fp16"] / res[tag]) if "fp16" in res else "-",
               steps, gbytes, ", ".join("%s %.3f ms" % kv for kv in sorted(sums.items(), key=lambda kv: -kv[1]))),
              flush=True)
        for ms, k, i, covers in sorted(rows, reverse=True)[:6]:
            print("    top: step %-4s %-9s %.4f ms  %s" % (i, k, ms, covers), flush=True)
    if "fp16" in res and "int8" in res:
        print("%s b%d s%d: --int8 --fp16 is %.2fx the speed of --fp16 (target 1.4x); without the row groups %s" %
              (kind, b, s, res["fp16"] / res["int8"],
               "%.2fx" % (res["fp16"] / res["int8-unfused"]) if "int8-unfused" in res else "n/a"), flush=True)


# ---- round: issue 12's BERT-base b32 s128 compression round in one call ----
ROUND = [  # tag, flags, env; -O2 unless the flags say otherwise
    ("fp16", ["--fp16"], None),
    ("int8", ["--int8", "--fp16"], None),
    ("int8-own", ["--int8", "--fp16"], {"GPUC_INT8_GEMM": "own"}),  # gpuc's int8 GEMM for every int8 GEMM, b2 too
    ("int8-cublaslt", ["--int8", "--fp16"], {"GPUC_INT8_GEMM": "cublaslt"}),
    ("int8-mma", ["--int8", "--fp16"], {"GPUC_INT8_WGMMA": "0"}),  # sm_90: the mma.sync kernel, not wgmma
    ("int8-ws", ["--int8", "--fp16"], {"GPUC_INT8_WS": "1"}),  # sm_90: the warp-specialized wgmma kernel
    ("int8-ws-own", ["--int8", "--fp16"], {"GPUC_INT8_WS": "1", "GPUC_INT8_GEMM": "own"}),  # it for every int8 GEMM
    ("int8-tma", ["--int8", "--fp16"], {"GPUC_INT8_WS": "tma"}),  # the warp-specialized kernel with TMA loads
    ("int8-tma-own", ["--int8", "--fp16"], {"GPUC_INT8_WS": "tma", "GPUC_INT8_GEMM": "own"}),
    ("int8-unfused", ["--int8", "--fp16"], UNFUSED),
    ("prune2:4", ["--prune", "2:4", "--fp16"], None),
]
# ROUND_ONLY=tag,tag...: only those plans (and -O3 2:4 only when it names prune2:4-O3)
ROUND_ONLY = [t for t in os.environ.get("ROUND_ONLY", "").split(",") if t]
if ROUND_ONLY:
    ROUND = [r for r in ROUND if r[0] in ROUND_ONLY]
# the CPU reference's flags for each plan (int8-unfused: the same graph as int8)
CPU_OF = {"fp16": "fp16", "int8": "int8", "int8-cublaslt": "int8", "int8-own": "int8", "int8-mma": "int8", "int8-unfused": "int8", "prune2:4": "prune2:4", "prune2:4-O3": "prune2:4",
          "int8-ws": "int8", "int8-ws-own": "int8", "int8-tma": "int8", "int8-tma-own": "int8"}
# GPU against `gpuc run --cpu` with the same flags, rel L2: half storage
# (1e-2); int8 drifts from the reference's int8 as one-ulp differences
# upstream move values across quantization steps (docs/BENCHMARKS.md: 0.021
# on BERT-base b1)
TOL = {"fp16": 1e-2, "int8": 5e-2, "int8-cublaslt": 5e-2, "int8-own": 5e-2, "int8-mma": 5e-2, "int8-unfused": 5e-2, "prune2:4": 1e-2, "prune2:4-O3": 1e-2,
       "int8-ws": 5e-2, "int8-ws-own": 5e-2, "int8-tma": 5e-2, "int8-tma-own": 5e-2}


def row_kernel_class(name, covers):
    """what a row kernel step computes, from its kernel name and the nodes it covers"""
    dq, q = ".dequantize" in covers, ".quantize" in covers
    if re.search(r"_Fused\d+Quantize$", name):
        return "dequant+act+quant" if dq else "elementwise/transpose+quant"
    if "LayerNormalization" in name and (dq or q):
        return "dequant+residual+LN+quant" if dq and q else "dequant+residual+LN" if dq else "LN+quant"
    if "GatedUnit" in name and q:
        return "SwiGLU+quant"
    if name.endswith("_DequantizeRows"):
        return "DequantizeRows"
    if name.endswith("_QuantizeRows"):
        return "QuantizeRows"
    if re.search(r"_Fused\d+$", name) and dq:
        return "dequant group (unfused)"
    return None


def profile_rows(txt):
    """bench --profile's step rows: step -> (kind, ms, MB)"""
    rows = {}
    for line in txt.splitlines():
        f = line.split()
        if len(f) > 11 and f[0].isdigit():
            rows[int(f[0])] = (f[1], float(f[2]), float(f[4]), line.split("  ")[-1].strip()[:100])
    return rows


def listing_steps(listing):
    """gpuc inspect's schedule: step -> (kernel name or GEMM kind, covers)"""
    out = {}
    for line in listing.splitlines():
        m = re.match(r"^\s+(\d+) (kernel (\S+)|.*?gemm[^<]*?)\s+(grid|bytes)", line)
        if m:
            out[int(m.group(1))] = (m.group(3) or m.group(2).strip(), line.split("<-", 1)[-1].strip())
    return out


def parallel(jobs, workers=8):
    """run [(key, cmd, env, log)] at once (compiles, CPU references): key -> (rc, out, secs)"""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=workers) as ex:
        futs = {k: ex.submit(run, cmd, env, log) for k, cmd, env, log in jobs}
        return {k: f.result() for k, f in futs.items()}


def bert_round(b, s, bc):
    """BERT-base b{b} s{s}: fp16, int8+fp16 (row fusions on and off), 2:4 at
    -O2 (cuSPARSELt's default configuration, and its search at load) and
    -O3 (searched configuration kept in the plan, sparse vs dense per
    GEMM) timed by bench --profile; each plan's graph compiled again at
    b{bc} and run on the GPU against `gpuc run --cpu` with the same flags."""
    onnx = os.environ.get("BERT_ONNX") or os.path.join(work, "bert.onnx")
    t0 = time.time()
    try:
        if not os.path.exists(onnx):
            export("bert", onnx)
    except Exception as ex:
        verdict(False, "bert export failed: %s" % str(ex).splitlines()[0][:300])
        return
    print("round: BERT-base exported in %.0f s" % (time.time() - t0), flush=True)

    def shp(bb):
        return ["--shape", "input_ids=%dx%d" % (bb, s), "--shape", "attention_mask=%dx%d" % (bb, s)]
    d = os.path.join(work, "round")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(12)
    ids = rng.integers(0, 1000, (bc, s)).astype(np.int64)
    mask = np.ones((bc, s), np.int64)
    mask[:, s * 3 // 4:] = 0
    np.save(os.path.join(d, "ids.npy"), ids)
    np.save(os.path.join(d, "mask.npy"), mask)
    ins = ["--input", "input_ids=%s" % os.path.join(d, "ids.npy"), "--input", "attention_mask=%s" % os.path.join(d, "mask.npy")]
    # 1: every -O2 plan at both sizes and the CPU references, at once
    jobs = []
    for tag, flags, env in ROUND:
        t = tag.replace(":", "")
        jobs.append((("big", tag), [gpuc, onnx, "--arch", arch, "-o", os.path.join(d, "%s_b%d.gpuc" % (t, b))] + flags + shp(b),
                     env, "round_%s_b%d_compile.log" % (t, b)))
        jobs.append((("small", tag), [gpuc, onnx, "--arch", arch, "-o", os.path.join(d, "%s_b%d.gpuc" % (t, bc))] + flags + shp(bc),
                     env, "round_%s_b%d_compile.log" % (t, bc)))
        if CPU_OF[tag] == tag:
            jobs.append((("cpu", tag), [gpuc, "run", onnx, "--cpu", "--out", os.path.join(d, "cpu_" + t)] + flags + ins,
                         None, "round_%s_cpu.log" % t))
    t0 = time.time()
    done = parallel(jobs)
    print("round: %d compiles and CPU references in %.0f s (in parallel)" % (len(jobs), time.time() - t0), flush=True)
    for key, (rc, msg, secs) in sorted(done.items()):
        if rc:
            verdict(False, "round %s %s failed after %.0f s: %s" % (key[0], key[1], secs, msg[-300:]))
    # 2: correctness at b{bc}: GPU against the CPU reference of the same flags
    for tag, _, _ in ROUND:
        t = tag.replace(":", "")
        plan = os.path.join(d, "%s_b%d.gpuc" % (t, bc))
        if done[("small", tag)][0] or done[("cpu", CPU_OF[tag])][0] or cpu_only:
            continue
        out = os.path.join(d, "gpu_" + t)
        rc, msg, _ = run([gpuc, "run", plan, "--out", out] + ins, log="round_%s_gpu_run.log" % t, timeout=120)
        if rc:
            verdict(False, "round %s b%d: GPU run failed: %s" % (tag, bc, msg[-300:]))
            continue
        got, want = outputs(out), outputs(os.path.join(d, "cpu_" + CPU_OF[tag].replace(":", "")))
        errs = [rel(got[f], want[f]) if f in got else float("nan") for f in want]
        worst = max(errs) if errs and all(e == e for e in errs) else float("nan")
        verdict(worst <= TOL[tag], "round %-13s b%d s%d GPU vs gpuc run --cpu (same flags): rel L2 %.3g (<= %g)" %
                (tag, bc, s, worst, TOL[tag]))
    # the warp-specialized kernel computes the default wgmma kernel's sums and runs its epilogue program: same bits
    own_out = outputs(os.path.join(d, "gpu_int8-own"))
    for t in ("int8-ws-own", "int8-tma-own"):
        ws_out = outputs(os.path.join(d, "gpu_" + t))
        if ws_out and own_out:
            same = sorted(ws_out) == sorted(own_out) and all(np.array_equal(ws_out[f], own_out[f]) for f in own_out)
            verdict(same, "round %s b%d s%d GPU output bit-identical to int8-own's (the default wgmma kernel)" % (t, bc, s))
    if cpu_only:
        for tag, _, _ in ROUND:
            _, listing, _ = run([gpuc, "inspect", os.path.join(d, "%s_b%d.gpuc" % (tag.replace(":", ""), b))])
            m = re.search(r"schedule \((\d+) steps; (\d+) bytes moved", listing)
            print("round %-13s b%d: %s steps, %.3f GB moved (CPU_ONLY: not timed)" %
                  (tag, b, m.group(1) if m else "?", int(m.group(2)) / 1e9 if m else 0), flush=True)
        return
    # 3: -O3 2:4 (cuSPARSELt's search kept in the plan, then sparse vs dense), alone on the GPU
    o3 = os.path.join(d, "prune24-O3_b%d.gpuc" % b)
    skip_o3 = ROUND_ONLY and "prune2:4-O3" not in ROUND_ONLY
    rc, msg, secs = (1, "", 0) if skip_o3 else run(
        [gpuc, onnx, "--arch", arch, "-o", o3, "-O3", "--tune-cache", "none", "--prune", "2:4", "--fp16"] + shp(b),
        log="round_prune24-O3_compile.log")
    if skip_o3:
        pass
    elif rc:
        verdict(False, "round prune2:4-O3: compile failed: %s" % msg[-300:])
    else:
        tuned = [ln.strip() for ln in msg.splitlines() if "2:4 GEMMs timed" in ln or "autotuned" in ln]
        print("round: -O3 --prune 2:4 compiled and tuned in %.0f s: %s" % (secs, " | ".join(tuned)), flush=True)
    # 4: timings, each plan alone: latency, the profile by kind, row kernels, top steps
    res, prof = {}, {}
    runs = [(tag, os.path.join(d, "%s_b%d.gpuc" % (tag.replace(":", ""), b)), None) for tag, _, _ in ROUND]
    if not ROUND_ONLY or "prune2:4" in ROUND_ONLY:
        runs.append(("prune2:4-search", os.path.join(d, "prune24_b%d.gpuc" % b), {"GPUC_SPARSE_SEARCH": "1"}))
    if not rc:
        runs.append(("prune2:4-O3", o3, None))
    for tag, plan, env in runs:
        if not os.path.exists(plan):
            continue
        t = tag.replace(":", "")
        _, listing, _ = run([gpuc, "inspect", plan], log="round_%s_inspect.txt" % t)
        m = re.search(r"schedule \((\d+) steps; (\d+) bytes moved", listing)
        steps, gbytes = (int(m.group(1)), int(m.group(2)) / 1e9) if m else (0, 0.0)
        rc2, txt, _ = run([gpuc, "bench", plan, "--iters", "100", "--profile"], env=env, log="round_%s_bench.txt" % t,
                          timeout=120)
        lat = re.search(r"latency: median ([0-9.]+) ms", txt)
        if rc2 or not lat:
            verdict(False, "round %s: bench failed: %s" % (tag, txt[-300:]))
            continue
        res[tag] = float(lat.group(1))
        rows, names = profile_rows(txt), listing_steps(listing)
        prof[tag] = (rows, names)
        sums = {}
        for k, ms, _, _ in rows.values():
            sums[k] = sums.get(k, 0.0) + ms
        print("round %-15s b%d s%d latency %.3f ms (%s); %d steps, %.3f GB moved; profile by kind: %s" %
              (tag, b, s, res[tag], "%.2fx --fp16" % (res["fp16"] / res[tag]) if "fp16" in res else "-", steps, gbytes,
               ", ".join("%s %.3f ms" % kv for kv in sorted(sums.items(), key=lambda kv: -kv[1]))), flush=True)
        cls = {}
        for i, (k, ms, mb, _) in rows.items():
            c = row_kernel_class(*names.get(i, ("", ""))) if k == "kernel" else None
            if c:
                n, t_ms, t_mb = cls.get(c, (0, 0.0, 0.0))
                cls[c] = (n + 1, t_ms + ms, t_mb + mb)
        for c, (n, t_ms, t_mb) in sorted(cls.items(), key=lambda kv: -kv[1][1]):
            print("    row kernels %-28s %3d steps %.3f ms (%.4f ms each), %.0f MB: %.0f GB/s (%.0f%% of 4.8 TB/s)" %
                  (c, n, t_ms, t_ms / n, t_mb, t_mb / t_ms if t_ms else 0, t_mb / t_ms / 48 if t_ms else 0), flush=True)
        for i, (k, ms, mb, covers) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:6]:
            print("    top: step %-4d %-9s %.4f ms %7.1f MB  %s  %s" % (i, k, ms, mb, names.get(i, ("?",))[0], covers),
                  flush=True)
        if "2:4" in tag:  # the 2:4 GEMMs against the GEMMs of the dense plan covering the same nodes
            sp = [(names.get(i, ("", ""))[1], ms) for i, (k, ms, _, _) in rows.items() if k == "gemm2:4"]
            n_cfg = len(re.findall(r"searched config", listing))
            print("    2:4 GEMMs on sparse tensor cores: %d (%d with a searched configuration in the plan), %.3f ms" %
                  (len(sp), n_cfg, sum(ms for _, ms in sp)), flush=True)
            drows, dnames = prof.get("fp16", ({}, {}))
            dense = {dnames[i][1]: ms for i, (k, ms, _, _) in drows.items() if k == "cublasLt" and i in dnames}
            both = [(ms, dense[c]) for c, ms in sp if c in dense]
            if both:
                tsp, tdn = sum(x for x, _ in both), sum(y for _, y in both)
                print("    %d of them matched to the --fp16 plan's GEMMs of the same nodes: %.3f ms sparse, %.3f ms "
                      "dense: 2:4 is %.2fx (issue 12: >= 1.3x)" % (len(both), tsp, tdn, tdn / tsp), flush=True)
    if "fp16" in res:
        for tag in res:
            if tag != "fp16":
                print("round %-15s %.2fx the speed of --fp16 (%.3f vs %.3f ms)" % (tag, res["fp16"] / res[tag], res[tag],
                                                                                  res["fp16"]), flush=True)
    if "int8" in res and "int8-unfused" in res:
        verdict(res["int8"] <= res["int8-unfused"] * 1.01,
                "round: int8 with the fused row kernels %.3f ms, without %.3f ms (fused must not be slower)" %
                (res["int8"], res["int8-unfused"]))


if "round" in what:
    bert_round(int(os.environ.get("ROUND_B", "32")), 128, int(os.environ.get("ROUND_CHECK_B", "2")))
if "check" in what:
    for prec in ("int8", "fp8"):
        for fp16 in (False, True):
            tz = (2e-2 if prec == "int8" else 4e-2) * (2.5 if fp16 else 1)
            check_model("ffn_block", os.path.join(models, "ffn_block.onnx"), ["x=4x16x64"], prec, fp16,
                        1e-2 if fp16 else 1e-3 if prec == "int8" else 2e-3)
            check_model("tiny_bert_ts", os.path.join(zoo, "tiny_bert_ts.onnx"),
                        ["input_ids=4x16", "attention_mask=4x16"], prec, fp16, tz)
            check_model("tiny_gpt2_ts", os.path.join(zoo, "tiny_gpt2_ts.onnx"),
                        ["input_ids=4x16", "attention_mask=4x16"], prec, fp16, tz)
            check_model("tiny_llama_ts", os.path.join(zoo, "tiny_llama_ts.onnx"),
                        ["input_ids=4x16", "attention_mask=4x16"], prec, fp16, tz)
if "bert" in what:
    bench("bert", 32, 128)
if "gpt2" in what:
    bench("gpt2", 8, 512)
if "llama" in what:
    bench("llama", 8, 512)
print("row_fusion_bench: %d passed, %d failed" % (passed, failed))
print("PASS" if failed == 0 else "FAIL")
sys.exit(1 if failed else 0)
