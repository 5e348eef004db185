#!/bin/sh
# Between nodes on every NIC (issue 28), in baton-sim: NODES nodes of h100x8-nvswitch-8nic with 1,
# 2, 4 and 8 NICs (400 Gb/s = 50 GB/s one way each), 1 GiB all-reduce, all-gather, reduce-scatter
# and alltoall, through Baton's own init, topology and planner.
#   - bus bandwidth grows with the NIC count, for every operation;
#   - the all-reduce's bus bandwidth is at least 80 % of the node's NIC bandwidth (NICs x 50 GB/s);
#   - every NIC of every node sends and receives within 10 % of the mean bytes (--flows: each NET
#     flow's source and destination NIC, summed per node and NIC), for every operation and count;
#   - no NIC carries more than its line rate allows in the predicted time: the busiest NIC's bytes
#     one way over predicted_us at most 50 GB/s (400 Gb/s, the node's NIC speed).
# The bytes per NIC and the bandwidth bound are computed here from the flows and the NIC count,
# not taken from the simulator's own summary.
# Then the recorded topologies of tests/data/topo (a DGX-H100-like dump with a NIC per GPU, a node
# with a NIC per GPU pair) as 2 and 3 nodes, 256 MiB all-reduce: every NET flow on one rail (same
# NIC index at both ends) except, with 3 nodes and NCCL_PXN_DISABLE=1 under NCCL_CROSS_NIC 1 or 2,
# the hop closing each ring (a third of them), which NCCL_CROSS_NIC=0 keeps on the rail, and PXN
# too (its sender hands it over NVLink to the GPU beside the receiver's rail); every NIC of the
# file sends within 10 % of the mean.
# And the INFO lines (NCCL_DEBUG_SUBSYS=GRAPH) that name a channel's NIC between two ranks must
# each match a NET flow between those ranks on that NIC.
# At 128 nodes (1024 ranks) the simulation takes seconds a run: CI runs that scale with NICS="1 8",
# OPS="allreduce allgather reducescatter", and the alltoall (a million point-to-point flows, about
# 15 s a run) as a test of its own with every NIC count. The all-reduce there is a tree: its NICs
# are held to the same 10 % (the trees' roots move from channel to channel, topo_tree_rails).
# SHARE, the all-reduce's floor as a share of NICs x 50 GB/s, is 0.8 unless set.
#   [NICS=...] [OPS=...] [SHARE=...] check_sim_nics.sh BATON_SIM [NODES [SOURCE_DIR]]
set -u
sim=$1
nodes=${2:-16}
src=${3:-}
nic_counts=${NICS:-1 2 4 8}
ops=${OPS:-allreduce allgather reducescatter alltoall}
share=${SHARE:-0.8}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d /tmp/check_sim_nics.XXXXXX) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
status=0
for op in $ops; do
  prev=0
  for nics in $nic_counts; do
    out="$tmp/$op.$nics"
    "$sim" --topo h100x8-nvswitch-8nic --nodes "$nodes" --nics "$nics" --op "$op" --bytes 1G \
      --flows >"$out" 2>&1 || { cat "$out"; fail "baton-sim $op, $nics NICs"; }
    line=$(grep "^op=$op " "$out") || { cat "$out"; fail "$op: no operation line"; }
    busbw=$(echo "$line" | sed 's/.* busbw=\([0-9.]*\).*/\1/')
    us=$(echo "$line" | sed 's/.* predicted_us=\([0-9.]*\).*/\1/')
    # per node and NIC: bytes sent (tx) and received (rx) by NET flows; 8 ranks a node
    spread=$(awk -v nics="$nics" -v nodes="$nodes" '
      / flow / && / via=NET / {
        split($2, sd, "->"); b = $3; sub("bytes=", "", b);
        n = $5; sub("nic=", "", n); split(n, nn, "->");
        tx[int(sd[1] / 8) "." nn[1]] += b; rx[int(sd[2] / 8) "." nn[2]] += b
      }
      END {
        total = 0; min = -1; max = 0; k = 0
        for (node = 0; node < nodes; node++) for (i = 0; i < nics; i++) {
          split(tx[node "." i] " " rx[node "." i], v, " ")
          for (j = 1; j <= 2; j++) {
            x = v[j] + 0; total += x; k++
            if (min < 0 || x < min) min = x
            if (x > max) max = x
          }
        }
        mean = total / k
        if (mean <= 0) { print "none"; exit }
        printf "%.1f %.1f %.3f %.0f", (min / mean - 1) * 100, (max / mean - 1) * 100, total / 1e9, max
      }' "$out")
    [ "$spread" != none ] || { status=1; echo "FAIL: $op, $nics NICs: no NET flow"; continue; }
    set -- $spread
    nicbw=$(awk -v b="$4" -v us="$us" 'BEGIN { printf "%.2f", b / us / 1e3 }')
    echo "$op nics=$nics busbw=$busbw GB/s per-NIC bytes vs mean (min%, max%, total GB):" \
      "$1 $2 $3; busiest NIC $nicbw GB/s"
    awk -v r="$nicbw" 'BEGIN { exit !(r <= 50) }' ||
      { status=1; echo "FAIL: $op, $nics NICs: a NIC carries $nicbw GB/s, over its 50 GB/s line"; }
    awk -v lo="$1" -v hi="$2" 'BEGIN { exit !(lo >= -10 && hi <= 10) }' ||
      { status=1; echo "FAIL: $op, $nics NICs: a NIC carries more than 10 % off the mean"; }
    awk -v b="$busbw" -v p="$prev" 'BEGIN { exit !(b > p) }' ||
      { status=1; echo "FAIL: $op: $busbw GB/s with $nics NICs, not above $prev with fewer"; }
    if [ "$op" = allreduce ]; then
      awk -v b="$busbw" -v n="$nics" -v s="$share" 'BEGIN { exit !(b >= s * n * 50) }' ||
        { status=1; echo "FAIL: allreduce, $nics NICs: $busbw GB/s below $share of $nics x 50"; }
    fi
    prev=$busbw
  done
done
# NET flows of a --flows output: "flows cross-rail min% max% nics" (bytes sent per NIC vs mean)
rails() {
  awk '/ flow / && / via=NET / {
      x = $5; sub("nic=", "", x); split(x, nn, "->"); b = $3; sub("bytes=", "", b)
      tx[nn[1]] += b; total += b; n++; if (nn[1] != nn[2]) cross++
    }
    END {
      k = 0; for (i in tx) k++
      if (k == 0) { print "0 0 0 0 0"; exit }
      mean = total / k; min = -1; max = 0
      for (i in tx) { if (min < 0 || tx[i] < min) min = tx[i]; if (tx[i] > max) max = tx[i] }
      printf "%d %d %.1f %.1f %d", n, cross, (min / mean - 1) * 100, (max / mean - 1) * 100, k
    }' "$1"
}
if [ -n "$src" ]; then
  for f in ibm-h100-8gpu-nvswitch-8nic.xml:8 hgx-h100-4nic-per-gpu-pair.xml:4; do
    file=${f%%:*}
    want=${f##*:}
    for n in 2 3; do
      for cross in 2 1 0 2x 1x; do
        out="$tmp/$file.$n.$cross"
        pxn_off=0; case $cross in *x) pxn_off=1 ;; esac
        NCCL_CROSS_NIC=${cross%x} NCCL_PXN_DISABLE=$pxn_off "$sim" --topo "$src/tests/data/topo/$file" \
          --nodes "$n" --op allreduce --bytes 256M --flows >"$out" 2>&1 ||
          { cat "$out"; fail "baton-sim on $file"; }
        set -- $(rails "$out")
        echo "$file nodes=$n NCCL_CROSS_NIC=${cross%x} NCCL_PXN_DISABLE=$pxn_off: $1 NET flows," \
          "$2 across rails, $5 NICs, bytes sent per NIC vs mean $3% .. $4%"
        expect=0
        [ "$n" = 3 ] && [ "$pxn_off" = 1 ] && expect=$(($1 / 3))
        [ "$1" -gt 0 ] && [ "$2" = "$expect" ] && [ "$5" = "$want" ] ||
          { status=1; echo "FAIL: $file, $n nodes: $2 flows across rails (want $expect)," \
            "$5 NICs used (want $want)"; }
        awk -v lo="$3" -v hi="$4" 'BEGIN { exit !(lo >= -10 && hi <= 10) }' ||
          { status=1; echo "FAIL: $file, $n nodes: a NIC sends more than 10 % off the mean"; }
      done
    done
  done
fi
# PXN (hgx-h100-4nic-socket0.xml: 4 NICs on socket 0, two beside GPUs 0-1 and two beside GPUs
# 2-3; GPUs 4-7 reach them only across the sockets), 2 nodes, alltoall: every NET flow from a GPU
# that is not under its NIC's PCIe switch names a relay rank (pxn=R) of its own node whose GPU is
# (GPUs 0-1 for NICs 0-1, 2-3 for NICs 2-3), flows from GPUs beside their NIC name none, every
# NIC sends within 10 % of the mean, and the INFO lines (NCCL_DEBUG_SUBSYS=NET) that name a PXN
# rank match those flows. NCCL_PXN_DISABLE=1: no relay, far GPUs send through their own NICs
# across the sockets, and the alltoall is no faster (the simulated alltoall is bound by its
# blocks' pushes here, not by the link between the sockets, and receives cross the sockets either
# way: its time is the same). The ring all-reduce relays nothing (its ends between nodes sit
# beside their NICs).
pxn_flows() {
  awk '/ flow / && / via=NET / {
      split($2, sd, "->"); x = $5; sub("nic=", "", x); split(x, nn, "->"); b = $3; sub("bytes=", "", b)
      g = sd[1] % 8; nic = nn[1]; beside = (nic < 2 && g < 2) || (nic >= 2 && g >= 2 && g < 4)
      relay = -1; for (i = 6; i <= NF; i++) if ($i ~ /^pxn=/) { relay = $i; sub("pxn=", "", relay) }
      n++; tx[nic] += b; total += b
      if (relay >= 0) {
        nr++; rg = relay % 8
        if (int(relay / 8) != int(sd[1] / 8) || beside || !((nic < 2 && rg < 2) || (nic >= 2 && rg >= 2 && rg < 4))) bad++
      } else if (!beside) far++
    }
    END {
      k = 0; for (i in tx) k++; mean = k ? total / k : 0; min = -1; max = 0
      for (i in tx) { if (min < 0 || tx[i] < min) min = tx[i]; if (tx[i] > max) max = tx[i] }
      if (mean == 0) { print "0 0 0 0 0 0 0"; exit }
      printf "%d %d %d %d %d %.1f %.1f\n", n, nr, bad + 0, far + 0, k, (min / mean - 1) * 100, (max / mean - 1) * 100
    }' "$1"
}
if [ -n "$src" ]; then
  file=hgx-h100-4nic-socket0.xml
  for pxn in on off; do
    out="$tmp/pxn.$pxn"
    disable=0; [ $pxn = off ] && disable=1
    NCCL_PXN_DISABLE=$disable NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "$sim" \
      --topo "$src/tests/data/topo/$file" --nodes 2 --op alltoall --bytes 256M --flows >"$out" 2>&1 ||
      { cat "$out"; fail "baton-sim alltoall on $file"; }
    flows=$(pxn_flows "$out")
    set -- $flows
    busbw=$(grep "^op=alltoall " "$out" | sed 's/.* busbw=\([0-9.]*\).*/\1/')
    eval "busbw_$pxn=$busbw"
    # INFO: "... a[x] -> b[y] [send] via NET/virtual/N PXN rank R" must be a flow a->b with pxn=R
    said=$(awk '/NCCL INFO Channel .*\[send\] via NET\/virtual\/[0-9]+ PXN rank/ {
        for (i = 1; i <= NF; i++) { if ($i == "->") { a = $(i - 1); b = $(i + 1) } }
        sub(/\[.*/, "", a); sub(/\[.*/, "", b); said[a "->" b " " $NF] = 1; n++
      }
      / flow / && / via=NET / { for (i = 6; i <= NF; i++) if ($i ~ /^pxn=/) { r = $i; sub("pxn=", "", r); has[$2 " " r] = 1 } }
      END { bad = 0; for (k in said) if (!(k in has)) bad++; print n + 0, bad }' "$out")
    echo "$file nodes=2 alltoall PXN $pxn: busbw=$busbw GB/s, $1 NET flows, $2 relayed ($3 wrongly)," \
      "$4 far without relay, $5 NICs sending $6% .. $7% of the mean; INFO PXN lines, unmatched: $said"
    if [ $pxn = on ]; then
      [ "$2" -gt 0 ] && [ "$3" = 0 ] && [ "$4" = 0 ] ||
        { status=1; echo "FAIL: PXN on: every far flow must name a relay beside its NIC"; }
      set -- $said
      [ "$1" -gt 0 ] && [ "$2" = 0 ] || { status=1; echo "FAIL: PXN INFO lines and flows disagree"; }
      set -- $flows
    else
      [ "$2" = 0 ] && [ "$4" -gt 0 ] ||
        { status=1; echo "FAIL: NCCL_PXN_DISABLE=1: no relay, far GPUs on their own NICs"; }
    fi
    [ "$5" = 4 ] && awk -v lo="$6" -v hi="$7" 'BEGIN { exit !(lo >= -10 && hi <= 10) }' ||
      { status=1; echo "FAIL: $file PXN $pxn: every NIC within 10 % of the mean"; }
  done
  awk -v a="$busbw_on" -v b="$busbw_off" 'BEGIN { exit !(a >= b) }' ||
    { status=1; echo "FAIL: alltoall with PXN ($busbw_on GB/s) slower than without ($busbw_off)"; }
  out="$tmp/pxn.ring"
  "$sim" --topo "$src/tests/data/topo/$file" --nodes 2 --op allreduce --bytes 256M --flows >"$out" 2>&1 ||
    { cat "$out"; fail "baton-sim allreduce on $file"; }
  set -- $(pxn_flows "$out")
  echo "$file nodes=2 allreduce: $1 NET flows, $2 relayed, $5 NICs sending $6% .. $7% of the mean"
  [ "$2" = 0 ] && [ "$4" = 0 ] && [ "$5" = 4 ] ||
    { status=1; echo "FAIL: the ring's hops between nodes must leave from GPUs beside their NICs"; }
fi
# NICs of two speeds (hgx-h100-4nic-mixed-speeds.xml: mlx5_0 and mlx5_1 at 400 Gb/s, mlx5_2 and
# mlx5_3 at 200): each NIC sends bytes in proportion to its speed (the file's), within 10 %.
if [ -n "$src" ]; then
  file=hgx-h100-4nic-mixed-speeds.xml
  out="$tmp/mixed"
  "$sim" --topo "$src/tests/data/topo/$file" --nodes 4 --op allreduce --bytes 1G --flows >"$out" 2>&1 ||
    { cat "$out"; fail "baton-sim on $file"; }
  speeds=$(sed -n 's/.*<net name="mlx5_\([0-9]\)".* speed="\([0-9]*\)".*/\1 \2/p' "$src/tests/data/topo/$file" |
    tr '\n' ' ')
  verdict=$(awk -v speeds="$speeds" '
    / flow / && / via=NET / { x = $5; sub("nic=", "", x); split(x, nn, "->"); b = $3; sub("bytes=", "", b)
      tx[nn[1]] += b }
    END {
      n = split(speeds, sp, " "); sum = 0; total = 0; worst = 0
      for (i = 1; i < n; i += 2) { w[sp[i]] = sp[i + 1]; sum += sp[i + 1]; total += tx[sp[i]] }
      for (k in w) { d = (tx[k] / total) / (w[k] / sum) - 1; if (d < 0) d = -d; if (d > worst) worst = d }
      printf "%.1f", worst * 100
    }' "$out")
  busbw=$(grep "^op=allreduce " "$out" | sed 's/.* busbw=\([0-9.]*\).*/\1/')
  echo "$file nodes=4: busbw=$busbw GB/s, bytes sent per NIC vs its speed's share: worst $verdict%"
  awk -v v="$verdict" 'BEGIN { exit !(v <= 10) }' ||
    { status=1; echo "FAIL: $file: a NIC's bytes are more than 10 % off its speed's share"; }
  # The same file, 2 nodes, 1 GiB alltoall: no NIC of either node sends or receives more than its
  # line rate (the file's speed, Mb/s) allows in the predicted time. The alltoall's messages to
  # different peers overlap on a NIC (its proxies keep sending after the block has moved on).
  out="$tmp/mixed.a2a"
  "$sim" --topo "$src/tests/data/topo/$file" --nodes 2 --op alltoall --bytes 1G --flows >"$out" 2>&1 ||
    { cat "$out"; fail "baton-sim alltoall on $file"; }
  gpus=$(grep -c '<gpu ' "$src/tests/data/topo/$file")
  us=$(grep "^op=alltoall " "$out" | sed 's/.* predicted_us=\([0-9.]*\).*/\1/')
  verdict=$(awk -v speeds="$speeds" -v g="$gpus" -v us="$us" '
    / flow / && / via=NET / { split($2, sd, "->"); x = $5; sub("nic=", "", x); split(x, nn, "->")
      b = $3; sub("bytes=", "", b); tx[int(sd[1] / g) "." nn[1]] += b; rx[int(sd[2] / g) "." nn[2]] += b }
    END {
      n = split(speeds, sp, " "); worst = 0; k = 0
      for (i = 1; i < n; i += 2) for (node = 0; node < 2; node++) {
        line = sp[i + 1] / 8000; key = node "." sp[i]
        u = tx[key] / us / 1e3 / line; if (u > worst) worst = u
        u = rx[key] / us / 1e3 / line; if (u > worst) worst = u
        k += (tx[key] > 0) + (rx[key] > 0)
      }
      printf "%d %.3f", k, worst
    }' "$out")
  set -- $verdict
  echo "$file nodes=2 alltoall: $us us, $1 NIC directions carry bytes, busiest at $2 of its line rate"
  [ "$1" = 16 ] && awk -v w="$2" 'BEGIN { exit !(w <= 1) }' ||
    { status=1; echo "FAIL: $file alltoall: a NIC over its line rate (or not every NIC used)"; }
fi
# NCCL_DEBUG=INFO (GRAPH) names each channel's NIC between which ranks: every "rank R sends to
# rank S on NIC k" line must match a NET flow R->S leaving on NIC k (and there must be some).
if [ -n "$src" ]; then
  out="$tmp/info"
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH "$sim" --topo "$src/tests/data/topo/ibm-h100-8gpu-nvswitch-8nic.xml" \
    --nodes 2 --op allreduce --bytes 64M --flows >"$out" 2>&1 || { cat "$out"; fail "baton-sim INFO"; }
  verdict=$(awk '
    /NCCL INFO Channel .*sends to rank/ {
      for (i = 1; i <= NF; i++) {
        if ($i == "rank" && $(i + 1) ~ /^[0-9]+$/ && r == "") r = $(i + 1)
        if ($i == "sends") s = $(i + 3)
        if ($i == "NIC") k = $(i + 1)
      }
      said[r "->" s] = said[r "->" s] " " k; n++; r = ""
    }
    / flow / && / via=NET / { x = $5; sub("nic=", "", x); split(x, nn, "->"); has[$2 " " nn[1]] = 1 }
    END {
      bad = 0
      for (p in said) { m = split(said[p], ks, " "); for (j = 1; j <= m; j++) if (!((p " " ks[j]) in has)) bad++ }
      print n, bad
    }' "$out")
  set -- $verdict
  echo "INFO lines naming a channel's NIC: $1, not matching a flow: $2"
  [ "$1" -gt 0 ] && [ "$2" = 0 ] || { status=1; echo "FAIL: INFO lines and flows disagree"; }
fi
[ $status -eq 0 ] && echo PASS
exit $status
