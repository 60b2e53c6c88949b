#!/usr/bin/env bash
# Installs the Debian packages gpuc builds and tests with (when missing).
set -euo pipefail
pkgs=(cmake ninja-build gcc protobuf-c-compiler libprotobuf-c-dev libonnx-dev
      libonnx-testdata dataset-fashion-mnist python3 python3-numpy python3-onnx python3-venv zlib1g-dev
      clang libclang-rt-14-dev) # clang + libFuzzer: scripts/fuzz.sh
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# cuSPARSELt's headers (2:4 sparse GEMMs, runtime/gpu/sparse_gemm.c): from
# the nvidia-cusparselt-cu13 wheel on PyPI into a cache folder the build
# finds ($GPUC_DEPS_CACHE, else ~/.cache/gpuc); the library itself is
# dlopen'ed at run time where a GPU is. Only the headers are kept.
cache=${GPUC_DEPS_CACHE:-$HOME/.cache/gpuc}
if [ ! -f "$cache/cusparselt/include/cusparseLt.h" ]; then
  echo "fetching cuSPARSELt headers (nvidia-cusparselt-cu13 wheel) into $cache/cusparselt"
  mkdir -p "$cache/cusparselt"
  python3 - "$cache/cusparselt" <<'PY'
import json, sys, urllib.parse, urllib.request, zipfile, os, tempfile
dst = sys.argv[1]
api = "https://pypi.org/pypi/nvidia-cusparselt-cu13/json"
meta = json.load(urllib.request.urlopen(api, timeout=60))
wheels = [u for u in meta["urls"] if u["filename"].endswith("manylinux2014_x86_64.whl")] or \
         [u for u in meta["urls"] if u["filename"].endswith(".whl")]
if not wheels:
    sys.exit("no wheel of nvidia-cusparselt-cu13 " + meta["info"]["version"])
with tempfile.TemporaryFile() as f:
    # a mirror may answer with relative links
    with urllib.request.urlopen(urllib.parse.urljoin(api, wheels[0]["url"]), timeout=600) as r:
        while True:
            b = r.read(1 << 20)
            if not b: break
            f.write(b)
    f.seek(0)
    z = zipfile.ZipFile(f)
    heads = [n for n in z.namelist() if n.endswith(".h") and "/include/" in n]
    if not any(n.endswith("/cusparseLt.h") for n in heads):
        sys.exit("cusparseLt.h not in " + wheels[0]["filename"])
    os.makedirs(os.path.join(dst, "include"), exist_ok=True)
    for n in heads:
        with open(os.path.join(dst, "include", os.path.basename(n)), "wb") as out:
            out.write(z.read(n))
    print("cuSPARSELt", meta["info"]["version"], "headers:", ", ".join(os.path.basename(n) for n in heads))
PY
fi
