#!/bin/sh
# baton-sim against Baton's measured times (tests/data/sim/*-measured.txt, from the device runs of
# docs/gpu-results.md): every point from 1 MiB within the tolerance (default 15 %), but those the
# data file marks as known misses (a token "miss"), which must stay within 35 %, and those it marks
# as used to fit the calibration (a token "fit"), which are shown and not held. Prints the
# side-by-side table that docs/sim.md shows, then the worst check point per GPU count and
# collective.
#   check_sim_accuracy.sh BATON_SIM DATA [TOLERANCE_PERCENT]
# The data file's "#! topo=PREFIX [graph]" line names the built-in node (PREFIX then the GPU count:
# h200x2, h100x4 ...; default h200x) and how the runs measured: "graph", nccl-tests -G (CUDA-graph
# replay, --graph), else nccl-tests -g N (one thread launches for every GPU). A point's tokens
# "algo=A proto=P" force what the run ran (--algo, --proto), so the times are compared for the
# algorithm measured whatever the tuning model now picks (check_sim_choices_gpu.sh holds the
# choices).
set -eu
sim=$1
data=$2
tol=${3:-15}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
directive=$(sed -n 's/^#! *//p' "$data" | head -n 1)
prefix=$(echo "$directive" | sed -n 's/.*topo=\([^ ]*\).*/\1/p')
prefix=${prefix:-h200x}
graph=
case " $directive " in *" graph "*) graph=--graph ;; esac
# The points, numbered in file order: index, GPUs, collective, size, algo, proto.
grep -v '^#' "$data" | awk 'NF >= 7 {
  a = "-"; p = "-"
  for (i = 8; i <= NF; i++) {
    if ($i ~ /^algo=/) a = substr($i, 6)
    if ($i ~ /^proto=/) p = substr($i, 7)
  }
  print ++k, $1, $2, $3, a, p
}' > "$tmp/pts"
grep -v '^#' "$data" | awk 'NF >= 7 { print ++k, $0 }' > "$tmp/data"
: > "$tmp/pred"
# One baton-sim run per GPU count and forced algorithm: as the runs measured, a loop of
# operations back to back.
awk '{ print $2, $5, $6 }' "$tmp/pts" | sort -u > "$tmp/groups"
while read -r gpus algo proto; do
  awk -v g="$gpus" -v a="$algo" -v p="$proto" '$2 == g && $5 == a && $6 == p' "$tmp/pts" > "$tmp/g"
  awk '{ print $3, $4 }' "$tmp/g" > "$tmp/w"
  set -- --topo "$prefix$gpus" --iters 5 --ranks-per-process "$gpus" --workload "$tmp/w"
  [ "$algo" = - ] || set -- "$@" --algo "$algo"
  [ "$proto" = - ] || set -- "$@" --proto "$proto"
  [ -z "$graph" ] || set -- "$@" "$graph"
  "$sim" "$@" | grep '^op=' > "$tmp/o" || true
  [ "$(wc -l < "$tmp/o")" -eq "$(wc -l < "$tmp/g")" ] ||
    { echo "FAIL: baton-sim $* printed $(wc -l < "$tmp/o") operations for $(wc -l < "$tmp/g") points"; exit 1; }
  awk '{ print $1 }' "$tmp/g" | paste -d' ' - "$tmp/o" >> "$tmp/pred"
done < "$tmp/groups"
printf '| GPUs | collective | size | measured us | predicted us | error | run |\n'
printf '|---:|---|---:|---:|---:|---:|---:|\n'
awk -v tol="$tol" '
  function bytes(s,   n, u) {
    n = s + 0; u = substr(s, length(s), 1)
    if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; else if (u == "G") n *= 1073741824
    return n
  }
  function size(b) {
    if (b >= 1073741824 && b % 1073741824 == 0) return b / 1073741824 "G"
    if (b >= 1048576 && b % 1048576 == 0) return b / 1048576 "M"
    if (b >= 1024 && b % 1024 == 0) return b / 1024 "K"
    return b
  }
  function factor(op, n) {
    if (op == "all_reduce") return 2 * (n - 1) / n
    if (op == "all_gather" || op == "reduce_scatter" || op == "alltoall") return (n - 1) / n
    return 1
  }
  FNR == NR {
    pred[$1] = -1
    for (i = 2; i <= NF; i++) if ($i ~ /^predicted_us=/) { split($i, kv, "="); pred[$1] = kv[2] + 0 }
    next
  }
  {
    k = $1; n = $2; op = $3; b = bytes($4); v = $5; unit = $6; run = $7
    miss = 0; fit = 0; how = ""
    for (i = 9; i <= NF; i++) {
      if ($i == "miss") miss = 1
      if ($i == "fit") fit = 1
      if ($i ~ /^algo=/) how = substr($i, 6)
    }
    meas = unit == "us" ? v : b * factor(op, n) / (v * 1000)
    p = k in pred ? pred[k] : -1
    err = p > 0 ? (p / meas - 1) * 100 : 1e9
    inrange = b >= 1048576  # the issue holds 1 MiB and up to the tolerance
    lim = miss ? 35 : tol
    out = err > lim || err < -lim
    flag = fit ? " (fit)" \
           : !inrange ? ((err > tol || err < -tol) ? " (below 1 MiB)" : "") \
           : out ? " **" : miss ? " (known miss)" : ""
    printf "| %d | %s%s | %s | %.1f | %.1f | %+.1f %%%s | %s |\n", n, op, how != "" ? " " how : "", \
           size(b), meas, p, err, flag, run
    if (flag == " **") bad++
    if (fit) { fitted[n " " op " " b] = 1; nfit++ }
    if (inrange && !fit) {
      tot++; a = err < 0 ? -err : err; sum += a; if (miss) nmiss++
      key = n " " op
      seen[key] = 1
      if (!(key in worst) || a > worst[key]) { worst[key] = a; wsize[key] = size(b); werr[key] = err }
      if (!miss && (!(key in wm) || a > wm[key])) { wm[key] = a; wmerr[key] = err }
      if (!((n " " op " " b) in fitted) && (!(key in wh) || a > wh[key])) { wh[key] = a; wherr[key] = err }
    }
  }
  function show(arr, e, key) { return key in arr ? sprintf("%+.1f %%", e[key]) : "-" }
  END {
    printf "\n%d points from 1 MiB, mean |error| %.1f %%, %d known misses, %d outside their bound\n",
           tot, tot ? sum / tot : 0, nmiss, bad
    printf "\nWorst error from 1 MiB per GPU count and collective: of every point held (at), of those\n"
    printf "but the known misses, and of those at a size no point used to fit has (\"fit\" points in\n"
    printf "this file; none: -)\n\n"
    printf "| GPUs | collective | worst | at | known misses aside | at unfitted sizes |\n"
    printf "|---:|---|---:|---:|---:|---:|\n"
    m = 0
    for (key in seen) order[++m] = key
    for (i = 1; i <= m; i++)
      for (j = i + 1; j <= m; j++)
        if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
    for (i = 1; i <= m; i++) {
      split(order[i], kk, " ")
      printf "| %s | %s | %+.1f %% | %s | %s | %s |\n", kk[1], kk[2], werr[order[i]], wsize[order[i]],
             show(wm, wmerr, order[i]), nfit ? show(wh, wherr, order[i]) : "-"
    }
    exit bad > 0 || tot == 0 ? 1 : 0
  }' "$tmp/pred" "$tmp/data"
