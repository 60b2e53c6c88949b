#!/usr/bin/env bash
# Hostile-model corpus: generate the models, run gpuc on each, check it fails
# cleanly.
#   usage: run_hostile.sh GPUC GEN_HOSTILE [GLOB]
# GLOB (default '*') picks cases by file name, e.g. 'ext_*'.
# Set HOSTILE_KEEP=1 to keep the generated folder.
#
# For every case, `gpuc inspect M` and `gpuc run M --cpu` are run under
# `timeout 10`. A hostile model ("bad") passes when both: exit exactly 1,
# print exactly one stderr line, starting "gpuc: " and naming the model file
# once (and containing the case's expected fragment, where it has one), finish in
# time, and leave no sanitizer report. A "runbad" model must fail that way
# under `run`; `inspect` may accept it. Valid controls ("ok") must exit 0.
# A "clean" model may be accepted or refused, as long as it is done cleanly.
# A hostile case rejected only because an op is still a stub ("no shape
# inference yet", "no reference kernel yet") counts as a failure: it was not
# rejected for the reason the case is about.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 GPUC GEN_HOSTILE [GLOB]" >&2
  exit 2
fi
gpuc=$1
gen=$2
glob=${3:-*}
limit=10

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuc-hostile.XXXXXX") || exit 2
if [ "${HOSTILE_KEEP:-0}" = 1 ]; then
  echo "keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi
if ! "$gen" "$work" >/dev/null; then
  echo "FAIL gen_hostile did not run"
  echo "0 passed, 1 failed"
  exit 1
fi
models=$work/models
errf=$work/stderr.txt

sanitizer_re='AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|ThreadSanitizer|runtime error'

# check MODE FILE KIND EXPECT: prints nothing if fine, else one problem
check() {
  local mode=$1 file=$2 kind=$3 expect=$4 rc err lines first
  if [ "$mode" = inspect ]; then
    timeout -k 5 "$limit" "$gpuc" inspect "$models/$file" >/dev/null 2>"$errf"
  else
    timeout -k 5 "$limit" "$gpuc" run "$models/$file" --cpu >/dev/null 2>"$errf"
  fi
  rc=$?
  err=$(cat "$errf")
  first=$(head -n 1 "$errf" | cut -c1-300)
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "$mode: did not finish within ${limit}s"
    return
  fi
  if grep -qE "$sanitizer_re" "$errf"; then
    echo "$mode: sanitizer report: $(grep -m 1 -E "$sanitizer_re" "$errf" | cut -c1-300)"
    return
  fi
  if [ "$kind" = ok ]; then
    [ $rc -eq 0 ] || echo "$mode: exit $rc, want 0: $first"
    return
  fi
  if [ $rc -eq 0 ] && { [ "$kind" = clean ] || { [ "$kind" = runbad ] && [ "$mode" = inspect ]; }; }; then
    return
  fi
  if [ $rc -ne 1 ]; then
    echo "$mode: exit $rc, want 1: $first"
    return
  fi
  lines=$(grep -c '' "$errf")
  if [ "$lines" -ne 1 ]; then
    echo "$mode: $lines lines on stderr, want 1: $(tr '\n' '|' <"$errf" | cut -c1-300)"
    return
  fi
  case $err in
    "gpuc: "*) ;;
    *) echo "$mode: message does not start with 'gpuc: ': $first"; return ;;
  esac
  if ! grep -qF -- "$file" "$errf"; then
    echo "$mode: message does not name $file: $first"
    return
  fi
  if [ "$(grep -oF -- "$file" "$errf" | wc -l)" -gt 1 ]; then
    echo "$mode: message names $file more than once: $first"
    return
  fi
  if grep -qE 'no shape inference yet|no reference kernel yet' "$errf"; then
    echo "$mode: op not implemented yet: $first"
    return
  fi
  if [ -n "$expect" ] && ! grep -qiF -- "$expect" "$errf"; then
    echo "$mode: message lacks '$expect': $first"
    return
  fi
}

pass=0
fail=0
while IFS=$'\t' read -r file kind expect; do
  # shellcheck disable=SC2254
  case $file in $glob) ;; *) continue ;; esac
  problems=""
  for mode in inspect run; do
    p=$(check "$mode" "$file" "$kind" "$expect")
    [ -n "$p" ] && problems="${problems:+$problems; }$p"
  done
  name=${file%.onnx}
  if [ -z "$problems" ]; then
    pass=$((pass + 1))
    echo "PASS $name ($kind)"
  else
    fail=$((fail + 1))
    echo "FAIL $name ($kind): $problems"
  fi
done <"$models/cases.txt"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
