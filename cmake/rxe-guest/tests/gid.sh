#!/bin/bash
# GID and traffic-class selection of rc_roce on kernel rxe (the policy of src/gid applied by the
# verbs backend). Standalone, or the suite's `gid` group (~40 s in the guest):
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/gid.sh
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/suite.sh gid
#
# Steps:
#   gid.default        with default settings rc_roce picks the RoCE v2 IPv4 entry of rxe0 port 1: the
#                      index its iface logs (UCX_LOG_LEVEL=info) and its QPs' sgid index equal the
#                      entry sysfs shows as RoCE v2 ::ffff:a.b.c.d; `roce_doctor gid` explains the same
#   gid.vlan.setup     VLAN 100 on eth0 (eth0.100, 192.168.100.15/24): rxe adds RoCE v2 entries for it
#   gid.vlan.am_lat    ucx_perftest UCT am_lat on rxe0:1 with UCX_RC_ROCE_GID_NETDEV=eth0.100 on both
#                      sides: connects, and every QP's sgid index is the VLAN entry
#   gid.tc.setup       two rxe devices on a veth pair in this namespace (rxeA on vA 192.168.88.1, rxeB on
#                      vB 192.168.88.2). Traffic between two local addresses normally goes through lo,
#                      where rxe drops it; moving the kernel's `local` rule behind two rules that route
#                      each address out of the other's veth end, plus accept_local, puts it on the wire
#   gid.tc.tag_lat     UCP tag_lat, server on rxeB with UCX_RC_ROCE_DSCP=46 (ToS 186 with ECT(0)),
#                      client on rxeA with default settings (ToS 106), dumpcap on vA: every RC packet
#                      in both directions must carry ToS 186 (`roce_doctor wire` summarises the capture)
#   gid.tc.ud[_client] the same over ud_roce (UCX_UD_ROCE_DSCP=46 on the server, then on the client):
#                      the class each interface address carries is negotiated, every UD packet both
#                      ways in ToS 186
#   gid.tc.rxe_vlan    the same pair over VLAN 100 on vA/vB (identity egress-qos-map) with
#                      UCX_RC_ROCE_PRIORITY=5 on the server: the PCP kernel rxe really sends, per
#                      direction (measured; rxe ignores the QPs' SL, so 0 is expected)
#   gid.pcp.setup      the userspace device's PCP: namespaces pcpA and pcpB joined by a veth pair (pA,
#                      pB), VLAN 100 on each end (pA.100 192.168.101.1, pB.100 .2) whose egress-qos-map
#                      is the identity (skb priority N -> PCP N)
#   gid.pcp.tag_lat    UCP tag_lat over rc_roce on the userspace device (UCX_ROCE_NETNS), server on pB.100
#                      with UCX_RC_ROCE_PRIORITY=5, client on pA.100 with default settings, dumpcap on the
#                      lower netdev pA: every RC packet in both directions must be tagged VLAN 100 with
#                      PCP 5 (`roce_doctor wire` prints vlan= pcp= per flow)
#   gid.mtu.*          vA at MTU 9000 (rxeA: 4096), vB at 1500 (rxeB: 1024): UCP tag_bw 1 MiB each way
#                      over rc_roce and ud_roce delivers, and rc_roce's QPs (both ends, both
#                      connections) run at path MTU 1024
#   gid.vlan_mtu.*     vA and vB at 9000 (both rxe ports 4096), VLAN 100 at 9000 on vA and 1500 on
#                      vB: UCP tag_bw 1 MiB each way over rc_roce and ud_roce on the VLAN entries
#                      (UCX_{RC,UD}_ROCE_GID_NETDEV) delivers, every rc_roce QP runs at path MTU 1024
#                      and ud_roce's QPs log the VLAN entries' indexes
#   gid.bad_settings   a GID index out of range, a netdev not in the table, RoCE v1 (rc_roce), on
#                      rc_roce and ud_roce: one-line errors naming the setting and the valid choices
# Results: rxe-result gid.default_index, gid.vlan_index, gid.tc[.ud].<direction>.tos,
# gid.tc.rxe_vlan.<direction>.pcp, gid.pcp.<direction>.pcp.

# shellcheck source=netpair.sh
source "$(dirname "${BASH_SOURCE[0]}")/netpair.sh"
GID_SCRIPT=$(realpath "${BASH_SOURCE[0]}")
GID_DEV=${DEV:-rxe0}
GID_VLAN_IP=192.168.100.15
GID_A_IP=192.168.88.1
GID_B_IP=192.168.88.2
GID_VA_IP=192.168.89.1
GID_VB_IP=192.168.89.2
GID_PCP_A_IP=192.168.101.1
GID_PCP_B_IP=192.168.101.2

# gid_index_of <dev> <gid-suffix> [ndev]: the index of the RoCE v2 entry whose GID ends with the
# suffix (and whose netdev is ndev), from sysfs; empty if none.
gid_index_of() {
  local base=/sys/class/infiniband/$1/ports/1 i g t n
  for ((i = 0; i < 32; i++)); do
    read -r g < "$base/gids/$i" 2>/dev/null || continue
    [[ $g == *"$2" ]] || continue
    read -r t < "$base/gid_attrs/types/$i" 2>/dev/null || continue
    [ "$t" = "RoCE v2" ] || continue
    if [ -n "${3:-}" ]; then read -r n < "$base/gid_attrs/ndevs/$i" 2>/dev/null; [ "$n" = "$3" ] || continue; fi
    printf '%s' "$i"; return 0
  done
  return 1
}

# gid_hex <a.b.c.d>: the last two GID groups of an IPv4-mapped address (ffff:c0a8:640f style).
gid_hex() { local -a o; IFS=. read -ra o <<<"$1"; printf 'ffff:%02x%02x:%02x%02x' "${o[0]}" "${o[1]}" "${o[2]}" "${o[3]}"; }

# sgid_indexes <log>...: the distinct "sgid index N" the QPs of these logs used.
sgid_indexes() {
  local f line seen=" "
  for f in "$@"; do
    while IFS= read -r line; do
      [[ $line == *"verbs: QP "*"sgid index "* ]] || continue
      line=${line#*sgid index }; line=${line%%,*}
      [[ $seen == *" $line "* ]] || seen+="$line "
    done < "$f"
  done
  seen=${seen# }
  printf '%s' "${seen% }"
}

gid_tc_setup() {
  set -e
  modprobe -a veth 8021q
  ip link add vA type veth peer name vB
  ip addr add $GID_A_IP/24 dev vA
  ip addr add $GID_B_IP/24 dev vB
  ip link set vA up
  ip link set vB up
  local_route_pair vA $GID_A_IP vB $GID_B_IP 10 101
  # VLAN 100 on both ends (identity egress-qos-map), routed the same way: what rxe's priority
  # becomes on the wire.
  local map="0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7"
  # shellcheck disable=SC2086 # the map is several words
  ip link add link vA name vA.100 type vlan id 100 egress-qos-map $map
  # shellcheck disable=SC2086
  ip link add link vB name vB.100 type vlan id 100 egress-qos-map $map
  ip addr add $GID_VA_IP/24 dev vA.100
  ip addr add $GID_VB_IP/24 dev vB.100
  ip link set vA.100 up
  ip link set vB.100 up
  local_route_pair vA.100 $GID_VA_IP vB.100 $GID_VB_IP 12 103
  rdma link add rxeA type rxe netdev vA
  rdma link add rxeB type rxe netdev vB
  set +e
  local i ga="" gb=""
  for ((i = 0; i < 100; i++)); do
    ga=$(gid_index_of rxeA "$(gid_hex $GID_A_IP)") && gb=$(gid_index_of rxeB "$(gid_hex $GID_B_IP)") \
      && gid_index_of rxeA "$(gid_hex $GID_VA_IP)" vA.100 > /dev/null \
      && gid_index_of rxeB "$(gid_hex $GID_VB_IP)" vB.100 > /dev/null && break
    sleep 0.1
  done
  ip rule
  ip route get $GID_B_IP from $GID_A_IP
  echo "rxeA: $GID_A_IP at GID index ${ga:-none}; rxeB: $GID_B_IP at GID index ${gb:-none}"
  [ -n "$ga" ] && [ -n "$gb" ]
}

gid_pcp_setup() {
  set -e
  modprobe -a veth 8021q
  ip netns add pcpA
  ip netns add pcpB
  ip link add pA netns pcpA type veth peer name pB netns pcpB
  local ns end ip map="0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7"
  for ns in pcpA pcpB; do
    end=p${ns#pcp} ip=$GID_PCP_A_IP
    [ "$ns" = pcpB ] && ip=$GID_PCP_B_IP
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$end" up
    # shellcheck disable=SC2086 # the map is several words
    ip -n "$ns" link add link "$end" name "$end.100" type vlan id 100 egress-qos-map $map
    ip -n "$ns" addr add "$ip/24" dev "$end.100"
    ip -n "$ns" link set "$end.100" up
  done
  ip -n pcpA -d link show pA.100
  ip -n pcpB -d link show pB.100
}

gid_pcp_cleanup() {
  ip netns del pcpA 2>/dev/null
  ip netns del pcpB 2>/dev/null
}

# gid.sh bad-settings: each impossible setting must give a one-line error with the valid choices,
# on both transports (ud_roce's verbs QP applies the same policy, under its own variable names).
# rxe0's own line is required where rxe0 checks the setting (the userspace device's netdevs
# report theirs too); ADDR_FAMILY=ipx fails when the settings are parsed, before any device.
# ud_roce may use RoCE v1 entries (no rdma_cm): on rxe, which has none, ROCE_VERSION=1 leaves it
# no usable entry, and that line names the setting.
gid_bad_settings() {
  local kv tl var name value line out rc=0
  for tl in rc_roce ud_roce; do
    for kv in GID_INDEX=200 GID_NETDEV=eth9 ROCE_VERSION=1 ADDR_FAMILY=ipx; do
      name=${kv%%=*} value=${kv#*=} var=UCX_${tl^^}_
      out=$(env "$var$kv" ucx_info -d -t "$tl" 2>&1)
      local want="; valid: "   # what the line must contain besides the setting
      if [ "$name" = ADDR_FAMILY ]; then
        line=$(grep -m1 -F "$var$name=$value: " <<<"$out")
      elif [ "$tl/$name" = ud_roce/ROCE_VERSION ]; then
        line=$(grep -F "no usable GID on $GID_DEV" <<<"$out" | grep -m1 -F "$var$name=$value")
        want="no usable GID"
      else
        line=$(grep -F "$var$name=$value: " <<<"$out" | grep -m1 -F "$GID_DEV")
      fi
      if [[ $line == *"$want"* ]] && grep -q "failed to open interface" <<<"$out"; then
        echo "$tl $kv -> ${line#*ERROR }"
      else
        echo "$tl $kv -> no one-line error naming the valid choices:"; echo "$out" | tail -n 5; rc=1
      fi
    done
  done
  return $rc
}

# gid_tos_all <name> <kind> <tos>: every <kind> flow (rc, ud) of the `roce_doctor wire` summary in
# $LOG carries <tos>, and both directions between rxeA and rxeB are there; results
# <name>.{client_to_server,server_to_client}.tos, failure step <name>.wire.
gid_tos_all() {
  local name=$1 kind=$2 want=$3 fwd="" rev="" bad="" t n
  local -a w
  # flow SRC -> DST KIND packets=N tos=T dscp=D ecn=E
  while read -r -a w; do
    [ "${w[0]:-}" = flow ] && [ "${w[4]:-}" = "$kind" ] || continue
    t=${w[6]#tos=} n=${w[5]#packets=}
    [ "$t" = "$want" ] || bad+=" ${w[1]}->${w[3]}:tos=$t(x$n)"
    [ "${w[1]}" = $GID_A_IP ] && [ "$t" = "$want" ] && fwd=$t
    [ "${w[1]}" = $GID_B_IP ] && [ "$t" = "$want" ] && rev=$t
  done < "$LOG"
  result "$name.client_to_server.tos" "${fwd:--1}" tos
  result "$name.server_to_client.tos" "${rev:--1}" tos
  [ -n "$fwd" ] && [ -n "$rev" ] && [ -z "$bad" ] \
    || fail_step "$name.wire" "${kind^^} packets not all in ToS $want both ways:${bad:- a direction is missing}"
}

gid_tc_cleanup() {
  rdma link delete rxeA 2>/dev/null
  rdma link delete rxeB 2>/dev/null
  ip link del vA 2>/dev/null
  local_table_restore
  local_route_pair_del 10 12
}

gid_group() {
  local plugin=$BUILD/uct/libuct_roce.so.0 doctor=$BUILD/src/gid/roce_doctor
  if [ ! -f "$plugin" ] || [ ! -x "$doctor" ]; then
    fail_step gid "$plugin or $doctor not built"
    return
  fi
  local v2idx idx line i saved_tls=${UCX_TLS-} saved_nd=${UCX_NET_DEVICES-}
  export LD_PRELOAD=$plugin
  export UCX_NET_DEVICES=$GID_DEV:1
  # The choices are logged at info level: the core's (GID index, each QP's sgid index and class)
  # and UCX's own threshold both.
  export UCX_LOG_LEVEL=info UCX_RC_ROCE_LOG_LEVEL=info

  # ---- default selection: the RoCE v2 IPv4 entry, as sysfs shows it
  v2idx=$(gid_index_of "$GID_DEV" "$(gid_hex 10.0.2.15)" eth0)
  T=30 step gid.doctor "$doctor" gid --dev "$GID_DEV:1" --peer 10.0.2.15
  step gid.default ucx_info -d -t rc_roce
  if [ -f "$LOG" ]; then
    idx=""
    while IFS= read -r line; do
      [[ $line == *"verbs: $GID_DEV port 1: GID index "*" ("* ]] && { idx=${line#*GID index }; idx=${idx%% *}; }
    done < "$LOG"
    say "sysfs: RoCE v2 IPv4 entry of $GID_DEV is index ${v2idx:-none}; rc_roce chose ${idx:-none}"
    result gid.default_index "${idx:--1}" index
    [ -n "$v2idx" ] && [ "$idx" = "$v2idx" ] \
      || fail_step gid.default "rc_roce chose GID index '${idx}', sysfs has the RoCE v2 IPv4 entry at '${v2idx}'"
    grep -q "interface default: index $v2idx (RoCE v2 IPv4 10.0.2.15 on eth0" "$LOGDIR/gid.doctor" \
      || fail_step gid.doctor "roce_doctor does not explain index $v2idx as the interface default"
  fi
  port=13600
  perftest gid.default.am_lat -t am_lat -x rc_roce -d "$GID_DEV:1" -n 2000 -w 200 \
    && { idx=$(sgid_indexes "$LOG" "$LOG.server")
         [ "$idx" = "$v2idx" ] || fail_step gid.default.am_lat "QPs used sgid index '$idx', expected '$v2idx'"; }

  # ---- a VLAN netdev: rxe adds its entries; rc_roce connects over it when told to
  local vidx=""
  T=20 step gid.vlan.setup bash -c "modprobe 8021q && ip link add link eth0 name eth0.100 type vlan id 100 &&
      ip addr add $GID_VLAN_IP/24 dev eth0.100 && ip link set eth0.100 up"
  for ((i = 0; i < 50; i++)); do vidx=$(gid_index_of "$GID_DEV" "$(gid_hex $GID_VLAN_IP)" eth0.100) && break; nap 0.1; done
  if [ -z "$vidx" ]; then
    fail_step gid.vlan.setup "no RoCE v2 GID for $GID_VLAN_IP on eth0.100 in $GID_DEV's table"
  else
    say "eth0.100: RoCE v2 entry $vidx"
    result gid.vlan_index "$vidx" index
    # Defaults stay on the untagged entry with the VLAN present.
    step gid.vlan.default ucx_info -d -t rc_roce
    grep -q "verbs: $GID_DEV port 1: GID index $v2idx " "$LOG" \
      || fail_step gid.vlan.default "with a VLAN added the default is no longer index $v2idx"
    UCX_RC_ROCE_GID_NETDEV=eth0.100 perftest gid.vlan.am_lat -t am_lat -x rc_roce -d "$GID_DEV:1" -n 2000 -w 200 \
      && { perf_lat gid.vlan.am_lat gid.vlan.am_lat
           idx=$(sgid_indexes "$LOG" "$LOG.server")
           [ "$idx" = "$vidx" ] || fail_step gid.vlan.am_lat "QPs used sgid index '$idx', expected the VLAN entry $vidx"
           grep -q "GID index $vidx (RoCE v2 IPv4 $GID_VLAN_IP on eth0.100" "$LOG" \
             || fail_step gid.vlan.am_lat "the iface did not choose the VLAN entry $vidx"; }
  fi

  # ---- traffic class set on one side only, captured on the wire in both directions
  if T=30 step gid.tc.setup bash "$GID_SCRIPT" tc-setup; then
    local cap=$OUT/gid-tc.pcap cpid dscp=46 want
    want=$(( dscp << 2 | 2 ))
    dumpcap -q -P -i vA -f "udp port 4791" -w "$cap" > "$LOGDIR/gid.tc.dumpcap" 2>&1 &
    cpid=$!
    for ((i = 0; i < 100; i++)); do [ -s "$cap" ] && break; nap 0.1; done
    port=$((port + 1))
    SRV=(env UCX_NET_DEVICES=rxeB:1 "UCX_RC_ROCE_DSCP=$dscp" "UCX_TLS=rc_roce,self" ucx_perftest -p "$port")
    CLI=(env UCX_NET_DEVICES=rxeA:1 "UCX_TLS=rc_roce,self" ucx_perftest -p "$port" localhost -t tag_lat -n 1000 -w 100)
    pair gid.tc.tag_lat "$port" && perf_lat gid.tc.tag_lat gid.tc.tag_lat
    nap 0.5
    kill -INT "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
    T=30 step gid.tc.wire "$doctor" wire "$cap" && gid_tos_all gid.tc rc "$want"

    # ud_roce: each interface address carries its class, and a side sends to a peer in the class
    # both negotiate once it has the peer's address (UCP's wireup gives each side the other's).
    # DSCP 46 on the server (gid.tc.ud), then on the client (gid.tc.ud_client), the other side
    # with default settings: every UD packet in both directions must carry ToS 186, as rc_roce's.
    local who srv_env cli_env name
    for who in server client; do
      srv_env=UCX_UD_ROCE_DSCP=auto cli_env=UCX_UD_ROCE_DSCP=auto name=gid.tc.ud
      [ "$who" = server ] && srv_env=UCX_UD_ROCE_DSCP=$dscp
      [ "$who" = client ] && { cli_env=UCX_UD_ROCE_DSCP=$dscp; name=gid.tc.ud_client; }
      cap=$OUT/$name.pcap
      dumpcap -q -P -i vA -f "udp port 4791" -w "$cap" > "$LOGDIR/$name.dumpcap" 2>&1 &
      cpid=$!
      for ((i = 0; i < 100; i++)); do [ -s "$cap" ] && break; nap 0.1; done
      port=$((port + 1))
      SRV=(env UCX_NET_DEVICES=rxeB:1 "$srv_env" "UCX_TLS=ud_roce,self" ucx_perftest -p "$port")
      CLI=(env UCX_NET_DEVICES=rxeA:1 "$cli_env" "UCX_TLS=ud_roce,self" ucx_perftest -p "$port" localhost
           -t tag_lat -n 300 -w 30)
      pair "$name" "$port"
      nap 0.5
      kill -INT "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
      T=30 step "$name.wire" "$doctor" wire "$cap" && gid_tos_all "$name" ud "$want"
    done

    # What kernel rxe makes of the priority: UCX_RC_ROCE_PRIORITY=5 on the server (the QPs' SL
    # on both sides), over the VLAN netdevs. Measured, not asserted: rxe's source drops the SL and
    # leaves the packets' priority 0 (PCP 0 behind the identity map). The step fails only when
    # the traffic did not cross the VLAN tagged in both directions.
    cap=$OUT/gid-tc-vlan.pcap
    dumpcap -q -P -i vA -w "$cap" > "$LOGDIR/gid.tc.rxe_vlan.dumpcap" 2>&1 &
    cpid=$!
    for ((i = 0; i < 100; i++)); do [ -s "$cap" ] && break; nap 0.1; done
    port=$((port + 1))
    SRV=(env UCX_NET_DEVICES=rxeB:1 UCX_RC_ROCE_GID_NETDEV=vB.100 UCX_RC_ROCE_PRIORITY=5 "UCX_TLS=rc_roce,self"
         ucx_perftest -p "$port")
    CLI=(env UCX_NET_DEVICES=rxeA:1 UCX_RC_ROCE_GID_NETDEV=vA.100 "UCX_TLS=rc_roce,self" ucx_perftest -p "$port"
         localhost -t tag_lat -n 300 -w 30)
    pair gid.tc.rxe_vlan "$port"
    nap 0.5
    kill -INT "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
    T=30 step gid.tc.rxe_vlan.wire "$doctor" wire "$cap"
    if [ -s "$LOG" ]; then
      local -a w; local fwd="" rev=""
      while read -r -a w; do
        [ "${w[0]:-}" = flow ] && [ "${w[4]:-}" = rc ] && [ "${w[9]:-}" = vlan=100 ] || continue
        [ "${w[1]}" = $GID_VA_IP ] && fwd+="${w[10]#pcp=} "
        [ "${w[1]}" = $GID_VB_IP ] && rev+="${w[10]#pcp=} "
      done < "$LOG"
      fwd=${fwd% } rev=${rev% }
      say "rxe over VLAN 100 with priority 5 configured: PCP client->server '${fwd}', server->client '${rev}'"
      result gid.tc.rxe_vlan.client_to_server.pcp "${fwd%% *}" pcp
      result gid.tc.rxe_vlan.server_to_client.pcp "${rev%% *}" pcp
      [ -n "$fwd" ] && [ -n "$rev" ] || fail_step gid.tc.rxe_vlan.wire "no VLAN-tagged RC packets in a direction"
    fi

    # ---- a port with jumbo frames against one without: vA to MTU 9000 (rxeA's active MTU
    # 4096), vB stays at 1500 (1024); the veth drops a frame above the receiving end's MTU.
    # rdma_cm gives a RoCE QP the requester's MTU on both sides: a connection made from rxeA ran
    # at 4096 at both ends. Before each side said what its port takes (ConnPriv), tag_bw from
    # rxeB to rxeA never finished (rxeA's RDMA READs were answered in 4096-byte packets), the
    # other way round it did (its READs go over rxeB's connection); ud_roce sent at its own MTU.
    # Both directions, both transports must deliver, and rc_roce's QPs run at 1024.
    if T=10 step gid.mtu.setup ip link set vA mtu 9000; then
      for ((i = 0; i < 50; i++)); do
        ibv_devinfo -d rxeA | grep -q "active_mtu:.*4096" && break; nap 0.1
      done
      local tl mtus dir tls="rc_roce ud_roce"
      if ! ibv_devinfo -d rxeA | grep -q "active_mtu:.*4096"; then
        fail_step gid.mtu.setup "rxeA's active MTU did not become 4096"; tls=""
      fi
      for tl in $tls; do
        for dir in A_to_B B_to_A; do   # the client (tag_bw's sender) on rxeA, then on rxeB
          port=$((port + 1))
          SRV=(env "UCX_NET_DEVICES=rxe${dir:5:1}:1" "UCX_TLS=$tl,self" ucx_perftest -p "$port")
          CLI=(env "UCX_NET_DEVICES=rxe${dir:0:1}:1" "UCX_TLS=$tl,self" ucx_perftest -p "$port" localhost
               -t tag_bw -s 1048576 -n 3)
          T=60 pair "gid.mtu.$tl.$dir" "$port"
        done
      done
      if [ -n "$tls" ]; then
        # Every log (both directions, client and server) has its QPs at 1024, and only at 1024.
        local f bad=""
        for f in "$LOGDIR"/gid.mtu.rc_roce.*; do
          mtus=$(grep -ho "path MTU [0-9]*" "$f" | sort -u | tr '\n' ' ')
          [ "$mtus" = "path MTU 1024 " ] || bad+=" ${f##*/}: '${mtus}'"
        done
        say "rc_roce QPs between MTU 9000 and 1500:${bad:- all at path MTU 1024}"
        [ -z "$bad" ] || fail_step gid.mtu.rc_roce.qps "QPs not all at path MTU 1024:$bad"
      fi
      ip link set vA mtu 1500
    fi

    # ---- a VLAN smaller than its port: vA and vB at MTU 9000 (both rxe ports 4096), VLAN 100 at
    # 9000 on vA and 1500 on vB. rxe sizes its port by the lower netdev only, and rdma_cm gives
    # the passive side the requester's path MTU: a connection made from rxeA over the VLANs ran at
    # 4096 on both ends, and rxeB's 4096-byte packets (its RDMA READ responses) leave vB.100 with
    # DF and are dropped. Each side now takes its GID entry's netdev MTU into what it says.
    if T=10 step gid.vlan_mtu.setup sh -c 'ip link set vA mtu 9000 && ip link set vB mtu 9000 &&
                                           ip link set vA.100 mtu 9000 && ip link set vB.100 mtu 1500'; then
      for ((i = 0; i < 50; i++)); do
        ibv_devinfo -d rxeA | grep -q "active_mtu:.*4096" && ibv_devinfo -d rxeB | grep -q "active_mtu:.*4096" && break
        nap 0.1
      done
      if ibv_devinfo -d rxeA | grep -q "active_mtu:.*4096" && ibv_devinfo -d rxeB | grep -q "active_mtu:.*4096"; then
        local dir f bad="" ia ib
        ia=$(gid_index_of rxeA "$(gid_hex $GID_VA_IP)" vA.100) ib=$(gid_index_of rxeB "$(gid_hex $GID_VB_IP)" vB.100)
        [ -n "$ia" ] && [ -n "$ib" ] || fail_step gid.vlan_mtu.setup "no RoCE v2 entry of vA.100/vB.100 ('$ia', '$ib')"
        for dir in A_to_B B_to_A; do   # the client (tag_bw's sender) on rxeA, then on rxeB
          local s=${dir:5:1} c=${dir:0:1} si ci
          [ "$s" = A ] && { si=$ia; ci=$ib; } || { si=$ib; ci=$ia; }
          port=$((port + 1))
          SRV=(env "UCX_NET_DEVICES=rxe$s:1" "UCX_RC_ROCE_GID_NETDEV=v$s.100" UCX_TLS=rc_roce,self
               ucx_perftest -p "$port")
          CLI=(env "UCX_NET_DEVICES=rxe$c:1" "UCX_RC_ROCE_GID_NETDEV=v$c.100" UCX_TLS=rc_roce,self
               ucx_perftest -p "$port" localhost -t tag_bw -s 1048576 -n 3)
          T=60 pair "gid.vlan_mtu.rc_roce.$dir" "$port"
          # ud_roce takes its entry by the same policy (GID_NETDEV; before, only GID_INDEX reached
          # a verbs UD QP): the VLAN's entry, and datagrams that fit the VLAN.
          port=$((port + 1))
          SRV=(env "UCX_NET_DEVICES=rxe$s:1" "UCX_UD_ROCE_GID_NETDEV=v$s.100" UCX_UD_ROCE_LOG_LEVEL=info
               UCX_TLS=ud_roce,self ucx_perftest -p "$port")
          CLI=(env "UCX_NET_DEVICES=rxe$c:1" "UCX_UD_ROCE_GID_NETDEV=v$c.100" UCX_UD_ROCE_LOG_LEVEL=info
               UCX_TLS=ud_roce,self ucx_perftest -p "$port" localhost -t tag_bw -s 1048576 -n 3)
          T=60 pair "gid.vlan_mtu.ud_roce.$dir" "$port"
          grep -q "verbs: UD: rxe$c port 1: GID index $ci " "$LOG" && grep -q "verbs: UD: rxe$s port 1: GID index $si " "$LOG.server" \
            || fail_step "gid.vlan_mtu.ud_roce.$dir.gid" "ud_roce's QPs did not take the VLAN entries (client rxe$c $ci, server rxe$s $si)"
        done
        for f in "$LOGDIR"/gid.vlan_mtu.rc_roce.?_to_?*; do
          mtus=$(grep -ho "path MTU [0-9]*" "$f" | sort -u | tr '\n' ' ')
          [ "$mtus" = "path MTU 1024 " ] || bad+=" ${f##*/}: '${mtus}'"
        done
        say "rc_roce QPs over VLANs of MTU 9000 and 1500 on 9000-byte ports:${bad:- all at path MTU 1024}"
        [ -z "$bad" ] || fail_step gid.vlan_mtu.qps "QPs not all at path MTU 1024:$bad"
      else
        fail_step gid.vlan_mtu.setup "the rxe ports' active MTU did not become 4096"
      fi
    fi
    ip link set vA.100 mtu 1500; ip link set vB.100 mtu 1500; ip link set vA mtu 1500; ip link set vB mtu 1500
  fi
  gid_tc_cleanup

  # ---- the userspace device's priority set on one side only: the PCP on the wire, both directions
  if T=30 step gid.pcp.setup bash "$GID_SCRIPT" pcp-setup; then
    local cap=$OUT/gid-pcp.pcap cpid prio=5
    ip netns exec pcpA dumpcap -q -P -i pA -w "$cap" > "$LOGDIR/gid.pcp.dumpcap" 2>&1 &
    cpid=$!
    for ((i = 0; i < 100; i++)); do [ -s "$cap" ] && break; nap 0.1; done
    port=$((port + 1))
    SRV=(env UCX_ROCE_NETNS=pcpB UCX_NET_DEVICES=pB.100 "UCX_RC_ROCE_PRIORITY=$prio" "UCX_TLS=rc_roce,self"
         ucx_perftest -p "$port")
    CLI=(env UCX_ROCE_NETNS=pcpA UCX_NET_DEVICES=pA.100 "UCX_TLS=rc_roce,self" ucx_perftest -p "$port" localhost
         -t tag_lat -n 1000 -w 100)
    pair gid.pcp.tag_lat "$port" && perf_lat gid.pcp.tag_lat gid.pcp.tag_lat
    nap 0.5
    kill -INT "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
    T=30 step gid.pcp.wire "$doctor" wire "$cap"
    if [ -s "$LOG" ]; then
      local -a w; local fwd="" rev="" bad="" n
      # flow SRC -> DST KIND packets=N tos=T dscp=D ecn=E vlan=V pcp=P
      while read -r -a w; do
        [ "${w[0]:-}" = flow ] && [ "${w[4]:-}" = rc ] || continue
        n=${w[5]#packets=}
        if [ "${w[9]:-}" != vlan=100 ] || [ "${w[10]:-}" != "pcp=$prio" ]; then
          bad+=" ${w[1]}->${w[3]}:${w[9]:-untagged},${w[10]:-}(x$n)"; continue
        fi
        [ "${w[1]}" = $GID_PCP_A_IP ] && [ "$n" -ge 1000 ] && fwd=$prio
        [ "${w[1]}" = $GID_PCP_B_IP ] && [ "$n" -ge 1000 ] && rev=$prio
      done < "$LOG"
      result gid.pcp.client_to_server.pcp "${fwd:--1}" pcp
      result gid.pcp.server_to_client.pcp "${rev:--1}" pcp
      [ -n "$fwd" ] && [ -n "$rev" ] && [ -z "$bad" ] \
        || fail_step gid.pcp.wire "RC packets not all VLAN 100 PCP $prio both ways (>= 1000 each):${bad:- a direction is missing or short}"
    fi
  fi
  gid_pcp_cleanup

  # ---- an IPv6 address that failed duplicate address detection (the other end of a veth pair
  # holds it) is no GID of the userspace device: it cannot be bound or sent from. getifaddrs
  # does not tell; /proc/net/if_inet6 does. Before, it was the interface default.
  if T=20 step gid.dadfailed.setup bash -c 'ip link add vT0 type veth peer name vT1 && ip link set vT1 up &&
       ip -6 addr add fd77::1/64 dev vT1 nodad && ip link set vT0 up && ip -6 addr add fd77::1/64 dev vT0 &&
       for i in $(seq 50); do ip -6 addr show dev vT0 | grep -q "fd77::1.*dadfailed" &&
         ! ip -6 addr show dev vT0 scope link | grep -q tentative && exit 0; sleep 0.2; done;
       ip -6 addr show dev vT0; exit 1'; then
    T=30 step gid.dadfailed "$doctor" gid --netdev vT0
    if [ -s "$LOG" ]; then
      grep -q "fd77::1" "$LOG" && fail_step gid.dadfailed "the dadfailed address fd77::1 is a GID of vT0"
      grep -q "^interface default: index" "$LOG" || fail_step gid.dadfailed "no interface default (the link-local address)"
    fi
  fi
  ip link del vT0 2>/dev/null

  # ---- impossible settings: one line naming the setting and the valid choices
  T=60 step gid.bad_settings bash "$GID_SCRIPT" bad-settings && while IFS= read -r line; do say "  $line"; done < "$LOG"

  unset LD_PRELOAD UCX_LOG_LEVEL UCX_RC_ROCE_LOG_LEVEL
  if [ -n "$saved_tls" ]; then export UCX_TLS=$saved_tls; else unset UCX_TLS; fi
  export UCX_NET_DEVICES=$saved_nd
}

# Modes of the script itself (steps run commands, not shell functions).
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = tc-setup ]; then
  gid_tc_setup; exit
elif [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = pcp-setup ]; then
  gid_pcp_setup; exit
elif [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = bad-settings ]; then
  gid_bad_settings; exit
elif [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Standalone: the suite's helpers, then the group.
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  # shellcheck source=lib.sh
  source "$here/lib.sh"
  BUILD=${ROCE_BUILD_DIR:-/work/main/build}
  DEV=rxe0
  COUNTERS_DEV=$DEV
  port=13600
  perf_lat() { local v; v=$(field_after "$LOG" Final: 3); [ -n "$v" ] && result "$1" "$v" us || fail_step "$2" "no Final: line"; }
  perftest() {
    local name=$1; shift
    port=$((port + 1))
    SRV=(ucx_perftest -p "$port")
    CLI=(ucx_perftest -p "$port" localhost "$@")
    pair "$name" "$port"
  }
  gid_group
  summary
fi
