#!/usr/bin/env bash
# The GPU trainer's round on the GPU machine (issue 5), from the repo root:
#   1. every output of one training step (loss, gradients, running
#      statistics) of the bundled models, GPU plan vs CPU reference
#      (tests/gpu/train_check.sh, when train_gpu_check is carried)
#   2. MLP: the first 30 step losses on the GPU vs --cpu (same data order);
#      --accum 4 x 16 vs --batch 64 on the GPU
#   3. small CNN on Fashion-MNIST, fp32 and --amp: test accuracy
#   4. bench/train_torch.py: loss after 200 steps vs PyTorch (fp32, AMP) and
#      ResNet-50 32x32 AMP throughput vs PyTorch eager
# Carry: build-gpu (gpuc, models/, fmnist/ with the four IDX .gz files).
# usage: tests/gpu/train_round.sh [check] [mlp] [cnn] [torch]
# (TORCH_ONLY=loss|throughput narrows step 4; TORCH_DETERMINISTIC=1 runs
#  PyTorch with deterministic algorithms)
set -u
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
what=${*:-check mlp cnn torch}
PY=${PYTHON:-python3}
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
G=$PWD/build-gpu/gpuc
M=$PWD/build-gpu/models
FM=fashion-mnist:$PWD/build-gpu/fmnist
W=/tmp/gpuc_train_round
mkdir -p "$W"
R=$OUT/train_round.txt
fails=0
note() { echo "$*" | tee -a "$R"; }
verdict() { if [ "$1" = 0 ]; then note "PASS $2"; else note "FAIL $2"; fails=$((fails + 1)); fi; }
losses() { sed -n 's/.* loss \([0-9.eE+-]*\) lr.*/\1/p' "$1"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$R"

if [[ "$what" == *check* && -x build-gpu/train_gpu_check ]]; then
  OUT=$OUT bash tests/gpu/train_check.sh; verdict $? "train_gpu_check: one step, every output, GPU vs CPU"
fi

if [[ "$what" == *mlp* ]]; then
  a=(train "$M/mlp.onnx" --data "$FM" --max-steps 30 --log-every 1 --batch 64 --lr 0.05 --seed 3)
  $G "${a[@]}" > "$W/mlp_gpu.txt" 2>&1; verdict $? "mlp GPU runs"
  $G "${a[@]}" --cpu > "$W/mlp_cpu.txt" 2>&1; verdict $? "mlp CPU runs"
  head -3 "$W/mlp_gpu.txt" >> "$R"
  losses "$W/mlp_gpu.txt" > "$W/g.l"; losses "$W/mlp_cpu.txt" > "$W/c.l"
  paste "$W/g.l" "$W/c.l" | awk 'NR==1||NR%10==0 { print "  step " NR ": gpu " $1 " cpu " $2 }' >> "$R"
  paste "$W/g.l" "$W/c.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3 * $2) bad = 1; n++ }
    END { exit bad || n != 30 }'
  verdict $? "mlp: 30 step losses GPU == CPU within 1e-3 relative"
  $G train "$M/mlp.onnx" --data "$FM" --max-steps 20 --log-every 1 --batch 16 --accum 4 --seed 3 > "$W/acc.txt" 2>&1
  $G train "$M/mlp.onnx" --data "$FM" --max-steps 20 --log-every 1 --batch 64 --seed 3 > "$W/big.txt" 2>&1
  losses "$W/acc.txt" > "$W/a.l"; losses "$W/big.txt" > "$W/b.l"
  paste "$W/a.l" "$W/b.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1; n++ }
    END { exit bad || n != 20 }'
  verdict $? "mlp GPU: --accum 4 x 16 == --batch 64 within 1e-4 relative"
  $G train "$M/mlp.onnx" --data "$FM" --epochs 1 --batch 64 --lr 0.05 > "$W/mlp_epoch.txt" 2>&1
  tail -2 "$W/mlp_epoch.txt" >> "$R"
  $G train "$M/mlp.onnx" --data "$FM" --epochs 1 --batch 64 --lr 0.05 --amp > "$W/mlp_amp.txt" 2>&1
  verdict $? "mlp --amp runs"; tail -2 "$W/mlp_amp.txt" >> "$R"
fi

if [[ "$what" == *cnn* ]]; then
  EP=${CNN_EPOCHS:-15}
  for mode in fp32 amp; do
    extra=(); [ $mode = amp ] && extra=(--amp)
    $G train "$M/small_cnn.onnx" --data "$FM" --epochs "$EP" --batch 64 --lr 0.02 --schedule cosine \
        --seed 1 --log-every 300 "${extra[@]}" > "$W/cnn_$mode.txt" 2>&1
    verdict $? "small_cnn $mode $EP epochs runs"
    grep -E "plan:|test accuracy" "$W/cnn_$mode.txt" >> "$R"
    cp "$W/cnn_$mode.txt" "$OUT/"
  done
  a32=$(sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p' "$W/cnn_fp32.txt")
  a16=$(sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p' "$W/cnn_amp.txt")
  note "small_cnn: fp32 ${a32:-?}%, amp ${a16:-?}%"
  awk -v a="${a32:-0}" 'BEGIN { exit !(a >= 90) }'; verdict $? "small_cnn fp32 >= 90%"
  awk -v a="${a32:-0}" -v b="${a16:-0}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.5) }'
  verdict $? "small_cnn amp within 0.5 pp of fp32"
fi

if [[ "$what" == *torch* ]]; then
  $PY bench/train_torch.py --gpuc "$G" --fmnist build-gpu/fmnist --work "$W/torch" --out "$OUT" \
      ${TORCH_ONLY:+--only $TORCH_ONLY} ${TORCH_DETERMINISTIC:+--deterministic} 2>&1 | tee "$OUT/train_torch.txt" | tail -12
fi
note "train_round: $fails failed"
exit $((fails != 0))
