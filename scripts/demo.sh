#!/usr/bin/env bash
# Set up, build, and run the bundled default model (a small CNN for 28x28
# images). Runs on the GPU when gpuc has a GPU backend and a GPU is present;
# today it runs the CPU reference executor.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja >/dev/null
ninja -C build
build/gpuc inspect build/models/small_cnn.onnx
build/gpuc run build/models/small_cnn.onnx --cpu --out build/demo_out
echo "outputs written to build/demo_out/"
