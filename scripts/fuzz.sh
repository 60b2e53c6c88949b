#!/usr/bin/env bash
# Coverage-guided fuzzing of every loader of untrusted input with libFuzzer
# (tests/fuzz/fuzz_*.c, docs/FUZZING.md): builds build-fuzz with clang
# (-DGPUC_FUZZ=ON: address + undefined + coverage), then runs each target
# for SECONDS seconds, one at a time, at nice 19, on a scratch copy of its
# committed corpus (tests/fuzz/corpus/<target> + tests/hostile/fuzz/<target>).
#   usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (default 60 s, all targets)
# FUZZ_OUT=DIR keeps the logs, the grown corpora and any crash files there
# (default: a temp folder); FUZZ_JOBS is not used: one process, the machine
# is shared. A crash, leak, timeout or sanitizer report fails the run (exit 1)
# and names the file that reproduces it: replay it with
#   build/tests/fuzz_replay_<target> FILE
# and add it to tests/hostile/fuzz/<target>/ once fixed.
# Prints per target: executions, wall and CPU seconds (the machine may be
# shared: CPU time is what the target got), cov and ft (libFuzzer's edge
# and feature counts) and the corpus size.
set -u
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=${*:-onnx plan checkpoint tensor data tunecache}
out=${FUZZ_OUT:-$(mktemp -d /tmp/gpuc-fuzz.XXXXXX)}
mkdir -p "$out"
if ! command -v clang >/dev/null; then echo "fuzz: clang not found"; exit 2; fi
CC=clang cmake -S . -B build-fuzz -G Ninja -DGPUC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$out/cmake.log" 2>&1 ||
  { cat "$out/cmake.log"; echo "fuzz: cmake failed"; exit 2; }
if ! nice -n 19 ninja -C build-fuzz $(for t in $targets; do printf 'tests/fuzz_%s ' "$t"; done) >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"; echo "fuzz: build failed"; exit 2
fi
failed=0
for t in $targets; do
  corpus=$out/corpus_$t
  mkdir -p "$corpus" "$out/crash_$t"
  cp tests/fuzz/corpus/$t/* "$corpus"/ 2>/dev/null
  [ -d tests/hostile/fuzz/$t ] && cp tests/hostile/fuzz/$t/* "$corpus"/ 2>/dev/null
  dict=""
  [ "$t" = onnx ] && dict="-dict=tests/fuzz/onnx.dict"
  maxlen=65536
  [ "$t" = plan ] && maxlen=131072
  start=$(date +%s)
  TIMEFORMAT='%U %S'
  { time ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    nice -n 19 build-fuzz/tests/fuzz_$t "$corpus" $dict -max_total_time="$secs" -max_len=$maxlen \
    -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$out/crash_$t/" \
    >"$out/$t.log" 2>&1 ; } 2>"$out/$t.cpu"
  rc=$?
  took=$(( $(date +%s) - start ))
  cpu=$(awk '{printf "%.0f", $1 + $2}' "$out/$t.cpu" 2>/dev/null)
  execs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t.log" | grep -o '[0-9]*$')
  last=$(grep -E '^#[0-9]+' "$out/$t.log" | tail -1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*')
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*')
  files=$(ls "$corpus" | wc -l)
  crashes=$(ls "$out/crash_$t" | wc -l)
  printf '%-10s %8s execs %5ss wall %5ss cpu cov %6s ft %6s corpus %5s files  %s\n' "$t" "${execs:-?}" "$took" "${cpu:-?}" "${cov:-?}" \
    "${ft:-?}" "$files" "$([ $rc -eq 0 ] && [ "$crashes" -eq 0 ] && echo ok || echo "FAIL (exit $rc, $crashes crash files in $out/crash_$t)")"
  if [ $rc -ne 0 ] || [ "$crashes" -ne 0 ]; then
    failed=1
    grep -m3 -E 'ERROR|SUMMARY|runtime error|gpuc fuzz' "$out/$t.log" | sed 's/^/    /'
  fi
done
echo "logs and corpora: $out"
[ $failed -eq 0 ] && echo PASS || echo FAIL
exit $failed
