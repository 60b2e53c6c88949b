#!/usr/bin/env bash
# The tiny dynamo-exported models of tests/models/dynops_* (written by
# tests/models/make_dynops_models.py: Gelu-20, LayerNormalization,
# attention with a padding mask, GroupNorm as PyTorch exports it): the CPU
# reference against PyTorch's stored outputs (relative L2 < 1e-4, fp32),
# then -O2 plans for sm_90 in fp32 and fp16 (NVRTC compiles every kernel).
# PREFIX (default dynops_) picks the models: smallops_ are those of
# tests/models/make_smallops_models.py (Mish, Bitwise*, Col2Im; both exporters).
# usage: dynops_models_test.sh GPUC MODELS_SRC_DIR WORKDIR PYTHON3 [PREFIX]
# (the first of PYTHON3, python3, /usr/bin/python3 that has numpy compares)
set -u
GPUC=$1; SRC=$2; WORK=$3; PREFIX=${5:-dynops_}; PY=
for p in "$4" python3 /usr/bin/python3; do
  if "$p" -c "import numpy" 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then echo "FAIL no python3 with numpy to compare outputs"; echo "0 passed, 1 failed"; exit 1; fi
rm -rf "$WORK"; mkdir -p "$WORK"
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
for model in "$SRC"/"$PREFIX"*.onnx; do
  m=$(basename "$model" .onnx)
  ins=()
  for f in "$SRC/$m".in.*.npy; do n=${f#"$SRC/$m".in.}; ins+=(--input "${n%.npy}=$f"); done
  if "$GPUC" run "$model" --cpu "${ins[@]}" --out "$WORK/$m" >"$WORK/$m.log" 2>&1; then
    for ref in "$SRC/$m".out.*.npy; do
      n=${ref#"$SRC/$m".out.}; n=${n%.npy}
      if r=$("$PY" -c 'import sys, numpy as np
a = np.load(sys.argv[1]).astype(np.float64); b = np.load(sys.argv[2]).astype(np.float64)
assert a.shape == b.shape, (a.shape, b.shape)
assert np.all(np.isfinite(a)), "non-finite output"
r = np.linalg.norm(a - b) / np.linalg.norm(b)
print("%.3g" % r); sys.exit(0 if r < 1e-4 else 1)' "$WORK/$m/$n.npy" "$ref" 2>&1); then
        ok "$m: cpu $n rel L2 $r"
      else bad "$m: cpu $n: $r"; fi
    done
  else bad "$m: gpuc run --cpu: $(head -1 "$WORK/$m.log")"; fi
  for flags in "" "--fp16"; do
    if "$GPUC" "$model" --arch sm_90 -O2 $flags -o "$WORK/$m$flags.gpuc" >"$WORK/$m.c.log" 2>&1; then
      ok "$m: sm_90 $flags plan"
    else bad "$m: sm_90 $flags: $(grep -m1 gpuc: "$WORK/$m.c.log")"; fi
  done
done
[ $pass -gt 0 ] || bad "no $PREFIX* models in $SRC"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
