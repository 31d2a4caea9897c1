#include "netdev.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <optional>

#include "common/netns.hpp"
#include "common/roce_mtu.hpp"
#include "gid/locality.hpp"
#include "gid/synth.hpp"
#include "gid/traffic_class.hpp"

namespace roce::uct {

static bool is_link_local6(const in6_addr& a) {
    return a.s6_addr[0] == 0xfe && (a.s6_addr[1] & 0xc0) == 0x80;
}

std::vector<Netdev> list_netdevs() {
    std::vector<Netdev> out;
    ifaddrs* ifa_list = nullptr;
    if (getifaddrs(&ifa_list) != 0) {
        ucs_debug("roce: getifaddrs() failed: %m");
        return out;
    }
    for (int family : {AF_INET, AF_INET6}) {
        for (ifaddrs* ifa = ifa_list; ifa != nullptr; ifa = ifa->ifa_next) {
            if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != family ||
                !(ifa->ifa_flags & IFF_UP) || !(ifa->ifa_flags & IFF_RUNNING)) {
                continue;
            }
            if (std::any_of(out.begin(), out.end(),
                            [&](const Netdev& d) { return d.name == ifa->ifa_name; })) {
                continue;
            }
            Netdev d;
            d.name = ifa->ifa_name;
            d.family = family;
            if (family == AF_INET) {
                const auto* sin = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);
                std::memcpy(d.ip, &sin->sin_addr, 4);
                d.loopback = (d.ip[0] == 127);
            } else {
                const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);
                if (is_link_local6(sin6->sin6_addr)) {
                    continue;
                }
                std::memcpy(d.ip, &sin6->sin6_addr, 16);
                d.loopback = IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
            }
            if (d.name.size() >= UCT_DEVICE_NAME_MAX) {
                continue;
            }
            out.push_back(std::move(d));
        }
    }
    freeifaddrs(ifa_list);
    // Keep the kernel's interface order (lo first) for stable resource lists.
    std::stable_sort(out.begin(), out.end(), [](const Netdev& a, const Netdev& b) {
        return if_nametoindex(a.name.c_str()) < if_nametoindex(b.name.c_str());
    });
    return out;
}

double netdev_speed_bps(const std::string& name, double fallback) {
    std::ifstream f("/sys/class/net/" + name + "/speed");
    long mbps = 0;
    if (f >> mbps && mbps > 0) {
        return double(mbps) * 1e6;
    }
    return fallback;
}

std::string ip_string(int family, const uint8_t* ip) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(family, ip, buf, sizeof(buf));
    return buf;
}

// ---------------------------------------------------------------- addresses

size_t pack_dev_addr(const Netdev& d, bool verbs, uint8_t* out) {
    uint8_t* p = out;
    uct_iface_local_addr_ns_t host{};
    uct_iface_get_local_address(&host, UCS_SYS_NS_TYPE_NET);
    uint8_t flags = verbs ? dev_addr_verbs : 0;
    if (d.family == AF_INET6) flags |= dev_addr_ipv6;
    if (d.loopback) flags |= dev_addr_loopback;
    bool has_ns = d.loopback && (host.super.id & UCT_IFACE_LOCAL_ADDR_FLAG_NS);
    if (has_ns) flags |= dev_addr_has_ns;
    *p++ = flags;
    if (d.family == AF_INET) {
        std::memcpy(p, d.ip, 4);
        p += 4;
    } else if (!d.loopback) {
        std::memcpy(p, d.ip, 16);
        p += 16;
    }
    std::memcpy(p, &host.super.id, sizeof(host.super.id));
    p += sizeof(host.super.id);
    if (has_ns) {
        std::memcpy(p, &host.sys_ns, sizeof(host.sys_ns));
        p += sizeof(host.sys_ns);
    }
    return static_cast<size_t>(p - out);
}

DevAddrView unpack_dev_addr(const uct_device_addr_t* addr) {
    const auto* p = reinterpret_cast<const uint8_t*>(addr);
    DevAddrView v;
    v.flags = *p++;
    v.family = (v.flags & dev_addr_ipv6) ? AF_INET6 : AF_INET;
    if (v.family == AF_INET) {
        std::memcpy(v.ip, p, 4);
        p += 4;
    } else if (!(v.flags & dev_addr_loopback)) {
        std::memcpy(v.ip, p, 16);
        p += 16;
    } else {
        v.ip[15] = 1;   // ::1
    }
    std::memcpy(&v.host.super.id, p, sizeof(v.host.super.id));
    p += sizeof(v.host.super.id);
    if (v.flags & dev_addr_has_ns) {
        std::memcpy(&v.host.sys_ns, p, sizeof(v.host.sys_ns));
    }
    return v;
}

int dev_addr_is_reachable(const uint8_t* my_dev_addr, const uct_device_addr_t* dev_addr) {
    DevAddrView remote = unpack_dev_addr(dev_addr);
    const uint8_t mine = my_dev_addr[0];
    if ((remote.flags & dev_addr_ipv6) != (mine & dev_addr_ipv6)) {
        return 0;   // the socket speaks one address family
    }
    if ((remote.flags & dev_addr_verbs) != (mine & dev_addr_verbs)) {
        return 0;   // a UDP socket and an RDMA device do not talk to each other's ports
    }
    // Loopback reaches only loopback, and only on the same host and network namespace.
    if ((remote.flags & dev_addr_loopback) != (mine & dev_addr_loopback)) {
        return 0;
    }
    if (remote.flags & dev_addr_loopback) {
        if (!(remote.flags & dev_addr_has_ns)) {
            remote.host.super.id &= ~UCT_IFACE_LOCAL_ADDR_FLAG_NS;
        }
        return uct_iface_local_is_reachable(&remote.host, UCS_SYS_NS_TYPE_NET);
    }
    // Our own address on another host (e.g. containers with the same private IP) would reach
    // ourselves, not the peer.
    DevAddrView local =
            unpack_dev_addr(reinterpret_cast<const uct_device_addr_t*>(my_dev_addr));
    if (std::memcmp(remote.ip, local.ip, sizeof(local.ip)) == 0 &&
        remote.host.super.id != local.host.super.id) {
        return 0;
    }
    // Otherwise reachable as far as we can tell (like tcp); a silent peer fails the QP with
    // UCS_ERR_ENDPOINT_TIMEOUT.
    return 1;
}

std::vector<std::string> usable_netdev_names(const std::string& netns, const char* tl,
                                             const std::optional<gid::GidConfig>& cfg) {
    std::vector<std::string> names;
    (void)in_md_netns(netns, tl, [&] {
        for (const Netdev& d : usable_netdevs(tl, cfg)) {
            names.push_back(d.name);
        }
        return UCS_OK;
    });
    return names;
}

ucs_status_t in_md_netns(const std::string& netns, const char* tl, const std::function<ucs_status_t()>& fn) {
    ucs_status_t status = UCS_OK;
    std::string err;
    if (in_netns(netns, [&] { status = fn(); }, err) != Status::ok) {
        ucs_error("%s: UCX_ROCE_NETNS=%s: %s", tl, netns.c_str(), err.c_str());
        return UCS_ERR_NO_DEVICE;
    }
    return status;
}

std::vector<Netdev> usable_netdevs(const char* tl, const std::optional<gid::GidConfig>& cfg) {
    std::vector<Netdev> all = list_netdevs();
    gid::NetModel net;
    std::string err;
    if (!cfg || gid::load_net_model(gid::SysRoot("/"), net, err) != Status::ok) {
        return all;
    }
    std::vector<Netdev> usable;
    for (const Netdev& d : all) {
        gid::IpAddr ip;
        if (gid::choose_netdev_address(net, d.name, *cfg, ip, err) == Status::ok) {
            usable.push_back(d);
        } else {
            ucs_debug("%s: not listing %s: %s", tl, d.name.c_str(), err.c_str());
        }
    }
    return usable.empty() ? all : usable;
}

static ucs_status_t check_am_alignment(const uct_iface_params_t* params, const char* tl) {
    const uint64_t mask = params->field_mask;
    if (!(mask & UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT)) {
        if (mask & UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET) {
            ucs_error("%s: AM alignment offset has no effect without alignment", tl);
            return UCS_ERR_INVALID_PARAM;
        }
        return UCS_OK;
    }
    if (params->am_alignment == 0 || !ucs_is_pow2(params->am_alignment)) {
        ucs_error("%s: AM alignment (%zu) must be a power of 2", tl, params->am_alignment);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((mask & UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET) &&
        params->am_align_offset >= params->am_alignment) {
        ucs_error("%s: AM alignment offset (%zu) must be less than the alignment (%zu)",
                  tl, params->am_align_offset, params->am_alignment);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

ucs_status_t check_open_params(const uct_iface_params_t* params, const char* tl) {
    UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                    "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("%s: only UCT_IFACE_OPEN_MODE_DEVICE is supported", tl);
        return UCS_ERR_UNSUPPORTED;
    }
    return check_am_alignment(params, tl);
}

LogLevel core_log_level(unsigned ucs_level) {
    if (ucs_level <= UCS_LOG_LEVEL_ERROR) return LogLevel::error;
    if (ucs_level <= UCS_LOG_LEVEL_DIAG) return LogLevel::warn;
    if (ucs_level <= UCS_LOG_LEVEL_INFO) return LogLevel::info;
    return LogLevel::debug;
}

// The userspace device on netdev `d`: the GID policy's choice among the netdev's addresses (a
// synthesised table: its own and its VLAN devices' addresses) replaces d's first address, and
// the traffic class is resolved from the settings (there is no device default).
ucs_status_t apply_gid_policy(const gid::GidConfig& g, Netdev& d, sw::DeviceConfig& dc, const char* tl) {
    gid::NetModel net;
    gid::IpAddr ip;
    gid::Selection sel;
    std::string err;
    Status s = gid::load_net_model(gid::SysRoot("/"), net, err);
    if (s == Status::ok) {
        s = gid::choose_netdev_address(net, d.name, g, ip, err, &sel);
    }
    if (s != Status::ok) {
        ucs_error("%s: %s: %s", tl, d.name.c_str(), err.c_str());
        return s == Status::invalid_param ? UCS_ERR_INVALID_PARAM : UCS_ERR_NO_DEVICE;
    }
    std::memset(d.ip, 0, sizeof(d.ip));
    if (ip.family() == gid::Family::inet) {
        d.family = AF_INET;
        std::memcpy(d.ip, ip.b.data() + 12, 4);
        d.loopback = d.ip[0] == 127;
    } else {
        d.family = AF_INET6;
        std::memcpy(d.ip, ip.b.data(), 16);
        in6_addr a6;   // copied: d.ip has no in6_addr alignment guarantee
        std::memcpy(&a6, d.ip, sizeof(a6));
        d.loopback = IN6_IS_ADDR_LOOPBACK(&a6);
    }
    dc.ip = ip.str();
    // The MTU as seen from the namespace we are in (the model's comes from /sys, which is the
    // process's namespace, not necessarily this one).
    d.mtu = 0;
    if (const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); fd >= 0) {
        ifreq ifr{};
        ucs_strncpy_zero(ifr.ifr_name, d.name.c_str(), sizeof(ifr.ifr_name));
        if (::ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0)
            d.mtu = unsigned(ifr.ifr_mtu);
        ::close(fd);
    }
    const gid::TrafficClass tc = gid::resolve_traffic_class(g, std::nullopt);
    dc.traffic_class = tc.tos;
    dc.traffic_class_source = static_cast<uint8_t>(tc.tos_source);
    dc.priority = tc.priority;
    dc.priority_source = static_cast<uint8_t>(tc.priority_source);
    dc.cnp_traffic_class = gid::cnp_class(g, tc).tos;
    ucs_info("%s: %s: address %s (entry %u: %s); traffic class %s", tl, d.name.c_str(), dc.ip.c_str(),
             *sel.index, sel.reason.c_str(), tc.str().c_str());
    return UCS_OK;
}

namespace {
// "UCX_RC_ROCE_<name>" for tl "rc_roce".
std::string config_var(const char* tl, const char* name) {
    std::string var = std::string("UCX_") + tl + "_" + name;
    std::transform(var.begin(), var.end(), var.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    return var;
}

} // namespace

bool resolve_ports(const ucs_range_spec_t& r, const char* tl, sw::PortRange& out) {
    const std::optional<sw::PortRange> p = sw::make_port_range(r.first, r.last);
    if (!p) {
        const std::string given = r.first == r.last ? std::to_string(r.first)
                                                    : std::to_string(r.first) + "-" + std::to_string(r.last);
        ucs_error("%s: %s=%s is not a UDP port or a range a-b of them (0: an ephemeral port)", tl,
                  config_var(tl, "PORT_RANGE").c_str(), given.c_str());
        return false;
    }
    out = *p;
    return true;
}

ucs_status_t device_open_failed(const char* tl, const char* dev, const std::string& ip, sw::PortRange ports,
                                Status s) {
    if (s == Status::busy) {
        ucs_error("%s: cannot open device %s: UDP %s %s on %s %s bound by another socket (%s; every "
                  "interface of every process on that address needs its own port)", tl, dev,
                  ports.is_range() ? "ports" : "port", ports.str().c_str(), ip.c_str(),
                  ports.is_range() ? "are all" : "is", config_var(tl, "PORT_RANGE").c_str());
    } else {
        ucs_error("%s: cannot open device %s (%s port %s): %s", tl, dev, ip.c_str(), ports.str().c_str(),
                  std::string(to_string(s)).c_str());
    }
    return to_ucs(s);
}

uint32_t resolve_mtu(size_t configured, const Netdev& d, const char* tl) {
    const bool v6 = d.family == AF_INET6;
    const unsigned fits = d.mtu ? gid::largest_roce_mtu(d.mtu, v6) : 4096;
    const std::string var = config_var(tl, "MTU");
    if (configured == UCS_ULUNITS_AUTO) {
        if (fits == 0)
            ucs_error("%s: %s: its MTU %u cannot carry even 256-byte RoCE packets", tl, d.name.c_str(), d.mtu);
        return fits;
    }
    if (!valid_roce_mtu(configured)) {
        ucs_error("%s: %s=%zu is not an IB MTU (256, 512, 1024, 2048, 4096 or auto)", tl, var.c_str(), configured);
        return 0;
    }
    if (configured > fits) {
        const unsigned need = gid::roce_packet_bytes(unsigned(configured), v6);
        ucs_error("%s: %s=%zu: its packets of %u bytes do not fit %s's MTU %u (the device sets DF, they "
                  "would never leave): use auto or %u, or raise the netdev's MTU to %u",
                  tl, var.c_str(), configured, need, d.name.c_str(), d.mtu, fits, need);
        return 0;
    }
    return uint32_t(configured);
}

ucs_status_t md_tl_devices(const Md& md, const char* tl, uct_tl_device_resource_t** devices_p, unsigned* num_p) {
    const bool rdma_ports = md.is_verbs(), locate = md.netns.empty();
    std::vector<std::string> names = rdma_ports ? verbs_tl_devices(md, tl)
                                                : usable_netdev_names(md.netns, tl, gid_settings_for_listing(md, tl));
    std::vector<ucs_sys_device_t> sys(names.size(), UCS_SYS_DEVICE_ID_UNKNOWN);
    std::string err;
    const gid::Topology* topo = locate ? gid::Topology::shared(err) : nullptr;
    if (topo) {
        auto where = [&](const std::string& n) {
            return rdma_ports ? topo->of_rdma(n.substr(0, n.rfind(':'))) : topo->of_netdev(n);
        };
        names = gid::order_by_locality(*topo, std::move(names), where);
        for (size_t i = 0; i < names.size(); ++i) {
            const gid::Locality l = where(names[i]);
            if (!l.pci)
                continue;
            const ucs_sys_bus_id_t bus{l.pci->domain, l.pci->bus, l.pci->dev, l.pci->func};
            if (ucs_topo_find_device_by_bus_id(&bus, &sys[i]) != UCS_OK)
                sys[i] = UCS_SYS_DEVICE_ID_UNKNOWN;
        }
    } else if (locate) {
        ucs_debug("roce: device locality unknown: %s", err.c_str());
    }
    auto* devices = static_cast<uct_tl_device_resource_t*>(
            ucs_calloc(std::max<size_t>(names.size(), 1), sizeof(uct_tl_device_resource_t),
                       "roce devices"));
    if (devices == nullptr) {
        return UCS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < names.size(); ++i) {
        ucs_strncpy_zero(devices[i].name, names[i].c_str(), sizeof(devices[i].name));
        devices[i].type = UCT_DEVICE_TYPE_NET;
        devices[i].sys_device = sys[i];
    }
    *devices_p = devices;
    *num_p = static_cast<unsigned>(names.size());
    return UCS_OK;
}

} // namespace roce::uct
