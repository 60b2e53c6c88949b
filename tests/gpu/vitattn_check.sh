#!/usr/bin/env bash
# Vision-transformer attention on the GPU machine (issue 11: ViT-B/16 at
# batch 32 slower than torch.compile), from the repo root, with a carried
# Release gpuc ($GPUC, default build-gpu/gpuc) and its bundled models
# ($ATT_MODELS, default build-gpu/models):
#  1. tests/gpu/attention_check.sh: the Attention kernels against the CPU
#     reference, among them ragged shapes (Sq 33, Sk 20/70/130) where the
#     tensor-core kernels now skip the warps past Sq and the 16-key groups
#     past the last key;
#  2. bench/zoo.py: torchvision ViT-B/16, timm DeiT-small and Hugging Face
#     ViT-base, both exporters, batch 32, -O2 --fp16, checked against
#     PyTorch fp32 and timed beside torch.compile fp16 (the dynamo exports
#     of DeiT and HF ViT now compile to the TorchScript export's plan);
#  3. tests/gpu/xformer_ab.py with AB_OFF=GPUC_ATTENTION_FULL_TILES: each
#     model's TorchScript plan at batch 32 against the same compile with
#     every warp and key group computed (the kernels before), and ViT-B/16's
#     dynamo export: steps, MB moved, `gpuc bench` times, slowest steps.
# About 8 minutes (VITATTN_BUDGET seconds, default 300, bounds the zoo run).
# usage: GPUC=build-gpu/gpuc tests/gpu/vitattn_check.sh [MODELS (comma list)]
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
models=${1:-vit_b_16,deit_small_patch16_224,hf_vit_base}
log="$OUT/vitattn_log.txt"
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $GPUC --version) 2>&1 | tee "$log"
"$(dirname "$0")/attention_check.sh" "$GPUC" "${ATT_MODELS:-build-gpu/models}" 2>&1 | tee -a "$log"
att_rc=${PIPESTATUS[0]}
$PY bench/zoo.py --gpuc "$GPUC" --out "$OUT" --work /tmp/gpuc_vitattn --keep-work --models "$models" \
    --exporters ts,dynamo --batches 32 --opts=-O2 --precisions fp16 \
    --budget "${VITATTN_BUDGET:-300}" --timeout-per-model 200 2>&1 | tee -a "$log"
zoo_rc=${PIPESTATUS[0]}
ab_rc=0
AB_OFF=GPUC_ATTENTION_FULL_TILES XFORMER_AB_BUDGET=${VITATTN_AB_BUDGET:-60} \
    $PY tests/gpu/xformer_ab.py "$GPUC" /tmp/gpuc_vitattn "$models" 32 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || ab_rc=1
XFORMER_AB_BUDGET=${VITATTN_AB_BUDGET:-60} \
    $PY tests/gpu/xformer_ab.py "$GPUC" /tmp/gpuc_vitattn vit_b_16 32 dynamo GPUC_ATTENTION_FULL_TILES 2>&1 \
    | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || ab_rc=1
[ "$att_rc" = 0 ] || exit "$att_rc"
[ "$zoo_rc" = 0 ] || exit "$zoo_rc"
exit "$ab_rc"
