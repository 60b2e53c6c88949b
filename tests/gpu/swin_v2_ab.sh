#!/usr/bin/env bash
# One GPU call, from the repo root (docs/ZOO.md, "Swin V2's cosine
# attention"): A/B plans of swin_v2_t (TorchScript export made here,
# random weights), -O2 --fp16, b1 and b32, timed with `gpuc bench`:
#   old: GPUC_NO_FUSE_L2NORM=1 (F.normalize written out: the q/k
#        Transpose and Gather copies, ReduceL2, Clip, Div, Mul);
#   new: one L2NormRows a normalize, reading q/k in the QKV output;
# each twice, interleaved, then bench --profile of the new plans; then
# bench/zoo.py (one worker) for swin_v2_t from both exporters and
# eca_nfnet_l0 (its ECA gate inside the NHWC region, untimed until now)
# beside torch.compile, checked against PyTorch. Logs in $OUT/ab, the zoo
# table in $OUT. CARRY (default build-carry) holds a Release gpuc.
set -u
C=$PWD/${CARRY:-build-carry}
. tests/gpu/gpu_env.sh
P=/tmp/ab_swin; mkdir -p $P $OUT/ab
t0=$(date +%s)
{
$PY -c "import sys; sys.path.insert(0, 'bench'); import zoo_models as Z; M = Z.BY_NAME['swin_v2_t']; Z.export(Z.build(M, 'cpu'), M, 'ts', '$P/swin.onnx')"
echo "exported in $(( $(date +%s) - t0 )) s"
for b in 1 32; do
  GPUC_NO_FUSE_L2NORM=1 $C/gpuc $P/swin.onnx -O2 --fp16 --arch sm_90 --shape input=${b}x3x224x224 -o $P/old_b$b.gpuc | tail -1 &
  $C/gpuc $P/swin.onnx -O2 --fp16 --arch sm_90 --shape input=${b}x3x224x224 -o $P/new_b$b.gpuc | tail -1 &
done
wait
} > $OUT/ab/compile.log 2>&1
echo "exported and compiled in $(( $(date +%s) - t0 )) s"
for b in 1 32; do
  for rep in 1 2; do
    for v in old new; do
      [ $rep = 1 ] && $C/gpuc inspect $P/${v}_b$b.gpuc | grep -o 'schedule ([0-9]* steps; [0-9]* bytes' | sed "s/^/${v}_b$b: /"
      echo "${v}_b$b rep$rep: $($C/gpuc bench $P/${v}_b$b.gpuc --iters 300 --warmup 30 2>&1 | tr '\n' ' ')"
    done
  done
done | tee $OUT/ab/bench.log
for b in 1 32; do $C/gpuc bench $P/new_b$b.gpuc --iters 100 --profile > $OUT/ab/prof_new_b$b.txt 2>&1; done
echo "A/B done at $(( $(date +%s) - t0 )) s"
export GPUC=$C/gpuc PYTHONUNBUFFERED=1
left=$(( ${BUDGET:-430} - ($(date +%s) - t0) ))
timeout $left bench/zoo.sh --models swin_v2_t,eca_nfnet_l0 --workers 1 --exporters ts,dynamo --opts=-O2 --timed fp16 \
  --budget $(( left - 15 )) --timeout-per-model $(( left / 2 ))
echo "all done at $(( $(date +%s) - t0 )) s"
