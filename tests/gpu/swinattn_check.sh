#!/usr/bin/env bash
# Swin's shifted-window attention on the GPU machine (issue 11: Swin-T
# fused 7 of its 12 attentions), from the repo root, with a carried Release
# gpuc ($GPUC, default build-gpu/gpuc):
#  1. tests/models/zoo/tiny_swin (both exporters, batch 4: 16 windows a
#     image, a [16,2,4,4] bias + window mask read at batch b mod 16,
#     attribute mask_period): compiled -O2 for this GPU and run by `gpuc run
#     PLAN` against PyTorch's stored output, once per Attention kernel:
#     fp32 (the FMA kernel, rel L2 <= 1e-4), --fp16 default (K/V resident),
#     GPUC_ATTENTION_TILED=1 and GPUC_ATTENTION_STREAM=1 (rel L2 <= 2e-2);
#     every plan must hold one Attention kernel a block (2) and no
#     Softmax or MatMul kernel;
#  2. bench/zoo.py: torchvision swin_t and swin_v2_t, both exporters,
#     batch 32, -O2 --fp16, against PyTorch fp32, timed beside
#     torch.compile fp16;
#  3. tests/gpu/xformer_ab.py with AB_OFF=GPUC_NO_ATTENTION_WINDOW: the
#     TorchScript plans at batch 32 against the same compile with the
#     window masks left unfused (the plans before): steps, MB moved, times.
# About 6 minutes (SWINATTN_BUDGET seconds, default 300, bounds the zoo run).
# usage: GPUC=build-gpu/gpuc [SWINATTN_TINY_ONLY=1] tests/gpu/swinattn_check.sh [MODELS (comma list)]
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
models=${1:-swin_t,swin_v2_t}
log="$OUT/swinattn_log.txt"
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $GPUC --version) 2>&1 | tee "$log"
$PY - "$GPUC" tests/models/zoo /tmp/gpuc_swinattn 2>&1 <<'EOF' | tee -a "$log"
import os, re, subprocess, sys

import numpy as np

gpuc, zoo, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
x = os.path.join(zoo, "tiny_swin.in.input.npy")
ref = np.load(os.path.join(zoo, "tiny_swin.out.npy")).astype(np.float64)
# (name, environment, flags, tolerance)
KERNELS = [("fp32", {}, [], 1e-4), ("fp16", {}, ["--fp16"], 2e-2),
           ("tiled", {"GPUC_ATTENTION_TILED": "1"}, ["--fp16"], 2e-2),
           ("stream", {"GPUC_ATTENTION_STREAM": "1"}, ["--fp16"], 2e-2)]
bad = 0
for exp in ("ts", "dynamo"):
    model = os.path.join(zoo, "tiny_swin_%s.onnx" % exp)
    for name, env, flags, tol in KERNELS:
        what = "tiny_swin_%s %s" % (exp, name)
        plan, out = os.path.join(work, "%s_%s.gpuc" % (exp, name)), os.path.join(work, "%s_%s_out" % (exp, name))
        e = dict(os.environ, **env)
        r = subprocess.run([gpuc, model, "-O2", "--shape", "input=4x3x32x32", "-o", plan] + flags,
                           capture_output=True, text=True, env=e)
        if r.returncode:
            print("FAIL %s: compile: %s" % (what, (r.stdout + r.stderr).strip()[-400:])); bad += 1; continue
        ins = subprocess.run([gpuc, "inspect", plan], capture_output=True, text=True).stdout
        ops = [re.sub(r"_\d+$", "", m.group(1)) for m in re.finditer(r"^\s*\d+ kernel k\d+_(\S+)", ins, re.M)]
        attn, soft = ops.count("Attention"), ops.count("Softmax") + ops.count("MatMul")
        r = subprocess.run([gpuc, "run", plan, "--input", "input=" + x, "--out", out],
                           capture_output=True, text=True, env=e)
        if r.returncode:
            print("FAIL %s: run: %s" % (what, (r.stdout + r.stderr).strip()[-400:])); bad += 1; continue
        y = np.load(os.path.join(out, sorted(os.listdir(out))[0])).astype(np.float64)
        rel = np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-30) if y.shape == ref.shape else np.inf
        ok = np.isfinite(rel) and rel <= tol and attn == 2 and soft == 0
        bad += not ok
        print("%s %s: rel L2 %.2e (tol %.0e), %d Attention kernels (want 2), %d Softmax/MatMul"
              % ("PASS" if ok else "FAIL", what, rel, tol, attn, soft))
print("tiny_swin: %s" % ("FAIL" if bad else "PASS"))
sys.exit(1 if bad else 0)
EOF
tiny_rc=${PIPESTATUS[0]}
# SWINATTN_TINY_ONLY=1: step 1 alone (the zoo run covers swin_t and swin_v2_t)
[ "${SWINATTN_TINY_ONLY:-0}" = 1 ] && exit "$tiny_rc"
$PY bench/zoo.py --gpuc "$GPUC" --out "$OUT" --work /tmp/gpuc_swinattn_zoo --keep-work --models "$models" \
    --exporters ts,dynamo --batches 32 --opts=-O2 --precisions fp16 \
    --budget "${SWINATTN_BUDGET:-300}" --timeout-per-model 240 2>&1 | tee -a "$log"
zoo_rc=${PIPESTATUS[0]}
AB_OFF=GPUC_NO_ATTENTION_WINDOW XFORMER_AB_BUDGET=${SWINATTN_AB_BUDGET:-60} \
    $PY tests/gpu/xformer_ab.py "$GPUC" /tmp/gpuc_swinattn_zoo "$models" 32 2>&1 | tee -a "$log"
ab_rc=${PIPESTATUS[0]}
[ "$tiny_rc" = 0 ] || exit "$tiny_rc"
[ "$zoo_rc" = 0 ] || exit "$zoo_rc"
exit "$ab_rc"
