#!/bin/sh
# Runs the ABI probe built against Baton's nccl.h and the one built against the reference 2.28.9
# header; fails unless both succeed, print a plausible amount, and print the same 2.28 facts. The
# facts 2.29-2.32 changed are mapped back first, each named here: ncclNumResults (ncclTimeout was
# added before it), ncclConfig_t's size and tag (fields appended: ncclConfig_v23100), and the
# version (2.32.3: the macros, NCCL_VERSION of them, the initializers' version fields). The lines
# Baton's probe prints about the 2.29-2.32 additions ("v232 ") must equal the facts file.
set -u
ours="$1"
stock="$2"
out="$3"
facts="$4"
mkdir -p "$out" || exit 1
name=$(basename "$ours")
"$ours" > "$out/$name.ours.raw" || { echo "FAIL: $ours exited with $?"; exit 1; }
"$stock" > "$out/$name.stock.txt" || { echo "FAIL: $stock exited with $?"; exit 1; }
grep -v '^v232' "$out/$name.ours.raw" \
  | sed -e 's/^enumerator ncclNumResults = 9$/enumerator ncclNumResults = 8/' \
        -e 's/^type ncclConfig_t: size 120 align 8$/type ncclConfig_t: size 80 align 8/' \
        -e 's/^init config.size = 120$/init config.size = 80/' \
        -e 's/ncclConfig_v23100/ncclConfig_v22800/g' \
        -e 's/^macro NCCL_MINOR = 32 (int)$/macro NCCL_MINOR = 28 (int)/' \
        -e 's/^macro NCCL_PATCH = 3 (int)$/macro NCCL_PATCH = 9 (int)/' \
        -e 's/^macro NCCL_VERSION_CODE = 23203 (int)$/macro NCCL_VERSION_CODE = 22809 (int)/' \
        -e 's/^macro NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) = 23203 (int)$/macro NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) = 22809 (int)/' \
        -e 's/^init config.version = 23203$/init config.version = 22809/' \
        -e 's/^init sim.version = 23203$/init sim.version = 22809/' > "$out/$name.ours.txt"
lines=$(wc -l < "$out/$name.ours.txt")
if [ "$lines" -lt 100 ]; then
  echo "FAIL: $ours printed only $lines lines"
  exit 1
fi
status=0
if ! diff -u "$out/$name.stock.txt" "$out/$name.ours.txt"; then
  echo "FAIL: Baton's nccl.h differs from the reference 2.28 header (- reference, + Baton)"
  status=1
fi
grep '^v232 ' "$out/$name.ours.raw" > "$out/$name.v232.txt"
if ! diff -u "$facts" "$out/$name.v232.txt"; then
  echo "FAIL: Baton's 2.29-2.32 additions differ from $facts (- stock 2.32.3, + Baton)"
  status=1
fi
[ "$status" -eq 0 ] && echo "OK: $lines 2.28 facts and $(wc -l < "$facts") 2.29-2.32 facts identical"
exit $status
