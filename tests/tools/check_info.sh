#!/bin/sh
# check_info.sh BATON_INFO LIBNCCL: baton-info says Baton for the build's library (exit 0), and
# for a library that is not NCCL it fails with exit 2.
set -u
info=$1 lib=$2
fail() { echo "FAIL: $*"; exit 1; }
out=$("$info" "$lib")
status=$?
echo "$out"
[ "$status" = 0 ] || fail "exit $status for Baton"
echo "$out" | grep -q "^Library: .*: Baton [0-9.]* (NCCL 2.32.3 API)" || fail "not reported as Baton"
echo "$out" | grep -q "^Build: build=" || fail "no build options"
echo "$out" | grep -q "^GPUs: " || fail "no GPU line"
echo "$out" | grep -q "^Build: .* ib=\(ON\|OFF\) hwloc=\(ON\|OFF\)" || fail "no IB/hwloc build options"
# Without a driver (no libcuda.so.1 anywhere the loader looks) the GPU line says so, not that the
# driver is "insufficient".
if ! ldconfig -p | grep -q "libcuda.so.1 " && ! ls /usr/lib*/x86_64-linux-gnu/libcuda.so.1 >/dev/null 2>&1; then
  echo "$out" | grep -q "^GPUs: none (no CUDA driver: libcuda.so.1 is not installed)" ||
    fail "the no-driver case is not worded as such"
fi
"$info" /lib/x86_64-linux-gnu/libm.so.6 >/dev/null 2>&1
[ "$?" = 2 ] || fail "a library that is not NCCL did not give exit 2"
echo PASS
