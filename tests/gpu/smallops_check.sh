#!/usr/bin/env bash
# Issue 11's small ops on the GPU machine, from the repo root:
#  1. `gpuc test-onnx DIR --gpu` (fp32 and --fp16) over their libonnx-testdata
#     folders (TESTDATA/node: BitShift, ReverseSequence, Det, MaxUnpool) and
#     the generated ones of tests/onnx_node (Mish, Bitwise*, Col2Im,
#     CenterCropPad, signed BitShift, bf16 ReverseSequence);
#  2. tests/models/smallops_* (both torch exporters) GPU vs CPU reference in
#     fp32 and fp16 (tests/gpu/dynops_check.py);
#  3. the one-node cases of tests/models/smallops_host GPU vs CPU, and their
#     bad runtime lengths/indices reported with the reference's message
#     (tests/gpu/smallops_cases_check.py).
# usage: tests/gpu/smallops_check.sh GPUC [TESTDATA]   (TESTDATA default .testdata)
set -u
. tests/gpu/gpu_env.sh
G=$1; TD=${2:-.testdata}; W=/tmp/smallops_gpu
mkdir -p "$W"
pass=0; fail=0
for d in "$TD"/node/test_{bitshift,reversesequence,det,maxunpool}* \
         tests/onnx_node/node/test_{mish,bitwise,col2im,center_crop_pad,bitshift,reversesequence}*; do
  [ -d "$d" ] || continue
  for f in "" --fp16; do
    r=$("$G" test-onnx "$d" --gpu $f 2>&1 | tail -1)
    case $r in PASS*) pass=$((pass+1));; *) fail=$((fail+1)); echo "FAIL $(basename "$d") gpu $f: $r";; esac
  done
done
echo "test-onnx --gpu: $pass passed, $fail failed"
$PY tests/gpu/dynops_check.py "$G" tests/models "$W/models" 11 smallops_ 2>&1 | tee "$W/models.txt"
$PY tests/gpu/smallops_cases_check.py "$G" tests/models/smallops_host "$W/cases" 2>&1 | tee "$W/cases.txt"
for f in "$W/models.txt" "$W/cases.txt"; do
  pass=$((pass + $(grep -c '^PASS' "$f"))); fail=$((fail + $(grep -c '^FAIL' "$f")))
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
