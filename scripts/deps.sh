#!/usr/bin/env bash
# Installs the Debian packages gpuc builds and tests with (when missing).
set -euo pipefail
pkgs=(cmake ninja-build gcc protobuf-c-compiler libprotobuf-c-dev libonnx-dev
      libonnx-testdata dataset-fashion-mnist python3 python3-numpy python3-onnx zlib1g-dev)
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
