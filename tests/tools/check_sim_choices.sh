#!/bin/sh
# baton-sim's choices against a real run's: host-executor ranks on this machine (baton-perf, one
# process per rank, NCCL_DEBUG=INFO) log the planner's algorithm, protocol and channels for every
# collective and size; baton-sim --host-ranks N on one node must print the same for each.
#   check_sim_choices.sh BATON_SIM BATON_PERF LIBNCCL (the real run times that library: Baton's)
set -u
sim=$1 perf=$2 lib=$3
work=$(mktemp -d /tmp/baton_simchoice_XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export NCCL_HOSTID=baton-sim-choices
colls="allreduce allgather reducescatter broadcast reduce"
checked=0
for n in 2 3 4; do
  # The real run: each size once (no warm-up, no check), the planner's lines of every rank.
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,P2P "$perf" -L "$lib" -n "$n" -b 1K -e 4M -f 4 \
    -c "$(echo $colls alltoall | tr ' ' ',')" -w 0 -i 1 -r 1 -C 0 --progress 0 \
    >"$work/real$n.out" 2>&1 || { tail -20 "$work/real$n.out"; fail "baton-perf -n $n"; }
  # "AllGather: 65532 bytes -> algo Ring proto LL nchannels 2 (...)" -> "AllGather 65532 Ring LL 2"
  sed -n 's/.*NCCL INFO \([A-Za-z]*\): \([0-9]*\) bytes -> algo \([A-Za-z]*\) proto \([A-Za-z0-9]*\) nchannels \([0-9]*\).*/\1 \2 \3 \4 \5/p' \
    "$work/real$n.out" | sort -u >"$work/real$n"
  # Point-to-point (alltoall): "Send: 21844 bytes to peer 0 -> proto Simple nchannels 1" -> proto.
  sed -n 's/.*NCCL INFO Send: \([0-9]*\) bytes to peer [0-9]* -> proto \([A-Za-z0-9]*\) .*/\1 \2/p' \
    "$work/real$n.out" | sort -u >"$work/realp2p$n"
  [ -s "$work/real$n" ] && [ -s "$work/realp2p$n" ] ||
    { tail -20 "$work/real$n.out"; fail "no planner lines in the real run of $n ranks"; }
  for op in $colls alltoall; do
    "$sim" --topo h200x8 --host-ranks "$n" --op "$op" --sweep 1K:4M:4 >"$work/sim.out" 2>&1 ||
      { cat "$work/sim.out"; fail "baton-sim --host-ranks $n --op $op"; }
    while read -r line; do
      case "$line" in op=*) ;; *) continue ;; esac
      count=$(echo "$line" | sed 's/.* count=\([0-9]*\) .*/\1/')
      algo=$(echo "$line" | sed 's/.* algo=\([A-Za-z]*\) .*/\1/')
      proto=$(echo "$line" | sed 's/.* proto=\([A-Za-z0-9]*\) .*/\1/')
      ch=$(echo "$line" | sed 's/.* channels=\([0-9]*\) .*/\1/')
      # The planner's bytes: the whole buffer of allgather and reducescatter, else one rank's.
      case $op in
        allreduce) f=AllReduce b=$((count * 4)) ;;
        allgather) f=AllGather b=$((count * 4 * n)) ;;
        reducescatter) f=ReduceScatter b=$((count * 4 * n)) ;;
        broadcast) f=Broadcast b=$((count * 4)) ;;
        reduce) f=Reduce b=$((count * 4)) ;;
        alltoall) f=Send b=$((count * 4)) ;;
      esac
      if [ "$op" = alltoall ]; then
        want=$(awk -v b="$b" '$1 == b { print $2 }' "$work/realp2p$n")
        got=$proto
      else
        want=$(awk -v f="$f" -v b="$b" '$1 == f && $2 == b { print $3, $4, $5 }' "$work/real$n")
        got="$algo $proto $ch"
      fi
      [ -n "$want" ] || fail "$n ranks: the real run logged no $f of $b bytes"
      [ "$(echo "$want" | wc -l)" = 1 ] || fail "$n ranks: the real run chose differently for $f of $b bytes: $want"
      [ "$want" = "$got" ] || fail "$n ranks, $op $b bytes: real '$want', simulated '$got'"
      echo "$n ranks $op $b bytes: $got"
      checked=$((checked + 1))
    done <"$work/sim.out"
  done
done
# 3 rank counts x 6 operations x 7 sizes (1K .. 4M, x4).
[ "$checked" = 126 ] || fail "compared $checked choices, expected 126"
echo "PASS: $checked choices equal"
