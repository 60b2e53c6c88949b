#!/usr/bin/env bash
# passes/patchify_conv.c on the GPU machine, from the repo root, with a
# carried Release gpuc ($GPUC, default build-gpu/gpuc): torchvision's
# ViT-B/16 (16x16/16 conv_proj) and ConvNeXt-tiny (4x4/4 stem, three 2x2/2
# downsamplings), TorchScript export, -O2 --fp16 at batch 1 and 32 through
# bench/zoo.py (checked against PyTorch fp32 by its rule, timed beside
# torch.compile), then the before/after of the pass (tests/gpu/xformer_ab.py
# with AB_OFF=GPUC_NO_PATCHIFY: the same compile with the convs left to
# cuDNN), at batch 32 and 1: steps, MB moved, `gpuc bench` times and the
# after plan's slowest steps ("AB ..." lines). About 5 minutes.
# usage: GPUC=build-gpu/gpuc tests/gpu/patchify_check.sh [MODELS (comma list)]
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
models=${1:-vit_b_16,convnext_tiny}
log="$OUT/patchify_log.txt"
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $GPUC --version) 2>&1 | tee "$log"
$PY bench/zoo.py --gpuc "$GPUC" --out "$OUT" --work /tmp/gpuc_patchify --keep-work --models "$models" \
    --exporters ts --batches 1,32 --opts=-O2 --precisions fp16 \
    --budget "${PATCHIFY_BUDGET:-200}" --timeout-per-model 200 2>&1 | tee -a "$log"
zoo_rc=${PIPESTATUS[0]}
ab_rc=0
for b in 32 1; do
  AB_OFF=GPUC_NO_PATCHIFY XFORMER_AB_BUDGET=${PATCHIFY_AB_BUDGET:-60} \
      $PY tests/gpu/xformer_ab.py "$GPUC" /tmp/gpuc_patchify "$models" "$b" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || ab_rc=1
done
[ "$zoo_rc" = 0 ] || exit "$zoo_rc"
exit "$ab_rc"
