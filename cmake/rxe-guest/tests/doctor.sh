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

  # Nobody listens: the exit code 1 is the expected outcome, the step checks it.
  T=15 step doctor.check.dead bash -c '"$1" check "$2" --port 18599 --dev "$3"; [ $? = 1 ]' _ "$doctor" "$ip" "$DEV"
  if [ -f "$LOG" ]; then
    grep -q "^check reachability: FAIL .*Connection refused" "$LOG" \
      || fail_step doctor.check.dead "no clear reachability failure"
  fi
}
