#!/usr/bin/env bash
# onnxruntime-quantized models (tests/data/ort_qlinear: a small CNN and an
# MLP by quantize_dynamic, quantize_static QOperator and QDQ) through the
# CLI:
#   `gpuc run MODEL --cpu` on ORT's input equals ORT's CPU output exactly
#   (the same integer sums and f32 requantize); `--fp16` (the -O2 graph:
#   QLinear ops rewritten, int8 GEMMs, half storage) within 2e-2 relative L2;
#   each model compiles (NVRTC, cuBLASLt/cuDNN descriptors) for sm_80,
#   sm_89, sm_90 and sm_120, fp32 and --fp16, and the QLinearMatMul and
#   MatMulInteger models' plans hold int8 GEMM steps.
# usage: qlinear_cli_test.sh GPUC PYTHON DATA_DIR WORK_DIR
set -u
gpuc=$1 py=$2 data=$3 work=$4
mkdir -p "$work"
. "$(dirname "$0")/expect_lib.sh"

compare() { # GOT.npy WANT.npy BOUND (0: exact)
  "$py" - "$1" "$2" "$3" <<'PY'
import sys, numpy as np
g, w, bound = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
r = float(np.linalg.norm(g.astype(np.float64) - w) / np.linalg.norm(w))
ok = g.shape == w.shape and (np.array_equal(g, w) if bound == 0 else r <= bound)
print(f"rel L2 {r:.3g}, max |diff| {np.abs(g.astype(np.float64) - w).max():.3g}")
sys.exit(0 if ok else 1)
PY
}

for d in "$data"/*/; do
  m=$(basename "$d")
  for mode in exact fp16; do
    flags=() bound=0
    [ $mode = fp16 ] && flags=(--fp16) bound=2e-2
    rm -rf "$work/$m.$mode"
    if "$gpuc" run "$d/model.onnx" --cpu "${flags[@]}" --input "x=$d/in_x.npy" --out "$work/$m.$mode" \
         >"$work/$m.$mode.log" 2>&1 && r=$(compare "$work/$m.$mode/y.npy" "$d/y.npy" $bound); then
      ok; echo "  $m run --cpu ${flags[*]}: $r"
    else
      bad "$m: run --cpu ${flags[*]} against onnxruntime ($bound): ${r:-$(tail -2 "$work/$m.$mode.log")}"
    fi
  done
  for arch in sm_80 sm_89 sm_90 sm_120; do
    for half in "" --fp16; do
      plan="$work/$m.$arch$half.gpuc"
      if "$gpuc" "$d/model.onnx" --arch $arch $half -o "$plan" >"$work/compile.log" 2>&1; then ok
      else bad "$m --arch $arch $half: $(tail -3 "$work/compile.log")"; fi
    done
  done
  case $m in *_dynamic|*_qop)
    "$gpuc" inspect "$work/$m.sm_90.gpuc" | grep -q "gemm int8" && ok ||
      bad "$m: no int8 GEMM step in the sm_90 plan" ;;
  esac
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
