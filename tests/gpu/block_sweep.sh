#!/usr/bin/env bash
# On the GPU machine, from the repo root: every bundled model compiled for
# this GPU (fp32 and --fp16), then run with its block-size-free kernels at
# 64..1024 threads a block against the compiled 256 (tests/tools/block_sweep.c):
# the outputs must be byte-identical. Then -O3 on two of them, and the tuned
# plans against the CPU reference.
# usage: tests/gpu/block_sweep.sh [BUILD_DIR]   (default build-gpu)
set -u
B=${1:-build-gpu}
GPUC=$PWD/$B/gpuc
SWEEP=$PWD/$B/tests/block_sweep
W=${WORK:-/tmp/gpuc_block_sweep}
mkdir -p "$W"
cudnn=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
fail=0
sweep() { # name, then compile flags
  local m=$1; shift
  local tag=$m$(echo "$*" | tr -cd 'a-z0-9')
  [ -f "$B/models/$m.onnx" ] || { echo "$m: not carried, skipped"; return; }
  "$GPUC" "$B/models/$m.onnx" -o "$W/$tag.gpuc" "$@" > "$W/$tag.log" 2>&1 || { echo "$m $*: compile failed"; cat "$W/$tag.log"; fail=1; return; }
  "$SWEEP" "$W/$tag.gpuc" || fail=1
}
for fp in "" --fp16; do
  sweep mlp --shape image=16x784 $fp
  sweep small_cnn $fp
  sweep small_bn_cnn --shape image=4x1x28x28 $fp
  sweep mobile_block $fp
  sweep resnet_block $fp
  sweep ffn_block --shape x=8x16x64 $fp
  sweep resnet50 --shape input=2x3x224x224 $fp
  sweep attention_bert --shape q=2x12x128x64 --shape k=2x12x128x64 --shape v=2x12x128x64 --shape mask=2x1x1x128 $fp
done
# -O3 end to end: the report names the kernels' block sizes; inspect shows
# which steps it changed; the tuned plan still agrees with the CPU reference
export GPUC_TUNE_CACHE=$W/autotune.txt
for m in mobile_block ffn_block; do
  s=""; [ "$m" = ffn_block ] && s="--shape x=8x16x64"
  "$GPUC" "$B/models/$m.onnx" -O3 --fp16 $s -o "$W/${m}_O3.gpuc" | grep -E "autotuned|kernel block" || fail=1
  "$GPUC" inspect "$W/${m}_O3.gpuc" | grep -E "block-size-free|\(tuned\)"
  "$SWEEP" "$W/${m}_O3.gpuc" || fail=1
done
echo "block sweep: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
