#!/usr/bin/env bash
# The test command: set up, build, run every test (unit, ABI, integration) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"${CTEST_JOBS:-2}" "$@"
