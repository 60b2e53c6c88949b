#!/usr/bin/env bash
# The gpuc command's contract: subcommands, flags, exit codes, output files.
# usage: cli_test.sh GPUC MODELS_DIR WORKDIR
set -u
GPUC=$1; MODELS=$2; WORK=$3
rm -rf "$WORK"; mkdir -p "$WORK"
. "$(dirname "$0")/check_lib.sh"

check "no command is a usage error" 2 "$GPUC"
check "unknown command" 2 "$GPUC" frobnicate
check "unknown flag" 2 "$GPUC" inspect "$MODELS/small_cnn.onnx" --bogus
check "run without --cpu (no GPU backend yet)" 2 "$GPUC" run "$MODELS/small_cnn.onnx"
check "bad --shape" 2 "$GPUC" inspect "$MODELS/mlp.onnx" --shape image=3xq
check "missing model file" 1 "$GPUC" inspect "$WORK/nope.onnx"
expect_grep "missing file message names it" "$WORK/err" "nope.onnx"

check "inspect" 0 "$GPUC" inspect "$MODELS/small_cnn.onnx"
expect_grep "inspect lists ops" "$WORK/out" "Conv *2"
expect_grep "inspect counts parameters" "$WORK/out" "parameters: "
check "inspect --dump" 0 "$GPUC" inspect "$MODELS/small_cnn.onnx" --dump
expect_grep "dump shows shapes" "$WORK/out" "f32\[1,16,28,28\]"

check "run --cpu with random inputs" 0 "$GPUC" run "$MODELS/small_cnn.onnx" --cpu --out "$WORK/o1"
expect_grep "run prints a summary line" "$WORK/out" "logits: shape 1x10 f32 min"
[ -f "$WORK/o1/logits.npy" ] && { pass=$((pass+1)); echo "ok   run writes logits.npy"; } \
  || { fail=$((fail+1)); echo "FAIL run writes logits.npy"; }

# feed the output back as an input of the right shape: an .npy round trip
check "run with --input npy of the wrong shape" 1 "$GPUC" run "$MODELS/small_cnn.onnx" --cpu \
  --input image="$WORK/o1/logits.npy"
expect_grep "shape mismatch names the input" "$WORK/err" "input 'image' has shape 1x10"
check "run with unknown input name" 1 "$GPUC" run "$MODELS/small_cnn.onnx" --cpu --input nope="$WORK/o1/logits.npy"

# symbolic batch: without --shape (or an input) it is 1, as trtexec does, and a note says so
check "symbolic batch without --shape defaults to 1" 0 "$GPUC" run "$MODELS/mlp.onnx" --cpu
expect_grep "the default batch is 1" "$WORK/out" "logits: shape 1x10"
expect_grep "a note names the defaulted dim and the flag" "$WORK/err" "input 'image': symbolic dims batch set to 1.*--shape image="
check "an --input file sizes the symbolic dims" 0 "$GPUC" run "$MODELS/mlp.onnx" --cpu --shape image=3x784 --out "$WORK/o0"
check "symbolic batch with --shape" 0 "$GPUC" run "$MODELS/mlp.onnx" --cpu --shape image=4x784 --out "$WORK/o2"
expect_grep "--shape binds the batch" "$WORK/out" "logits: shape 4x10"
check "--shape contradicting the model" 1 "$GPUC" inspect "$MODELS/mlp.onnx" --shape image=4x783

# deterministic: two runs give identical bytes
"$GPUC" run "$MODELS/mlp.onnx" --cpu --shape image=4x784 --out "$WORK/o3" >/dev/null 2>&1
cmp -s "$WORK/o2/logits.npy" "$WORK/o3/logits.npy" && { pass=$((pass+1)); echo "ok   runs are deterministic"; } \
  || { fail=$((fail+1)); echo "FAIL runs are deterministic"; }

# a plan (NVRTC, no GPU): inspect lists what each step moves and computes,
# counted from the IR. fc1 at batch 4 is a 4x256x784 GEMM: 2*M*N*K flops;
# bytes = image 4x784 + W 256x784 + bias 256 + h 4x256, f32. relu1 reads
# and writes 4x256 f32 with one flop per element.
check "compile for sm_90 without a GPU" 0 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=4x784 \
  -o "$WORK/mlp.gpuc"
check "inspect a plan" 0 "$GPUC" inspect "$WORK/mlp.gpuc"
expect_grep "inspect: GEMM bytes and flops" "$WORK/out" \
  "cublasLt gemm 4x256x784 batch 1  bytes $((4 * (4*784 + 256*784 + 256 + 4*256))) flops $((2*4*256*784))  <- fc1"
expect_grep "inspect: elementwise bytes and flops" "$WORK/out" "bytes $((2 * 4*256*4)) flops 1024  <- relu1"
expect_grep "inspect: schedule totals" "$WORK/out" "bytes moved, .* flops, counted from the IR"
# relu1 is one grid-stride loop over its items: -O3 may relaunch it with another block
expect_grep "inspect: a block-size-free kernel" "$WORK/out" "block 256 (free)  bytes $((2 * 4*256*4)) flops 1024  <- relu1"
expect_grep "inspect: block-size-free count" "$WORK/out" "block-size-free kernels: [1-9][0-9]* of [1-9][0-9]*, 0 with a block -O3 chose"
# -O2 fusion and the fp16 policy as inspect shows them: a fused group is one
# kernel covering its nodes; the four f32 model outputs come back
# through fp32 steps (the last cast joins its group)
check "compile ffn_block --fp16" 0 "$GPUC" "$MODELS/ffn_block.onnx" --arch sm_90 --fp16 --shape x=2x16x64 \
  -o "$WORK/ffn.gpuc"
expect_grep "compile summary: lower bound" "$WORK/out" "arena: [0-9]* bytes (lower bound [0-9]*, naive sum"
# -O3 tunes on the GPU the plan runs on: without one it says the plan keeps -O2's heuristics
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  check "-O3 without a GPU" 0 "$GPUC" "$MODELS/mlp.onnx" -O3 --arch sm_90 --shape image=4x784 \
    -o "$WORK/mlp3.gpuc" --tune-cache "$WORK/tune.txt"
  expect_grep "-O3 note" "$WORK/out" "-O3 tunes on the GPU the plan runs on; none here"
fi
check "--tune-cache without a file" 2 "$GPUC" "$MODELS/mlp.onnx" -O3 --arch sm_90 --tune-cache
check "inspect an fp16 plan" 0 "$GPUC" inspect "$WORK/ffn.gpuc"
expect_grep "inspect: a fused group covers its nodes" "$WORK/out" "<- gate/Mul, gate/Sigmoid, gate/Mul_1"
# fp16: the erf GELU chain (one Gelu node after passes/fuse_gelu.c) is the first GEMM's epilogue (passes/fuse_gemm_act.c)
expect_grep "inspect: GEMM + bias + GELU is one step" "$WORK/out" \
  "cublasLt gemm 32x256x64 batch 1 +bias+gelu .*<- fc1/Add, gelu/Mul_1"
expect_grep "inspect: MatMul + bias is one GEMM" "$WORK/out" "cublasLt gemm 32x256x64 batch 1 .*<- fc1/Add"
# the residual Add + LayerNormalization: one kernel listing both nodes; it
# moves A, B, Y (2x16x64 half each), scale and bias (64 half each)
expect_grep "inspect: Add + LayerNorm is one kernel" "$WORK/out" \
  "kernel k[0-9]*_AddLayerNormalization .* bytes $((3 * 2*16*64*2 + 2 * 64*2)) flops $((9 * 2*16*64))  <- residual, ln"
expect_grep "inspect: fp32 steps listed" "$WORK/out" "fp32 steps in this fp16 plan: 4"

# LLaMA's RMSNorm as exported (Pow, ReduceMean, Add, Sqrt, Div/Reciprocal,
# Mul, scale Mul): one RMSNormalization node each (passes/fuse_rmsnorm.c),
# both exporters; 2 layers' two norms + the final one, no ReduceMean left;
ZOO=$(dirname "$0")/models/zoo
for ex in ts dynamo; do
  check "inspect tiny_llama $ex -O2" 0 "$GPUC" inspect "$ZOO/tiny_llama_$ex.onnx" -O2 --dump \
    --shape input_ids=2x8 --shape attention_mask=2x8
  n=$(grep -c "= RMSNormalization(" "$WORK/out"); m=$(grep -c "= ReduceMean(" "$WORK/out")
  if [ "$n" = 5 ] && [ "$m" = 0 ]; then pass=$((pass+1)); echo "ok   tiny_llama $ex: 5 RMSNormalization nodes"
  else fail=$((fail+1)); echo "FAIL tiny_llama $ex: $n RMSNormalization, $m ReduceMean (want 5, 0)"; fi
  # the rotate-half rotary embedding of q and k: one RotaryHalf each reading
  # the [B, S, H, D] projection through perm (passes/fuse_rotary.c), no Neg left
  n=$(grep -c "= RotaryHalf(.*perm=\[0,2,1,3\]" "$WORK/out"); m=$(grep -c "= Neg(" "$WORK/out")
  if [ "$n" = 4 ] && [ "$m" = 0 ]; then pass=$((pass+1)); echo "ok   tiny_llama $ex: 4 RotaryHalf nodes"
  else fail=$((fail+1)); echo "FAIL tiny_llama $ex: $n RotaryHalf with perm, $m Neg (want 4, 0)"; fi
  # SwiGLU's gate and up projections: one GEMM and a GatedUnit a layer (passes/fuse_gated_mlp.c)
  n=$(grep -c "= GatedUnit(.*activation=\"silu\"" "$WORK/out"); m=$(grep -c "= Sigmoid(" "$WORK/out")
  if [ "$n" = 2 ] && [ "$m" = 0 ]; then pass=$((pass+1)); echo "ok   tiny_llama $ex: 2 GatedUnit nodes"
  else fail=$((fail+1)); echo "FAIL tiny_llama $ex: $n GatedUnit, $m Sigmoid (want 2, 0)"; fi
done

# --int8: the layers listed, flags checked, the note when nothing is quantized
check "--int8 compile" 0 "$GPUC" "$MODELS/ffn_block.onnx" --int8 --fp16 --arch sm_90 --shape x=2x16x64 -o "$WORK/i8.gpuc"
expect_grep "--int8 lists the int8 layers" "$WORK/out" "int8 layers (2, int8 x int8 -> int32 GEMMs)"
expect_grep "--int8 summary line" "$WORK/out" "sm_90, -O2, fp16, int8"
check "inspect an int8 plan" 0 "$GPUC" inspect "$WORK/i8.gpuc"
expect_grep "inspect names int8 GEMM steps" "$WORK/out" "cublasLt gemm int8 32x256x64 batch 1 .*<- fc1/Add$"
expect_grep "inspect lists the int8 layers" "$WORK/out" "int8 GEMMs: 2: fc1/Add, fc2/Add"
check "--int8 on a model without Linear layers" 0 "$GPUC" "$MODELS/resnet_block.onnx" --int8 --arch sm_90 -o "$WORK/rb.gpuc"
expect_grep "--int8 without Linear layers: a note" "$WORK/out" "note: --int8: nothing was quantized: the model has no Linear layer"
check "--int8-skip keeps a layer in float" 0 "$GPUC" inspect "$MODELS/ffn_block.onnx" --int8 --int8-skip 'nothing,fc2*'
expect_grep "--int8-skip says why" "$WORK/out" "kept in float: fc2/MatMul (MatMul): matches --int8-skip"
check "--int8-skip without --int8" 2 "$GPUC" "$MODELS/ffn_block.onnx" --int8-skip 'fc2*' --arch sm_90
check "--int8-skip without a pattern" 2 "$GPUC" "$MODELS/ffn_block.onnx" --int8 --int8-skip
check "--int8-skip with an empty glob" 2 "$GPUC" "$MODELS/ffn_block.onnx" --int8 --int8-skip 'fc1,,fc2' --arch sm_90
check "run --cpu --int8" 0 "$GPUC" run "$MODELS/ffn_block.onnx" --cpu --int8 --shape x=2x16x64 --out "$WORK/i8run"
expect_grep "run --cpu --int8 reports its layers" "$WORK/err" "int8 layers (2"
check "run PLAN --int8 is a usage error" 2 "$GPUC" run "$WORK/i8.gpuc" --int8

# test-onnx on one conformance folder, and a folder that is not a test
TD=/usr/share/libonnx-testdata/data/node/test_relu
if [ -d "$TD" ]; then
  check "test-onnx passes test_relu" 0 "$GPUC" test-onnx "$TD" --cpu
  expect_grep "test-onnx prints max error" "$WORK/out" "max abs err"
fi
check "test-onnx on a folder without a model" 1 "$GPUC" test-onnx "$WORK"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
