#!/usr/bin/env bash
# The zoo on the GPU machine, from the repo root (docs/ZOO.md):
#   bench/zoo.sh [zoo.py flags...]      e.g. --models all --shard 2/8
# Uses the carried build-gpu/gpuc (GPUC=... to change), cuDNN from PyTorch's
# wheel, and writes zoo.jsonl, zoo.md and zoo.log to $OUT.
set -u
. "$(dirname "$0")/../tests/gpu/gpu_env.sh"
export GPUC_TUNE_CACHE=${GPUC_TUNE_CACHE:-/tmp/gpuc_zoo_tune.txt}   # -O3's measurements
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$GPUC" --version) 2>&1 | tee "$OUT/zoo.log"
# the exporters' warnings go to the log only; progress lines and the table to the terminal
$PY bench/zoo.py --gpuc "$GPUC" --out "$OUT" "$@" 2>&1 | tee -a "$OUT/zoo.log" | grep -E '^\[ *[0-9.]+s\]|^\||^- |^#|^command'
