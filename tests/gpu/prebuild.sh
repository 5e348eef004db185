#!/usr/bin/env bash
# prebuild.sh BUILD_DIR OUT_DIR: gathers what tests/gpu/run.sh would build on the device machine
# into OUT_DIR, built here instead (the device's minutes are scarcer than this machine's), for
# run.sh's BATON_PREBUILT=OUT_DIR:
#   libnccl.so.2, baton-perf      from BUILD_DIR (configured with -DBATON_CUDA_ARCHS=90
#                                 -DBATON_GPU_TESTS=ON; built here first if stale)
#   tests/test_*                  the GPU test binaries (tests/gpu/test_*)
#   nccl-tests/*_perf             nccl-tests (third_party/nccl-tests, nccl_tests_share.sh's copy)
#                                 against stock's nccl.h (NT_HEADER=ours: Baton's), sm_90
#   bench_launch, bench_launch_trace   tests/gpu/bench_launch.cu, plain and BATON_DEVICE_TRACE
#   bench_call                    tests/gpu/bench_call.cu (the NCCL calls: whichever libnccl.so.2
#                                 the loader finds)
#   bench_stage                   tests/gpu/bench_stage.cu (a staged AllReduce's phases on N GPUs)
# Binaries are stripped of debug sections. The device must have the same CUDA major version
# (13) and a glibc at least as new as this machine's. Writes OUT_DIR/BUILD_INFO.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "$1" && pwd)
out=$2
jobs=${JOBS:-2}
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$out/tests" "$out/nccl-tests"
out=$(cd "$out" && pwd)

cmake --build "$build" -j"$jobs" --target nccl baton-perf test_cuda_exec test_one_gpu test_p2p_transport \
  test_gpu_progress test_windows test_suspend_rma
cp -L "$build/libnccl.so.2" "$out/libnccl.so.2"
cp "$build/tools/baton-perf" "$out/baton-perf"
for t in "$build"/tests/gpu/test_*; do
  [ -x "$t" ] && [ -f "$t" ] && cp "$t" "$out/tests/"
done

stage=$build/nccl-home
rm -rf "$stage"
mkdir -p "$stage/include" "$stage/lib"
# nccl-tests is built once against stock's header (NT_HEADER=ours: Baton's), the drop-in claim:
# the same binaries then load either library.
if [ "${NT_HEADER:-stock}" = ours ]; then
  cp "$ROOT/include/nccl.h" "$stage/include/"
else
  cp /usr/local/cuda/include/nccl.h "$stage/include/"
fi
ln -sf "$build/libnccl.so.2" "$stage/lib/libnccl.so"
# nccl-tests includes nccl_device.h (stock's, Baton ships none): the toolkit's copy of stock's
dev_h=/usr/local/cuda/include/nccl_device.h
[ -f "$dev_h" ] || dev_h=$(find / -name nccl_device.h -path '*include*' -print -quit 2>/dev/null || true)
if [ -n "$dev_h" ]; then cp -r "$(dirname "$dev_h")"/nccl_device* "$stage/include/"; fi
bash "$ROOT/tests/gpu/nccl_tests_share.sh" "$ROOT/third_party/nccl-tests" "$build/nccl-tests-src"
make -C "$build/nccl-tests-src" -j"$jobs" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME="$stage" \
  BUILDDIR="$build/nccl-tests-bin" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >/dev/null
cp "$build"/nccl-tests-bin/*_perf "$out/nccl-tests/"
for f in "$build"/nccl-tests-bin/*.so*; do [ -f "$f" ] && cp "$f" "$out/nccl-tests/"; done
if [ -d "$build/nccl-tests-bin/verifiable" ]; then
  mkdir -p "$out/nccl-tests/verifiable"
  cp "$build"/nccl-tests-bin/verifiable/*.so* "$out/nccl-tests/verifiable/" 2>/dev/null || true
fi

nvcc -O3 -arch=sm_90 -lineinfo -I"$ROOT/include" -I"$ROOT/src" -o "$out/bench_launch" \
  "$ROOT/tests/gpu/bench_launch.cu" &
nvcc -O3 -arch=sm_90 -DBATON_DEVICE_TRACE -I"$ROOT/include" -I"$ROOT/src" \
  -o "$out/bench_launch_trace" "$ROOT/tests/gpu/bench_launch.cu" &
nvcc -O3 -arch=sm_90 -I"$ROOT/include" -o "$out/bench_call" "$ROOT/tests/gpu/bench_call.cu" \
  -L"$stage/lib" -lnccl &
nvcc -O3 -arch=sm_90 -std=c++17 -I"$ROOT/include" -I"$ROOT/src" -o "$out/bench_stage" \
  "$ROOT/tests/gpu/bench_stage.cu" &
wait

find "$out" -type f -perm -u+x -exec strip --strip-debug {} + 2>/dev/null || true
strip --strip-debug "$out/libnccl.so.2"
{
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty'), $(grep -m1 CMAKE_BUILD_TYPE: "$build/CMakeCache.txt" | cut -d= -f2), built $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvcc --version | tail -1
  ldd --version | sed -n 1p # reads all: no SIGPIPE under pipefail
} >"$out/BUILD_INFO"
du -sh "$out"
