#!/bin/bash
# The project's MPI test suite (mpi-tests/) over our transports on kernel rxe: the suite's
# `mpisuite` group (sourced by suite.sh, which sets DEV, BUILD and the step helpers of lib.sh):
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/suite.sh mpisuite
#
# Steps, for T in rc_roce and ud_roce on rxe0:1 (the verbs backend), each through
# mpi-tests/run_mpi_test.sh under $BUILD/roce-mpirun (fails when pml ucx was not selected, when a
# program's check fails, or on a timeout; known Open MPI 4.1.4 bugs exit 77 as on the host):
#   mpisuite.p2p.T       mpi_p2p, np 4: blocking/nonblocking 0 B..4 MiB, ANY_SOURCE/ANY_TAG, ordering,
#                        unexpected messages, probes, truncation, datatypes, 1024 outstanding requests
#   mpisuite.osc.T       mpi_osc, np 4: accumulate/get_accumulate/fetch_and_op/CAS, fence, PSCW, locks,
#                        dynamic windows, passive progress (rc_roce: RMA completes while the target
#                        computes; ud_roce: no RDMA, waiting is expected as on the host)
#   mpisuite.coll.T      mpi_coll, np 4: barrier, bcast, reduce, allreduce, alltoall(v), allgather
#   mpisuite.threads.T   mpi_threads, np 2: MPI_THREAD_MULTIPLE, 4 threads per rank
# (np 2..8 and the applications run on the host, over the userspace device: under TCG np 8 would
# take minutes per collective.)

mpisuite_group() {
  local run launcher=$BUILD/roce-mpirun tl
  run=$(realpath "$here/../../../mpi-tests/run_mpi_test.sh")   # $here: suite.sh's directory
  if [ ! -x "$launcher" ] || [ ! -x "$BUILD/mpi-tests/mpi_p2p" ]; then
    fail_step mpisuite "$launcher or the MPI test programs are not built"
    return
  fi
  for tl in rc_roce ud_roce; do
    export UCX_TLS=$tl,self UCX_NET_DEVICES=$DEV:1
    T=$((STEP_TIMEOUT * 3)) step mpisuite.p2p.$tl bash "$run" "$launcher" 4 $((STEP_TIMEOUT * 3 - 10)) "$BUILD/mpi-tests/mpi_p2p"
    # ud_roce has no RDMA: UCP emulates RMA with AMs that only the target's own MPI calls handle,
    # so a computing target delays passive RMA (results still checked), as over ud_verbs.
    [ $tl = ud_roce ] && export ROCE_OSC_EXPECT_ASYNC=0
    T=$((STEP_TIMEOUT * 3)) step mpisuite.osc.$tl bash "$run" "$launcher" 4 $((STEP_TIMEOUT * 3 - 10)) "$BUILD/mpi-tests/mpi_osc"
    unset ROCE_OSC_EXPECT_ASYNC
    [ -f "$LOG" ] && grep -q "EXPECTED UPSTREAM FAILURE" "$LOG" && say "mpisuite.osc.$tl: $(grep -m1 'EXPECTED UPSTREAM' "$LOG")"
    T=$((STEP_TIMEOUT * 2)) step mpisuite.coll.$tl bash "$run" "$launcher" 4 $((STEP_TIMEOUT * 2 - 10)) "$BUILD/mpi-tests/mpi_coll"
    T=$((STEP_TIMEOUT * 2)) step mpisuite.threads.$tl bash "$run" "$launcher" 2 $((STEP_TIMEOUT * 2 - 10)) "$BUILD/mpi-tests/mpi_threads" 4 30
  done
  unset UCX_TLS
  export UCX_NET_DEVICES=$DEV:1
}
