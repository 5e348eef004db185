#!/usr/bin/env bash
# The main job: set up, build everything `cmake --install` installs (the shared and static
# libraries and the tools: baton-perf, baton-info, baton-ras, baton-sim; no tests), and run
# the perf/demo tool on all local GPUs, or on the host executor (4 processes on this machine)
# when there are none. Arguments go to baton-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_TARGETS="baton-installable" scripts/build.sh
exec "${BUILD_DIR:-build}"/tools/baton-perf "$@"
