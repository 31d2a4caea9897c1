#!/usr/bin/env bash
# `roce_doctor serve` + `roce_doctor check` end to end (ctests doctor.check.*), real sockets and
# devices, no RDMA needed. Usage: doctor_check.sh ROCE_DOCTOR MODE [PORT]
#   loopback    serve --once on 127.0.0.1 and check: every check ok (rc_verbs: ok or skip), exit 0
#   refused     check a port nobody listens on: reachability FAIL naming the refusal, exit 1, < 10 s
#   json        check --json parses (python3 json) and holds every check, once with a server
#               (ok: true) and once without (ok: false, exit 1)
#   bad_client  a server without --once survives a non-protocol line, an over-long line and a
#               silent client (each: a message on stderr), then serves a real check
#   netns_mtu   namespaces A - R (router) - B joined by veth pairs, serve in B, check from A:
#               all MTUs 9000: ok; R's B side 1500 (the path is smaller than both ends): path_mtu
#               FAIL naming 1500 and the 4156-byte packet, netdev_mtu ok; the same with --mtu 1024:
#               ok; B's netdev 1500: netdev_mtu FAIL naming both MTUs; an absent host on A's link:
#               reachability FAIL within 10 s. Skips (77) without netns.
#   firewall    a namespace whose nftables input chain drops UDP outside 47000-47015, serve there
#               with UCX_RC/UD_ROCE_PORT_RANGE=47000-47015: check --port-range 47000-47015 is all
#               ok and nothing was dropped; check without it: path_mtu, rc_sw and ud_sw FAIL (the
#               server's answers to ephemeral ports are dropped); a malformed --port-range: exit 2
set -uo pipefail
doctor=$1 mode=$2 port=${3:-18611}
dir=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  [ -n "${NS:-}" ] && for n in A R B; do ip netns del "$NS$n" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || fail "expected '$2' in $(basename "$1"):"$'\n'"$(cat "$1")"; }

# start_server NAME [prefix command...] -- serve args: starts it, waits for its "listening" line.
start_server() {
  local name=$1; shift
  local -a pre=()
  while [ "$1" != -- ]; do pre+=("$1"); shift; done; shift
  "${pre[@]}" "$doctor" serve "$@" >"$dir/$name.out" 2>"$dir/$name.err" &
  pids+=($!)
  local i
  for ((i = 0; i < 50; i++)); do
    grep -q listening "$dir/$name.out" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "server $name did not start:"$'\n'"$(cat "$dir/$name.out" "$dir/$name.err")"
  return 1
}

# run_check NAME [prefix command...] -- check args: output in $dir/NAME.out, exit code in $rc,
# wall time in $secs.
run_check() {
  local name=$1; shift
  local -a pre=()
  while [ "$1" != -- ]; do pre+=("$1"); shift; done; shift
  local t0=$SECONDS
  timeout 60 "${pre[@]}" "$doctor" check "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  rc=$? secs=$((SECONDS - t0))
  echo "--- check $* (exit $rc, ${secs}s)"; cat "$dir/$name.out"
}

case $mode in
loopback)
  start_server srv -- --bind 127.0.0.1 --port "$port" --once || exit 1
  run_check chk -- 127.0.0.1 --port "$port"
  [ "$rc" = 0 ] || fail "exit $rc, want 0"
  for c in reachability netdev_mtu path_mtu rc_sw ud_sw; do has "$dir/chk.out" "check $c: ok"; done
  grep -qE "check rc_verbs: (ok|skip)" "$dir/chk.out" || fail "rc_verbs neither ok nor skip"
  has "$dir/chk.out" "8 B "
  has "$dir/chk.out" "64 KiB "
  wait "${pids[0]}"; src=$?; pids=()
  [ "$src" = 0 ] || fail "serve --once exited $src after a clean session"
  ;;
refused)
  run_check chk -- 127.0.0.1 --port "$port"
  [ "$rc" = 1 ] || fail "exit $rc, want 1"
  [ "$secs" -le 10 ] || fail "took ${secs}s"
  has "$dir/chk.out" "check reachability: FAIL"
  has "$dir/chk.out" "Connection refused"
  has "$dir/chk.out" "check rc_sw: skip"
  ;;
json)
  start_server srv -- --bind 127.0.0.1 --port "$port" --once || exit 1
  parse='import json, sys
d = json.load(open(sys.argv[1]))
names = [c["name"] for c in d["checks"]]
want = ["reachability", "netdev_mtu", "path_mtu", "rc_sw", "ud_sw", "rc_verbs"]
assert names == want, names
assert all(c["status"] in ("ok", "FAIL", "skip") and c["detail"] for c in d["checks"]), d
print("ok" if d["ok"] else "failed", d["failed"])'
  run_check chk -- 127.0.0.1 --port "$port" --json
  [ "$rc" = 0 ] || fail "exit $rc, want 0"
  [ "$(python3 -c "$parse" "$dir/chk.out")" = "ok 0" ] || fail "JSON with a server: not ok 0"
  run_check none -- 127.0.0.1 --port "$((port + 1))" --json
  [ "$rc" = 1 ] || fail "exit $rc without a server, want 1"
  [ "$(python3 -c "$parse" "$dir/none.out")" = "failed 1" ] || fail "JSON without a server: not failed 1"
  ;;
bad_client)
  start_server srv -- --bind 127.0.0.1 --port "$port" --idle 2 || exit 1
  send() {   # send BYTES-FILE: what the server answers before closing (10 s at most)
    timeout 10 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=9)
s.sendall(open(sys.argv[2], "rb").read())
out = b""
while True:
    b = s.recv(4096)
    if not b: break
    out += b
print(out.decode(errors="replace"))' "$port" "$1"
  }
  printf 'GET / HTTP/1.0\r\n\r\n' >"$dir/http"
  head -c 5000 /dev/zero | tr '\0' x >"$dir/long"
  printf 'HELLO roce_doctor/1 roce_mtu=4096\n' >"$dir/silent"
  send "$dir/http" >"$dir/http.reply"; has "$dir/http.reply" "ERR roce_doctor/1"
  send "$dir/long" >"$dir/long.reply"; has "$dir/long.reply" "ERR roce_doctor/1"
  send "$dir/silent" >"$dir/silent.reply"; has "$dir/silent.reply" "reason=silent"
  run_check chk -- 127.0.0.1 --port "$port"
  [ "$rc" = 0 ] || fail "check after bad clients: exit $rc, want 0"
  has "$dir/srv.err" "malformed control message: not a roce_doctor/1 control message: 'GET / HTTP/1.0'"
  has "$dir/srv.err" "malformed control message: line longer than"
  has "$dir/srv.err" "silent for 2 s"
  kill -0 "${pids[0]}" 2>/dev/null || fail "the server exited"
  ;;
netns_mtu)
  NS=rdc$$
  if ! ip netns add "${NS}A" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces (root and ip netns needed)"; NS=""; exit 77
  fi
  ip netns add "${NS}R" && ip netns add "${NS}B" || exit 1
  set -e
  ip link add vA netns "${NS}A" type veth peer name rA netns "${NS}R"
  ip link add vB netns "${NS}B" type veth peer name rB netns "${NS}R"
  inA() { ip netns exec "${NS}A" "$@"; }
  inR() { ip netns exec "${NS}R" "$@"; }
  inB() { ip netns exec "${NS}B" "$@"; }
  inA ip addr add 10.201.1.1/24 dev vA; inR ip addr add 10.201.1.254/24 dev rA
  inR ip addr add 10.201.2.254/24 dev rB; inB ip addr add 10.201.2.1/24 dev vB
  for n in A R B; do ip netns exec "$NS$n" ip link set lo up; done
  inA ip link set vA mtu 9000 up; inR ip link set rA mtu 9000 up
  inR ip link set rB mtu 9000 up; inB ip link set vB mtu 9000 up
  inA ip route add default via 10.201.1.254
  inB ip route add default via 10.201.2.254
  inR sysctl -qw net.ipv4.ip_forward=1
  set +e
  start_server srv ip netns exec "${NS}B" -- || exit 1

  run_check all9000 ip netns exec "${NS}A" -- 10.201.2.1
  [ "$rc" = 0 ] || fail "all MTUs 9000: exit $rc, want 0"
  has "$dir/all9000.out" "check path_mtu: ok — path MTU 9000 bytes"
  has "$dir/all9000.out" "check netdev_mtu: ok — local vA MTU 9000, server vB MTU 9000"

  inR ip link set rB mtu 1500
  run_check hop1500 ip netns exec "${NS}A" -- 10.201.2.1
  [ "$rc" = 1 ] || fail "a 1500-byte hop: exit $rc, want 1"
  has "$dir/hop1500.out" "check netdev_mtu: ok"
  has "$dir/hop1500.out" "check path_mtu: FAIL — path MTU 1500 bytes is smaller than the 4156-byte RoCEv2 packets"
  has "$dir/hop1500.out" "set UCX_RC_ROCE_MTU=1024"
  has "$dir/hop1500.out" "the hops between vA and vB"

  run_check hop1500_mtu1024 ip netns exec "${NS}A" -- 10.201.2.1 --mtu 1024
  [ "$rc" = 0 ] || fail "a 1500-byte hop with --mtu 1024: exit $rc, want 0"
  has "$dir/hop1500_mtu1024.out" "fits 1084-byte RoCEv2 packets"

  # A host that is not there (on-link, nobody answers ARP): FAIL within the connect deadline.
  run_check nohost ip netns exec "${NS}A" -- 10.201.1.77
  [ "$rc" = 1 ] || fail "an absent host: exit $rc, want 1"
  [ "$secs" -le 10 ] || fail "an absent host took ${secs}s"
  has "$dir/nohost.out" "check reachability: FAIL — route 10.201.1.0/24 dev vA"

  inR ip link set rB mtu 9000
  inB ip link set vB mtu 1500
  run_check end1500 ip netns exec "${NS}A" -- 10.201.2.1
  [ "$rc" = 1 ] || fail "B's netdev at 1500: exit $rc, want 1"
  has "$dir/end1500.out" "check netdev_mtu: FAIL — local vA MTU 9000, server vB MTU 1500: MTU mismatch"
  # veth takes frames up to its MTU + 4 (a VLAN tag's room): the path really carries 1504.
  grep -qE "check path_mtu: FAIL — path MTU 150[0-4] bytes" "$dir/end1500.out" || fail "end1500: path_mtu not FAIL at ~1500"
  ;;
firewall)
  NS=rdf$$
  if ! ip netns add "${NS}A" 2>/dev/null; then
    echo "SKIP: cannot create a network namespace (root and ip netns needed)"; NS=""; exit 77
  fi
  inA() { ip netns exec "${NS}A" "$@"; }
  inA ip link set lo up
  # shellcheck source=../../ucp-glue/firewall.sh
  source "$(dirname "$0")/../../ucp-glue/firewall.sh"
  firewall_up "${NS}A" || { fails=$((fails + 1)); exit 1; }
  dropped() { firewall_dropped "${NS}A"; }
  start_server srv ip netns exec "${NS}A" env UCX_RC_ROCE_PORT_RANGE=47000-47015 \
    UCX_UD_ROCE_PORT_RANGE=47000-47015 -- --bind 127.0.0.1 --port 47015 || exit 1
  run_check open ip netns exec "${NS}A" -- 127.0.0.1 --port 47015 --port-range 47000-47015
  [ "$rc" = 0 ] || fail "with the range: exit $rc, want 0"
  for c in reachability path_mtu rc_sw ud_sw; do has "$dir/open.out" "check $c: ok"; done
  [ "$(dropped)" = 0 ] || fail "the firewall dropped $(dropped) datagrams with the range"
  run_check closed ip netns exec "${NS}A" -- 127.0.0.1 --port 47015
  [ "$rc" = 1 ] || fail "without the range: exit $rc, want 1"
  for c in path_mtu rc_sw ud_sw; do has "$dir/closed.out" "check $c: FAIL"; done
  [ "$(dropped)" != 0 ] || fail "nothing dropped without the range (the check cannot fail)"
  run_check bad -- 127.0.0.1 --port 47015 --port-range 5-3
  [ "$rc" = 2 ] || fail "--port-range 5-3: exit $rc, want 2"
  has "$dir/bad.err" "--port-range 5-3: not a UDP port or a range a-b of them"
  ;;
*)
  echo "unknown mode $mode"; exit 2 ;;
esac
[ $fails = 0 ] && echo "doctor_check $mode: pass" || echo "doctor_check $mode: $fails failure(s)"
[ $fails = 0 ]
