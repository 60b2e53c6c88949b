# Sourced by the GPU machine's scripts (tests/gpu/*_check.sh, bench/zoo.sh):
# $OUT (default /tmp/gpuc_out) made, $PY the Python with PyTorch, cuDNN from
# PyTorch's wheel first on the library path (the one gpuc opens), Python
# output unbuffered so logs cut by a time limit keep what was printed.
OUT=${OUT:-/tmp/gpuc_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
cudnn=$($PY -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
