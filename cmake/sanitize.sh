#!/usr/bin/env bash
# The core (src/) built with clang under AddressSanitizer + UndefinedBehaviorSanitizer, with
# libFuzzer instrumentation: runs every unit test of the core there (gtests, doctor checks) and
# each fuzz target for ROCE_FUZZ_SECONDS (default 30) from its corpus. Then the core again under
# ThreadSanitizer for the tests whose devices run threads (the progress/responder thread, ud's
# background thread, concurrent posters, the soak). Any sanitizer report, leak or oracle failure
# fails. Called by the ctest sanitize.asan_ubsan_fuzz; standalone:
#   bash cmake/sanitize.sh [BUILD_DIR]      (the TSan build goes to BUILD_DIR-tsan)
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
st=0
cmake --build "$build" -j "${ROCE_JOBS:-2}" > "$build.build.log" 2>&1 || st=$?
grep -E "error|Linking" "$build.build.log" | sed 's/^/[sanitize] /' | tail -40 || true
[ $st = 0 ] || { echo "[sanitize] build failed"; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "[sanitize] ctest (unit tests under ASan/UBSan, fuzz targets)"
(cd "$build" && ctest --output-on-failure -j "${ROCE_JOBS:-2}" --timeout 600) || exit 1

tsan=$build-tsan
echo "[sanitize] configuring $tsan (clang, -fsanitize=thread)"
CC=clang CXX=clang++ cmake -S "$here" -B "$tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DROCE_CORE_ONLY=ON -DROCE_SANITIZE=thread >"$tsan.configure.log" 2>&1 || { cat "$tsan.configure.log"; exit 1; }
echo "[sanitize] building the threaded tests"
st=0
cmake --build "$tsan" -j "${ROCE_JOBS:-2}" --target roce_sw_tests roce_ud_tests > "$tsan.build.log" 2>&1 || st=$?
grep -E "error" "$tsan.build.log" | sed 's/^/[sanitize] /' | tail -40 || true
[ $st = 0 ] || { echo "[sanitize] TSan build failed"; exit 1; }
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
echo "[sanitize] ctest (threads under TSan)"
cd "$tsan"
ctest --output-on-failure --timeout 600 -R 'SwThreads|SwPassive|UdTransport|SwSoak|SwReliability|SwIncarnation'
