#!/usr/bin/env bash
# One GPU call, from the repo root: one gpuc build's plans under two sets
# of environment switches (codegen A/B knobs such as GPUC_CONV_PAD_C=0),
# on zoo models exported here (TorchScript, random weights), -O2 --fp16 at
# each batch of BATCHES. Correct first: each B plan's outputs against the
# A plan's on the same random input (fp16 rel L2 within 1e-2, finite);
# then `gpuc bench --iters 300` medians, A and B interleaved, twice; then
# `bench --profile` of the B plans named in PROFILE ("model:batch ...").
#   ENV_A="GPUC_CONV_PAD_C=0" ENV_B="" MODELS="resnet50 coatnet_0_rw_224" \
#     CARRY=build-carry-lead tests/gpu/env_ab.sh
# CARRY holds gpuc; logs in $OUT/envab (one tgz: the device tool returns
# only a few files).
set -u
C=$PWD/${CARRY:-build-carry}
. tests/gpu/gpu_env.sh
P=/tmp/envab; mkdir -p $P $OUT/envab
t0=$(date +%s)
MODELS=${MODELS:-resnet50}
BATCHES=${BATCHES:-1 32}
shape_args() { # model batch -> --shape flags from the zoo's spec
  $PY -c "import sys; sys.path.insert(0, 'bench'); import zoo_models as Z
s = Z.BY_NAME['$1'].spec
print(' '.join('--shape %s=%s' % (k, 'x'.join(str(d) for d in ($2,) + tuple(v[0]))) for k, v in s.items()))"
}
{
for m in $MODELS; do
  $PY -c "import sys; sys.path.insert(0, 'bench'); import zoo_models as Z; M = Z.BY_NAME['$m']; Z.export(Z.build(M, 'cpu'), M, 'ts', '$P/$m.onnx')" &
done
wait
echo "exported in $(( $(date +%s) - t0 )) s"
for m in $MODELS; do
  for b in $BATCHES; do
    s=$(shape_args $m $b)
    env ${ENV_A:-} $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 $s -o $P/${m}_A_b$b.gpuc | tail -1 &
    env ${ENV_B:-} $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 $s -o $P/${m}_B_b$b.gpuc | tail -1 &
  done
  wait
done
} > $OUT/envab/compile.log 2>&1
echo "exported and compiled in $(( $(date +%s) - t0 )) s"
for m in $MODELS; do
  for b in $BATCHES; do
    rm -rf $P/in $P/out_A $P/out_B; mkdir -p $P/in
    $PY -c "import sys, numpy as np; sys.path.insert(0, 'bench'); import zoo_models as Z
for k, v in Z.make_inputs(Z.BY_NAME['$m'].spec, $b, np.random.default_rng($b)).items(): np.save('$P/in/%s.npy' % k, v)"
    ins=$(for f in $P/in/*.npy; do printf -- "--input %s=%s " $(basename $f .npy) $f; done)
    $C/gpuc run $P/${m}_A_b$b.gpuc $ins --out $P/out_A > /dev/null 2>&1
    $C/gpuc run $P/${m}_B_b$b.gpuc $ins --out $P/out_B > /dev/null 2>&1
    $PY -c "
import numpy as np, glob, os
fs = sorted(glob.glob('$P/out_A/*.npy'))
if not fs: print('FAIL $m b$b: no outputs')
for f in fs:
    a = np.load(f).astype(np.float64); g = np.load('$P/out_B/' + os.path.basename(f)).astype(np.float64)
    e = np.linalg.norm(a - g) / max(np.linalg.norm(a), 1e-30)
    print('%s $m b$b B vs A %s: rel L2 %.2e' % ('PASS' if e <= 1e-2 and np.isfinite(g).all() else 'FAIL', os.path.basename(f), e))
" 2>&1
  done
done | tee $OUT/envab/check.log
for m in $MODELS; do
  for b in $BATCHES; do
    for rep in 1 2; do
      for v in A B; do
        r=$($C/gpuc bench $P/${m}_${v}_b$b.gpuc --iters 300 --warmup 30 2>&1 | grep -o 'median [0-9.]* ms')
        echo "$m b$b $v rep$rep: $r"
      done
    done
  done
done | tee $OUT/envab/bench.log
for mb in ${PROFILE:-}; do
  $C/gpuc bench $P/${mb%%:*}_B_b${mb##*:}.gpuc --iters 100 --profile > $OUT/envab/prof_${mb%%:*}_b${mb##*:}.txt 2>&1
done
echo "done at $(( $(date +%s) - t0 )) s" | tee -a $OUT/envab/bench.log
tar czf $OUT/envab.tgz -C $OUT envab && rm -rf $OUT/envab
