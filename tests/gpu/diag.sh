#!/usr/bin/env bash
# Diagnosis on the GPU machine (carry build-gpu): MobileNetV2 --fp16 bisection
# and per-kernel profiles of the slow rows. Results under $OUT.
set -u
OUT=${OUT:-/tmp/gpuc_out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
GPUC=$PWD/build-gpu/gpuc
W=/tmp/gpuc_diag; mkdir -p $W
$PY - <<PYEOF 2>&1 | tail -5
import sys, torch
sys.path.insert(0, "bench")
import torch_models as tm
for name in "${DIAG_MODELS:-mobilenet_v2 bert}".split():
    m, spec = tm.build(name)
    w = tm.Wrap(m.cuda().eval(), name == "bert").eval()
    with torch.no_grad():
        tm.export(w, name, spec, "$W/%s.onnx" % name)
    print("exported", name)
PYEOF
cp $W/mobilenet_v2.onnx "$OUT/" 2>/dev/null
$PY tests/gpu/bisect_fp16.py $GPUC $W/mobilenet_v2.onnx $W/bis input=1x3x224x224 > "$OUT/bisect.txt" 2>&1
head -5 "$OUT/bisect.txt"; grep -n "first" "$OUT/bisect.txt"
prof() { # name shape-args...
  local tag=$1; shift
  $GPUC "$@" -o $W/$tag.gpuc > $W/$tag.compile.txt 2>&1 || { cat $W/$tag.compile.txt; return; }
  { cat $W/$tag.compile.txt; $GPUC inspect $W/$tag.gpuc | head -5; $GPUC bench $W/$tag.gpuc --iters 50 --profile; } > "$OUT/prof_$tag.txt" 2>&1
  head -30 "$OUT/prof_$tag.txt" | grep -E "median|arena" 
}
prof bert_b32_f32 $W/bert.onnx -O2 --shape input_ids=32x128 --shape attention_mask=32x128
prof bert_b32_f16 $W/bert.onnx -O2 --fp16 --shape input_ids=32x128 --shape attention_mask=32x128
prof mnv2_b256_f16 $W/mobilenet_v2.onnx -O2 --fp16 --shape input=256x3x224x224
