#!/bin/sh
# The scale: 1024 virtual ranks (128 nodes of h200x8) simulate a 1 GiB all-reduce, ring
# and tree, each within a minute (ctest's TIMEOUT holds the whole script to that too) and in
# bounded memory (peak RSS below 3 GiB, as --stats reports it).
# The predictions must respect the network (8 NICs of 400 Gb/s, 50 GB/s each, per node): a ring
# moves 2(n-1)/n of the buffer across every node boundary, spread over the node's NICs
# (topo_ring_rails: each channel on its own pair of rails), so busbw <= 400 GB/s; a tree moves at
# most that much through a node's NICs together (topo_tree_rails): busbw <= 400 GB/s. Both above
# 100 GB/s, more than two NICs carry: before the rails the ring crossed through one NIC pair
# (45 GB/s) and the tree over ranks mostly through NICs 0 and 7 (50 GB/s).
#   check_sim_scale.sh BATON_SIM
set -u
sim=$1
fail() { echo "FAIL: $*"; exit 1; }
for algo in ring tree; do
  t0=$(date +%s)
  out=$("$sim" --topo h200x8 --nodes 128 --op allreduce --bytes 1G --algo "$algo" --stats 2>&1) ||
    { echo "$out"; fail "baton-sim --algo $algo"; }
  t1=$(date +%s)
  echo "$out"
  line=$(echo "$out" | grep '^op=allreduce ') || fail "$algo: no operation line"
  echo "$line" | grep -q ' nranks=1024 ' || fail "$algo: not 1024 ranks"
  echo "$line" | grep -qi " algo=$algo " || fail "$algo: the planner did not run $algo"
  busbw=$(echo "$line" | sed 's/.* busbw=\([0-9.]*\).*/\1/')
  rss=$(echo "$out" | sed -n 's/.* peak_rss_kb=\([0-9]*\).*/\1/p')
  [ -n "$rss" ] || fail "$algo: no peak_rss_kb in --stats"
  echo "$algo: $((t1 - t0)) s, peak RSS $((rss / 1024)) MiB, busbw $busbw GB/s"
  [ $((t1 - t0)) -lt 60 ] || fail "$algo: took $((t1 - t0)) s (limit 60)"
  [ "$rss" -lt 3145728 ] || fail "$algo: peak RSS $rss kB (limit 3 GiB)"
  awk -v b="$busbw" 'BEGIN { exit !(b > 100 && b <= 400) }' ||
    fail "$algo: busbw $busbw GB/s outside (100, 400]"
done
echo PASS
