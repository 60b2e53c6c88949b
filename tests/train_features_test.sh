#!/usr/bin/env bash
# gpuc train --cpu features, one part per ctest:
#   accum   --accum 4 --batch 64 gives the per-step losses of --batch 256
#   resume  2 epochs straight == 1 epoch + --checkpoint + --resume, bitwise
#           (parameters, optimizer state, losses), SGD and AdamW+cosine, and
#           from a version-1 checkpoint; --amp's loss-scale state passes
#           through a --cpu resume into the next checkpoint; corrupt
#           checkpoints are refused with one line, exit 1
#   data    npy and cifar10 files made here (python3 + numpy), good and malformed
#   dropout training-mode Dropout (mlp_dropout.onnx: mlp's weights + Dropout
#           0.3): ratio 0 trains exactly as mlp, 0.3 differently and to a
#           sane accuracy; resume repeats the masks bitwise; --save keeps
#           the node; bad Dropout nodes are refused; the GPU plans compile
# usage: train_features_test.sh PART GPUC MODELS_DIR FASHION_MNIST_DIR WORK_DIR
set -u
part=$1 gpuc=$2 models=$3 data=$4 work=$5
mkdir -p "$work"
. "$(dirname "$0")/expect_lib.sh"
mlp=$models/mlp.onnx
fm="fashion-mnist:$data"
# the error line must mention a word
says() { if grep -q -- "$1" "$work/err"; then ok; else bad "stderr lacks '$1': $(cat "$work/err")"; fi; }

# losses FILE: the loss column of the progress lines
losses() { sed -n 's/^epoch .* step .* loss \([0-9.]*\) .*/\1/p' "$1"; }
# progress and accuracy lines without the timings
steady() { grep '^epoch' "$1" | sed 's/ images\/s [0-9]*//; s/, [0-9.]* s training.*//'; }

run() { # run OUTFILE ARGS...: must succeed
  local o=$1; shift
  if "$gpuc" train "$mlp" --cpu "$@" >"$o" 2>&1; then ok; else bad "gpuc train $* failed: $(tail -3 "$o")"; fi
}

part_accum() {
  run "$work/big" --data "$fm" --batch 256 --max-steps 20 --log-every 1 --seed 5
  run "$work/acc" --data "$fm" --batch 64 --accum 4 --max-steps 20 --log-every 1 --seed 5
  run "$work/small" --data "$fm" --batch 64 --max-steps 20 --log-every 1 --seed 5
  losses "$work/big" >"$work/big.l"; losses "$work/acc" >"$work/acc.l"; losses "$work/small" >"$work/small.l"
  [ "$(wc -l <"$work/big.l")" -eq 20 ] && [ "$(wc -l <"$work/acc.l")" -eq 20 ] && ok \
    || bad "want 20 loss lines each: $(wc -l <"$work/big.l") $(wc -l <"$work/acc.l")"
  # relative 1e-4 per step
  paste "$work/big.l" "$work/acc.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) { print; bad = 1 } }
    END { exit bad }' && ok || bad "--accum 4 --batch 64 losses differ from --batch 256"
  # and the comparison can tell: plain --batch 64 steps differ
  paste "$work/big.l" "$work/small.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3 * $1) n++ }
    END { exit !(n >= 10) }' && ok || bad "--batch 64 gave the losses of --batch 256?"
  grep -q "step 20/20 .*loss scale 1" "$work/acc" && ok || bad "progress line format"
  expect 2 train "$mlp" --data "$fm" --cpu --accum 0
  expect 2 train "$mlp" --data "$fm" --cpu --accum 1025
  expect 1 train "$mlp" --data "$fm" --cpu --batch 65536 --accum 2   # a step beyond the data
  expect 2 train "$mlp" --data "$fm" --cpu --amp
  expect 2 train "$mlp" --data "$fm" --cpu --mem-limit 4G
  expect 2 train "$mlp" --data "$fm" --cpu --optimizer adam
  expect 2 train "$mlp" --data "$fm" --cpu --schedule linear
  expect 2 train "$mlp" --data "$fm" --cpu --betas 0.9
  expect 2 train "$mlp" --data "$fm" --cpu --betas 0.9,1
  expect 1 train "$mlp" --data "$fm" --cpu --freeze nothing.like.this --max-steps 1
  # --freeze fc1: fc1 keeps its initial values, fc2 moves
  run "$work/fz" --data "$fm" --max-steps 5 --freeze fc1 --save "$work/fz.onnx"
  python3 - "$mlp" "$work/fz.onnx" <<'PY' && ok || bad "--freeze fc1"
import sys, onnx, onnx.numpy_helper as nh
a = {t.name: nh.to_array(t) for t in onnx.load(sys.argv[1]).graph.initializer}
b = {t.name: nh.to_array(t) for t in onnx.load(sys.argv[2]).graph.initializer}
assert (a['fc1.weight'] == b['fc1.weight']).all() and (a['fc1.bias'] == b['fc1.bias']).all()
assert (a['fc2.weight'] != b['fc2.weight']).any()
PY
}

# straight RUNNAME ARGS: 2 epochs in one run vs 1 + resume, same losses and state
straight_vs_resumed() {
  local n=$1; shift
  local c=$work/$n
  rm -rf "$c"; mkdir -p "$c"
  run "$c/two" --data "$fm" --limit 2048 --batch 64 --log-every 1 --epochs 2 --checkpoint "$c/ck2" \
      --save "$c/two.onnx" "$@"
  run "$c/one" --data "$fm" --limit 2048 --batch 64 --log-every 1 --epochs 1 --checkpoint "$c/ck1" "$@"
  cp -r "$c/ck1" "$c/ck1.orig"
  run "$c/res" --data "$fm" --limit 2048 --batch 64 --log-every 1 --epochs 2 --resume "$c/ck1" \
      --checkpoint "$c/ck1" --save "$c/res.onnx" "$@"
  grep -q "resumed from .* at epoch 1, step 32" "$c/res" && ok || bad "$n: no resume line"
  steady "$c/two" >"$c/two.s"
  { steady "$c/one"; steady "$c/res"; } >"$c/res.s"
  [ "$(grep -c step "$c/two.s")" -eq 64 ] && cmp -s "$c/two.s" "$c/res.s" && ok \
    || bad "$n: printed losses differ: $(diff "$c/two.s" "$c/res.s" | head -5)"
  cmp -s "$c/two.onnx" "$c/res.onnx" && ok || bad "$n: final parameters differ"
  cmp -s "$c/ck2/checkpoint.bin" "$c/ck1/checkpoint.bin" && ok || bad "$n: final checkpoints differ"
  ls "$c/ck1" | grep -q tmp && bad "$n: temp file left" || ok
}

# ck_edit FILE EDIT...: rewrite a checkpoint and fix its checksum, so the
# checks before the checksum's are reached. EDIT: name (the first
# parameter's), shape (its dims swapped), v1 (back to format version 1:
# no --amp counters), or FIELD=VALUE[,FIELD=VALUE] with FIELD one of
# version scale step clean skipped
ck_edit() {
  python3 - "$@" <<'PY'
import struct, sys
fields = {'version': (8, '<I'), 'scale': (20, '<f'), 'step': (32, '<q'), 'clean': (80, '<q'),
          'skipped': (88, '<q')}
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
rec = 96  # the first parameter record
for edit in sys.argv[2:]:
    if edit == 'name': b[rec + 4] ^= 0x20
    elif edit == 'shape':
        d = rec + 4 + struct.unpack_from('<I', b, rec)[0] + 4
        struct.pack_into('<qq', b, d, *reversed(struct.unpack_from('<qq', b, d)))
    elif edit == 'v1':
        del b[80:96]
        struct.pack_into('<I', b, 8, 1)
        struct.pack_into('<Q', b, 72, len(b))
    else:
        for kv in edit.split(','):
            k, v = kv.split('=')
            off, fmt = fields[k]
            struct.pack_into(fmt, b, off, float.fromhex(v) if v.startswith('0x') else
                             float(v) if fmt == '<f' else int(v))
h = 0xcbf29ce484222325
for c in b[:-8]: h = ((h ^ c) * 0x100000001b3) & (2**64 - 1)
struct.pack_into('<Q', b, len(b) - 8, h)
open(p, 'wb').write(b)
PY
}

# corrupt OFFSET BYTES: a copy of the epoch-1 checkpoint with bytes written at OFFSET
ck=$work/sgd/ck1.orig/checkpoint.bin
bad_ck() { rm -rf "$work/bad"; mkdir -p "$work/bad"; cp "$ck" "$work/bad/checkpoint.bin"; }
resume_bad() { expect 1 train "$mlp" --data "$fm" --cpu --limit 2048 --batch 64 --epochs 2 --resume "$work/bad" "$@"; }

# A version-1 checkpoint (no --amp counters) is still read: the SGD run
# resumed from one ends as the straight run does.
resume_v1() {
  local c=$work/v1
  rm -rf "$c"; mkdir -p "$c/ck"
  cp "$ck" "$c/ck/checkpoint.bin"
  ck_edit "$c/ck/checkpoint.bin" v1
  [ "$(stat -c %s "$c/ck/checkpoint.bin")" -eq $(($(stat -c %s "$ck") - 16)) ] && ok || bad "v1: not 16 bytes shorter"
  run "$c/res" --data "$fm" --limit 2048 --batch 64 --log-every 1 --epochs 2 --resume "$c/ck" --checkpoint "$c/ck" \
      --optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 1e-4
  grep -q "resumed from .* at epoch 1, step 32$" "$c/res" && ok || bad "v1: resume line"
  cmp -s "$work/sgd/ck2/checkpoint.bin" "$c/ck/checkpoint.bin" && ok || bad "v1: the final checkpoint differs"
}

# The --amp state of a checkpoint (as a GPU run writes it) goes through a
# --cpu resume unchanged into the next checkpoint: scale, clean run, skips.
amp_state_passes() {
  local c=$work/amp
  rm -rf "$c"; mkdir -p "$c/ck"
  cp "$ck" "$c/ck/checkpoint.bin"
  ck_edit "$c/ck/checkpoint.bin" scale=1024,clean=7,skipped=3
  run "$c/res" --data "$fm" --limit 2048 --batch 64 --epochs 2 --resume "$c/ck" --checkpoint "$c/ck2" \
      --optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 1e-4
  grep -q "resumed from .* at epoch 1, step 32, loss scale 1024 after 7 clean steps, skipped 3$" "$c/res" && ok \
    || bad "amp: resume line: $(grep resumed "$c/res")"
  python3 - "$c/ck2/checkpoint.bin" <<'PY' && ok || bad "amp: the state did not reach the next checkpoint"
import struct, sys
b = open(sys.argv[1], 'rb').read()
assert struct.unpack_from('<I', b, 8)[0] == 2, 'version'
assert struct.unpack_from('<f', b, 20)[0] == 1024.0, 'scale'
assert struct.unpack_from('<qqq', b, 32)[0] == 64, 'step'
assert struct.unpack_from('<qq', b, 80) == (7, 3), 'counters'
PY
}

part_resume() {
  straight_vs_resumed sgd --optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 1e-4
  # the step schedule depends on the epoch and warmup on the step counter, both restored
  # (cosine depends on --epochs too, which a 1-epoch run cannot share with a 2-epoch one)
  straight_vs_resumed adamw --optimizer adamw --lr 0.002 --schedule step --step-size 1 --warmup 10
  bad_ck; printf 'XXXX' | dd of="$work/bad/checkpoint.bin" conv=notrunc status=none; resume_bad; says magic
  bad_ck; printf '\x03' | dd of="$work/bad/checkpoint.bin" bs=1 seek=8 conv=notrunc status=none; resume_bad; says version
  bad_ck; ck_edit "$work/bad/checkpoint.bin" version=0; resume_bad; says "version 0"
  bad_ck; truncate -s -100 "$work/bad/checkpoint.bin"; resume_bad; says truncated
  bad_ck; truncate -s 40 "$work/bad/checkpoint.bin"; resume_bad; says truncated
  bad_ck; : >"$work/bad/checkpoint.bin"; resume_bad; says truncated
  bad_ck; printf 'x' >>"$work/bad/checkpoint.bin"; resume_bad; says trailing
  bad_ck; printf '\x7f' | dd of="$work/bad/checkpoint.bin" bs=1 seek=5000 conv=notrunc status=none; resume_bad; says checksum
  # the size field says 2^62 bytes
  bad_ck; printf '\x00\x00\x00\x00\x00\x00\x00\x40' | dd of="$work/bad/checkpoint.bin" bs=1 seek=72 conv=notrunc status=none
  resume_bad; says "header says"
  # a renamed parameter and a transposed one, checksums fixed so the names/shapes checks are reached
  for edit in name shape; do bad_ck; ck_edit "$work/bad/checkpoint.bin" $edit; resume_bad; says "$edit"; done
  # --amp's loss-scale state (1 epoch = 32 steps): what the update kernel cannot leave
  for edit in scale=-1:"loss scale" scale=nan:"loss scale" scale=inf:"loss scale" scale=0.5:"loss scale" \
              scale=0x1p65:"loss scale" scale=65536,clean=2000:clean scale=65536,clean=-1:clean \
              scale=65536,skipped=33:skipped scale=65536,skipped=-1:skipped \
              scale=65536,clean=20,skipped=20:"do not fit" clean=5:"loss scale 0" skipped=1:"loss scale 0"; do
    bad_ck; ck_edit "$work/bad/checkpoint.bin" ${edit%%:*}; resume_bad; says "${edit#*:}"
  done
  bad_ck; resume_bad --optimizer adamw; says optimizer
  bad_ck; resume_bad --batch 32; says batch
  bad_ck; resume_bad --accum 2 --batch 32; says accum
  bad_ck; expect 1 train "$models/small_cnn.onnx" --data "$fm" --cpu --limit 2048 --batch 64 --resume "$work/bad"
  expect 1 train "$mlp" --data "$fm" --cpu --resume "$work/does-not-exist"
  rm -rf "$work/bad"; mkdir -p "$work/bad/checkpoint.bin"; resume_bad; says "regular"
  rm -rf "$work/bad"; mkdir -p "$work/bad"; mkfifo "$work/bad/checkpoint.bin"; resume_bad; says "regular"
  resume_v1
  amp_state_passes
  # resuming a finished run trains nothing and reports the accuracy
  run "$work/done" --data "$fm" --limit 2048 --batch 64 --epochs 1 --resume "$work/sgd/ck1.orig"
  grep -q "^final test accuracy" "$work/done" && ! grep -q "^epoch .* step" "$work/done" && ok || bad "finished resume"
}

part_data() {
  local d=$work/npy
  rm -rf "$d"; mkdir -p "$d"
  # learnable synthetic sets: class k lights up pixels k*78 .. k*78+77
  python3 - "$d" <<'PY' || bad "python3 could not write the test files"
import numpy as np, sys, os
d = sys.argv[1]
r = np.random.default_rng(0)
def make(n, shape, size):
    y = r.integers(0, 10, n)
    x = r.random((n, size), dtype=np.float32) * 0.2
    for i, k in enumerate(y): x[i, k * (size // 10):(k + 1) * (size // 10)] += 0.8
    return x.reshape((n,) + shape), y
x, y = make(512, (784,), 784); np.save(f'{d}/x.npy', x); np.save(f'{d}/y.npy', y)
np.save(f'{d}/y32.npy', y.astype(np.int32))
xt, yt = make(200, (784,), 784); np.save(f'{d}/xt.npy', xt); np.save(f'{d}/yt.npy', yt)
np.save(f'{d}/x64.npy', x.astype(np.float64))
np.save(f'{d}/x3d.npy', x.reshape(512, 28, 28))
np.save(f'{d}/yshort.npy', y[:100])
np.save(f'{d}/ybad.npy', np.where(y == 3, 10, y))
np.save(f'{d}/yf.npy', y.astype(np.float32))
b = open(f'{d}/x.npy', 'rb').read(); open(f'{d}/xtrunc.npy', 'wb').write(b[:len(b) // 2])
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 784), }"
hdr += ' ' * (118 - len(hdr)) + '\n'
open(f'{d}/xhuge.npy', 'wb').write(b'\x93NUMPY\x01\x00' + len(hdr).to_bytes(2, 'little') + hdr.encode() + b'\0' * 64)
# CIFAR-10 batches: class k is bright in channel k % 3, rows 3k..3k+2
c = f'{d}/cifar'; os.makedirs(c)
def cifar(path, n):
    y = r.integers(0, 10, n).astype(np.uint8)
    x = (r.random((n, 3, 32, 32)) * 60).astype(np.uint8)
    for i, k in enumerate(y): x[i, k % 3, 3 * k:3 * k + 3, :] = 255
    open(path, 'wb').write(np.concatenate([y[:, None], x.reshape(n, 3072)], 1).tobytes())
for i in range(1, 6): cifar(f'{c}/data_batch_{i}.bin', 64)
cifar(f'{c}/test_batch.bin', 100)
# a linear classifier over [N, 3, 32, 32]
import onnx, onnx.helper as oh, onnx.numpy_helper as nh
w = nh.from_array((r.standard_normal((10, 3072)) * 0.01).astype(np.float32), 'fc.weight')
bb = nh.from_array(np.zeros(10, np.float32), 'fc.bias')
g = oh.make_graph([oh.make_node('Flatten', ['image'], ['flat'], axis=1),
                   oh.make_node('Gemm', ['flat', 'fc.weight', 'fc.bias'], ['scores'], transB=1)], 'cifar_linear',
                  [oh.make_tensor_value_info('image', 1, ['batch', 3, 32, 32])],
                  [oh.make_tensor_value_info('scores', 1, ['batch', 10])], [w, bb])
onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid('', 13)]), f'{d}/cifar_linear.onnx')
PY
  run "$work/npy2" --data "npy:$d/x.npy,$d/y.npy" --batch 32 --epochs 2
  grep -q "no test set" "$work/npy2" && ok || bad "npy without a test set"
  run "$work/npy4" --data "npy:$d/x.npy,$d/y32.npy,$d/xt.npy,$d/yt.npy" --batch 32 --epochs 3 --lr 0.1
  acc=$(sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p' "$work/npy4")
  awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 90) }' && ok || bad "npy test accuracy '${acc}' < 90%"
  for bad_set in "x64.npy,$d/y.npy" "x3d.npy,$d/y.npy" "x.npy,$d/yshort.npy" "x.npy,$d/ybad.npy" \
                 "x.npy,$d/yf.npy" "xtrunc.npy,$d/y.npy" "xhuge.npy,$d/y.npy" "missing.npy,$d/y.npy"; do
    expect 1 train "$mlp" --data "npy:$d/$bad_set" --cpu --batch 32
  done
  rm -f "$d/fifo.npy"; mkfifo "$d/fifo.npy"
  expect 1 train "$mlp" --data "npy:$d/fifo.npy,$d/y.npy" --cpu --batch 32
  expect 2 train "$mlp" --data "npy:$d/x.npy" --cpu
  expect 2 train "$mlp" --data "npy:$d/x.npy,$d/y.npy,$d/xt.npy" --cpu
  expect 2 train "$mlp" --data "npy:$d/x.npy,,$d/y.npy" --cpu
  expect 2 train "$mlp" --data "imagenet:$d" --cpu
  # CIFAR-10
  local c=$d/cifar
  if "$gpuc" train "$d/cifar_linear.onnx" --data "cifar10:$c" --cpu --batch 16 --epochs 3 --lr 0.05 \
       >"$work/cifar" 2>&1; then ok; else bad "cifar10 training failed: $(tail -3 "$work/cifar")"; fi
  acc=$(sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p' "$work/cifar")
  awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 90) }' && ok || bad "cifar10 test accuracy '${acc}' < 90%"
  grep -q "320 images" "$work/cifar" && ok || bad "cifar10: want 320 training images"
  expect 1 train "$mlp" --data "cifar10:$c" --cpu     # 3072 values per image, the MLP takes 784
  local b=$work/cifar_bad
  mkc() { rm -rf "$b"; cp -r "$c" "$b"; }
  mkc; rm "$b/data_batch_3.bin"; expect 1 train "$d/cifar_linear.onnx" --data "cifar10:$b" --cpu; says data_batch_3
  mkc; truncate -s -1 "$b/test_batch.bin"; expect 1 train "$d/cifar_linear.onnx" --data "cifar10:$b" --cpu; says records
  mkc; : >"$b/data_batch_1.bin"; expect 1 train "$d/cifar_linear.onnx" --data "cifar10:$b" --cpu
  mkc; printf '\x0a' | dd of="$b/data_batch_2.bin" bs=1 seek=3073 conv=notrunc status=none
  expect 1 train "$d/cifar_linear.onnx" --data "cifar10:$b" --cpu; says label
  mkc; rm "$b/test_batch.bin"; mkfifo "$b/test_batch.bin"; expect 1 train "$d/cifar_linear.onnx" --data "cifar10:$b" --cpu
  # mnist: the same IDX loader; uncompressed files are found too
  local m=$work/mnist_plain
  rm -rf "$m"; mkdir -p "$m"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    gunzip -c "$data/$f.gz" >"$m/$f"
  done
  run "$work/mnist" --data "mnist:$m" --max-steps 3
  grep -q "60000 images" "$work/mnist" && ok || bad "mnist: uncompressed files"
}

part_dropout() {
  local a="--data $fm --limit 12800 --batch 64 --max-steps 200 --log-every 1 --seed 5" m
  for m in mlp mlp_dropout0 mlp_dropout; do
    mlp=$models/$m.onnx
    run "$work/$m" $a --save "$work/$m.saved.onnx"
    losses "$work/$m" >"$work/$m.l"
  done
  [ "$(wc -l <"$work/mlp_dropout.l")" -eq 200 ] && ok || bad "want 200 loss lines"
  cmp -s "$work/mlp.l" "$work/mlp_dropout0.l" && ok || bad "ratio 0 does not train as mlp"
  # the masks move every step's loss (not only the first's)
  paste "$work/mlp.l" "$work/mlp_dropout.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4) n++ }
    END { exit !(n >= 190) }' && ok || bad "ratio 0.3 losses are too close to mlp's"
  acc=$(sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p' "$work/mlp_dropout")
  awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 75) }' && ok || bad "dropout test accuracy '${acc}' < 75%"
  # the saved model keeps Dropout as the source had it (training_mode true)
  python3 - "$work/mlp_dropout.saved.onnx" <<'PY' && ok || bad "--save changed the Dropout node"
import sys, onnx, onnx.numpy_helper as nh
m = onnx.load(sys.argv[1])
d = [n for n in m.graph.node if n.op_type == 'Dropout']
init = {t.name: nh.to_array(t) for t in m.graph.initializer}
assert len(d) == 1 and len(d[0].input) == 3 and bool(init[d[0].input[2]]) and abs(init[d[0].input[1]] - 0.3) < 1e-6
PY
  # 1 epoch + resume == 2 epochs: the counter continues from the checkpoint's step
  mlp=$models/mlp_dropout.onnx
  straight_vs_resumed dropout --optimizer sgd --lr 0.05 --seed 9
  # --lr 0 on one image (batch 1, a step per epoch): only the masks move the
  # loss. Fresh masks: every step's differs; resumed: the same sequence
  local one="--data $fm --limit 1 --batch 1 --lr 0 --log-every 1"
  run "$work/one" $one --epochs 8
  run "$work/half" $one --epochs 4 --checkpoint "$work/one_ck"
  run "$work/rest" $one --epochs 8 --resume "$work/one_ck"
  mlp=$models/mlp_dropout0.onnx; run "$work/one0" $one --epochs 8
  [ "$(losses "$work/one0" | sort -u | wc -l)" -eq 1 ] && ok || bad "ratio 0: the loss moved with lr 0"
  [ "$(losses "$work/one" | sort -u | wc -l)" -eq 8 ] && ok \
    || bad "the mask is not fresh every step: $(losses "$work/one" | tr '\n' ' ')"
  { losses "$work/half"; losses "$work/rest"; } | cmp -s - <(losses "$work/one") && ok \
    || bad "resumed masks differ: $(losses "$work/rest" | tr '\n' ' ')"
  # Dropout nodes the trainer refuses, one line naming the node
  local d=$work/bad_models
  rm -rf "$d"; mkdir -p "$d"
  python3 - "$d" <<'PY' || bad "python3 could not write the test models"
import sys, numpy as np, onnx, onnx.helper as oh, onnx.numpy_helper as nh
d = sys.argv[1]
def model(name, ratio, tm, rsrc='r', tsrc='t', pre=()):
    inits = [nh.from_array((np.arange(7840, dtype=np.float32).reshape(784, 10) % 7 - 3) / 100, 'w'),
             nh.from_array(np.array(ratio, np.float32), 'r'), nh.from_array(np.array(tm), 't'),
             nh.from_array(np.array(False), 'f')]
    nodes = list(pre) + [oh.make_node('MatMul', ['image', 'w'], ['h']),
                         oh.make_node('Dropout', ['h', rsrc, tsrc], ['y'], name='drop7')]
    g = oh.make_graph(nodes, name, [oh.make_tensor_value_info('image', 1, ['batch', 784])],
                      [oh.make_tensor_value_info('y', 1, ['batch', 10])], inits)
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid('', 13)]), f'{d}/{name}.onnx')
model('ratio_one', 1.0, True)
model('ratio_neg', -0.5, True)
model('ratio_vec', [0.1, 0.2], True)
model('ratio_computed', 0.3, True, rsrc='r2', pre=[oh.make_node('Identity', ['r'], ['r2'])])
model('mode_computed', 0.3, True, tsrc='t2', pre=[oh.make_node('Not', ['f'], ['t2'])])
model('good', 0.3, True)
PY
  local b
  for b in ratio_one:"outside \[0, 1)" ratio_neg:"outside \[0, 1)" ratio_vec:"scalar" \
           ratio_computed:"ratio must be a constant" mode_computed:"training_mode must be a constant"; do
    expect 1 train "$d/${b%%:*}.onnx" --data "$fm" --cpu --max-steps 1
    says "${b#*:}"
    says "drop7"
  done
  mlp=$d/good.onnx; run "$work/good" --data "$fm" --limit 640 --max-steps 5
  # the GPU training plans (fp32 and --amp) compile and are counted without a GPU
  for amp in "" --amp; do
    "$gpuc" train "$models/mlp_dropout.onnx" --data "$fm" --arch sm_90 --mem-limit 1G --max-steps 1 $amp \
      >"$work/gpu" 2>&1
    grep -q "^training.* plan: .* kernels" "$work/gpu" && grep -q "^device memory" "$work/gpu" && ok \
      || bad "GPU plan ${amp:-fp32}: $(tail -2 "$work/gpu")"
  done
}

"part_$part"
echo "$part: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
