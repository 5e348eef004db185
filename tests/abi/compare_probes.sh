#!/bin/sh
# Runs the ABI probe built against Baton's nccl.h and the one built against the reference header;
# fails unless both succeed, print a plausible amount, and print exactly the same thing.
set -u
ours="$1"
stock="$2"
out="${3:-.}"
mkdir -p "$out" || exit 1
name=$(basename "$ours")
"$ours" > "$out/$name.ours.txt" || { echo "FAIL: $ours exited with $?"; exit 1; }
"$stock" > "$out/$name.stock.txt" || { echo "FAIL: $stock exited with $?"; exit 1; }
lines=$(wc -l < "$out/$name.ours.txt")
if [ "$lines" -lt 100 ]; then
  echo "FAIL: $ours printed only $lines lines"
  exit 1
fi
if ! diff -u "$out/$name.stock.txt" "$out/$name.ours.txt"; then
  echo "FAIL: Baton's nccl.h differs from the reference header (- reference, + Baton)"
  exit 1
fi
echo "OK: $lines ABI facts identical"
