#!/bin/sh
# tests/gpu/fit_model.py keeps a copy of the tuning model (src/topo/tuning.c) to fit its constants;
# the two must price alike. For every collective on 2 and 4 GPUs of baton-sim's h100x node, at
# sizes from 64 KiB to 256 MiB, each algorithm and protocol forced (NCCL_ALGO / NCCL_PROTO), the
# price the library's INFO line gives ("model X us", with the channels it chose) against the
# copy's for the same point.
#   check_model_copy.sh BATON_SIM FIT_MODEL_PY
set -eu
sim=$1
fit=$2
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: no python3 to run $fit (scripts/setup.sh installs it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/points"
for n in 2 4; do
  for coll in all_reduce all_gather reduce_scatter broadcast reduce; do
    op=$(echo "$coll" | tr -d _)
    for bytes in 65536 131072 262144 1048576 8388608 67108864 268435456; do
      for ap in Ring/Simple Ring/LL Ring/LL128 Tree/Simple OneShot/Simple TwoShot/Simple OneShot/LL; do
        algo=${ap%/*} proto=${ap#*/}
        line=$(NCCL_ALGO=$algo NCCL_PROTO=$proto NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING \
          "$sim" --topo "h100x$n" --op "$op" --bytes "$bytes" --iters 1 --ranks-per-process "$n" 2>&1 |
          grep -o 'algo [A-Za-z]* proto [A-Za-z0-9]* nchannels [0-9]* (model [0-9.-]*' | head -n 1) || true
        [ -n "$line" ] || continue
        # What ran (the planner may fall back from what cannot run); -1: the model offered nothing.
        echo "$line" | awk -v n="$n" -v c="$coll" -v b="$bytes" \
          '{ if ($8 + 0 > 0) print n, c, b, $2, $4, $6, $8 }' >> "$tmp/points"
      done
    done
  done
done
python3 "$fit" compare "$tmp/points"
