#!/usr/bin/env bash
# One GPU call, from the repo root (docs/ZOO.md, "ShuffleNet's channel
# shuffle, ConvNeXt V2's GRN, batch-1 NHWC"): A/B plans of
# shufflenet_v2_x1_0 and convnextv2_atto, -O2 --fp16, b1 and b32, timed with
# `gpuc bench` (gpuc_old: the build before; gpuc: the build after;
# GPUC_NHWC_DEPTHWISE_B1=1: shufflenet b1 in NHWC), then bench/zoo.sh for
# both models beside torch.compile. Logs and profiles in $OUT/ab, the zoo
# table in $OUT. The carried folder (CARRY, default build-carry-h1) holds
# gpuc, gpuc_old (Release builds, tests/gpu/pack_carry.sh's way) and
# TorchScript exports with a dynamic batch: shuf_ts.onnx
# (torchvision.models.shufflenet_v2_x1_0()) and cnx_ts.onnx
# (timm.create_model("convnextv2_atto")), opset 17.
set -u
C=$PWD/${CARRY:-build-carry-h1}
. tests/gpu/gpu_env.sh
P=/tmp/ab; mkdir -p $P $OUT/ab
t0=$(date +%s)
{
for b in 1 32; do
  for v in old new; do
    g=$C/gpuc; [ $v = old ] && g=$C/gpuc_old
    $g $C/shuf_ts.onnx -O2 --fp16 --arch sm_90 --shape x=${b}x3x224x224 -o $P/shuf_${v}_b$b.gpuc | tail -1 &
    $g $C/cnx_ts.onnx -O2 --fp16 --arch sm_90 --shape x=${b}x3x224x224 -o $P/cnx_${v}_b$b.gpuc | tail -1 &
  done
done
GPUC_NHWC_DEPTHWISE_B1=1 $C/gpuc $C/shuf_ts.onnx -O2 --fp16 --arch sm_90 --shape x=1x3x224x224 -o $P/shuf_nhwcdw_b1.gpuc | tail -1 &
wait
} > $OUT/ab/compile.log 2>&1
echo "compiled in $(( $(date +%s) - t0 )) s"
for p in shuf_old_b1 shuf_new_b1 shuf_nhwcdw_b1 shuf_old_b32 shuf_new_b32 cnx_old_b1 cnx_new_b1 cnx_old_b32 cnx_new_b32; do
  for rep in 1 2; do
    r=$($C/gpuc bench $P/$p.gpuc --iters 300 --warmup 30 2>&1 | tr '\n' ' ')
    echo "$p rep$rep: $r"
  done
done | tee $OUT/ab/bench.log
for p in shuf_new_b1 shuf_new_b32 cnx_new_b32; do
  $C/gpuc bench $P/$p.gpuc --iters 100 --profile > $OUT/ab/prof_$p.txt 2>&1
done
echo "A/B done at $(( $(date +%s) - t0 )) s"
export GPUC=$C/gpuc PYTHONUNBUFFERED=1
left=$(( 455 - ($(date +%s) - t0) ))
timeout $left bench/zoo.sh --models shufflenet_v2_x1_0,convnextv2_atto --workers 2 --exporters ts --opts=-O2 --timed fp16 --budget $(( left - 15 )) --timeout-per-model $(( left - 25 ))
echo "all done at $(( $(date +%s) - t0 )) s"
