#!/usr/bin/env bash
# Baton's GPU verification harness: run on the device machine from the repository root
# (tests/gpu/README.md). Builds Baton and nccl-tests, then runs the selected stages, each command
# under a timeout and inside one overall time budget, and compares Baton with the stock NCCL
# that the machine's PyTorch carries, same binaries, same run:
#   unit       GPU test binaries under $BUILD_DIR/tests/gpu (test_cuda_exec, ...)
#   exec       baton-perf's own checked sweep of every collective (Baton, and stock as a control)
#   nccltests  nccl-tests correctness (#wrong) on Baton: -g N and -t N, forced algo/proto,
#              every datatype x op, other roots, CUDA graphs
#   perf       nccl-tests sweeps under stock and Baton, communicator init/destroy times
#   torch      torchrun checks under stock and Baton (LD_PRELOAD), DDP loss comparison,
#              torch all_reduce sweep
#   onegpu     (not in the default list) one rank on one GPU beside stock: nccl-tests -g 1 sweeps
#              8 B..1 GiB (out of place and in place apart), CUDA-graph replay of small
#              all-reduce, broadcast, all-gather, sendrecv (-G 50: the GPU's time per operation),
#              -c 1 checks
#   launch     (not in the default list) tests/gpu/bench_launch.cu: the executor kernel's fixed
#              cost against an empty kernel and a memcpy node (graph replay, %globaltimer), and
#              ncu's report of one launch; tests/gpu/bench_call.cu: the host's time per call of
#              one-rank collectives, stock and Baton (LAUNCH_BENCHES picks; logs/launch)
#   micro      (not in the default list; MICRO="push relay") tests/gpu/bench_push.cu: how fast a
#              block pushes data into a peer GPU, one knob of the executor's Simple step at a
#              time; tests/gpu/bench_relay.cu: a Reduce chain's traffic, consumers included
#              (logs/micro)
#   diag       (not in the default list) Baton built with BATON_DEVICE_TRACE: step timelines of
#              small and large all_reduce per algorithm/protocol; and a channel-count sweep of
#              large messages. Logs only (logs/diag), judged by a person, not by the harness.
# Output: $OUT/summary.txt (also printed last), $OUT/perf.md, $OUT/env.log, $OUT/results.tsv,
# $OUT/logs.tar.gz (every log). Exit status 0 only when no check failed.
#
# Environment: STAGES (default unit,exec,nccltests,perf,torch; the build always runs, except for
# STAGES=micro alone), FULL=1
# (long sweeps), BUDGET_S (540), NGPUS (all), BUILD_DIR (build-gpu), CORR_MAX, CORR_ITERS,
# PERF_MAX_AR, PERF_MAX, PERF_ITERS, PERF_WARMUP, PERF_COLLS, BENCH_FACTOR, STOCK_NCCL_LIB, T_* limits,
# NT_ONLY (a regex: only the nccl-tests cases whose names match, e.g. '\.(shm|net)$'),
# UNIT_STRESS, UNIT_STRESS_VARIANTS (stage_unit),
# SHARE_GPU=1 (NGPUS ranks, default 2, share the machine's GPUs: NCCL_MULTI_RANK_GPU_ENABLE=1 and
# nccl-tests' devices taken modulo the GPU count), BATON_PREBUILT (a folder with libnccl.so.2,
# baton-perf, tests/test_*, nccl-tests/*_perf and bench_launch* built elsewhere: no build here),
# BATON_COMMIT.

# NVLink multicast must never be used on these machines (KINDS.md): first thing, for every child.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 2
GPU_DIR=$ROOT/tests/gpu
T0=$SECONDS

# ---- configuration ----------------------------------------------------------------------------
STAGES=${STAGES:-unit,exec,nccltests,perf,torch}
SHARE_GPU=${SHARE_GPU:-0}
BATON_PREBUILT=${BATON_PREBUILT:-}
if [ -n "$BATON_PREBUILT" ]; then BATON_PREBUILT=$(cd "$BATON_PREBUILT" && pwd); fi
if [ "$SHARE_GPU" = 1 ]; then
  # Several ranks on one GPU (issue 17): Baton allows it only under this variable; the patched
  # nccl-tests (nccl_tests_share.sh) take devices modulo the count under the second.
  export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_TESTS_SHARE_GPUS=1
fi
UNIT_STRESS=${UNIT_STRESS:-0} UNIT_STRESS_VARIANTS=${UNIT_STRESS_VARIANTS:-}
FULL=${FULL:-0}
BUDGET_S=${BUDGET_S:-540}
BUILD_DIR=${BUILD_DIR:-build-gpu}
BUILD=$ROOT/$BUILD_DIR
OUT=${OUT:-$BUILD/out}
WORK=${WORK:-/tmp/baton-gpu}
LOGS=$WORK/logs
RESULTS=$OUT/results.tsv
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
if [ "$FULL" = 1 ]; then
  d_corr_max=1G d_corr_iters=5 d_perf_max=8G d_bench_factor=2
else
  d_corr_max=64M d_corr_iters=5 d_perf_max=1G d_bench_factor=4
fi
CORR_MAX=${CORR_MAX:-$d_corr_max}
CORR_ITERS=${CORR_ITERS:-$d_corr_iters}
PERF_MAX_AR=${PERF_MAX_AR:-8G}
PERF_MAX=${PERF_MAX:-$d_perf_max}
PERF_ITERS=${PERF_ITERS:-20}
PERF_WARMUP=${PERF_WARMUP:-5}
PERF_COLLS=${PERF_COLLS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv}
BENCH_FACTOR=${BENCH_FACTOR:-$d_bench_factor}
RESERVE_S=25   # kept back for the report at the end
MIN_RUN_S=15   # a command that would get less than this is skipped instead
# Per-command limits (seconds); the budget can cut them shorter.
T_BUILD=${T_BUILD:-420} T_NTBUILD=${T_NTBUILD:-240} T_UNIT=${T_UNIT:-240} T_EXEC=${T_EXEC:-120}
T_CORR=${T_CORR:-90} T_PERF=${T_PERF:-150} T_INIT=${T_INIT:-90} T_TORCH=${T_TORCH:-240}
T_ONE=${T_ONE:-120} ONE_ITERS=${ONE_ITERS:-100} ONE_REPS=${ONE_REPS:-4}
LAUNCH_BENCHES=${LAUNCH_BENCHES:-launch call} CALL_ARGS=${CALL_ARGS:-5000 5}
ONE_COLLS=${ONE_COLLS:-all_reduce all_gather broadcast sendrecv reduce_scatter alltoall}

mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$LOGS"/{build,unit,exec,nccltests,onegpu,launch,micro,perf,init,torch,diag}
: >"$RESULTS"
declare -A STAGE_SECS=()

# ---- helpers ----------------------------------------------------------------------------------
elapsed() { echo $((SECONDS - T0)); }
remaining() { echo $((BUDGET_S - (SECONDS - T0))); }
selected() { [[ ",$STAGES," == *",$1,"* ]]; }

# record STAGE NAME STATUS NOTE   (STATUS: PASS FAIL SKIP, MET/MISS for perf targets, REF when a
# stock run made only to show what stock does fails: stock's failure, not Baton's)
record() {
  local note=${4:-}
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${note//$'\t'/ }" >>"$RESULTS"
  if [ "$3" = FAIL ]; then echo "  FAIL $1/$2: $note"; fi
}

pack_logs() { tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null || true; }

# run_logged LOG LIMIT CMD...: CMD under timeout(1), output to LOG. Returns CMD's status (124 or
# 137 when it ran out of time) or 200 when the budget had no room left for it.
run_logged() {
  local log=$1 limit=$2
  shift 2
  local left=$(($(remaining) - RESERVE_S))
  if ((left < MIN_RUN_S)); then
    echo "# skipped: time budget spent ($(elapsed)s of ${BUDGET_S}s)" >"$log"
    return 200
  fi
  ((limit > left)) && limit=$left
  local start=$SECONDS rc
  echo "# $(date -u +%H:%M:%S) limit ${limit}s: $*" >"$log"
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "# rc=$rc after $((SECONDS - start))s" >>"$log"
  return "$rc"
}

# status_of RC: the word for a finished command.
status_of() {
  case $1 in
    0) echo PASS ;;
    200) echo SKIP ;;
    *) echo FAIL ;;
  esac
}
why() {
  case $1 in
    124 | 137) echo "timed out" ;;
    200) echo "no time left in the budget" ;;
    *) echo "exit $1" ;;
  esac
}

# banner_lib LOG: ours / stock / none, from the NCCL_DEBUG=VERSION banner.
banner_lib() {
  local v
  v=$(grep -o -m1 'NCCL version [^ ]*' "$1" 2>/dev/null)
  if [ -z "$v" ]; then
    echo none
  elif grep -qi 'NCCL version [^ ]*baton' "$1"; then
    echo ours
  else
    echo stock
  fi
}

# lib_env LIB: sets LENV, the environment that makes dynamically linked programs load LIB's
# libnccl.so.2. LD_PRELOAD as well as LD_LIBRARY_PATH, because binaries built by CMake carry a
# RUNPATH to the build tree.
lib_env() {
  local dir lib
  if [ "$1" = ours ]; then dir=$OURS_DIR lib=$OURS_LIB; else dir=$STOCK_DIR lib=$STOCK_NCCL_LIB; fi
  LENV=("LD_LIBRARY_PATH=$dir:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "LD_PRELOAD=$lib" "NCCL_DEBUG=VERSION")
}

stage_begin() {
  STAGE_START=$SECONDS
  echo "== $1 ($(elapsed)s elapsed)"
}
stage_end() {
  STAGE_SECS[$1]=$((SECONDS - STAGE_START))
  pack_logs
}

# ---- environment ------------------------------------------------------------------------------
if [ "$SHARE_GPU" = 1 ]; then
  NGPUS=${NGPUS:-2}
else
  NGPUS=${NGPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
fi
# The library's commit: a prebuilt folder's BUILD_INFO names it (the work tree's HEAD may differ).
prebuilt_commit=""
if [ -n "$BATON_PREBUILT" ] && [ -f "$BATON_PREBUILT/BUILD_INFO" ]; then
  prebuilt_commit=$(sed -n '1s/^commit \([^, ]*\).*/\1/p' "$BATON_PREBUILT/BUILD_INFO")
fi
COMMIT=${BATON_COMMIT:-${prebuilt_commit:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}}
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "${STOCK_NCCL_LIB:-}" ]; then
  STOCK_NCCL_LIB=$(python3 -c 'import os, nvidia.nccl
for p in nvidia.nccl.__path__:
    f = os.path.join(p, "lib", "libnccl.so.2")
    if os.path.exists(f):
        print(f)
        break' 2>/dev/null)
  STOCK_NCCL_LIB=${STOCK_NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2}
fi
STOCK_DIR=$(dirname "$STOCK_NCCL_LIB")
STOCK_HOME=$(dirname "$STOCK_DIR")
OURS_LIB="" OURS_DIR=""

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $COMMIT"
  echo "stages: $STAGES  FULL=$FULL  budget ${BUDGET_S}s"
  echo "GPUs: $NGPUS ($GPU_NAME)"
  echo "stock libnccl: $STOCK_NCCL_LIB"
  echo "--- nvidia-smi -L"
  nvidia-smi -L
  echo "--- nvidia-smi topo -m"
  nvidia-smi topo -m
  echo "--- nvidia-smi nvlink -s (GPU 0)"
  nvidia-smi nvlink -s -i 0 2>&1 | head -20
  echo "--- nvcc --version"
  nvcc --version
  echo "--- tools"
  cmake --version | head -1
  gcc --version | head -1
  echo "nproc: $(nproc)"
  echo "pkg-config: $(pkg-config --version 2>/dev/null || echo missing); libcheck: $(pkg-config --modversion check 2>/dev/null || echo missing)"
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  echo "--- multicast switches"
  env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)='
} >"$OUT/env.log" 2>&1

# ---- build (always) ---------------------------------------------------------------------------
have_check() {
  command -v pkg-config >/dev/null 2>&1 || return 1
  pkg-config --exists check && return 0
  # libcheck carried in by tests/gpu/stage_deps.sh (the image may not have it).
  local deps=$ROOT/third_party/gpu-deps/check/lib/pkgconfig
  if [ -d "$deps" ]; then
    export PKG_CONFIG_PATH=$deps${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    pkg-config --exists check && return 0
  fi
  return 1
}

# cmake_build LOG DIR "TARGETS" [-DVAR=value ...]: configures DIR as a Release sm_90 build of the
# repository with the extra cache settings (each one argument, spaces allowed), then builds
# TARGETS, under T_BUILD.
cmake_build() {
  local log=$1 dir=$2 targets=$3
  shift 3
  run_logged "$log" "$T_BUILD" bash -c 'cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release \
    -DBATON_CUDA_ARCHS=90 "${@:4}" && cmake --build "$2" -j"$(nproc)" --target $3' \
    cmake_build "$ROOT" "$dir" "$targets" "$@"
}

build_baton() {
  local testing=OFF rc log=$LOGS/build/baton.log
  if have_check; then testing=ON; fi
  local start=$SECONDS
  cmake_build "$log" "$BUILD" "nccl baton-perf" -DBATON_GPU_TESTS=ON -DBUILD_TESTING=$testing
  rc=$?
  BUILD_LIB_S=$((SECONDS - start))
  OURS_LIB=$(find "$BUILD" -maxdepth 2 -name libnccl.so.2 2>/dev/null | head -1)
  if [ "$rc" != 0 ] || [ -z "$OURS_LIB" ]; then
    record build libnccl FAIL "$(why "$rc"); see logs/build/baton.log"
    return 1
  fi
  OURS_LIB=$(cd "$(dirname "$OURS_LIB")" && pwd)/libnccl.so.2
  OURS_DIR=$(dirname "$OURS_LIB")
  record build libnccl PASS "${BUILD_LIB_S}s (Release, sm_90)"
  if ! selected unit; then
    :
  elif [ "$testing" = ON ]; then
    build_gpu_tests
  else
    record build gpu-tests SKIP "libcheck not found, so BUILD_TESTING=OFF and tests/ is not configured (run tests/gpu/stage_deps.sh here, carry third_party)"
  fi
  return 0
}

# Only the targets of tests/gpu/test_*.{c,cu} (the CPU unit tests are CI's job, not worth the lease).
build_gpu_tests() {
  local help src name start rc
  local -a targets=()
  help=$(cmake --build "$BUILD" --target help 2>/dev/null)
  for src in "$ROOT"/tests/gpu/test_*.c "$ROOT"/tests/gpu/test_*.cu; do
    [ -f "$src" ] || continue
    name=$(basename "$src")
    name=${name%.*}
    if grep -q "\.\.\. $name\$" <<<"$help"; then targets+=("$name"); fi
  done
  if [ "${#targets[@]}" = 0 ]; then
    record build gpu-tests SKIP "no tests/gpu/test_* target configured"
    return
  fi
  start=$SECONDS
  run_logged "$LOGS/build/gpu-tests.log" "$T_BUILD" cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}"
  rc=$?
  record build gpu-tests "$(status_of "$rc")" "${targets[*]}: $((SECONDS - start))s$([ "$rc" = 0 ] || echo ", $(why "$rc")")"
}

NT_SRC=$ROOT/third_party/nccl-tests
NT_BIN=""
build_nccl_tests() {
  if [ ! -f "$NT_SRC/src/Makefile" ]; then
    record build nccl-tests SKIP "third_party/nccl-tests absent: call the device tool with carry [\"third_party\"]"
    return 1
  fi
  local home=$BUILD/nccl-home out=$BUILD/nccl-tests note rc
  local gencode="-gencode=arch=compute_90,code=sm_90"
  rm -rf "$home"
  mkdir -p "$home/include" "$home/lib"
  cp include/nccl.h "$home/include/"
  if [ -f include/nccl_device.h ]; then
    cp -r include/nccl_device* "$home/include/"
    note="headers: ours"
  else
    cp -r "$STOCK_HOME"/include/nccl_device* "$home/include/"
    note="headers: our nccl.h + stock nccl_device.h (Baton ships none)"
  fi
  ln -sf "$OURS_LIB" "$home/lib/libnccl.so"
  local sum
  sum=$(md5sum <"$home/include/nccl.h" | cut -c1-32)
  if [ -f "$out/.nccl-h-sum" ] && [ "$(cat "$out/.nccl-h-sum")" != "$sum" ]; then rm -rf "$out"; fi
  local start=$SECONDS
  # A copy whose device choice wraps around the GPUs when NCCL_TESTS_SHARE_GPUS is set (ranks
  # sharing a GPU); unchanged otherwise.
  local src=$BUILD/nccl-tests-src
  if ! bash "$GPU_DIR/nccl_tests_share.sh" "$NT_SRC" "$src" >"$LOGS/build/nccl-tests-share.log" 2>&1; then
    record build nccl-tests-share FAIL "see logs/build/nccl-tests-share.log; sharing a GPU needs it"
    src=$NT_SRC
  fi
  run_logged "$LOGS/build/nccl-tests.log" "$T_NTBUILD" make -C "$src" -j"$(nproc)" MPI=0 \
    CUDA_HOME="$CUDA_HOME" NCCL_HOME="$home" BUILDDIR="$out" NVCC_GENCODE="$gencode"
  rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 200 ]; then
    # Our header (or a symbol nccl-tests links against) broke the build: build against stock's
    # headers and library instead; the binaries still load either library at run time.
    home=$BUILD/nccl-home-stock out=$BUILD/nccl-tests-stockhdr
    rm -rf "$home" "$out"
    mkdir -p "$home/lib"
    cp -r "$STOCK_HOME/include" "$home/"
    ln -sf "$STOCK_NCCL_LIB" "$home/lib/libnccl.so"
    sum=stock
    run_logged "$LOGS/build/nccl-tests-stockhdr.log" "$T_NTBUILD" make -C "$NT_SRC" -j"$(nproc)" \
      MPI=0 CUDA_HOME="$CUDA_HOME" NCCL_HOME="$home" BUILDDIR="$out" NVCC_GENCODE="$gencode"
    rc=$?
    note="headers: STOCK (build against ours failed, see logs/build/nccl-tests.log)"
    record build nccl-tests-ours-headers FAIL "see logs/build/nccl-tests.log"
  fi
  if [ "$rc" != 0 ] || [ ! -x "$out/all_reduce_perf" ]; then
    record build nccl-tests FAIL "$(why "$rc")"
    return 1
  fi
  echo "$sum" >"$out/.nccl-h-sum"
  NT_BIN=$out
  record build nccl-tests PASS "$((SECONDS - start))s, $note"
  {
    echo "--- which libnccl nccl-tests loads"
    for lib in stock ours; do
      lib_env "$lib"
      echo "$lib: $(env "${LENV[@]}" ldd "$NT_BIN/all_reduce_perf" | grep -i nccl | tr -s ' \t' ' ')"
    done
  } >>"$OUT/env.log" 2>&1
  return 0
}

# BATON_PREBUILT: what a build would make, made elsewhere (same toolkit, sm_90).
use_prebuilt() {
  OURS_LIB=$BATON_PREBUILT/libnccl.so.2 OURS_DIR=$BATON_PREBUILT
  if [ ! -f "$OURS_LIB" ]; then
    record build libnccl FAIL "BATON_PREBUILT=$BATON_PREBUILT has no libnccl.so.2"
    return 1
  fi
  record build libnccl PASS "prebuilt: $BATON_PREBUILT ($(cat "$BATON_PREBUILT/BUILD_INFO" 2>/dev/null | head -1))"
  mkdir -p "$BUILD/python/nvidia/nccl/lib" # torch's preload, as the CMake build makes it
  ln -sf "$OURS_LIB" "$BUILD/python/nvidia/nccl/lib/libnccl.so.2"
  if [ -x "$BATON_PREBUILT/nccl-tests/all_reduce_perf" ]; then
    NT_BIN=$BATON_PREBUILT/nccl-tests NT_OK=1
    record build nccl-tests PASS "prebuilt"
  fi
  return 0
}

stage_begin build
BUILD_OK=0 NT_OK=0
TEST_DIR=$BUILD/tests/gpu
if [ -n "$BATON_PREBUILT" ]; then
  TEST_DIR=$BATON_PREBUILT/tests
  use_prebuilt && BUILD_OK=1
elif [ "$STAGES" = micro ]; then # the microbenchmarks need nvcc alone: no library build (~3 min)
  BUILD_OK=1
  record build libnccl SKIP "STAGES=micro builds no library"
elif build_baton; then
  BUILD_OK=1
  if selected nccltests || selected perf || selected diag; then build_nccl_tests && NT_OK=1; fi
fi
echo "ours libnccl: ${OURS_LIB:-none}" >>"$OUT/env.log"
stage_end build

# ---- unit: GPU test binaries ------------------------------------------------------------------
stage_unit() {
  local found=0 t name rc args
  for t in "$TEST_DIR"/test_*; do
    if [ ! -f "$t" ] || [ ! -x "$t" ]; then continue; fi
    found=1
    # test_windows takes its rank count (processes on GPU 0): 2 and 4, each a row of its own
    local -a runs=("")
    [ "$(basename "$t")" = test_windows ] && runs=(2 4)
    for args in "${runs[@]}"; do
      name=$(basename "$t")${args:+.r$args}
      run_logged "$LOGS/unit/$name.log" "$T_UNIT" env CK_DEFAULT_TIMEOUT=120 NCCL_DEBUG=WARN \
        "LD_LIBRARY_PATH=$OURS_DIR:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$t" ${args:+"$args"}
      rc=$?
      record unit "$name" "$(status_of "$rc")" "$(why "$rc"): $(grep -v '^# ' "$LOGS/unit/$name.log" | tail -n 1 | cut -c1-150)"
    done
  done
  [ "$found" = 1 ] || record unit gpu-tests SKIP "no $TEST_DIR/test_* binaries (BATON_GPU_TESTS target not built?)"
  [ "$UNIT_STRESS" -gt 0 ] 2>/dev/null || return 0
  unit_stress base "$BUILD"
  local v vname vbuild
  for v in $UNIT_STRESS_VARIANTS; do
    vname=${v%%:*} vbuild=$BUILD-stress-${v%%:*}
    cmake_build "$LOGS/unit/build-stress.$vname.log" "$vbuild" test_cuda_exec \
      -DBATON_GPU_TESTS=ON -DBUILD_TESTING=ON "-DCMAKE_CUDA_FLAGS=${v#*:}"
    rc=$?
    if [ "$rc" = 0 ]; then
      unit_stress "$vname" "$vbuild"
    else
      record unit "stress.$vname" FAIL "build: $(why "$rc")"
    fi
  done
}

# UNIT_STRESS=N: test_cuda_exec --stress N (the large all-to-all N times per protocol), with the
# build under test and with each of UNIT_STRESS_VARIANTS ("name:-DKNOB=0 ...", a CUDA flag set per
# variant: a knob's A/B shows the failure it prevents).
unit_stress() {
  local name=$1 build=$2 log=$LOGS/unit/stress.$1.log rc
  run_logged "$log" "$T_UNIT" env NCCL_DEBUG=WARN "$build/tests/gpu/test_cuda_exec" --stress "$UNIT_STRESS"
  rc=$?
  record unit "stress.$name" "$(status_of "$rc")" "$(why "$rc"): $(grep '^stress' "$log" | sed 's/ float count=70001//' | tr '\n' ';' | cut -c1-150)"
}

# ---- exec: baton-perf's own checked sweep ------------------------------------------------------
BPERF=$BUILD/tools/baton-perf
[ -n "$BATON_PREBUILT" ] && BPERF=$BATON_PREBUILT/baton-perf
stage_exec() {
  local lib rc log
  if [ ! -x "$BPERF" ]; then
    record exec baton-perf SKIP "no $BPERF"
    return
  fi
  for lib in ours stock; do
    lib_env "$lib"
    log=$LOGS/exec/baton-perf.$lib.log
    run_logged "$log" "$T_EXEC" env "${LENV[@]}" "$BPERF" -c all -b 8 -e "$CORR_MAX" -f 8 -i 5 -w 1
    rc=$?
    local got
    got=$(banner_lib "$log")
    if [ "$rc" = 0 ] && [ "$got" != "$lib" ]; then
      record exec "baton-perf.$lib" FAIL "ran on the $got library"
    else
      record exec "baton-perf.$lib" "$(status_of "$rc")" "$(grep -m1 -o '[0-9]* wrong values in total' "$log" || why "$rc")$([ "$lib" = stock ] && echo ' (control: checks the tool)')"
    fi
  done
}

# ---- nccltests: correctness on Baton ----------------------------------------------------------
# nt_case NAME "ENV=v ..." BINARY ARGS...: one nccl-tests run on Baton, judged by #wrong,
# failure lines, exit status and the library banner.
nt_case() {
  local name=$1 extra=$2 bin=$3
  shift 3
  local log=$LOGS/nccltests/$name.log rc verdict
  [ -n "${NT_ONLY:-}" ] && ! [[ $name =~ $NT_ONLY ]] && return # a chosen subset (no record)
  local -a envs=()
  [ -n "$extra" ] && read -r -a envs <<<"$extra"
  if [ ! -x "$NT_BIN/$bin" ]; then
    record nccltests "$name" SKIP "no $bin"
    return
  fi
  lib_env ours
  run_logged "$log" "$T_CORR" env "${LENV[@]}" "${envs[@]}" "$NT_BIN/$bin" "$@"
  rc=$?
  if [ "$rc" = 200 ]; then
    record nccltests "$name" SKIP "$(why 200)"
    return
  fi
  if verdict=$(python3 "$GPU_DIR/parse_nccl_tests.py" check "$log" --expect-lib ours); then
    record nccltests "$name" PASS "$verdict"
  else
    record nccltests "$name" FAIL "$verdict"
  fi
}

stage_nccltests() {
  local n=$NGPUS b algo proto
  local common=(-b 8 -e "$CORR_MAX" -f 4 -c 1 -n "$CORR_ITERS" -w 1)
  local all_bins=(all_reduce all_gather broadcast reduce reduce_scatter alltoall scatter gather sendrecv alltoallv)
  for b in "${all_bins[@]}"; do
    nt_case "$b.g$n" "" "${b}_perf" "${common[@]}" -g "$n"
  done
  if [ "$FULL" = 1 ] && [ "$n" -gt 2 ]; then # the issue's -g 2 as well, on two of the GPUs
    for b in "${all_bins[@]}"; do
      nt_case "$b.g2" "" "${b}_perf" "${common[@]}" -g 2
    done
  fi
  # hypercube's rounds depend on each other (a round sends what the previous one received). With
  # -g N one thread's outer group merges every round of every GPU into one group, where NCCL does
  # not order them: stock 2.28.9 fails it exactly like Baton on 4 H200s (2026-11-21), and both
  # pass with a thread per GPU. So it runs as -t N -g 1 only.
  local thread_bins=(all_reduce all_gather sendrecv hypercube)
  [ "$FULL" = 1 ] && thread_bins=("${all_bins[@]}" hypercube)
  for b in "${thread_bins[@]}"; do
    if [ "$SHARE_GPU" = 1 ]; then
      # Ranks on one GPU in one process, each driven by its own thread: nccl-tests' checks call
      # cudaDeviceSynchronize, which waits for the other ranks' kernels too, and those wait for
      # this thread's next launch (run 52: all three hung). One thread (-g N) or processes.
      record nccltests "$b.t$n" SKIP "SHARE_GPU: -t mode synchronizes the whole shared device from each thread"
      continue
    fi
    nt_case "$b.t$n" "" "${b}_perf" "${common[@]}" -t "$n" -g 1
  done
  for algo in Ring Tree; do
    for proto in Simple LL LL128; do
      nt_case "all_reduce.$algo.$proto" "NCCL_ALGO=$algo NCCL_PROTO=$proto" all_reduce_perf "${common[@]}" -g "$n"
    done
  done
  # the direct algorithms, forced (they run LL; up to 1M keeps it short)
  for b in all_reduce all_gather reduce_scatter broadcast; do
    nt_case "$b.OneShot" "NCCL_ALGO=OneShot" "${b}_perf" -b 8 -e 1M -f 4 -c 1 -n 5 -w 1 -g "$n"
  done
  # the same over windows every rank registers (-R 2: ncclCommWindowRegister, symmetric), which
  # OneShot reads in place (zero copy); and the model's own choices over them
  for b in all_reduce all_gather reduce_scatter broadcast; do
    nt_case "$b.OneShot.R2" "NCCL_ALGO=OneShot" "${b}_perf" -b 8 -e 1M -f 4 -c 1 -n 5 -w 1 -R 2 -g "$n"
  done
  nt_case "all_reduce.R2" "" all_reduce_perf -b 8 -e "$CORR_MAX" -f 8 -c 1 -n 5 -w 1 -R 2 -g "$n"
  nt_case "all_reduce.TwoShot" "NCCL_ALGO=TwoShot" all_reduce_perf -b 8 -e 1M -f 4 -c 1 -n 5 -w 1 -g "$n"
  nt_case "all_reduce.OneShot.types-ops" "NCCL_ALGO=OneShot" all_reduce_perf -b 8 -e 64K -f 32 -c 1 \
    -n 2 -w 1 -d all -o all -g "$n"
  if [ "$FULL" = 1 ]; then
    for proto in Simple LL LL128; do
      for b in all_gather reduce_scatter broadcast reduce; do
        nt_case "$b.Ring.$proto" "NCCL_ALGO=Ring NCCL_PROTO=$proto" "${b}_perf" "${common[@]}" -g "$n"
      done
    done
  fi
  local dtype_bins=(all_reduce)
  [ "$FULL" = 1 ] && dtype_bins=(all_reduce reduce_scatter reduce all_gather broadcast)
  for b in "${dtype_bins[@]}"; do
    nt_case "$b.all-types-ops" "" "${b}_perf" -b 8 -e 1M -f 32 -c 1 -n 2 -w 1 -d all -o all -g "$n"
  done
  nt_case "broadcast.root$((n - 1))" "" broadcast_perf "${common[@]}" -g "$n" -r $((n - 1))
  nt_case "reduce.root$((n - 1))" "" reduce_perf "${common[@]}" -g "$n" -r $((n - 1))
  # GPU buffers over the other transports: SHM (P2P off) and NET over sockets, driven by the
  # proxy (P2P and SHM off; torch's net case gives each rank a host of its own too).
  local tb
  for tb in all_reduce sendrecv; do # (45 s each at most: a hang must not eat the budget)
    T_CORR=45 nt_case "$tb.shm" "NCCL_P2P_DISABLE=1" "${tb}_perf" -b 8 -e 16M -f 8 -c 1 -n 5 -w 1 \
      -g "$n"
    T_CORR=45 nt_case "$tb.net" "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" "${tb}_perf" -b 8 -e 16M \
      -f 8 -c 1 -n 5 -w 1 -g "$n"
  done
  nt_case "all_reduce.graph" "" all_reduce_perf -b 8 -e "$CORR_MAX" -f 8 -c 1 -n 5 -w 1 -G 5 -g "$n"
  nt_case "all_reduce.blocking" "" all_reduce_perf -b 8 -e 1M -f 8 -c 1 -n 5 -w 1 -z 1 -g "$n"
}

# ---- perf: stock vs ours, same binary, same run -----------------------------------------------
stage_perf() {
  local n=$NGPUS coll lib rc max log i
  if [ "$NT_OK" = 1 ]; then
    for coll in $PERF_COLLS; do
      max=$PERF_MAX
      [ "$coll" = all_reduce ] && max=$PERF_MAX_AR
      for lib in stock ours; do
        log=$LOGS/perf/$coll.$lib.log
        lib_env "$lib"
        run_logged "$log" "$T_PERF" env "${LENV[@]}" "$NT_BIN/${coll}_perf" -b 8 -e "$max" -f 2 -c 0 \
          -n "$PERF_ITERS" -w "$PERF_WARMUP" -g "$n"
        rc=$?
        if [ "$rc" = 0 ]; then
          local v
          if v=$(python3 "$GPU_DIR/parse_nccl_tests.py" check "$log" --expect-lib "$lib"); then
            record perf "$coll.$lib" PASS "$v"
          else
            record perf "$coll.$lib" FAIL "$v"
          fi
        else
          record perf "$coll.$lib" "$(status_of "$rc")" "$(why "$rc")"
        fi
      done
    done
  else
    record perf nccl-tests SKIP "nccl-tests not built"
  fi
  # Communicator init / first all-reduce / destroy: ctypes timer (no torch), then baton-perf.
  for lib in stock ours; do
    local libpath=$STOCK_NCCL_LIB
    [ "$lib" = ours ] && libpath=$OURS_LIB
    log=$LOGS/init/ctypes.$lib.log
    run_logged "$log" "$T_INIT" env NCCL_DEBUG=VERSION python3 "$GPU_DIR/nccl_init_time.py" \
      --lib "$libpath" --ngpus "$n" --reps 4 --timeout $((T_INIT - 10))
    rc=$?
    record perf "init-time.$lib" "$(status_of "$rc")" "$(grep -m1 '^INIT_SUMMARY' "$log" | cut -d' ' -f2- || true)$([ "$rc" = 0 ] || echo " $(why "$rc")")"
    if [ -x "$BPERF" ]; then
      lib_env "$lib"
      for i in 1 2 3; do
        run_logged "$LOGS/init/bperf.$lib.$i.log" 60 env "${LENV[@]}" "$BPERF" -b 8 -e 8 -f 2 -i 1 -w 0 -c allreduce
      done
    fi
  done
}

# ---- torch: PyTorch on stock and on Baton (LD_PRELOAD) -----------------------------------------
torch_run() { # torch_run NAME LIB [ENV=v ...] -- SCRIPT ARGS...
  local name=$1 lib=$2
  shift 2
  local -a envs=()
  while [ "$1" != -- ]; do
    envs+=("$1")
    shift
  done
  shift
  local log=$LOGS/torch/$name.log rc
  local -a base=(-u LD_PRELOAD PYTHONUNBUFFERED=1 NCCL_DEBUG=VERSION OMP_NUM_THREADS=1
    CUBLAS_WORKSPACE_CONFIG=:4096:8 "BATON_OURS_LIB=$OURS_LIB" "BATON_STOCK_LIB=$STOCK_NCCL_LIB"
    "BATON_EXPECT_LIB=$lib")
  # torch preloads nvidia/nccl/lib/libnccl.so.2 from the first sys.path entry that has one:
  # $BUILD/python holds a link to our library there, so torch maps the very file LD_PRELOAD names.
  [ "$lib" = ours ] && base+=("LD_PRELOAD=$OURS_LIB" "PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}")
  run_logged "$log" "$T_TORCH" env "${base[@]}" "${envs[@]}" python3 -m torch.distributed.run \
    --standalone --nproc_per_node="$NGPUS" "$@"
  rc=$?
  local got note
  got=$(banner_lib "$log")
  note=$(grep -m1 -E '^(TORCH_SUITE|destroy_process_group)' "$log" || true)
  if [ "$rc" = 0 ] && [ "$got" != "$lib" ]; then
    record torch "$name" FAIL "banner says $got library"
  elif [ "$rc" = 0 ]; then
    record torch "$name" PASS "$note"
  elif [ "${TORCH_REFERENCE:-0}" = 1 ] && [ "$(status_of "$rc")" = FAIL ]; then
    # stock run only to show what stock does with these settings: its failure is stock's
    record torch "$name" REF "stock itself fails: $(grep -m1 -E 'FAIL|Error|error' "$log" | cut -c1-160)"
  else
    record torch "$name" "$(status_of "$rc")" "$(why "$rc"); $(grep -m1 -E 'FAIL|Error|error' "$log" | cut -c1-160)"
  fi
}

stage_torch() {
  local suite=$GPU_DIR/torch/suite.py bench=$GPU_DIR/torch/bench_allreduce.py lib
  if [ "$SHARE_GPU" = 1 ]; then
    # NGPUS processes on the machine's GPUs (torch's device = local rank modulo the GPU count):
    # Baton only (stock 2.28 refuses two ranks on one GPU); P2P over the shared device, and SHM
    torch_run "share.suite.ours" ours -- "$suite" --tests collectives,groups,p2p,graph,ddp
    torch_run "share.shm.ours" ours NCCL_P2P_DISABLE=1 -- "$suite" --tests collectives,groups,p2p
    return
  fi
  for lib in stock ours; do
    torch_run "suite.$lib" "$lib" -- "$suite" --losses "$LOGS/torch/ddp_losses.$lib.txt"
  done
  # Results whose right value is whatever stock does (see ctx.probe): must match line for line.
  local ps po
  ps=$(grep '^ABI_PROBE' "$LOGS/torch/suite.stock.log" 2>/dev/null | sort)
  po=$(grep '^ABI_PROBE' "$LOGS/torch/suite.ours.log" 2>/dev/null | sort)
  if [ -n "$ps" ] && [ -n "$po" ]; then
    if [ "$ps" = "$po" ]; then
      record torch abi-probes PASS "$(wc -l <<<"$ps") results identical to stock's"
    else
      record torch abi-probes FAIL "differs from stock: $(diff <(echo "$ps") <(echo "$po") | grep '^>' | head -1 | cut -c1-150)"
    fi
  fi
  # SHM, and NET with every rank on a host of its own (suite.py sets NCCL_HOSTID per rank)
  torch_run "shm.ours" ours NCCL_P2P_DISABLE=1 -- "$suite" --tests collectives,groups,p2p
  torch_run "net.ours" ours NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 BATON_HOST_PER_RANK=1 -- \
    "$suite" --tests collectives,groups,p2p
  local variants=(ours)
  [ "$FULL" = 1 ] && variants=(stock ours)
  for lib in "${variants[@]}"; do
    TORCH_REFERENCE=$([ "$lib" = stock ] && echo 1 || echo 0)
    torch_run "no-device-id.$lib" "$lib" -- "$suite" --no-device-id --tests collectives,groups,p2p
    torch_run "nonblocking.$lib" "$lib" TORCH_NCCL_USE_COMM_NONBLOCKING=1 -- "$suite" \
      --tests collectives,groups,p2p
  done
  TORCH_REFERENCE=0
  if [ -f "$LOGS/torch/ddp_losses.stock.txt" ] || [ -f "$LOGS/torch/ddp_losses.ours.txt" ]; then
    local v rc
    v=$(python3 "$GPU_DIR/torch/compare_losses.py" "$LOGS/torch/ddp_losses.stock.txt" "$LOGS/torch/ddp_losses.ours.txt")
    rc=$?
    record torch ddp-losses-vs-stock "$(status_of "$rc")" "$v"
    LOSSES_LINE=$v
  fi
  for lib in stock ours; do
    torch_run "bench.$lib" "$lib" -- "$bench" --max-bytes 256M --factor "$BENCH_FACTOR"
  done
}

# ---- onegpu: one rank on one GPU beside stock (issue 17) ---------------------------------------
stage_onegpu() {
  local coll lib log rc
  if [ "$NT_OK" != 1 ]; then
    record onegpu all SKIP "nccl-tests not built"
    return
  fi
  for coll in $ONE_COLLS; do # results checked (Baton), then timed beside stock
    nt_case "one.$coll" "" "${coll}_perf" -b 8 -e 64M -f 8 -c 1 -n 2 -w 1 -g 1
  done
  nt_case "one.all_reduce.types-ops" "" all_reduce_perf -b 8 -e 1M -f 32 -c 1 -n 2 -w 1 -d all -o all -g 1
  nt_case "one.all_reduce.graph" "" all_reduce_perf -b 8 -e 1M -f 32 -c 1 -n 2 -w 1 -G 5 -g 1
  # Small sizes are the host's time per call, which jitters by microseconds (run 51: the same
  # library 5.4 and 17 us on average in two runs): ONE_REPS runs of each library, alternating,
  # with more iterations; the report takes each size's best run.
  local rep pin=()
  # the same few cores for both libraries: less scheduler jitter in the host-bound sizes
  command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 8 ] && pin=(taskset -c 4-7)
  for coll in $ONE_COLLS; do
    lib_env ours # a first run of each collective warms the machine up (not counted)
    run_logged "$LOGS/onegpu/warmup.$coll.log" "$T_ONE" env "${LENV[@]}" "${pin[@]}" \
      "$NT_BIN/${coll}_perf" -b 8 -e 1M -f 2 -c 0 -n 20 -w 5 -g 1
    for rep in $(seq 1 "$ONE_REPS"); do
      for lib in stock ours; do
        lib_env "$lib"
        log=$LOGS/onegpu/$coll.$lib.$rep.log
        run_logged "$log" "$T_ONE" env "${LENV[@]}" "${pin[@]}" "$NT_BIN/${coll}_perf" -b 8 -e 1G \
          -f 2 -c 0 -n "$ONE_ITERS" -w 20 -g 1
        rc=$?
        record onegpu "run.$coll.$lib.$rep" "$(status_of "$rc")" "$(why "$rc")"
      done
    done
  done
  # CUDA-graph replay: the GPU's time per operation; two runs each (run 51: one run of broadcast
  # gave 1.28 us at 512 B and 1.00 at 8 B for the same memcpy node)
  for coll in all_reduce broadcast all_gather sendrecv; do
    for rep in 1 2; do
      for lib in stock ours; do
        lib_env "$lib"
        log=$LOGS/onegpu/graph.$coll.$lib.$rep.log
        run_logged "$log" 60 env "${LENV[@]}" "${pin[@]}" "$NT_BIN/${coll}_perf" -b 8 -e 64K -f 8 \
          -c 0 -n 20 -w 5 -G 50 -g 1
        record onegpu "run.graph.$coll.$lib.$rep" "$(status_of $?)" ""
      done
    done
  done
  local out
  out=$(python3 "$GPU_DIR/parse_nccl_tests.py" onegpu --dir "$LOGS" --out "$OUT/onegpu.md" 2>&1)
  echo "$out" >"$LOGS/onegpu/compare.log"
  while IFS=$'\t' read -r tag st name status note; do
    [ "$tag" = RESULT ] && record "$st" "$name" "$status" "$note"
  done <<<"$out"
}

# ---- launch: the kernel's fixed cost (bench_launch.cu; a person reads logs/launch) -------------
stage_launch() {
  [[ " $LAUNCH_BENCHES " == *" launch "* ]] && launch_kernel
  [[ " $LAUNCH_BENCHES " == *" call "* ]] && launch_call
}

# bench_call (tests/gpu/bench_call.cu): the host's time per call of small one-rank collectives
# and of raw CUDA calls, stock and Baton alternating (CALL_REPS runs each), and Baton under each
# CALL_ENVS setting ("name:VAR=v,VAR2=w ..."): an A/B of a library knob at small sizes.
launch_call() {
  local bin=$BATON_PREBUILT/bench_call rep lib spec name
  if [ -z "$BATON_PREBUILT" ] || [ ! -x "$bin" ]; then
    bin=$BUILD/bench_call
    run_logged "$LOGS/launch/build_call.log" "$T_BUILD" nvcc -O3 -arch=sm_90 -Iinclude \
      -o "$bin" "$GPU_DIR/bench_call.cu" -L"$OURS_DIR" -l:libnccl.so.2
  fi
  local pin=()
  command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 8 ] && pin=(taskset -c 4-7)
  for rep in $(seq 1 "${CALL_REPS:-3}"); do
    for lib in stock ours; do
      lib_env "$lib"
      run_logged "$LOGS/launch/bench_call.$lib.$rep.log" 60 env "${LENV[@]}" "${pin[@]}" "$bin" \
        $CALL_ARGS
      record launch "bench_call.$lib.$rep" "$(status_of $?)" ""
    done
    for spec in ${CALL_ENVS:-}; do
      name=${spec%%:*}
      lib_env ours
      run_logged "$LOGS/launch/bench_call.$name.$rep.log" 60 env "${LENV[@]}" \
        $(tr ',' ' ' <<<"${spec#*:}") "${pin[@]}" "$bin" $CALL_ARGS
      record launch "bench_call.$name.$rep" "$(status_of $?)" ""
    done
  done
}

launch_kernel() {
  local bin=$BATON_PREBUILT/bench_launch tbin=$BATON_PREBUILT/bench_launch_trace rc
  if [ -z "$BATON_PREBUILT" ] || [ ! -x "$bin" ]; then
    bin=$BUILD/bench_launch tbin=$BUILD/bench_launch_trace
    run_logged "$LOGS/launch/build.log" "$T_BUILD" bash -c "nvcc -O3 -arch=sm_90 -lineinfo -Iinclude -Isrc \
      -o $bin $GPU_DIR/bench_launch.cu & nvcc -O3 -arch=sm_90 -DBATON_DEVICE_TRACE -Iinclude -Isrc \
      -o $tbin $GPU_DIR/bench_launch.cu & wait"
  fi
  run_logged "$LOGS/launch/bench_launch.log" 120 "$bin"
  rc=$?
  record launch bench_launch "$(status_of "$rc")" "$(grep -E '^(exec_ll|empty_smem|memcpy) ' "$LOGS/launch/bench_launch.log" | tr -s ' ' | tr '\n' ';' | cut -c1-180)"
  [ -x "$tbin" ] && run_logged "$LOGS/launch/bench_launch_trace.log" 120 "$tbin"
  if command -v ncu >/dev/null 2>&1; then
    run_logged "$LOGS/launch/ncu.exec.log" 150 ncu --set full -k regex:bench_exec -s 10 -c 2 "$bin" --ncu
    record launch ncu.exec "$(status_of $?)" "$(grep -m2 -E 'Duration' "$LOGS/launch/ncu.exec.log" | tr -s ' ' | tr '\n' ';')"
    run_logged "$LOGS/launch/ncu.empty.log" 90 ncu --section SpeedOfLight --section LaunchStats -k regex:empty -s 4 -c 2 "$bin" --ncu
  else
    record launch ncu SKIP "no ncu on this machine"
  fi
}

# ---- micro: the NVLink microbenchmarks (a person reads logs/micro) -----------------------------
# MICRO picks them: push (bench_push.cu, one knob of the Simple step at a time), relay
# (bench_relay.cu, a Reduce chain's whole traffic, consumers included).
MICRO=${MICRO:-push relay}
stage_micro() {
  local name bin log rc
  mkdir -p "$BUILD"
  for name in $MICRO; do
    bin=$BUILD/bench_$name log=$LOGS/micro/bench_$name.log
    run_logged "$LOGS/micro/build.$name.log" "$T_BUILD" nvcc -O3 -arch=sm_90 -o "$bin" \
      "$GPU_DIR/bench_$name.cu"
    rc=$?
    record micro "build.$name" "$(status_of "$rc")" "$(why "$rc")"
    [ "$rc" = 0 ] || continue
    run_logged "$log" 180 "$bin"
    rc=$?
    record micro "bench_$name" "$(status_of "$rc")" "$(grep -c '^move \|^relay ' "$log") configurations, $(grep -c 'WRONG' "$log") wrong; $(why "$rc")"
  done
}

# ---- diag: where the time goes (a person reads logs/diag) ---------------------------------------
DIAG_CHANNELS=${DIAG_CHANNELS:-}   # e.g. "24 32 48 64": large messages at fixed channel counts
DIAG_COLLS=${DIAG_COLLS:-all_reduce all_gather sendrecv}
DIAG_PROTOS=${DIAG_PROTOS-Ring/LL Ring/LL128 Ring/Simple Tree/LL Tree/LL128 Tree/Simple}
DIAG_TRACE=${DIAG_TRACE-default Tree/LL Ring/LL Ring/Simple}
# Build variants compared with the main build, same binaries, same sizes: "name:-DX=1,-DY=2 ..."
# (comma-separated flags for the C and the CUDA compiler, e.g. "u4:-DCUDA_EXEC_UNROLL=4"); the
# main build runs as "base".
DIAG_VARIANTS=${DIAG_VARIANTS:-}
DIAG_TRACE_COLL=${DIAG_TRACE_COLL:-all_reduce} # the collective DIAG_TRACE_LARGE traces
DIAG_STOCK_INFO=${DIAG_STOCK_INFO:-} # collectives run once under stock at NCCL_DEBUG=INFO (its channels)
DIAG_VARIANT_COLLS=${DIAG_VARIANT_COLLS:-all_reduce sendrecv alltoall broadcast}
DIAG_VARIANT_CHANNELS=${DIAG_VARIANT_CHANNELS:-} # e.g. "24 32": every variant again at these counts
# The main build under other environment settings, like a variant: "name:VAR=v,VAR2=w ..."
DIAG_ENVS=${DIAG_ENVS:-}
diag_variant_run() { # diag_variant_run NAME LIBDIR [ENV=v,ENV=v]
  local name=$1 dir=$2 coll log c tag
  local -a extra=()
  [ -n "${3:-}" ] && IFS=, read -r -a extra <<<"$3"
  for c in default ${DIAG_VARIANT_CHANNELS:-}; do
    local -a envs=("${extra[@]}")
    tag=""
    [ "$c" != default ] && envs+=("NCCL_MIN_NCHANNELS=$c" "NCCL_MAX_NCHANNELS=$c") && tag=".c$c"
    for coll in $DIAG_VARIANT_COLLS; do
      log=$LOGS/diag/variant.$name$tag.$coll.log
      run_logged "$log" 60 env LD_LIBRARY_PATH="$dir:$CUDA_HOME/lib64" LD_PRELOAD="$dir/libnccl.so.2" \
        NCCL_DEBUG=VERSION "${envs[@]}" "$NT_BIN/${coll}_perf" -b 64K -e 1G -f 4 -c 0 -n 10 -w 2 -g "$NGPUS"
      record diag "variant.$name$tag.$coll" "$(status_of $?)" "$(awk '$1 ~ /^[0-9]+$/ && NF > 8 { printf "%s:%s ", $1, $(NF-1) }' "$log" | cut -c1-200)"
    done
  done
}
stage_diag() {
  local n=$NGPUS tbuild=$BUILD-trace rc mode c coll log
  if [ "$NT_OK" != 1 ]; then
    record diag all SKIP "nccl-tests not built"
    return
  fi
  rc=1
  if [ -n "$DIAG_TRACE${DIAG_TRACE_LARGE:-}" ]; then
    cmake_build "$LOGS/diag/build-trace.log" "$tbuild" nccl -DBATON_DEVICE_TRACE=ON -DBUILD_TESTING=OFF
    rc=$?
    record diag build-trace "$(status_of "$rc")" "$(why "$rc")"
  fi
  if [ "$rc" = 0 ]; then
    local tlib
    tlib=$(find "$tbuild" -maxdepth 2 -name libnccl.so.2 | head -1)
    for mode in $DIAG_TRACE; do
      local -a envs=()
      [ "$mode" != default ] && envs=("NCCL_ALGO=${mode%/*}" "NCCL_PROTO=${mode#*/}")
      log=$LOGS/diag/trace.small.${mode/\//.}.log
      run_logged "$log" 60 env LD_LIBRARY_PATH="$(dirname "$tlib"):$CUDA_HOME/lib64" LD_PRELOAD="$tlib" \
        NCCL_DEBUG=VERSION "${envs[@]}" "$NT_BIN/all_reduce_perf" -b 8 -e 64K -f 8 -c 0 -n 1100 -w 2 -g "$n"
      record diag "trace.small.$mode" "$(status_of $?)" "$(grep -c '^baton-trace' "$log") trace lines"
    done
    for mode in ${DIAG_TRACE_LARGE:-}; do
      local -a envs=()
      [ "$mode" != default ] && envs=("NCCL_ALGO=${mode%/*}" "NCCL_PROTO=${mode#*/}")
      log=$LOGS/diag/trace.large.${mode/\//.}.log
      run_logged "$log" 60 env LD_LIBRARY_PATH="$(dirname "$tlib"):$CUDA_HOME/lib64" LD_PRELOAD="$tlib" \
        NCCL_DEBUG=VERSION "${envs[@]}" "$NT_BIN/${DIAG_TRACE_COLL}_perf" -b 1M -e 64M -f 8 -c 0 -n 520 -w 2 -g "$n"
      record diag "trace.large.$mode" "$(status_of $?)" "$(grep -c '^baton-trace' "$log") trace lines"
    done
  fi
  [ -n "$DIAG_VARIANTS$DIAG_ENVS" ] && diag_variant_run base "$OURS_DIR"
  if [ -n "$DIAG_VARIANTS" ]; then
    local v vname vflags vbuild
    for v in $DIAG_VARIANTS; do
      vname=${v%%:*} vflags=${v#*:} vbuild=$BUILD-var-${v%%:*}
      cmake_build "$LOGS/diag/build-variant.$vname.log" "$vbuild" nccl -DBUILD_TESTING=OFF \
        "-DCMAKE_C_FLAGS=${vflags//,/ }" "-DCMAKE_CUDA_FLAGS=${vflags//,/ }"
      rc=$?
      record diag "build-variant.$vname" "$(status_of "$rc")" "${vflags//,/ } $(why "$rc")"
      [ "$rc" = 0 ] && diag_variant_run "$vname" "$(dirname "$(find "$vbuild" -maxdepth 2 -name libnccl.so.2 | head -1)")"
    done
  fi
  local e
  for e in $DIAG_ENVS; do # the main build under other settings
    diag_variant_run "env-${e%%:*}" "$OURS_DIR" "${e#*:}"
  done
  local coll_i
  for coll_i in ${DIAG_STOCK_INFO:-}; do # stock's own choices (channels, algorithms) at INFO
    lib_env stock
    run_logged "$LOGS/diag/stock-info.$coll_i.log" 60 env "${LENV[@]}" NCCL_DEBUG=INFO \
      NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING "$NT_BIN/${coll_i}_perf" -b 64M -e 64M -c 0 -n 2 -w 1 -g "$n"
    record diag "stock-info.$coll_i" "$(status_of $?)" "$(grep -c 'Channel' "$LOGS/diag/stock-info.$coll_i.log") channel lines"
  done
  lib_env ours
  # all_reduce time per size for each algorithm/protocol (the tuning model's calibration data)
  for mode in $DIAG_PROTOS; do
    log=$LOGS/diag/proto.all_reduce.${mode/\//.}.log
    run_logged "$log" 60 env "${LENV[@]}" "NCCL_ALGO=${mode%/*}" "NCCL_PROTO=${mode#*/}" \
      "$NT_BIN/all_reduce_perf" -b 8 -e 256M -f 4 -c 0 -n 20 -w 3 -g "$n"
    record diag "proto.all_reduce.$mode" "$(status_of $?)" "$(awk '$1 ~ /^[0-9]+$/ && NF > 8 { printf "%s:%s ", $1, $6 }' "$log" | cut -c1-200)"
  done
  for c in $DIAG_CHANNELS; do
    for coll in $DIAG_COLLS; do
      log=$LOGS/diag/channels.$coll.$c.log
      run_logged "$log" 60 env "${LENV[@]}" NCCL_MIN_NCHANNELS="$c" NCCL_MAX_NCHANNELS="$c" \
        "$NT_BIN/${coll}_perf" -b 256M -e 1G -f 4 -c 0 -n 10 -w 2 -g "$n"
      record diag "channels.$coll.$c" "$(status_of $?)" "$(awk '$1 ~ /^[0-9]+$/ && NF > 8 { b = $(NF-1) } END { print "busbw at max size " b }' "$log")"
    done
  done
}

# ---- stages -----------------------------------------------------------------------------------
LOSSES_LINE=""
for stage in unit exec nccltests onegpu launch micro perf torch diag; do # diag last: optional, it gets what time is left
  selected "$stage" || continue
  stage_begin "$stage"
  if [ "$BUILD_OK" != 1 ]; then
    record "$stage" all SKIP "Baton did not build"
  elif [ "$stage" = nccltests ] && [ "$NT_OK" != 1 ]; then
    record nccltests all SKIP "nccl-tests not built"
  else
    "stage_$stage"
  fi
  stage_end "$stage"
done

# ---- report -----------------------------------------------------------------------------------
COMPARE_OUT=""
if selected perf || selected torch; then
  COMPARE_OUT=$(python3 "$GPU_DIR/parse_nccl_tests.py" compare --dir "$LOGS" --out "$OUT/perf.md" \
    --ngpus "$NGPUS" 2>&1)
  echo "$COMPARE_OUT" >"$LOGS/compare.log"
  while IFS=$'\t' read -r tag st name status note; do
    [ "$tag" = RESULT ] && record "$st" "$name" "$status" "$note"
  done <<<"$COMPARE_OUT"
fi

stage_status() {
  awk -F'\t' -v st="$1" '$1 == st { n[$3]++ }
    END { if (n["FAIL"]) print "FAIL"; else if (n["PASS"] || n["MET"] || n["MISS"]) print "PASS";
          else if (n["SKIP"]) print "SKIP"; else print "-" }' "$RESULTS"
}
stage_counts() {
  awk -F'\t' -v st="$1" '$1 == st { n[$3]++; if ($3 == "FAIL" && nf++ < 6) f = f " " $2 }
    END { s = (n["PASS"] + 0) " pass"; if (n["FAIL"]) s = s ", " n["FAIL"] " fail:" f;
          if (n["SKIP"]) s = s ", " n["SKIP"] " skip"; if (n["MISS"]) s = s ", targets missed " n["MISS"];
          if (n["MET"]) s = s ", targets met " n["MET"];
          if (n["REF"]) s = s ", stock reference runs failed " n["REF"]; print s }' "$RESULTS"
}

{
  echo
  echo "== Baton GPU verification: commit $COMMIT, ${NGPUS}x ${GPU_NAME:-?}, $(elapsed)s (budget ${BUDGET_S}s), FULL=$FULL"
  printf '%-10s %-5s %5s  %s\n' stage res secs notes
  for st in build unit exec nccltests onegpu launch micro perf torch diag; do
    [ "$st" = build ] || selected "$st" || continue
    printf '%-10s %-5s %5s  %s\n' "$st" "$(stage_status "$st")" "${STAGE_SECS[$st]:--}" "$(stage_counts "$st")"
  done
  awk -F'\t' '$1 == "build" { print "  build " $2 ": " $3 ", " $4 }' "$RESULTS"
  if [ -f "$LOGS/onegpu/compare.log" ]; then
    echo "-- one rank, ours vs stock (onegpu.md has the tables)"
    sed -n '/^SUMMARY$/,$p' "$LOGS/onegpu/compare.log" | tail -n +2
  fi
  if [ -n "$COMPARE_OUT" ]; then
    echo "-- ours/stock (perf.md has the tables)"
    sed -n '/^SUMMARY$/,$p' <<<"$COMPARE_OUT" | tail -n +2
  fi
  [ -n "$LOSSES_LINE" ] && echo "-- DDP $LOSSES_LINE"
  if grep -q $'\tFAIL\t' "$RESULTS"; then
    echo "-- failures (first 15; results.tsv has all)"
    awk -F'\t' '$3 == "FAIL" && n++ < 15 { print substr($1 " " $2 ": " $4, 1, 200) }' "$RESULTS"
  fi
} | tee "$OUT/summary.txt"
cp "$RESULTS" "$LOGS/" 2>/dev/null
pack_logs
! grep -q $'\tFAIL\t' "$RESULTS"
