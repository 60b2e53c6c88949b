#!/usr/bin/env bash
# The training graphs on the GPU against the CPU reference: loss, every
# gradient and the BatchNormalization running statistics, two batches each
# (tests/tools/train_gpu_check.c states the tolerances), fp32 and fp16:
#   mlp (batch 64), small_cnn (batch 32), small_bn_cnn (batch 32),
#   mlp_dropout (batch 64: training-mode Dropout, masks compared exactly).
# Run on the GPU machine from the repo root, with the carried layout
#   build-gpu/train_gpu_check   build-gpu/models/{mlp,small_cnn,small_bn_cnn,mlp_dropout}.onnx
# Output: $OUT/train_check.txt (default OUT=/tmp/gpuc_out). Exits nonzero
# when any check fails or cannot run.
# usage: tests/gpu/train_check.sh
set -u
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
LOG=$OUT/train_check.txt
: > "$LOG"
PY=${PYTHON:-python3}
# cuDNN 9 from PyTorch's wheel when the system has none (as gpu_round.sh)
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
CHECK=$PWD/build-gpu/train_gpu_check
MODELS=$PWD/build-gpu/models
if [ ! -x "$CHECK" ]; then echo "no $CHECK" | tee -a "$LOG"; exit 2; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
fail=0
for spec in mlp:64 small_cnn:32 small_bn_cnn:32 mlp_dropout:64; do
  m=${spec%%:*} b=${spec##*:}
  for prec in "" --fp16; do
    echo "== $m batch $b ${prec:-fp32}" | tee -a "$LOG"
    "$CHECK" "$MODELS/$m.onnx" "$b" $prec >> "$LOG" 2>&1
    rc=$?
    tail -1 "$LOG"
    if [ $rc -ne 0 ]; then echo "   exit status $rc" | tee -a "$LOG"; fail=1; fi
  done
done
if [ $fail -eq 0 ]; then echo "train_check: all passed" | tee -a "$LOG"
else echo "train_check: FAILURES (see $LOG)" | tee -a "$LOG"; fi
exit $fail
