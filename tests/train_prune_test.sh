#!/usr/bin/env bash
# gpuc train --cpu --prune on the bundled small CNN (two Convs, two Gemms),
# on 256 random images (no test set: the point is the weights):
#   --prune 2:4 --prune-after 2: pruned before step 3, then 6 more SGD
#     steps with momentum; every Gemm weight of the saved model has at most
#     2 nonzeros in each group of 4 along K (its rows: transB=1), the Convs
#     are left dense, and the weights did change after pruning (training
#     went on);
#   --prune l1:0.3 (at the start): every Conv and Gemm weight of the saved
#     model has exactly round(0.3 * n) zeros (torch's count);
#   --prune-after without --prune, and --prune 3:4, are usage errors.
# usage: train_prune_test.sh GPUC MODELS_DIR WORKDIR
set -u
gpuc=$1 models=$2 work=$3
mkdir -p "$work"
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

$py - "$work" <<'EOF' || { echo "FAIL: cannot make the data"; exit 1; }
import sys, numpy as np
rng = np.random.default_rng(3)
np.save(sys.argv[1] + "/x.npy", rng.random((256, 1, 28, 28), dtype=np.float32))
np.save(sys.argv[1] + "/y.npy", rng.integers(0, 10, 256).astype(np.int64))
EOF
data="npy:$work/x.npy,$work/y.npy"

train() { # OUT.onnx FLAGS...
  local out=$1; shift
  "$gpuc" train "$models/small_cnn.onnx" --data "$data" --cpu --epochs 1 --batch 32 --lr 0.05 --seed 1 \
    --log-every 4 --save "$out" "$@" >"$work/log" 2>&1
}

if train "$work/p24.onnx" --prune 2:4 --prune-after 2 && grep -q "pruned 2 layers (2:4) before step 3" "$work/log"; then ok
else bad "train --prune 2:4 --prune-after 2: $(cat "$work/log")"; fi
if train "$work/p24_at2.onnx" --max-steps 2; then ok; else bad "train --max-steps 2: $(cat "$work/log")"; fi
if train "$work/l1.onnx" --prune l1:0.3 && grep -q "pruned 4 layers (l1) before step 1" "$work/log"; then ok
else bad "train --prune l1:0.3: $(cat "$work/log")"; fi

out=$($py - "$models/small_cnn.onnx" "$work/p24.onnx" "$work/p24_at2.onnx" "$work/l1.onnx" <<'EOF'
import sys, onnx
from onnx import numpy_helper
import numpy as np
def weights(path):
    m = onnx.load(path)
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    layers = [(n.op_type, n.input[1], next((a.i for a in n.attribute if a.name == "transB"), 0))
              for n in m.graph.node if n.op_type in ("Conv", "Gemm")]
    return w, layers
orig, layers = weights(sys.argv[1])
p24, _ = weights(sys.argv[2])
at2, _ = weights(sys.argv[3])
l1, _ = weights(sys.argv[4])
bad = 0
for op, name, tb in layers:
    if op == "Gemm":
        w = p24[name] if tb else p24[name].T          # rows run along K
        groups = w.reshape(w.shape[0], -1, 4)
        nz = (groups != 0).sum(axis=2)
        if nz.max() > 2: print(f"FAIL: {name}: a group of 4 with {nz.max()} nonzeros"); bad += 1
        if np.array_equal(p24[name], np.where(p24[name] != 0, at2[name], 0)):
            print(f"FAIL: {name}: unchanged after pruning: training did not go on"); bad += 1
    elif not np.count_nonzero(p24[name] == 0) == 0:
        print(f"FAIL: conv {name} has zeros after --prune 2:4"); bad += 1
    n = l1[name].size
    z = int((l1[name] == 0).sum())
    if z != round(0.3 * n): print(f"FAIL: {name}: {z} zeros after l1:0.3, want {round(0.3 * n)} of {n}"); bad += 1
    else: print(f"{name}: {z} of {n} zero ({100 * z / n:.2f}%)")
print("bad", bad)
EOF
)
echo "$out"
if echo "$out" | grep -q "^bad 0$"; then ok; else bad "saved weights"; fi

"$gpuc" train "$models/small_cnn.onnx" --data "$data" --cpu --prune-after 3 >/dev/null 2>&1
if [ $? -eq 2 ]; then ok; else bad "--prune-after without --prune should be a usage error"; fi
"$gpuc" train "$models/small_cnn.onnx" --data "$data" --cpu --prune 3:4 >/dev/null 2>"$work/err"
if [ $? -eq 2 ] && grep -q "prune wants" "$work/err"; then ok; else bad "--prune 3:4 should be a usage error"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
