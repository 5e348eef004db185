#!/bin/sh
# Every function name the reference header declares (ncclX and pncclX) is declared by Baton's
# header and by the probe's list, and no other: abi_probe.c then checks each one's exact type.
set -u
ours="$1"
stock="$2"
probe="$3"
# Comments are stripped first (the preprocessor in -fpreprocessed mode only removes comments);
# function-like macros (NCCL_VERSION) are upper case and excluded by the pattern.
names() {
  ${CC:-cc} -fpreprocessed -dD -E -P -x c "$1" | grep -oE '\bp?nccl[A-Za-z0-9_]+[[:space:]]*\(' \
    | tr -d '( \t' | LC_ALL=C sort -u
}
names "$stock" > stock.names
names "$ours" > ours.names
[ -s stock.names ] || { echo "FAIL: no function names found in $stock"; exit 1; }
status=0
if ! diff -u stock.names ours.names; then
  echo "FAIL: function names differ (- reference header, + Baton's header)"
  status=1
fi
# The probe lists base names inside X(...); both ncclX and pncclX are probed.
sed -n '/#define PROBE_FUNCTIONS/,/^$/p' "$probe" | grep -oE 'X\(nccl[A-Za-z0-9_]+\)' \
  | sed 's/^X(\(.*\))$/\1/' | while read -r n; do echo "$n"; echo "p$n"; done \
  | LC_ALL=C sort -u > probe.names
if ! diff -u stock.names probe.names; then
  echo "FAIL: PROBE_FUNCTIONS in $probe does not list every function (- header, + probe)"
  status=1
fi
[ "$status" -eq 0 ] && echo "OK: $(wc -l < stock.names) function names declared identically"
exit $status
