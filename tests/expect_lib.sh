# Shared by the shell tests that drive gpuc (sourced; needs $gpuc and $work):
# pass/fail counters and `expect RC ARGS...`, which runs gpuc and checks the
# exit status RC, one line on stderr for RC 1, and no sanitizer report.
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

expect() {
  local want=$1; shift
  "$gpuc" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  local lines; lines=$(grep -c . "$work/err" | head -1)
  if [ "$rc" -ne "$want" ] || grep -q "Sanitizer\|runtime error" "$work/err"; then
    bad "gpuc $* -> exit $rc (want $want): $(head -c 400 "$work/err")"
  elif [ "$want" -eq 1 ] && [ "$lines" -ne 1 ]; then
    bad "gpuc $* -> $lines lines on stderr, want 1: $(head -c 400 "$work/err")"
  else ok; fi
}
