#!/usr/bin/env bash
# The test command: set up, build, run every test (unit, ABI, install, integration) with ctest.
# Check is required here, so a machine without it fails instead of running a short list.
#   scripts/test.sh [ctest args]         the normal build in ${BUILD_DIR:-build}
#   scripts/test.sh --asan [ctest args]  a second build in ${BUILD_DIR:-build}-asan with
#       AddressSanitizer and UndefinedBehaviorSanitizer on the C code (-DBATON_SANITIZE=ON); runs
#       the unit and integration suites (not the ABI, install, tools and Soft-RoCE guest checks: they load the
#       shared libnccl, which sanitized needs libasan first, beside stock's). The kernels compile as
#       in the normal build, so with ccache they come from its cache.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT_DIR=$(pwd)

# ctest, then a line per skipped test with its reason (ctest's summary names skipped tests, but
# their reasons are only in Testing/Temporary/LastTest.log): the output line that says SKIP, else
# the last line the test printed. Run in the build directory; returns ctest's status.
ctest_with_skips() {
  local out rc
  out=$(mktemp /tmp/baton-ctest.XXXXXX)
  set +e
  ctest "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  local skipped
  skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$out")
  rm -f "$out"
  [ -n "$skipped" ] || return "$rc"
  echo "Skipped tests (not run here, so not proven by this run):"
  local name reason
  for name in $skipped; do
    reason=$(awk -v t="$name" '
      $0 ~ "^[0-9]+/[0-9]+ Test: " { cur = $3 }
      $0 == "Output:" { inside = (cur == t); getline; next }
      $0 == "<end of output>" { inside = 0 }
      inside && NF { last = $0; if ($0 ~ /SKIP/) skip = $0 }
      END { print (skip != "" ? skip : last) }' Testing/Temporary/LastTest.log 2>/dev/null)
    echo "  $name: ${reason:-(it printed no reason)}"
  done
  return "$rc"
}

asan=0
if [ "${1:-}" = "--asan" ]; then
  asan=1
  shift
fi
scripts/setup.sh
if [ "$asan" = 0 ]; then
  scripts/build.sh -DBATON_REQUIRE_CHECK=ON
  cd "${BUILD_DIR:-build}"
  ctest_with_skips --output-on-failure -j"${CTEST_JOBS:-2}" "$@"
  exit $?
fi
export BUILD_DIR="${BUILD_DIR:-build}-asan"
scripts/build.sh -DBATON_REQUIRE_CHECK=ON -DBATON_SANITIZE=ON
cd "$BUILD_DIR"
# abort_on_error: a report ends the process with a signal the test sees. protect_shadow_gap=0: the
# CUDA runtime maps memory there on GPU machines. allocator_may_return_null: tests ask for absurd
# sizes on purpose and expect the library's out-of-memory path. Leaks fail a test too.
export ASAN_OPTIONS="abort_on_error=1:protect_shadow_gap=0:detect_leaks=1:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
# glibc's own buffers, which are not Baton's leaks (tests/lsan.supp says which and why).
export LSAN_OPTIONS="suppressions=$ROOT_DIR/tests/lsan.supp:${LSAN_OPTIONS:-}"
ctest_with_skips --output-on-failure -j"${CTEST_JOBS:-2}" -LE "abi|install|tools|guest" "$@"
