// Live counter files (UCX_RC_ROCE_STATS_DIR, UCX_UD_ROCE_STATS_DIR): each interface of a running
// process keeps DIR/<transport>.<pid>.<device>.<port> up to date (about once a second and at
// close), replaced atomically (written to a temporary name, then renamed), so a reader never sees
// half a file. `roce_doctor counters DIR` reads them. Format, text:
//   # <transport> pid=<pid> device=<name> address=<addr> time=<unix seconds.ms>
//   <counter> <value>          one line per counter, in the device's order
//   # qp qpn=<hex> dest_qpn=<hex> peer=<ip:port> state=<rts|...|closed>   (rc_roce; closed:
//                              destroyed QPs to that peer, summed; qpn 0)
//   # peer qpn=<id> dest_qpn=<remote id> peer=<addr> state=<ok|failed>     (ud_roce)
//   <counter> <value>          that QP's / peer's counters (gauges end in _now), one section each
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"

namespace roce {

struct QpSnapshot {
    uint32_t qpn = 0, dest_qpn = 0;   // ud_roce: the peer's local id and its sender id
    std::string peer;                 // the peer device's address
    std::string state;
    std::vector<std::pair<std::string, uint64_t>> counters;
    std::string kind = "qp";          // section keyword: qp (rc_roce) or peer (ud_roce)
};

struct CounterSnapshot {
    long pid = 0;
    std::string device;       // device name (netdev, or RDMA device:port)
    std::string address;      // the interface's wire address
    double time = 0;          // when written (seconds since the epoch)
    std::vector<std::pair<std::string, uint64_t>> counters;
    std::vector<QpSnapshot> qps;
    std::string transport = "rc_roce";
};

// "<transport>.<pid>.<device>.<port>"
std::string counter_file_name(long pid, const std::string& device, uint16_t port,
                              const std::string& transport = "rc_roce");
// Whether a file name has that form (rc_roce or ud_roce).
bool is_counter_file_name(const std::string& name);

// Writes `snap` to dir/name atomically. Errors: io_error, reason in `err`.
Status write_counter_file(const std::string& dir, const std::string& name, const CounterSnapshot& snap,
                          std::string& err);
// Reads one file. Errors: io_error (unreadable), invalid_param (not a counter file).
Status read_counter_file(const std::string& path, CounterSnapshot& out, std::string& err);

} // namespace roce
