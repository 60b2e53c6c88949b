#!/usr/bin/env bash
# One GPU call, from the repo root (docs/ZOO.md, "DenseNet's Concats,
# PoolFormer's GroupNorm"): A/B plans of densenet121 and poolformer_s12
# (TorchScript exports made here, random weights), -O2 --fp16, b1 and b32,
# timed with `gpuc bench`:
#   old:    the four rewrites off (GPUC_NO_CONCAT_GROUP, GPUC_NO_FLAT_NORM,
#           GPUC_NO_PW_ACT, GPUC_NO_NORM_GROUP = 1): the plans of the build
#           before them;
#   new:    all on;
#   nonorm: poolformer with GPUC_NO_NORM_GROUP=1 only (the norm heading its
#           affine group off);
# then bench/zoo.sh for both models beside torch.compile. Logs and profiles
# in $OUT/ab, the zoo table in $OUT. The carried folder (CARRY, default
# build-carry-h) holds gpuc (a Release build).
set -u
C=$PWD/${CARRY:-build-carry-h}
. tests/gpu/gpu_env.sh
P=/tmp/ab_h; mkdir -p $P $OUT/ab
t0=$(date +%s)
# (GPUC_NO_POOL_GROUP, the AveragePool heading a group, came after the
# call of docs/ZOO.md: the timed "new" plans had no pool groups)
OFF="GPUC_NO_CONCAT_GROUP=1 GPUC_NO_FLAT_NORM=1 GPUC_NO_PW_ACT=1 GPUC_NO_NORM_GROUP=1 GPUC_NO_POOL_GROUP=1"
{
for m in densenet121 poolformer_s12; do
  $PY -c "import sys; sys.path.insert(0, 'bench'); import zoo_models as Z; M = Z.BY_NAME['$m']; Z.export(Z.build(M, 'cpu'), M, 'ts', '$P/$m.onnx')" &
done
wait
echo "exported in $(( $(date +%s) - t0 )) s"
for m in densenet121 poolformer_s12; do
  for b in 1 32; do
    env $OFF $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 --shape input=${b}x3x224x224 -o $P/${m}_old_b$b.gpuc | tail -1 &
    $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 --shape input=${b}x3x224x224 -o $P/${m}_new_b$b.gpuc | tail -1 &
  done
done
for b in 1 32; do
  GPUC_NO_NORM_GROUP=1 $C/gpuc $P/poolformer_s12.onnx -O2 --fp16 --arch sm_90 --shape input=${b}x3x224x224 \
    -o $P/poolformer_s12_nonorm_b$b.gpuc | tail -1 &
done
wait
} > $OUT/ab/compile.log 2>&1
echo "exported and compiled in $(( $(date +%s) - t0 )) s"
for p in densenet121_old_b1 densenet121_new_b1 densenet121_old_b32 densenet121_new_b32 \
         poolformer_s12_old_b1 poolformer_s12_nonorm_b1 poolformer_s12_new_b1 \
         poolformer_s12_old_b32 poolformer_s12_nonorm_b32 poolformer_s12_new_b32; do
  $C/gpuc inspect $P/$p.gpuc | grep -o 'schedule ([0-9]* steps; [0-9]* bytes' | sed "s/^/$p: /"
  for rep in 1 2; do
    r=$($C/gpuc bench $P/$p.gpuc --iters 300 --warmup 30 2>&1 | tr '\n' ' ')
    echo "$p rep$rep: $r"
  done
done | tee $OUT/ab/bench.log
for p in densenet121_new_b1 densenet121_new_b32 poolformer_s12_new_b1 poolformer_s12_new_b32; do
  $C/gpuc bench $P/$p.gpuc --iters 100 --profile > $OUT/ab/prof_$p.txt 2>&1
done
echo "A/B done at $(( $(date +%s) - t0 )) s"
export GPUC=$C/gpuc PYTHONUNBUFFERED=1
left=$(( 405 - ($(date +%s) - t0) ))
timeout $left bench/zoo.sh --models densenet121,poolformer_s12 --workers 2 --exporters ts --opts=-O2 --timed fp16 \
  --budget $(( left - 15 )) --timeout-per-model $(( left - 25 ))
echo "all done at $(( $(date +%s) - t0 )) s"
