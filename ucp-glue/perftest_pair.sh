#!/usr/bin/env bash
# Runs one ucx_perftest server/client pair on loopback and fails unless both succeed.
# Usage: perftest_pair.sh <env-file> <timeout-s> <ucx_perftest args...>
#   UCT-level:  perftest_pair.sh env 120 -x rc_roce -d lo -t am_lat -n 10000
#   UCP-level:  UCX_TLS=rc_roce,self perftest_pair.sh env 120 -t tag_lat -n 10000
# Prints the client's final line (latency / bandwidth / rate) for the log.
set -uo pipefail
envfile=$1 limit=$2; shift 2
# shellcheck disable=SC1090
source "$envfile"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
slog=$(mktemp) clog=$(mktemp); trap 'rm -f "$slog" "$clog"' EXIT
# The server's TCP port: outside the ephemeral range (no outgoing connection of a concurrent
# test can hold it), one nobody listens on (the client would talk to that listener), and another
# one if the bind fails anyway.
read -r eph_lo eph_hi 2>/dev/null < /proc/sys/net/ipv4/ip_local_port_range || { eph_lo=32768 eph_hi=60999; }
pick_port() {
  if [ "$eph_lo" -gt 12000 ]; then echo $(( 10000 + RANDOM % (eph_lo - 10000) ))
  elif [ "$eph_hi" -lt 63000 ]; then echo $(( eph_hi + 1 + RANDOM % (65535 - eph_hi) ))
  else echo $(( 20000 + RANDOM % 20000 )); fi
}
crc=1 src=1
for attempt in 1 2 3 4 5; do
  port=$(pick_port)
  for _ in 1 2 3 4 5; do
    [ -z "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && break
    port=$(pick_port)
  done
  timeout --kill-after=5 "$limit" ucx_perftest -p "$port" "$@" >"$slog" 2>&1 &
  server=$!
  # The server listens on its TCP port shortly after start; the client retries until it answers.
  for _ in $(seq 1 50); do
    timeout --kill-after=5 "$limit" ucx_perftest 127.0.0.1 -p "$port" "$@" -f >"$clog" 2>&1
    crc=$?
    grep -q "connect() failed\|Connection refused" "$clog" || break
    kill -0 "$server" 2>/dev/null || break   # the server is gone (its bind failed?)
    sleep 0.2
  done
  wait "$server"; src=$?
  grep -q "bind() failed: Address already in use" "$slog" || break
  echo "[perftest] port $port in use (attempt $attempt): another port"
done
echo "[perftest] ucx_perftest $* (UCX_TLS=${UCX_TLS:-})"
tail -n 3 "$clog"
if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
  echo "[perftest] FAIL: client rc=$crc server rc=$src"; echo "--- server:"; tail -n 20 "$slog"
  echo "--- client:"; tail -n 20 "$clog"; exit 1
fi
if grep -qiE 'error|failed' "$clog" "$slog"; then
  echo "[perftest] FAIL: errors logged"; grep -iE 'error|failed' "$clog" "$slog" | head; exit 1
fi
echo "[perftest] ok"
