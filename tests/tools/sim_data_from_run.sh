#!/bin/sh
# Turns a device run's results into baton-sim's check data (tests/data/sim/, docs/sim.md):
#   sim_data_from_run.sh choices LOGDIR RUN COMMIT
#       every size's choice the library logged at NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=TUNING) in
#       LOGDIR/tun.<c><N>.* (c: ar ag rs bc rd; N: GPUs): "GPUs collective size algo proto
#       nchannels run commit", the lines check_sim_choices_gpu.sh compares baton-sim's with.
#   sim_data_from_run.sh times TSV LOGDIR RUN COMMIT [MIN_BYTES] [CASE_RE]
#       the out-of-place time (us) of every case of TSV (case coll size oop_us ...) whose name
#       matches CASE_RE (default: the library's own choice, m1.<c><N>.G and .L), from MIN_BYTES
#       (default 1 MiB), with the algorithm and protocol LOGDIR's INFO lines say it ran:
#       "GPUs collective size us-value us run commit algo=A proto=P", the lines
#       check_sim_accuracy.sh compares baton-sim's times with.
#   sim_data_from_run.sh forced TSV LOGDIR RUN COMMIT [MIN_BYTES]
#       the same lines from a run that forced each algorithm and protocol (TSV's cases
#       <Algo><Proto>.<c><N>, e.g. OneShotSimple.ar4), each size taken from the case of the choice
#       LOGDIR's INFO lines (another run's, the library choosing) give for it.
# Sizes are nccl-tests' (AllGather: the output, ReduceScatter: the input), which the INFO lines
# also give.
set -eu
mode=$1
choices() { # LOGDIR RUN COMMIT
  for f in "$1"/tun.*; do
    [ -f "$f" ] || continue
    base=$(basename "$f")
    awk -v base="$base" -v run="$2" -v commit="$3" '
      BEGIN {
        split(base, p, ".")
        c = substr(p[2], 1, 2); n = substr(p[2], 3) + 0
        name["ar"] = "all_reduce"; name["ag"] = "all_gather"; name["rs"] = "reduce_scatter"
        name["bc"] = "broadcast"; name["rd"] = "reduce"
        if (!(c in name) || n < 1) exit
      }
      / bytes -> algo / {
        for (i = 1; i <= NF; i++) if ($i == "bytes") b = $(i - 1)
        for (i = 1; i <= NF; i++) {
          if ($i == "algo") a = $(i + 1)
          if ($i == "proto") pr = $(i + 1)
          if ($i == "nchannels") ch = $(i + 1)
        }
        print n, name[c], b, a, pr, ch, run, commit
      }' "$f"
  done | sort -u | sort -k1,1n -k2,2 -k3,3n
}
case "$mode" in
  choices)
    choices "$2" "$3" "$4"
    ;;
  times)
    tsv=$2
    min=${6:-1048576}
    re=${7:-'^m1\.[a-z][a-z][0-9]+\.[GL]$'}
    choices "$3" "$4" "$5" > "${TMPDIR:-/tmp}/sim_choices.$$"
    awk -v min="$min" -v re="$re" -v run="$4" -v commit="$5" '
      FNR == NR { algo[$1 " " $2 " " $3] = $4; proto[$1 " " $2 " " $3] = $5; next }
      FNR == 1 { next }
      $1 ~ re && $3 + 0 >= min {
        n = $1; sub(/^[^.]*\.[a-z][a-z]/, "", n); sub(/\..*$/, "", n)
        k = n " " $2 " " $3
        if (!(k in algo)) { print "no INFO choice for " k > "/dev/stderr"; exit 1 }
        print n, $2, $3, $4, "us", run, commit, "algo=" algo[k], "proto=" proto[k]
      }' "${TMPDIR:-/tmp}/sim_choices.$$" FS='\t' "$tsv" | sort -k1,1n -k2,2 -k3,3n
    rm -f "${TMPDIR:-/tmp}/sim_choices.$$"
    ;;
  forced)
    tsv=$2
    min=${6:-1048576}
    choices "$3" "$4" "$5" > "${TMPDIR:-/tmp}/sim_choices.$$"
    awk -v min="$min" -v run="$4" -v commit="$5" '
      BEGIN { split("ar all_reduce ag all_gather rs reduce_scatter bc broadcast rd reduce", w, " ")
              for (i = 1; i < 10; i += 2) abbr[w[i + 1]] = w[i] }
      FNR == NR { want[$4 $5 "." abbr[$2] $1 " " $3] = $1 " " $2 " " $4 " " $5; next }
      FNR == 1 { next }
      $3 + 0 >= min && ($1 " " $3) in want {
        split(want[$1 " " $3], c, " ")
        print c[1], c[2], $3, $4, "us", run, commit, "algo=" c[3], "proto=" c[4]
      }' "${TMPDIR:-/tmp}/sim_choices.$$" FS='\t' "$tsv" | sort -k1,1n -k2,2 -k3,3n
    rm -f "${TMPDIR:-/tmp}/sim_choices.$$"
    ;;
  *)
    echo "usage: $0 choices LOGDIR RUN COMMIT | times TSV LOGDIR RUN COMMIT [MIN_BYTES] [CASE_RE]" \
      "| forced TSV LOGDIR RUN COMMIT [MIN_BYTES]" >&2
    exit 2
    ;;
esac
