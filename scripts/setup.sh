#!/usr/bin/env bash
# Installs what Baton's build and tests use on Debian/Ubuntu (run as root or with sudo). The CUDA
# toolkit (nvcc) must already be installed; everything else comes from apt:
#   cmake, make, gcc, g++       the build (nvcc needs the host C++ compiler)
#   libibverbs-dev,             the IB verbs network (rdma-core's header and providers; the library
#   ibverbs-providers           loads libibverbs at run time); configure fails without the header
#                               unless -DBATON_IB=OFF
#   libhwloc-dev                NIC placement (hwloc.h; libhwloc loaded at run time); likewise
#                               unless -DBATON_HWLOC=OFF
#   libnuma-dev                 libnuma, which places memory on the GPU's NUMA node at run time
#   pkg-config, check           the unit and integration suites (optional for the library alone)
#   iproute2                    the tests that join ranks through network namespaces
# The Soft-RoCE guest that runs the IB tests for real (qemu, Debian's kernel) is set up apart:
# tests/rdma/guest.sh setup.
#   python3-matplotlib          baton-perf --plot (optional: without it --plot says so)
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { echo "setup: nvcc not found; install the CUDA toolkit first" >&2; exit 1; }
need=()
for pkg in cmake make gcc g++ pkg-config libibverbs-dev ibverbs-providers libhwloc-dev libnuma-dev \
  check iproute2 python3-matplotlib; do
  # A removed package can keep a dpkg record (its configuration files): ask for its state.
  [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
