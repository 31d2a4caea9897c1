#!/usr/bin/env bash
# Runs one MPI program under roce-mpirun and checks that Open MPI really used pml ucx over the
# transport asked for (a silent fallback to ob1 would make any MPI test pass for the wrong reason).
# Usage: run_mpi_test.sh <roce-mpirun> <np> <timeout-s> <program> [args...]
set -uo pipefail
launcher=$1 np=$2 limit=$3; shift 3
log=$(mktemp); trap 'rm -f "$log"' EXIT
echo "[mpi-test] UCX_TLS=${UCX_TLS:-rc_roce,self} np=$np: $*"
timeout --kill-after=10 "$limit" "$launcher" -np "$np" --mca pml_base_verbose 10 "$@" >"$log" 2>&1
rc=$?
grep -v -E 'mca: base|pml_base|select:|pml:ucx|common_ucx' "$log"
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
  echo "[mpi-test] FAIL: timed out after ${limit}s"; exit 1
fi
if ! grep -q "select: component ucx selected" "$log"; then
  echo "[mpi-test] FAIL: pml ucx was not selected"; grep -E 'pml|ucx' "$log" | head -20; exit 1
fi
[ $rc -eq 0 ] || { echo "[mpi-test] FAIL: exit code $rc"; exit 1; }
echo "[mpi-test] ok (pml ucx selected)"
