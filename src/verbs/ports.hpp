// The RoCE ports of the host's RDMA devices, for the transports' device lists (e.g. `rxe0:1` in
// `ucx_info -d`): every port whose link layer is Ethernet and whose state is ACTIVE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace roce::verbs {

struct RocePort {
    std::string dev_name;   // ibv_get_device_name
    uint8_t port = 1;
    std::string name() const { return dev_name + ":" + std::to_string(port); }
};

// Empty (without touching libibverbs) when the kernel has no RDMA support; never fails.
std::vector<RocePort> list_roce_ports();

// The RDMA device names that have at least one RoCE port (one memory domain each).
std::vector<std::string> list_roce_devices();

// Splits "rxe0:1" into device and port. False when the name is not of that form.
bool parse_port_name(const std::string& name, RocePort& out);

} // namespace roce::verbs
