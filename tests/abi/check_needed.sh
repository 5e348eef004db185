#!/bin/sh
# libnccl.so.2 must be loadable anywhere stock NCCL is: its SONAME is libnccl.so.2 and it needs
# nothing beyond the C runtime (CUDA is linked statically or loaded at run time).
set -u
lib="$1"
[ -f "$lib" ] || { echo "FAIL: $lib not found (build the nccl target)"; exit 1; }
dyn=$(readelf -d "$lib") || { echo "FAIL: readelf -d $lib"; exit 1; }
soname=$(printf '%s\n' "$dyn" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
if [ "$soname" != "libnccl.so.2" ]; then
  echo "FAIL: SONAME is '$soname', expected libnccl.so.2"
  exit 1
fi
needed=$(printf '%s\n' "$dyn" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
echo "NEEDED: $(echo $needed)"
status=0
saw_libc=0
for n in $needed; do
  case "$n" in
    libc.so.6) saw_libc=1 ;;
    libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*.so.*) ;;
    *) echo "FAIL: unexpected dependency $n"; status=1 ;;
  esac
done
if [ "$saw_libc" -ne 1 ]; then
  echo "FAIL: no libc.so.6 among NEEDED entries; readelf output not understood"
  status=1
fi
[ "$status" -eq 0 ] && echo "OK: SONAME libnccl.so.2, C runtime dependencies only"
exit $status
