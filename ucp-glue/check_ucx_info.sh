#!/usr/bin/env bash
# What a user sees through ucx_info with the plugin loaded. Usage: check_ucx_info.sh <env> <mode>
set -uo pipefail
# shellcheck disable=SC1090
source "$1"
mode=$2
fail() { echo "[ucx_info] FAIL: $*"; exit 1; }
need() {   # need <text> <pattern>...: every pattern must occur in text
  local text=$1; shift
  for p in "$@"; do grep -qE -- "$p" <<<"$text" || fail "missing /$p/"; done
}
case $mode in
devices)
  out=$(timeout 60 ucx_info -d -t rc_roce 2>&1) || fail "ucx_info -d failed: $out"
  echo "$out"
  need "$out" 'Component: roce' 'Memory domain: roce' 'Transport: rc_roce' 'Device: lo' \
       'am_short' 'am_bcopy' 'am_zcopy' 'put_short' 'put_bcopy' 'put_zcopy' 'get_bcopy' \
       'get_zcopy' 'connection: to iface' 'atomic_add: .*64 bit' 'atomic_fadd: .*64 bit' \
       'atomic_cswap: .*64 bit' 'bandwidth' 'latency'
  # Locality: a netdev backed by a PCI function is that system device (UCP weighs distances by
  # it), a virtual one has none; netdevs close to this process come first.
  for n in /sys/class/net/*; do
    name=${n##*/}
    grep -q "Device: $name\$" <<<"$out" || continue
    bdf=$(readlink -f "$n/device" 2>/dev/null | grep -oE '[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]' | tail -1)
    got=$(grep -A2 "Device: $name\$" <<<"$out" | grep -m1 'System device:' | sed 's/.*System device: //')
    if [ -n "$bdf" ]; then
      [[ "$got" == "${bdf#0000:}"* ]] || fail "$name: System device '$got', sysfs says $bdf"
    else
      [ "$got" = "<unknown>" ] || fail "$name (virtual): System device '$got'"
    fi
    echo "[ucx_info] $name: System device $got (sysfs: ${bdf:-none})"
  done
  ;;
config)
  out=$(timeout 60 ucx_info -c -f 2>&1) || fail "ucx_info -c failed"
  grep -A3 'UCX_RC_ROCE_' <<<"$out" | head -60
  need "$out" '^UCX_RC_ROCE_MTU=' '^UCX_RC_ROCE_TIMEOUT=' '^UCX_RC_ROCE_RETRY_COUNT=' \
       '^UCX_RC_ROCE_TRAFFIC_CLASS='
  # Every variable carries documentation: the line above each definition is a comment.
  undocumented=$(grep -B1 '^UCX_RC_ROCE_' <<<"$out" | grep -vE '^(#|UCX_RC_ROCE_|--)' | head -3)
  [ -z "$undocumented" ] || fail "undocumented variables: $undocumented"
  ;;
short_timeout)
  # A TIMEOUT under four times the default ACK_DELAY takes the delay down with it (the device
  # refuses a delayed ACK longer than a quarter of the retransmission timeout): the iface opens.
  out=$(UCX_RC_ROCE_TIMEOUT=400us UCX_NET_DEVICES=lo timeout 60 ucx_info -d -t rc_roce 2>&1) || fail "ucx_info -d failed: $out"
  need "$out" 'Transport: rc_roce' 'Device: lo'
  echo "[ucx_info] UCX_RC_ROCE_TIMEOUT=400us: rc_roce/lo opens"
  ;;
lanes)
  # A peer on the same node, rc_roce alone: tag matching, RMA, AMO and rendezvous must all use it,
  # and RMA/AMO natively (rma_bw/amo lanes on rc_roce, not AM emulation).
  out=$(UCX_TLS=rc_roce UCX_NET_DEVICES=lo timeout 60 ucx_info -u tra -e -P intra 2>&1) || fail "ucx_info -e failed: $out"
  echo "$out"
  need "$out" 'rc_roce/lo.*am' 'rc_roce/lo.*rma' 'rc_roce/lo.*amo' '<rndv>'
  ;;
bad_device)
  # An unknown device is refused with a clear message, not a crash or a hang.
  out=$(UCX_TLS=rc_roce UCX_NET_DEVICES=nosuchdev0 timeout 60 ucx_info -u t -e -P intra 2>&1)
  rc=$?
  echo "$out" | tail -5
  [ $rc -ne 124 ] || fail "hung"
  case $rc in 134|135|136|139) fail "crashed (rc=$rc)" ;; esac
  [ $rc -ne 0 ] || fail "an unknown device was accepted"
  need "$out" 'nosuchdev0'
  ;;
bad_gid_settings)
  # Every impossible GID / traffic-class setting is refused at iface open with one line naming the
  # setting, the value and the valid choices (gid::config_error), never a crash or a silent default.
  # ud_roce has its own copy of the settings (UCX_UD_ROCE_*): its errors name those.
  # refused <tl> <UCX_VAR=value>: iface open fails with one line naming it and the valid choices.
  refused() {
    local tl=$1 kv=$2 out rc line
    out=$(env "$kv" UCX_NET_DEVICES=lo timeout 60 ucx_info -d -t "$tl" 2>&1)
    rc=$?
    [ $rc -ne 124 ] || fail "$tl $kv: hung"
    case $rc in 134|135|136|139) fail "$tl $kv: crashed (rc=$rc)" ;; esac
    line=$(grep -m1 -F "$kv: " <<<"$out") || fail "$tl $kv: no error naming ${kv%%=*}: $out"
    grep -q '; valid: ' <<<"$line" || fail "$tl $kv: the error does not list the valid choices: $line"
    grep -q 'failed to open interface' <<<"$out" || fail "$tl $kv: the iface opened anyway"
    echo "  $tl $kv -> ${line#*ERROR }"
  }
  for tl in rc_roce ud_roce; do
    for kv in ADDR_FAMILY=ipx GID_INDEX=99 GID_NETDEV=nosuchdev0 DSCP=64 TRAFFIC_CLASS=256 ECN=maybe \
              PRIORITY=8 ROCE_VERSION=1 SUBNETS=10.0.0.0/40 REACHABILITY=far CNP_DSCP=70; do
      refused "$tl" "UCX_${tl^^}_$kv"
    done
  done
  # Congestion control: ud_roce has no dcqcn (no CNPs); unknown modes of either transport.
  refused ud_roce UCX_UD_ROCE_CC=dcqcn
  refused ud_roce UCX_UD_ROCE_CC=fast
  refused rc_roce UCX_RC_ROCE_CC=fast
  # Values that made the congestion control's arithmetic meaningless (an infinite line rate no CNP
  # lowers, a nanosecond timer the catch-up loop cannot follow, a pacer bucket a byte cannot dent).
  refused rc_roce UCX_RC_ROCE_CC_LINE_RATE=inf
  refused rc_roce UCX_RC_ROCE_DCQCN_TIMER=1ns
  refused rc_roce UCX_RC_ROCE_PACER_BURST=2GB
  # Times UCX's parser takes but no timer can mean (they became 0 or a wrapped count: a ud_roce
  # TIMEOUT of inf failed every peer at the first tick), and counts the devices refuse unnamed.
  refused ud_roce UCX_UD_ROCE_TIMEOUT=inf
  refused ud_roce UCX_UD_ROCE_ACK_DELAY=-1s
  refused rc_roce UCX_RC_ROCE_PEER_TIMEOUT=inf
  refused rc_roce UCX_RC_ROCE_IDLE_TAKEOVER=-1s
  refused rc_roce UCX_RC_ROCE_RX_QUEUE_LEN=0
  refused rc_roce UCX_RC_ROCE_ACK_COALESCE=0
  ;;
device_filter)
  # The device lists apply each transport's own GID settings, read as iface open reads them: from
  # the environment and from UCX's config file (ucx.conf in UCX_CONFIG_DIR).
  devs() { grep -oE 'Device: [^ ]+' <<<"$1" | sed 's/Device: //' | sort -u | tr '\n' ' '; }
  all_rc=$(devs "$(timeout 60 ucx_info -d -t rc_roce 2>&1)")
  all_ud=$(devs "$(timeout 60 ucx_info -d -t ud_roce 2>&1)")
  echo "rc_roce devices: $all_rc; ud_roce devices: $all_ud"
  [[ " $all_rc" == *" lo "* ]] || fail "lo is not listed: $all_rc"
  [ "$(wc -w <<<"$all_rc")" -ge 2 ] || { echo "[ucx_info] SKIP: one usable netdev, nothing to filter"; exit 77; }
  got=$(devs "$(UCX_UD_ROCE_GID_NETDEV=lo timeout 60 ucx_info -d -t ud_roce 2>&1)")
  [ "$got" = "lo " ] || fail "UCX_UD_ROCE_GID_NETDEV=lo: ud_roce lists '$got'"
  got=$(devs "$(UCX_UD_ROCE_GID_NETDEV=lo timeout 60 ucx_info -d -t rc_roce 2>&1)")
  [ "$got" = "$all_rc" ] || fail "UCX_UD_ROCE_GID_NETDEV narrowed rc_roce's list to '$got'"
  got=$(devs "$(UCX_RC_ROCE_GID_NETDEV=lo timeout 60 ucx_info -d -t ud_roce 2>&1)")
  [ "$got" = "$all_ud" ] || fail "UCX_RC_ROCE_GID_NETDEV narrowed ud_roce's list to '$got'"
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  echo "UCX_RC_ROCE_GID_NETDEV=lo" > "$dir/ucx.conf"
  out=$(cd "$dir/.." && UCX_CONFIG_DIR=$dir timeout 60 ucx_info -d -t rc_roce 2>&1)
  got=$(devs "$out")
  [ "$got" = "lo " ] || fail "ucx.conf UCX_RC_ROCE_GID_NETDEV=lo: rc_roce lists '$got': $(tail -3 <<<"$out")"
  grep -q 'failed to open interface' <<<"$out" && fail "ucx.conf: an iface failed to open: $out"
  echo "[ucx_info] each transport's GID_NETDEV (environment or ucx.conf) narrows its own list only"
  ;;
*) fail "unknown mode $mode" ;;
esac
echo "[ucx_info] $mode ok"
