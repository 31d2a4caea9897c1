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
    uint8_t traffic_class = 0;      // IP TOS / IPv6 traffic class of every packet
    uint8_t priority = 0;           // SO_PRIORITY of every packet (the PCP behind a VLAN's egress-qos-map)
    FaultConfig faults;             // transmit-side fault injection (tests)
};

// Errors: no_device (address not local / unparsable), busy (every port of cfg.ports bound), io_error,
// invalid_param (bad mtu).
Status open_ud_qp(const UdQpConfig& cfg, std::unique_ptr<ud::DatagramQp>& out);

} // namespace roce::sw
