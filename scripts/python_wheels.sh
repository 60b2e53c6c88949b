#!/bin/sh
# The wheels `pip install .` needs to build the gpuc package (pyproject.toml's
# build requirement scikit-build-core and its dependencies, for Python
# 3.9-3.13), downloaded into DIR for a machine without network, such as
# the GPU machine: tests/gpu/python_quickstart.sh DIR installs from them with
# `pip install --no-index --find-links DIR .`. numpy (the package's one
# dependency) and torch are expected there already. DIR is not committed
# (build-carry/ is ignored).
#   scripts/python_wheels.sh [DIR]        (default build-carry/wheels)
set -eu
dir=${1:-build-carry/wheels}
mkdir -p "$dir"
pip=${PIP:-pip}
# pip evaluates the dependencies' markers for the Python it runs on, so the
# ones only older Pythons need (tomli, exceptiongroup, typing-extensions)
# are named too, with tomli's pure-Python wheel for any version
for v in 3.9 3.10 3.11 3.12 3.13; do
  $pip download --quiet --only-binary=:all: --python-version "$v" --implementation cp \
    --platform manylinux2014_x86_64 --platform any -d "$dir" "scikit-build-core>=0.10"
done
$pip download --quiet --no-deps --only-binary=:all: -d "$dir" exceptiongroup typing-extensions
$pip download --quiet --no-deps --only-binary=:all: --python-version 3.10 --implementation py --platform any \
  -d "$dir" tomli
ls "$dir"
