// Network devices and the addresses built from them, shared by rc_roce and ud_roce on the
// userspace device: which netdevs are transport devices, the device address UCP exchanges
// (layout in glue.hpp), whether a peer's device address is reachable, and the GID policy's
// choice of a netdev's address.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "glue.hpp"

namespace roce::uct {

struct Netdev {
    std::string name;
    int family = 0;
    uint8_t ip[16] = {};
    bool loopback = false;
    unsigned mtu = 0;        // the netdev's MTU (set by apply_gid_policy; 0: unknown)
};

struct DevAddrView {
    uint8_t flags = 0;
    int family = 0;
    uint8_t ip[16] = {};
    uct_iface_local_addr_ns_t host{};
};

// Every up netdev with a usable address: its first IPv4 address, else its first IPv6 address
// that is not link-local (those need a scope id, which a device address does not carry).
std::vector<Netdev> list_netdevs();
// Netdevs listed as transport devices: those with an address the transport's GID settings
// (gid_settings_for_listing; nullopt: unparsable) accept (all of them when that would leave
// none: opening one then explains why).
std::vector<Netdev> usable_netdevs(const char* tl, const std::optional<gid::GidConfig>& cfg);
// The names of usable_netdevs() as seen in network namespace `netns` (empty: ours).
std::vector<std::string> usable_netdev_names(const std::string& netns, const char* tl,
                                             const std::optional<gid::GidConfig>& cfg);
// Runs fn (which opens sockets, lists netdevs) inside network namespace `netns`; logs and
// returns UCS_ERR_NO_DEVICE when the namespace cannot be entered.
ucs_status_t in_md_netns(const std::string& netns, const char* tl, const std::function<ucs_status_t()>& fn);
std::string ip_string(int family, const uint8_t* ip);
// The link speed the kernel reports for a netdev (/sys/class/net/<name>/speed, Mbit/s), in
// bit/s; `fallback` when it reports none (loopback, a link that is down).
double netdev_speed_bps(const std::string& name, double fallback);
// The transport devices of an MD for transport `tl` (its RDMA ports, or the usable netdevs of
// the userspace device), ucs_calloc'ed as UCT wants them, closest to the calling thread's CPUs
// first (hwloc), each with its PCI function as UCX's sys_device when it has one (UCP weighs
// distances by it). Netdevs of another namespace (UCX_ROCE_NETNS) are not located: this
// process's sysfs says nothing about them.
ucs_status_t md_tl_devices(const Md& md, const char* tl, uct_tl_device_resource_t** devices_p, unsigned* num_p);

size_t pack_dev_addr(const Netdev& d, bool verbs, uint8_t* out);
DevAddrView unpack_dev_addr(const uct_device_addr_t* addr);
// Whether the device address `remote` can be reached from an iface whose own is `mine`.
int dev_addr_is_reachable(const uint8_t* mine, const uct_device_addr_t* remote);

// The GID policy's address of netdev `d` (replaces d's) and the traffic class, into dc.
ucs_status_t apply_gid_policy(const gid::GidConfig& g, Netdev& d, sw::DeviceConfig& dc, const char* tl);
// The RoCE path MTU for netdev `d` (after apply_gid_policy): `configured` (UCX_*_MTU) or, for
// auto, the largest that fits d's MTU. Logs and returns 0 when the setting is not an IB MTU or
// its packets do not fit.
uint32_t resolve_mtu(size_t configured, const Netdev& d, const char* tl);
// UCX_<TL>_PORT_RANGE as the userspace device's ports. Logs and returns false when it is not a
// UDP port or a range a-b of them (a <= b).
bool resolve_ports(const ucs_range_spec_t& r, const char* tl, sw::PortRange& out);
// Logs why the userspace device (or UD QP) at ip and `ports` of dev did not open; returns s.
ucs_status_t device_open_failed(const char* tl, const char* dev, const std::string& ip, sw::PortRange ports,
                                Status s);
// iface_open: device open mode only, and UCP's AM alignment request well formed.
ucs_status_t check_open_params(const uct_iface_params_t* params, const char* tl);
LogLevel core_log_level(unsigned ucs_level);

} // namespace roce::uct
