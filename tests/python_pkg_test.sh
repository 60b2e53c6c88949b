#!/usr/bin/env bash
# The Python package as a user gets it: a virtualenv, `pip install` of the
# checkout (scikit-build-core builds libgpuc.so with the project's CMake),
# then tests/python/test_api.py and test_buckets.py against the installed package and the
# README's Python quick start, run as written from the checkout's root.
# The venv and the wheel's CMake build folder stay in WORK, so a second run
# recompiles only what changed; the first build compiles the library once
# (the CLI, tests and models are not part of the wheel: build.targets).
# usage: python_pkg_test.sh SOURCE_DIR GPUC_CLI MODELS_DIR WORK_DIR
set -euo pipefail
src=$(cd "$1" && pwd) cli=$2 models=$3 work=$4
# Debian's python3: python3-venv, and numpy/onnx seen through --system-site-packages
py=${GPUC_VENV_PYTHON:-/usr/bin/python3}
mkdir -p "$work"
work=$(cd "$work" && pwd)
venv=$work/venv
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv --system-site-packages "$venv" || { echo "FAIL: $py -m venv (apt-get install python3-venv)"; exit 1; }
fi
unset GPUC_LIB PYTHONPATH
pip=("$venv/bin/pip" --disable-pip-version-check)
# The backend lives in the venv and the build runs without pip's isolated
# environment: an isolated one moves every run, which makes scikit-build-core
# configure afresh and recompile everything; here only changes recompile.
if ! "$venv/bin/python" -c "import scikit_build_core" 2>/dev/null; then
  "${pip[@]}" install --quiet --no-warn-script-location "scikit-build-core>=0.10" > "$work/pip.log" 2>&1 ||
    { cat "$work/pip.log"; echo "FAIL: pip install scikit-build-core (PyPI)"; exit 1; }
fi
t0=$(date +%s)
if ! "${pip[@]}" install --no-build-isolation --config-settings=build-dir="$work/wheel_build" \
       "$src" > "$work/pip.log" 2>&1; then
  tail -40 "$work/pip.log"; echo "FAIL: pip install $src"; echo "0 passed, 1 failed"; exit 1
fi
echo "pip install: $(( $(date +%s) - t0 )) s"
cd "$work"
rc=0
"$venv/bin/python" "$src/tests/python/test_buckets.py" "$cli" "$models" "$src/tests/models/zoo" "$src" "$work/buckets" || rc=1
"$venv/bin/python" "$src/tests/python/test_api.py" "$cli" "$models" "$src" "$work/api" || rc=1

# The README's quick start (its first ```python block, as tests/readme_python.py
# extracts it), from the checkout's root as a reader runs it; without a GPU
# it takes its CPU branch. tests/gpu/python_quickstart.sh runs every block on a GPU.
"$venv/bin/python" "$src/tests/readme_python.py" "$src/README.md" 0 > "$work/quickstart.py"
if (cd "$src" && "$venv/bin/python" "$work/quickstart.py") > "$work/quickstart.log" 2>&1; then
  cat "$work/quickstart.log"; echo "PASS readme_quickstart"
else
  cat "$work/quickstart.log"; echo "FAIL readme_quickstart"; rc=1
fi
exit $rc
