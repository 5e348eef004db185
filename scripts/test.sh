#!/usr/bin/env bash
# The test command: set up, build, run every test (unit, ABI, install, integration) with ctest.
# Check is required here, so a machine without it fails instead of running a short list.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DBATON_REQUIRE_CHECK=ON
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"${CTEST_JOBS:-2}" "$@"
