#!/usr/bin/env bash
# GridSample / AffineGrid (codegen/lower_grid.c) on the GPU machine:
# (a) conformance: `gpuc test-onnx DIR --gpu` and `--gpu --fp16` over
#     libonnx-testdata's 8 test_gridsample folders (carried in .testdata/)
#     and tests/onnx_node's 52 GridSample-20 and 6 AffineGrid-20 folders
#     (AffineGrid's size is frozen in as a small integer input);
# (b) the zoo's spatial transformer and flow warp (tests/models/zoo, both
#     exporters) compiled at batch 4 in fp32, --fp16 and --bf16, run on the
#     stored input, against PyTorch's stored output (rel L2: fp32 <= 1e-4,
#     fp16 <= 2e-2, bf16 <= 1e-1; the CPU reference gives 1.5e-6, 7.1e-3
#     and 4.6e-2 for the STN, whose theta comes from a half GEMM);
# (c) time: GridSample alone at X [8,64,128,128] (linear, nearest, cubic
#     with border; f16 X), 3-D X [2,16,32,64,64], `gpuc bench --profile`,
#     beside F.grid_sample on the same sizes (CUDA events).
# Prints FAIL lines and a summary; exit 1 on any failure. From the repo root:
#   tests/gpu/grid_sample_check.sh [GPUC]      (default build-gpu/gpuc)
set -u
. "$(dirname "$0")/gpu_env.sh"
exec > >(tee "$OUT/grid_sample.txt") 2>&1
G=${1:-build-gpu/gpuc}
W=$(mktemp -d)
fails=0
echo "== (a) conformance"
n=0
for d in ${GRID_TESTDATA:-.testdata}/node/test_gridsample* tests/onnx_node/node/test_gridsample* tests/onnx_node/node/test_affine_grid*; do
  [ -d "$d" ] || continue
  for f in "" --fp16; do
    r=$($G test-onnx "$d" --gpu $f 2>&1)
    n=$((n + 1))
    if ! echo "$r" | tail -1 | grep -q "^PASS"; then
      echo "FAIL ${f:-fp32} $d"; echo "$r" | tail -6; fails=$((fails + 1))
    fi
  done
done
echo "conformance runs: $n, failed: $fails"
echo "== (b) zoo models vs PyTorch"
Z=tests/models/zoo
for m in tiny_stn_ts tiny_stn_dynamo tiny_flowwarp_ts tiny_flowwarp_dynamo; do
  b=${m%_*}
  for f in "" --fp16 --bf16; do
    if ! $G $Z/$m.onnx --shape input=4x3x32x32 $f -o $W/$m.gpuc > $W/c.log 2>&1; then
      echo "FAIL compile $m $f"; tail -3 $W/c.log; fails=$((fails + 1)); continue
    fi
    rm -rf $W/o
    if ! $G run $W/$m.gpuc --input input=$Z/$b.in.input.npy --out $W/o > $W/r.log 2>&1; then
      echo "FAIL run $m $f"; tail -3 $W/r.log; fails=$((fails + 1)); continue
    fi
    $PY - "$W/o" "$Z/$b.out.npy" "$m ${f:-fp32}" <<'PY' || fails=$((fails + 1))
import glob, sys, numpy as np
a = np.load(glob.glob(sys.argv[1] + "/*.npy")[0]).astype(np.float64)
b = np.load(sys.argv[2]).astype(np.float64)
e = np.linalg.norm(a - b) / np.linalg.norm(b)
tol = 1e-4 if sys.argv[3].endswith("fp32") else 1e-1 if "bf16" in sys.argv[3] else 2e-2
print("%s rel L2 %.3g%s" % (sys.argv[3], e, "" if e <= tol else "  FAIL (> %g)" % tol))
sys.exit(0 if e <= tol else 1)
PY
  done
done
echo "== (c) time"
$PY - "$W" <<'PY'
import sys
from onnx import helper, TensorProto as T, save
def gs(name, xs, gsz, dt=T.FLOAT, **attrs):
    node = helper.make_node("GridSample", ["X", "grid"], ["Y"], name="gs", **attrs)
    g = helper.make_graph([node], "gs", [helper.make_tensor_value_info("X", dt, xs),
                          helper.make_tensor_value_info("grid", T.FLOAT, gsz)],
                          [helper.make_tensor_value_info("Y", dt, xs[:2] + gsz[1:-1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 8
    save(m, "%s/%s.onnx" % (sys.argv[1], name))
gs("linear", [8, 64, 128, 128], [8, 128, 128, 2], mode="linear")
gs("nearest", [8, 64, 128, 128], [8, 128, 128, 2], mode="nearest")
gs("cubic_border", [8, 64, 128, 128], [8, 128, 128, 2], mode="cubic", padding_mode="border")
gs("linear_f16", [8, 64, 128, 128], [8, 128, 128, 2], T.FLOAT16, mode="linear")
gs("linear_3d", [2, 16, 32, 64, 64], [2, 32, 64, 64, 3], mode="linear", align_corners=1)
PY
for m in linear nearest cubic_border linear_f16 linear_3d; do
  $G $W/$m.onnx -o $W/$m.gpuc > /dev/null 2>&1 || { echo "FAIL compile $m"; fails=$((fails + 1)); continue; }
  echo "-- gpuc $m"; $G bench $W/$m.gpuc --iters 100 --profile 2>&1 | tail -4
done
$PY - <<'PY'
import torch, torch.nn.functional as F
def t(fn, n=100):
    for _ in range(10): fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e) / n
x = torch.randn(8, 64, 128, 128, device="cuda"); g = torch.rand(8, 128, 128, 2, device="cuda") * 2.4 - 1.2
xh, gh = x.half(), g.half()
for mode, pad in (("bilinear", "zeros"), ("nearest", "zeros"), ("bicubic", "border")):
    print("torch %s %s: %.4f ms" % (mode, pad, t(lambda: F.grid_sample(x, g, mode=mode, padding_mode=pad))))
print("torch bilinear f16: %.4f ms" % t(lambda: F.grid_sample(xh, gh)))
x3 = torch.randn(2, 16, 32, 64, 64, device="cuda"); g3 = torch.rand(2, 32, 64, 64, 3, device="cuda") * 2.4 - 1.2
print("torch 3-D bilinear: %.4f ms" % t(lambda: F.grid_sample(x3, g3, align_corners=True)))
PY
rm -rf "$W"
echo "grid_sample_check: $fails failed"
exit $((fails > 0))
