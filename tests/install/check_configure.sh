#!/bin/sh
# check_configure.sh CMAKE SOURCE_DIR CUDA_COMPILER: configure with Check hidden from pkg-config.
set -u
cmake=$1 src=$2 nvcc=$3
work=$(mktemp -d /tmp/baton_configure_XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH= "$cmake" -S "$src" -B "$work/b" \
  -DCMAKE_CUDA_COMPILER="$nvcc" >"$work/log" 2>&1 || { cat "$work/log"; fail "configure failed"; }
grep -q "Check (libcheck) not found: the unit and integration test suites" "$work/log" ||
  { cat "$work/log"; fail "no message saying the suites are skipped"; }
"$cmake" --build "$work/b" --target help >"$work/targets" 2>&1 || fail "cmake --build --target help"
for t in nccl nccl_static baton-perf baton-info; do
  grep -Eq "(^|\.\.\. )$t(:|$)" "$work/targets" || { cat "$work/targets"; fail "no target $t"; }
done
if grep -Eq "(^|\.\.\. )test_params(:|$)" "$work/targets"; then fail "a Check suite was generated"; fi
# And it must fail loudly when asked to require Check (what CI does).
if PKG_CONFIG_LIBDIR=/nonexistent "$cmake" -S "$src" -B "$work/c" -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DBATON_REQUIRE_CHECK=ON >"$work/log2" 2>&1; then
  fail "-DBATON_REQUIRE_CHECK=ON configured without Check"
fi
echo PASS
