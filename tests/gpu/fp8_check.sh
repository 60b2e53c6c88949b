#!/usr/bin/env bash
# --fp8 on the GPU machine (sm_89 or newer; passes/quantize_fp8.c,
# codegen/lower_fp8.c, cuBLASLt FP8 GEMMs with outer-vector scales set up in
# runtime/gpu/session.c):
#
# (a) bundled models linears, ffn_block, mlp, each compiled --fp8 and
#     --fp8 --fp16, run by `gpuc run PLAN` and by `gpuc run MODEL.onnx --cpu
#     --fp8 [--fp16]` on the same fresh .npy inputs (uniform [-1,1), seeded
#     here), and by `gpuc run MODEL.onnx --cpu` (fp32, no fp8). Bounds, rel L2:
#       GPU vs CPU --fp8: linears (its inputs are graph inputs, so the e4m3
#         values are the same bits; only the f32 sum order differs) 1e-4 fp32,
#         2e-3 fp16; ffn_block, mlp 1e-2 fp32 and fp16 (an ulp of a GELU or
#         LayerNorm upstream may move an activation one e4m3 step, 1/16)
#       GPU --fp8 vs the fp32 model: 8e-2 (the CPU test measures 1-5e-2)
#     NaN fails. The plan must hold FP8 GEMM steps (inspect: 'gemm fp8').
# (b) time: BERT-base (HF BertModel, random seeded weights, exported here
#     with PyTorch) b32 s128, `gpuc bench PLAN --iters 100 --profile` of
#     --fp16 and of --fp8 --fp16; prints both latencies, their ratio and
#     where the fp8 plan's time goes (FP8 GEMMs, float GEMMs,
#     QuantizeRowsF8, the rest); the GPU --fp8 --fp16 output of b1 against
#     the GPU --fp16 output is reported, failing only past 0.5 or on NaN
#     (no CPU reference of BERT: time).
#
# Prints one line per case, then PASS or FAIL; exit 1 on any failure.
# Logs and outputs under $OUT/fp8_check (or WORKDIR). Run from the repository root:
#   tests/gpu/fp8_check.sh [GPUC] [MODELS_DIR] [WORKDIR]
# (ARCH=sm_XX for another target than the GPU's; PYTHON picks the
# interpreter: numpy, and torch + transformers for (b); SKIP_BERT=1 runs (a) only.)
set -u
GPUC=${1:-build/gpuc}
MODELS=${2:-build/models}
WORK=${3:-${OUT:+$OUT/fp8_check}}
WORK=${WORK:-$(mktemp -d /tmp/fp8_check.XXXXXX)}
PY=${PYTHON:-python3}
ARCH=${ARCH:-native}
mkdir -p "$WORK"
for f in "$GPUC" "$MODELS/linears.onnx" "$MODELS/ffn_block.onnx" "$MODELS/mlp.onnx"; do
  [ -e "$f" ] || { echo "fp8_check: $f not found"; echo "FAIL"; exit 1; }
done

"$PY" - "$GPUC" "$MODELS" "$WORK" "$ARCH" "${SKIP_BERT:-0}" <<'EOF' 2>&1 | tee "$WORK/fp8_check.log"
import os, re, subprocess, sys, time

import numpy as np

gpuc, models, work, arch, skip_bert = sys.argv[1:6]
failed = passed = 0


def run(cmd):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip(), time.time() - t


def rel(a, b):
    a = a.astype(np.float64).ravel(); b = b.astype(np.float64).ravel()
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("nan")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def verdict(ok, line):
    global failed, passed
    passed += ok; failed += not ok
    print("%s  %s" % (line, "ok" if ok else "FAIL"), flush=True)


def make_inputs(plan, d, rng):
    _, listing, _ = run([gpuc, "inspect", plan])
    args = []
    for m in re.finditer(r"^\s*input\s+(\S+): (\S+) (\S+)", listing, re.M):
        name, dims, dt = m.group(1), [int(x) for x in m.group(2).split("x")], m.group(3)
        f = os.path.join(d, name + ".npy")
        if dt == "i64" and "mask" in name:
            x = np.ones(dims, np.int64)
        elif dt == "i64":
            x = rng.integers(0, 30522, dims).astype(np.int64)
        else:
            x = rng.uniform(-1, 1, dims).astype(np.float32)
        np.save(f, x)
        args += ["--input", "%s=%s" % (name, f)]
    return args


def check(tag, model, shapes, tol_cpu, tol_fp32):
    path = os.path.join(models, model)
    sargs = sum((["--shape", s] for s in shapes), [])
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    ins = None
    for prec in ("fp32", "fp16"):
        flags = ["--fp8"] + (["--fp16"] if prec == "fp16" else [])
        plan = os.path.join(d, "fp8_%s.gpuc" % prec)
        rc, msg, _ = run([gpuc, path, "--arch", arch, "-o", plan] + flags + sargs)
        open(os.path.join(d, "compile_%s.log" % prec), "w").write(msg)
        if rc:
            verdict(False, "%-10s %s compile failed: %s" % (tag, prec, msg[-400:])); continue
        if ins is None:
            ins = make_inputs(plan, d, np.random.default_rng(2026))
            rc, msg, _ = run([gpuc, "run", path, "--cpu", "--out", os.path.join(d, "cpu_fp32")] + sargs + ins)
            if rc:
                verdict(False, "%-10s CPU fp32 run failed: %s" % (tag, msg[-400:])); return
        _, listing, _ = run([gpuc, "inspect", plan])
        n8 = len(re.findall(r"cublasLt gemm fp8", listing))
        cpu = os.path.join(d, "cpu_fp8_%s" % prec)
        rc, msg, _ = run([gpuc, "run", path, "--cpu", "--out", cpu] + flags + sargs + ins)
        if rc:
            verdict(False, "%-10s %s CPU fp8 run failed: %s" % (tag, prec, msg[-400:])); continue
        gpu = os.path.join(d, "gpu_fp8_%s" % prec)
        rc, msg, _ = run([gpuc, "run", plan, "--out", gpu] + ins)
        if rc:
            verdict(False, "%-10s %s GPU run failed: %s" % (tag, prec, msg[-400:])); continue
        worst_cpu = worst_f = 0.0
        names = []
        for f in sorted(os.listdir(cpu)):
            gf = os.path.join(gpu, f)
            if not os.path.exists(gf):
                worst_cpu = float("nan"); names.append("%s missing" % f); continue
            g, c, ref = np.load(gf), np.load(os.path.join(cpu, f)), np.load(os.path.join(d, "cpu_fp32", f))
            e_cpu, e_f = rel(g, c), rel(g, ref)
            names.append("%s: vs cpu-fp8 %.3g, vs fp32 %.3g" % (f[:-4], e_cpu, e_f))
            worst_cpu = e_cpu if not (e_cpu <= worst_cpu) else worst_cpu
            worst_f = e_f if not (e_f <= worst_f) else worst_f
        ok = n8 > 0 and worst_cpu <= tol_cpu[prec] and worst_f <= tol_fp32
        verdict(ok, "%-10s %s: %d fp8 GEMMs; GPU vs CPU fp8 <= %g (worst %.3g), vs fp32 <= %g (worst %.3g); %s"
                % (tag, prec, n8, tol_cpu[prec], worst_cpu, tol_fp32, worst_f, "; ".join(names)))


check("linears", "linears.onnx", ["x=4x8x64", "v=6x64", "w=5x64"], {"fp32": 1e-4, "fp16": 2e-3}, 8e-2)
check("ffn_block", "ffn_block.onnx", ["x=4x16x64"], {"fp32": 1e-2, "fp16": 1e-2}, 8e-2)
check("mlp", "mlp.onnx", ["image=16x784"], {"fp32": 1e-2, "fp16": 1e-2}, 8e-2)

if skip_bert != "1":
    onnx = os.path.join(work, "bert_base.onnx")
    try:
        import torch
        from transformers import BertConfig, BertModel

        class Wrap(torch.nn.Module):
            def __init__(self, m):
                super().__init__(); self.m = m

            def forward(self, ids, mask):
                return self.m(ids, mask).last_hidden_state

        torch.manual_seed(0)
        m = Wrap(BertModel(BertConfig(), add_pooling_layer=False).eval()).eval()
        ids = torch.randint(0, 30522, (2, 128)); mask = torch.ones(2, 128, dtype=torch.int64)
        kw = dict(input_names=["input_ids", "attention_mask"], output_names=["output"], opset_version=17,
                  dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "output": {0: "batch"}})
        with torch.no_grad():
            try:
                torch.onnx.export(m, (ids, mask), onnx, dynamo=False, **kw)
            except TypeError:
                torch.onnx.export(m, (ids, mask), onnx, **kw)
        print("bert-base exported to %s" % onnx, flush=True)
    except Exception as ex:
        verdict(False, "bert-base export failed: %s" % str(ex).splitlines()[0][:300])
        onnx = None
    if onnx:
        sargs = ["--shape", "input_ids=32x128", "--shape", "attention_mask=32x128"]
        res, outs = {}, {}
        d = os.path.join(work, "bert")
        os.makedirs(d, exist_ok=True)
        ins = None
        for tag, flags in (("fp16", ["--fp16"]), ("fp8_fp16", ["--fp8", "--fp16"])):
            plan = os.path.join(work, "bert_b32_%s.gpuc" % tag)
            rc, msg, _ = run([gpuc, onnx, "--arch", arch, "-o", plan] + flags + sargs)
            open(os.path.join(work, "bert_b32_%s_compile.log" % tag), "w").write(msg)
            if rc:
                verdict(False, "bert b32 %s: compile failed: %s" % (tag, msg[-400:])); continue
            if ins is None:
                ins = make_inputs(plan, d, np.random.default_rng(7))
            rc, msg, _ = run([gpuc, "run", plan, "--out", os.path.join(d, tag)] + ins)
            if rc:
                verdict(False, "bert b32 %s: GPU run failed: %s" % (tag, msg[-400:])); continue
            outs[tag] = np.load(os.path.join(d, tag, "output.npy"))
            rc, msg, _ = run([gpuc, "bench", plan, "--iters", "100", "--profile"])
            open(os.path.join(work, "bert_b32_%s_bench.txt" % tag), "w").write(msg)
            m = re.search(r"latency: median ([0-9.]+) ms", msg)
            if rc or not m:
                verdict(False, "bert b32 %s: bench failed: %s" % (tag, msg[-400:])); continue
            res[tag] = float(m.group(1))
            parts = {}
            for line in msg.splitlines():
                f = line.split()  # step kind ms share MB GFLOP GB/s TFLOP/s %pkBW %pkFLOP M/C covers...
                if len(f) < 12 or not f[0].isdigit():
                    continue
                kind, ms, covers = f[1], float(f[2]), " ".join(f[11:])
                key = ("FP8 GEMMs" if kind == "lt-fp8" else "float GEMMs" if kind == "cublasLt"
                       else "QuantizeRowsF8" if covers.endswith(".quantize_f8") else "other")
                parts[key] = parts.get(key, 0.0) + ms
            print("bert b32 %-9s: latency %.3f ms; profile (eager): %s" % (tag, res[tag], ", ".join(
                "%s %.3f ms" % kv for kv in sorted(parts.items()))), flush=True)
        if len(outs) == 2:
            e = rel(outs["fp8_fp16"], outs["fp16"])
            verdict(e <= 0.5, "bert b32: GPU --fp8 --fp16 vs GPU --fp16 rel L2 %.3g (reported; bound 0.5 catches "
                    "only gross faults such as swapped scales or NaN: twelve layers of e4m3 on random weights, "
                    "no CPU reference here)" % e)
        if len(res) == 2:
            print("bert b32: --fp8 --fp16 is %.2fx the speed of --fp16 (%.3f vs %.3f ms)" %
                  (res["fp16"] / res["fp8_fp16"], res["fp8_fp16"], res["fp16"]), flush=True)

print("fp8_check: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
status=${PIPESTATUS[0]}
echo "outputs under $WORK"
if [ "$status" -eq 0 ]; then echo "PASS"; else echo "FAIL"; fi
exit "$status"
