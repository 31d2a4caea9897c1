#include "netdev.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>

#include "common/netns.hpp"
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

std::vector<std::string> usable_netdev_names(const std::string& netns, const char* tl) {
    std::vector<std::string> names;
    (void)in_md_netns(netns, tl, [&] {
        for (const Netdev& d : usable_netdevs(tl)) {
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

std::vector<Netdev> usable_netdevs(const char* tl) {
    std::vector<Netdev> all = list_netdevs();
    const std::optional<gid::GidConfig> cfg = gid_settings_from_env();
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



ucs_status_t check_am_alignment(const uct_iface_params_t* params, const char* tl) {
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
        d.loopback = IN6_IS_ADDR_LOOPBACK(reinterpret_cast<const in6_addr*>(d.ip));
    }
    dc.ip = ip.str();
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

ucs_status_t tl_device_resources(const std::vector<std::string>& names,
                                 uct_tl_device_resource_t** devices_p, unsigned* num_p) {
    auto* devices = static_cast<uct_tl_device_resource_t*>(
            ucs_calloc(std::max<size_t>(names.size(), 1), sizeof(uct_tl_device_resource_t),
                       "roce devices"));
    if (devices == nullptr) {
        return UCS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < names.size(); ++i) {
        ucs_strncpy_zero(devices[i].name, names[i].c_str(), sizeof(devices[i].name));
        devices[i].type = UCT_DEVICE_TYPE_NET;
        devices[i].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    *devices_p = devices;
    *num_p = static_cast<unsigned>(names.size());
    return UCS_OK;
}

} // namespace roce::uct
