#!/usr/bin/env bash
# Side-by-side comparison in ONE run: UCX tcp vs rc_roce (userspace RoCEv2 device) on loopback,
# plus the raw UDP ping-pong floor: MPI (mpi_pingpong, mpi_put_lat under roce-mpirun) and
# ucx_perftest UCT/UCP figures. Prints a Markdown table of figures and ratios.
# Usage: bench/compare.sh [build-dir]   (after cmake/build.sh). Takes about 3 minutes.
# The machine is noisy: each figure is the best of ROUNDS (default 3) alternating runs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${ROUNDS:-3}
export UCX_NET_DEVICES=lo
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

mpi() {   # mpi <tls> <out> prog args: through roce-mpirun (it only adds the preload for rc_roce use)
  local tls=$1 out=$2; shift 2
  UCX_TLS=$tls timeout 600 "$build/roce-mpirun" -np 2 "$@" >>"$out" 2>&1 || {
    echo "bench: run failed ($tls $*)" >&2; tail -20 "$out" >&2; exit 1; }
}
best() {  # best <file> <key-regex> <field> <min|max>
  grep -E "$2" "$1" | sed -E "s/.*$3=([0-9.]+).*/\1/" | sort -g | { if [ "$4" = min ]; then head -1; else tail -1; fi; }
}

# ucx_perftest pair on loopback: perftest <out> <UCT tl or ""> <test args...>. A UCT test (tl set)
# runs on that transport and device lo; a UCP test (tl empty) with UCX_TLS=<tl>,self set by the
# caller. Appends the "Final:" line (iters p50 lat-avg lat-overall bw-avg bw-overall ...).
perftest() {
  local out=$1 port=$((13000 + RANDOM % 2000)); shift
  LD_PRELOAD="$build/uct/libuct_roce.so.0" timeout 120 ucx_perftest -p "$port" "$@" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.7
  LD_PRELOAD="$build/uct/libuct_roce.so.0" timeout 120 ucx_perftest -p "$port" localhost "$@" 2>&1 \
    | grep '^Final:' >>"$out" || echo "bench: ucx_perftest $* failed" >&2
  wait "$srv" 2>/dev/null || true
}
pbest() {  # pbest <file> <field> <min|max>: best of the Final: lines' field
  awk -v f="$2" '{ print $(f) }' "$1" 2>/dev/null | sort -g | { if [ "$3" = min ]; then head -1; else tail -1; fi; }
}

for r in $(seq 1 "$rounds"); do
  echo "[bench] round $r/$rounds" >&2
  "$build/bench/udp_pingpong" 20000 >>"$tmp/udp" 2>&1
  for tls in tcp rc_roce; do
    mpi "$tls,self" "$tmp/pp.$tls" "$build/mpi-tests/mpi_pingpong" --no-check --max-size 1048576 --iters 1000 --bw-iters 20
    mpi "$tls,self" "$tmp/put.$tls" "$build/bench/mpi_put_lat" 2000
    perftest "$tmp/uct_am_lat.$tls" -x "$tls" -d lo -t am_lat -n 20000
    UCX_TLS=$tls,self perftest "$tmp/tag_lat.$tls" -t tag_lat -n 20000
    UCX_TLS=$tls,self perftest "$tmp/tag_bw.$tls" -t tag_bw -s 1048576 -n 300 -w 20
    UCX_TLS=$tls,self perftest "$tmp/put_bw.$tls" -t ucp_put_bw -s 1048576 -n 300 -w 20
    UCX_TLS=$tls,self perftest "$tmp/get_bw.$tls" -t ucp_get -s 1048576 -n 300 -w 20
  done
done

row() {  # row <label> <tcp> <roce> <lower-is-better: 1|0>
  local ratio
  ratio=$(awk -v t="$2" -v r="$3" 'BEGIN { if (t > 0) printf "%.2fx", r / t; else print "n/a" }')
  printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$ratio"
}
echo
echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, best of $rounds alternating rounds; ratio = rc_roce / tcp."
echo
echo "| metric | UCX tcp | rc_roce | ratio |"
echo "|---|---|---|---|"
for s in 8 4096; do
  row "MPI ping-pong latency ${s} B (us)" "$(best "$tmp/pp.tcp" "^size=$s " lat_us min)" "$(best "$tmp/pp.rc_roce" "^size=$s " lat_us min)"
done
for s in 65536 1048576; do
  row "MPI streaming bandwidth ${s} B (MB/s)" "$(best "$tmp/pp.tcp" "^size=$s " bw_MBps max)" "$(best "$tmp/pp.rc_roce" "^size=$s " bw_MBps max)"
done
for op in put get; do
  for s in 8 1048576; do
    row "MPI_${op} + flush latency ${s} B (us)" "$(best "$tmp/put.tcp" "^op=$op size=$s " lat_us min)" "$(best "$tmp/put.rc_roce" "^op=$op size=$s " lat_us min)"
  done
done
row "UCT am_lat (ucx_perftest -x <tl> -d lo -t am_lat), us" "$(pbest "$tmp/uct_am_lat.tcp" 4 min)" "$(pbest "$tmp/uct_am_lat.rc_roce" 4 min)"
row "UCP tag_lat (UCX_TLS=<tl>,self ucx_perftest -t tag_lat), us" "$(pbest "$tmp/tag_lat.tcp" 4 min)" "$(pbest "$tmp/tag_lat.rc_roce" 4 min)"
row "UCP tag_bw 1 MiB, MB/s" "$(pbest "$tmp/tag_bw.tcp" 7 max)" "$(pbest "$tmp/tag_bw.rc_roce" 7 max)"
row "UCP ucp_put_bw 1 MiB, MB/s (tcp emulates RMA over AM)" "$(pbest "$tmp/put_bw.tcp" 7 max)" "$(pbest "$tmp/put_bw.rc_roce" 7 max)"
row "UCP ucp_get 1 MiB, MB/s" "$(pbest "$tmp/get_bw.tcp" 7 max)" "$(pbest "$tmp/get_bw.rc_roce" 7 max)"
echo
echo "Raw UDP ping-pong floor (half round trip): 8 B $(best "$tmp/udp" '^size=8 ' lat_us min) us, 4 KiB $(best "$tmp/udp" '^size=4096 ' lat_us min) us."
