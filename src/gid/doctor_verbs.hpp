// The verbs backend as `roce_doctor serve` / `check` use it: which RoCE port to check (--dev, or
// the first active one) and its device. Built as a stub that finds no device when roce_verbs is
// not (no libibverbs-dev), so the tool itself never depends on RDMA being present.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/rc_device.hpp"
#include "common/status.hpp"

namespace roce::doctor {

struct VerbsPort {
    std::string dev;
    uint8_t port = 1;
    uint32_t active_mtu = 0;   // bytes (ibv_port_attr.active_mtu)
    std::string name() const { return dev + ":" + std::to_string(port); }
};

// spec: "rxe0", "rxe0:1" or "" (the first active RoCE port). False (why: "no RDMA device", or
// what is wrong with spec) when there is none to use.
bool pick_verbs_port(const std::string& spec, VerbsPort& out, std::string& why);

// An rc device on the port whose path MTU is capped at mtu_cap.
Status open_verbs_device(const VerbsPort& p, uint32_t mtu_cap, std::unique_ptr<RcDevice>& out, std::string& err);

} // namespace roce::doctor
