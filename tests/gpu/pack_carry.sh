#!/usr/bin/env bash
# Packs what tests/gpu/session_round.sh needs on the GPU machine into
# build-carry/ (ignored by git; carried with the device tool's `carry`):
# the Release build's gpuc, shared libraries, small bundled models, the GPU
# check programs and deploy_example; the offline wheels for `pip install .`
# (scripts/python_wheels.sh, fetched once); and, with FUZZ=1, fuzz.tgz: the
# libFuzzer binaries of build-fuzz (debug info stripped), their committed
# corpora (+ tests/hostile/fuzz) and the ONNX dictionary.
#   ninja -C build-gpu && FUZZ=1 tests/gpu/pack_carry.sh [BUILD_DIR]   (default build-gpu)
# CARRY_DIR=DIR packs into DIR instead of build-carry (a session's own carry,
# e.g. CARRY_DIR=build-carry-ws tests/gpu/pack_carry.sh build-ws for
# tests/gpu/int8_ws_check.sh); NO_WHEELS=1 leaves the wheels out (checks
# that do not install the Python package).
# Keep the tree + build-carry within the device tool's 64 MiB.
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build-gpu}
C=${CARRY_DIR:-build-carry}
mkdir -p "$C/tests" "$C/models"
cp -a "$B/gpuc" "$B"/libgpuc*.so* "$C/"
[ -x "$B/deploy_example" ] && cp -a "$B/deploy_example" "$C/"
for t in session_check capi_check capi_buckets_check train_gpu_check; do
  [ -x "$B/tests/$t" ] && cp -a "$B/tests/$t" "$C/tests/"
done
# the small bundled models only (resnet18/50 are 45/98 MB: scripts export them there)
find "$B/models" -name '*.onnx' -size -4M -exec cp -a {} "$C/models/" \;
[ "${NO_WHEELS:-0}" = 1 ] || [ -d "$C/wheels" ] || scripts/python_wheels.sh "$C/wheels" >/dev/null
# what `pip install .` needs that the GPU machine lacks and cannot download
# (tests/gpu/python_quickstart.sh hands them to CMake): protoc-c (it links
# libprotoc/libprotobuf .so.32, which that machine has), protobuf-c's header
# and static library, and the onnx.proto the build here used
mkdir -p "$C/deps/bin" "$C/deps/lib" "$C/deps/include/protobuf-c" "$C/deps/onnx"
cp "$(command -v protoc-c)" "$C/deps/bin/"
cp "$(grep -m1 '^PROTOBUF_C_STATIC:' "$B/CMakeCache.txt" | cut -d= -f2)" "$C/deps/lib/"
cp "$(grep -m1 '^PROTOBUF_C_INCLUDE:' "$B/CMakeCache.txt" | cut -d= -f2)/protobuf-c/protobuf-c.h" "$C/deps/include/protobuf-c/"
cp "$(grep -m1 '^ONNX_PROTO:' "$B/CMakeCache.txt" | cut -d= -f2)" "$C/deps/onnx/"
# the conformance folders of the ops OPS_PATTERN names (tests/gpu/ops_check.sh)
if [ -n "${OPS_PATTERN:-}" ]; then
  mkdir -p "$C/testdata/node"
  for d in /usr/share/libonnx-testdata/data/node/*/; do
    n=$(basename "$d"); grep -qiE "($OPS_PATTERN)" <<<"$n" && cp -a "$d" "$C/testdata/node/"
  done
fi
if [ "${FUZZ:-0}" = 1 ]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/corpus" "$tmp/dict"
  for f in build-fuzz/tests/fuzz_*; do
    case $f in *replay*) continue ;; esac
    [ -x "$f" ] || continue
    t=${f##*/fuzz_}
    strip -g -o "$tmp/bin/fuzz_$t" "$f"
    mkdir -p "$tmp/corpus/$t"
    cp tests/fuzz/corpus/$t/* "$tmp/corpus/$t/" 2>/dev/null || true
    cp tests/hostile/fuzz/$t/* "$tmp/corpus/$t/" 2>/dev/null || true
  done
  cp tests/fuzz/onnx.dict "$tmp/dict/onnx.dict"
  tar -czf "$C/fuzz.tgz" -C "$tmp" .
  rm -rf "$tmp"
fi
du -sh "$C"
