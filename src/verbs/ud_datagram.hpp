// ud_roce's datagram QP on an RDMA device: a verbs UD QP (verbs/ud.hpp) behind ud::DatagramQp.
// Addresses: the GID as an IP (IPv4-mapped GIDs as AF_INET) with the nominal RoCEv2 port 4791,
// so they compare equal to what UCX device addresses carry.
#pragma once

#include <memory>

#include "ud/datagram.hpp"
#include "verbs/ud.hpp"

namespace roce::verbs {

inline constexpr uint16_t rocev2_port = 4791;

// Errors as UdQp::open.
Status open_ud_datagram(const UdConfig& cfg, std::shared_ptr<Pd> pd,
                        std::unique_ptr<ud::DatagramQp>& out);

} // namespace roce::verbs
