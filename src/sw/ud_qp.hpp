// The userspace device's UD queue pair: RoCEv2 UD SEND_ONLY packets (BTH + DETH + payload +
// ICRC, opcode 0x64) over its own UDP socket, as ud_roce's datagram QP (ud/datagram.hpp).
// Packets whose ICRC, opcode, destination QPN or Q_Key do not match are counted and dropped.
#pragma once

#include <memory>

#include "sw/device.hpp"
#include "ud/datagram.hpp"

namespace roce::sw {

struct UdQpConfig {
    std::string ip = "127.0.0.1";   // local address, IPv4 or IPv6 literal
    PortRange ports;                // 0: ephemeral (sw/device.hpp)
    uint32_t mtu = 4096;            // payload bytes per packet (IB MTU)
    uint32_t qkey = 0x1ee7a330;
    // The QP's own class: IP TOS / IPv6 traffic class and SO_PRIORITY (the PCP behind a VLAN's
    // egress-qos-map), each with its gid::TcSource (0 builtin, 1 device default, 2 configured).
    // Peers that advertise theirs get the negotiated class (DatagramQp::class_for), from a class
    // socket when it differs (class_sockets.hpp).
    uint8_t traffic_class = 0;
    uint8_t traffic_class_source = 0;
    uint8_t priority = 0;
    uint8_t priority_source = 0;
    FaultConfig faults;             // transmit-side fault injection (tests)
};

// Errors: no_device (address not local / unparsable), busy (every port of cfg.ports bound), io_error,
// invalid_param (bad mtu).
Status open_ud_qp(const UdQpConfig& cfg, std::unique_ptr<ud::DatagramQp>& out);

} // namespace roce::sw
