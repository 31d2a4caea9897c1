// Local GID selection for the verbs backend, behind one function so the project's GID policy
// (src/gid/) can replace it: the first RoCE v2 GID holding an IPv4-mapped address
// (::ffff:a.b.c.d) in sysfs, or the GID at a given index. Its address is the IP the device's
// rdma_cm binds to, which is how rdma_cm ends up using exactly this GID for the connection's path
// (it resolves the source GID from the bound address).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "common/rc_device.hpp"

namespace roce::verbs {

struct GidChoice {
    int index = -1;
    uint8_t gid[16] = {};
    WireAddr addr;   // family + IP of the GID (port 0)
};

// sysfs_root: normally /sys/class/infiniband (tests point it at a fake tree).
// override_index >= 0: take that index (must be a RoCE v2 GID with an IPv4-mapped or global
// IPv6 address). Errors: no_device (device/port absent or no such GID; logged).
Status choose_gid(const std::string& dev, uint8_t port, int override_index, GidChoice& out,
                  const std::string& sysfs_root = "/sys/class/infiniband");

} // namespace roce::verbs
