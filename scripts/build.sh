#!/usr/bin/env bash
# Configures and builds Baton into ${BUILD_DIR:-build}. Extra arguments go to cmake's configure;
# BUILD_TARGETS (space-separated) builds only those targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
