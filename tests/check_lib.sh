# Shared by cli_test.sh and buckets_cli_test.sh (sourced; needs $WORK):
# pass/fail counters, `check NAME RC CMD...` (runs CMD, output in $WORK/out
# and $WORK/err, checks the exit status) and `expect_grep NAME FILE PATTERN`.
pass=0; fail=0
check() { # check NAME EXPECTED_RC CMD... ; output in $WORK/out, $WORK/err
  local name=$1 want=$2; shift 2
  "$@" >"$WORK/out" 2>"$WORK/err"; local rc=$?
  if [ "$rc" = "$want" ]; then pass=$((pass+1)); echo "ok   $name";
  else fail=$((fail+1)); echo "FAIL $name: exit $rc, expected $want"; sed 's/^/     /' "$WORK/err" | head -5; fi
}
expect_grep() { # expect_grep NAME FILE PATTERN
  if grep -q -- "$3" "$2"; then pass=$((pass+1)); echo "ok   $1";
  else fail=$((fail+1)); echo "FAIL $1: '$3' not in $2"; head -8 "$2" | sed 's/^/     /'; fi
}
