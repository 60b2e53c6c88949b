#!/usr/bin/env bash
# One device call (under 7 minutes on the H200) for the sm_90 int8 default
# (codegen/lower_int8_gemm.c: the TMA-fed warp-specialized GEMM where it
# was measured faster, ws_choice; gpuc's kernel for every int8 GEMM of
# N >= 256, cg_int8_gemm_own) against GPUC_INT8_WS=0, the default before:
#   gemm   tests/gpu/int8_gemm_check.py with WS=0: at its shapes (BERT-base's
#          four GEMMs at 4096 rows, the edges, and K 2080 / N 2056 / N 3080
#          where the default takes each TMA tile) the default's kernel
#          bit-exact against `gpuc run --cpu --int8` (fp32) and the
#          GPUC_INT8_WS=0 kernel's GPU output, timed beside it, cuBLASLt int8
#          + DequantizeRows and cuBLASLt fp16 at BERT's shapes (limit GEMM_S
#          seconds, default 130)
#   models tests/gpu/int8_default_check.py small time: bert_small b32 s128
#          (tests/gpu/hf_export.py) by default bit-identical on the GPU to
#          GPUC_INT8_WS=0 and near `gpuc run --cpu --int8` (fp32, --fp16);
#          BERT-base b32 s128 and the LLaMA decoder b8 s512: --fp16, --int8
#          --fp16 with GPUC_INT8_WS=0, by default, and by default without the
#          row groups (GPUC_NO_ROW_FUSION=1), the default's GPU output
#          bit-identical to the other int8 plans', each plan timed by `gpuc
#          bench --iters 200 --profile` (median) (limit MODELS_S seconds,
#          default 270; exports the three models at once with torch +
#          transformers, or BERT_ONNX / LLAMA_ONNX / SMALL_ONNX=PATH)
# Results: $OUT/summary.md (PASS/FAIL lines and the timing table),
# $OUT/gemm.txt and $OUT/models.txt (whole outputs), the bench outputs,
# $OUT/logs.tgz. Prints PASS or FAIL last.
# Carry: CARRY_DIR (default build-carry-i8) as tests/gpu/pack_carry.sh packs it:
#   ninja -C build-i8 && CARRY_DIR=build-carry-i8 NO_WHEELS=1 tests/gpu/pack_carry.sh build-i8
#   then: OUT=$OUT CARRY_DIR=build-carry-i8 tests/gpu/int8_default_check.sh   (carry build-carry-i8)
#   usage: tests/gpu/int8_default_check.sh [gemm] [models]   (default both)
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
B=$PWD/${CARRY_DIR:-build-carry-i8}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
W=${WORK:-/tmp/gpuc_int8_default}
mkdir -p "$W"
S="$OUT/summary.md"
trap '(cd "$W" && find . -type f \( -name "*.txt" -o -name "*.log" \) -size -2M | tar -czf "$OUT/logs.tgz" -T -) 2>/dev/null; true' EXIT
if [ ! -x "$B/gpuc" ]; then
  echo "FAIL no gpuc in $B (pack it: CARRY_DIR=build-carry-i8 NO_WHEELS=1 tests/gpu/pack_carry.sh build-i8)" | tee -a "$S"
  exit 1
fi
{ echo "# int8 default check ($(date -u +%FT%TZ), gpuc $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"; echo
  echo '```'; nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1; echo '```'; } >> "$S"
failed=0
step() { # name seconds command...: whole output to $OUT/name.txt, the verdicts and timings to summary.md
  local name=$1 secs=$2; shift 2
  echo "## $name (limit ${secs}s)" | tee -a "$S"
  local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  { echo '```'; grep -E "^(PASS|FAIL)|^time|exported|compiles|failed" "$OUT/$name.txt" | tail -150; echo '```'; } >> "$S"
  [ $rc = 0 ] || failed=1
  [ $rc = 124 ] && echo "FAIL $name: cut at its limit of ${secs}s" | tee -a "$S"
  echo "-- $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$S"
}
[ $# = 0 ] && set -- gemm models
for w in "$@"; do
  case $w in
    gemm) WS=0 step gemm "${GEMM_S:-130}" "$PY" tests/gpu/int8_gemm_check.py "$B/gpuc" "$W/gemm" ;;
    models) step models "${MODELS_S:-270}" "$PY" tests/gpu/int8_default_check.py "$B/gpuc" "$W/models" "$OUT" small time ;;
    *) echo "unknown step $w (gemm, models)"; exit 2 ;;
  esac
done
[ -f "$OUT/table.md" ] && { echo "## timings"; cat "$OUT/table.md"; } >> "$S"
cat "$OUT"/gemm.txt "$OUT"/models.txt 2>/dev/null | grep -q "^FAIL" && failed=1
if [ $failed = 0 ]; then echo "PASS int8_default_check" | tee -a "$S"; else echo "FAIL int8_default_check" | tee -a "$S"; fi
exit $failed
