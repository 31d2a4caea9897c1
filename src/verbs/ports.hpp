// The RoCE ports of the host's RDMA devices, for the transports' device lists (e.g. `rxe0:1` in
// `ucx_info -d`): every port whose link layer is Ethernet and whose state is ACTIVE.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace roce::verbs {

struct RocePort {
    std::string dev_name;   // ibv_get_device_name
    uint8_t port = 1;
    std::string name() const { return dev_name + ":" + std::to_string(port); }
};

// Every port of every RDMA device as ibv_query_port sees it (for roce_doctor).
struct PortStatus {
    RocePort port;
    bool ethernet = false, active = false;
    std::string state;             // ibv_port_state_str: PORT_ACTIVE, PORT_DOWN, ...
    unsigned active_mtu = 0, max_mtu = 0;   // bytes
    unsigned gid_tbl_len = 0;
};
// Empty (without touching libibverbs) when the kernel has no RDMA support; never fails.
std::vector<PortStatus> query_ports();
// The RoCE ports among them: Ethernet link layer, state ACTIVE.
std::vector<RocePort> list_roce_ports();

// The RDMA device names that have at least one RoCE port (one memory domain each).
std::vector<std::string> list_roce_devices();

// The port's counters kept by the device itself, from sysfs: hw_counters/<name> (rxe: sent_pkts,
// rcvd_seq_err, retry_exceeded_err, ...; NICs: out_of_sequence, np_cnp_sent, rp_cnp_handled, ...)
// as <name>, and counters/<name> (IB PMA: port_xmit_data, ...) as port_<name>. Unreadable files are
// left out; empty without sysfs. Sorted by name.
std::vector<std::pair<std::string, uint64_t>> read_port_hw_counters(const std::string& dev, unsigned port);

// Splits "rxe0:1" into device and port. False when the name is not of that form.
bool parse_port_name(const std::string& name, RocePort& out);

} // namespace roce::verbs
