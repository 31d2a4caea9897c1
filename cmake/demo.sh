#!/usr/bin/env bash
# Command 1 of the README: install what is needed, build, and run MPI ping-pong/bandwidth under
# mpirun over rc_roce on the userspace RoCEv2 device over loopback (every byte checked).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="${ROCE_BUILD_DIR:-$here/build}"
bash "$here/cmake/setup.sh"
bash "$here/cmake/build.sh"
echo "[demo] mpirun -np 2 mpi_pingpong over UCX_TLS=${UCX_TLS:-rc_roce,self} (userspace RoCEv2, loopback)"
"$build/roce-mpirun" -np 2 "$build/mpi-tests/mpi_pingpong" "$@"
