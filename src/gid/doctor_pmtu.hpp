// Path-MTU discovery of `roce_doctor check`: UDP datagrams with DF set (doctor_net.hpp
// udp_socket) of chosen sizes go to the server's UDP port, which acknowledges each one it
// receives; the largest acknowledged size is the path MTU. Sizes are IP packet sizes (IP + UDP
// headers + payload), the unit of a netdev's MTU, so the two compare directly.
//
//   probe (client -> server)        ack (server -> client)
//   0      8      16     20         0      8      16     20
//   +------+------+------+------    +------+------+------+
//   |magic?|token | size | zeros    |magic!|token | rcvd |
//   +------+------+------+------    +------+------+------+
//   magic: "RDPMTU?\0" / "RDPMTU!\0"; token: random per probe (a late ack of an earlier probe
//   cannot confirm a later size); size / rcvd: big-endian UDP payload bytes sent / received.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "gid/doctor_net.hpp"
#include "gid/ip.hpp"
#include "gid/netdev.hpp"
#include "sw/device.hpp"

namespace roce::doctor {

// IP + UDP header bytes of a datagram of this family.
constexpr unsigned ip_udp_overhead(gid::Family f) { return (f == gid::Family::inet ? 20u : 40u) + 8u; }

// Bytes a RoCEv2 packet with a full RoCE-MTU payload adds to it (gid::roce_packet_bytes).
inline unsigned roce_overhead(gid::Family f) { return gid::roce_packet_bytes(0, f == gid::Family::inet6); }

// The largest RoCE MTU (256..4096) whose packets fit a path of `path_mtu` bytes; 0 if none.
inline unsigned roce_mtu_fitting(unsigned path_mtu, gid::Family f) {
    return gid::largest_roce_mtu(path_mtu, f == gid::Family::inet6);
}

struct PmtuResult {
    unsigned path_mtu = 0;   // largest IP packet acknowledged
    unsigned probes = 0;     // datagrams sent
    unsigned lost = 0;       // sizes that got no acknowledgement (too big, or lost 3 times)
};

// Probes `server` from a DF socket (bound to `src` if given, at a port of `ports`: behind a
// firewall the acknowledgements must come back to an open port) between the protocol minimum
// (576 IPv4 / 1280 IPv6) and max_ip_bytes (the local netdev's MTU: nothing larger can leave).
// Errors: timeout (not even the minimum was acknowledged: err says so), io_error.
Status probe_path_mtu(const SockAddr& server, const SockAddr* src, sw::PortRange ports, unsigned max_ip_bytes,
                      PmtuResult& out, std::string& err);

// Server side: if buf[0..len) is a probe, acknowledges it to `from` over fd and returns true.
bool answer_probe(int fd, const uint8_t* buf, size_t len, const SockAddr& from);

} // namespace roce::doctor
