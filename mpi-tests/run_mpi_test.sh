#!/usr/bin/env bash
# Runs one MPI program under roce-mpirun and checks that Open MPI really used pml ucx over the
# transport asked for (a silent fallback to ob1 would make any MPI test pass for the wrong reason).
# Usage: run_mpi_test.sh <roce-mpirun> <np> <timeout-s> <program> [args...]
set -uo pipefail
launcher=$1 np=$2 limit=$3; shift 3
log=$(mktemp); trap 'rm -f "$log"' EXIT
# ROCE_EXPECT_COUNTERS="a b|c ...": the ranks' counter files must show each counter (or one of
# the |-separated alternatives) above zero, summed over the ranks. A fault test whose faults were
# never injected (a misspelt setting) or never seen by the receiver proves nothing by passing.
stats=""
if [ -n "${ROCE_EXPECT_COUNTERS:-}" ]; then
  stats=$(mktemp -d); trap 'rm -f "$log"; rm -rf "$stats"' EXIT
  case ${UCX_TLS:-rc_roce} in
    *ud_roce*) export UCX_UD_ROCE_STATS_DIR=$stats ;;
  esac
  case ${UCX_TLS:-rc_roce} in
    *rc_roce*) export UCX_RC_ROCE_STATS_DIR=$stats ;;
  esac
fi
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
if [ $rc -ne 0 ]; then
  # Known Open MPI 4.1.4 bugs, recognised only by their exact signature and only when the log holds
  # no failure of our own ("rank N: ..." lines from the test programs): exit 77 = CTest "Skipped",
  # shown as EXPECTED UPSTREAM FAILURE. Each signature was reproduced identically over UCX_TLS=tcp,self.
  own=$(grep -cE '^rank [0-9]+[: ]' "$log")   # (mpi_threads: "rank N thread M: ...")
  known=()
  # open-mpi/ompi#9689: osc ucx segfaults in MPI_Win_free (ompi_osc_ucx_free -> ucp_mem_unmap).
  # A backtrace frame in our plugin makes it ours, whatever called it (a crash in our
  # deregistration under MPI_Win_free has the same signature otherwise).
  if grep -q 'ompi_osc_ucx_free' "$log" && grep -qE 'Segmentation fault|signal 11|SIGSEGV' "$log" &&
     ! grep -qE '^\[[^]]*\] \[ *[0-9]+\] .*libuct_roce' "$log"; then
    known+=("open-mpi/ompi#9689 (osc ucx segfault in MPI_Win_free)")
  fi
  # Program-classified upstream results (exact wrong-value patterns) need their log evidence too.
  while read -r id; do
    case "$id" in
      fop_double) known+=("osc ucx fetch_and_op(MPI_DOUBLE,SUM) integer-adds the IEEE bits") ;;
      fop_int16) if grep -q 'UCX  ERROR invalid atomic operation datatype: 0x' "$log"; then
                   known+=("osc ucx 16-bit fetch_and_op: ucp 'invalid atomic operation datatype', update lost")
                 else own=$((own + 1)); fi ;;
      *) own=$((own + 1)) ;;
    esac
  done < <(sed -n 's/^upstream-known \([a-z0-9_]*\): .*/\1/p' "$log")
  if [ "$own" -eq 0 ] && [ ${#known[@]} -gt 0 ] && [ "${ROCE_MPI_STRICT_UPSTREAM:-0}" != 1 ]; then
    for k in "${known[@]}"; do echo "[mpi-test] EXPECTED UPSTREAM FAILURE: $k"; done
    exit 77
  fi
  echo "[mpi-test] FAIL: exit code $rc"; exit 1
fi
if [ -n "$stats" ]; then
  missing=()
  doctor=${ROCE_DOCTOR:-$(dirname "$launcher")/src/gid/roce_doctor}
  for want in $ROCE_EXPECT_COUNTERS; do
    # the interface counters of every rank's file, summed (a|b: both)
    n=$("$doctor" counters "$stats" --sum "$want" | awk '{ print $2 }')
    [[ $n =~ ^[0-9]+$ ]] || { echo "[mpi-test] FAIL: $doctor counters $stats --sum $want gave '$n'"; exit 1; }
    echo "[mpi-test] counters $want: $n"
    [ "$n" -gt 0 ] || missing+=("$want")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "[mpi-test] FAIL: counters at zero: ${missing[*]} (files: $(ls "$stats" | wc -l))"; exit 1
  fi
fi
echo "[mpi-test] ok (pml ucx selected)"
