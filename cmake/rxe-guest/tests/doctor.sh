#!/bin/bash
# `roce_doctor serve` + `roce_doctor check` on kernel rxe: the suite's `doctor` group (~20 s in the
# guest; sourced by suite.sh, which sets DEV, BUILD and the step helpers of lib.sh):
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/suite.sh doctor
#
# Steps:
#   doctor.check.rxe    serve --once --dev rxe0 and check <rxe0's netdev IPv4> --dev rxe0, both in the
#                       guest: every check ok, rc_verbs included (the verbs backend's RC SEND
#                       ping-pong, 8 B and 64 KiB, over rxe0), and path_mtu covers rxe0's active_mtu
#   doctor.check.json   the same with --json: parses, six checks, ok
#   doctor.check.dead   check against a port nobody serves: exit 1 within 10 s, reachability FAIL
#   doctor.devices      `roce_doctor devices`: rxe0:1 listed PORT_ACTIVE, its state/GID/MTU checks ok,
#                       located through its netdev (hwloc), --json parses
#   doctor.counters     rc_roce on rxe0:1 (verbs backend) with UCX_RC_ROCE_STATS_DIR: the counter files
#                       carry rxe's port counters (hw_*) and a section per QP; roce_doctor counters sums
#                       them per peer (one peer: the passive QP names the requester's device address)
# (The MTU mismatch between network namespaces is the host ctest doctor.check.netns_mtu.)
# Results: rxe-result doctor.rc_verbs.lat_8B / lat_64KiB, doctor.rc_sw.lat_8B (median half round trip).

# doctor_lat <log> <check> <size text, e.g. "8 B">: the latency figure of that size on the check's line.
doctor_lat() {
  local line rest
  while IFS= read -r line; do
    [[ $line == "check $2: ok"* ]] || continue
    rest=${line#*"$3 "}
    [ "$rest" != "$line" ] && { printf '%s' "${rest%% us*}"; return 0; }
  done < "$1"
  return 1
}

doctor_group() {
  local doctor=$BUILD/src/gid/roce_doctor ndev="" ip="" c v w line p=18590
  if [ ! -x "$doctor" ]; then
    fail_step doctor "$doctor not built"
    return
  fi
  # The IPv4 address of rxe0's netdev: rxe drops traffic between two addresses over lo, so the
  # check goes to that address (a local one: its UDP traffic takes lo, its RDMA traffic rxe0).
  read -r ndev < "/sys/class/infiniband/$DEV/ports/1/gid_attrs/ndevs/0" 2>/dev/null
  while read -r -a w; do
    [ "${w[2]:-}" = inet ] && { ip=${w[3]%/*}; break; }
  done < <(ip -o -4 addr show dev "${ndev:-eth0}")
  if [ -z "$ip" ]; then
    fail_step doctor "no IPv4 address on ${ndev:-eth0} (rxe0's netdev)"
    return
  fi
  say "roce_doctor check against $ip (netdev $ndev of $DEV)"

  SRV=("$doctor" serve --port "$p" --once --dev "$DEV")
  CLI=("$doctor" check "$ip" --port "$p" --dev "$DEV")
  if pair doctor.check.rxe "$p"; then
    while IFS= read -r line; do printf '  %s\n' "$line"; done < "$LOG"
    for c in reachability netdev_mtu path_mtu rc_sw ud_sw rc_verbs; do
      grep -q "^check $c: ok" "$LOG" || fail_step doctor.check.rxe "check $c is not ok"
    done
    grep -q "^check path_mtu: ok.*of the verbs device $DEV:1 (RoCE MTU" "$LOG" || fail_step doctor.check.rxe "path_mtu ignores $DEV's active_mtu"
    v=$(doctor_lat "$LOG" rc_verbs "8 B") && result doctor.rc_verbs.lat_8B "$v" us
    v=$(doctor_lat "$LOG" rc_verbs "64 KiB") && result doctor.rc_verbs.lat_64KiB "$v" us
    v=$(doctor_lat "$LOG" rc_sw "8 B") && result doctor.rc_sw.lat_8B "$v" us
  fi

  p=$((p + 1))
  SRV=("$doctor" serve --port "$p" --once --dev "$DEV")
  CLI=("$doctor" check "$ip" --port "$p" --dev "$DEV" --json)
  if pair doctor.check.json "$p"; then
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] and [c["name"] for c in d["checks"]] == ["reachability", "netdev_mtu", "path_mtu", "rc_sw", "ud_sw", "rc_verbs"], d
' "$LOG" || fail_step doctor.check.json "bad JSON"
  fi

  step doctor.devices "$doctor" devices
  if [ -f "$LOG" ]; then
    while IFS= read -r line; do printf '  %s\n' "$line"; done < "$LOG"
    grep -q "^  $DEV:1$" "$LOG" || fail_step doctor.devices "$DEV:1 not listed"
    for c in state "RoCE v2 GID" MTU; do
      grep -q "^check $DEV:1 $c: ok" "$LOG" || fail_step doctor.devices "check $DEV:1 $c is not ok"
    done
    grep -A14 "^  $DEV:1$" "$LOG" | grep -q "locality .*(via netdev $ndev)" \
      || fail_step doctor.devices "$DEV not located through its netdev $ndev"
    "$doctor" devices --json | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["ok"], d' \
      || fail_step doctor.devices "bad JSON"
  fi

  # Counters of rc_roce on the verbs backend: rxe's own port counters ride along (hw_*), QPs have
  # sections, and the doctor sums them per peer.
  local sdir=/tmp/roce-stats.$$
  mkdir -p "$sdir"
  p=$((p + 1))
  SRV=(env UCX_RC_ROCE_STATS_DIR="$sdir" LD_PRELOAD="$PLUGIN" ucx_perftest -p "$p")
  CLI=(env UCX_RC_ROCE_STATS_DIR="$sdir" LD_PRELOAD="$PLUGIN" ucx_perftest -p "$p" localhost -t am_lat -x rc_roce
       -d "$DEV:1" -n 2000 -w 100)
  if pair doctor.counters "$p"; then
    "$doctor" counters "$sdir" > "$LOG.doctor" 2>&1
    while IFS= read -r line; do printf '  %s\n' "$line"; done < <(grep -E "^rc_roce|hw_sent_pkts|hw_rcvd_pkts|  peer |  qp |closed" "$LOG.doctor")
    "$doctor" counters "$sdir" --json | python3 -c '
import json, sys
ifs = json.load(sys.stdin)["interfaces"]
assert len(ifs) == 2, ifs
for i in ifs:
    c = i["counters"]
    assert c.get("hw_sent_pkts", 0) > 0 and c.get("hw_rcvd_pkts", 0) > 0, c   # rxe port counters
    assert c["sends"] > 0 and i["qps"], i
    assert len(i["peers"]) == 1, i["peers"]   # both QPs of the pair reach one peer device
    assert sum(p["counters"]["sends"] for p in i["peers"]) == c["sends"], i   # every SEND is some peer'"'"'s
' || fail_step doctor.counters "counter files without hw_* counters, QP sections or matching per-peer sums"
  fi
  rm -rf "$sdir"

  # Nobody listens: the exit code 1 is the expected outcome, the step checks it.
  T=15 step doctor.check.dead bash -c '"$1" check "$2" --port 18599 --dev "$3"; [ $? = 1 ]' _ "$doctor" "$ip" "$DEV"
  if [ -f "$LOG" ]; then
    grep -q "^check reachability: FAIL .*Connection refused" "$LOG" \
      || fail_step doctor.check.dead "no clear reachability failure"
  fi
}
