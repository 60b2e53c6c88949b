#!/usr/bin/env bash
# One device call for the compression and layout checks (issues 11, 12):
# int8_check (int8own: with gpuc's own int8 GEMM at every size, bundled
# models only), int8gemm (tests/gpu/int8_gemm_check.py: that GEMM
# bit-exact against the CPU reference, and timed), prune_check, bf16_eval_check, layout_check, fp8_check,
# dynops_check and row_fusion_bench.py (rowfuse: the --int8/--fp8 row
# fusions against the unfused plans and the CPU reference; bert, gpt2:
# BERT-base b32 s128 / GPT-2 b8 s512 timed --fp16, --int8 --fp16 (with and
# without the row fusions), --fp8 --fp16, --prune 2:4 --fp16 in one run,
# with the profile's top steps; bertround: issue 12's BERT-base b32 s128
# round in one step, within 5 minutes: --fp16, --int8 --fp16 with and
# without the row fusions, --prune 2:4 --fp16 at -O2 (default and load-time
# searched cuSPARSELt configurations) and -O3 (the searched configuration
# kept in the plan), correctness against `gpuc run --cpu` with the same
# flags at b2, bench --profile's top steps and the row kernels' times and
# bandwidth, and tests/gpu/cublaslt_int8_probe.py: which int8 GEMM output
# types and alpha-vector scalings cuBLASLt offers here), each under its
# own time limit (seconds: INT8_S, PRUNE_S, BF16_S, LAYOUT_S, FP8_S,
# DYNOPS_S, ROWFUSE_S, BERT_S, GPT2_S, BERTROUND_S), in the order given,
# logs under /tmp/gpuc_rounds/<check>/ and packed into $OUT/rounds.tgz; the
# summary lines (PASS/FAIL, timings) go to $OUT/summary.txt.
# Carry: build-carry/ (gpuc, models/ with the small bundled models, fmnist/).
set -u
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
R=/tmp/gpuc_rounds
mkdir -p "$R"
# only the text comes back (exported models and plans would pass the 16 MB a file)
trap '(cd "$R" && find . -type f \( -name "*.txt" -o -name "*.log" -o -name "*.md" -o -name "*.jsonl" \) -size -2M |
       tar -czf "$OUT/rounds.tgz" -T -) 2>/dev/null; true' EXIT
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
B=$PWD/build-carry
ln -sfn "$B" build-gpu 2>/dev/null || true
run() { # name seconds command...
  local name=$1 secs=$2; shift 2
  mkdir -p "$R/$name"
  echo "== $name (limit ${secs}s)" | tee -a "$OUT/summary.txt"
  local t0=$SECONDS
  OUT=$R/$name timeout "$secs" "$@" > "$R/$name/stdout.txt" 2>&1
  local rc=$?
  grep -E "PASS|FAIL|ok$|ratio|median|faster|speedup|rel L2|latency|speed of|top:|run dense|round|row kernels|2:4|probe|cuBLASLt" "$R/$name/stdout.txt" |
    tail -${TAIL:-60} >> "$OUT/summary.txt"
  echo "-- $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
what=${*:-int8 prune bf16 layout}
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | tee -a "$OUT/summary.txt"
for w in $what; do
  case $w in
    int8) run int8 "${INT8_S:-170}" tests/gpu/int8_check.sh "$B/gpuc" "$B/models" ;;
    int8own) GPUC_INT8_GEMM=own SKIP_BERT=1 run int8own "${INT8_S:-170}" tests/gpu/int8_check.sh "$B/gpuc" "$B/models" ;;
    int8gemm) run int8gemm "${INT8GEMM_S:-240}" "$PY" tests/gpu/int8_gemm_check.py "$B/gpuc" "$R/int8gemm/work" ;;
    prune) run prune "${PRUNE_S:-150}" tests/gpu/prune_check.sh "$B/gpuc" "$B/models" ;;
    bf16) run bf16 "${BF16_S:-120}" tests/gpu/bf16_eval_check.sh ;;
    layout) GPUC=$B/gpuc run layout "${LAYOUT_S:-120}" tests/gpu/layout_check.sh ;;
    fp8) run fp8 "${FP8_S:-200}" tests/gpu/fp8_check.sh "$B/gpuc" "$B/models" ;;
    dynops) run dynops "${DYNOPS_S:-90}" "$PY" tests/gpu/dynops_check.py "$B/gpuc" tests/models "$R/dynops" ;;
    rowfuse) run rowfuse "${ROWFUSE_S:-240}" "$PY" tests/gpu/row_fusion_bench.py "$B/gpuc" "$B/models" \
               tests/models/zoo "$R/rowfuse" check ;;
    bert) run bert "${BERT_S:-540}" "$PY" tests/gpu/row_fusion_bench.py "$B/gpuc" "$B/models" \
            tests/models/zoo "$R/bench" bert ;;
    gpt2) run gpt2 "${GPT2_S:-540}" "$PY" tests/gpu/row_fusion_bench.py "$B/gpuc" "$B/models" \
            tests/models/zoo "$R/bench" gpt2 ;;
    bertround)
      run lt_probe 20 "$PY" tests/gpu/cublaslt_int8_probe.py
      TAIL=80 run bertround "${BERTROUND_S:-270}" "$PY" tests/gpu/row_fusion_bench.py "$B/gpuc" "$B/models" \
            tests/models/zoo "$R/bench" round ;;
  esac
done
