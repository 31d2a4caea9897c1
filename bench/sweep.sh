#!/usr/bin/env bash
# Latency and bandwidth by message size, rc_roce (userspace device) against UCX tcp on loopback,
# interleaved in one run: CSV results, PNG plots and a Markdown table with ratios.
#
#   bash bench/sweep.sh [--quick] [--readme] [build-dir]
#
#   --quick   1 B..1 MiB, 2 rounds (about 1-2 minutes); default: 1 B..4 MiB, 5 rounds
#   --readme  also writes the table into README.md between the sweep markers
#
# Each round runs mpi_pingpong (every size: half-round-trip latency and streaming bandwidth)
# under roce-mpirun once per transport, alternating, and records the load average next to the
# figures (the machine is shared). Per size and transport the median over rounds is reported,
# with the spread (min..max) in the CSV. Output in <build>/bench-results/: sweep.csv (every
# run), summary.csv, latency.png, bandwidth.png, table.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
quick=0 readme=0 build=""
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    --readme) readme=1 ;;
    *) build=$a ;;
  esac
done
build=$(cd "${build:-$here/build}" && pwd)
out=$build/bench-results
mkdir -p "$out"
if [ $quick = 1 ]; then rounds=2 max=1048576 iters=300 bw_iters=5; else rounds=5 max=4194304 iters=1000 bw_iters=20; fi
export UCX_NET_DEVICES=lo
csv=$out/sweep.csv
echo "round,transport,size,lat_us,bw_MBps,load1" > "$csv"
start=$(date +%s)
for r in $(seq 1 "$rounds"); do
  for tls in tcp rc_roce; do
    echo "[sweep] round $r/$rounds $tls ($(( $(date +%s) - start )) s)" >&2
    load=$(cut -d' ' -f1 /proc/loadavg)
    log=$(mktemp)
    if ! UCX_TLS=$tls,self timeout 900 "$build/roce-mpirun" -np 2 "$build/mpi-tests/mpi_pingpong" \
         --no-check --max-size "$max" --iters "$iters" --bw-iters "$bw_iters" >"$log" 2>&1; then
      echo "sweep: mpi_pingpong over $tls failed:" >&2; tail -20 "$log" >&2; rm -f "$log"; exit 1
    fi
    sed -n "s/^size=\([0-9]*\) lat_us=\([0-9.]*\) bw_MBps=\([0-9.]*\).*/$r,$tls,\1,\2,\3,$load/p" "$log" >> "$csv"
    rm -f "$log"
  done
done
echo "[sweep] done in $(( $(date +%s) - start )) s; plotting" >&2
/usr/bin/python3 "$here/bench/sweep_plot.py" "$csv" "$out" "bench/sweep.sh$([ $quick = 1 ] && echo ' --quick')"
if [ $readme = 1 ]; then
  new=$(mktemp)
  awk -v f="$out/table.md" '
    /<!-- sweep:begin/ { print; while ((getline line < f) > 0) print line; skip = 1; next }
    /<!-- sweep:end/   { skip = 0 }
    !skip { print }' "$here/README.md" > "$new"
  cat "$new" > "$here/README.md"; rm -f "$new"
  echo "[sweep] README.md updated" >&2
fi
cat "$out/table.md"
