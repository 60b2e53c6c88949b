#!/usr/bin/env bash
# One device call's whole round on the GPU machine, from the repo root: the
# checks named as STEP[:SECONDS] run one after another, each under its own
# time limit, while (optionally) the libFuzzer targets use the machine's
# spare cores in the background. Everything lands in $OUT as it is made, so
# a call cut at its limit still returns what finished:
#   $OUT/summary.txt   each step's PASS/FAIL/TIME/... lines and exit status,
#                      then the fuzz counts
#   $OUT/logs.tgz      every step's full log (repacked after each step)
#   $OUT/fuzz.tgz      the fuzzers' logs, grown corpora and crash files
#
#   tests/gpu/session_round.sh quickstart:240 capi:120 xformer:330
#
# Steps (the scripts under tests/gpu/ say what each checks):
#   quickstart  python_quickstart.sh $CARRY/wheels   (README's Python quick start)
#   capi        capi_check.sh $CARRY                 (C API; capi_buckets_check too)
#   leak        leak_check.sh $CARRY                 (LEAK_ITEMS -> its ITEMS)
#   xformer     xformer_check.sh                     (XFORMER_MODELS: its model list)
#   longattn    longattn_check.sh
#   longkern    longattn_kernels.py alone (the streaming kernels, no zoo models)
#   int8probe   int8_gemm_torch.py and cublaslt_int8_probe.py (int8 GEMMs vs fp16)
#   ops         ops_check.sh OPS_PATTERN (conformance folders of new ops, --gpu)
#   rnn         rnn_check.py (LSTM/GRU/RNN: conformance, tests/models/rnn, S=512 timing)
#   smallops    smallops_check.sh (Mish, Bitwise*, ... : conformance, models, bad inputs)
#   vitattn     vitattn_check.sh (VITATTN_MODELS: its model list)
#   patchify    patchify_check.sh                    (PATCHIFY_MODELS: its model list)
#   sanitize    sanitize.sh $CARRY
#   harden      harden_check.sh $CARRY
#   compression compression_round.sh                 (ROUND_CHECKS as it reads them)
#   zoo         bench/zoo.sh $ZOO_ARGS
#   pyapi       pyapi_check.sh $CARRY
# CARRY (default build-carry) holds the Release build: gpuc, libgpuc*.so*,
# models/, tests/{session_check,capi_check,capi_buckets_check,...},
# deploy_example, wheels/ (scripts/python_wheels.sh) and fuzz.tgz
# (tests/gpu/pack_fuzz.sh: the stripped fuzz_<target> binaries and corpora).
# FUZZ_SECS=N runs every target N seconds in the background with FUZZ_FORK
# (default 2) fork-mode workers each at nice 19; the step list should take
# about N seconds too, the command's limit a little more.
set -u
OUT=${OUT:-/tmp/gpuc_session_round}
CARRY=${CARRY:-build-carry}
mkdir -p "$OUT" /tmp/gpuc_session_logs
LOGS=/tmp/gpuc_session_logs
SUM=$OUT/summary.txt
: > "$SUM"
export PYTHON=${PYTHON:-$( [ -x /opt/torch/.venv/bin/python ] && echo /opt/torch/.venv/bin/python || echo python3)}
export GPUC=$PWD/$CARRY/gpuc
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader >>"$SUM" 2>&1
"$GPUC" --version >>"$SUM" 2>&1

# ---- fuzzing in the background --------------------------------------------------------------
FZ=/tmp/gpuc_fuzz
fuzz_pids=()
if [ "${FUZZ_SECS:-0}" -gt 0 ] && [ -f "$CARRY/fuzz.tgz" ]; then
  rm -rf "$FZ"; mkdir -p "$FZ"; tar -xzf "$CARRY/fuzz.tgz" -C "$FZ"
  for t in $(ls "$FZ/bin" | sed -n 's/^fuzz_//p'); do
    mkdir -p "$FZ/crash_$t" "$FZ/corpus/$t"
    dict=""; [ -f "$FZ/dict/$t.dict" ] && dict="-dict=$FZ/dict/$t.dict"
    maxlen=65536; [ "$t" = plan ] && maxlen=131072
    (
      TIMEFORMAT='%U %S'
      { time ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
        nice -n 19 "$FZ/bin/fuzz_$t" "$FZ/corpus/$t" $dict -fork="${FUZZ_FORK:-2}" -ignore_crashes=1 \
        -max_total_time="$FUZZ_SECS" -max_len=$maxlen -timeout=20 -rss_limit_mb=4096 \
        -artifact_prefix="$FZ/crash_$t/" >"$FZ/$t.log" 2>&1; } 2>"$FZ/$t.cpu"
      echo $? >"$FZ/$t.rc"
    ) &
    fuzz_pids+=($!)
  done
fi

fuzz_report() {
  [ -d "$FZ/bin" ] || return 0
  echo "== fuzz (${FUZZ_SECS}s, ${FUZZ_FORK:-2} workers a target)" >>"$SUM"
  for t in $(ls "$FZ/bin" | sed -n 's/^fuzz_//p'); do
    local last cpu crashes
    last=$(grep -E '^#[0-9]+' "$FZ/$t.log" 2>/dev/null | tail -1)
    cpu=$(awk '{printf "%.0f", $1 + $2}' "$FZ/$t.cpu" 2>/dev/null)
    crashes=$(ls "$FZ/crash_$t" 2>/dev/null | wc -l)
    printf 'FUZZ %-10s rc %s cpu %ss crashes %s last: %s\n' "$t" "$(cat "$FZ/$t.rc" 2>/dev/null || echo running)" \
      "${cpu:-?}" "$crashes" "$last" >>"$SUM"
  done
  tar -czf "$OUT/fuzz.tgz" -C "$FZ" --exclude=bin . 2>/dev/null
}

# the logs without models, plans and arrays (the device tool returns files of limited size)
pack_logs() {
  tar -czf "$OUT/logs.tgz" -C "$LOGS" --exclude='*.onnx' --exclude='*.gpuc' --exclude='*.npy' --exclude='*.npz' \
    --exclude='*.pt' --exclude='*.bin' --exclude='*.data' --exclude='venv' --exclude='wheel_build' . 2>/dev/null
}

# ---- the steps ------------------------------------------------------------------------------
step_cmd() {
  case $1 in
    quickstart) echo "tests/gpu/python_quickstart.sh $CARRY/wheels" ;;
    capi) echo "tests/gpu/capi_check.sh $CARRY" ;;
    leak) echo "ITEMS='${LEAK_ITEMS:-faults cycle memcheck initcheck exhaust}' tests/gpu/leak_check.sh $CARRY" ;;
    xformer) echo "tests/gpu/xformer_check.sh ${XFORMER_MODELS:-}" ;;
    longattn) echo "tests/gpu/longattn_check.sh" ;;
    longkern) echo ". tests/gpu/gpu_env.sh; \$PY tests/gpu/longattn_kernels.py --gpuc $GPUC --out \$OUT --work /tmp/gpuc_longattn" ;;
    int8probe) echo ". tests/gpu/gpu_env.sh; \$PY tests/gpu/int8_gemm_torch.py; \$PY tests/gpu/cublaslt_int8_probe.py" ;;
    ops) echo "tests/gpu/ops_check.sh '${OPS_PATTERN:-gridsample}'" ;;
    rnn) echo ". tests/gpu/gpu_env.sh; TESTDATA=$CARRY/testdata/node \$PY tests/gpu/rnn_check.py $GPUC tests/models/rnn \$OUT" ;;
    smallops) echo "tests/gpu/smallops_check.sh $GPUC $CARRY/testdata" ;;
    vitattn) echo "tests/gpu/vitattn_check.sh ${VITATTN_MODELS:-}" ;;
    patchify) echo "tests/gpu/patchify_check.sh ${PATCHIFY_MODELS:-}" ;;
    sanitize) echo "tests/gpu/sanitize.sh $CARRY" ;;
    harden) echo "tests/gpu/harden_check.sh $CARRY" ;;
    compression) echo "tests/gpu/compression_round.sh" ;;
    zoo) echo "bench/zoo.sh ${ZOO_ARGS:-}" ;;
    pyapi) echo "tests/gpu/pyapi_check.sh $CARRY" ;;
    *) return 1 ;;
  esac
}

for spec in "$@"; do
  name=${spec%%:*}
  secs=${spec#*:}; [ "$secs" = "$spec" ] && secs=300
  if ! cmd=$(step_cmd "$name"); then echo "== $name: unknown step" >>"$SUM"; continue; fi
  start=$(date +%s)
  OUT=$LOGS/$name timeout -k 10 "$secs" bash -c "$cmd" >"$LOGS/$name.log" 2>&1
  rc=$?
  {
    echo "== $name: exit $rc in $(( $(date +%s) - start )) s ($cmd)"
    grep -E '^(PASS|FAIL|SKIP|TIME|STATS|RECAPTURES|AB |XFAIL|XPASS)|^\| |PASS|FAIL|census' "$LOGS/$name.log" | cut -c1-400 | head -150
  } >>"$SUM"
  pack_logs
  fuzz_report
done
for p in ${fuzz_pids[@]+"${fuzz_pids[@]}"}; do wait "$p"; done
fuzz_report
pack_logs
echo "== done" >>"$SUM"
