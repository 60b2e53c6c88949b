#!/usr/bin/env bash
# The training graphs on the GPU against the CPU reference: loss, every
# gradient and the BatchNormalization running statistics, two batches each
# (tests/tools/train_gpu_check.c states the tolerances), fp32 and fp16:
#   mlp (batch 64), small_cnn (batch 32), small_bn_cnn (batch 32),
#   mlp_dropout (batch 64: training-mode Dropout, masks compared exactly).
# Then gpuc train --amp on small_cnn, SGD and AdamW: 2 epochs straight vs
# 1 epoch + --checkpoint, then --resume for the second; every progress line
# (loss, loss scale, skipped steps), the final loss-scale line and the final
# checkpoints must be equal, bitwise.
# Run on the GPU machine from the repo root, with the carried layout
#   build-gpu/train_gpu_check   build-gpu/models/{mlp,small_cnn,small_bn_cnn,mlp_dropout}.onnx
#   build-gpu/gpuc              build-gpu/fmnist/ (the four Fashion-MNIST IDX .gz files)
# Output: $OUT/train_check.txt (default OUT=/tmp/gpuc_out). Exits nonzero
# when any check fails or cannot run.
# usage: tests/gpu/train_check.sh
set -u
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
LOG=$OUT/train_check.txt
: > "$LOG"
PY=${PYTHON:-python3}
# cuDNN 9 from PyTorch's wheel when the system has none (as gpu_round.sh)
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
CHECK=$PWD/build-gpu/train_gpu_check
MODELS=$PWD/build-gpu/models
if [ ! -x "$CHECK" ]; then echo "no $CHECK" | tee -a "$LOG"; exit 2; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
fail=0
for spec in mlp:64 small_cnn:32 small_bn_cnn:32 mlp_dropout:64; do
  m=${spec%%:*} b=${spec##*:}
  for prec in "" --fp16; do
    echo "== $m batch $b ${prec:-fp32}" | tee -a "$LOG"
    "$CHECK" "$MODELS/$m.onnx" "$b" $prec >> "$LOG" 2>&1
    rc=$?
    tail -1 "$LOG"
    if [ $rc -ne 0 ]; then echo "   exit status $rc" | tee -a "$LOG"; fail=1; fi
  done
done

# --amp resume. 2500 steps of 16 images an epoch: the loss scale doubles
# when its run of clean steps reaches 2000, so epoch 1 ends with a run of
# 1..1999 (0 only if its last step doubled or overflowed; 500 if no step
# overflows) and in epoch 2 the scale doubles (unless a step overflows
# first) at step 2000 minus that run, within the epoch. A resume that
# restarted the run at 0 would double at step 2000 instead and its progress
# lines would differ; the skipped count goes on from the checkpoint's.
GPUC=$PWD/build-gpu/gpuc
FM=$PWD/build-gpu/fmnist
W=/tmp/gpuc_train_check
# progress and accuracy lines without the timings
steady() { grep '^epoch' "$1" | sed 's/ images\/s [0-9]*//; s/, [0-9.]* s training.*//'; }
# i64 at byte OFFSET of FILE
i64_at() { od -An -t d8 -j "$2" -N 8 "$1" | tr -d ' '; }
# first_change STEADY: "double at S" or "halve at S", the first epoch-2
# step whose loss scale differs from the last epoch-1 step's
first_change() {
  awk '/ step / { split($4, s, "/"); sc = $(NF - (($(NF-1) == "skipped") ? 2 : 0))
         if ($2 == 1) last = sc
         else if (sc != last) { print (sc > last ? "double" : "halve") " at " s[1]; exit } }' "$1"
}
amp_resume() { # amp_resume NAME ARGS...: one straight vs resumed comparison
  local n=$1; shift
  local c=$W/$n
  rm -rf "$c"; mkdir -p "$c"
  local a=(train "$MODELS/small_cnn.onnx" --data "fashion-mnist:$FM" --amp --limit 40000 --batch 16
           --log-every 1 --seed 2 "$@")
  echo "== small_cnn --amp $n: 2 epochs vs 1 + --resume 1" | tee -a "$LOG"
  if ! "$GPUC" "${a[@]}" --epochs 2 --checkpoint "$c/ck2" > "$c/two.txt" 2>&1 ||
     ! "$GPUC" "${a[@]}" --epochs 1 --checkpoint "$c/ck1" > "$c/one.txt" 2>&1 ||
     ! cp "$c/ck1/checkpoint.bin" "$c/ck1.bin" ||
     ! "$GPUC" "${a[@]}" --epochs 2 --resume "$c/ck1" --checkpoint "$c/ck1" > "$c/res.txt" 2>&1; then
    echo "   a run failed:" | tee -a "$LOG"; tail -3 "$c"/*.txt | tee -a "$LOG"; fail=1; return
  fi
  grep -h "^resumed\|^final loss scale" "$c/res.txt" | tee -a "$LOG"
  local clean; clean=$(i64_at "$c/ck1.bin" 80)
  echo "   epoch-1 checkpoint: $clean clean steps in a row, $(i64_at "$c/ck1.bin" 88) skipped" | tee -a "$LOG"
  steady "$c/two.txt" > "$c/two.s"
  { steady "$c/one.txt"; steady "$c/res.txt"; } > "$c/res.s"
  local why=""
  [ "$(grep -c ' step ' "$c/two.s")" -eq 5000 ] || why="$why; want 5000 progress lines"
  cmp -s "$c/two.s" "$c/res.s" || why="$why; progress lines differ: $(diff "$c/two.s" "$c/res.s" | head -3)"
  [ "$(grep '^final loss scale' "$c/two.txt")" = "$(grep '^final loss scale' "$c/res.txt")" ] \
    || why="$why; final loss-scale lines differ"
  cmp -s "$c/ck2/checkpoint.bin" "$c/ck1/checkpoint.bin" || why="$why; final checkpoints differ"
  # the straight run's first scale change in epoch 2: a doubling must come
  # at step 2000 - clean; a halving first (an overflow) hides the run
  local first; first=$(first_change "$c/two.s")
  echo "   straight run, epoch 2: first loss-scale change ${first:-none}" | tee -a "$LOG"
  case $first in
    "double at "*) [ "${first#double at }" -eq $((2000 - ${clean:-0})) ] \
                     || why="$why; doubled at epoch-2 step ${first#double at }, not 2000 - $clean";;
    *) why="$why; cannot tell whether the clean run was restored (try another --seed)";;
  esac
  [ "${clean:-0}" -gt 0 ] || why="$why; cannot tell: the epoch-1 checkpoint's clean run is 0"
  if [ -z "$why" ]; then echo "   equal: progress lines, final loss scale, checkpoints" | tee -a "$LOG"
  else echo "   FAIL: ${why#; }" | tee -a "$LOG"; fail=1; fi
}
if [ -x "$GPUC" ] && [ -f "$FM/train-images-idx3-ubyte.gz" ]; then
  amp_resume sgd --lr 0.01
  amp_resume adamw --optimizer adamw
else
  echo "no $GPUC or $FM: the --amp resume cases cannot run" | tee -a "$LOG"; fail=1
fi

if [ $fail -eq 0 ]; then echo "train_check: all passed" | tee -a "$LOG"
else echo "train_check: FAILURES (see $LOG)" | tee -a "$LOG"; fi
exit $fail
