#!/usr/bin/env bash
# expect-exit.sh <expected-code> <command...>: exit 0 if the command exits with <expected-code>,
# 77 if it exits 77 (skipped: QEMU or the guest kernel missing), 1 otherwise. Used by the
# harness self-test, which checks that a guest script's non-zero exit code reaches the host.
expected=$1; shift
"$@"; rc=$?
[ "$rc" = 77 ] && exit 77
if [ "$rc" = "$expected" ]; then
  echo "[expect-exit] ok: exit code $rc as expected"; exit 0
fi
echo "[expect-exit] FAILED: exit code $rc, expected $expected"; exit 1
