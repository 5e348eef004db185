#!/bin/sh
# Every function name the reference 2.28 header declares (ncclX and pncclX) is declared by Baton's
# header; the names Baton's header declares beyond it are exactly the functions stock added to
# nccl.h from 2.29 to 2.32 (the 2.32.3 export list less 2.28.9's, less the device-API functions,
# which stock declares in nccl_device/*.h); and the probe's list names every function of Baton's
# header, so abi_probe.c checks each one's exact type.
set -u
ours="$1"
stock="$2"
probe="$3"
exports228="$4"
exports232="$5"
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
missing=$(LC_ALL=C comm -23 stock.names ours.names)
if [ -n "$missing" ]; then
  echo "FAIL: Baton's header lacks functions of the reference header: $missing"
  status=1
fi
# Stock's device API (nccl_device/*.h), not nccl.h.
device='ncclCommQueryProperties|ncclGet[A-Za-z]*Device(Pointer|LeInfo)|ncclTeamCft[A-Za-z]*|ncclGin[A-Za-z0-9]*Requirement'
awk '{ print $2 }' "$exports232" | LC_ALL=C sort -u > e232.names
awk '{ print $2 }' "$exports228" | LC_ALL=C sort -u > e228.names
LC_ALL=C comm -23 e232.names e228.names | grep -vE "^p?($device)\$" > added.expected
LC_ALL=C comm -13 stock.names ours.names > added.actual
if ! diff -u added.expected added.actual; then
  echo "FAIL: functions Baton's header adds to 2.28's differ from stock's 2.29-2.32 additions"
  echo "      (- stock 2.32.3 exports less 2.28.9's and the device API, + Baton's header)"
  status=1
fi
# The probe lists base names inside X(...); both ncclX and pncclX are probed.
sed -n '/#define PROBE_FUNCTIONS/,/^$/p' "$probe" | grep -oE 'X\(nccl[A-Za-z0-9_]+\)' \
  | sed 's/^X(\(.*\))$/\1/' | while read -r n; do echo "$n"; echo "p$n"; done \
  | LC_ALL=C sort -u > probe.names
if ! diff -u ours.names probe.names; then
  echo "FAIL: PROBE_FUNCTIONS in $probe does not list every function (- header, + probe)"
  status=1
fi
[ "$status" -eq 0 ] && echo "OK: $(wc -l < ours.names) function names: 2.28's $(wc -l < stock.names) and $(wc -l < added.actual) added by 2.29-2.32"
exit $status
