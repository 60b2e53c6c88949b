#!/bin/sh
# The C API as a user gets it: `cmake --install` into a fresh prefix, then
# programs built against that prefix alone (its headers and libraries; no
# source tree include path):
#   - the installed libraries export gpuc_* symbols only (nm -D);
#   - the installed headers include only <stddef.h>/<stdint.h>;
#   - examples/deploy.c builds with cc -I PREFIX/include -L PREFIX/lib -lgpuc_rt,
#     and with pkg-config gpuc_rt, and a CMake project with find_package(gpuc);
#   - tests/capi/capi_test.c (-lgpuc) compiles for sm_90 through the API,
#     runs the reference and the error paths, checked against the gpuc command.
# usage: install_test.sh BUILD_DIR GPUC MODELS WORK SRC_DIR
set -u
build=$1 gpuc=$2 models=$3 work=$4 src=$5
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
rm -rf "$work" && mkdir -p "$work" || exit 1
prefix=$work/prefix
if cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then pass "cmake --install"
else fail "cmake --install"; cat "$work/install.log"; exit 1; fi
libdir=$prefix/lib
[ -d "$libdir" ] || libdir=$(dirname "$(find "$prefix" -name libgpuc_rt.so | head -1)")
for f in include/gpuc/gpuc_runtime.h include/gpuc/gpuc_compiler.h lib/cmake/gpuc/gpucConfig.cmake \
         lib/cmake/gpuc/gpucTargets.cmake lib/pkgconfig/gpuc.pc lib/pkgconfig/gpuc_rt.pc bin/gpuc; do
  [ -e "$prefix/$f" ] && pass "installed $f" || fail "not installed: $f"
done
for l in libgpuc.so libgpuc_rt.so; do
  n=$(nm -D --defined-only "$libdir/$l" | awk '{print $3}' | grep -c '^gpuc_')
  other=$(nm -D --defined-only "$libdir/$l" | awk '{print $3}' | grep -v '^gpuc_' | head -5 | tr '\n' ' ')
  if [ -z "$other" ] && [ "$n" -gt 20 ]; then pass "$l exports $n symbols, all gpuc_*"
  else fail "$l exports other symbols: $other"; fi
done
incs=$(grep -h '^#include' "$prefix"/include/gpuc/*.h | sort -u | tr '\n' ' ')
[ "$incs" = '#include "gpuc_runtime.h" #include <stddef.h> #include <stdint.h> ' ] &&
  pass "installed headers include only <stddef.h>, <stdint.h> and each other" || fail "header includes: $incs"
if command -v c++ >/dev/null; then # the headers compile as C++ too (extern "C")
  printf '#include <gpuc/gpuc_compiler.h>\nint main() { return gpuc_api_version() < GPUC_API_VERSION; }\n' >"$work/cxx.cc"
  c++ -Wall -Wextra -Werror -pedantic -I"$prefix/include" -fsyntax-only "$work/cxx.cc" && pass "headers compile as C++" ||
    fail "headers as C++"
fi
CC=${CC:-cc}
# a sanitizer build's libraries need the programs built the same way (the
# ASan runtime must come first)
san=
ldd "$libdir/libgpuc.so" | grep -q libasan && san="-fsanitize=address,undefined"
CC="$CC $san"
if $CC -std=c99 -Wall -Wextra -Werror -pedantic -I"$prefix/include" "$src/examples/deploy.c" -L"$libdir" -lgpuc_rt \
     -Wl,-rpath,"$libdir" -o "$work/deploy" 2>"$work/deploy.log"; then pass "deploy.c against the installed libgpuc_rt"
else fail "deploy.c build"; cat "$work/deploy.log"; fi
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs gpuc_rt)
  # shellcheck disable=SC2086
  $CC "$src/examples/deploy.c" $flags -o "$work/deploy_pc" && pass "deploy.c with pkg-config gpuc_rt ($flags)" ||
    fail "pkg-config build"
fi
mkdir -p "$work/cmake_user"
cat >"$work/cmake_user/CMakeLists.txt" <<EOT
cmake_minimum_required(VERSION 3.20)
project(gpuc_user C)
find_package(gpuc 0.1 REQUIRED)
add_executable(deploy "$src/examples/deploy.c")
target_link_libraries(deploy PRIVATE gpuc::gpuc_rt)
EOT
if cmake -S "$work/cmake_user" -B "$work/cmake_user/build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake_user.log" 2>&1 &&
   cmake --build "$work/cmake_user/build" >>"$work/cmake_user.log" 2>&1; then pass "find_package(gpuc) + gpuc::gpuc_rt"
else fail "find_package(gpuc) project"; tail -20 "$work/cmake_user.log"; fi
# deploy without a GPU: a message naming the reason, exit 1, no crash
"$gpuc" "$models/mlp.onnx" --arch sm_90 --shape image=2x784 -o "$work/mlp.gpuc" >/dev/null || fail "gpuc compile"
if [ -x "$work/deploy" ]; then
  "$work/deploy" "$work/mlp.gpuc" >"$work/deploy.out" 2>&1
  rc=$?
  if grep -q "input image: f32 \[2x784\]" "$work/deploy.out" && { [ $rc = 0 ] || { [ $rc = 1 ] && grep -q "deploy: session: " "$work/deploy.out"; }; }; then
    pass "deploy runs (rc $rc): $(grep 'deploy:\|logits' "$work/deploy.out" | head -1)"
  else fail "deploy rc $rc"; cat "$work/deploy.out"; fi
  "$work/deploy" "$work/nonexistent.gpuc" >"$work/deploy_bad.out" 2>&1
  [ $? = 1 ] && grep -q "nonexistent.gpuc: cannot open" "$work/deploy_bad.out" && pass "deploy: bad path message" ||
    fail "deploy bad path: $(cat "$work/deploy_bad.out")"
fi
if $CC -std=c99 -Wall -Wextra -Werror -I"$prefix/include" "$src/tests/capi/capi_test.c" -L"$libdir" -lgpuc -lpthread \
     -Wl,-rpath,"$libdir" -o "$work/capi_test" 2>"$work/capi_test.log"; then pass "capi_test.c against the installed libgpuc"
else fail "capi_test build"; cat "$work/capi_test.log"; fi
if [ -x "$work/capi_test" ]; then
  mkdir -p "$work/run"
  "$work/capi_test" "$gpuc" "$models" "$work/run" >"$work/capi_test.out" 2>&1
  rc=$?
  grep FAIL "$work/capi_test.out"
  tail -1 "$work/capi_test.out"
  [ $rc = 0 ] && pass "capi_test" || fail "capi_test rc $rc"
fi
echo "install_test: $fails failed"
[ $fails = 0 ]
