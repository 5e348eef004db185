#!/bin/sh
# NCCL_GRAPH_DUMP_FILE (issue 28): the channels' rings and trees between nodes, with their NICs, in
# stock's graph XML, read back here and held to what the same run's NCCL_DEBUG=INFO GRAPH lines
# say the planner built (baton-sim, Baton's own init, on recorded topologies as 2 and 3 nodes):
#   - one <graph id="0" pattern="4"> (rings) with a <channel> per channel (nchannels= agrees with
#     the INFO line count), each listing the dumping rank's node's ranks in the order of that
#     channel's "Channel NN/MM : r0 r1 ..." ring from the rank it enters at, between a <net> that is
#     the NIC the INFO line "rank R receives from rank S on NIC k" names for the first and a <net>
#     that is the NIC "rank R ... sends to rank S on NIC k" names for the last;
#   - one <graph id="1" pattern="3"> (trees): each channel's first GPU is a rank whose "Trees"
#     entry on that channel has a parent or a child on another node, the first <net> is the NIC of
#     that rank's hop between nodes on the channel's ring, the last that of the one other rank
#     with a child on another node if there is one (4 nodes: a node with two child nodes), else
#     the first's; every other rank of the node follows.
#   check_sim_graph.sh BATON_SIM SOURCE_DIR
set -u
sim=$1
src=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d /tmp/check_sim_graph.XXXXXX) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
status=0
for case in ibm-h100-8gpu-nvswitch-8nic.xml:2:8 hgx-h100-4nic-per-gpu-pair.xml:3:13 \
            hgx-h100-4nic-socket0.xml:2:3 ibm-h100-8gpu-nvswitch-8nic.xml:4:16; do
  file=${case%%:*}; rest=${case#*:}; nodes=${rest%%:*}; rank=${rest#*:}
  out="$tmp/out"; dump="$tmp/graph.xml"
  rm -f "$dump"
  NCCL_GRAPH_DUMP_FILE=$dump NCCL_GRAPH_DUMP_FILE_RANK=$rank NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=GRAPH "$sim" --topo "$src/tests/data/topo/$file" --nodes "$nodes" \
    --op allreduce --bytes 64M >"$out" 2>&1 || { cat "$out"; fail "baton-sim on $file"; }
  [ -s "$dump" ] || { status=1; echo "FAIL: $file: rank $rank wrote no $dump"; continue; }
  verdict=$(awk -v rank="$rank" -v gpus=8 '
    function hex(v,   i, x) { sub(/^0x/, "", v); x = 0
      for (i = 1; i <= length(v); i++) x = x * 16 + index("0123456789abcdef", substr(v, i, 1)) - 1
      return x }
    # the INFO lines (every rank of the process prints them)
    FILENAME == ARGV[1] && /NCCL INFO Channel [0-9]+\/[0-9]+ :/ {
      for (i = 1; i <= NF; i++) if ($i == ":") break
      split($(i - 1), cm, "/"); c = cm[1] + 0; nch = cm[2] + 0
      if (!(c in ring)) { ring[c] = ""; for (j = i + 1; j <= NF; j++) ring[c] = ring[c] " " $j }
      next
    }
    FILENAME == ARGV[1] && /NCCL INFO Channel [0-9]+\/[0-9]+: rank/ {
      split($0, a, "Channel "); split(a[2], b, "/"); c = b[1] + 0
      r = ""; for (i = 1; i <= NF; i++) {
        if ($i == "rank" && r == "") r = $(i + 1)
        if ($i == "NIC") k = $(i + 1)
      }
      if ($0 ~ /receives from/) innic[c " " r] = k
      if ($0 ~ /sends to/) outnic[c " " r] = k
      next
    }
    FILENAME == ARGV[1] && /NCCL INFO Trees/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^\[[0-9]+\]$/) {
        c = substr($i, 2, length($i) - 2) + 0
        split($(i + 1), t, "->"); split(t[1], d, "/"); r = t[2]; u = t[3]
        x = (u >= 0 && int(u / gpus) != int(r / gpus))
        for (j = 1; j <= 3; j++) if (d[j] >= 0 && int(d[j] / gpus) != int(r / gpus)) x = 1
        across[c " " r] = x
      }
      next
    }
    FILENAME == ARGV[1] { next }
    # the dump
    /<graph / { gid = $0; sub(/.* id="/, "", gid); sub(/".*/, "", gid); c = -1
      n = $0; sub(/.* nchannels="/, "", n); sub(/".*/, "", n); gch[gid] = n + 0; ng++ }
    /<channel>/ { c++; nets = 0; list = ""; next }
    /<net / { v = $0; sub(/.*dev="/, "", v); sub(/".*/, "", v); nets++; net[nets] = hex(v); next }
    /<gpu / { v = $0; sub(/.*rank="/, "", v); sub(/".*/, "", v); list = list " " v; next }
    /<\/channel>/ {
      dumped[gid]++
      m = split(list, rs, " "); node = int(rank / gpus)
      if (gid == 0) {
        # the INFO ring from the node part entry: rotate the ring to the first of rs
        k = split(ring[c], rr, " "); want = ""
        for (i = 1; i <= k; i++) if (rr[i] == rs[1]) s = i
        for (i = 0; i < k; i++) { q = rr[(s - 1 + i) % k + 1]; if (int(q / gpus) != node) break; want = want " " q }
        if (want != list) { bad++; if (bad < 4) print "ring channel " c ": dump" list ", INFO" want > "/dev/stderr" }
        if (nets != 2 || net[1] != innic[c " " rs[1]] || net[2] != outnic[c " " rs[m]]) {
          bad++; if (bad < 4) print "ring channel " c ": NICs " net[1] "," net[2] " INFO " innic[c " " rs[1]] "," outnic[c " " rs[m]] > "/dev/stderr" }
      } else if (gid == 1) {
        h = rs[1]; k = innic[c " " h] != "" ? innic[c " " h] : outnic[c " " h]
        o = ""; others = 0
        for (i = 2; i <= m; i++) if (across[c " " rs[i]] == 1) { o = rs[i]; others++ }
        ko = o == "" ? k : (innic[c " " o] != "" ? innic[c " " o] : outnic[c " " o])
        if (across[c " " h] != 1 || nets != 2 || net[1] != k || net[2] != ko || m != gpus || others > 1) {
          bad++; if (bad < 4) print "tree channel " c ": head " h " NIC " net[1] "," net[2] " (ring NICs " k "," ko ")" > "/dev/stderr" }
      }
    }
    END { printf "%d %d %d %d %d %d\n", ng, gch[0], dumped[0], gch[1], dumped[1], bad + 0; print nch > "/dev/stderr" }
  ' "$out" "$dump" 2>"$tmp/why") || fail "awk"
  nch=$(tail -1 "$tmp/why")
  set -- $verdict
  echo "$file nodes=$nodes rank=$rank: $1 graphs, rings $3 of nchannels=$2 (INFO $nch)," \
    "trees $5 of $4, mismatches $6"
  [ "$1" = 2 ] && [ "$2" = "$nch" ] && [ "$3" = "$nch" ] && [ "$4" = "$nch" ] && [ "$5" = "$nch" ] &&
    [ "$6" = 0 ] || { status=1; head -5 "$tmp/why"; echo "FAIL: $file: the dump and the planner disagree"; }
done
[ $status -eq 0 ] && echo PASS
exit $status
