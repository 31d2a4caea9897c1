#!/usr/bin/env bash
# The path MTU of the userspace device against a real netdev MTU (ctests mtu.*): two network
# namespaces joined by a veth pair of MTU 1500 (standard Ethernet, unlike loopback's 65536). A
# ucx_perftest pair runs from one namespace to the other over TRANSPORT:
#   auto  UCX_*_MTU unset: the device picks 1024 (4096-byte packets would not fit, and with DF set
#         they would never leave) and 1 MiB messages arrive
#   4096  UCX_*_MTU=4096: opening the interface fails at once with an error naming both sizes
#   mixed the sender's end of the veth has MTU 9000 (auto: 4096), the receiver's 1500 (auto:
#         1024), as a jumbo-frame host and a standard one: the peers must agree on 1024 (the
#         veth drops a frame above the receiving end's MTU) and 1 MiB messages arrive
#   segsize (ud_roce) a SEG_SIZE the MTU auto picks on a 1000-byte netdev cannot carry is refused
# Usage: mtu_check.sh ENV_FILE TRANSPORT(rc_roce|ud_roce) auto|4096|mixed|segsize
# Exits 77 (skipped) when network namespaces cannot be created (not root, no netns support).
set -uo pipefail
envfile=$1 tl=$2 mode=$3
# shellcheck disable=SC1090
source "$envfile"
ns1=roce_mtu_a.$$ ns2=roce_mtu_b.$$
cleanup() { ip netns del "$ns1" 2>/dev/null; ip netns del "$ns2" 2>/dev/null; rm -f "$slog" "$clog"; }
slog=$(mktemp) clog=$(mktemp); trap cleanup EXIT
if ! ip netns add "$ns1" 2>/dev/null || ! ip netns add "$ns2" 2>/dev/null; then
  echo "[mtu] SKIP: cannot create network namespaces"; exit 77
fi
ip link add mtua.$$ type veth peer name mtub.$$ 2>/dev/null || { echo "[mtu] SKIP: no veth"; exit 77; }
ip link set mtua.$$ netns "$ns1" name v0 && ip link set mtub.$$ netns "$ns2" name v0 || exit 1
mtu1=1500
[ "$mode" = mixed ] && mtu1=9000
ip -n "$ns1" link set v0 mtu "$mtu1" up; ip -n "$ns2" link set v0 mtu 1500 up
for n in "$ns1" "$ns2"; do ip -n "$n" link set lo up; done
ip -n "$ns1" addr add 10.79.0.1/24 dev v0 && ip -n "$ns2" addr add 10.79.0.2/24 dev v0 || exit 1

if [ "$mode" = segsize ]; then
  # A netdev of MTU 1000: auto picks 512 (492 bytes per ud_roce packet), so a 512 KiB SEG_SIZE
  # needs 1066 packets, more than the default TX_QUEUE_LEN (1024). Refused at iface open, naming
  # both (the settings' own check can only assume a 1024-byte MTU), not at every send, silently.
  ip -n "$ns1" link set v0 mtu 1000
  out=$(ip netns exec "$ns1" env UCX_UD_ROCE_SEG_SIZE=512k UCX_NET_DEVICES=v0 timeout 60 ucx_info -d -t ud_roce 2>&1)
  rc=$?
  echo "$out" | grep -E "ERROR|failed" | head -3
  case $rc in 124|134|135|136|139) echo "[mtu] FAIL: ucx_info rc=$rc"; exit 1 ;; esac
  grep -q "UCX_UD_ROCE_SEG_SIZE=524288 needs more 492-byte packets than UCX_UD_ROCE_TX_QUEUE_LEN=1024" <<<"$out" ||
    { echo "[mtu] FAIL: no error naming SEG_SIZE, the packet size and TX_QUEUE_LEN"; exit 1; }
  grep -q "failed to open interface" <<<"$out" || { echo "[mtu] FAIL: the iface opened anyway"; exit 1; }
  out=$(ip netns exec "$ns1" env UCX_UD_ROCE_SEG_SIZE=256k UCX_NET_DEVICES=v0 timeout 60 ucx_info -d -t ud_roce 2>&1)
  grep -q "failed to open interface" <<<"$out" && { echo "[mtu] FAIL: SEG_SIZE 256k refused: $out"; exit 1; }
  echo "[mtu] segsize ok"
  exit 0
fi

var=UCX_$(echo "$tl" | tr a-z A-Z)_MTU
unset "$var"
[ "$mode" = 4096 ] && export "$var=$mode"
export UCX_NET_DEVICES=v0 UCX_TLS=$tl,self
port=$(( 20000 + (RANDOM % 20000) ))
args=(-t tag_bw -s 1048576 -n 200 -p "$port")
# tag_bw's client sends: from the 1500-byte end, or in mixed mode from the 9000-byte one.
sns=$ns1 cns=$ns2 sip=10.79.0.1
[ "$mode" = mixed ] && { sns=$ns2; cns=$ns1; sip=10.79.0.2; }
echo "[mtu] $tl over a veth between namespaces (MTU $mtu1 / 1500), ${var}=${!var:-auto}"
ip netns exec "$sns" timeout --kill-after=5 60 ucx_perftest "${args[@]}" >"$slog" 2>&1 &
server=$!
crc=1
for _ in $(seq 1 50); do
  ip netns exec "$cns" timeout --kill-after=5 60 ucx_perftest "$sip" "${args[@]}" -f >"$clog" 2>&1
  crc=$?
  grep -q "connect() failed\|Connection refused" "$clog" || break
  sleep 0.2
done
kill "$server" 2>/dev/null; wait "$server"; src=$?
case $mode in
auto|mixed)
  tail -n 2 "$clog"
  if [ $crc -ne 0 ]; then
    echo "[mtu] FAIL: client rc=$crc server rc=$src"; tail -n 15 "$clog" "$slog"; exit 1
  fi
  ;;
*)
  want="do not fit v0's MTU 1500"
  grep -h "MTU=" "$clog" "$slog" | head -2
  if [ $crc -eq 0 ]; then echo "[mtu] FAIL: the transfer ran with packets larger than the netdev MTU"; exit 1; fi
  if ! grep -q "$want" "$clog"; then
    echo "[mtu] FAIL: no error saying \"$want\""; tail -n 15 "$clog"; exit 1
  fi
  ;;
esac
echo "[mtu] ok"
