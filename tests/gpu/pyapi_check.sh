#!/usr/bin/env bash
# The gpuc Python package on the GPU machine (tests/gpu/pyapi_check.py says
# what each check does): numpy and CUDA torch tensors through Session.run,
# no copy through the host, torch's stream, gpuc.torch.compile of
# torchvision ResNet-18 and a HF BERT against PyTorch, and Session.run's
# per-call cost against `gpuc bench` for ResNet-50 b1 (<= 10 us); then
# tests/gpu/pyapi_buckets_check.py: bucket plans at shapes between buckets.
# Uses the checkout's python/ and the carried build (no pip install: no
# network there): PYTHONPATH=python GPUC_LIB=build/libgpuc.so.
# Run from the repository root (about 2-3 minutes on an H200):
#   tests/gpu/pyapi_check.sh [BUILD_DIR]        (logs: $OUT/pyapi_check/)
# PYTHON picks the interpreter (torch, torchvision, transformers);
# PYAPI_ONLY=check1,check2 runs some checks only.
set -u
BUILD=${1:-build}
WORK=${OUT:+$OUT/pyapi_check}
WORK=${WORK:-$(mktemp -d /tmp/pyapi_check.XXXXXX)}
PY=${PYTHON:-python3}
mkdir -p "$WORK"
for f in "$BUILD/gpuc" "$BUILD/libgpuc.so" "$BUILD/models/resnet50.onnx"; do
  [ -e "$f" ] || { echo "pyapi_check: $f not found (build first)"; echo "FAIL"; exit 1; }
done
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export GPUC_LIB=$PWD/$BUILD/libgpuc.so
"$PY" tests/gpu/pyapi_check.py "$BUILD/gpuc" "$BUILD/models" "$WORK" 2>&1 | tee "$WORK/pyapi_check.log"
rc=${PIPESTATUS[0]}
# bucket plans (shape ranges): tests/gpu/pyapi_buckets_check.py (BUCKETS_BERT=0 skips BERT-base)
"$PY" tests/gpu/pyapi_buckets_check.py "$BUILD/gpuc" "$BUILD/models" "$WORK" 2>&1 | tee "$WORK/pyapi_buckets_check.log"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "log: $WORK/pyapi_check.log, numbers: $WORK/pyapi_check.json"
exit "$rc"
