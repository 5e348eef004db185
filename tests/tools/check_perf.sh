#!/bin/sh
# check_perf.sh BATON_PERF LIBNCCL: a short sweep on 3 host-executor ranks, compared with itself.
#   - the table has nccl-tests' columns, every result checked (0 wrong), algo/proto per size
#     (read through baton-perf's profiler plugin);
#   - --json holds every measurement, consistent (busbw = algbw x 2(n-1)/n, min <= median);
#   - --compare prints one B/A ratio per size; --version names both libraries;
#   - --plot draws a PNG (SKIP of that part when matplotlib is missing, with its message checked);
#   - --help lists the defaults and units; a bad option fails; the table labels its units and says
#     that host-executor numbers say nothing about GPU speed;
#   - rows stream: with stdout a file, the first row is there while the sweep still runs;
#   - --compare with a library that is not Baton (stock, if the CUDA toolkit has it) on a machine
#     without a GPU says that stock needs a GPU, and still writes library A's JSON (exit 2).
set -u
perf=$1 lib=$2
work=$(mktemp -d /tmp/baton_perf_XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export NCCL_HOSTID=baton-perf-test BATON_PERF_RANKS=3

"$perf" --help >"$work/help" || fail "--help"
for s in "default 8" "default 2" "default allreduce" "default 5" "microseconds" "GB/s" "--compare" "--plot" "--json"; do
  grep -q -- "$s" "$work/help" || fail "--help lacks '$s'"
done
if "$perf" --no-such-option >/dev/null 2>&1; then fail "a bad option succeeded"; fi

"$perf" --version --compare "$lib" >"$work/version" || fail "--version"
cat "$work/version"
[ "$(grep -c ': Baton ' "$work/version")" = 2 ] || fail "--version does not name both libraries"

"$perf" -n 3 -b 1K -e 256K -f 16 -c allreduce,allgather,reducescatter -r 3 -w 2 -t 2 \
  --compare "$lib" --json "$work/out.json" --progress 1 >"$work/table" 2>"$work/err" ||
  { cat "$work/table" "$work/err"; fail "the sweep failed"; }
cat "$work/table"
grep -q "# library A: .*: Baton " "$work/table" || fail "library A not named"
grep -q "# library B: .*: Baton " "$work/table" || fail "library B not named"
grep -q "out-of-place" "$work/table" && grep -q "in-place" "$work/table" || fail "no place columns"
[ "$(grep -c '^# 0 wrong values in total' "$work/table")" = 2 ] || fail "wrong values"
rows=$(grep -cE '^  (allreduce|allgather|reducescatter) ' "$work/table")
# 3 collectives x 3 sizes per library, and the ratio table's 9 rows.
[ "$rows" = 27 ] || fail "expected 27 result rows, got $rows"
if grep -E '^  (allreduce|allgather|reducescatter) ' "$work/table" | grep -q ' ?/?/'; then
  fail "algorithm/protocol unknown (the profiler plugin did not report)"
fi
grep -q "B/A" "$work/table" || fail "no comparison table"
grep -q "algbw(GB/s)" "$work/table" && grep -q "busbw(GB/s)" "$work/table" &&
  grep -q "time(us)" "$work/table" || fail "the table does not label its units"
grep -q "say nothing about the speed on GPUs" "$work/table" ||
  fail "no word that host-executor numbers are not GPU numbers"

# Rows stream to a file: the first one is written while later sizes are still being measured.
"$perf" -n 2 -b 8 -e 1M -f 2 -c allreduce -r 2 -w 1 -t 40 >"$work/stream" 2>/dev/null &
pid=$!
streamed=no
for _ in $(seq 1 600); do
  if grep -qE '^  allreduce ' "$work/stream"; then
    kill -0 "$pid" 2>/dev/null && streamed=yes
    break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
wait "$pid" || { cat "$work/stream"; fail "the streaming sweep failed"; }
[ "$streamed" = yes ] || { cat "$work/stream"; fail "no row in the file while the sweep ran"; }
[ "$(grep -cE '^  allreduce ' "$work/stream")" = 18 ] || { cat "$work/stream"; fail "rows missing"; }
echo "rows stream ok"

# Stock NCCL cannot run without a GPU: said, and what library A measured is still written.
stock=""
for f in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2; do
  [ -r "$f" ] && { stock=$f; break; }
done
if [ -z "$stock" ]; then
  echo "SKIP: --compare with stock NCCL (no stock libnccl.so.2 in the CUDA toolkit)"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: --compare with stock NCCL without a GPU (this machine has one)"
else
  "$perf" -n 2 -b 1K -e 4K -f 4 -c allreduce -r 1 -w 1 -t 1 --compare "$stock" \
    --json "$work/stock.json" >"$work/stock.out" 2>"$work/stock.err"
  status=$?
  cat "$work/stock.out" "$work/stock.err"
  [ "$status" = 2 ] || fail "--compare with stock without a GPU: exit $status, not 2"
  grep -q "a comparison with it needs a GPU" "$work/stock.err" || fail "no word that stock needs a GPU"
  python3 - "$work/stock.json" <<'PY' || fail "library A's results were not written"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["libraries"]) == 1 and d["libraries"][0]["baton"] is True, d
assert len(d["libraries"][0]["results"]) == 4, d  # 2 sizes x 2 places
print("stock comparison without a GPU: library A written")
PY
fi

python3 - "$work/out.json" <<'PY' || fail "the JSON is inconsistent"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["nranks"] == 3 and d["executor"] == "host", d
assert len(d["libraries"]) == 2
for lib in d["libraries"]:
    assert lib["baton"] is True
    res = lib["results"]
    assert len(res) == 18, len(res)  # 3 collectives x 3 sizes x 2 places
    for r in res:
        assert r["wrong"] == 0, r
        assert 0 < r["min_us"] <= r["time_us"], r
        f = {"allreduce": 4.0 / 3, "allgather": 2.0 / 3, "reducescatter": 2.0 / 3}[r["collective"]]
        assert abs(r["busbw_gbs"] - r["algbw_gbs"] * f) <= 1e-3 * max(1, r["busbw_gbs"]), r
        assert abs(r["algbw_gbs"] - r["bytes"] / r["time_us"] / 1e3) <= 1e-3 * max(1, r["algbw_gbs"]), r
        assert r["algo"] in ("RING", "TREE") and r["proto"] in ("LL", "LL128", "SIMPLE"), r
print("json ok")
PY

# --plot: a PNG when matplotlib is there (the script also tries /usr/bin/python3), else exit 3
# and a message saying what to install.
"$perf" -n 2 -b 1K -e 4K -f 4 -r 1 -w 1 -t 1 --plot "$work/plot.png" >"$work/plot.log" 2>&1
status=$?
if [ "$status" = 0 ]; then
  head -c 8 "$work/plot.png" | od -c | grep -q "P   N   G" || fail "--plot wrote no PNG"
  grep -q "plot written to $work/plot.png" "$work/plot.log" || fail "--plot did not say where"
  echo "plot ok"
else
  cat "$work/plot.log"
  [ "$status" = 3 ] && grep -q "matplotlib is not installed" "$work/plot.log" ||
    fail "--plot failed ($status) without saying matplotlib is missing"
  echo "SKIP: --plot drawing (matplotlib missing); its message is right"
fi
echo PASS
