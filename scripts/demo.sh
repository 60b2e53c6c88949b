#!/usr/bin/env bash
# The README's main job: set up and build, train the bundled small CNN on
# Fashion-MNIST for one epoch (on the GPU when one is present, else on the
# CPU reference), compile the trained model into a plan, and report the
# plan's test accuracy on the 10000 test images.
#   GPU:    the plan (batch 1, -O2) runs every test image (`gpuc eval PLAN`),
#           then `gpuc bench` times it.
#   no GPU: the plan is compiled for sm_90 (NVRTC needs no GPU) and the
#           graph it was generated from (the -O2 passes' output) runs on the
#           CPU reference (`gpuc eval MODEL --cpu -O2`).
# One epoch on the CPU reference is about a minute of one core (937 steps of
# 64 images); GPUC_DEMO_STEPS=N stops the epoch after N steps.
# Outputs: build/demo/small_cnn_fmnist.onnx (trained), .gpuc (the plan).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja >/dev/null
ninja -C build
data=${GPUC_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
out=build/demo
mkdir -p "$out"
steps=(); span="one epoch"
if [ -n "${GPUC_DEMO_STEPS:-}" ]; then steps=(--max-steps "$GPUC_DEMO_STEPS"); span="$GPUC_DEMO_STEPS steps"; fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  where=(); arch=(); where_said="the GPU"
else
  where=(--cpu); arch=(--arch sm_90); where_said="the CPU reference (no GPU here)"
fi
echo "== training build/models/small_cnn.onnx on Fashion-MNIST, $span, on $where_said"
build/gpuc train build/models/small_cnn.onnx --data "fashion-mnist:$data" "${where[@]}" --epochs 1 \
  --batch 64 --lr 0.05 --seed 1 --log-every 200 "${steps[@]}" --save "$out/small_cnn_fmnist.onnx"
echo "== compiling the trained model"
build/gpuc "$out/small_cnn_fmnist.onnx" -O2 "${arch[@]}" -o "$out/small_cnn_fmnist.gpuc"
echo "== test accuracy of the compiled model"
if [ ${#where[@]} -eq 0 ]; then
  build/gpuc eval "$out/small_cnn_fmnist.gpuc" --data "fashion-mnist:$data" | tee "$out/eval.txt"
  build/gpuc bench "$out/small_cnn_fmnist.gpuc" --iters 200
else
  build/gpuc eval "$out/small_cnn_fmnist.onnx" --data "fashion-mnist:$data" --cpu -O2 | tee "$out/eval.txt"
fi
acc=$(sed -n 's/^test accuracy \(.*\)$/\1/p' "$out/eval.txt")
echo "small_cnn after $span on Fashion-MNIST: test accuracy $acc, plan $out/small_cnn_fmnist.gpuc"
