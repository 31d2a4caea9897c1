# shellcheck shell=bash
# Routing for two local netdevs that must talk over the wire (sourced by gid.sh and ccverbs.sh,
# also in their setup modes, which must not source lib.sh: it resets the results file).
#
# Two local netdevs whose addresses must reach each other over the wire (rxe on both ends of a
# veth pair): the local table would short-cut them, so it moves behind rule 100 and rules
# <pref>/<pref+1> route each address to the other end. local_route_pair <ifA> <ipA> <ifB> <ipB>
# <pref> <table> (tables <table>, <table+1>); local_route_pair_del <pref>...; local_table_restore.
local_route_pair() {
  local a=$1 ipa=$2 b=$3 ipb=$4 pref=$5 table=$6 d
  if ip rule show pref 0 | grep -q .; then
    ip rule add pref 100 lookup local
    ip rule del pref 0
  fi
  ip rule add pref "$pref" iif lo to "$ipb" lookup "$table"
  ip rule add pref $((pref + 1)) iif lo to "$ipa" lookup $((table + 1))
  ip route add "$ipb" dev "$a" src "$ipa" table "$table"
  ip route add "$ipa" dev "$b" src "$ipb" table $((table + 1))
  for d in all "$a" "$b"; do
    echo 1 > "/proc/sys/net/ipv4/conf/$d/accept_local"
    echo 0 > "/proc/sys/net/ipv4/conf/$d/rp_filter"
  done
}
local_route_pair_del() {
  local p
  for p in "$@"; do
    ip rule del pref "$p" 2>/dev/null
    ip rule del pref $((p + 1)) 2>/dev/null
  done
  return 0
}
local_table_restore() {
  ip rule add pref 0 lookup local 2>/dev/null
  ip rule del pref 100 2>/dev/null
  return 0
}
