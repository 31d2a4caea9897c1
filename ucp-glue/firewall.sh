# Sourced by tests that need a cluster firewall (ucp-glue/port_range_check.sh,
# src/tests/doctor_check.sh): an nftables input chain in network namespace NS that drops every
# UDP datagram outside FIREWALL_OPEN (47000-47015), counting what it drops.
FIREWALL_OPEN=47000-47015

# firewall_up NS: loads the rules; fails (with a message) when nft is missing or refuses them.
firewall_up() {
  command -v nft >/dev/null || { echo "FAIL: nft not found (cmake/setup.sh installs nftables)"; return 1; }
  ip netns exec "$1" nft -f - <<RULES || { echo "FAIL: cannot load the nftables rules"; return 1; }
table inet fw {
  counter dropped {}
  chain in {
    type filter hook input priority 0; policy accept;
    udp dport != $FIREWALL_OPEN counter name dropped drop
  }
}
RULES
}

# firewall_dropped NS: datagrams dropped so far.
firewall_dropped() { ip netns exec "$1" nft list counter inet fw dropped | awk '/packets/ {print $2}'; }
