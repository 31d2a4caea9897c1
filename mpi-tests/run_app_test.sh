#!/usr/bin/env bash
# Runs a real MPI application from a Debian package twice through the same launcher — over the
# transport under test (UCX_TLS, default rc_roce,self) and over UCX's own tcp (UCX_TLS=tcp,self) —
# each via run_mpi_test.sh (so pml ucx must really be selected), and checks that the results agree:
#   lammps   thermodynamic output table of mpi-tests/in.lj (bitwise the same text)
#   hpcc     verification lines of hpccoutf.txt (PASSED/FAILED, residuals, error counts, Success=)
#   netpipe  NPopenmpi completes the same message-size table (it has no data verification)
# and prints the timings side by side. Exit 77 (CTest SKIP) if the package is missing, unless
# ROCE_REQUIRE_APPS=1 (then missing is a failure).
# Usage: run_app_test.sh <run_mpi_test.sh> <roce-mpirun> <np> <timeout-s> <lammps|hpcc|netpipe> <srcdir>
set -uo pipefail
runner=$1 launcher=$2 np=$3 limit=$4 app=$5 srcdir=$6
case "$app" in
  lammps) bin=lmp pkg=lammps ;;
  hpcc) bin=hpcc pkg=hpcc ;;
  netpipe) bin=NPopenmpi pkg=netpipe-openmpi ;;
  *) echo "unknown app $app"; exit 2 ;;
esac
if ! command -v "$bin" >/dev/null; then
  if [ "${ROCE_REQUIRE_APPS:-0}" = 1 ]; then
    echo "[app-test] FAIL: $bin (Debian package $pkg) not installed and ROCE_REQUIRE_APPS=1"; exit 1
  fi
  echo "[app-test] SKIP: $bin not installed (apt-get install $pkg)"; exit 77
fi
tl=${UCX_TLS:-rc_roce,self}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

signature() {   # $1 = run dir, $2 = log
  case "$app" in
    lammps) grep -E '^Created [0-9]+ atoms|processor grid' "$2"
            awk '/^ *Step /{on=1} /^Loop time/{on=0} on' "$2" ;;
    hpcc) grep -E 'PASSED|FAILED|^Success=|^Failure=|Errors|maxErr|^HPL_N=|^HPL_NB=|Procs=' "$1/hpccoutf.txt" |
            awk '$1=="WALL"||$1=="CPU"{print $1,$2,$3,$4,$5,$6,$7,$8,$9; next} {print}' | sort | uniq -c ;;
    netpipe) awk '{print $1}' "$1/np.out" ;;   # the message sizes of the completed table
  esac
}
timing() {      # app-reported figures worth comparing
  case "$app" in
    lammps) grep -E '^Loop time|^Performance' "$2" | tr '\n' ' ' ;;
    hpcc) grep -E '^(HPL_Tflops|PTRANS_GBs|MPIRandomAccess_GUPs|MPIFFT_Gflops|AvgPingPongLatency_usec|AvgPingPongBandwidth_GBytes|RandomlyOrderedRingBandwidth_GBytes)=' "$1/hpccoutf.txt" | tr '\n' ' ' ;;
    netpipe) awk 'NR==1 {printf "latency %d B %.2f us; ", $1, $3*1e6} $2>m {m=$2; s=$1} END {printf "peak %.0f Mbps at %d B", m, s}' "$1/np.out" ;;
  esac
}

declare -A wall sig
rc_all=0
for run in test ref; do
  if [ $run = test ]; then t=$tl; else t=tcp,self; fi
  d=$work/$run; mkdir -p "$d"; cd "$d"
  case "$app" in
    lammps) cmd=(lmp -in "$srcdir/in.lj" -log none) ;;
    hpcc) # process grid P x Q from np: 1x2, 2x2, 2x3, ...
          P=1; for ((p = 1; p * p <= np; p++)); do [ $((np % p)) -eq 0 ] && P=$p; done
          sed -e "11s/^[0-9]*/$P/" -e "12s/^[0-9]*/$((np / P))/" "$srcdir/hpccinf.txt" >"$d/hpccinf.txt"
          cmd=(hpcc) ;;
    netpipe) cmd=(NPopenmpi -n 20 -u 1048576 -o "$d/np.out") ;;
  esac
  start=$(date +%s.%N)
  UCX_TLS=$t "$runner" "$launcher" "$np" "$limit" "${cmd[@]}" >"$d/log" 2>&1
  rc=$?
  wall[$run]=$(echo "$(date +%s.%N) - $start" | bc)
  if [ $rc -ne 0 ]; then
    echo "[app-test] FAIL: $app over UCX_TLS=$t np=$np failed:"; tail -30 "$d/log"; rc_all=1; continue
  fi
  signature "$d" "$d/log" >"$d/sig"
  if [ ! -s "$d/sig" ]; then echo "[app-test] FAIL: no result lines from $app over UCX_TLS=$t"; tail -30 "$d/log"; rc_all=1; continue; fi
  if [ "$app" = hpcc ] && ! grep -q 'Success=1' "$d/sig"; then
    echo "[app-test] FAIL: hpcc over UCX_TLS=$t did not verify:"; cat "$d/sig"; rc_all=1
  fi
  if [ "$app" = hpcc ] && grep -q FAILED "$d/sig"; then
    echo "[app-test] FAIL: hpcc over UCX_TLS=$t reports FAILED:"; grep FAILED "$d/sig"; rc_all=1
  fi
  printf '[app-test] %-8s np=%s UCX_TLS=%-12s wall %6.2f s  %s\n' "$app" "$np" "$t" "${wall[$run]}" "$(timing "$d" "$d/log")"
done
[ $rc_all -eq 0 ] || exit 1
echo "[app-test] result of $app over $tl (reference: tcp,self):"; sed 's/^/    /' "$work/test/sig" | head -40
if ! diff -u "$work/ref/sig" "$work/test/sig" >"$work/diff"; then
  echo "[app-test] FAIL: $app results over $tl differ from tcp,self:"; cat "$work/diff"; exit 1
fi
echo "[app-test] ok: $app results over $tl equal those over tcp,self"
