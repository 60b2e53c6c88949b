#!/usr/bin/env bash
# One GPU call, from the repo root: the Gather words and the warp-rows
# lanes (codegen/lower_gather.c, codegen/lower_rows.c) timed against the
# build before them, on the models whose profiles named them: swin_v2_t
# (torch.roll's Gathers, 96-channel LayerNorms), swin_t and convnext_tiny
# (LayerNorms of 96 channels), bert_base (LayerNorms and Softmax of 768),
# llama_small (RotaryHalf's 16-byte vectors, RMSNorm of 512),
# TorchScript exports made here, random weights, -O2 --fp16, b1 and b32,
# `gpuc bench` twice each, interleaved; bench --profile of the new swin_v2_t
# b32 plan. CARRY holds gpuc (new) and gpuc_prev (before); NEW_ENV (e.g.
# "GPUC_DWCONV_V1=1 GPUC_ATTN_FLASH_V1=1") switches other changes of the
# new build off for its plans. Logs in $OUT/ab2.
set -u
C=$PWD/${CARRY:-build-carry}
. tests/gpu/gpu_env.sh
P=/tmp/ab_rows; mkdir -p $P $OUT/ab2
t0=$(date +%s)
MODELS=${MODELS:-swin_v2_t swin_t convnext_tiny bert_base llama_small}
{
for m in $MODELS; do
  $PY -c "import sys; sys.path.insert(0, 'bench'); import zoo_models as Z; M = Z.BY_NAME['$m']; Z.export(Z.build(M, 'cpu'), M, 'ts', '$P/$m.onnx')" &
done
wait
echo "exported in $(( $(date +%s) - t0 )) s"
for m in $MODELS; do
  for b in 1 32; do
    if [ $m = bert_base ] || [ $m = llama_small ]; then s="--shape input_ids=${b}x128 --shape attention_mask=${b}x128"; else s="--shape input=${b}x3x224x224"; fi
    $C/gpuc_prev $P/$m.onnx -O2 --fp16 --arch sm_90 $s -o $P/${m}_prev_b$b.gpuc | tail -1 &
    env ${NEW_ENV:-} $C/gpuc $P/$m.onnx -O2 --fp16 --arch sm_90 $s -o $P/${m}_new_b$b.gpuc | tail -1 &
  done
  wait
done
} > $OUT/ab2/compile.log 2>&1
echo "exported and compiled in $(( $(date +%s) - t0 )) s"
# correct first: each new plan against the build before on the same random
# inputs (the Gather and rotary words move the same bits; the norms' sums
# run in another order: fp16 rel L2 within 1e-2)
for m in $MODELS; do
  for b in 1 32; do
    rm -rf $P/in_$m$b $P/out_*; mkdir -p $P/in_$m$b
    $PY - $P/in_$m$b $m $b <<'PYEOF'
import sys, numpy as np
d, m, b = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(b)
if m in ("bert_base", "llama_small"):
    np.save(d + "/input_ids.npy", rng.integers(0, 30000, (b, 128)).astype(np.int64))
    np.save(d + "/attention_mask.npy", np.ones((b, 128), np.int64))
else:
    np.save(d + "/input.npy", rng.standard_normal((b, 3, 224, 224)).astype(np.float32))
PYEOF
    ins=$(for f in $P/in_$m$b/*.npy; do n=$(basename $f .npy); printf -- "--input %s=%s " $n $f; done)
    $C/gpuc run $P/${m}_prev_b$b.gpuc $ins --out $P/out_prev > /dev/null 2>&1
    $C/gpuc run $P/${m}_new_b$b.gpuc $ins --out $P/out_new > /dev/null 2>&1
    $PY -c "
import numpy as np, glob, os
for f in sorted(glob.glob('$P/out_prev/*.npy')):
    a = np.load(f).astype(np.float64); g = np.load('$P/out_new/' + os.path.basename(f)).astype(np.float64)
    e = np.linalg.norm(a - g) / max(np.linalg.norm(a), 1e-30)
    print('%s $m b$b new vs prev %s: rel L2 %.2e' % ('PASS' if e <= 1e-2 and np.isfinite(g).all() else 'FAIL', os.path.basename(f), e))
" 2>&1 || echo "FAIL $m b$b: no outputs"
  done
done | tee $OUT/ab2/check.log
for m in $MODELS; do
  for b in 1 32; do
    for rep in 1 2; do
      for v in prev new; do
        r=$($C/gpuc bench $P/${m}_${v}_b$b.gpuc --iters 300 --warmup 30 2>&1 | grep -o 'median [0-9.]* ms')
        echo "$m b$b $v rep$rep: $r"
      done
    done
  done
done | tee $OUT/ab2/bench.log
$C/gpuc bench $P/swin_v2_t_new_b32.gpuc --iters 100 --profile > $OUT/ab2/prof_swin_v2_t_new_b32.txt 2>&1
$C/gpuc bench $P/convnext_tiny_new_b32.gpuc --iters 100 --profile > $OUT/ab2/prof_convnext_tiny_new_b32.txt 2>&1
echo "done at $(( $(date +%s) - t0 )) s"
