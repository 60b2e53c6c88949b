#!/usr/bin/env bash
# The fused Attention kernels (codegen/lower_attention.c) on the GPU machine:
#
# (a) correctness: each bundled attention model compiled --fp16, run by
#     `gpuc run PLAN` and by `gpuc run MODEL.onnx --cpu` on the same .npy
#     inputs written here (uniform [-1,1); masks with -inf and -10000 key
#     padding that varies by batch, a few -inf scattered, key 0 never
#     masked so no row is -inf throughout); every output compared by
#     relative L2, tolerance 1e-2, NaN fails. Each case twice: the default
#     kernel choice and GPUC_ATTENTION_TILED=1 (the tiled tensor-core
#     kernel instead of the K/V-resident one), and once in fp32 (the FMA
#     kernel), so a failure names the kernel. attention.onnx's Q, K, V
#     come from Linear layers: its Attention nodes read them as views of
#     one merged GEMM output (passes/attention_views.c: offsets 0/64/128
#     of [B,S,192] rows; K and V of the cross-attention at 0/64 of one
#     [B,S,128]). The cases: BERT's shape (H 12, S 128, D 64, [B,1,1,128]
#     mask) at batch 2 and 3; attention.onnx (Sq 33 with Sk 33 and a
#     [B,1,1,33] mask, then Sq 33 / Sk 20 without); attention_shapes.onnx
#     (Sk 130 and D 128 with a full mask, D 80 / Dv 64 with an [Sk] mask,
#     D 7 / Dv 9, one key, Sk 70 with a constant [1,1,20,70] mask that
#     leaves row 0 empty).
# (b) time: attention_bert.onnx at B 32 (BERT-base b32), `gpuc bench PLAN
#     --iters 200 --profile`, the Attention step's row, for both kernels.
#
# Prints one line per case and kernel, then PASS or FAIL; exit 1 on any
# failure. Run from the repository root:
#   tests/gpu/attention_check.sh [GPUC] [MODELS_DIR] [WORKDIR]
# (defaults build-gpu/gpuc, build-gpu/models, a fresh temporary folder;
# ARCH=sm_XX compiles for another target than the GPU's, PYTHON picks the
# interpreter).
set -u
GPUC=${1:-build-gpu/gpuc}
MODELS=${2:-build-gpu/models}
WORK=${3:-$(mktemp -d /tmp/attention_check.XXXXXX)}
PY=${PYTHON:-python3}
ARCH=${ARCH:-native}
mkdir -p "$WORK"
for f in "$GPUC" "$MODELS/attention_bert.onnx" "$MODELS/attention.onnx" "$MODELS/attention_shapes.onnx"; do
  [ -e "$f" ] || { echo "attention_check: $f not found"; echo "FAIL"; exit 1; }
done

"$PY" - "$GPUC" "$MODELS" "$WORK" "$ARCH" <<'EOF'
import os, re, subprocess, sys

import numpy as np

gpuc, models, work, arch = sys.argv[1:5]
BERT = lambda b: ["q=%dx12x128x64" % b, "k=%dx12x128x64" % b, "v=%dx12x128x64" % b, "mask=%dx1x1x128" % b]
CASES = [("bert_b2", "attention_bert.onnx", BERT(2)),
         ("bert_b3", "attention_bert.onnx", BERT(3)),
         ("attention", "attention.onnx", ["x=2x33x64", "mem=2x20x64", "mask=2x1x1x33"]),
         ("shapes", "attention_shapes.onnx", [])]
# (name, environment, --fp16): fp32 plans run the FMA kernel
KERNELS = [("default", {}, True), ("tiled", {"GPUC_ATTENTION_TILED": "1"}, True), ("fp32", {}, False)]
TOL = 1e-2


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    return r.returncode, (r.stdout + r.stderr).strip()


def rel(a, b):
    a = a.astype(np.float64).ravel(); b = b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def make_input(name, dims, rng):
    x = rng.uniform(-1, 1, dims).astype(np.float32)
    if not name.startswith("mask") or dims[-1] < 2:
        return x
    sk = dims[-1]
    x = x.reshape(-1, sk) if len(dims) > 1 else x.reshape(1, sk)
    lead = dims[0] if len(dims) == 4 else 1  # the batch axis of a [B,..,Sk] mask
    per = x.shape[0] // lead
    for i in range(x.shape[0]):
        b = i // per
        pad = (b * 37 + 5) % (sk // 2 + 1)  # padded keys at the end, by batch
        if pad:
            x[i, sk - pad:] = -np.inf if b % 2 else -10000.0
    hole = rng.random(x.shape) < 0.05
    hole[:, 0] = False
    x[hole] = -np.inf
    return x.reshape(dims)


def inputs_of(plan):
    _, listing = run([gpuc, "inspect", plan])
    return [(m.group(1), [int(d) for d in m.group(2).split("x")])
            for m in re.finditer(r"^\s*input\s+(\S+): (\S+) ", listing, re.M)]


failed = passed = 0
for tag, model, shapes in CASES:
    path = os.path.join(models, model)
    sargs = sum((["--shape", s] for s in shapes), [])
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    cpu = os.path.join(d, "cpu")
    ins = None
    for kname, env, half in KERNELS:
        plan = os.path.join(d, "%s.gpuc" % kname)
        rc, msg = run([gpuc, path] + (["--fp16"] if half else []) + ["--arch", arch, "-o", plan] + sargs, env)
        if rc:
            print("%-10s %-8s compile failed: %s" % (tag, kname, msg[-400:])); failed += 1; continue
        if ins is None:  # the inputs and the CPU reference, once per case
            rng = np.random.default_rng(11)
            ins = []
            for name, dims in inputs_of(plan):
                f = os.path.join(d, name + ".npy")
                np.save(f, make_input(name, dims, rng))
                ins += ["--input", "%s=%s" % (name, f)]
            rc, msg = run([gpuc, "run", path, "--cpu", "--out", cpu] + sargs + ins)
            if rc:
                print("%-10s CPU run failed: %s" % (tag, msg[-400:])); failed += len(KERNELS); break
        out = os.path.join(d, kname)
        rc, msg = run([gpuc, "run", plan, "--out", out] + ins)
        if rc:
            print("%-10s %-8s GPU run failed: %s" % (tag, kname, msg[-400:])); failed += 1; continue
        worst, names = 0.0, []
        for f in sorted(os.listdir(cpu)):
            g = os.path.join(out, f)
            e = rel(np.load(g), np.load(os.path.join(cpu, f))) if os.path.exists(g) else float("inf")
            names.append("%s %.3g" % (f[:-4], e))
            worst = e if e != e or e > worst else worst  # NaN stays
        # the K/V-resident kernel is the only one with cp.async in its PTX
        with open(plan, "rb") as fh:
            kv = b"cp.async" in fh.read()
        ok = worst <= TOL
        passed += ok; failed += not ok
        print("%-10s %-8s (%s) rel L2: %s  %s" % (tag, kname, "K/V-resident kernel" if kv else "no K/V-resident kernel",
                                                ", ".join(names), "ok" if ok else "FAIL"))
print("correctness: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
EOF
status=$?

# (b) BERT-base b32: the Attention step of each kernel
for kernel in default tiled; do
  tiled=""
  [ "$kernel" = tiled ] && tiled=1
  plan="$WORK/bert_b32_$kernel.gpuc"
  if ! GPUC_ATTENTION_TILED=$tiled "$GPUC" "$MODELS/attention_bert.onnx" --fp16 --arch "$ARCH" -o "$plan" \
      --shape q=32x12x128x64 --shape k=32x12x128x64 --shape v=32x12x128x64 --shape mask=32x1x1x128 \
      >"$WORK/bert_b32_$kernel.log" 2>&1; then
    echo "bert b32 $kernel: compile failed: $(tail -c 400 "$WORK/bert_b32_$kernel.log")"; status=1; continue
  fi
  step=$("$GPUC" inspect "$plan" | awk '$3 ~ /_Attention$/ {print $1; exit}')
  if ! "$GPUC" bench "$plan" --iters 200 --profile >"$WORK/bench_$kernel.txt" 2>&1 || [ -z "$step" ]; then
    echo "bert b32 $kernel: bench failed: $(tail -c 400 "$WORK/bench_$kernel.txt")"; status=1; continue
  fi
  # profile row: step kind ms share MB GFLOP GB/s TFLOP/s ...
  awk -v s="$step" -v k="$kernel" '$1 == s && $2 == "kernel" {
      printf "bert b32 attention (%s kernel): %.1f us, %s GB/s, %s TFLOP/s\n", k, $3 * 1000, $7, $8 }' \
    "$WORK/bench_$kernel.txt"
  grep "^latency" "$WORK/bench_$kernel.txt" | sed "s/^/  whole plan ($kernel): /"
done

echo "outputs under $WORK"
if [ "$status" -eq 0 ]; then echo "PASS"; else echo "FAIL"; fi
exit "$status"
