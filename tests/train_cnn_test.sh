#!/usr/bin/env bash
# gpuc train --cpu on the bundled small CNN: one epoch over the first 6000
# Fashion-MNIST images (93 steps, Conv gradients through im2col + GEMM) must
# reach the test-accuracy floor (measured 45.69% with seed 1; random is 10%).
# GPUC_SKIP_SLOW=1 (set by the sanitizer build) skips it: exit 77.
# usage: train_cnn_test.sh GPUC MODELS_DIR DATA_DIR FLOOR
set -u
gpuc=$1 models=$2 data=$3 floor=$4
if [ "${GPUC_SKIP_SLOW:-0}" = 1 ]; then echo "skipped: GPUC_SKIP_SLOW=1"; exit 77; fi
out=$("$gpuc" train "$models/small_cnn.onnx" --data "fashion-mnist:$data" --cpu --epochs 1 \
      --batch 64 --lr 0.05 --seed 1 --limit 6000 --log-every 31 2>&1)
rc=$?
echo "$out"
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p')
if [ "$rc" -ne 0 ] || [ -z "$acc" ]; then echo "FAIL: exit $rc, no accuracy line"; exit 1; fi
if awk -v a="$acc" -v f="$floor" 'BEGIN { exit !(a >= f) }'; then
  echo "1 passed, 0 failed (accuracy $acc% >= $floor%)"
else
  echo "FAIL: accuracy $acc% < $floor%"; echo "0 passed, 1 failed"; exit 1
fi
