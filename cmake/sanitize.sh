#!/usr/bin/env bash
# The core (src/) built with clang under AddressSanitizer + UndefinedBehaviorSanitizer, with
# libFuzzer instrumentation: runs every unit test of the core there (gtests, doctor checks) and
# each fuzz target for ROCE_FUZZ_SECONDS (default 30) from its corpus. Any sanitizer report, leak
# or oracle failure fails. Called by the ctest sanitize.asan_ubsan_fuzz; standalone:
#   bash cmake/sanitize.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build/sanitize}
command -v clang++ >/dev/null || { echo "[sanitize] clang++ missing (cmake/setup.sh installs it)"; exit 1; }
echo "[sanitize] configuring $build (clang, -fsanitize=address,undefined, libFuzzer)"
CC=clang CXX=clang++ cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DROCE_CORE_ONLY=ON -DROCE_SANITIZE=address,undefined -DROCE_FUZZ=ON \
  -DROCE_FUZZ_SECONDS="${ROCE_FUZZ_SECONDS:-30}" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
echo "[sanitize] building ($(nproc) jobs)"
cmake --build "$build" -j "${ROCE_JOBS:-2}" 2>&1 | grep -E "error|warning: .*sanitize|Linking" | sed 's/^/[sanitize] /' | tail -40
[ "${PIPESTATUS[0]}" = 0 ] || { echo "[sanitize] build failed"; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "[sanitize] ctest (unit tests under ASan/UBSan, fuzz targets)"
cd "$build"
ctest --output-on-failure -j "${ROCE_JOBS:-2}" --timeout 600
