#!/usr/bin/env bash
# The core (src/) built with clang under AddressSanitizer + UndefinedBehaviorSanitizer, with
# libFuzzer instrumentation: runs every unit test of the core there (gtests, doctor checks) and
# each fuzz target for ROCE_FUZZ_SECONDS (default 30) from its corpus. Then the core again under
# ThreadSanitizer for the tests whose devices run threads (the progress/responder thread, ud's
# background thread, concurrent posters, the soak), and the UCT plugin under ThreadSanitizer (gcc)
# for its self-test modes where other threads call in. Any sanitizer report, leak or oracle
# failure fails. Called by the ctest sanitize.asan_ubsan_fuzz; standalone:
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
(cd "$tsan" && ctest --output-on-failure --timeout 600 -R 'SwThreads|SwPassive|UdTransport|SwSoak|SwReliability|SwIncarnation') || exit 1

# The glue under TSan: UCX's async thread (UCP's wireup creates and destroys endpoints there) and
# ud_roce's background thread call into the plugin while the owner progresses. Built with gcc:
# the plugin links with -z defs, which gcc's -fsanitize=thread satisfies (libtsan linked in);
# UCX itself is not instrumented, its locks are seen through the pthread calls TSan intercepts.
glue=$build-tsan-glue
echo "[sanitize] configuring $glue (gcc, -fsanitize=thread: the UCT plugin and its self-test)"
cmake -S "$here" -B "$glue" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROCE_SANITIZE=thread \
  -DROCE_SANITIZER_TESTS=OFF >"$glue.configure.log" 2>&1 || { cat "$glue.configure.log"; exit 1; }
echo "[sanitize] building the plugin"
st=0
cmake --build "$glue" -j "${ROCE_JOBS:-2}" --target uct_roce uct_roce_selftest > "$glue.build.log" 2>&1 || st=$?
grep -E "error" "$glue.build.log" | sed 's/^/[sanitize] /' | tail -40 || true
[ $st = 0 ] || { echo "[sanitize] TSan plugin build failed"; exit 1; }
fails=0
for run in "rc_roce churn" "rc_roce events" "rc_roce flushpend" "ud_roce churn" "ud_roce events" "ud_roce flushfail"; do
  set -- $run
  echo "[sanitize] uct_roce_selftest $2 on $1 under TSan"
  # LD_PRELOAD through env: timeout itself must not load the instrumented plugin. UCM's mmap
  # hooks off: its madvise hook at thread exit crashes inside TSan's interceptors.
  if ! timeout 300 env LD_PRELOAD="$glue/uct/libuct_roce.so.0" UCX_MEM_MMAP_HOOK_MODE=none \
       TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$here/cmake/tsan-ucx.supp" TL="$1" UCX_RC_ROCE_TIMEOUT=1ms \
       UCX_RC_ROCE_RETRY_COUNT=3 UCX_UD_ROCE_TIMEOUT=2s "$glue/uct/uct_roce_selftest" "$2" \
       > "$glue.$1.$2.log" 2>&1; then
    sed 's/^/[sanitize]   /' "$glue.$1.$2.log" | tail -60
    echo "[sanitize] FAILED: uct_roce_selftest $2 on $1"
    fails=$((fails + 1))
  fi
done
[ $fails = 0 ] || exit 1
echo "[sanitize] all passed"
