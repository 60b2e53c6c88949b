#!/usr/bin/env bash
# One GPU session's whole round, run on the GPU machine from the repo root:
#   1. the carried build (build-gpu/) sees the GPU; cuDNN from PyTorch's wheel
#   2. the ONNX conformance suite on the CPU reference and through the GPU
#   3. ResNet-50 / MobileNetV2 / BERT-base from PyTorch vs gpuc (bench/)
# Carry: build-gpu (gpuc, onnx_op_types) and .testdata (libonnx-testdata's
# node, pytorch-converted, pytorch-operator, simple folders).
# usage: tests/gpu/gpu_round.sh [conformance] [models] [quick]
set -u
FINAL=${OUT:-/tmp/gpuc_out}   # what comes back: round.tgz and a summary
OUT=/tmp/gpuc_round
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL"
trap 'tar -czf "$FINAL/round.tgz" -C "$OUT" . ; grep -h -E "passed|pass rate|of [0-9]+ tests" "$OUT"/conf_*.txt > "$FINAL/summary.txt" 2>/dev/null; cp "$OUT/models.md" "$FINAL/" 2>/dev/null; true' EXIT
what=${*:-conformance models}
PY=${PYTHON:-python3}
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
GPUC=$PWD/build-gpu/gpuc
OPS=$PWD/build-gpu/onnx_op_types
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $GPUC --version) 2>&1 | tee "$OUT/env.txt"

# smoke: a bundled model compiled for this GPU, GPU vs CPU reference
mkdir -p /tmp/gpuc_smoke
$GPUC build-gpu/models/mlp.onnx --shape image=16x784 -o /tmp/gpuc_smoke/mlp.gpuc 2>&1 | tee -a "$OUT/smoke.txt"
$GPUC run build-gpu/models/mlp.onnx --cpu --shape image=16x784 --out /tmp/gpuc_smoke/cpu 2>&1 | tee -a "$OUT/smoke.txt"
$GPUC run /tmp/gpuc_smoke/mlp.gpuc --out /tmp/gpuc_smoke/gpu 2>&1 | tee -a "$OUT/smoke.txt"

if [[ "$what" == *conformance* ]]; then
  J=$(nproc)
  $PY tests/conformance.py "$GPUC" "$OPS" --data .testdata --jobs "$J" --min-pass-rate 0 \
      --md "$OUT/CONFORMANCE_CPU.md" --json "$OUT/cpu.json" > "$OUT/conf_cpu.txt" 2>&1
  tail -3 "$OUT/conf_cpu.txt"
  $PY tests/conformance.py "$GPUC" "$OPS" --data .testdata --jobs "$J" --min-pass-rate 0 \
      --gpu --md "$OUT/CONFORMANCE_GPU.md" --json "$OUT/gpu.json" --against "$OUT/cpu.json" \
      > "$OUT/conf_gpu.txt" 2>&1
  tail -5 "$OUT/conf_gpu.txt"
  $PY tests/conformance.py "$GPUC" "$OPS" --data .testdata --jobs "$J" --min-pass-rate 0 \
      --gpu --fp16 --md "$OUT/CONFORMANCE_GPU_FP16.md" --json "$OUT/gpu16.json" --against "$OUT/cpu.json" \
      > "$OUT/conf_gpu16.txt" 2>&1
  tail -3 "$OUT/conf_gpu16.txt"
fi
if [[ "$what" == *models* ]]; then
  q=""; [[ "$what" == *quick* ]] && q="--quick"
  $PY bench/torch_models.py --gpuc "$GPUC" --work /tmp/gpuc_models --out "$OUT" $q 2>&1 | tee "$OUT/models.txt" | tail -20
fi
