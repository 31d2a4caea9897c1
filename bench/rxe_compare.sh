#!/usr/bin/env bash
# rc_roce vs UCX's rc_verbs (with ud_verbs:aux), and ud_roce vs ud_verbs, on the same kernel rxe device, in the same guest
# run: reads the figures the rxe guest suite recorded and prints a Markdown table of ratios.
#
#   bench/rxe_compare.sh [results.txt]     # default: build/rxe-guest/run-suite/results.txt
#
# Produce the figures first (one guest boot, ~2 minutes under TCG):
#   ctest --test-dir build -R rxe.suite -V       (or: bash cmake/test.sh)
# Latency ratios are rc_roce / rc_verbs (lower is better for rc_roce), bandwidth ratios likewise
# rc_roce / rc_verbs (higher is better). TCG emulation makes absolute figures meaningless; the
# ratios compare two transports on the same emulated CPU and the same rxe instance.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
results=${1:-$here/build/rxe-guest/run-suite/results.txt}
[ -s "$results" ] || { echo "rxe_compare: no figures in $results (run the rxe suite first)" >&2; exit 1; }

fig() { sed -n "s/^rxe-result name=$1 value=\([0-9.]*\) .*/\1/p" "$results" | tail -1; }

printf '| measurement (rxe0:1, QEMU TCG guest) | rc_roce | rc_verbs | ratio |\n|---|---|---|---|\n'
row() {   # row <label> <rc_roce figure> <rc_verbs figure>
  local a b
  a=$(fig "$2"); b=$(fig "$3")
  if [ -n "$a" ] && [ -n "$b" ]; then
    printf '| %s | %s | %s | %sx |\n' "$1" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
  else
    printf '| %s | %s | %s | - |\n' "$1" "${a:-n/a}" "${b:-n/a}"
  fi
}
row "UCT am_lat, us"                 rc_roce.am_lat            rc_verbs.am_lat
row "UCT add_lat, us"                rc_roce.add_lat           rc_verbs.add_lat
row "UCT put_bw zcopy 64 KiB, MB/s"  rc_roce.put_bw_64KiB      rc_verbs.put_bw_64KiB
row "UCT get zcopy 64 KiB, MB/s"     rc_roce.get_bw_64KiB      rc_verbs.get_bw_64KiB
row "UCP tag_lat, us"                ucp_rc_roce.tag_lat       ucp_rc_verbs.tag_lat
row "UCP tag_bw 1 MiB, MB/s"         ucp_rc_roce.tag_bw_1MiB   ucp_rc_verbs.tag_bw_1MiB
row "UCP ucp_put_bw 1 MiB, MB/s"     ucp_rc_roce.put_bw_1MiB   ucp_rc_verbs.put_bw_1MiB
row "MPI 8 B latency, us"            mpi_rc_roce.lat_8B        mpi_rc_verbs.lat_8B
row "MPI latency <= 64 B (median), us" mpi_rc_roce.lat_small   mpi_rc_verbs.lat_small
row "MPI bandwidth 1 MiB, MB/s"      mpi_rc_roce.bw_1MiB       mpi_rc_verbs.bw_1MiB

# ud_roce (a verbs UD QP + our reliability) against UCX's ud_verbs, same device and run.
printf '\n| measurement (rxe0:1, QEMU TCG guest) | ud_roce | ud_verbs | ratio |\n|---|---|---|---|\n'
row "UCT am_lat, us"                 ud_roce.am_lat            ud_verbs.am_lat
row "UCT am_bw bcopy 512 B, MB/s"    ud_roce.am_bw_512B        ud_verbs.am_bw_512B
row "UCP tag_lat, us"                ucp_ud_roce.tag_lat       ucp_ud_verbs.tag_lat
row "UCP tag_bw 1 MiB, MB/s"         ucp_ud_roce.tag_bw_1MiB   ucp_ud_verbs.tag_bw_1MiB
row "MPI 8 B latency, us"            mpi_ud_roce.lat_8B        mpi_ud_verbs.lat_8B
row "MPI bandwidth 256 KiB, MB/s"    mpi_ud_roce.bw_256KiB     mpi_ud_verbs.bw_256KiB
