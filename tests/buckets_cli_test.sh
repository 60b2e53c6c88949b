#!/usr/bin/env bash
# Bucket plans from the command line (no GPU): --shape ranges and --buckets,
# the bucket table gpuc inspect lists, the file size against a one-shape
# plan (weights stored once), the usage errors and refusals; and the
# default of 1 for a symbolic dim no --shape binds, with its note.
# usage: buckets_cli_test.sh GPUC MODELS_DIR ZOO_DIR WORKDIR
set -u
GPUC=$1; MODELS=$2; ZOO=$3; WORK=$4
rm -rf "$WORK"; mkdir -p "$WORK"
export GPUC_JOBS=2
. "$(dirname "$0")/check_lib.sh"

# the default: a symbolic batch with no --shape compiles at 1, with a note
check "compile without --shape" 0 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 -o "$WORK/mlp_default.gpuc"
expect_grep "the note names the dim and the flag" "$WORK/err" "symbolic dims batch set to 1, as trtexec does (bind them with --shape image=DIMS"
check "inspect the defaulted plan" 0 "$GPUC" inspect "$WORK/mlp_default.gpuc"
expect_grep "the defaulted plan is batch 1" "$WORK/out" "input    image: 1x784"
check "a transformer without --shape" 0 "$GPUC" "$ZOO/tiny_bert_ts.onnx" --arch sm_90 -o "$WORK/bert_default.gpuc"
expect_grep "both of its inputs' dims are named" "$WORK/err" "input 'attention_mask': symbolic dims batch, seq set to 1"

# a batch range: buckets 1, 16 and the top, 64
check "compile a batch range" 0 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=1..64x784 --buckets 1,16 \
  -o "$WORK/mlp_b.gpuc"
expect_grep "three buckets (the top added)" "$WORK/out" "for 3 shape buckets"
expect_grep "the batch axis is padded" "$WORK/out" "batch 1..64 (batch)"
expect_grep "weights stored once" "$WORK/out" "stored once"
check "inspect the bucket plan" 0 "$GPUC" inspect "$WORK/mlp_b.gpuc"
expect_grep "inspect lists the buckets" "$WORK/out" "^buckets: 3"
expect_grep "inspect names the axis and its range" "$WORK/out" "axis 0 'batch': 1..64, batch"
expect_grep "the output follows the batch" "$WORK/out" "output 'logits' dim 0 follows axis 'batch'"
expect_grep "bucket 16 is listed" "$WORK/out" "bucket  1 16 "
expect_grep "format 7" "$WORK/out" "^format 7"
check "a one-shape plan at the top" 0 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=64x784 -o "$WORK/mlp_64.gpuc"
b=$(stat -c %s "$WORK/mlp_b.gpuc"); one=$(stat -c %s "$WORK/mlp_64.gpuc")
if [ $((b * 10)) -lt $((one * 13)) ]; then pass=$((pass+1)); echo "ok   bucket plan $b bytes < 1.3 x one-shape $one bytes";
else fail=$((fail+1)); echo "FAIL bucket plan $b bytes, one-shape $one bytes: not under 1.3x"; fi

# default buckets: the powers of two in the range, and its top
check "default buckets" 0 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=3..20x784 -o "$WORK/mlp_d.gpuc"
expect_grep "4, 8, 16 and 20" "$WORK/out" "for 4 shape buckets"
expect_grep "bucket 20 is the top" "$WORK/out" "bucket  3 batch=20 "

# a transformer: batch and sequence, the sequence masked; combinations listed
check "batch x sequence, listed combinations" 0 "$GPUC" "$ZOO/tiny_bert_ts.onnx" --arch sm_90 \
  --shape input_ids=1..4x8..16 --buckets 1x8,2x16 -o "$WORK/bert_b.gpuc"
expect_grep "the sequence is masked" "$WORK/out" "seq 8..16 (sequence, masked)"
expect_grep "two combinations and the top" "$WORK/out" "for 3 shape buckets"
check "inspect the transformer's buckets" 0 "$GPUC" inspect "$WORK/bert_b.gpuc"
expect_grep "the mask follows the sequence" "$WORK/out" "input 'attention_mask' dim 1 follows axis 'seq'"
expect_grep "the output follows the sequence" "$WORK/out" "output 'output' dim 1 follows axis 'seq'"
expect_grep "the top bucket is last" "$WORK/out" "bucket  2 4x16 "

# refusals
check "a bucket outside the range" 1 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=1..64x784 --buckets 1,100 \
  -o "$WORK/x.gpuc"
expect_grep "names the range" "$WORK/err" "size 100 of 'batch' is outside its range 1..64"
check "--buckets without a range" 2 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --buckets 1,8 -o "$WORK/x.gpuc"
check "a range from 0" 2 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=0..8x784 -o "$WORK/x.gpuc"
check "a range upside down" 2 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=8..2x784 -o "$WORK/x.gpuc"
check "a range on a fixed dim" 1 "$GPUC" "$MODELS/mlp.onnx" --arch sm_90 --shape image=1..8x700..784 -o "$WORK/x.gpuc"
expect_grep "names the fixed dim" "$WORK/err" "dim 1 is 784 in the model, it takes no range"
check "a combination of the wrong arity" 1 "$GPUC" "$ZOO/tiny_bert_ts.onnx" --arch sm_90 \
  --shape input_ids=1..4x8..16 --buckets 1x8x2 -o "$WORK/x.gpuc"
check "--buckets naming no ranged dim" 1 "$GPUC" "$ZOO/tiny_bert_ts.onnx" --arch sm_90 \
  --shape input_ids=1..4x8..16 --buckets heads=1,2 -o "$WORK/x.gpuc"
expect_grep "lists the ranged dims" "$WORK/err" "ranged: batch, seq"
check "run --shape on a model with a range" 2 "$GPUC" run "$MODELS/mlp.onnx" --cpu --shape image=1..4x784

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
