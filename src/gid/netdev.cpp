#include "gid/netdev.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace roce::gid {

unsigned roce_packet_bytes(unsigned mtu, bool ipv6) { return mtu + 32 + 8 + (ipv6 ? 40 : 20); }

unsigned largest_roce_mtu(unsigned netdev_mtu, bool ipv6) {
    for (unsigned m = 4096; m >= 256; m /= 2)
        if (roce_packet_bytes(m, ipv6) <= netdev_mtu)
            return m;
    return 0;
}
namespace {

std::vector<std::string_view> split_ws(std::string_view s) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\\')) ++i;
        size_t j = i;
        while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\\') ++j;
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

std::vector<std::string_view> lines_of(std::string_view text) {
    std::vector<std::string_view> out;
    while (!text.empty()) {
        auto nl = text.find('\n');
        out.push_back(text.substr(0, nl));
        if (nl == std::string_view::npos) break;
        text.remove_prefix(nl + 1);
    }
    return out;
}

template <typename T>
bool parse_num(std::string_view s, T& v, int base = 10) {
    if (base == 16 && s.starts_with("0x")) s.remove_prefix(2);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

uint8_t mask_len(const uint8_t* bytes, size_t n) {
    unsigned len = 0;
    for (size_t i = 0; i < n; ++i) len += std::popcount(bytes[i]);
    return static_cast<uint8_t>(len);
}

bool route_better(const Route& a, const Route* b) {
    if (b == nullptr) return true;
    if (a.dst.len != b->dst.len) return a.dst.len > b->dst.len;
    return a.metric < b->metric;
}

} // namespace

bool Netdev::is_tunnel() const {
    static constexpr std::string_view tunnels[] = {"vxlan", "geneve", "gre",  "gretap", "ip6gre", "ip6gretap",
                                                   "ipip",  "sit",    "ip6tnl", "wireguard", "bareudp"};
    return std::find(std::begin(tunnels), std::end(tunnels), kind) != std::end(tunnels);
}

std::string Route::str() const {
    std::string s = reject ? "unreachable " : local ? "local " : "";
    s += dst.len == 0 ? "default" : dst.str();
    if (via) s += " via " + via->str();
    if (!dev.empty()) s += " dev " + dev;
    if (src) s += " src " + src->str();
    if (metric) s += " metric " + std::to_string(metric);
    return s;
}

const Netdev* NetModel::find(std::string_view name) const {
    for (const auto& n : netdevs)
        if (n.name == name) return &n;
    return nullptr;
}

std::vector<const IfAddr*> NetModel::addresses_of(std::string_view ifname) const {
    std::vector<const IfAddr*> out;
    for (const auto& a : addrs)
        if (a.ifname == ifname) out.push_back(&a);
    return out;
}

const IfAddr* NetModel::find_address(std::string_view ifname, const IpAddr& ip) const {
    for (const auto& a : addrs)
        if (a.ifname == ifname && a.prefix.addr == ip) return &a;
    return nullptr;
}

std::vector<std::string> NetModel::holders_of(const IpAddr& ip) const {
    std::vector<std::string> out;
    for (const auto& a : addrs)
        if (a.prefix.addr == ip && std::find(out.begin(), out.end(), a.ifname) == out.end()) out.push_back(a.ifname);
    return out;
}

const Route* NetModel::route_via(const IpAddr& dst, std::string_view dev) const {
    const Route* best = nullptr;
    for (const auto& r : routes)
        if ((r.dev == dev || r.reject) && r.dst.contains(dst) && route_better(r, best)) best = &r;
    return best && !best->reject ? best : nullptr;
}

const Route* NetModel::best_route(const IpAddr& dst) const {
    const Route* best = nullptr;
    for (const auto& r : routes)
        if (r.dst.contains(dst) && route_better(r, best)) best = &r;
    return best && !best->reject ? best : nullptr;
}

// ---------------------------------------------------------------- text formats

namespace {
// 32 hex digits, no separators (/proc/net/ipv6_route, if_inet6).
IpAddr hex_ipv6(std::string_view hex) {
    IpAddr a;
    for (int i = 0; i < 16; ++i) parse_num(hex.substr(2 * i, 2), a.b[i], 16);
    return a;
}
} // namespace

std::optional<IfAddr> parse_ip_addr_line(std::string_view line) {
    // "2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\       valid_lft forever ..."
    auto tok = split_ws(line);
    if (tok.size() < 3) return std::nullopt;
    size_t i = 0;
    if (tok[0].ends_with(':')) ++i;
    IfAddr a;
    std::string_view name = tok[i++];
    if (auto at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
    a.ifname = name;
    for (; i + 1 < tok.size(); ++i) {
        if (tok[i] != "inet" && tok[i] != "inet6") continue;
        auto p = IpPrefix::parse(tok[i + 1]);
        if (!p) return std::nullopt;
        a.prefix = *p;
        for (size_t k = i + 2; k < tok.size(); ++k)
            if (tok[k] == "tentative" || tok[k] == "dadfailed") {
                a.usable = false;
                a.flags += (a.flags.empty() ? "" : " ") + std::string(tok[k]);
            }
        return a;
    }
    return std::nullopt;   // "link/ether" lines of `ip -o link` and similar
}

std::optional<IfAddr> parse_proc_if_inet6_line(std::string_view line) {
    // "fe800000000000000a0027fffe8d7ab2 02 40 20 80     eth0": address, ifindex, prefix length,
    // scope, flags (IFA_F_*), name; all hex but the name.
    auto tok = split_ws(line);
    unsigned len = 0, flags = 0;
    if (tok.size() < 6 || tok[0].size() != 32 || !parse_num(tok[2], len, 16) || len > 128 ||
        !parse_num(tok[4], flags, 16))
        return std::nullopt;
    constexpr unsigned IFA_F_DADFAILED = 0x08, IFA_F_TENTATIVE = 0x40;
    IfAddr a;
    a.ifname = tok[5];
    a.prefix = IpPrefix{hex_ipv6(tok[0]), static_cast<uint8_t>(len)};
    for (auto [bit, name] : {std::pair{IFA_F_DADFAILED, "dadfailed"}, std::pair{IFA_F_TENTATIVE, "tentative"}})
        if (flags & bit) {
            a.usable = false;
            a.flags += (a.flags.empty() ? "" : " ") + std::string(name);
        }
    return a;
}

std::optional<Route> parse_ip_route_line(std::string_view line) {
    // "[type] <dst>|default [via [inet6] GW] dev DEV [proto P] [scope S] [src A] [metric N] [table T] ..."
    auto tok = split_ws(line);
    if (tok.empty()) return std::nullopt;
    size_t i = 0;
    Route r;
    if (tok[0] == "unreachable" || tok[0] == "blackhole" || tok[0] == "prohibit") {
        r.reject = true;
        ++i;
    } else if (tok[0] == "unicast") {
        ++i;
    } else if (tok[0] == "local" || tok[0] == "broadcast" || tok[0] == "multicast" || tok[0] == "anycast" ||
               tok[0] == "throw" || tok[0] == "nat") {
        return std::nullopt;   // not a way to reach another host
    }
    if (i >= tok.size()) return std::nullopt;
    const std::string_view dst = tok[i++];
    std::optional<IpPrefix> prefix;
    if (dst != "default") {
        prefix = IpPrefix::parse(dst);
        if (!prefix) return std::nullopt;
    }
    for (; i < tok.size(); ++i) {
        const auto key = tok[i];
        if (i + 1 >= tok.size()) break;
        auto val = tok[i + 1];
        if (key == "via") {
            if ((val == "inet" || val == "inet6") && i + 2 < tok.size()) val = tok[++i + 1];
            r.via = IpAddr::parse(val);
            ++i;
        } else if (key == "dev") {
            r.dev = val;
            ++i;
        } else if (key == "src") {
            r.src = IpAddr::parse(val);
            ++i;
        } else if (key == "metric") {
            parse_num(val, r.metric);
            ++i;
        } else if (key == "table") {
            if (val == "local") return std::nullopt;
            ++i;
        } else if (key == "proto" || key == "scope" || key == "pref" || key == "expires" || key == "mtu" ||
                   key == "realm" || key == "onlink") {
            if (key != "onlink") ++i;
        }
    }
    if (!prefix) {
        // "default" says nothing about the family; the gateway or source does.
        const bool v6 = (r.via && r.via->family() == Family::inet6) || (r.src && r.src->family() == Family::inet6);
        prefix = IpPrefix::parse(v6 ? "::/0" : "0.0.0.0/0");
    }
    r.dst = prefix->network();
    if (r.dev.empty() && !r.reject) return std::nullopt;
    return r;
}

std::optional<Route> parse_proc_route_line(std::string_view line) {
    // Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT; addresses are the
    // network-order words printed as host integers, so copying the integer's bytes restores them.
    auto tok = split_ws(line);
    if (tok.size() < 8 || tok[0] == "Iface") return std::nullopt;
    uint32_t dst, gw, flags, metric, mask;
    if (!parse_num(tok[1], dst, 16) || !parse_num(tok[2], gw, 16) || !parse_num(tok[3], flags, 16) ||
        !parse_num(tok[6], metric) || !parse_num(tok[7], mask, 16))
        return std::nullopt;
    constexpr uint32_t RTF_UP = 0x1, RTF_GATEWAY = 0x2, RTF_REJECT = 0x200;
    if (!(flags & RTF_UP)) return std::nullopt;
    auto v4 = [](uint32_t raw) {
        uint8_t b[4];
        std::memcpy(b, &raw, 4);
        return IpAddr::v4(uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3]);
    };
    uint8_t mb[4];
    std::memcpy(mb, &mask, 4);
    Route r;
    r.dev = tok[0];
    r.dst = IpPrefix{v4(dst), mask_len(mb, 4)}.network();
    if (flags & RTF_GATEWAY) r.via = v4(gw);
    r.metric = metric;
    r.reject = flags & RTF_REJECT;
    return r;
}

std::optional<Route> parse_proc_ipv6_route_line(std::string_view line) {
    // dst dst_len src src_len next_hop metric refcnt use flags dev (hex, no separators)
    auto tok = split_ws(line);
    if (tok.size() < 10 || tok[0].size() != 32 || tok[4].size() != 32) return std::nullopt;
    unsigned len = 0;
    uint32_t metric = 0, flags = 0;
    if (!parse_num(tok[1], len, 16) || !parse_num(tok[5], metric, 16) || !parse_num(tok[8], flags, 16) || len > 128)
        return std::nullopt;
    constexpr uint32_t RTF_UP = 0x1, RTF_GATEWAY = 0x2, RTF_REJECT = 0x200, RTF_LOCAL = 0x80000000;
    if (!(flags & RTF_UP) || (flags & RTF_LOCAL)) return std::nullopt;
    Route r;
    r.dev = tok[9];
    r.reject = flags & RTF_REJECT;
    if (r.dev == "lo" && !r.reject) return std::nullopt;   // local-table entries (own addresses)
    r.dst = IpPrefix{hex_ipv6(tok[0]), static_cast<uint8_t>(len)};
    if (r.dst.family() == Family::inet) return std::nullopt;   // ::ffff:0:0/96 style entries
    r.dst = r.dst.network();
    if (flags & RTF_GATEWAY) r.via = hex_ipv6(tok[4]);
    r.metric = metric;
    return r;
}

// ---------------------------------------------------------------- loading

namespace {

std::string read_link_name(const SysRoot& root, const std::string& rel) {
    std::error_code ec;
    const auto p = std::filesystem::path(root.path(rel));
    if (std::filesystem::is_symlink(p, ec)) return std::filesystem::read_symlink(p, ec).filename().string();
    return root.read(rel).value_or("");   // fixtures may hold the name as text
}

void load_netdevs(const SysRoot& root, NetModel& m) {
    for (const auto& name : root.list("sys/class/net")) {
        const std::string dir = "sys/class/net/" + name;
        Netdev n;
        n.name = name;
        n.operstate = root.read(dir + "/operstate").value_or("unknown");
        unsigned flags = 0;
        if (auto f = root.read(dir + "/flags")) parse_num(std::string_view(*f), flags, 16);
        else flags = n.operstate == "up" ? 1 : 0;
        n.admin_up = flags & 0x1;   // IFF_UP
        if (auto mtu = root.read(dir + "/mtu")) parse_num(std::string_view(*mtu), n.mtu);
        n.mac = root.read(dir + "/address").value_or("");
        if (auto uevent = root.read(dir + "/uevent"))
            for (auto l : lines_of(*uevent))
                if (l.starts_with("DEVTYPE=")) n.kind = l.substr(8);
        if (root.exists(dir + "/master")) n.master = read_link_name(root, dir + "/master");
        if (auto slaves = root.read(dir + "/bonding/slaves")) {
            for (auto s : split_ws(*slaves)) n.slaves.emplace_back(s);
            if (n.kind.empty()) n.kind = "bond";
        }
        m.netdevs.push_back(std::move(n));
    }
    // "eth0.100       | 100  | eth0" after two header lines.
    if (auto vlan = root.read("proc/net/vlan/config"))
        for (auto l : lines_of(*vlan)) {
            std::string s(l);
            std::replace(s.begin(), s.end(), '|', ' ');
            auto tok = split_ws(s);
            uint16_t id = 0;
            if (tok.size() != 3 || !parse_num(tok[1], id)) continue;
            for (auto& n : m.netdevs)
                if (n.name == tok[0]) {
                    n.vlan_id = id;
                    n.vlan_lower = tok[2];
                    if (n.kind.empty()) n.kind = "vlan";
                }
        }
}

// getifaddrs (this thread's namespace), with the IPv6 flags of `if_inet6` (its text) applied: an
// address still in duplicate address detection, or that failed it, cannot be bound or sent from.
void load_live_addrs(NetModel& m, const std::optional<std::string>& if_inet6) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return;
    for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || !ifa->ifa_netmask) continue;
        IfAddr a;
        a.ifname = ifa->ifa_name;
        if (ifa->ifa_addr->sa_family == AF_INET) {
            const auto* sin = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);
            const auto* msk = reinterpret_cast<const sockaddr_in*>(ifa->ifa_netmask);
            a.prefix = IpPrefix{IpAddr::v4(ntohl(sin->sin_addr.s_addr)),
                                mask_len(reinterpret_cast<const uint8_t*>(&msk->sin_addr), 4)};
        } else if (ifa->ifa_addr->sa_family == AF_INET6) {
            const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);
            const auto* msk = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_netmask);
            a.prefix = IpPrefix{IpAddr::from_bytes(sin6->sin6_addr.s6_addr), mask_len(msk->sin6_addr.s6_addr, 16)};
        } else {
            continue;
        }
        m.addrs.push_back(std::move(a));
    }
    freeifaddrs(list);
    if (!if_inet6) return;
    for (auto l : lines_of(*if_inet6)) {
        auto f = parse_proc_if_inet6_line(l);
        if (!f || f->usable) continue;
        for (auto& a : m.addrs)
            if (a.ifname == f->ifname && a.prefix.addr == f->prefix.addr) {
                a.usable = false;
                a.flags = f->flags;
            }
    }
}

// Whether this thread is in another network namespace than the process (common/netns.hpp):
// /sys and /proc/net then describe the process's namespace, not ours.
bool in_foreign_netns() {
    struct stat mine {}, proc {};
    return ::stat("/proc/thread-self/ns/net", &mine) == 0 && ::stat("/proc/self/ns/net", &proc) == 0 &&
           mine.st_ino != proc.st_ino;
}

// The netdevs of this thread's namespace from getifaddrs: names and flags only (no VLAN or
// bond details: the sysfs that would tell them belongs to the process's namespace).
void load_ifaddrs_netdevs(NetModel& m) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return;
    for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        if (m.find(ifa->ifa_name)) continue;
        Netdev n;
        n.name = ifa->ifa_name;
        n.admin_up = ifa->ifa_flags & IFF_UP;
        n.operstate = (ifa->ifa_flags & IFF_RUNNING) ? "up" : "down";
        if (ifa->ifa_flags & IFF_LOOPBACK) n.kind = "loopback";
        m.netdevs.push_back(std::move(n));
    }
    freeifaddrs(list);
}

template <typename Parser>
bool load_lines(const SysRoot& root, std::string_view rel, Parser parse, std::vector<Route>& out) {
    auto text = root.read(rel);
    if (!text) return false;
    for (auto l : lines_of(*text))
        if (auto r = parse(l)) out.push_back(*r);
    return true;
}

// A route the kernel creates for an address by itself: connected (its subnet) or local (itself).
Route own_route(const IpPrefix& dst, const IfAddr& a, bool local) {
    Route r;
    r.dst = dst;
    r.dev = a.ifname;
    r.src = a.prefix.addr;
    r.local = local;
    return r;
}

} // namespace

Status load_net_model(const SysRoot& root, NetModel& out, std::string& err) {
    out = NetModel{};
    if (!root.exists("sys/class/net")) {
        err = "no " + root.path("sys/class/net") + ": not a Linux sysfs tree";
        return Status::no_device;
    }
    // In another namespace than the process's (UCX_ROCE_NETNS), that namespace's view: netdevs
    // from getifaddrs, routes from /proc/thread-self/net.
    const bool foreign = root.live() && in_foreign_netns();
    const std::string proc_net = foreign ? "proc/thread-self/net/" : "proc/net/";
    if (foreign)
        load_ifaddrs_netdevs(out);
    else
        load_netdevs(root, out);

    if (auto text = root.read("addrs")) {
        for (auto l : lines_of(*text))
            if (auto a = parse_ip_addr_line(l)) out.addrs.push_back(*a);
    } else if (root.live()) {
        load_live_addrs(out, root.read(proc_net + "if_inet6"));
    } else {
        // Without it every global GID would read "address not configured: stale", silently.
        err = "no " + root.path("addrs") + ": a system root other than / needs the `ip -o addr` output there";
        return Status::no_device;
    }

    bool have_routes = load_lines(root, "routes", parse_ip_route_line, out.routes);
    if (!have_routes) {
        have_routes = load_lines(root, proc_net + "route", parse_proc_route_line, out.routes);
        have_routes |= load_lines(root, proc_net + "ipv6_route", parse_proc_ipv6_route_line, out.routes);
    }
    if (!have_routes) {
        // Without route data, the kernel would still have each address's connected route.
        for (const auto& a : out.addrs)
            if (a.usable && a.prefix.len < (a.prefix.family() == Family::inet ? 32 : 128))
                out.routes.push_back(own_route(a.prefix.network(), a, false));
    }
    // Local table: every usable address is reachable on its own netdev; lo's whole prefix too
    // (127.0.0.0/8 answers on any address, as `local 127.0.0.0/8 dev lo` does).
    for (const auto& a : out.addrs) {
        if (!a.usable) continue;
        const Netdev* n = out.find(a.ifname);
        const bool loopback = a.ifname == "lo" || (n && n->kind == "loopback");
        IpPrefix host = loopback ? a.prefix.network() : IpPrefix{a.prefix.addr, uint8_t(a.prefix.family() == Family::inet ? 32 : 128)};
        out.routes.push_back(own_route(host, a, true));
    }
    return Status::ok;
}

} // namespace roce::gid
