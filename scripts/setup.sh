#!/usr/bin/env bash
# Installs what Baton needs to build and test on Debian/Ubuntu (run as root or with sudo).
# The CUDA toolkit (nvcc) must already be installed; everything else comes from apt.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { echo "setup: nvcc not found; install the CUDA toolkit first" >&2; exit 1; }
need=()
for pkg in cmake make gcc g++ pkg-config check libhwloc-dev libnuma-dev libibverbs-dev iproute2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
