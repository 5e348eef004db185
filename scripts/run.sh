#!/usr/bin/env bash
# The main job: set up, build what the demo needs (the library and the tools, no tests), and run
# the perf/demo tool on all local GPUs, or on the host executor (4 processes on this machine)
# when there are none. Arguments go to baton-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_TARGETS="nccl baton-perf baton-info" scripts/build.sh
exec "${BUILD_DIR:-build}"/tools/baton-perf "$@"
