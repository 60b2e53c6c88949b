#!/usr/bin/env bash
# Issue 11's small ops on the GPU machine, from the repo root:
#  1. `gpuc test-onnx DIR --gpu` (fp32 and --fp16) over their libonnx-testdata
#     folders (BitShift, ReverseSequence, Det, MaxUnpool; carried in
#     CARRY/node) and the generated ones of tests/onnx_node (Mish, Bitwise*,
#     Col2Im, CenterCropPad, signed BitShift, bf16 ReverseSequence);
#  2. tests/models/smallops_* (both torch exporters) GPU vs CPU reference in
#     fp32 and fp16 (tests/gpu/dynops_check.py);
#  3. runtime data errors: a plan with sequence_lens / I as inputs run with
#     good values (against the CPU reference) and with a bad one (the
#     reference's message from the device error record); Det of 64 random
#     7x7 matrices GPU vs CPU.
# CARRY holds gpuc, node/ and fault/ (models and inputs written by the
# session that carried them). usage: tests/gpu/smallops_check.sh CARRY
set -u
. tests/gpu/gpu_env.sh
C=$1; G=$C/gpuc; F=$C/fault; W=/tmp/smallops_gpu
mkdir -p "$W"
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
for d in "$C"/node/* tests/onnx_node/node/test_{mish,bitwise,col2im,center_crop_pad,bitshift,reversesequence}*; do
  for f in "" --fp16; do
    r=$("$G" test-onnx "$d" --gpu $f 2>&1 | tail -1)
    case $r in PASS*) ok "$(basename "$d") gpu $f";; *) bad "$(basename "$d") gpu $f: $r";; esac
  done
done
$PY tests/gpu/dynops_check.py "$G" tests/models "$W/models" 11 smallops_ 2>&1 | tee "$W/models.txt"
pass=$((pass + $(grep -c '^PASS' "$W/models.txt"))); fail=$((fail + $(grep -c '^FAIL' "$W/models.txt")))
# compare NAME GPU_DIR CPU_DIR TOL: rel L2 of every output
compare() {
  $PY -c 'import sys, glob, os, numpy as np
w = 0.0
for r in glob.glob(os.path.join(sys.argv[2], "*.npy")):
    a = np.load(os.path.join(sys.argv[1], os.path.basename(r))).astype(np.float64); b = np.load(r).astype(np.float64)
    w = max(w, np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
print("%.3g" % w); sys.exit(0 if w <= float(sys.argv[3]) else 1)' "$2" "$3" "$4"
}
# runcase TAG MODEL TOL GOOD_INPUTS... -- BAD_INPUTS... (BAD empty: no bad run) EXPECT
runcase() {
  local tag=$1 model=$2 tol=$3 expect=$4; shift 4
  local good=() badin=() seen=0
  for a in "$@"; do if [ "$a" = -- ]; then seen=1; elif [ $seen = 0 ]; then good+=("$a"); else badin+=("$a"); fi; done
  if ! "$G" "$model" -O2 -o "$W/$tag.gpuc" >"$W/$tag.log" 2>&1; then bad "$tag: compile: $(tail -1 "$W/$tag.log")"; return; fi
  "$G" run "$model" --cpu "${good[@]}" --out "$W/$tag.cpu" >>"$W/$tag.log" 2>&1
  if "$G" run "$W/$tag.gpuc" "${good[@]}" --out "$W/$tag.gpu" >>"$W/$tag.log" 2>&1 && r=$(compare x "$W/$tag.gpu" "$W/$tag.cpu" "$tol"); then
    ok "$tag: GPU vs CPU rel L2 $r"
  else bad "$tag: GPU run or compare: $(tail -1 "$W/$tag.log") ${r:-}"; fi
  [ ${#badin[@]} -eq 0 ] && return
  msg=$("$G" run "$W/$tag.gpuc" "${badin[@]}" --out "$W/$tag.bad" 2>&1)
  if [ $? -ne 0 ] && echo "$msg" | grep -qF "$expect"; then ok "$tag: bad input: $(echo "$msg" | tail -1)"
  else bad "$tag: bad input gave: $(echo "$msg" | tail -1)"; fi
}
runcase revseq "$F/revseq.onnx" 0 "sequence length 5 (element 1 of sequence_lens) is outside [0, 4]" \
  --input "x=$F/x_revseq.npy" --input "len=$F/len_ok.npy" -- --input "x=$F/x_revseq.npy" --input "len=$F/len_bad.npy"
runcase unpool "$F/unpool.onnx" 0 "index 99 (element 3 of I) is outside [0, 16)" \
  --input "x=$F/x_unpool.npy" --input "i=$F/i_ok.npy" -- --input "x=$F/x_unpool.npy" --input "i=$F/i_bad.npy"
runcase det "$F/det.onnx" 1e-6 "" --input "x=$F/x_det.npy" --
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
