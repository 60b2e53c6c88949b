#!/usr/bin/env bash
# attention_flash2 against attention_flash (GPUC_ATTN_FLASH_V1=1) on the GPU
# machine, from the repo root, with a carried Release gpuc and the fp16
# attention models of tests/gpu/flash2_models.py ($MODELS):
#  1. tests/gpu/flash2_lab.py: each case and kernel shape checked against
#     PyTorch float32 and timed beside SDPA fp16;
#  2. bench/zoo.py: Whisper-base's encoder at batch 32, -O2 --fp16, beside
#     torch.compile fp16 (the issue 11 row), then the same ONNX compiled with
#     and without GPUC_ATTN_FLASH_V1=1, `gpuc bench --profile` (whole plan
#     and the Attention steps);
#  3. tests/gpu/longattn_kernels.py --quick on what time is left.
# usage: GPUC=build-carry-attn/gpuc MODELS=build-carry-attn/models tests/gpu/flash2_ab.sh
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-carry-attn/gpuc}
MODELS=${MODELS:-$PWD/build-carry-attn/models}
log="$OUT/flash2_log.txt"
(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; $GPUC --version) 2>&1 | tee "$log"
timeout ${LAB_S:-120} $PY tests/gpu/flash2_lab.py --gpuc "$GPUC" --models "$MODELS" --out "$OUT" 2>&1 |
  grep -v -i warning | tee -a "$log"
zw=/tmp/gpuc_flash2_zoo
timeout ${ZOO_S:-110} $PY bench/zoo.py --gpuc "$GPUC" --out "$OUT/zoo" --work $zw --keep-work \
    --models whisper_base_encoder --exporters ts --batches 32 --opts=-O2 --precisions fp16 --timed fp16 \
    --budget $(( ${ZOO_S:-110} - 5 )) --timeout-per-model $(( ${ZOO_S:-110} - 10 )) >"$OUT/zoo_log.txt" 2>&1
grep -i -E "whisper|error|fail" "$OUT/zoo_log.txt" | tail -5 | tee -a "$log"
$PY - "$OUT/zoo/zoo.jsonl" <<'PYEOF' 2>&1 | tee -a "$log"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); c = r.get("-O2_fp16") or {}
    print("zoo %s b%d fp16: gpuc %s ms, torch.compile fp16 %s ms, eager fp16 %s ms, rel L2 %s (limit %s) pass %s" % (
        r["model"], r["batch"], c.get("ms"), r.get("compile_fp16_ms"), r.get("eager_fp16_ms", r.get("torch_fp16_ms")),
        c.get("rel_l2"), c.get("limit"), c.get("pass")))
PYEOF
onnx=$zw/whisper_base_encoder/whisper_base_encoder_ts.onnx
if [ -f "$onnx" ]; then
  for v in v2 v1; do
    env=""; [ $v = v1 ] && env="GPUC_ATTN_FLASH_V1=1"
    env $env timeout 60 $GPUC "$onnx" -O2 --fp16 --shape input_features=32x80x3000 -o /tmp/whisper_$v.gpuc >/dev/null 2>&1
    timeout 40 $GPUC bench /tmp/whisper_$v.gpuc --iters 100 --warmup 10 --profile >"$OUT/whisper_$v.txt" 2>&1
    echo "whisper b32 $v: $(grep -o 'median [0-9.]* ms' "$OUT/whisper_$v.txt" | head -1); attention steps:" | tee -a "$log"
    # the Attention steps are named after the ONNX node that ends them (self_attn/MatMul_1)
    grep -E "Attention|self_attn/MatMul_1$" "$OUT/whisper_$v.txt" | head -8 | tee -a "$log"
  done
fi
timeout ${LONG_S:-50} $PY tests/gpu/longattn_kernels.py --gpuc "$GPUC" --out "$OUT" --work /tmp/gpuc_longattn --quick \
  --only none,mask,causal_gqa,causal 2>&1 | grep -v -i warning | tee -a "$log"
echo "flash2_ab: done"
