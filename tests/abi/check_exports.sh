#!/bin/sh
# The dynamic symbols libnccl.so defines must be exactly the reference list: the same names with
# the same binding letter (T: strong pnccl*, W: weak nccl* aliases), and nothing else.
set -u
lib="$1"
list="$2"
out="${3:-.}"
mkdir -p "$out" || exit 1
[ -f "$lib" ] || { echo "FAIL: $lib not found (build the nccl target)"; exit 1; }
nm -D --defined-only "$lib" > "$out/exports.raw" || { echo "FAIL: nm -D $lib"; exit 1; }
awk 'NF == 3 { print $2 " " $3 } NF != 3 { print "unparsed: " $0 }' "$out/exports.raw" \
  | LC_ALL=C sort > "$out/exports.actual"
grep -v '^[[:space:]]*$' "$list" | LC_ALL=C sort > "$out/exports.expected"
if [ ! -s "$out/exports.expected" ]; then
  echo "FAIL: empty reference list $list"
  exit 1
fi
if ! diff -u "$out/exports.expected" "$out/exports.actual"; then
  echo "FAIL: exported symbols differ (- expected, + libnccl.so)"
  exit 1
fi
echo "OK: $(wc -l < "$out/exports.actual") exported symbols match"
