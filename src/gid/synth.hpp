// The userspace RoCEv2 device has no sysfs GID table. To apply the same policy, synthesise the
// table the kernel would build for the netdev it runs on: one entry per address of the netdev and
// of its VLAN devices, kernel order (link-local default GID first, then the addresses), and only
// RoCE v2 entries - the userspace device sends UDP/4791 and cannot emit Ethertype 0x8915 (v1).
#pragma once
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "gid/config.hpp"
#include "gid/gid_table.hpp"
#include "gid/netdev.hpp"
#include "gid/select.hpp"

namespace roce::gid {

// dev of the result is the netdev name, port 1, synthesised = true. Unusable (tentative,
// dadfailed) addresses are left out: the kernel would not install them either.
PortInfo synthesize_port(const NetModel& net, std::string_view netdev);

// The address the userspace device binds on `netdev`: the entry the policy chooses as the
// interface default of the synthesised table (GID_INDEX indexes that table; SUBNETS,
// ADDR_FAMILY, GID_NETDEV filter it). A link-local choice is refused: the device address carries
// no scope. `err` is one line (a configuration error, or why no entry qualifies); `sel` (optional)
// receives the whole selection for explanations.
Status choose_netdev_address(const NetModel& net, std::string_view netdev, const GidConfig& cfg, IpAddr& out,
                             std::string& err, Selection* sel = nullptr);

} // namespace roce::gid
