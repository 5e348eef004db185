#!/usr/bin/env bash
# sweep.sh CASES_FILE: runs nccl-tests cases beside stock on the device machine, from a
# prebuilt folder (tests/gpu/prebuild.sh), and writes one row per case and size:
#   $OUT/sweep.tsv   case  coll  size_bytes  oop_us  ip_us  wrong
#   $OUT/sweep.tgz   every log
# CASES_FILE has one case a line: NAME LIB NGPUS COLL "NCCL-TESTS ARGS" [VAR=value ...]
#   LIB is `ours` (BATON_PREBUILT/libnccl.so.2), `alt:DIR` (BATON_PREBUILT/DIR/libnccl.so.2: a
#   second build of Baton for an A/B in the same call) or `stock` (the image's PyTorch NCCL); NGPUS
#   picks CUDA_VISIBLE_DEVICES=0..NGPUS-1 and -g NGPUS; COLL names the binary (all_reduce ...).
# Lines starting with # are skipped. The cases run in the file's order, each under a timeout
# (T_CASE, 60 s), until BUDGET_S (500 s) is spent. NVLink multicast stays off for every child.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -u -o pipefail
cases=$1
P=${BATON_PREBUILT:?set BATON_PREBUILT to a prebuild.sh folder}
P=$(cd "$P" && pwd)
OUT=${OUT:-/tmp/sweep-out}
WORK=${WORK:-/tmp/sweep}
T_CASE=${T_CASE:-60}
BUDGET_S=${BUDGET_S:-500}
mkdir -p "$OUT" "$WORK/logs"
if [ -z "${STOCK_NCCL_LIB:-}" ]; then
  STOCK_NCCL_LIB=$(python3 -c 'import os, nvidia.nccl
for p in nvidia.nccl.__path__:
    f = os.path.join(p, "lib", "libnccl.so.2")
    if os.path.exists(f): print(f); break' 2>/dev/null || true)
fi
STOCK_DIR=$(dirname "${STOCK_NCCL_LIB:?stock libnccl.so.2 not found}")
tsv=$OUT/sweep.tsv
printf 'case\tcoll\tsize\toop_us\tip_us\twrong\n' >"$tsv"
nvidia-smi -L >"$WORK/logs/env.log" 2>&1
nvidia-smi topo -m >>"$WORK/logs/env.log" 2>&1
start=$SECONDS
while read -r line; do
  case "$line" in '' | '#'*) continue ;; esac
  eval "set -- $line"
  name=$1 lib=$2 ng=$3 coll=$4 args=$5
  shift 5
  left=$((BUDGET_S - (SECONDS - start)))
  if [ "$left" -lt 10 ]; then
    echo "SKIP $name: budget spent"
    continue
  fi
  t=$T_CASE
  [ "$t" -gt "$left" ] && t=$left
  case "$lib" in
    ours) dir=$P ;;
    alt:*) dir=$P/${lib#alt:} ;;
    *) dir=$STOCK_DIR ;;
  esac
  devs=$(seq -s, 0 $((ng - 1)))
  log=$WORK/logs/$name.log
  # shellcheck disable=SC2086
  env CUDA_VISIBLE_DEVICES="$devs" LD_LIBRARY_PATH="$dir:$P/nccl-tests" NCCL_DEBUG=${NCCL_DEBUG:-VERSION} \
    "$@" timeout "$t" "$P/nccl-tests/${coll}_perf" -g "$ng" $args >"$log" 2>&1
  rc=$?
  banner=$(grep -m1 -o 'NCCL version [^ ]*' "$log" || true)
  awk -v c="$name" -v k="$coll" '$1 ~ /^[0-9]+$/ && NF >= 12 && $2 ~ /^[0-9]+$/ {
      printf "%s\t%s\t%s\t%s\t%s\t%s/%s\n", c, k, $1, $6, $(NF-3), $9, $NF }' "$log" >>"$tsv"
  # the checked rows' #wrong (N/A when unchecked), then size:time of the out-of-place runs
  wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 { n++; if ($9 ~ /^[0-9]+$/) w += $9; if ($NF ~ /^[0-9]+$/) w += $NF }
    END { printf "rows %d wrong %d", n, w }' "$log")
  printf '%-12s rc %-3s %-28s %-20s %s\n' "$name" "$rc" "${banner#NCCL version }" "$wrong" \
    "$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 { printf "%s:%s ", $1, $6 }' "$log" | cut -c1-150)"
done <"$cases"
tar czf "$OUT/sweep.tgz" -C "$WORK" logs
echo "sweep: $((SECONDS - start)) s"
