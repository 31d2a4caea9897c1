#!/usr/bin/env bash
# Configures and builds uct-roce into ${ROCE_BUILD_DIR:-build} (after cmake/setup.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="${ROCE_BUILD_DIR:-$here/build}"
echo "[build] configuring $build"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
echo "[build] compiling (2 jobs)"
cmake --build "$build" -j "${ROCE_JOBS:-2}"
echo "[build] ok: $build"
