#!/usr/bin/env bash
# One GPU call, from the repo root (issue 11): the NHWC depthwise kernels of
# codegen/lower_dwconv.c, A/B: the row kernel (GPUC_DWCONV_V1=1), the
# tiled kernel (GPUC_DWCONV_TILED=1), the stream kernel
# (GPUC_DWCONV_STREAM=1), the choice before the stream kernel
# (GPUC_DWCONV_PREV=1: "old") and the default choice ("new"):
#   1. step by step (tests/gpu/dwconv_ab.py run): the depthwise shapes of
#      coatnet_0_rw_224, convnextv2_atto, mobilenet_v2 and efficientnet_b0
#      at batch 32, fp16, as one-step models made and compiled here
#      (`dwconv_ab.py prepare`), rows/tiled/stream each checked against
#      `gpuc run --cpu --fp16` on fresh random inputs and timed with
#      `gpuc bench --profile`, with some of the stream kernel's knobs;
#   2. five models (TorchScript exports made there, random weights),
#      -O2 --fp16 b32, old, new and stream plans timed with `gpuc bench`
#      (twice), profiled (the depthwise steps' ms and GB/s), outputs
#      compared on one random input (and three of them at b1, old/new);
#   3. bench/zoo.sh beside torch.compile with the time left (new plans).
# Carry: build-carry-dw (gpuc, Release, and steps/: `dwconv_ab.py prepare
# build-dw/gpuc build-carry-dw/steps`). BUDGET: seconds for the whole call.
set -u
C=$PWD/${CARRY:-build-carry-dw}
. tests/gpu/gpu_env.sh
P=/tmp/ab_dw; L=$P/logs; mkdir -p $P $L
# what comes back: summary.txt, dwconv_steps.md, logs.tgz and the zoo's three
# files (the device tool returns only about 8 files: the first run, with
# every log a file of its own, lost its step table)
t0=$(date +%s)
BUDGET=${BUDGET:-380}
MODELS="coatnet_0_rw_224 convnextv2_atto efficientnet_b0 mobilenet_v2 mobilenet_v3_large"
B1="coatnet_0_rw_224 mobilenet_v2 efficientnet_b0"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt 2>&1
# models: exported and compiled on the CPU while the steps are timed
(
  for m in $MODELS; do
    $PY -c "import sys; sys.path.insert(0, 'bench'); import zoo_models as Z; M = Z.BY_NAME['$m']; Z.export(Z.build(M, 'cpu'), M, 'ts', '$P/$m.onnx')" \
      > $L/export_$m.log 2>&1 &
  done
  wait
  echo "exported at $(( $(date +%s) - t0 )) s"
  for m in $MODELS; do
    for v in old new stream; do
      case $v in old) env=GPUC_DWCONV_PREV=1;; stream) env=GPUC_DWCONV_STREAM=1;; new) env=GPUC_DWCONV_NONE=1;; esac
      env $env $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 --shape input=32x3x224x224 -o $P/${m}_$v.gpuc \
        > $L/compile_${m}_$v.log 2>&1 &
    done
  done
  for m in $B1; do
    GPUC_DWCONV_PREV=1 $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 --shape input=1x3x224x224 -o $P/${m}_old_b1.gpuc \
      > $L/compile_${m}_old_b1.log 2>&1 &
    $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 --shape input=1x3x224x224 -o $P/${m}_new_b1.gpuc \
      > $L/compile_${m}_new_b1.log 2>&1 &
  done
  wait
  echo "compiled at $(( $(date +%s) - t0 )) s"
) > $L/models_prep.log 2>&1 &
prep=$!
timeout $(( BUDGET - 170 )) $PY tests/gpu/dwconv_ab.py run $C/gpuc $C/steps $L > $L/steps.log 2>&1
grep -E "^\||^AB |steps done|timed in" $L/steps.log | tee $OUT/summary.txt
cp $L/dwconv_steps.md $OUT/ 2>/dev/null
echo "steps done at $(( $(date +%s) - t0 )) s"
wait $prep
cat $L/models_prep.log
$PY -c "import numpy as np; np.save('$P/x.npy', np.random.default_rng().standard_normal((32, 3, 224, 224)).astype(np.float32))"
for m in $MODELS; do
  for v in old new stream; do
    [ -f $P/${m}_$v.gpuc ] || { echo "$m $v: no plan"; tail -3 $L/compile_${m}_$v.log; continue; }
    $C/gpuc inspect $P/${m}_$v.gpuc | grep -o 'schedule ([0-9]* steps; [0-9]* bytes' | sed "s/^/${m}_$v: /"
    for rep in 1 2; do
      echo "${m}_$v rep$rep: $($C/gpuc bench $P/${m}_$v.gpuc --iters 100 --warmup 20 2>&1 | tr '\n' ' ')"
    done
    $C/gpuc bench $P/${m}_$v.gpuc --iters 100 --profile > $L/prof_${m}_$v.txt 2>&1
    echo "${m}_$v: $(grep -E '^ +total' $L/prof_${m}_$v.txt)"
    $PY tests/gpu/dwconv_ab.py dwsteps $C/gpuc $P/${m}_$v.gpuc $L/prof_${m}_$v.txt > $L/dwsteps_${m}_$v.txt 2>&1
    tail -1 $L/dwsteps_${m}_$v.txt
    echo "  top steps:"; grep -E "^ +[0-9]+ " $L/prof_${m}_$v.txt | sort -k3 -g -r | head -4
    mkdir -p $P/out_${m}_$v
    $C/gpuc run $P/${m}_$v.gpuc --input input=$P/x.npy --out $P/out_${m}_$v > /dev/null 2>&1
  done
  $PY -c "
import numpy as np
a = np.load('$P/out_${m}_old/output.npy').astype(np.float64); b = np.load('$P/out_${m}_new/output.npy').astype(np.float64)
print('$m old vs new output (one random input): rel L2 %.3g, finite %s' % (np.linalg.norm(a - b) / np.linalg.norm(a), np.isfinite(b).all()))
" 2>&1 | tail -1
done | tee $L/models.log | tee -a $OUT/summary.txt
for m in $B1; do
  for v in old new; do
    for rep in 1 2; do
      echo "${m}_${v}_b1 rep$rep: $($C/gpuc bench $P/${m}_${v}_b1.gpuc --iters 300 --warmup 30 2>&1 | tr '\n' ' ')"
    done
    $C/gpuc bench $P/${m}_${v}_b1.gpuc --iters 200 --profile > $L/prof_${m}_${v}_b1.txt 2>&1
    $PY tests/gpu/dwconv_ab.py dwsteps $C/gpuc $P/${m}_${v}_b1.gpuc $L/prof_${m}_${v}_b1.txt > $L/dwsteps_${m}_${v}_b1.txt 2>&1
    echo "  $(tail -1 $L/dwsteps_${m}_${v}_b1.txt)"
  done
done | tee -a $L/models.log | tee -a $OUT/summary.txt
echo "models done at $(( $(date +%s) - t0 )) s"
export GPUC=$C/gpuc PYTHONUNBUFFERED=1
left=$(( BUDGET - ($(date +%s) - t0) ))
[ $left -gt 40 ] && timeout $left bench/zoo.sh --models coatnet_0_rw_224,mobilenet_v2,efficientnet_b0 \
  --workers 1 --exporters ts --batches 32 --precisions fp16 --opts=-O2 --timed fp16 \
  --budget $(( left - 10 )) --timeout-per-model $(( left - 20 ))
tar czf $OUT/logs.tgz -C $P logs
grep -E "^AB |steps done" $L/steps.log
echo "all done at $(( $(date +%s) - t0 )) s"
