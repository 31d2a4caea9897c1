// Send-only sockets per traffic class beside a device's main socket. A UDP socket cannot tag its
// packets' priority one by one (udp_socket.hpp): a connection (rc) or a peer (ud) whose negotiated
// class (ToS, priority) differs from the main socket's sends from a sibling bound to the same
// address and port with that class, so peers still see one address. Siblings are opened on
// demand and kept; their number is bounded, since peers' adverts choose the classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "sw/udp_socket.hpp"

namespace roce::sw {

class ClassSockets {
public:
    static constexpr size_t max = 16;

    explicit ClassSockets(UdpSocket& main) : main_(main) {}
    // The id of the socket sending in (tos, priority), opened if needed: 0 is the main socket,
    // also when that class cannot have its own (the kernel refuses a sibling, or `max` are open;
    // a warning says so, once). What the caller then sends is its business: rc_roce keeps the
    // class's ToS per packet at the main socket's priority, ud_roce sends in the main class.
    uint8_t get(uint8_t tos, uint8_t priority);
    // The socket of an id get() gave; any other id is the main socket's.
    UdpSocket& at(uint8_t id) { return id == 0 || id > socks_.size() ? main_ : *socks_[id - 1u]; }
    std::vector<int> fds() const;   // main's first (tests)

private:
    UdpSocket& main_;
    std::vector<std::unique_ptr<UdpSocket>> socks_;
    bool refused_ = false;
};

} // namespace roce::sw
