#!/usr/bin/env bash
# onnxruntime-quantized models (tests/data/ort_qlinear: a small CNN and an
# MLP by quantize_dynamic, quantize_static QOperator and QDQ) through the
# CLI:
#   `gpuc run MODEL --cpu` on ORT's input equals ORT's CPU output exactly
#   (the same integer sums and f32 requantize); `--fp16` (the -O2 graph:
#   QLinear ops rewritten, int8 GEMMs, half storage) within 2e-2 relative L2;
#   each model compiles (NVRTC, cuBLASLt/cuDNN descriptors) for sm_80,
#   sm_89, sm_90 and sm_120, fp32 and --fp16, and the QLinearMatMul and
#   MatMulInteger models' plans hold int8 GEMM steps;
#   hostile nodes (a scale of the wrong size, a float bias, float data, f16
#   scales) get exit 1 and one line naming the node and the reason, on the
#   reference and when compiling.
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
# hostile QLinear nodes, made with onnx's helper
if "$py" - "$work" <<'PY'
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
w = sys.argv[1]
def save(name, nodes, inits, x_type=T.UINT8, x_shape=(2, 8), y_type=T.UINT8):
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", x_type, x_shape)],
                     [h.make_tensor_value_info("y", y_type, None)], [nh.from_array(v, k) for k, v in inits.items()])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), f"{w}/{name}.onnx")
f, u8, i8 = np.float32, np.uint8, np.int8
mm = dict(xs=np.array(0.1, f), xz=np.array(3, u8), b=np.ones((8, 4), i8), bs=np.ones(3, f), bz=np.zeros(4, i8),
          ys=np.array(0.2, f), yz=np.array(5, u8))
save("bad_bscale", [h.make_node("QLinearMatMul", ["x", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["y"], name="qmm")], mm)
mm16 = dict(mm, bs=np.ones(4, np.float16))
save("f16_scale", [h.make_node("QLinearMatMul", ["x", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["y"], name="qmm")], mm16)
cv = dict(xs=np.array(0.1, f), xz=np.array(3, u8), w=np.ones((4, 2, 3, 3), i8), ws=np.ones(4, f),
          wz=np.zeros(4, i8), ys=np.array(0.2, f), yz=np.array(5, u8), B=np.ones(4, f))
save("float_bias", [h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"], ["y"], name="qconv")],
     cv, x_shape=(1, 2, 5, 5))
save("float_data", [h.make_node("ConvInteger", ["x", "w"], ["y"], name="cint")], dict(w=np.ones((4, 2, 3, 3), i8)),
     x_type=T.FLOAT, x_shape=(1, 2, 5, 5), y_type=T.INT32)
PY
then
  for bad in "bad_bscale:qmm.*b_scale has 3 values" "f16_scale:qmm.*f32 scales only" "float_bias:qconv.*B is .*not int32" \
             "float_data:cint"; do
    m=${bad%%:*} want=${bad#*:}
    expect 1 run "$work/$m.onnx" --cpu
    grep -q "$want" "$work/err" && ok || bad "$m: run --cpu said '$(cat "$work/err")', want /$want/"
    expect 1 "$work/$m.onnx" --arch sm_90 -o "$work/$m.gpuc"
    grep -q "$want" "$work/err" && ok || bad "$m: compile said '$(cat "$work/err")', want /$want/"
  done
else
  bad "cannot make the hostile models (python3 with onnx)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
