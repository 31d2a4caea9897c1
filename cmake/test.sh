#!/usr/bin/env bash
# Command 2 of the README (and what .ci/run calls): install, build, run the whole test suite.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="${ROCE_BUILD_DIR:-$here/build}"
bash "$here/cmake/setup.sh"
bash "$here/cmake/build.sh"
cd "$build"
# A missing QEMU/kernel fails the rxe suite instead of skipping it (setup.sh installs them).
export ROCE_REQUIRE_RXE="${ROCE_REQUIRE_RXE:-1}"
# Likewise the MPI applications (lammps, hpcc, NetPIPE: setup.sh installs them): missing fails.
export ROCE_REQUIRE_APPS="${ROCE_REQUIRE_APPS:-1}"
echo "[test] ctest (unit tests, ucx_info/ucx_perftest probes, MPI under mpirun)"
rc=0
ctest --output-on-failure --timeout 900 ${CTEST_ARGS:-} || rc=$?
# CI logs keep the head and the tail: repeat what failed in the rxe guest suite after ctest's summary,
# with the last lines of each failed step's logs, so the tail names the step.
results="$build/rxe-guest/run-suite/results.txt"
if [ "$rc" != 0 ] && [ -f "$results" ] && grep -q "status=fail" "$results"; then
  echo "[test] rxe guest suite, failed steps (logs: $build/rxe-guest/run-suite/logs/):"
  grep -E "status=fail|^rxe-summary" "$results" || true
  grep -o "name=[^ ]* status=fail" "$results" | sed 's/name=//; s/ status=fail//' | while read -r s; do
    for f in "$build/rxe-guest/run-suite/logs/$s.server" "$build/rxe-guest/run-suite/logs/$s"; do
      [ -s "$f" ] && { echo "---- ${f##*/logs/} (last 15 lines) ----"; tail -n 15 "$f"; }
    done
  done || true
fi
exit "$rc"
