#!/usr/bin/env bash
# gpuc train on the CPU: one epoch of the bundled MLP on Fashion-MNIST must
# reach the accuracy floor; bad data files and flags give one-line errors
# with exit 1/2, never a crash.
# usage: train_test.sh GPUC MODELS_DIR DATA_DIR WORK_DIR [MIN_ACCURACY]
set -u
gpuc=$1 models=$2 data=$3 work=$4 floor=${5:-82}
mkdir -p "$work"
. "$(dirname "$0")/expect_lib.sh"

mlp=$models/mlp.onnx
out=$("$gpuc" train "$mlp" --data "fashion-mnist:$data" --epochs 1 --batch 64 --lr 0.05 \
      --momentum 0.9 --seed 1 --cpu --save "$work/mlp_trained.onnx" 2>&1)
rc=$?
echo "$out"
acc=$(echo "$out" | sed -n 's/^epoch 1: test accuracy \([0-9.]*\)%.*/\1/p')
if [ $rc -ne 0 ] || [ -z "$acc" ]; then bad "training failed (exit $rc)"
elif awk -v a="$acc" -v f="$floor" 'BEGIN { exit !(a >= f) }'; then ok
else bad "test accuracy $acc% < $floor%"; fi
[ -s "$work/mlp_trained.onnx" ] && "$gpuc" inspect "$work/mlp_trained.onnx" >/dev/null && ok \
  || bad "--save did not write a loadable model"

# usage errors (exit 2)
# no --cpu: the GPU trainer; where no GPU is present it says so and points at --cpu
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  expect 1 train "$mlp" --data "fashion-mnist:$data" --max-steps 1
  "$gpuc" train "$mlp" --data "fashion-mnist:$data" --max-steps 1 2>&1 | grep -q -- "--cpu trains on the CPU" && ok ||
    bad "the no-GPU message does not point at --cpu"
  # --mem-limit: the step is compiled (NVRTC, no GPU) and counted before anything is allocated
  cnn=$models/small_cnn.onnx
  o=$work/memlimit.txt
  expect 1 train "$cnn" --data "fashion-mnist:$data" --arch sm_90 --mem-limit 3M --batch 256
  "$gpuc" train "$cnn" --data "fashion-mnist:$data" --arch sm_90 --mem-limit 3M --batch 256 >"$o" 2>&1
  grep -q "needs [0-9]* bytes of device memory .*--mem-limit allows 3145728.*smaller micro-batches cannot fit" "$o" &&
    ok || bad "--mem-limit too small: no account in the message: $(tail -1 "$o")"
  # between the batch-256 and batch-128 needs: the step is split, 128 x accum 2
  "$gpuc" train "$cnn" --data "fashion-mnist:$data" --arch sm_90 --mem-limit 80M --batch 256 >"$o" 2>&1
  grep -q "trying micro-batches of 128 x accum 2" "$o" && ! grep -q "micro-batches of 64" "$o" && ok ||
    bad "--mem-limit 80M did not split batch 256 into 128 x 2: $(head -5 "$o")"
  expect 2 train "$cnn" --data "fashion-mnist:$data" --mem-limit lots
fi
expect 2 train "$mlp" --cpu                                          # no --data
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --augment blur
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --normalize 0.5
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --normalize 0.5,0
# --normalize changes what the model sees: the first step's loss differs
l1=$("$gpuc" train "$mlp" --data "fashion-mnist:$data" --cpu --max-steps 1 --log-every 1 --limit 640 2>&1 | sed -n 's/.*step 1\/1 loss \([0-9.]*\).*/\1/p')
l2=$("$gpuc" train "$mlp" --data "fashion-mnist:$data" --cpu --max-steps 1 --log-every 1 --limit 640 --normalize 0.286,0.353 2>&1 | sed -n 's/.*step 1\/1 loss \([0-9.]*\).*/\1/p')
[ -n "$l1" ] && [ -n "$l2" ] && [ "$l1" != "$l2" ] && ok || bad "--normalize did not change the first loss ($l1 vs $l2)"
expect 1 train "$mlp" --data "fashion-mnist:$data" --cpu --augment flip --max-steps 1   # [batch, 784] is no image
expect 2 train "$mlp" --data "svhn:$data" --cpu
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --batch 0
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --lr nan
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --epochs
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --bogus
expect 2 train --data "fashion-mnist:$data" --cpu

# hostile data folders (exit 1)
d=$work/data
mk() { rm -rf "$d"; mkdir -p "$d"; for f in train-images-idx3-ubyte train-labels-idx1-ubyte \
  t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do cp "$data/$f.gz" "$d/"; done; }
mk; rm "$d/train-images-idx3-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
mk; printf 'not gzip at all' > "$d/t10k-labels-idx1-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
mk; head -c 5000 "$data/train-images-idx3-ubyte.gz" > "$d/train-images-idx3-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
# wrong magic, huge dims, label out of range, count mismatch
mk; printf '\x00\x00\x08\x03\xff\xff\xff\xff\x00\x00\x00\x1c\x00\x00\x00\x1c' | gzip > "$d/t10k-images-idx3-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
mk; printf '\x00\x00\x09\x01\x00\x00\x00\x01\x00' | gzip > "$d/t10k-labels-idx1-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
mk; printf '\x00\x00\x08\x01\x00\x00\x00\x01\x63' | gzip > "$d/t10k-labels-idx1-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
mk; printf '\x00\x00\x08\x01\x00\x00\x27\x10\x01' | gzip > "$d/t10k-labels-idx1-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
mk; rm "$d/t10k-images-idx3-ubyte.gz"; mkfifo "$d/t10k-images-idx3-ubyte.gz"
expect 1 train "$mlp" --data "fashion-mnist:$d" --cpu
# a model the trainer cannot take: wrong input size for 28x28 images
expect 1 train "$models/resnet18.onnx" --data "fashion-mnist:$data" --cpu

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
