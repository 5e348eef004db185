#!/usr/bin/env bash
# nccl_tests_share.sh SRC DST: copies the nccl-tests sources SRC to DST (refreshing a stale copy)
# with one change: with NCCL_TESTS_SHARE_GPUS set, rank i of a process uses CUDA device
# i % (device count), so -g 2 / -g 4 / -t 4 put several ranks on one GPU (Baton with
# NCCL_MULTI_RANK_GPU_ENABLE=1, issue 17). Without the variable the binaries behave as upstream's.
# Two places pick the device: src/common.cu (the buffers, streams and communicators) and
# src/util.cu (the banner, which also refuses more devices than there are).
set -euo pipefail
src=$1 dst=$2
share='if (getenv("NCCL_TESTS_SHARE_GPUS")) { int nd_ = 1; CUDACHECK(cudaGetDeviceCount(\&nd_)); gpus[i] %= nd_; }'
if [ -f "$dst/.share-patched" ] && [ "$dst/.share-patched" -nt "$0" ] &&
  [ "$dst/.share-patched" -nt "$src/src/common.cu" ]; then exit 0; fi
rm -rf "$dst"
mkdir -p "$dst"
cp -a "$src/." "$dst/"
patch_line() { # FILE LITERAL REPLACEMENT
  grep -qF "$2" "$dst/$1" || { echo "nccl_tests_share.sh: $1 no longer has: $2" >&2; exit 1; }
  local from to
  from=$(printf '%s' "$2" | sed 's/[][\.*^$|/]/\\&/g')
  to=$(printf '%s' "$3" | sed 's/[|/]/\\&/g')
  sed -i "s/$from/$to/" "$dst/$1"
  grep -q NCCL_TESTS_SHARE_GPUS "$dst/$1" || { echo "nccl_tests_share.sh: $1 not patched" >&2; exit 1; }
}
patch_line src/common.cu 'gpus[i] = (gpu0 != -1 ? gpu0 : localRank*nThreads*nGpus) + i;' \
  "gpus[i] = (gpu0 != -1 ? gpu0 : localRank*nThreads*nGpus) + i; $share"
patch_line src/util.cu 'const int cudaDev = (gpu0 != -1 ? gpu0 : localRank*nThreads*nGpus) + i;' \
  'int cudaDev = (gpu0 != -1 ? gpu0 : localRank*nThreads*nGpus) + i; if (getenv("NCCL_TESTS_SHARE_GPUS")) cudaDev %= available_devices;'
touch "$dst/.share-patched"
