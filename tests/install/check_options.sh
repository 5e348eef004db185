#!/bin/sh
# check_options.sh CMAKE SOURCE_DIR CUDA_COMPILER: the IB network and hwloc are built by default.
# In a private mount namespace each header is replaced by one that does not compile (as if
# libibverbs-dev or libhwloc-dev were missing):
#   - configure fails, naming the header, the package to install and the option that turns it off;
#   - with that option off it configures, the build note says ib=OFF / hwloc=OFF, and the unit
#     suite of the IB network's pure rules still compiles;
# then, back with the real headers, the same build directory configures with both on again (a
# failed header check is not cached). Needs root and unshare(1); otherwise SKIP (exit 77).
set -u
cmake=$1 src=$2 nvcc=$3
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a mount namespace hides the headers)"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: unshare (util-linux) is missing"; exit 77; }
inc=$(echo '#include <infiniband/verbs.h>' | cc -E -H -x c - 2>&1 >/dev/null | awk 'NR==1{print $2}')
hw=$(echo '#include <hwloc.h>' | cc -E -H -x c - 2>&1 >/dev/null | awk 'NR==1{print $2}')
[ -n "$inc" ] && [ -n "$hw" ] || { echo "FAIL: verbs.h or hwloc.h is not installed here"; exit 1; }
work=$(mktemp -d /tmp/baton_options_XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
printf '#error hidden by check_options.sh\n' > "$work/hidden.h"
unshare -m sh -s "$cmake" "$src" "$nvcc" "$work" "$inc" "$hw" <<'INNER'
cmake=$1 src=$2 nvcc=$3 work=$4 inc=$5 hw=$6 b=$4/b
fail() { echo "FAIL: $*"; exit 1; }
cfg() { "$cmake" -S "$src" -B "$b" -DCMAKE_CUDA_COMPILER="$nvcc" "$@"; }
mount --bind "$work/hidden.h" "$inc" || fail "cannot hide $inc"
if cfg > "$work/log1" 2>&1; then cat "$work/log1"; fail "configured without verbs.h"; fi
grep -q "infiniband/verbs.h not found: install libibverbs-dev" "$work/log1" &&
  grep -q "DBATON_IB=OFF" "$work/log1" || { cat "$work/log1"; fail "no clear message for verbs.h"; }
cfg -DBATON_IB=OFF > "$work/log2" 2>&1 || { cat "$work/log2"; fail "-DBATON_IB=OFF did not configure"; }
grep -q "BATON_IB=OFF: the IB network's tests" "$work/log2" ||
  { cat "$work/log2"; fail "no message that the IB tests are not built"; }
grep -rq 'ib=OFF hwloc=ON' "$b/CMakeFiles/baton_objs.dir/" || fail "build note without ib=OFF"
grep -q "BATON_HAVE_VERBS" "$b/CMakeFiles/baton_objs.dir/flags.make" && fail "IB still defined"
# The IB network's unit suite compiles without the header (the rdma suites are not generated).
make -C "$b/tests" unit/test_net_ib.c.o > "$work/log3" 2>&1 ||
  { cat "$work/log3"; fail "tests/unit/test_net_ib.c does not compile without verbs.h"; }
umount "$inc"
mount --bind "$work/hidden.h" "$hw" || fail "cannot hide $hw"
if cfg -DBATON_IB=ON > "$work/log4" 2>&1; then cat "$work/log4"; fail "configured without hwloc.h"; fi
grep -q "hwloc.h not found: install libhwloc-dev" "$work/log4" &&
  grep -q "DBATON_HWLOC=OFF" "$work/log4" || { cat "$work/log4"; fail "no clear message for hwloc.h"; }
cfg -DBATON_HWLOC=OFF > "$work/log5" 2>&1 || { cat "$work/log5"; fail "-DBATON_HWLOC=OFF did not configure"; }
grep -rq 'ib=ON hwloc=OFF' "$b/CMakeFiles/baton_objs.dir/" || fail "build note without hwloc=OFF"
echo "hidden headers: configure failed clearly, and the options turned them off"
INNER
rc=$?
[ "$rc" = 0 ] || exit "$rc"
# The real headers again, the same build directory: both on, no stale failed check.
"$cmake" -S "$src" -B "$work/b" -DCMAKE_CUDA_COMPILER="$nvcc" -DBATON_IB=ON -DBATON_HWLOC=ON \
  > "$work/log6" 2>&1 || { cat "$work/log6"; echo "FAIL: the headers are back but configure fails"; exit 1; }
grep -rq 'ib=ON hwloc=ON' "$work/b/CMakeFiles/baton_objs.dir/" ||
  { echo "FAIL: build note does not say ib=ON hwloc=ON after the headers came back"; exit 1; }
grep -q "BATON_HAVE_VERBS" "$work/b/CMakeFiles/baton_objs.dir/flags.make" ||
  { echo "FAIL: IB not compiled in after the header came back"; exit 1; }
echo PASS
