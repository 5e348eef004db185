#!/bin/sh
# baton-sim's choices against those a GPU run logged (tests/data/sim/h100-choices.txt: the
# library's NCCL_DEBUG=INFO TUNING lines, extracted by sim_data_from_run.sh choices): for every
# GPU count, collective and size of the file, baton-sim on the built-in node named by the file's
# "#! topo=PREFIX" line (PREFIX then the GPU count, e.g. h100x4) must print the same algorithm,
# protocol and channel count. Prints every size that differs.
#   check_sim_choices_gpu.sh BATON_SIM DATA
set -eu
sim=$1
data=$2
prefix=$(sed -n 's/^#! *topo=\([^ ]*\).*/\1/p' "$data" | head -n 1)
[ -n "$prefix" ] || { echo "FAIL: $data names no topology (#! topo=PREFIX)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^#' "$data" | awk 'NF >= 6' > "$tmp/want"
: > "$tmp/got"
for gpus in $(cut -d' ' -f1 "$tmp/want" | sort -un); do
  for coll in $(awk -v g="$gpus" '$1 == g { print $2 }' "$tmp/want" | sort -u); do
    awk -v g="$gpus" -v c="$coll" '$1 == g && $2 == c { print $2, $3 }' "$tmp/want" > "$tmp/w"
    "$sim" --topo "$prefix$gpus" --workload "$tmp/w" | grep '^op=' |
      awk -v g="$gpus" -v c="$coll" '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        print g, c, v["bytes"], v["algo"], v["proto"], v["channels"]
      }' >> "$tmp/got"
  done
done
awk '
  FNR == NR { got[$1 " " $2 " " $3] = $4 " " $5 " " $6; next }
  {
    k = $1 " " $2 " " $3; want = $4 " " $5 " " $6; n++
    if (!(k in got)) { printf "MISSING %s: baton-sim printed no line\n", k; bad++; next }
    if (got[k] != want) { printf "DIFFERS %d GPUs %s %s bytes: run %s %s, baton-sim %s\n", $1, $2, $3, $7, want, got[k]; bad++ }
  }
  END {
    printf "%d choices compared, %d differ\n", n, bad
    exit bad > 0 || n == 0 ? 1 : 0
  }' "$tmp/got" "$tmp/want"
