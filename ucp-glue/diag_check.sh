#!/usr/bin/env bash
# Diagnostics through the real UCX tools (ctests diag.*): a ucx_perftest pair over rc_roce with
# UCX_RC_ROCE_STATS_DIR (and UCX_RC_ROCE_PCAP) set, checked with roce_doctor and tshark.
# Usage: diag_check.sh ENV_FILE ROCE_DOCTOR TSHARK_CHECK MODE
#   counters  while the pair runs, `roce_doctor counters --live` shows both processes with
#             tx/rx packets > 0; after it, both files remain (marked exited) with the final
#             counters; the packet traces the pair wrote decode in tshark without errors
#   ud        ud_roce (UCX_UD_ROCE_STATS_DIR) with 2% drops: per-peer retransmissions add up to
#             each interface's, and some were counted
#   devices   `roce_doctor devices` on this host: exit 0, CPUs and netdevs listed, each netdev's
#             PCI function as sysfs has it; in a namespace, a 1500-byte veth with
#             UCX_RC_ROCE_MTU=4096 fails its check (exit 1, both sizes named), 1024 passes
#   faults    with UCX_RC_ROCE_FAULT_DROP=0.02 the retransmit counters are > 0 and the per-peer
#             sums (over the QPs) equal each interface's
set -uo pipefail
envfile=$1 doctor=$2 tshark_check=$3 mode=$4
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
export UCX_RC_ROCE_STATS_DIR=$dir

# Sum of counter $1 over the interfaces of `roce_doctor counters --json` on stdin, and their count.
sum_counter() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
ifs = d["interfaces"]
print(len(ifs), sum(i["counters"].get(sys.argv[1], 0) for i in ifs), min([i["counters"].get(sys.argv[1], 0) for i in ifs] or [0]))
' "$1"
}

case $mode in
counters)
  export UCX_RC_ROCE_PCAP="$dir/trace.%p.%d.pcap"
  export UCX_RC_ROCE_PCAP_SIZE=2m   # keeps the tshark pass short
  bash "$here/perftest_pair.sh" "$envfile" 120 -x rc_roce -d lo -t am_lat -n 200000 >"$dir/pair.log" 2>&1 &
  pair=$!
  live_ok=0
  for _ in $(seq 1 100); do
    read -r n _ min_tx < <("$doctor" counters "$dir" --live --json | sum_counter tx_packets)
    if [ "$n" -ge 2 ] && [ "$min_tx" -gt 0 ]; then live_ok=1; break; fi
    kill -0 $pair 2>/dev/null || break
    sleep 0.2
  done
  echo "[diag] while running:"; "$doctor" counters "$dir" --live | head -12
  wait $pair; prc=$?
  cat "$dir/pair.log"
  [ $prc -eq 0 ] || { echo "[diag] FAIL: perftest pair failed"; exit 1; }
  [ $live_ok -eq 1 ] || { echo "[diag] FAIL: roce_doctor counters --live never showed 2 running interfaces with tx_packets > 0"; exit 1; }
  echo "[diag] after the run:"; "$doctor" counters "$dir" | head -8
  "$doctor" counters "$dir" | grep -q "(exited)" || { echo "[diag] FAIL: exited processes not marked"; exit 1; }
  live_pids=$("$doctor" counters "$dir" --live --json | python3 -c 'import json,sys; print(*[i["pid"] for i in json.load(sys.stdin)["interfaces"]])') \
    || { echo "[diag] FAIL: roce_doctor counters --live --json did not give the interface list"; exit 1; }
  [ -z "$live_pids" ] || { echo "[diag] FAIL: --live lists exited processes ($live_pids)"; exit 1; }
  read -r n _ min_tx < <("$doctor" counters "$dir" --json | sum_counter tx_packets)
  read -r _ _ min_rx < <("$doctor" counters "$dir" --json | sum_counter rx_packets)
  echo "[diag] $n interfaces, min tx_packets $min_tx, min rx_packets $min_rx"
  # (empty values - the doctor or its JSON failed - fail too)
  if [ "${n:-0}" -ne 2 ] || [ "${min_tx:-0}" -le 0 ] || [ "${min_rx:-0}" -le 0 ]; then echo "[diag] FAIL: counters"; exit 1; fi
  ls "$dir"/trace.*.pcap >/dev/null || { echo "[diag] FAIL: no packet traces written"; exit 1; }
  "$tshark_check" "$dir"/trace.*.pcap; trc=$?
  [ $trc -eq 0 ] || [ $trc -eq 77 ] || exit 1
  ;;
faults)
  export UCX_RC_ROCE_FAULT_DROP=0.02
  bash "$here/perftest_pair.sh" "$envfile" 120 -x rc_roce -d lo -t am_lat -n 5000 || exit 1
  "$doctor" counters "$dir"
  read -r n retx _ < <("$doctor" counters "$dir" --json | sum_counter retransmits)
  echo "[diag] $n interfaces, retransmits $retx with UCX_RC_ROCE_FAULT_DROP=$UCX_RC_ROCE_FAULT_DROP"
  if [ "${n:-0}" -ne 2 ] || [ "${retx:-0}" -le 0 ]; then echo "[diag] FAIL: no retransmissions counted"; exit 1; fi
  # Per peer: the QPs' retransmissions add up to their interface's (every retransmission is some
  # QP's), and each interface names the other as its peer.
  "$doctor" counters "$dir" --json | python3 -c '
import json, sys
bad = 0
for i in json.load(sys.stdin)["interfaces"]:
    dev = i["counters"].get("retransmits", 0)
    peers = i["peers"]
    per_peer = sum(p["counters"].get("retransmits", 0) for p in peers)
    print("[diag] %s: retransmits %d, per peer %s" % (i["address"], dev, {p["peer"]: p["counters"].get("retransmits", 0) for p in peers}))
    if not peers or per_peer != dev:
        bad = 1
sys.exit(bad)' || { echo "[diag] FAIL: per-peer retransmissions do not add up to the device counters"; exit 1; }
  ;;
ud)
  # ud_roce's counter files: per peer, its reliability (retransmissions under 2% drops) adds up
  # to the interface's.
  unset UCX_RC_ROCE_STATS_DIR
  export UCX_UD_ROCE_STATS_DIR=$dir UCX_UD_ROCE_FAULT_DROP=0.02
  bash "$here/perftest_pair.sh" "$envfile" 120 -x ud_roce -d lo -t am_lat -n 5000 || exit 1
  "$doctor" counters "$dir" | grep -E "^ud_roce|peer|retransmits"
  "$doctor" counters "$dir" --json | python3 -c '
import json, sys
ifs = json.load(sys.stdin)["interfaces"]
bad = len(ifs) != 2
total = 0
for i in ifs:
    dev = i["counters"]["retransmits"]
    peers = {p["peer"]: p["counters"].get("retransmits", 0) for p in i["peers"]}
    print("[diag] %s %s: retransmits %d, per peer %s" % (i["transport"], i["address"], dev, peers))
    total += dev
    bad |= i["transport"] != "ud_roce" or not peers or sum(peers.values()) != dev
bad |= total == 0
sys.exit(bad)' || { echo "[diag] FAIL: ud_roce per-peer counters"; exit 1; }
  ;;
devices)
  out=$("$doctor" devices); rc=$?
  echo "$out"
  [ $rc -eq 0 ] || { echo "[diag] FAIL: roce_doctor devices exit $rc on this host"; exit 1; }
  echo "$out" | grep -q "^process CPUs: [0-9]" || { echo "[diag] FAIL: no process CPUs (hwloc)"; exit 1; }
  echo "$out" | grep -A3 "^  lo$" | grep -q "roce_mtu_auto  4096" || { echo "[diag] FAIL: lo not listed with RoCE MTU 4096"; exit 1; }
  # Every netdev backed by a PCI function is located at that function (sysfs says which).
  "$doctor" devices --json | python3 -c '
import json, os, re, sys
d = json.load(sys.stdin)
bad = 0
for dev in d["devices"]:
    if dev["kind"] != "netdev":
        continue
    path = os.path.realpath("/sys/class/net/%s/device" % dev["name"]) if os.path.exists("/sys/class/net/%s/device" % dev["name"]) else ""
    pci = [c for c in path.split("/") if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", c)]
    want = pci[-1] if pci else ""
    print("[diag] %s: pci %r (sysfs %r), locality %s" % (dev["name"], dev["pci"], want, dev["locality"]))
    if dev["pci"] != want or (want and not dev["cpus"]):
        bad = 1
sys.exit(bad)' || { echo "[diag] FAIL: locality disagrees with sysfs"; exit 1; }
  # An MTU mismatch set up in a namespace: a 1500-byte veth with UCX_RC_ROCE_MTU=4096 must fail
  # its check with a message naming both sizes; 1024 passes.
  ns=roce_diag.$$
  if ip netns add "$ns" 2>/dev/null; then
    trap 'ip netns del "$ns" 2>/dev/null; rm -rf "$dir"' EXIT
    ip -n "$ns" link add v0 type veth peer name v1 && ip -n "$ns" link set v0 mtu 1500 up &&
      ip -n "$ns" link set v1 up && ip -n "$ns" addr add 10.80.0.1/24 dev v0 || exit 1
    bad=$(ip netns exec "$ns" env UCX_RC_ROCE_MTU=4096 "$doctor" devices); brc=$?
    echo "$bad" | grep "^check"
    [ $brc -eq 1 ] || { echo "[diag] FAIL: MTU mismatch: exit $brc, want 1"; exit 1; }
    echo "$bad" | grep -q "^check v0 UCX_RC_ROCE_MTU: FAIL - .*4156-byte packets, v0 has MTU 1500" \
      || { echo "[diag] FAIL: no clear MTU mismatch message"; exit 1; }
    ip netns exec "$ns" env UCX_RC_ROCE_MTU=1024 "$doctor" devices >/dev/null \
      || { echo "[diag] FAIL: UCX_RC_ROCE_MTU=1024 fits a 1500-byte netdev but a check failed"; exit 1; }
    # Not a RoCE MTU at all (the transports refuse it): a failed check, not "needs 60-byte packets".
    bad=$(ip netns exec "$ns" env UCX_RC_ROCE_MTU=1000 "$doctor" devices); brc=$?
    [ $brc -eq 1 ] && echo "$bad" | grep -q "^check v0 UCX_RC_ROCE_MTU: FAIL - .*is not a RoCE MTU" \
      || { echo "[diag] FAIL: UCX_RC_ROCE_MTU=1000 passed roce_doctor devices (exit $brc)"; exit 1; }
  else
    echo "[diag] (no network namespaces here: MTU mismatch case skipped)"
  fi
  ;;
*) echo "usage: $0 ENV_FILE ROCE_DOCTOR TSHARK_CHECK counters|faults|ud|devices"; exit 2 ;;
esac
echo "[diag] ok"
