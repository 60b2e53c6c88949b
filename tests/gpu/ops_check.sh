#!/usr/bin/env bash
# Newly added ops on the GPU machine, from the repo root: every ONNX node
# test folder whose name matches one of PATTERNS (grep -E on the folder
# name), from the Debian conformance data ($TESTDATA: default the carried
# build-carry/testdata/node, else /usr/share/libonnx-testdata/data/node) and
# from tests/onnx_node/node (the newer-opset tests), through
# `gpuc test-onnx DIR --gpu` (fp32, -O2) and `--gpu --fp16`, against each
# folder's expected outputs (--fp16: test-onnx's half tolerances).
# One PASS/FAIL line per folder and precision; exit 1 on any FAIL.
# usage: GPUC=build-carry/gpuc tests/gpu/ops_check.sh 'gridsample|affine_grid|lstm|gru|rnn_seq'
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
pat=${1:?usage: ops_check.sh PATTERN}
TD=${TESTDATA:-}
[ -z "$TD" ] && for d in build-carry/testdata/node /usr/share/libonnx-testdata/data/node; do [ -d "$d" ] && TD=$d && break; done
pass=0 fail=0
for dir in $( { [ -n "$TD" ] && ls -d "$TD"/*/; ls -d tests/onnx_node/node/*/; } 2>/dev/null | grep -iE "/test_[^/]*($pat)[^/]*/$"); do
  for prec in fp32 fp16; do
    flags="--gpu"; [ $prec = fp16 ] && flags="--gpu --fp16"
    if out=$(timeout 120 "$GPUC" test-onnx "${dir%/}" $flags 2>&1) && grep -q "^PASS" <<<"$out"; then
      pass=$((pass + 1)); echo "PASS $prec ${dir%/}"
    else
      fail=$((fail + 1)); echo "FAIL $prec ${dir%/}: $(grep -vE '^\s*$' <<<"$out" | grep -iE 'err|fail|unsupported|not' | head -3 | tr '\n' ' ' | cut -c1-300)"
    fi
  done
done
echo "ops_check: $pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
