#!/bin/bash
# Bucket plans (shape ranges) through the C API on the GPU
# (tests/gpu/capi_buckets_check.c, built as build/tests/capi_buckets_check):
# each model compiled with ranges through gpuc_compile_file for the present
# GPU, run in one session at shapes between buckets (padded in, sliced out)
# with host bindings, fetch_output and the program's own device buffers on
# its own stream, every output against the CPU reference on the same fresh
# random inputs (`gpuc run MODEL --cpu` through gpuc_reference_run; rel L2
# <= 1e-4 fp32, <= 1e-2 fp16), out-of-range shapes and mismatched inputs
# refused (GPUC_ERR_MISMATCH naming the range) with the session still
# right afterwards, and run_async+sync timed against the bucket's graph.
# Models: mlp fp32 and fp16, tiny_bert (tests/models/zoo; sequence padded
# under its mask), BERT-base fp16 (exported by tests/gpu/buckets_export.py
# with $PYTHON's torch and transformers; BUCKETS_BERT=0 skips it; about a
# minute: 3 buckets compiled one after another, the CPU reference).
#   tests/gpu/capi_buckets_check.sh [BUILD_DIR]   (OUT=DIR for the logs; default /tmp/capi_check)
# Also run at the end of tests/gpu/capi_check.sh. PASS/FAIL and TIME lines; exit 1 on any FAIL.
set -u
build=${1:-build}
OUT=${OUT:-/tmp/capi_check}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
here=$(cd "$(dirname "$0")" && pwd)
chk=$build/tests/capi_buckets_check
models=$build/models
zoo=$here/../models/zoo
PY=${PYTHON:-python3}
fails=0
bucket_check() { # NAME MODEL [capi_buckets_check flags...]
  local name=$1 model=$2
  shift 2
  local dir=$OUT/$name
  mkdir -p "$dir"
  "$chk" "$model" "$dir" "$@" >"$dir/capi_buckets_check.log" 2>&1
  local rc=$?
  grep -E "^(FAIL|TIME)|passed,|runs in bucket|GPUC_ERR" "$dir/capi_buckets_check.log" | sed "s/^/  $name: /"
  if [ $rc = 0 ]; then echo "PASS capi_buckets_check $name"
  else echo "FAIL capi_buckets_check $name (exit $rc; $dir/capi_buckets_check.log)"; fails=$((fails + 1)); fi
}
mlp_runs=(--shape image=1..64x784 --buckets 1,16 --run image=5x784 --run image=17x784 --run image=1x784
          --run image=64x784 --refuse image=65x784)
bucket_check buckets_mlp "$models/mlp.onnx" "${mlp_runs[@]}"
bucket_check buckets_mlp_fp16 "$models/mlp.onnx" --fp16 "${mlp_runs[@]}"
bucket_check buckets_tiny_bert "$zoo/tiny_bert_ts.onnx" --shape input_ids=1..4x4..16 \
  --shape attention_mask=1..4x4..16 --buckets 1x4,2x8,4x8 --run input_ids=3x5,attention_mask=3x5 \
  --run input_ids=2x12,attention_mask=2x12 --run input_ids=1x4,attention_mask=1x4 \
  --refuse input_ids=3x17,attention_mask=3x17 --refuse input_ids=3x5,attention_mask=3x6
if [ "${BUCKETS_BERT:-1}" != 0 ]; then
  bert=$OUT/bert_base/bert_dyn.onnx
  mkdir -p "$OUT/bert_base"
  if [ -f "$bert" ] || "$PY" "$here/buckets_export.py" "$OUT/bert_base" bert >"$OUT/bert_base/export.log" 2>&1; then
    bucket_check buckets_bert_base_fp16 "$bert" --fp16 --shape input_ids=1..4x16..64 \
      --shape attention_mask=1..4x16..64 --buckets 1x16,2x32 --run input_ids=3x20,attention_mask=3x20 \
      --run input_ids=2x17,attention_mask=2x17 --run input_ids=1x16,attention_mask=1x16 \
      --refuse input_ids=5x16,attention_mask=5x16
  else
    echo "FAIL BERT-base export ($OUT/bert_base/export.log)"; fails=$((fails + 1))
  fi
fi
echo "capi_buckets_check: $fails failed (logs in $OUT)"
[ $fails = 0 ]
