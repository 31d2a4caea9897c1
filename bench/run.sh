#!/usr/bin/env bash
# The comparison harness (issue 9): the MPI and UCP measurements over UCX tcp, rc_roce and ud_roce
# (userspace device on loopback), interleaved in one run, repeated, with CSV/JSON results, PNG
# plots and a Markdown table of medians, spread and ratios against tcp.
#
#   bash bench/run.sh [--quick] [--readme] [--out DIR] [build-dir]
#
#   (default) 5 rounds, 1 B..4 MiB, allreduce at np 2..8     about 10 minutes, at most ~13
#   --quick   2 rounds, 1 B..1 MiB, allreduce at np 2, 4, 8    about 1 minute, at most ~2
#   --tiny    1 round, up to 4 KiB, np 2 and 4, few iterations  (ctest bench.run_smoke)
#   --readme  also writes the table into README.md between the run markers
#   --out     results directory (default <build>/bench-results/run)
#
# Per round and per measurement the three transports run one after the other (their order
# rotates every round), so each ratio compares two runs made seconds apart; ratios are computed
# round by round and their median reported. The time is bounded: no new round starts when the
# last one, plus 25%, would not fit in the mode's budget (a loaded machine gets fewer rounds, at least 2 in
# the default mode, 1 in --quick; the table says how many). Launches:
#   mpi_pingpong np 2                         half-round-trip latency and streaming bandwidth by size
#   mpi_put_lat np 2                          MPI_Put / MPI_Get + flush latency, 8 B .. 1 MiB
#   mpi_bench np 2                            bidirectional bandwidth by size, 8 B message rate (1 pair),
#                                             MPI_Fetch_and_op / MPI_Compare_and_swap latency, allreduce
#   mpi_bench np N (N > 2)                    8 B message rate (N/2 pairs, even N), allreduce at np N
#   ucx_perftest (UCP, one pair)              tag_lat 8 B, tag_bw 8 B message rate, ucp_fadd latency
# Transports: UCX_TLS=<tl>,self — no shared memory transport, so every message between ranks goes
# through the network path (TCP sockets, or our RoCEv2 packets over UDP). np > 2 oversubscribes
# a small machine (roce-mpirun passes --oversubscribe); the load average is recorded per launch.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=full readme=0 out="" build=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) mode=quick ;;
    --tiny) mode=tiny ;;
    --readme) readme=1 ;;
    --out) out=$2; shift ;;
    *) build=$1 ;;
  esac
  shift
done
build=${build:-$here/build}
if [ ! -x "$build/bench/mpi_bench" ] || [ ! -x "$build/roce-mpirun" ]; then   # a fresh clone
  echo "[run] no build in $build: building (cmake/build.sh; packages: cmake/setup.sh)" >&2
  ROCE_BUILD_DIR=$build bash "$here/cmake/build.sh" >&2
fi
build=$(cd "$build" && pwd)
out=${out:-$build/bench-results/run}
mkdir -p "$out"
# Per mode: rounds, max size, mpi_pingpong and mpi_put_lat iterations, mpi_bench --scale, np list, per-launch
# timeout (s), ucx_perftest iterations, time budget (s), rounds run whatever the budget.
case $mode in
  full)  rounds=5 max=4194304 pp="--iters 1000 --bw-iters 20" rma=2000 scale=1    nps="2 3 4 5 6 7 8" limit=300 pn=30000  budget=780 min_rounds=2 ;;
  quick) rounds=2 max=1048576 pp="--iters 200 --bw-iters 5"   rma=400  scale=0.2  nps="2 4 8"         limit=60  pn=8000   budget=110 min_rounds=1 ;;
  tiny)  rounds=1 max=4096    pp="--iters 20 --bw-iters 2"    rma=40   scale=0.02 nps="2 4"           limit=60  pn=1000   budget=0   min_rounds=1 ;;
esac
transports=(tcp rc_roce ud_roce)
export UCX_NET_DEVICES=lo
csv=$out/results.csv
echo "round,transport,test,np,size,value,unit,load1" > "$csv"
log=$out/last-launch.log
start=$(date +%s) step=0
launches=$(( rounds * ${#transports[@]} * (5 + $(wc -w <<<"$nps")) ))

# launch <round> <tl> <np> <program> [args...]: one mpirun; its figures become CSV rows. A failed
# launch is retried once (a busy machine can time a run out); a second failure stops the harness.
launch() {
  local r=$1 tl=$2 np=$3 load try; shift 3
  step=$((step + 1))
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "[run] $step/$launches round $r/$rounds $tl np $np $(basename "$1") ($(( $(date +%s) - start )) s, load $load)" >&2
  for try in 1 2; do
    if UCX_TLS=$tl,self timeout --kill-after=10 "$limit" "$build/roce-mpirun" -np "$np" "$@" >"$log" 2>&1; then
      sed -n -e "s/^size=\([0-9]*\) lat_us=\([0-9.]*\) bw_MBps=\([0-9.]*\).*/$r,$tl,pingpong_lat,$np,\1,\2,us,$load\n$r,$tl,pingpong_bw,$np,\1,\3,MBps,$load/p" \
             -e "s/^op=\([a-z]*\) size=\([0-9]*\) lat_us=\([0-9.]*\)$/$r,$tl,\1_lat,$np,\2,\3,us,$load/p" \
             -e "s/^test=\([a-z_]*\) np=\([0-9]*\) size=\([0-9]*\) value=\([0-9.e+-]*\) unit=\([A-Za-z]*\)$/$r,$tl,\1,\2,\3,\4,\5,$load/p" \
             "$log" >> "$csv"
      return 0
    fi
    echo "[run] failed (try $try): UCX_TLS=$tl,self roce-mpirun -np $np $*" >&2; tail -15 "$log" >&2
  done
  exit 1
}

# perftest <round> <tl> <csv test> <Final: field> <multiplier> <unit> ucx_perftest args...: one UCP
# ucx_perftest pair on lo (server, then client), as bench/compare.sh runs it; the client's
# "Final:" line (iters, typical/avg/overall latency, avg/overall MB/s, avg/overall msg/s) gives
# one CSV row.
perftest() {
  local r=$1 tl=$2 name=$3 field=$4 mult=$5 unit=$6 load port try line; shift 6
  step=$((step + 1))
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "[run] $step/$launches round $r/$rounds $tl ucx_perftest $* ($(( $(date +%s) - start )) s, load $load)" >&2
  for try in 1 2; do
    port=$((13000 + RANDOM % 4000))
    UCX_TLS=$tl,self LD_PRELOAD="$build/uct/libuct_roce.so.0" timeout "$limit" ucx_perftest -p "$port" "$@" >/dev/null 2>&1 &
    sleep 0.7
    line=$(UCX_TLS=$tl,self LD_PRELOAD="$build/uct/libuct_roce.so.0" timeout "$limit" ucx_perftest -p "$port" localhost "$@" 2>&1 | grep '^Final:' || true)
    wait $! 2>/dev/null || true
    if [ -n "$line" ]; then
      awk -v f="$field" -v m="$mult" -v pre="$r,$tl,$name,2,8," -v post=",$unit,$load" '{ printf "%s%.3f%s\n", pre, $(f) * m, post }' <<<"$line" >> "$csv"
      return 0
    fi
    echo "[run] failed (try $try): UCX_TLS=$tl,self ucx_perftest $*" >&2
  done
  exit 1
}

for r in $(seq 1 "$rounds"); do
  round_start=$(date +%s)
  order=("${transports[@]:$(( (r - 1) % 3 ))}" "${transports[@]:0:$(( (r - 1) % 3 ))}")
  for tl in "${order[@]}"; do
    launch "$r" "$tl" 2 "$build/mpi-tests/mpi_pingpong" --no-check --max-size "$max" $pp
  done
  for tl in "${order[@]}"; do launch "$r" "$tl" 2 "$build/bench/mpi_put_lat" "$rma"; done
  for np in $nps; do
    if [ "$np" = 2 ]; then tests=bibw,msgrate,atomic,allreduce; else tests=msgrate,allreduce; fi
    for tl in "${order[@]}"; do
      launch "$r" "$tl" "$np" "$build/bench/mpi_bench" --tests "$tests" --max-size "$max" --scale "$scale"
    done
  done
  for tl in "${order[@]}"; do perftest "$r" "$tl" ucp_tag_lat 4 1 us -t tag_lat -s 8 -n "$pn"; done
  for tl in "${order[@]}"; do perftest "$r" "$tl" ucp_tag_mr 9 0.000001 Mmsgs -t tag_bw -s 8 -n $((pn * 5)); done
  for tl in "${order[@]}"; do perftest "$r" "$tl" ucp_fadd_lat 4 1 us -t ucp_fadd -s 8 -n "$pn"; done
  now=$(date +%s)
  if [ "$r" -lt "$rounds" ] && [ "$r" -ge "$min_rounds" ] && [ "$budget" -gt 0 ] &&
     [ $(( now - start + (now - round_start) * 5 / 4 )) -gt "$budget" ]; then   # rounds vary: 25% margin
    echo "[run] another round would exceed the ${budget} s budget: stopping after $r of $rounds rounds" >&2
    rounds=$r
    break
  fi
done
secs=$(( $(date +%s) - start ))
echo "[run] $step launches in $secs s; summarising and plotting" >&2

command="bench/run.sh$([ "$mode" = full ] || echo " --$mode")"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
/usr/bin/python3 "$here/bench/run_report.py" "$csv" "$out" \
  "command=$command" "mode=$mode" "rounds=$rounds" "seconds=$secs" "cores=$(nproc)" \
  "cpu=$cpu" "kernel=$(uname -r)" "date=$(date -u +%Y-%m-%dT%H:%MZ)" \
  "ucx=$(ucx_info -v | sed -n 's/^# Version //p')" \
  "mpi=$(mpirun --version | head -1)" "transports=${transports[*]}" \
  "plots=$(realpath --relative-to="$here" "$out")"
if [ $readme = 1 ]; then
  new=$(mktemp)
  awk -v f="$out/table.md" '
    /<!-- run:begin/ { print; while ((getline line < f) > 0) print line; skip = 1; next }
    /<!-- run:end/   { skip = 0 }
    !skip { print }' "$here/README.md" > "$new"
  cat "$new" > "$here/README.md"; rm -f "$new"
  echo "[run] README.md updated" >&2
fi
for f in results.csv summary.csv results.json table.md latency.png bandwidth.png bibw.png msgrate.png allreduce.png; do
  [ -s "$out/$f" ] || { echo "run: $out/$f was not produced" >&2; exit 1; }
done
cat "$out/table.md"
echo "[run] results in $out: results.csv summary.csv results.json table.md *.png" >&2
