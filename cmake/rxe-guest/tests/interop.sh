#!/bin/bash
# Interoperability of our userspace RoCEv2 device (src/sw) with kernel soft-RoCE: RC SEND / WRITE /
# READ / atomics both ways between a kernel rxe QP and a userspace-device QP, every byte checked, the
# ICRC verified by both (roce_interop_rxe, src/verbs/interop/). Standalone, or the suite's `interop` group:
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/interop.sh
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/suite.sh interop
#
# Topology (no NAT, so the addresses the ICRC covers are what both sides think): a veth pair,
# veth0 192.168.77.1/24 in the initial network namespace carrying rxe1, veth1 192.168.77.2/24 in
# namespace ns1, where the userspace device binds UDP 4791. RoCEv2 sends every packet to port 4791
# and rxe (6.1) holds 0.0.0.0:4791 in the initial namespace only, so the userspace end must live in
# another namespace; rxe itself cannot (rdma link add needs a netdev of the initial namespace).
#
# Steps: interop.setup (namespace, veth pair, rxe1; checks who holds UDP 4791) and interop.rxe (the
# program: ~60 checks, rxe1's hw_counters deltas and our device's counters as rxe-result lines).
# rxe 6.1 drops a packet whose ICRC fails silently (no log line, no counter): the program's negative
# control (check rxe.drops_bad_icrc) shows it with rcvd_pkts and UDP InDatagrams. ~3 s in the guest.
#
# When run as `interop.sh setup` it only builds the topology (used by the interop.setup step).
# ROCE_INTEROP_ARGS: more options for roce_interop_rxe, e.g. "-v" (debug log of our device) or "--no-gso".

IOP_NS=ns1
IOP_RXE=rxe1
IOP_HOST_IP=192.168.77.1     # veth0, rxe1's GID ::ffff:192.168.77.1
IOP_SW_IP=192.168.77.2       # veth1 in ns1, the userspace device

# ---- interop.sh setup: the topology (a step of its own, under the step timeout) ----------------
interop_setup() {
  set -e
  modprobe veth
  ip -batch - <<EOF
netns add $IOP_NS
link add veth0 type veth peer name veth1 netns $IOP_NS
addr add $IOP_HOST_IP/24 dev veth0
link set veth0 up
EOF
  ip -n "$IOP_NS" -batch - <<EOF
addr add $IOP_SW_IP/24 dev veth1
link set veth1 up
link set lo up
EOF
  rdma link add "$IOP_RXE" type rxe netdev veth0
  set +e
  # Wait for port ACTIVE and the RoCE v2 GID of veth0's address (::ffff:c0a8:4d01).
  local base=/sys/class/infiniband/$IOP_RXE/ports/1 state="" g="" gid="" want o1 o2 o3 o4 i j
  IFS=. read -r o1 o2 o3 o4 <<< "$IOP_HOST_IP"
  printf -v want 'ffff:%02x%02x:%02x%02x' "$o1" "$o2" "$o3" "$o4"
  for ((i = 0; i < 100; i++)); do
    read -r state < "$base/state" 2>/dev/null
    for j in 0 1 2 3; do
      read -r g < "$base/gids/$j" 2>/dev/null && [[ $g == *"$want" ]] && gid="[$j] $g"
    done
    [[ $state == *ACTIVE* && -n $gid ]] && break
    sleep 0.1
  done
  echo "$IOP_RXE on veth0: state '$state', GID ${gid:-none}"
  [[ $state == *ACTIVE* ]] || { echo "$IOP_RXE port 1 not ACTIVE"; return 1; }
  [ -n "$gid" ] || { echo "no RoCE v2 GID ::ffff:$IOP_HOST_IP on $IOP_RXE"; return 1; }
  # Who holds UDP 4791 (hex 12B7): rxe in the initial namespace, nobody yet in ns1.
  local root=no ns=no local_addr
  while read -r _ local_addr _; do [[ $local_addr == *:12B7 ]] && root=yes; done < /proc/net/udp
  while read -r _ local_addr _; do [[ $local_addr == *:12B7 ]] && ns=yes; done \
    < <(ip netns exec "$IOP_NS" cat /proc/net/udp)
  echo "UDP 4791 bound: initial namespace $root (rxe), $IOP_NS $ns"
  [ $root = yes ] && [ $ns = no ]
}

# ---- the group (needs lib.sh's step/result/fail_step) -------------------------------------------
interop_group() {
  local bin=${ROCE_BUILD_DIR:-/work/main/build}/src/verbs/roce_interop_rxe
  local here_iop line
  here_iop=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [ ! -x "$bin" ]; then
    fail_step interop "$bin not built"
    return
  fi
  T=30 step interop.setup bash "$here_iop/interop.sh" setup || return   # (its log is shown on failure)
  while IFS= read -r line; do printf '%s\n' "$line"; done < "$LOG"
  local saved=$COUNTERS_DEV
  COUNTERS_DEV=$IOP_RXE
  # shellcheck disable=SC2086  # ROCE_INTEROP_ARGS: extra options, e.g. -v (debug log) or --no-gso
  step interop.rxe "$bin" --rxe "$IOP_RXE" --sw-ip "$IOP_SW_IP" --sw-netns "/run/netns/$IOP_NS" ${ROCE_INTEROP_ARGS:-}
  COUNTERS_DEV=$saved
  [ -f "$LOG" ] || return
  while IFS= read -r line; do
    case $line in
      "check "*|interop:*) printf '%s\n' "$line" ;;
      rxe-result\ *) printf '%s\n' "$line"; printf '%s\n' "$line" >> "$RESULTS" ;;
    esac
  done < "$LOG"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  if [ "${1:-}" = setup ]; then
    interop_setup
    exit
  fi
  set -u
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  # shellcheck source=lib.sh
  source "$here/lib.sh"
  say "interop: build dir ${ROCE_BUILD_DIR:-/work/main/build}, step timeout ${STEP_TIMEOUT}s"
  interop_group
  summary
fi
