// Send-only sockets per traffic class beside a device's main socket. A UDP socket cannot tag its
// packets' priority one by one (udp_socket.hpp): a connection (rc) or a peer (ud) whose negotiated
// class (ToS, priority) differs from the main socket's sends from a sibling bound to the same
// address and port with that class, so peers still see one address. Siblings are opened on
// demand; their number is bounded, since peers' adverts choose the classes. A sibling counts its
// users (rc_roce: the QPs sending from it); one nobody uses any more is kept open, and reopened
// in another class when all `max` are taken: connections from peers that advertised 16 classes
// and went away (forged REQs, reaped) no longer keep later classes off their sockets.
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
    // Each get() is one use of the id, until release(id) (ud_roce never releases: its peers stay).
    uint8_t get(uint8_t tos, uint8_t priority);
    void release(uint8_t id);
    // The socket of an id get() gave; any other id is the main socket's.
    UdpSocket& at(uint8_t id) { return id == 0 || id > socks_.size() ? main_ : *socks_[id - 1u]; }
    std::vector<int> fds() const;   // main's first (tests)

private:
    UdpSocket& main_;
    std::vector<std::unique_ptr<UdpSocket>> socks_;
    std::vector<size_t> users_;   // per sibling
    bool refused_ = false;        // the kernel refused a sibling: no more tries
    bool warned_full_ = false;
};

} // namespace roce::sw
