// The IP side of a host as the GID policy sees it: netdevs (state, kind, VLAN, bonding),
// their addresses, and the routes. Loaded from /sys/class/net + /proc/net/vlan/config, and
// either the kernel (getifaddrs, /proc/net/route, /proc/net/ipv6_route) or, for fixtures, the
// `addrs` / `routes` text files in `ip -o addr` / `ip -o route` format.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "gid/ip.hpp"
#include "gid/sysroot.hpp"

namespace roce::gid {

// The largest RoCE path MTU (256..4096) whose packets fit a netdev MTU: payload + the largest
// RoCE headers our devices put on a full packet (BTH + RETH of an RDMA WRITE first/only + ICRC,
// 32 bytes) + UDP + IPv4 (60 in all) or IPv6 (80), as rxe derives its port's active MTU.
// 1500 -> 1024, 9000 or loopback -> 4096; 0 when not even 256 fits.
unsigned largest_roce_mtu(unsigned netdev_mtu, bool ipv6);
// Bytes on the netdev of a full packet of RoCE path MTU `mtu` (what must fit its MTU).
unsigned roce_packet_bytes(unsigned mtu, bool ipv6);

struct Netdev {
    std::string name;
    std::string operstate;        // sysfs operstate: up, down, lowerlayerdown, unknown, ...
    bool admin_up = false;        // IFF_UP in sysfs flags
    unsigned mtu = 0;
    std::string mac;
    std::string kind;             // uevent DEVTYPE: "", vlan, bond, vxlan, bridge, geneve, ...
    std::optional<uint16_t> vlan_id;
    std::string vlan_lower;       // real device of a VLAN
    std::string master;           // bond (or bridge) this netdev is enslaved to
    std::vector<std::string> slaves;   // of a bond

    // "unknown" is what many virtual and some NIC drivers report while passing traffic, so it
    // counts as up when the interface is administratively up.
    bool up() const { return operstate == "up" || (operstate == "unknown" && admin_up); }
    // Tunnels encapsulate in software: a RoCE NIC sends its packets on the port, unencapsulated,
    // so an address living on a tunnel device is not reachable through RoCE.
    bool is_tunnel() const;
};

struct IfAddr {
    std::string ifname;
    IpPrefix prefix;              // the address with its prefix length
    bool usable = true;           // false for IPv6 tentative / dadfailed: the kernel will not use it
    std::string flags;            // "dadfailed", "tentative", ... as read
};

struct Route {
    IpPrefix dst;
    std::string dev;
    std::optional<IpAddr> via;
    std::optional<IpAddr> src;
    unsigned metric = 0;
    bool reject = false;          // unreachable / blackhole / prohibit: an answer of "no"
    bool local = false;           // the host's own address (kernel local table): a peer on this host

    bool connected() const { return !via.has_value() && !reject; }
    std::string str() const;      // "10.0.0.0/24 dev eth0" / "default via 10.0.0.254 dev eth0"
};

class NetModel {
public:
    std::vector<Netdev> netdevs;
    std::vector<IfAddr> addrs;
    std::vector<Route> routes;

    const Netdev* find(std::string_view name) const;
    // The addresses configured on `ifname` (usable or not).
    std::vector<const IfAddr*> addresses_of(std::string_view ifname) const;
    const IfAddr* find_address(std::string_view ifname, const IpAddr& a) const;
    // Netdevs that hold address `a` (the vxlan-and-bond-sharing-an-IP case has two).
    std::vector<std::string> holders_of(const IpAddr& a) const;
    // Best route to `dst` leaving through `dev` (longest prefix, then lowest metric), as
    // `ip route get <dst> oif <dev>` answers: the RoCE stack resolves the next hop on the GID's own
    // netdev, not on whatever interface the main table prefers. nullptr: none, or a reject route.
    const Route* route_via(const IpAddr& dst, std::string_view dev) const;
    // Best route overall (what `ip route get <dst>` would pick), for explanations.
    const Route* best_route(const IpAddr& dst) const;
};

// Loads everything under `root` (see the file comment). Missing pieces are not errors: a fixture
// may omit routes (connected routes are then derived from the addresses). The kernel's local
// table is not read (/proc/net/route shows only main); its entries are derived from the
// addresses instead, so a peer on the same host (another process, the loopback demo) is reachable.
Status load_net_model(const SysRoot& root, NetModel& out, std::string& err);

// Line parsers, public for tests. Return nullopt on lines that carry nothing usable.
std::optional<IfAddr> parse_ip_addr_line(std::string_view line);     // `ip -o addr`
std::optional<Route> parse_ip_route_line(std::string_view line);     // `ip -o route` / `ip -o -6 route`
std::optional<Route> parse_proc_route_line(std::string_view line);   // /proc/net/route (not the header)
std::optional<Route> parse_proc_ipv6_route_line(std::string_view line);
// /proc/net/if_inet6: an address of the live system with its flags (getifaddrs has none): prefix
// (address and length), ifname, usable/flags as parse_ip_addr_line (tentative, dadfailed).
std::optional<IfAddr> parse_proc_if_inet6_line(std::string_view line);

} // namespace roce::gid
