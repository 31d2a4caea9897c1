// Reading one RoCE port's GID table from sysfs:
//   /sys/class/infiniband/<dev>/ports/<p>/gids/<i>             "fe80:0000:...:0001" (8 groups)
//   /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>  "RoCE v2" | "IB/RoCE v1"
//   /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/ndevs/<i>  netdev name (may be a VLAN or bond)
//   /sys/class/infiniband/<dev>/ports/<p>/link_layer           "Ethernet" | "InfiniBand"
//   /sys/class/infiniband/<dev>/tc/<p>/traffic_class           "Global tclass=106" (mlx5, optional)
// Unused entries read as all-zero GIDs and their attributes fail to read; both mean "unused".
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

// v1: Ethertype 0x8915, L2 only (no IP header, cannot be routed). v2: IP/UDP 4791.
enum class RoceVersion : uint8_t { v1 = 1, v2 = 2 };

constexpr std::string_view to_string(RoceVersion v) { return v == RoceVersion::v2 ? "RoCE v2" : "RoCE v1"; }

struct Gid {
    IpAddr raw;   // a RoCE GID is the IP address (IPv4-mapped for IPv4) or, for v1 defaults, an EUI-64 link-local

    static std::optional<Gid> parse(std::string_view sysfs_text);   // 8 colon groups, or any IPv6 text
    std::string sysfs_str() const;                                   // the 8-group sysfs spelling
    bool is_zero() const { return raw.is_zero(); }
    auto operator<=>(const Gid&) const = default;
};

struct GidEntry {
    unsigned index = 0;
    Gid gid;
    std::optional<RoceVersion> version;   // nullopt: unused, unreadable, or a type we do not know
    std::string type_text;                // as read, for the explanation ("" if unreadable)
    std::string ndev;                     // "" if unreadable

    bool used() const { return !gid.is_zero() && version.has_value(); }
    IpAddr ip() const { return gid.raw; }
};

struct PortInfo {
    std::string dev;                       // "mlx5_0", "rxe0", or the netdev name of a synthesised table
    unsigned port = 1;
    std::string link_layer = "Ethernet";
    std::vector<GidEntry> gids;            // gid_tbl_len entries, index == position
    std::optional<uint8_t> default_tclass; // tc/<port>/traffic_class, when the driver sets one
    bool synthesised = false;              // built from netdev addresses (userspace device)
};

// Devices under sys/class/infiniband, and the ports of one.
std::vector<std::string> list_rdma_devices(const SysRoot& root);
std::vector<unsigned> list_ports(const SysRoot& root, std::string_view dev);

// Reads the port. Status::no_device (with `err` naming the valid devices/ports) when it does
// not exist; a port that is not Ethernet reads fine (the caller decides; select rejects it).
Status read_port(const SysRoot& root, std::string_view dev, unsigned port, PortInfo& out, std::string& err);

// Entry `index` of the port's table as it is now (read_port reads them all).
GidEntry read_gid_entry(const SysRoot& root, std::string_view dev, unsigned port, unsigned index);

// "Global tclass=106" (mlx5 sysfs), optionally followed by rule lines, or a bare number.
std::optional<uint8_t> parse_tclass_text(std::string_view text);

} // namespace roce::gid
