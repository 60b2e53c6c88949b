#!/usr/bin/env bash
# Issue 12's accuracy targets on trained models: the bundled small CNN and
# MLP trained on Fashion-MNIST by `gpuc train`, then `gpuc eval` of the
# saved model in fp32 and with each compression flag, and a
# `gpuc train --prune 2:4` run beside the dense one (same epochs, seed,
# batch, lr). Prints one markdown table, the per-layer sparsity lines of
# --prune l1:0.3, and a 2:4 check of the pruned runs' saved weights.
#   targets: --int8 within 0.5 points of fp32, --bf16 within 0.2, the 2:4
#   trained CNN within 1 point of the dense run, l1:0.3 30% per layer.
# usage: bench/compression_accuracy.sh [--cpu]
#   --cpu: train and evaluate on the CPU reference (no GPU needed); without
#   it, on the GPU (train's fp32 GPU trainer, eval compiles each flag's plan).
# env: EPOCHS (3), PRUNE_AFTER (937 = one epoch of batch 64: 2:4 from there
#   on, the mask fixed), GPUC (build/gpuc), GPUC_FASHION_MNIST
#   (/usr/share/datasets/fashion-mnist), OUT (build/compression_accuracy).
set -euo pipefail
cd "$(dirname "$0")/.."
gpuc=${GPUC:-build/gpuc}
data=fashion-mnist:${GPUC_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
out=${OUT:-build/compression_accuracy}
epochs=${EPOCHS:-3}
prune_after=${PRUNE_AFTER:-937}
where=()
if [ "${1:-}" = --cpu ]; then where=(--cpu); fi
mkdir -p "$out"
models=build/models
train_flags=(--epochs "$epochs" --batch 64 --lr 0.05 --seed 1 --log-every 400)

train() { # NAME MODEL FLAGS...: $out/NAME.onnx, log $out/NAME.train.txt
  local name=$1 model=$2; shift 2
  echo "== $gpuc train $model --data $data ${where[*]} ${train_flags[*]} $* --save $out/$name.onnx" >&2
  local t0=$SECONDS
  "$gpuc" train "$model" --data "$data" "${where[@]}" "${train_flags[@]}" "$@" --save "$out/$name.onnx" \
    >"$out/$name.train.txt" 2>&1 || { cat "$out/$name.train.txt" >&2; exit 1; }
  echo "   $((SECONDS - t0)) s: $(grep 'final test accuracy' "$out/$name.train.txt")" >&2
}
acc() { sed -n 's/^test accuracy \([0-9.]*\)% .*/\1/p' "$1"; }
evaluate() { # NAME FLAG-OR-fp32: prints the accuracy, log $out/NAME.FLAG.txt
  local name=$1 flag=$2 f=()
  [ "$flag" != fp32 ] && read -ra f <<<"$flag"
  local log="$out/$name.${flag//[ :]/_}.txt"
  echo "== $gpuc eval $out/$name.onnx --data $data ${where[*]} ${f[*]}" >&2
  "$gpuc" eval "$out/$name.onnx" --data "$data" "${where[@]}" "${f[@]}" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  acc "$log"
}
delta() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f", a - b }'; }

train mlp $models/mlp.onnx
train cnn $models/small_cnn.onnx
train mlp_2to4 $models/mlp.onnx --prune 2:4 --prune-after "$prune_after"
train cnn_2to4 $models/small_cnn.onnx --prune 2:4 --prune-after "$prune_after"

echo
echo "| model ($epochs epochs) | fp32 | --int8 (target +-0.5) | --bf16 (target +-0.2) | --fp16 | --prune l1:0.3 (no fine-tuning) | train --prune 2:4 (target +-1.0) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for m in mlp cnn; do
  f32=$(evaluate $m fp32)
  row="| $m | $f32%"
  for flag in --int8 --bf16 --fp16 "--prune l1:0.3"; do
    a=$(evaluate $m "$flag")
    row="$row | $a% ($(delta "$a" "$f32"))"
  done
  p=$(evaluate ${m}_2to4 fp32)
  echo "$row | $p% ($(delta "$p" "$f32")) |"
done
echo
for m in mlp cnn; do
  echo "$m --prune l1:0.3 (eval's pass report):"
  grep -E "zeros \(|^  pruned" "$out/$m.--prune_l1_0.3.txt" || true
  echo "$m --int8 layers:"
  sed -n '/int8/,/^evaluating/p' "$out/$m.--int8.txt" | grep -v '^evaluating' || true
done
for m in mlp cnn; do
  echo "${m}_2to4 train: $(grep -E '^ *pruned' "$out/${m}_2to4.train.txt" || true)"
done
# The saved 2:4 models: every pruned weight has at most 2 nonzeros in each
# group of 4 along K (Gemm rows with transB=1, MatMul columns).
py=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import onnx' 2>/dev/null && py=/usr/bin/python3
$py - "$out/mlp_2to4.onnx" "$out/cnn_2to4.onnx" <<'EOF' || echo "2:4 check: FAIL (or no python3 with onnx)"
import sys, onnx
from onnx import numpy_helper
for path in sys.argv[1:]:
    m = onnx.load(path)
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type not in ("Gemm", "MatMul") or n.input[1] not in w:
            continue
        tb = next((a.i for a in n.attribute if a.name == "transB"), 0)
        k_last = w[n.input[1]] if tb else w[n.input[1]].T
        if k_last.shape[-1] % 4:
            print(f"{path}: {n.name}: K = {k_last.shape[-1]} kept dense")
            continue
        nz = (k_last.reshape(k_last.shape[0], -1, 4) != 0).sum(-1)
        print(f"{path}: {n.name} {list(k_last.shape)}: groups of 4 with more than 2 nonzeros: "
              f"{int((nz > 2).sum())} -> {'2:4 sparse' if (nz <= 2).all() else 'NOT 2:4'}")
EOF
