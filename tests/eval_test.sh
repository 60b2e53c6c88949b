#!/usr/bin/env bash
# gpuc eval on the CPU reference, and the --bf16 flag's CLI: the bundled MLP
# trained briefly by `gpuc train --cpu --save`, then `gpuc eval --cpu` of the
# saved model must print the test accuracy train printed at the end;
# --bf16 and --fp16 (the reference on the transformed graph) within 0.2
# points of it; bad flags and data give exit 2 / one-line exit 1. Without a
# GPU, `gpuc train --amp bf16` compiles its bf16 training plan (NVRTC) and
# stops at the --mem-limit account.
# usage: eval_test.sh GPUC MODELS_DIR DATA_DIR WORK_DIR
set -u
gpuc=$1 models=$2 data=$3 work=$4
mkdir -p "$work"
. "$(dirname "$0")/expect_lib.sh"

mlp=$models/mlp.onnx
trained=$work/mlp_trained.onnx
out=$("$gpuc" train "$mlp" --data "fashion-mnist:$data" --cpu --max-steps 300 --batch 64 --seed 3 \
      --save "$trained" 2>&1)
echo "$out" | tail -3
want=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p')
[ -n "$want" ] && [ -s "$trained" ] && ok || bad "training failed: $(echo "$out" | tail -2)"

acc_of() { sed -n 's/^test accuracy \([0-9.]*\)% (\([0-9]*\) images)$/\1/p' "$1"; }
loss_of() { sed -n 's/^test loss \([0-9.]*\)$/\1/p' "$1"; }
"$gpuc" eval "$trained" --data "fashion-mnist:$data" --cpu >"$work/eval32.txt" 2>&1
cat "$work/eval32.txt"
a32=$(acc_of "$work/eval32.txt") l32=$(loss_of "$work/eval32.txt")
[ -n "$a32" ] && [ "$a32" = "$want" ] && ok || bad "eval --cpu printed '$a32'%, train printed '$want'%"
[ -n "$l32" ] && awk -v l="$l32" 'BEGIN { exit !(l > 0.1 && l < 2.3) }' && ok || bad "test loss '$l32'"
grep -q "(10000 images)" "$work/eval32.txt" && ok || bad "eval did not score the 10000 test images"
# the batch does not change the fp32 reference's result
"$gpuc" eval "$trained" --data "fashion-mnist:$data" --cpu --batch 64 >"$work/eval32b.txt" 2>&1
[ "$(acc_of "$work/eval32b.txt")" = "$a32" ] && ok || bad "--batch 64 changed the accuracy: $(tail -1 "$work/eval32b.txt")"
for half in bf16 fp16; do
  "$gpuc" eval "$trained" --data "fashion-mnist:$data" --cpu --$half >"$work/eval_$half.txt" 2>&1
  cat "$work/eval_$half.txt"
  a=$(acc_of "$work/eval_$half.txt") l=$(loss_of "$work/eval_$half.txt")
  grep -q "CPU reference, $half:" "$work/eval_$half.txt" && ok || bad "--$half eval does not say $half"
  [ -n "$a" ] && awk -v a="$a" -v w="$a32" 'BEGIN { d = a - w; exit !(d <= 0.2 && d >= -0.2) }' && ok ||
    bad "--$half eval accuracy '$a'% is not within 0.2 points of fp32's $a32%"
  [ -n "$l" ] && awk -v l="$l" -v w="$l32" 'BEGIN { d = (l - w) / w; exit !(d <= 0.01 && d >= -0.01) }' && ok ||
    bad "--$half eval loss '$l' is not within 1% of fp32's $l32"
done
# -O2 and no flag: the graph an -O2 plan is compiled from (fp32, fused), on the reference
"$gpuc" eval "$trained" --data "fashion-mnist:$data" --cpu -O2 >"$work/eval_o2.txt" 2>&1
a=$(acc_of "$work/eval_o2.txt")
grep -q "CPU reference after the -O2 passes:" "$work/eval_o2.txt" && [ -n "$a" ] &&
  awk -v a="$a" -v w="$a32" 'BEGIN { d = a - w; exit !(d <= 0.2 && d >= -0.2) }' && ok ||
  bad "-O2 eval: '$(head -1 "$work/eval_o2.txt")' accuracy '$a'% (fp32 as imported: $a32%)"
# --limit: the first N test images
"$gpuc" eval "$trained" --data "fashion-mnist:$data" --cpu --bf16 --limit 300 >"$work/eval_lim.txt" 2>&1
grep -q "^test accuracy [0-9.]*% (300 images)$" "$work/eval_lim.txt" && ok || bad "--limit 300: $(tail -1 "$work/eval_lim.txt")"
# a batch the exporter fixed (small_cnn: 1) is rebound to eval's batch
"$gpuc" eval "$models/small_cnn.onnx" --data "fashion-mnist:$data" --cpu --bf16 --limit 200 --batch 100 \
  >"$work/eval_cnn.txt" 2>&1
grep -q "batch 100" "$work/eval_cnn.txt" && grep -q "^test accuracy [0-9.]*% (200 images)$" "$work/eval_cnn.txt" &&
  ok || bad "small_cnn --bf16 eval: $(tail -1 "$work/eval_cnn.txt")"

# --normalize as train had it: the same accuracy again
out=$("$gpuc" train "$mlp" --data "fashion-mnist:$data" --cpu --max-steps 100 --batch 64 --seed 3 \
      --normalize 0.286,0.353 --save "$work/mlp_norm.onnx" 2>&1)
wn=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p')
"$gpuc" eval "$work/mlp_norm.onnx" --data "fashion-mnist:$data" --cpu --normalize 0.286,0.353 >"$work/eval_norm.txt" 2>&1
[ -n "$wn" ] && [ "$(acc_of "$work/eval_norm.txt")" = "$wn" ] && ok ||
  bad "--normalize: eval printed '$(acc_of "$work/eval_norm.txt")'%, train '$wn'%"

# usage errors (exit 2)
expect 2 eval "$trained" --data "fashion-mnist:$data" --cpu --normalize 0.5
expect 2 eval "$trained" --cpu                                         # no --data
expect 2 eval --data "fashion-mnist:$data" --cpu                       # no model
expect 2 eval "$trained" --data "svhn:$data" --cpu
expect 2 eval "$trained" --data "fashion-mnist:$data" --cpu --fp16 --bf16
expect 2 eval "$trained" --data "fashion-mnist:$data" --cpu --batch 0
expect 2 eval "$trained" --data "fashion-mnist:$data" --cpu --limit x
expect 2 eval "$trained" --data "fashion-mnist:$data" --cpu --int4
expect 2 eval "$trained" --data "fashion-mnist:$data" --cpu --arch sm_90
expect 2 eval "$trained" --data
# bad input (exit 1, one line)
expect 1 eval "$trained" --data "fashion-mnist:$work/nowhere" --cpu
expect 1 eval "$models/resnet18.onnx" --data "fashion-mnist:$data" --cpu --limit 10   # 150528 values per image
expect 1 eval "$work/missing.onnx" --data "fashion-mnist:$data" --cpu
grep -q "the model takes 150528 values per image, the data has 784" <("$gpuc" eval "$models/resnet18.onnx" \
  --data "fashion-mnist:$data" --cpu --limit 10 2>&1) && ok || bad "resnet18 eval: no per-image size message"

# --fp16 and --bf16 together: a usage error everywhere the flags are taken
expect 2 "$mlp" --fp16 --bf16 --arch sm_90 --shape image=4x784 -o "$work/x.gpuc"
expect 2 run "$mlp" --cpu --fp16 --bf16 --shape image=4x784
# run --cpu --bf16: the reference on the bf16 graph, outputs still f32, not
# those of the fp32 graph
"$gpuc" run "$mlp" --cpu --shape image=4x784 --out "$work/r32" >/dev/null 2>&1
"$gpuc" run "$mlp" --cpu --bf16 --shape image=4x784 --out "$work/rbf" >"$work/rbf.txt" 2>&1
grep -q "logits: shape 4x10 f32" "$work/rbf.txt" && ! cmp -s "$work/r32/logits.npy" "$work/rbf/logits.npy" && ok ||
  bad "run --cpu --bf16: $(cat "$work/rbf.txt")"
# a bf16 plan: compiled (NVRTC, no GPU), marked bf16, its GEMMs bf16
"$gpuc" "$mlp" --bf16 --arch sm_90 --shape image=4x784 -o "$work/mlp_bf16.gpuc" >"$work/c.txt" 2>&1
grep -q "sm_90, -O2, bf16" "$work/c.txt" && ok || bad "compile --bf16: $(head -2 "$work/c.txt")"
"$gpuc" inspect "$work/mlp_bf16.gpuc" >"$work/i.txt" 2>&1
grep -q "target sm_90, bf16" "$work/i.txt" && grep -q "fp32 steps in this bf16 plan" "$work/i.txt" && ok ||
  bad "inspect of the bf16 plan: $(head -3 "$work/i.txt")"
expect 2 eval "$work/mlp_bf16.gpuc" --data "fashion-mnist:$data" --cpu    # a plan runs on the GPU
expect 2 eval "$work/mlp_bf16.gpuc" --data "fashion-mnist:$data" --bf16   # flags apply when compiling
expect 2 run "$work/mlp_bf16.gpuc" --bf16

# gpuc train --amp bf16 without a GPU: the bf16 training plan compiles and
# is counted before anything is allocated
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  cnn=$models/small_cnn.onnx
  for arch in sm_80 sm_90 sm_120; do
    "$gpuc" train "$cnn" --data "fashion-mnist:$data" --arch $arch --amp bf16 --mem-limit 3M --batch 64 >"$work/amp.txt" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q "^training (amp bf16) plan: " "$work/amp.txt" && grep -q "^evaluation plan: " "$work/amp.txt" &&
      ok || bad "train --amp bf16 --arch $arch (exit $rc): $(head -3 "$work/amp.txt")"
  done
  "$gpuc" train "$cnn" --data "fashion-mnist:$data" --arch sm_90 --amp fp16 --mem-limit 3M >"$work/amp.txt" 2>&1
  grep -q "^training (amp) plan: " "$work/amp.txt" && ok || bad "train --amp fp16: $(head -2 "$work/amp.txt")"
fi
expect 2 train "$mlp" --data "fashion-mnist:$data" --cpu --amp bf16

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
