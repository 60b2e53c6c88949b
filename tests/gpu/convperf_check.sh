#!/usr/bin/env bash
# Convnets at batch 32 on the GPU machine (issue 11): ConvNeXt-tiny,
# MobileNetV3-Large and EfficientNet-B0 exported here (TorchScript exporter,
# random weights, no downloads), compiled -O2 --fp16, -O3 --fp16 and -O2
# fp32, checked against PyTorch fp32 (fp16 judged against PyTorch's own fp16
# error, as bench/zoo.py does) and, at batch 2, against `gpuc run --cpu
# --fp16`; the top steps of `gpuc bench --profile`; gpuc's median beside
# torch.compile(mode="reduce-overhead") fp16 channels_last in the same run.
# PASS/FAIL lines; logs in $OUT (convperf_log.txt, convperf.json,
# convperf_profiles.txt). About 5-7 minutes on an H200.
# usage (repository root): GPUC=build-gpu/gpuc tests/gpu/convperf_check.sh [MODELS]
# (CONVPERF_OPTS=-O2 skips the -O3 plans; CONVPERF_BATCH=8 another batch)
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
models=${1:-convnext_tiny,mobilenet_v3_large,efficientnet_b0}
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $GPUC --version) 2>&1 | tee "$OUT/convperf_log.txt"
$PY tests/gpu/convperf_check.py --gpuc "$GPUC" --out "$OUT" --models "$models" \
    --batch "${CONVPERF_BATCH:-32}" --opts="${CONVPERF_OPTS:--O2,-O3}" 2>&1 | tee -a "$OUT/convperf_log.txt"
exit "${PIPESTATUS[0]}"
