#!/usr/bin/env bash
# The README's Python quick start on the GPU machine, which has no network:
# a fresh virtualenv, `pip install --no-index --find-links WHEELS .` of the
# checkout (scikit-build-core and its dependencies from WHEELS, fetched
# beforehand on a machine with network by scripts/python_wheels.sh WHEELS;
# the library compiled by the machine's
# cmake/ninja/gcc against /usr/local/cuda), then each ```python block of the
# README's "## Python quick start" as written, from the repository's root
# (tests/readme_python.py extracts them: the README is the only copy).
#   tests/gpu/python_quickstart.sh [WHEELS_DIR]     (default build-carry/wheels)
# PYTHON: the interpreter to build the venv from (default the PyTorch venv's,
# /opt/torch/.venv/bin/python, else python3). The new venv sees that
# interpreter's packages (torch, torchvision, numpy, onnx) after its own:
# --system-site-packages, plus a .pth naming the interpreter's own
# site-packages when it is itself a venv. Logs under $OUT/python_quickstart/.
# Prints PASS/FAIL lines; exit 1 on any FAIL.
set -u
wheels=$(cd "${1:-build-carry/wheels}" 2>/dev/null && pwd) || { echo "FAIL python_quickstart: no wheels folder ${1:-build-carry/wheels}"; exit 1; }
py=${PYTHON:-}
[ -z "$py" ] && [ -x /opt/torch/.venv/bin/python ] && py=/opt/torch/.venv/bin/python
py=${py:-python3}
work=${OUT:-/tmp}/python_quickstart
rm -rf "$work" && mkdir -p "$work" || exit 1
src=$PWD
[ -f "$src/pyproject.toml" ] && [ -f "$src/README.md" ] || { echo "FAIL python_quickstart: run it from the repository root"; exit 1; }
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
echo "python: $py ($("$py" --version 2>&1)); wheels: $(ls "$wheels" | tr '\n' ' ')"
echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo none); ninja: $(ninja --version 2>/dev/null || echo none)"
venv=$work/venv
if "$py" -m venv --system-site-packages "$venv" >"$work/venv.log" 2>&1; then pass "venv"
else cat "$work/venv.log"; fail "venv ($py -m venv)"; echo "$fails failed"; exit 1; fi
# a venv's packages are not its base interpreter's "system" ones: name them
"$py" -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() if sys.prefix != sys.base_prefix))' \
  > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_base_interpreter.pth"
unset GPUC_LIB PYTHONPATH
t0=$(date +%s)
# the wheel's CMake build under $work, not pyproject's build/pywheel: a
# build folder carried from another machine holds another checkout's cache
# The GPU machine cannot run scripts/deps.sh (no network) and lacks some of
# what it installs: protoc-c, protobuf-c's header and static library,
# libonnx-dev's onnx.proto. tests/gpu/pack_carry.sh copies those into
# DEPS (default: deps/ beside WHEELS) and they are handed to CMake here; so
# is cuDNN's header from PyTorch's nvidia-cudnn wheel when the CUDA toolkit
# has none. On a machine where deps.sh ran, none of this applies.
defs=()
deps=${DEPS:-$(dirname "$wheels")/deps}
if ! command -v protoc-c >/dev/null && [ -x "$deps/bin/protoc-c" ]; then
  echo "offline deps from $deps"
  defs+=(--config-settings=cmake.define.PROTOC_C="$deps/bin/protoc-c"
         --config-settings=cmake.define.ONNX_PROTO="$deps/onnx/onnx.proto"
         --config-settings=cmake.define.PROTOBUF_C_STATIC="$deps/lib/libprotobuf-c.a"
         --config-settings=cmake.define.PROTOBUF_C_INCLUDE="$deps/include")
fi
if [ ! -f /usr/local/cuda/include/cudnn.h ] && [ ! -f /usr/include/cudnn.h ]; then
  cudnn_inc=$("$py" -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "include"))' 2>/dev/null)
  [ -f "$cudnn_inc/cudnn.h" ] && defs+=(--config-settings=cmake.define.CUDNN_INCLUDE="$cudnn_inc")
fi
pip_install() { # the one command, plus what the offline build needs
  (cd "$src" && "$venv/bin/pip" install --disable-pip-version-check --no-index --find-links "$wheels" \
      --config-settings=build-dir="$work/wheel_build" ${defs[@]+"${defs[@]}"} "$@" .)
}
# An isolated build env cannot run a cmake that is a pip package's wrapper
# (the GPU machine's, in /opt/torch/.venv/bin): scikit-build-core then asks
# for a cmake wheel, which an offline machine does not have. There the build
# backend goes into the venv first and the build runs in it, where that
# cmake works (QUICKSTART_NO_ISOLATION=1 takes this path directly).
no_isolation() {
  echo "(retrying without build isolation: the backend from $wheels installed into the venv first)"
  "$venv/bin/pip" install --disable-pip-version-check --no-index --find-links "$wheels" scikit-build-core &&
    pip_install --no-build-isolation
}
if { if [ "${QUICKSTART_NO_ISOLATION:-0}" = 1 ]; then no_isolation; else pip_install || no_isolation; fi
   } >"$work/pip.log" 2>&1; then
  pass "pip install --no-index --find-links $wheels . ($(( $(date +%s) - t0 )) s)"
else
  tail -40 "$work/pip.log"; fail "pip install --no-index --find-links $wheels . ($work/pip.log)"
  echo "$fails failed"; exit 1
fi
where=$(cd "$work" && "$venv/bin/python" -c 'import gpuc; print(gpuc.__file__, gpuc._lib.path, gpuc.api_version())' 2>&1)
case $where in
  "$venv"/*) pass "import gpuc from the venv: $where" ;;
  *) fail "import gpuc is not the installed package: $where" ;;
esac
n=$("$venv/bin/python" tests/readme_python.py README.md) || { fail "README quick start blocks"; n=0; }
gpus=$(cd "$work" && "$venv/bin/python" -c 'import gpuc; print(gpuc.device_count())' 2>/dev/null || echo 0)
for ((k = 0; k < n; k++)); do
  "$venv/bin/python" tests/readme_python.py README.md "$k" > "$work/quickstart_$k.py"
  if [ "$gpus" = 0 ] && grep -q '^import torch' "$work/quickstart_$k.py"; then
    echo "SKIP README Python quick start block $k (PyTorch on a GPU; no GPU here)"; continue
  fi
  echo "--- README Python quick start, block $k:"
  sed 's/^/    /' "$work/quickstart_$k.py"
  if (cd "$src" && "$venv/bin/python" "$work/quickstart_$k.py") > "$work/quickstart_$k.log" 2>&1; then
    sed 's/^/  | /' "$work/quickstart_$k.log"; pass "README Python quick start block $k"
  else
    tail -30 "$work/quickstart_$k.log" | sed 's/^/  | /'; fail "README Python quick start block $k ($work/quickstart_$k.log)"
  fi
done
echo "python_quickstart: $fails failed (logs in $work)"
[ "$fails" = 0 ]
