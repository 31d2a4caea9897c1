#!/bin/bash
# The rxe guest suite: one boot, a batch of steps on kernel soft-RoCE rxe0 (loopback: server and
# client in the guest on the same device). Run it through the harness:
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/suite.sh [verbs] [ucx] [mpi] [roce] [ud] [interop] [gid] [cc] [ccverbs] [doctor] [mpisuite]
#
# Groups (default: all):
#   verbs  ibv_devinfo (rxe0 PORT_ACTIVE, a RoCE v2 IPv4 GID), ibv_rc_pingpong and ibv_ud_pingpong -c,
#          perftest ib_write_lat / ib_write_bw
#   ucx    ucx_info -d; ucx_perftest UCT am_lat/put_bw/get_bw/add_lat on rc_verbs, am_lat/am_bw on
#          ud_verbs (rxe0:1); UCP tag_lat/tag_bw/ucp_put_bw with UCX_TLS=rc_verbs,ud_verbs:aux,self and
#          tag_lat/tag_bw with UCX_TLS=ud_verbs,self
#   mpi    mpirun -np 2 over pml ucx on rc_verbs and on ud_verbs: $ROCE_BUILD_DIR/mpi-tests/mpi_pingpong
#          (every byte checked) if it is built, else NPopenmpi
#   roce   our rc_roce on the verbs backend (rxe0:1), beside the rc_verbs figures above: the verbs
#          backend's own tests (roce_verbs_tests), ucx_info -d, ucx_perftest UCT am_lat/put_bw/get_bw/
#          add_lat, UCP tag_lat/tag_bw/ucp_put_bw with UCX_TLS=rc_roce,self (no auxiliary transport),
#          and mpi_pingpong under mpirun with UCX_TLS=rc_roce,self
#   ud     our ud_roce on the verbs backend (a UD QP on rxe0:1 + our reliability), beside the ud_verbs
#          figures above: ucx_info -d, ucx_perftest UCT am_lat/am_bw, UCP tag_lat/tag_bw with
#          UCX_TLS=ud_roce,self, mpi_pingpong under mpirun with UCX_TLS=ud_roce,self and with
#          UCX_TLS=rc_verbs,ud_roce:aux,self (ud_roce wires up rc_verbs)
#   interop our userspace RoCEv2 device (src/sw) against a kernel rxe QP (rxe1 on a veth pair, the
#          userspace end in network namespace ns1): SEND/WRITE/READ/atomics both ways, every byte and
#          the ICRC checked both ways, wrong rkeys (interop.sh, roce_interop_rxe; ~5 s)
#   gid    GID and traffic-class selection of rc_roce (gid.sh): the default is the RoCE v2 IPv4 entry
#          (index from sysfs), a VLAN netdev (eth0.100) connects with UCX_RC_ROCE_GID_NETDEV, a DSCP set
#          on the server only is on the wire both ways (rxeA/rxeB on a veth pair, dumpcap), bad
#          settings give one-line errors (~40 s)
#   cc     congestion control on a real ECN-marking bottleneck (fabric.sh): network namespaces, a
#          bridge, tbf + RED/ECN towards the receiver; a 4-to-1 MPI incast over rc_roce on the
#          userspace device with UCX_RC_ROCE_CC=dcqcn (3 runs) and off; goodput, Jain, queue, CNPs (~130 s)
#   ccverbs congestion control of rc_roce on RDMA devices (ccverbs.sh): rxeC/rxeD on a veth pair behind
#          a 40 Mbit/s tbf with a 64 KiB tail-drop queue, ucp_put_bw with UCX_RC_ROCE_CC=off and delay:
#          goodput, drops, queue, rxe's retries; mpi_pingpong 4 MiB on rxe0 with both (~2 min)
#   doctor `roce_doctor serve` + `check` on rxe0 (doctor.sh): every check ok, rc_verbs over rxe0 included;
#          --json; a check against a port nobody serves fails clearly; `roce_doctor devices` (rxe0:1's
#          checks, located through its netdev); rc_roce's counter files on rxe0 (hw_* port counters, a
#          section per QP, one peer) (~20 s)
#   mpisuite the project's MPI test suite (mpisuite.sh: mpi_p2p, mpi_osc, mpi_coll at np 4, mpi_threads) over
#          rc_roce and ud_roce on rxe0:1 under roce-mpirun, results checked by the programs
# Each step prints "rxe-step name=... status=pass|fail", each figure "rxe-result name=... value=...
# unit=..." (also in $ROCE_RXE_OUT/results.txt, logs in $ROCE_RXE_OUT/logs); exit 1 if any step failed.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
# shellcheck source=interop.sh
source "$here/interop.sh"   # interop_group
# shellcheck source=gid.sh
source "$here/gid.sh"       # gid_group
# shellcheck source=fabric.sh
source "$here/fabric.sh"    # cc_group
# shellcheck source=ccverbs.sh
source "$here/ccverbs.sh"   # ccverbs_group
# shellcheck source=doctor.sh
source "$here/doctor.sh"    # doctor_group
# shellcheck source=mpisuite.sh
source "$here/mpisuite.sh"  # mpisuite_group

groups=("$@")
[ ${#groups[@]} = 0 ] && groups=(verbs ucx mpi roce ud interop gid cc ccverbs doctor mpisuite)
want() { local g; for g in "${groups[@]}"; do [ "$g" = "$1" ] && return 0; done; return 1; }

DEV=rxe0
COUNTERS_DEV=$DEV
BUILD=${ROCE_BUILD_DIR:-/work/main/build}
PLUGIN=$BUILD/uct/libuct_roce.so.0
export UCX_UD_VERBS_ETH_DGID_CHECK=n     # else every ud_verbs connection times out on rxe
export UCX_NET_DEVICES=$DEV:1
say "groups: ${groups[*]}; build dir $BUILD; step timeout ${STEP_TIMEOUT}s"

# The RoCE v2 IPv4 GID of rxe0 port 1 (::ffff:a.b.c.d), from sysfs.
GID_IDX=""
for ((i = 0; i < 16; i++)); do
  read -r g < "/sys/class/infiniband/$DEV/ports/1/gids/$i" 2>/dev/null || continue
  read -r t < "/sys/class/infiniband/$DEV/ports/1/gid_attrs/types/$i" 2>/dev/null || continue
  if [[ $g == 0000:0000:0000:0000:0000:ffff:* && $t == "RoCE v2" ]]; then GID_IDX=$i; break; fi
done

port=18515
next_port() { port=$((port + 1)); }

# ---------------------------------------------------------------------------------------------
if want verbs; then
  step verbs.devinfo ibv_devinfo -d "$DEV" -v
  if [ -s "$LOG" ]; then
    active=0 v2gid=0
    while IFS= read -r line; do
      [[ $line == *state:*PORT_ACTIVE* ]] && active=1
      [[ $line == *GID\[*::ffff:*RoCE\ v2* ]] && v2gid=1
    done < "$LOG"
    [ $active = 1 ] || fail_step verbs.devinfo "port 1 of $DEV is not PORT_ACTIVE"
    [ $v2gid = 1 ] || fail_step verbs.devinfo "no RoCE v2 IPv4 GID (::ffff:a.b.c.d) in the GID table"
    [ -n "$GID_IDX" ] || fail_step verbs.devinfo "no RoCE v2 IPv4 GID in sysfs"
    say "rxe0: PORT_ACTIVE=$active, RoCE v2 IPv4 GID index ${GID_IDX:-none}"
  fi
  gi=${GID_IDX:-1}

  # usec/iter of the pingpongs is a full round trip (of 4 packets each way for RC at MTU 1024).
  next_port
  SRV=(ibv_rc_pingpong -d "$DEV" -g "$gi" -c -n 500 -s 4096 -p "$port")
  CLI=("${SRV[@]}" localhost)
  if pair verbs.rc_pingpong "$port"; then
    v=$(field_after "$LOG" 500 6)
    [ -n "$v" ] && result verbs.rc_pingpong.rtt_4KiB "$v" us || fail_step verbs.rc_pingpong "no usec/iter line"
  fi

  next_port
  # UD messages must fit the path MTU (rxe: active_mtu 1024 on a 1500-byte netdev).
  SRV=(ibv_ud_pingpong -d "$DEV" -g "$gi" -c -n 500 -s 1024 -p "$port")
  CLI=("${SRV[@]}" localhost)
  if pair verbs.ud_pingpong "$port"; then
    v=$(field_after "$LOG" 500 6)
    [ -n "$v" ] && result verbs.ud_pingpong.rtt_1KiB "$v" us || fail_step verbs.ud_pingpong "no usec/iter line"
  fi

  # perftest: raw-verbs figures under UCX's (t_typical is perftest's median one-way latency).
  next_port
  SRV=(ib_write_lat -d "$DEV" -x "$gi" -F -n 1000 -p "$port")
  CLI=("${SRV[@]}" localhost)
  if pair verbs.ib_write_lat "$port"; then
    v=$(field_after "$LOG" 2 4)
    [ -n "$v" ] && result verbs.ib_write_lat "$v" us || fail_step verbs.ib_write_lat "no result line"
  fi
  next_port
  SRV=(ib_write_bw -d "$DEV" -x "$gi" -F -s 65536 -n 300 -p "$port")
  CLI=("${SRV[@]}" localhost)
  if pair verbs.ib_write_bw "$port"; then
    v=$(field_after "$LOG" 65536 3)
    [ -n "$v" ] && result verbs.ib_write_bw_64KiB "$v" MB/s || fail_step verbs.ib_write_bw "no result line"
  fi
fi

# ---------------------------------------------------------------------------------------------
# ucx_perftest's "Final:" line: iters p50 avg-lat overall-lat avg-bw overall-bw avg-rate overall-rate
perf_lat() { local v; v=$(field_after "$LOG" Final: 3); [ -n "$v" ] && result "$1" "$v" us || fail_step "$2" "no Final: line"; }
perf_bw()  { local v; v=$(field_after "$LOG" Final: 6); [ -n "$v" ] && result "$1" "$v" MB/s || fail_step "$2" "no Final: line"; }
perftest() {   # perftest <step-name> <ucx_perftest client args...>  (server gets the same env)
  local name=$1; shift
  port=$((port + 1))
  SRV=(ucx_perftest -p "$port")
  CLI=(ucx_perftest -p "$port" localhost "$@")
  pair "$name" "$port"
}

if want ucx; then
  port=13400
  step ucx.info ucx_info -d
  if [ -s "$LOG" ]; then
    tl="" seen=()
    while read -r -a w; do
      [ "${w[1]:-}" = Transport: ] && tl=${w[2]:-}
      [ "${w[1]:-}" = Device: ] && [ "${w[2]:-}" = "$DEV:1" ] && seen+=("$tl")
    done < "$LOG"
    say "ucx_info -d: transports on $DEV:1: ${seen[*]:-none}"
    [[ " ${seen[*]} " == *" rc_verbs "* ]] || fail_step ucx.info "rc_verbs not on $DEV:1"
    [[ " ${seen[*]} " == *" ud_verbs "* ]] || fail_step ucx.info "ud_verbs not on $DEV:1"
  fi

  # UCT level: one transport, no wireup.
  perftest uct.rc_verbs.am_lat -t am_lat -x rc_verbs -d "$DEV:1" -n 5000 -w 500 \
    && perf_lat rc_verbs.am_lat uct.rc_verbs.am_lat
  perftest uct.rc_verbs.put_bw -t put_bw -x rc_verbs -d "$DEV:1" -D zcopy -s 65536 -n 300 -w 30 \
    && perf_bw rc_verbs.put_bw_64KiB uct.rc_verbs.put_bw
  perftest uct.rc_verbs.get_bw -t get -x rc_verbs -d "$DEV:1" -D zcopy -s 65536 -n 300 -w 30 \
    && perf_bw rc_verbs.get_bw_64KiB uct.rc_verbs.get_bw
  perftest uct.rc_verbs.add_lat -t add_lat -x rc_verbs -d "$DEV:1" -n 2000 -w 200 \
    && perf_lat rc_verbs.add_lat uct.rc_verbs.add_lat
  perftest uct.ud_verbs.am_lat -t am_lat -x ud_verbs -d "$DEV:1" -n 5000 -w 500 \
    && perf_lat ud_verbs.am_lat uct.ud_verbs.am_lat
  perftest uct.ud_verbs.am_bw -t am_bw -x ud_verbs -d "$DEV:1" -D bcopy -s 512 -n 5000 -w 500 \
    && perf_bw ud_verbs.am_bw_512B uct.ud_verbs.am_bw

  # UCP level: rc_verbs needs an auxiliary transport for wireup.
  export UCX_TLS=rc_verbs,ud_verbs:aux,self
  perftest ucp.rc.tag_lat -t tag_lat -n 5000 -w 500 && perf_lat ucp_rc_verbs.tag_lat ucp.rc.tag_lat
  perftest ucp.rc.tag_bw -t tag_bw -s 1048576 -n 30 -w 3 && perf_bw ucp_rc_verbs.tag_bw_1MiB ucp.rc.tag_bw
  perftest ucp.rc.put_bw -t ucp_put_bw -s 1048576 -n 30 -w 3 && perf_bw ucp_rc_verbs.put_bw_1MiB ucp.rc.put_bw
  export UCX_TLS=ud_verbs,self
  perftest ucp.ud.tag_lat -t tag_lat -n 5000 -w 500 && perf_lat ucp_ud_verbs.tag_lat ucp.ud.tag_lat
  perftest ucp.ud.tag_bw -t tag_bw -s 1048576 -n 10 -w 2 && perf_bw ucp_ud_verbs.tag_bw_1MiB ucp.ud.tag_bw
  unset UCX_TLS
fi

# ---------------------------------------------------------------------------------------------
MPI_EXTRA=()   # more mpirun arguments of the next mpi_step (e.g. -x LD_PRELOAD=...)
if want mpi || want roce || want ud; then
  MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2
          --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca pml_base_verbose 10
          -x UCX_NET_DEVICES -x UCX_TLS -x UCX_UD_VERBS_ETH_DGID_CHECK)
  pingpong=$BUILD/mpi-tests/mpi_pingpong
  MPI_TIMEOUT=$(( STEP_TIMEOUT * 2 ))
  # Figures: lat_8B, lat_small (median one-way latency over the sizes <= 64 B, robust against the
  # scheduling outliers TCG produces) and the bandwidth at the largest size.
  mpi_step() {   # mpi_step <tag> <UCX_TLS> <max size>
    local name=mpi.$1 tag=$1 max=$3 lat="" bw="" ucx=0 bad="" bwname
    local -a small=()
    export UCX_TLS=$2
    if [ -x "$pingpong" ]; then
      if [ "$max" -ge 1048576 ]; then bwname=bw_$((max >> 20))MiB; else bwname=bw_$((max >> 10))KiB; fi
      T=$MPI_TIMEOUT step "$name" "${MPIRUN[@]}" "${MPI_EXTRA[@]}" "$pingpong" --max-size "$max" --iters 50 --bw-iters 2 --window 4 \
        || return
      while read -r -a w; do
        case "${w[*]}" in
          *"component ucx selected"*) ucx=1 ;;
          size=*" lat_us="*)
            local sz=${w[0]#size=} l=${w[1]#lat_us=}
            [ "$sz" -le 64 ] && small+=("$l")
            [ "$sz" = 8 ] && lat=$l
            [ "$sz" = "$max" ] && bw=${w[2]#bw_MBps=} ;;
          "# mpi_pingpong: "*" mismatches") bad=${w[4]} ;;  # "# mpi_pingpong: <n> transfers, <m> mismatches"
        esac
      done < "$LOG"
      [ "$bad" = 0 ] || { fail_step "$name" "data mismatches: ${bad:-no summary line}"; return; }
    else
      # NetPIPE: "n: <bytes> bytes <reps> times --> <Mbps> Mbps in <usec> usec" (usec one-way, best
      # of NetPIPE's trials). Kept small: each size runs several trials of -n round trips.
      bwname=bw_128KiB
      T=$MPI_TIMEOUT step "$name" "${MPIRUN[@]}" "${MPI_EXTRA[@]}" NPopenmpi -n 5 -p 0 -u 131072 -o /dev/null || return
      while read -r -a w; do
        case "${w[*]}" in
          *"component ucx selected"*) ucx=1 ;;
          *" bytes "*" times --> "*" usec")
            [ "${w[1]}" -le 64 ] && small+=("${w[9]}")
            [ "${w[1]}" = 8 ] && lat=${w[9]}
            [ "${w[1]}" = 131072 ] && bw=$(( ${w[6]%.*} / 8 )) ;;
        esac
      done < "$LOG"
    fi
    [ $ucx = 1 ] || { fail_step "$name" "pml ucx was not selected"; return; }
    [ -n "$lat" ] && result "mpi_$tag.lat_8B" "$lat" us || fail_step "$name" "no 8-byte latency line"
    [ ${#small[@]} -gt 0 ] && result "mpi_$tag.lat_small" "$(median "${small[@]}")" us
    [ -n "$bw" ] && result "mpi_$tag.$bwname" "$bw" MB/s || fail_step "$name" "no bandwidth line for the largest size"
  }
  command -v NPopenmpi >/dev/null || [ -x "$pingpong" ] || fail_step mpi "neither $pingpong nor NPopenmpi"
  say "MPI program: $( [ -x "$pingpong" ] && echo "$pingpong" || echo NPopenmpi )"
fi
if want mpi; then
  # ud_verbs moves large messages at a third of rc's rate: a smaller top size keeps the step short.
  mpi_step rc_verbs rc_verbs,ud_verbs:aux,self 1048576
  mpi_step ud_verbs ud_verbs,self 262144
  unset UCX_TLS
fi

# ---------------------------------------------------------------------------------------------
if want roce; then
  VERBS_TESTS=$BUILD/src/verbs/roce_verbs_tests
  if [ -x "$VERBS_TESTS" ]; then
    # Functional tests of the backend (two verbs::Devices on rxe0 in one process); the figures
    # test is left out (timings on TCG say nothing).
    ROCE_REQUIRE_RXE_DEVICE=1 T=$((STEP_TIMEOUT * 3)) step roce.verbs_backend \
      "$VERBS_TESTS" --gtest_filter='*:-*.Figures' --gtest_brief=1
  else
    fail_step roce.verbs_backend "$VERBS_TESTS not built"
  fi
  if [ ! -f "$PLUGIN" ]; then
    fail_step roce "$PLUGIN not built"
  else
    export LD_PRELOAD=$PLUGIN
    step roce.ucx_info ucx_info -d
    if [ -s "$LOG" ]; then
      md="" tl="" found=0
      while read -r -a w; do
        [ "${w[1]:-}" = Memory ] && md=${w[3]:-}
        [ "${w[1]:-}" = Transport: ] && tl=${w[2]:-}
        [ "${w[1]:-}" = Device: ] && [ "$tl" = rc_roce ] && [ "${w[2]:-}" = "$DEV:1" ] && found=1
      done < "$LOG"
      [ $found = 1 ] || fail_step roce.ucx_info "rc_roce not listed on $DEV:1"
      say "ucx_info -d: rc_roce on $DEV:1: $found"
    fi
    # Bad input: a GID index that is not in the table gets one clear error, no crash.
    UCX_RC_ROCE_GID_INDEX=200 step roce.bad_gid_index ucx_info -d -t rc_roce
    if [ -f "$LOG" ]; then
      grep -q "UCX_RC_ROCE_GID_INDEX=200: .*; valid: " "$LOG" \
        || fail_step roce.bad_gid_index "no clear error for UCX_RC_ROCE_GID_INDEX=200"
    fi
    # Registration cache of the verbs memory domain: a released region is reused, and a buffer
    # unmapped and mapped again at the same address sends its new content (no stale pages).
    MD=roce_$DEV DEV=$DEV:1 RCACHE_EXPECT_HIT=1 step roce.rcache "$BUILD/uct/uct_roce_selftest" rcache
    perftest uct.rc_roce.am_lat -t am_lat -x rc_roce -d "$DEV:1" -n 5000 -w 500 \
      && perf_lat rc_roce.am_lat uct.rc_roce.am_lat
    perftest uct.rc_roce.put_bw -t put_bw -x rc_roce -d "$DEV:1" -D zcopy -s 65536 -n 300 -w 30 \
      && perf_bw rc_roce.put_bw_64KiB uct.rc_roce.put_bw
    perftest uct.rc_roce.get_bw -t get -x rc_roce -d "$DEV:1" -D zcopy -s 65536 -n 300 -w 30 \
      && perf_bw rc_roce.get_bw_64KiB uct.rc_roce.get_bw
    perftest uct.rc_roce.add_lat -t add_lat -x rc_roce -d "$DEV:1" -n 2000 -w 200 \
      && perf_lat rc_roce.add_lat uct.rc_roce.add_lat
    # UCP with rc_roce alone: its own connection setup (CONNECT_TO_IFACE), no auxiliary transport.
    export UCX_TLS=rc_roce,self
    perftest ucp.rc_roce.tag_lat -t tag_lat -n 5000 -w 500 && perf_lat ucp_rc_roce.tag_lat ucp.rc_roce.tag_lat
    perftest ucp.rc_roce.tag_bw -t tag_bw -s 1048576 -n 30 -w 3 && perf_bw ucp_rc_roce.tag_bw_1MiB ucp.rc_roce.tag_bw
    perftest ucp.rc_roce.put_bw -t ucp_put_bw -s 1048576 -n 30 -w 3 && perf_bw ucp_rc_roce.put_bw_1MiB ucp.rc_roce.put_bw
    unset LD_PRELOAD
    # mpirun itself needs no plugin: only the ranks get it.
    MPI_EXTRA=(-x "LD_PRELOAD=$PLUGIN")
    mpi_step rc_roce rc_roce,self 1048576
    MPI_EXTRA=()
    unset UCX_TLS
  fi
fi

# ---------------------------------------------------------------------------------------------
if want ud; then
  if [ ! -f "$PLUGIN" ]; then
    fail_step ud "$PLUGIN not built"
  else
    export LD_PRELOAD=$PLUGIN
    step ud.ucx_info ucx_info -d -t ud_roce
    if [ -s "$LOG" ]; then
      grep -q "Device: $DEV:1" "$LOG" || fail_step ud.ucx_info "ud_roce not listed on $DEV:1"
    fi
    perftest uct.ud_roce.am_lat -t am_lat -x ud_roce -d "$DEV:1" -n 5000 -w 500 \
      && perf_lat ud_roce.am_lat uct.ud_roce.am_lat
    perftest uct.ud_roce.am_bw -t am_bw -x ud_roce -d "$DEV:1" -D bcopy -s 512 -n 5000 -w 500 \
      && perf_bw ud_roce.am_bw_512B uct.ud_roce.am_bw
    export UCX_TLS=ud_roce,self
    perftest ucp.ud_roce.tag_lat -t tag_lat -n 5000 -w 500 && perf_lat ucp_ud_roce.tag_lat ucp.ud_roce.tag_lat
    perftest ucp.ud_roce.tag_bw -t tag_bw -s 1048576 -n 10 -w 2 && perf_bw ucp_ud_roce.tag_bw_1MiB ucp.ud_roce.tag_bw
    unset LD_PRELOAD
    MPI_EXTRA=(-x "LD_PRELOAD=$PLUGIN")
    mpi_step ud_roce ud_roce,self 262144
    # ud_roce as the auxiliary transport that wires up UCX's rc_verbs (which cannot connect by
    # itself: without a working aux transport this run fails).
    mpi_step rc_verbs_ud_roce_aux rc_verbs,ud_roce:aux,self 1048576
    MPI_EXTRA=()
    unset UCX_TLS
  fi
fi

# ---------------------------------------------------------------------------------------------
if want interop; then
  interop_group   # creates ns1, a veth pair and rxe1 (rxe0 and its counters are not involved)
fi

# ---------------------------------------------------------------------------------------------
if want gid; then
  gid_group       # adds eth0.100 (kept), then rxeA/rxeB on a veth pair (removed again)
fi

# ---------------------------------------------------------------------------------------------
if want cc; then
  cc_group        # namespaces ccsw, ccr0, ccs1..4 (removed again); rxe0 is not involved
fi

# ---------------------------------------------------------------------------------------------
if want ccverbs; then
  ccverbs_group   # rxeC/rxeD on a veth pair behind a tbf (removed again)
fi

# ---------------------------------------------------------------------------------------------
if want mpisuite; then
  mpisuite_group  # mpi-tests/ over rc_roce and ud_roce on rxe0
fi

if want doctor; then
  doctor_group    # serve and check in the guest on rxe0
fi

# rxe's own counters over the whole batch: retransmissions (completer_retry_err, duplicate_request,
# rcvd_seq_err...) explain the occasional ms-long averages on loopback.
for f in /sys/class/infiniband/$DEV/ports/1/hw_counters/*; do
  read -r v < "$f" 2>/dev/null || continue
  [ "$v" != 0 ] && result "$DEV.hw_counters.${f##*/}" "$v" count
done

summary
