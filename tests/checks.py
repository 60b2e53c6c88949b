"""The pass/fail count the python ctest scripts share.

check(ok, what) counts one check and prints "FAIL what" when it failed;
finish() prints the closing "N passed, N failed" line and exits 1 when any
check failed."""
import sys

passes = fails = 0


def check(ok, what):
    global passes, fails
    if ok:
        passes += 1
    else:
        fails += 1
        print("FAIL", what)


def finish():
    print("%d passed, %d failed" % (passes, fails))
    sys.exit(1 if fails else 0)
