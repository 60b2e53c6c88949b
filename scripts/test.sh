#!/usr/bin/env bash
# Build with warnings as errors and run every test; then build with address
# and undefined-behaviour sanitizers and run the tests again there; then
# fuzz every loader for 60 s each on the committed corpora (scripts/fuzz.sh:
# a crash fails CI; GPUC_SKIP_FUZZ=1 leaves it out, GPUC_FUZZ_SECONDS
# changes the time).
set -euo pipefail
cd "$(dirname "$0")/.."
# the tests' python3 is Debian's, which has the numpy/onnx that deps.sh installs
# (a pyenv or venv python3 earlier on PATH may not)
export PATH=/usr/bin:$PATH
scripts/deps.sh
# CI must build the cuSPARSELt path (2:4 GEMMs): deps.sh fetched its headers
cmake -S . -B build -G Ninja -DGPUC_WERROR=ON -DGPUC_REQUIRE_CUSPARSELT=ON >/dev/null
ninja -C build
ctest --test-dir build --output-on-failure
if [ "${GPUC_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S . -B build-asan -G Ninja -DGPUC_WERROR=ON -DGPUC_SANITIZE=ON -DGPUC_SWEEP_ARCHS=sm_90 \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C build-asan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 ctest --test-dir build-asan --output-on-failure
fi
if [ "${GPUC_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/fuzz.sh "${GPUC_FUZZ_SECONDS:-60}"
fi
