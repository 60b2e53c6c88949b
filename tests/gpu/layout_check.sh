#!/usr/bin/env bash
# Layout and fusion beyond ResNet-50/BERT (issue 11) on the GPU machine,
# from the repo root, with the carried build in build-gpu/ (or $GPUC):
# ConvNeXt-tiny, MobileNetV3-Large, EfficientNet-B0, CoAtNet-0, MaxViT-tiny
# exported here with random weights (TorchScript exporter, opset 17),
# compiled -O2 --fp16 at batch 1 and 32; outputs against PyTorch fp32
# (fp16 within max(2e-2, 2x PyTorch fp16's own error); at batch 1 also the
# fp32 plan and the CPU reference within 1e-4); step counts, gpuc bench
# median beside torch.compile(mode="reduce-overhead") fp16 channels_last,
# and the top steps of gpuc bench --profile. PASS/FAIL lines; logs in $OUT.
# usage: tests/gpu/layout_check.sh [MODELS (comma list)]
# (or LAYOUT_MODELS / LAYOUT_BATCHES, e.g. LAYOUT_MODELS=convnext_tiny
#  LAYOUT_BATCHES=32; all five at both batches take about 15 minutes,
#  mostly torch.compile; under tests/gpu/compression_round.sh give it
#  LAYOUT_S=900)
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
models=${1:-${LAYOUT_MODELS:-convnext_tiny,mobilenet_v3_large,efficientnet_b0,coatnet,maxvit}}
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $GPUC --version) 2>&1 | tee "$OUT/layout_log.txt"
$PY tests/gpu/layout_models.py --gpuc "$GPUC" --work /tmp/gpuc_layout --out "$OUT" --models "$models" \
    --batches "${LAYOUT_BATCHES:-1,32}" \
    2>&1 | tee -a "$OUT/layout_log.txt"
exit "${PIPESTATUS[0]}"
