#!/bin/bash
# Harness self-test (run by expect-exit.sh through run-in-guest.sh): checks what the harness promises
# the guest scripts, then exits 3 so that the host can check that the exit code comes back.
#   harness-selftest.sh <expected ROCE_BUILD_DIR>
set -u
nargs=$# arg1=${1:-}
bad=0
check() { if eval "$2"; then echo "selftest: ok   $1"; else echo "selftest: FAIL $1"; bad=1; fi; }
check "arguments are passed"             '[ "$nargs" = 1 ] && [ "$arg1" = "$ROCE_BUILD_DIR" ]'
check "ROCE_RXE_OUT is the results share" '[ "$ROCE_RXE_OUT" = /rxe-out ] && [ -f /rxe-out/job.env ]'
check "results share is writable"        'echo selftest > "$ROCE_RXE_OUT/selftest.txt"'
check "rxe0 exists and is ACTIVE"        '[[ $(< /sys/class/infiniband/rxe0/ports/1/state) == *ACTIVE* ]]'
check "/ is the overlay (host root + tmpfs)" 'grep -q "^overlay / overlay" /proc/mounts'
check "/ is writable (tmpfs overlay)"    'touch /selftest-$$ && rm /selftest-$$'
check "step timeout is set"              '[ -n "${ROCE_RXE_STEP_TIMEOUT:-}" ]'
[ $bad = 0 ] || exit 1
exit 3
