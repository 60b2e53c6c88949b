#!/bin/bash
# The C API on the GPU (tests/gpu/capi_check.c, built as build/tests/capi_check):
# for each model, compile through gpuc_compile_file for the present GPU,
# run with the program's own device buffers on its own stream (and the
# legacy stream, host bindings, two sessions on two threads), check every
# output against the CPU reference (gpuc_reference_run, fresh random
# inputs; rel L2 <= 1e-5 fp32, <= 1e-2 fp16), the error paths of a live
# session, zero-copy (device inputs and outputs bound in place: the same
# bits as a host-bound run, no byte copied per gpuc_session_get_stats, two
# buffer sets alternating with the re-captures reported, misaligned
# buffers copied), and time run_async+sync per call against the graph
# alone; then `gpuc bench` and examples/deploy on the same plan.
#   tests/gpu/capi_check.sh [BUILD_DIR]      (OUT=DIR for the logs; default /tmp/capi_check)
# Prints PASS/FAIL lines, TIME, STATS and RECAPTURES lines per model; exit 1
# on any FAIL.
# capi_check runs under `gdb -batch` where gdb exists (a crash's backtrace
# lands in its log and here), else with its own SIGSEGV handler's
# backtrace. deploy_example is looked for in BUILD_DIR and BUILD_DIR/..;
# without it that step says SKIP. Then tests/gpu/capi_buckets_check.sh: a
# bucket plan's session at shapes between buckets (it runs alone too).
set -u
build=${1:-build}
OUT=${OUT:-/tmp/capi_check}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
chk=$build/tests/capi_check
models=$build/models
fails=0
deploy=
for d in "$build/deploy_example" "$build/../deploy_example"; do [ -x "$d" ] && { deploy=$d; break; }; done
gdb=$(command -v gdb || true)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
check() { # NAME MODEL [capi_check flags...]
  local name=$1 model=$2
  shift 2
  local dir=$OUT/$name
  mkdir -p "$dir"
  local rc
  if [ -n "$gdb" ]; then
    # the program's exit status through gdb's $_exitcode, 139 for a crash; symbols read
    # only on a crash and only of libgpuc and libc (cuDNN's would take long at every start)
    cat >"$dir/gdb.cmd" <<'EOF'
set pagination off
set confirm off
set print thread-events off
set auto-solib-add off
run
if $_isvoid($_exitcode)
  sharedlibrary libgpuc
  sharedlibrary libc\.
  echo FAIL crashed under gdb; backtrace:\n
  bt 30
  thread apply all bt 12
  kill
  quit 139
end
quit $_exitcode
EOF
    CAPI_CHECK_NO_HANDLER=1 "$gdb" -q -batch -x "$dir/gdb.cmd" --args "$chk" "$model" "$dir" "$@" \
      >"$dir/capi_check.log" 2>&1 </dev/null
    rc=$?
  else
    "$chk" "$model" "$dir" "$@" >"$dir/capi_check.log" 2>&1
    rc=$?
  fi
  grep -E "^(FAIL|TIME|STATS|RECAPTURES)|passed," "$dir/capi_check.log" | sed "s/^/  $name: /"
  if [ $rc -ge 128 ] || grep -q -E "^FAIL crashed" "$dir/capi_check.log"; then
    echo "  $name: crashed; backtrace:"
    grep -E -B3 -A40 "^FAIL crashed" "$dir/capi_check.log" | head -60 | sed "s/^/    /"
  fi
  if [ $rc = 0 ]; then echo "PASS capi_check $name"
  else echo "FAIL capi_check $name (exit $rc; $dir/capi_check.log)"; fails=$((fails + 1)); fi
  if [ -f "$dir/capi_check.gpuc" ]; then
    "$build/gpuc" bench "$dir/capi_check.gpuc" --iters 1000 >"$dir/bench.log" 2>&1 &&
      echo "  $name: gpuc bench: $(grep -m1 -i 'median' "$dir/bench.log")" ||
      { echo "FAIL gpuc bench $name"; fails=$((fails + 1)); }
    if [ -z "$deploy" ]; then echo "SKIP deploy_example $name (not in $build or $build/..)"
    else
      "$deploy" "$dir/capi_check.gpuc" >"$dir/deploy.log" 2>&1 && echo "PASS deploy_example $name" ||
        { echo "FAIL deploy_example $name ($dir/deploy.log)"; fails=$((fails + 1)); }
    fi
  fi
}
check mlp_b8 "$models/mlp.onnx" image=8x784
check mlp_b8_fp16 "$models/mlp.onnx" --fp16 image=8x784
check small_cnn "$models/small_cnn.onnx"
# three outputs, two of them read again by later steps; eight inputs, four outputs
check mobile_block "$models/mobile_block.onnx"
check add_layernorm_fp16 "$models/add_layernorm.onnx" --fp16
check resnet50_b1 "$models/resnet50.onnx" input=1x3x224x224
check resnet50_b1_fp16 "$models/resnet50.onnx" --fp16 input=1x3x224x224
check attention_bert_b2_fp16 "$models/attention_bert.onnx" --fp16 q=2x12x128x64 k=2x12x128x64 v=2x12x128x64 mask=2x1x1x128
# bucket plans (shape ranges) through the C API: tests/gpu/capi_buckets_check.sh
OUT=$OUT "$(dirname "$0")/capi_buckets_check.sh" "$build" || fails=$((fails + 1))
echo "capi_check: $fails failed (logs in $OUT)"
[ $fails = 0 ]
