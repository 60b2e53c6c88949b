#!/usr/bin/env bash
# Set up, build, and run the bundled default model (a small CNN for 28x28
# images): compiled to a plan and run on the GPU when one is present, and on
# the CPU reference executor always (the two are compared by eye: same
# summary lines).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja >/dev/null
ninja -C build
build/gpuc inspect build/models/small_cnn.onnx
echo "== CPU reference"
build/gpuc run build/models/small_cnn.onnx --cpu --out build/demo_out/cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== GPU"
  build/gpuc build/models/small_cnn.onnx -O2 -o build/small_cnn.gpuc
  build/gpuc run build/small_cnn.gpuc --out build/demo_out/gpu
  build/gpuc bench build/small_cnn.gpuc --iters 200
else
  echo "== no GPU here: compiling a plan for sm_90 with NVRTC only"
  build/gpuc build/models/small_cnn.onnx -O2 --arch sm_90 -o build/small_cnn.gpuc
  build/gpuc inspect build/small_cnn.gpuc
fi
echo "outputs written to build/demo_out/"
