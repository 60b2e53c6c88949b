#!/usr/bin/env bash
# One GPU session's whole round, run on the GPU machine from the repo root:
#   1. the carried build (build-gpu/) sees the GPU; cuDNN from PyTorch's wheel
#   2. the ONNX conformance suite on the CPU reference and through the GPU
#   3. ResNet-50 / MobileNetV2 / BERT-base from PyTorch vs gpuc (bench/)
# Carry: build-gpu (gpuc, onnx_op_types) and .testdata (libonnx-testdata's
# node, pytorch-converted, pytorch-operator, simple folders).
# usage: tests/gpu/gpu_round.sh [conformance] [models] [quick] [compile] [O3] [memory]
# (memory, after models: the plans' speed under smaller workspace budgets,
#  and device memory in use per process, gpuc vs PyTorch)
set -u
# Results go straight to $OUT as they are made (a run stopped at its time
# limit still returns what it finished); big JSON files go to round.tgz.
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
BIG=/tmp/gpuc_round_big
mkdir -p "$BIG"
trap 'tar -czf "$OUT/round.tgz" -C "$BIG" . 2>/dev/null; true' EXIT
what=${*:-conformance models}
PY=${PYTHON:-python3}
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
GPUC=$PWD/build-gpu/gpuc
OPS=$PWD/build-gpu/onnx_op_types
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $GPUC --version) 2>&1 | tee "$OUT/log.txt"

# smoke: a bundled model compiled for this GPU, GPU vs CPU reference
mkdir -p /tmp/gpuc_smoke
$GPUC build-gpu/models/mlp.onnx --shape image=16x784 -o /tmp/gpuc_smoke/mlp.gpuc 2>&1 | tee -a "$OUT/log.txt"
$GPUC run build-gpu/models/mlp.onnx --cpu --shape image=16x784 --out /tmp/gpuc_smoke/cpu 2>&1 | tee -a "$OUT/log.txt"
$GPUC run /tmp/gpuc_smoke/mlp.gpuc --out /tmp/gpuc_smoke/gpu 2>&1 | tee -a "$OUT/log.txt"

# bundled models (fusion groups, MatMulBias, conv bias splits) GPU vs CPU
$PY tests/gpu/bundled_vs_cpu.py $GPUC build-gpu/models /tmp/gpuc_smoke 2>&1 | tee "$OUT/bundled.txt"

if [[ "$what" == *models* ]]; then
  q=""; [[ "$what" == *quick* ]] && q="--quick"
  [[ "$what" == *compile* ]] && q="$q --compile"
  [[ "$what" == *O3* ]] && q="$q --opt=-O3"   # autotuned plans (cache in the work folder)
  export GPUC_TUNE_CACHE=${GPUC_TUNE_CACHE:-/tmp/gpuc_models/autotune.txt}
  $PY bench/torch_models.py --gpuc "$GPUC" --work /tmp/gpuc_models --out "$OUT" $q \
      --models "${MODELS:-resnet50,mobilenet_v2,bert}" 2>&1 | tee "$BIG/models.txt" | tail -20
  # where the time goes: per-step profiles of the big plans (in round.tgz)
  for p in /tmp/gpuc_models/*_b32*.gpuc /tmp/gpuc_models/*_b256*.gpuc; do
    [ -f "$p" ] && $GPUC bench "$p" --iters 20 --profile > "$BIG/profile_$(basename "$p" .gpuc).txt" 2>&1
  done
fi
if [[ "$what" == *memory* ]]; then
  # the workspace budget against speed: each fp16 plan under a range of budgets
  for p in /tmp/gpuc_models/*_fp16.gpuc; do
    [ -f "$p" ] || continue
    for lim in 1073741824 268435456 plan 67108864 33554432 8388608; do
      if [ $lim = plan ]; then r=$($GPUC bench "$p" --iters 50 2>&1)
      else r=$(GPUC_WORKSPACE_LIMIT=$lim $GPUC bench "$p" --iters 50 2>&1); fi
      echo "$(basename "$p") limit=$lim $(echo "$r" | grep -o 'median [0-9.]* ms') $(echo "$r" | grep -o 'device memory: [0-9]* bytes (.*)')"
    done
  done 2>&1 | tee "$OUT/workspace_sweep.txt"
  $PY bench/process_memory.py --gpuc "$GPUC" --work /tmp/gpuc_models --out "$OUT" 2>&1 | tee "$OUT/process_memory.txt" | tail -8
fi
if [[ "$what" == *conformance* ]]; then
  J=$(nproc)
  CPUJSON=.testdata/cpu.json   # CPU results do not depend on the machine: reuse when carried
  if [ ! -f "$CPUJSON" ]; then
    CPUJSON=$BIG/cpu.json
    $PY tests/conformance.py "$GPUC" "$OPS" --data .testdata --jobs "$J" --min-pass-rate 0 \
        --json "$CPUJSON" > "$BIG/conf_cpu.txt" 2>&1
    tail -3 "$BIG/conf_cpu.txt"
  fi
  $PY tests/conformance.py "$GPUC" "$OPS" --data .testdata --jobs "$J" --min-pass-rate 0 \
      --gpu --md "$OUT/CONFORMANCE_GPU.md" --json "$BIG/gpu.json" --against "$CPUJSON" \
      > "$OUT/conf_gpu.txt" 2>&1
  tail -5 "$OUT/conf_gpu.txt"
  $PY tests/conformance.py "$GPUC" "$OPS" --data .testdata --jobs "$J" --min-pass-rate 0 \
      --gpu --fp16 --md "$BIG/CONFORMANCE_GPU_FP16.md" --json "$BIG/gpu16.json" --against "$CPUJSON" \
      > "$OUT/conf_gpu16.txt" 2>&1
  tail -3 "$OUT/conf_gpu16.txt"
fi
