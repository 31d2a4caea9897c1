#!/bin/bash
# Congestion control of rc_roce on an RDMA device (verbs backend, src/verbs/congestion.cpp): kernel
# rxe has none of its own, so a sender floods a shallow switch queue and recovers from the drops
# by go-back-N and, for a lost tail, by its ACK timeout. The delay window holds work requests in
# software instead.
#
#   ccverbs.setup      rxeC on vC 192.168.89.1 and rxeD on vD 192.168.89.2, a veth pair in this
#                      namespace (routing as in gid.sh: each address leaves through the other's veth
#                      end), the bottleneck on vC: tbf 40 Mbit/s with a 64 KiB queue (tail drop)
#   ccverbs.put.<mode> ucx_perftest ucp_put_bw 20 x 1 MiB from rxeC to rxeD, UCX_TLS=rc_roce,self,
#                      UCX_RC_ROCE_CC=<mode> for off and delay (DELAY_TARGET $CCV_TARGET); queue sampled
#                      every 100 ms. (Data integrity under the window: roce_verbs_tests VerbsCc.* and
#                      ccverbs.uncongested.delay, which checks every byte. An MPI incast across
#                      rxeC/rxeD behind this tbf failed in both modes with a QP disconnect, see the
#                      notes; not used here.)
#   ccverbs.contrast   delay must drop fewer packets than off, and deliver at least its goodput
#   ccverbs.uncongested.<mode>  mpi_pingpong 4 MiB on rxe0 (no bottleneck) with off and delay: what the
#                      window costs where nothing is congested (why auto is off on RDMA devices)
# Results: ccverbs.<mode>.{goodput_mbps,goodput_pct,drops,queue_p95_bytes,rxe_retries,held},
# ccverbs.uncongested.<mode>.bw_4MiB.
# shellcheck source=netpair.sh
source "$(dirname "${BASH_SOURCE[0]}")/netpair.sh"
CCV_SCRIPT=$(realpath "${BASH_SOURCE[0]}")
CCV_A=192.168.89.1
CCV_B=192.168.89.2
CCV_RATE_MBIT=${CCV_RATE_MBIT:-40}
CCV_LIMIT=${CCV_LIMIT:-65536}
CCV_TARGET=${CCV_TARGET:-5ms}

ccverbs_setup() {
  set -e
  modprobe veth
  ip link add vC type veth peer name vD
  ip addr add $CCV_A/24 dev vC
  ip addr add $CCV_B/24 dev vD
  ip link set vC up
  ip link set vD up
  local_route_pair vC $CCV_A vD $CCV_B 12 103
  rdma link add rxeC type rxe netdev vC
  rdma link add rxeD type rxe netdev vD
  tc qdisc add dev vC root tbf rate "${CCV_RATE_MBIT}mbit" burst 16kb limit "$CCV_LIMIT"
  set +e
  local i
  for ((i = 0; i < 100; i++)); do
    [ -e /sys/class/infiniband/rxeC/ports/1/gids/1 ] && [ -e /sys/class/infiniband/rxeD/ports/1/gids/1 ] && break
    sleep 0.1
  done
  tc -s qdisc show dev vC
}

ccverbs_teardown() {
  rdma link delete rxeC 2>/dev/null
  rdma link delete rxeD 2>/dev/null
  ip link del vC 2>/dev/null
  local_table_restore
  local_route_pair_del 12
}

ccverbs_tbf() {   # ccverbs_tbf <word>: the number after "<word> " in vC's tbf statistics
  local s
  s=$(tc -s qdisc show dev vC)
  [[ $s =~ $1\ ([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo 0
}

ccverbs_rxe_retries() {   # rxeC's ACK timeouts + sequence NAK retries so far
  local n=0 f v
  for f in completer_retry_err rcvd_seq_err; do
    read -r v < "/sys/class/infiniband/rxeC/ports/1/hw_counters/$f" 2>/dev/null && n=$((n + v))
  done
  echo $n
}

# ccverbs_put <mode>: ucx_perftest ucp_put_bw 20 x 1 MiB from rxeC (client) to rxeD (server) through
# the bottleneck; sets CCV_DROPS and CCV_MBPS (goodput x100, integer).
ccverbs_put() {
  local mode=$1 name=ccverbs.put.$1 qlog=$OUT/ccverbs-queue-$1 stats=$OUT/ccverbs-stats-$1 qpid
  local drops0 retries0 line
  rm -rf "$stats"; mkdir -p "$stats"; : > "$qlog"; rm -f "$qlog.stop"
  drops0=$(ccverbs_tbf dropped) retries0=$(ccverbs_rxe_retries)
  { while [ ! -e "$qlog.stop" ]; do echo "qdisc show dev vC"; nap 0.1; done; } |
    tc -s -batch - 2>/dev/null |
    while read -r line; do
      [[ $line =~ ^backlog\ ([0-9]+)b ]] && echo "${BASH_REMATCH[1]}" >> "$qlog"
    done &
  qpid=$!
  local -a envs=(UCX_TLS=rc_roce,self "UCX_RC_ROCE_CC=$mode" "UCX_RC_ROCE_STATS_DIR=$stats")
  [ "$mode" = delay ] && envs+=("UCX_RC_ROCE_DELAY_TARGET=$CCV_TARGET")
  say "  ${envs[*]}"
  port=$((port + 1))
  SRV=(env UCX_NET_DEVICES=rxeD:1 "${envs[@]}" ucx_perftest -p "$port")
  CLI=(env UCX_NET_DEVICES=rxeC:1 "${envs[@]}" ucx_perftest -p "$port" localhost -t ucp_put_bw -s 1048576 -n 20 -w 2)
  T=$(( STEP_TIMEOUT * 3 )) pair "$name" "$port"
  local rc=$?
  : > "$qlog.stop"; wait "$qpid" 2>/dev/null
  CCV_DROPS=$(( $(ccverbs_tbf dropped) - drops0 ))
  local retries=$(( $(ccverbs_rxe_retries) - retries0 ))
  [ $rc = 0 ] || return 1
  local bw qn qp95=0 held=0 k val f
  bw=$(field_after "$LOG" Final: 6)
  [ -n "$bw" ] || { fail_step "$name" "no Final: line"; return 1; }
  qn=$(wc -l < "$qlog")
  [ "$qn" -gt 0 ] && qp95=$(sort -n "$qlog" | sed -n "$(( qn * 95 / 100 + 1 ))p")
  for f in "$stats"/*; do
    [ -f "$f" ] || continue
    while read -r k val; do
      [ "$k" = cc_held ] && held=$((held + val))
    done < "$f"
  done
  # perftest's MB/s are MiB/s; the bottleneck is CCV_RATE_MBIT (10^6 bit/s).
  CCV_MBPS=$(awk -v v="$bw" 'BEGIN { printf "%d", v * 1048576 * 8 / 1e6 * 100 }')
  result "ccverbs.$mode.goodput_mbps" "$(( CCV_MBPS / 100 )).$(printf '%02d' $(( CCV_MBPS % 100 )))" Mbit/s
  result "ccverbs.$mode.goodput_pct" "$(( CCV_MBPS / CCV_RATE_MBIT ))" "%"
  result "ccverbs.$mode.drops" "$CCV_DROPS" packets
  result "ccverbs.$mode.queue_p95_bytes" "${qp95:-0}" bytes
  result "ccverbs.$mode.rxe_retries" "$retries" count
  result "ccverbs.$mode.held" "$held" wrs
  CCV_HELD=$held
  say "  $mode: $(( CCV_MBPS / CCV_RATE_MBIT ))% of ${CCV_RATE_MBIT} Mbit/s, $CCV_DROPS drops, queue p95 ${qp95:-0} B, rxe retries $retries, WRs held $held"
}

ccverbs_group() {
  if [ ! -x "$BUILD/mpi-tests/mpi_pingpong" ]; then
    fail_step ccverbs "$BUILD/mpi-tests/mpi_pingpong not built"
    return
  fi
  port=13900
  local saved_nd=${UCX_NET_DEVICES-} mode w bw
  # Why the default (auto) is off on RDMA devices: the same window on an uncongested rxe0.
  for mode in off delay; do
    T=$(( STEP_TIMEOUT * 2 )) step "ccverbs.uncongested.$mode" env UCX_NET_DEVICES=rxe0:1 UCX_TLS=rc_roce,self \
      "UCX_RC_ROCE_CC=$mode" "UCX_RC_ROCE_DELAY_TARGET=$CCV_TARGET" "$BUILD/roce-mpirun" -np 2 \
      "$BUILD/mpi-tests/mpi_pingpong" --only-size 4194304 --iters 3 --bw-iters 2 || continue
    bw=""
    while read -r -a w; do
      [[ ${w[0]:-} == size=4194304 ]] && bw=${w[2]#bw_MBps=}
    done < "$LOG"
    grep -q "^# mpi_pingpong: .* 0 mismatches" "$LOG" || { fail_step "ccverbs.uncongested.$mode" "data mismatches or no summary"; continue; }
    [ -n "$bw" ] && result "ccverbs.uncongested.$mode.bw_4MiB" "$bw" MB/s
  done
  unset UCX_NET_DEVICES
  export LD_PRELOAD=$BUILD/uct/libuct_roce.so.0   # ucx_perftest loads the plugin this way
  if T=30 step ccverbs.setup bash "$CCV_SCRIPT" setup; then
    local off_drops="" off_mbps="" delay_drops="" delay_mbps="" off_held="" delay_held=""
    ccverbs_put off && off_drops=$CCV_DROPS off_mbps=$CCV_MBPS off_held=$CCV_HELD
    ccverbs_put delay && delay_drops=$CCV_DROPS delay_mbps=$CCV_MBPS delay_held=$CCV_HELD
    if [ -n "$off_drops" ] && [ -n "$delay_drops" ]; then
      # Same run, same queue: the window must keep the queue from overflowing as much as rxe does
      # alone, without giving up goodput (5% slack for TCG's scheduling noise).
      local why=""
      [ "$delay_drops" -lt "$off_drops" ] || why="delay dropped $delay_drops packets, off $off_drops"
      # ... and it must be the window that did it: delay held work requests back, off none
      # (else two noisy runs of the same thing could pass the comparison above by chance).
      [ "${delay_held:-0}" -gt 0 ] && [ "${off_held:-1}" -eq 0 ] \
        || why="${why:+$why; }work requests held: delay ${delay_held:-?}, off ${off_held:-?}"
      [ $(( delay_mbps * 100 )) -ge $(( off_mbps * 95 )) ] \
        || why="${why:+$why; }delay goodput ${delay_mbps} < 95% of off's ${off_mbps} (x100 Mbit/s)"
      if [ -z "$why" ]; then
        PASSED+=(ccverbs.contrast); printf 'rxe-step name=ccverbs.contrast status=pass\n' | tee -a "$RESULTS"
      else
        fail_step ccverbs.contrast "$why"
      fi
    fi
  fi
  unset LD_PRELOAD
  bash "$CCV_SCRIPT" teardown
  [ -n "$saved_nd" ] && export UCX_NET_DEVICES=$saved_nd
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    setup) ccverbs_setup; exit ;;
    teardown) ccverbs_teardown; exit ;;
    *)
      here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
      # shellcheck source=lib.sh
      source "$here/lib.sh"
      BUILD=${ROCE_BUILD_DIR:-/work/main/build}
      ccverbs_group
      summary ;;
  esac
fi
