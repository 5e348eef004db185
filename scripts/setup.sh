#!/usr/bin/env bash
# Installs what Baton's build and tests use on Debian/Ubuntu (run as root or with sudo). The CUDA
# toolkit (nvcc) must already be installed; everything else comes from apt:
#   cmake, make, gcc, g++       the build (nvcc needs the host C++ compiler)
#   pkg-config, check           the unit and integration suites (optional for the library alone)
#   iproute2                    the tests that join ranks through network namespaces
#   python3-matplotlib          baton-perf --plot (optional: without it --plot says so)
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { echo "setup: nvcc not found; install the CUDA toolkit first" >&2; exit 1; }
need=()
for pkg in cmake make gcc g++ pkg-config check iproute2 python3-matplotlib; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
