#!/usr/bin/env bash
# nccl_tests_share.sh SRC DST: copies the nccl-tests sources SRC to DST (refreshing a stale copy)
# with one change: with NCCL_TESTS_SHARE_GPUS set, rank i of a process uses CUDA device
# i % (device count), so -g 2 / -g 4 / -t 4 put several ranks on one GPU (Baton with
# NCCL_MULTI_RANK_GPU_ENABLE=1, issue 17). Without the variable the binaries behave as upstream's.
set -euo pipefail
src=$1 dst=$2
line='gpus[i] = (gpu0 != -1 ? gpu0 : localRank*nThreads*nGpus) + i;'
if [ -f "$dst/.share-patched" ] && [ "$dst/.share-patched" -nt "$src/src/common.cu" ]; then exit 0; fi
rm -rf "$dst"
mkdir -p "$dst"
cp -a "$src/." "$dst/"
grep -qF "$line" "$dst/src/common.cu" || { echo "nccl_tests_share.sh: the device line of src/common.cu changed" >&2; exit 1; }
sed -i "s|$(printf '%s' "$line" | sed 's/[][\.*^$|]/\\&/g')|& if (getenv(\"NCCL_TESTS_SHARE_GPUS\")) { int nd_ = 1; CUDACHECK(cudaGetDeviceCount(\&nd_)); gpus[i] %= nd_; }|" "$dst/src/common.cu"
grep -q NCCL_TESTS_SHARE_GPUS "$dst/src/common.cu" || { echo "nccl_tests_share.sh: patch did not apply" >&2; exit 1; }
touch "$dst/.share-patched"
