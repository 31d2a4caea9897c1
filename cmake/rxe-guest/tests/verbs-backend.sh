#!/bin/bash
# The verbs device backend (src/verbs) on kernel soft-RoCE rxe0: runs roce_verbs_tests in the guest
# (two verbs::Devices on rxe0 in one process, connected by rdma_cm). Build first, then:
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/verbs-backend.sh [gtest filter]
#
# The binary: $ROCE_VERBS_TESTS, else $ROCE_BUILD_DIR/src/verbs/roce_verbs_tests. ROCE_REQUIRE_RXE_DEVICE=1
# is set so that the rxe tests fail rather than skip. Exit 1 if the step failed.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

BUILD=${ROCE_BUILD_DIR:-/work/main/build}
BIN=${ROCE_VERBS_TESTS:-$BUILD/src/verbs/roce_verbs_tests}
COUNTERS_DEV=rxe0
export ROCE_REQUIRE_RXE_DEVICE=1
# Default: the functional tests, then the figures as a step of their own (so that rxe0's counters,
# e.g. retransmissions, are attributed to one or the other).
filter=${1:-*:-*.Figures}
say "binary $BIN, filter $filter, step timeout ${STEP_TIMEOUT}s"
if [ ! -x "$BIN" ]; then
  fail_step verbs-backend.tests "no test binary $BIN (build roce_verbs_tests first)"
  summary
  exit 1
fi
# ROCE_VERBS_GDB=1: under gdb, with a backtrace of every thread if it crashes.
run=("$BIN" --gtest_filter="$filter" --gtest_color=no)
[ "${ROCE_VERBS_GDB:-0}" = 1 ] && run=(gdb -q -batch -ex run -ex "thread apply all bt" --args "${run[@]}")
T=$((STEP_TIMEOUT * 3)) step verbs-backend.tests "${run[@]}" && cat "$LOG"
if [ $# = 0 ]; then
  step verbs-backend.figures "$BIN" --gtest_filter='*.Figures' --gtest_color=no && cat "$LOG"
  # Figures the test prints as "rxe-result name=... value=... unit=..." go to results.txt too.
  while IFS= read -r line; do
    [[ $line == rxe-result\ * ]] && printf '%s\n' "$line" >> "$RESULTS"
  done < "$LOG"
fi
# Baseline in the same boot: raw verbs 8-byte RC ping-pong (a round trip per iteration), to compare
# with verbs_backend.send_rtt_8B. Off with ROCE_VERBS_BASELINE=0.
if [ "${ROCE_VERBS_BASELINE:-1}" = 1 ] && command -v ibv_rc_pingpong >/dev/null; then
  gi=1
  for ((i = 0; i < 16; i++)); do
    read -r g < "/sys/class/infiniband/rxe0/ports/1/gids/$i" 2>/dev/null || continue
    read -r t < "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i" 2>/dev/null || continue
    if [[ $g == 0000:0000:0000:0000:0000:ffff:* && $t == "RoCE v2" ]]; then gi=$i; break; fi
  done
  SRV=(ibv_rc_pingpong -d rxe0 -g "$gi" -n 500 -s 8 -p 18600)
  CLI=("${SRV[@]}" localhost)
  if pair verbs-backend.baseline_rc_pingpong 18600; then
    v=$(field_after "$LOG" 500 6)
    [ -n "$v" ] && result verbs_backend.baseline_ibv_rc_pingpong_rtt_8B "$v" us
  fi
fi
summary
