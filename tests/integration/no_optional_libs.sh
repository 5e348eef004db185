#!/bin/sh
# The library loads and works on a machine without rdma-core, hwloc or libnuma: in a private
# mount namespace their libraries are hidden (an empty file bound over each), and the multi-host
# tests (NET over sockets, the IB network absent) and the plugin tests still pass, with the INFO
# line saying why IB is off. Needs root and unshare(1); otherwise SKIP (exit 77).
#   usage: no_optional_libs.sh <build dir>
set -u
build=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a mount namespace hides the libraries)"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: unshare (util-linux) is missing"; exit 77; }
log=$(mktemp /tmp/baton-nolibs.XXXXXX)
empty=$(mktemp /tmp/baton-empty.XXXXXX)
unshare -m sh -s "$build" "$log" "$empty" <<'INNER'
build=$1 log=$2 empty=$3
hidden=0
for lib in libibverbs.so.1 libhwloc.so.15 libnuma.so.1; do
  for dir in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    [ -e "$dir/$lib" ] || continue
    mount --bind "$empty" "$(readlink -f "$dir/$lib")" && hidden=$((hidden + 1))
  done
done
echo "hid $hidden library file(s)"
rc=0
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE="$log.%p" NCCL_NET_PLUGIN=none \
  "$build/tests/test_coll_hosts" || rc=1
"$build/tests/test_net_plugin" || rc=1
exit $rc
INNER
rc=$?
if [ $rc = 0 ] && ! cat "$log".* 2>/dev/null | grep -q "NET/IB: cannot load libibverbs.so.1"; then
  echo "FAILED: no INFO line saying the IB network is off because libibverbs cannot be loaded"
  rc=1
fi
rm -f "$log" "$log".* "$empty"
exit $rc
