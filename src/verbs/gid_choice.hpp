// Local GID selection of the verbs backend: the project's GID policy (src/gid/select.hpp) over the
// port's sysfs GID table and the host's netdevs, addresses and routes. The chosen entry's address
// is the IP the device's rdma_cm binds: rdma_cm derives the source GID of a connection from the
// bound address, and the device also sets the entry's index as the QP's sgid_index (so when two
// netdevs hold the same address - a vxlan and a bond - the policy's entry wins, not the first one
// the kernel finds).
//
// The context (table + net model + settings) is read once per device; choices per peer reuse it.
#pragma once

#include <cstdint>
#include <string>

#include "common/rc_device.hpp"
#include "common/status.hpp"
#include "gid/config.hpp"
#include "gid/gid_table.hpp"
#include "gid/netdev.hpp"
#include "gid/select.hpp"

struct ibv_pd;

namespace roce::verbs {

struct GidChoice {
    int index = -1;
    uint8_t gid[16] = {};
    WireAddr addr;          // family + IP of the GID (port 0)
    std::string ndev;       // the entry's netdev (also the scope of a link-local address)
    std::string reason;     // the policy's one-line reason
};

struct GidContext {
    gid::PortInfo port;
    gid::NetModel net;
    gid::GidConfig cfg;
};

// Reads the port's GID table (and tc/<port>/traffic_class) and the net model under `root` ("/":
// the live system; tests: a fixture tree), then checks cfg against the table. Errors: no_device
// (no such device/port), invalid_param (a setting impossible for this port); `err` is one line.
Status load_gid_context(const std::string& dev, uint8_t port, const gid::GidConfig& cfg, GidContext& out,
                        std::string& err, const std::string& root = "/");

// The entry to use: the interface default (peer null) or the entry that reaches `peer` (a RoCE
// v2 peer address). `validate` (may be empty) is tried on candidates in order of preference.
// Errors: the selection's status with its one-line error in `err`.
Status choose_gid(const GidContext& ctx, const WireAddr* peer, const gid::Validator& validate, GidChoice& out,
                  std::string& err);

// UCX's test of a RoCE GID entry: an address handle from the entry to its own address (a
// gid::Validator for choose_gid). It fails on entries the kernel cannot send from (a misconfigured
// second NIC, a vanished netdev) and on indexes beyond an address handle's 8-bit sgid_index; `why`
// says which.
bool gid_entry_sends(ibv_pd* pd, uint8_t port, const gid::GidEntry& e, std::string& why);

// Convenience for tools (the interop program): the live system (or `root`), default
// settings, override_index >= 0 fixes GID_INDEX. Logs the one-line error; no_device /
// invalid_param / unreachable on failure.
Status choose_gid(const std::string& dev, uint8_t port, int override_index, GidChoice& out,
                  const std::string& root = "/");

} // namespace roce::verbs
