#!/usr/bin/env bash
# UCX_*_PORT_RANGE against a real firewall (ctests port_range.*): a network namespace whose
# nftables input chain drops every UDP datagram outside 47000-47015, as a cluster firewall that
# opens one range for MPI. A ucx_perftest pair (UCP tag_bw, 1 MiB) runs inside it over TRANSPORT
# on loopback:
#   range    UCX_*_PORT_RANGE=47000-47015: both ends bind in the range; the transfer completes and
#            the firewall dropped nothing
#   blocked  no range (ephemeral ports, the default): the firewall drops the transport's packets
#            and the client fails (the check that this setup can fail, within the peer timeout)
#   full     another process holds 47000-47001 and UCX_*_PORT_RANGE=47000-47001: the interface
#            does not open (ucx_info -d: "failed to open interface") and a UCP worker cannot be
#            created (ucx_info -e fails), each with one error line, naming the setting
#   mpi      UCX_*_PORT_RANGE=47000-47015: an MPI program at np 4 under real mpirun (one port per
#            rank) passes, and the firewall dropped nothing
# Usage: port_range_check.sh ENV_FILE TRANSPORT(rc_roce|ud_roce) range|blocked|full
#        port_range_check.sh ENV_FILE TRANSPORT mpi RUN_MPI_TEST ROCE_MPIRUN PROGRAM
# Exits 77 (skipped) when network namespaces cannot be created (not root, no netns support).
set -uo pipefail
envfile=$1 tl=$2 mode=$3
# shellcheck disable=SC1090
source "$envfile"
ns=roce_ports.$$
slog=$(mktemp) clog=$(mktemp)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null; rm -f "$slog" "$clog"
}
trap cleanup EXIT
if ! ip netns add "$ns" 2>/dev/null; then
  echo "[ports] SKIP: cannot create a network namespace"; exit 77
fi
ip -n "$ns" link set lo up || exit 1
# shellcheck source=firewall.sh
source "$(dirname "$0")/firewall.sh"
firewall_up "$ns" || exit 1
dropped() { firewall_dropped "$ns"; }

TL=$(echo "$tl" | tr a-z A-Z)
export UCX_NET_DEVICES=lo UCX_TLS=$tl,self
# A dead peer is declared within seconds (blocked mode), not after the defaults' 5 s / 30 s.
export UCX_RC_ROCE_PEER_TIMEOUT=2s UCX_UD_ROCE_TIMEOUT=3s
case $mode in
range|mpi) export "UCX_${TL}_PORT_RANGE=47000-47015" ;;
full)    export "UCX_${TL}_PORT_RANGE=47000-47001" ;;
blocked) unset "UCX_${TL}_PORT_RANGE" ;;
esac
echo "[ports] $tl in a namespace whose firewall drops UDP outside 47000-47015;" \
     "UCX_${TL}_PORT_RANGE=$(v=UCX_${TL}_PORT_RANGE; echo "${!v:-unset}")"

if [ "$mode" = full ]; then
  ip netns exec "$ns" python3 -c '
import socket, sys, time
held = []
for p in (47000, 47001):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", p))
    held.append(s)
print("held", flush=True)
time.sleep(60)' >"$slog" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 150); do grep -q held "$slog" && break; sleep 0.1; done
  grep -q held "$slog" || { echo "[ports] FAIL: the port holder did not start"; cat "$slog"; exit 1; }
  want="ports 47000-47001 on 127.0.0.1 are all bound by another socket (UCX_${TL}_PORT_RANGE"
  # one_error LOG: the log's only ERROR line is the one wanted.
  one_error() {
    [ "$(grep -c " ERROR " "$1")" = 1 ] && grep " ERROR " "$1" | grep -qF "$want" && return 0
    echo "[ports] FAIL: not exactly one error line, saying \"$want\""; grep " ERROR " "$1" | head -5; return 1
  }
  # Interface level: ucx_info -t TL prints the device, then its capabilities or that it failed.
  ip netns exec "$ns" timeout 60 ucx_info -d -t "$tl" >"$clog" 2>&1
  irc=$?
  grep -h "$want" "$clog" | head -1
  if [ $irc -ne 0 ] || grep -q "capabilities:" "$clog" || ! grep -q "failed to open interface" "$clog"; then
    echo "[ports] FAIL: ucx_info -d rc=$irc, or $tl opened on a port outside the range"; tail -n 15 "$clog"; exit 1
  fi
  one_error "$clog" || exit 1
  # UCP level: a worker with TL cannot be created (UCP opens every interface or none).
  UCX_TLS=$tl,self ip netns exec "$ns" timeout 60 ucx_info -e -u t >"$clog" 2>&1
  irc=$?
  echo "[ports] UCP worker with UCX_TLS=$tl,self: ucx_info -e rc=$irc"
  if [ $irc -eq 0 ] || [ $irc -eq 124 ]; then
    echo "[ports] FAIL: a UCP worker was created (or hung) with every port of the range taken"; tail -n 15 "$clog"; exit 1
  fi
  one_error "$clog" || exit 1
  echo "[ports] ok"; exit 0
fi

if [ "$mode" = mpi ]; then
  run_mpi_test=$4 launcher=$5 program=$6
  ip netns exec "$ns" bash "$run_mpi_test" "$launcher" 4 120 "$program"
  mrc=$?
  drops=$(dropped)
  echo "[ports] mpirun rc=$mrc; the firewall dropped $drops datagrams"
  if [ $mrc -ne 0 ] || [ "$drops" != 0 ]; then echo "[ports] FAIL"; exit 1; fi
  echo "[ports] ok"; exit 0
fi

port=$(( 20000 + (RANDOM % 20000) ))   # ucx_perftest's own TCP connection (not filtered)
args=(-t tag_bw -s 1048576 -n 100 -p "$port")
ip netns exec "$ns" timeout --kill-after=5 60 ucx_perftest "${args[@]}" >"$slog" 2>&1 &
server=$!
pids+=("$server")
crc=1
for _ in $(seq 1 50); do
  t0=$SECONDS
  ip netns exec "$ns" timeout --kill-after=5 60 ucx_perftest 127.0.0.1 "${args[@]}" >"$clog" 2>&1
  crc=$?
  grep -q "connect() failed\|Connection refused" "$clog" || break
  sleep 0.2
done
took=$(( SECONDS - t0 ))
kill "$server" 2>/dev/null; wait "$server"; src=$?
drops=$(dropped)
echo "[ports] client rc=$crc after ${took} s, server rc=$src; the firewall dropped $drops datagrams"
if [ "$mode" = range ]; then
  tail -n 2 "$clog"
  if [ $crc -ne 0 ] || [ "$drops" != 0 ]; then
    echo "[ports] FAIL: the transfer inside the open range did not pass cleanly"; tail -n 15 "$clog" "$slog"; exit 1
  fi
else
  # The peer is declared dead after 2-3 s here: the client must fail by then, not wait for the
  # server's exit (60 s) — a failed endpoint whose error UCP cannot handle is fatal, as in UCX.
  if [ $crc -eq 0 ] || [ "$drops" = 0 ]; then
    echo "[ports] FAIL: ephemeral ports got through a firewall that drops them (the check cannot fail)"; exit 1
  fi
  if [ $took -ge 30 ]; then
    echo "[ports] FAIL: the client took ${took} s to fail (hung after the peer failure)"; tail -n 15 "$clog"; exit 1
  fi
  grep -m 2 "failed" "$clog"
fi
echo "[ports] ok"
