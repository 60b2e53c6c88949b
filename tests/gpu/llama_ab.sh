#!/usr/bin/env bash
# One GPU call, from the repo root (docs/ZOO.md, "LLaMA's RMSNorm,
# rotary embedding and SwiGLU"): llama_small (bench/zoo_models.py) exported here with
# TorchScript, -O2 --fp16 plans at b1 and b32: off (GPUC_NO_FUSE_RMSNORM=1
# GPUC_NO_FUSE_ROTARY=1 GPUC_NO_FUSE_GATED_MLP=1), rms (passes/fuse_rmsnorm.c
# only), rot (and passes/fuse_rotary.c), on (and passes/fuse_gated_mlp.c),
# timed with `gpuc bench` twice each and profiled; then bench/zoo.sh for
# llama_small (ZOO=... for others) beside torch.compile, both exporters, one
# worker (two disturbed each other's timings). BUDGET: seconds for the
# whole call (default 560). Carry: build-carry (tests/gpu/pack_carry.sh).
set -u
C=$PWD/build-carry
. tests/gpu/gpu_env.sh
P=/tmp/ab; mkdir -p $P $OUT/ab
t0=$(date +%s)
$PY - <<'PY' > $OUT/ab/compile.log 2>&1
import sys; sys.path.insert(0, "bench")
import zoo_models as zm
md = [m for m in zm.MODELS if m.name == "llama_small"][0]
print(zm.export(zm.build(md, "cpu"), md, "ts", "/tmp/ab/llama_ts.onnx"))
PY
echo "exported in $(( $(date +%s) - t0 )) s"
{
for b in 1 32; do
  sh="--shape input_ids=${b}x128 --shape attention_mask=${b}x128"
  $C/gpuc $P/llama_ts.onnx -O2 --fp16 --arch sm_90 $sh -o $P/on_b$b.gpuc | tail -1 &
  GPUC_NO_FUSE_GATED_MLP=1 $C/gpuc $P/llama_ts.onnx -O2 --fp16 --arch sm_90 $sh -o $P/rot_b$b.gpuc | tail -1 &
  GPUC_NO_FUSE_GATED_MLP=1 GPUC_NO_FUSE_ROTARY=1 $C/gpuc $P/llama_ts.onnx -O2 --fp16 --arch sm_90 $sh -o $P/rms_b$b.gpuc | tail -1 &
  GPUC_NO_FUSE_GATED_MLP=1 GPUC_NO_FUSE_RMSNORM=1 GPUC_NO_FUSE_ROTARY=1 $C/gpuc $P/llama_ts.onnx -O2 --fp16 --arch sm_90 $sh -o $P/off_b$b.gpuc | tail -1 &
done
wait
} >> $OUT/ab/compile.log 2>&1
echo "compiled in $(( $(date +%s) - t0 )) s"
for p in off_b1 rms_b1 rot_b1 on_b1 off_b32 rms_b32 rot_b32 on_b32; do
  for rep in 1 2; do
    r=$($C/gpuc bench $P/$p.gpuc --iters 300 --warmup 30 2>&1 | tr '\n' ' ')
    echo "$p rep$rep: $r"
  done
done | tee $OUT/ab/bench.log
for p in on_b32; do
  $C/gpuc bench $P/$p.gpuc --iters 100 --profile > $OUT/ab/prof_$p.txt 2>&1
done
echo "A/B done at $(( $(date +%s) - t0 )) s"
export GPUC=$C/gpuc PYTHONUNBUFFERED=1
left=$(( ${BUDGET:-560} - ($(date +%s) - t0) ))
timeout $left bench/zoo.sh --models ${ZOO:-llama_small} --workers 1 --exporters ts,dynamo --opts=-O2 --timed fp16 --budget $(( left - 15 )) --timeout-per-model $(( left - 25 ))
echo "all done at $(( $(date +%s) - t0 )) s"
