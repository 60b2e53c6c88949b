#!/usr/bin/env bash
# One device call for the warp-specialized int8 GEMM (GPUC_INT8_WS=1 and
# =tma, codegen/lower_int8_gemm.c; issue 12), within about 5 minutes:
#   gemm   tests/gpu/int8_gemm_check.py with WS="1 tma": at its 8 shapes the
#          WS kernel, with cp.async loads (GPUC_INT8_WS=1) and with TMA
#          (=tma), bit-exact against `gpuc run --cpu --int8` (fp32) and
#          against the default wgmma kernel's GPU output (fp32, --fp16);
#          both vs the default wgmma kernel vs cuBLASLt int8 + DequantizeRows
#          vs cuBLASLt fp16 timed at BERT-base's four shapes (median of 200
#          replays, `gpuc bench --profile`); the WS tiles of WS_SWEEP timed
#          there too ([tma:]ws*: cooperative tiles, pp*: ping-pong; limit
#          GEMM_S seconds, default 170; the sweep comes last, so a cut
#          costs only its tail)
#   round  tests/gpu/row_fusion_bench.py round: BERT-base b32 s128 --fp16,
#          --int8 --fp16 (default kernels), with GPUC_INT8_WS=1 (int8-ws) and
#          =tma (int8-tma), and GPUC_INT8_GEMM=own with and without them
#          (int8-own, int8-ws-own, int8-tma-own: bit-identical at b2), timed,
#          each against `gpuc run --cpu` at b2 (limit ROUND_S seconds,
#          default 150; needs torch and transformers for the export, or
#          BERT_ONNX=PATH)
# Results: $OUT/summary.txt (the PASS/FAIL and timing lines), $OUT/gemm.txt
# and $OUT/round.txt (whole outputs), $OUT/round_logs.tgz (the round's logs).
# Carry: the dir tests/gpu/pack_carry.sh made (CARRY_DIR, default
# build-carry-ws: CARRY_DIR=build-carry-ws tests/gpu/pack_carry.sh build-ws).
#   usage: tests/gpu/int8_ws_check.sh [gemm] [round]   (default both)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
B=$PWD/${CARRY_DIR:-build-carry-ws}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
W=/tmp/gpuc_int8_ws
mkdir -p "$W"
trap '(cd "$W" && find . -type f \( -name "*.txt" -o -name "*.log" \) -size -2M | tar -czf "$OUT/round_logs.tgz" -T -) 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | tee -a "$OUT/summary.txt"
step() { # name seconds command...: whole output to $OUT/name.txt, the verdicts and timings to summary.txt
  local name=$1 secs=$2; shift 2
  echo "== $name (limit ${secs}s)" | tee -a "$OUT/summary.txt"
  local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  grep -E "PASS|FAIL|ok$|^time|^sweep|^round|failed" "$OUT/$name.txt" | tail -120 >> "$OUT/summary.txt"
  echo "-- $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
for w in ${*:-gemm round}; do
  case $w in
    gemm) WS=${WS:-"1 tma"} WS_SWEEP=${WS_SWEEP:-"pp64x256s4 tma:ws128x256s4 tma:pp64x256s4 tma:pp64x128s4 tma:ws128x128s3g1"} \
            step gemm "${GEMM_S:-170}" "$PY" tests/gpu/int8_gemm_check.py "$B/gpuc" "$W/gemm" ;;
    round) ROUND_ONLY=${ROUND_ONLY:-fp16,int8,int8-ws,int8-tma,int8-own,int8-ws-own,int8-tma-own} \
             step round "${ROUND_S:-150}" "$PY" tests/gpu/row_fusion_bench.py "$B/gpuc" "$B/models" \
             tests/models/zoo "$W/round" round ;;
  esac
done
