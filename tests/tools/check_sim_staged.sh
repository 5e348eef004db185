#!/bin/sh
# baton-sim's staged OneShot/TwoShot (Simple) against what the staged kernels read
# (device.h, "Staged direct algorithms"): on h100x2 and h100x4, one operation of S bytes
# (nccl-tests' size) forced to each staged algorithm, --flows must list exactly the pairs whose
# reader reads the source's staging, each with the bytes it reads:
#   AllReduce OneShot       every ordered pair, S            TwoShot  every pair, 2 S / n
#   AllGather (S: output)   every pair, S / n                ReduceScatter (S: input)  S / n
#   Broadcast (root 0)      0 -> r, S; nothing else          Reduce (root 0)  r -> 0, S
# and the time must grow with S.
#   check_sim_staged.sh BATON_SIM
set -eu
sim=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for n in 2 4; do
  for case in allreduce:OneShot allreduce:TwoShot allgather:OneShot reducescatter:OneShot \
              broadcast:OneShot reduce:OneShot; do
    op=${case%%:*}
    algo=${case#*:}
    prev=0
    for s in 1048576 4194304; do
      "$sim" --topo "h100x$n" --op "$op" --bytes "$s" --algo "$algo" --proto Simple --root 0 \
        --flows > "$tmp/out"
      line=$(grep '^op=' "$tmp/out")
      case "$line" in
        *"algo=$algo proto=Simple"*) ;;
        *) echo "FAIL: $n GPUs $op $algo $s: baton-sim ran $line"; status=1; continue ;;
      esac
      us=$(echo "$line" | sed 's/.*predicted_us=\([0-9.]*\).*/\1/')
      if ! awk -v a="$us" -v b="$prev" 'BEGIN { exit !(a > b) }'; then
        echo "FAIL: $n GPUs $op $algo: $s bytes in $us us, not more than the smaller size's $prev"
        status=1
      fi
      prev=$us
      # The expected flows, then the printed ones, as "src dst bytes" sorted.
      awk -v n="$n" -v s="$s" -v op="$op" -v algo="$algo" 'BEGIN {
        for (src = 0; src < n; src++)
          for (dst = 0; dst < n; dst++) {
            if (src == dst) continue
            b = -1
            if (op == "allreduce") b = algo == "TwoShot" ? 2 * s / n : s
            if (op == "allgather" || op == "reducescatter") b = s / n
            if (op == "broadcast" && src == 0) b = s
            if (op == "reduce" && dst == 0) b = s
            if (b >= 0) printf "%d %d %d\n", src, dst, b
          }
      }' | sort > "$tmp/want"
      sed -n 's/^  flow \([0-9]*\)->\([0-9]*\) bytes=\([0-9]*\) .*/\1 \2 \3/p' "$tmp/out" | sort \
        > "$tmp/got"
      if ! cmp -s "$tmp/want" "$tmp/got"; then
        echo "FAIL: $n GPUs $op $algo $s bytes: flows (src dst bytes) differ from the kernel's reads"
        diff "$tmp/want" "$tmp/got" | sed 's/^/  /'
        status=1
      fi
    done
    echo "$n GPUs $op $algo: flows as the kernel reads, time grows with size (last $prev us)"
  done
done
exit $status
