// RAII UDP socket of one device: bound to the device address, unconnected, non-blocking,
// batched send (sendmmsg; sendmsg for one) and receive (recvmmsg; recvmsg while datagrams come
// one at a time).
//
// The class of what a socket sends is the socket's: IP_TOS / IPV6_TCLASS and SO_PRIORITY (the
// skb priority, which a VLAN netdev's egress-qos-map, or a NIC's priority-to-TC map, turns into
// the 802.1p PCP that PFC acts on). A per-packet ToS (cmsg) cannot carry the priority: on IPv4 it
// replaces the priority by rt_tos2priority(ToS), and a per-packet SO_PRIORITY cmsg only exists
// since Linux 6.14. So a device sends each other class from a sibling socket bound to the same
// address and port (SO_REUSEPORT), and a reuseport program steers every received datagram to
// the first socket: peers see one address, the siblings only send.
#pragma once

#include <netinet/in.h>
#include <string>
#include <sys/socket.h>

#include "common/status.hpp"
#include "sw/device.hpp"
#include "wire/packet.hpp"

namespace roce::sw {

// sockaddr <-> WireAddr conversions. to_sockaddr returns the sockaddr length.
socklen_t to_sockaddr(const WireAddr& a, sockaddr_storage& ss);
bool from_sockaddr(const sockaddr* sa, socklen_t len, WireAddr& out);
// Fills the address part of an ICRC context for a packet from `src` to `dst`.
void fill_ip_context(const WireAddr& src, const WireAddr& dst, wire::IpContext& ip);

// Binds fd to `addr` (sockaddr_in or sockaddr_in6; its port is replaced) at a port of `ports`:
// a range is tried from a random port on, each port once (ranks that start together would
// otherwise all race for its first ports), skipping taken (EADDRINUSE) and privileged (EACCES)
// ones. Returns 0 (addr holds the port bound) or the errno of the last attempt; in_use tells
// whether a port was taken by someone else.
int bind_in_range(int fd, sockaddr_storage& addr, socklen_t len, PortRange ports, bool& in_use);

class UdpSocket {
public:
    UdpSocket() = default;
    ~UdpSocket();
    UdpSocket(const UdpSocket&) = delete;
    UdpSocket& operator=(const UdpSocket&) = delete;

    // Binds to ip and a port of `ports`. no_device when the address is unparsable or not local;
    // busy when the port (every port of the range) is bound by someone else.
    Status open(const std::string& ip, PortRange ports, uint8_t traffic_class, uint8_t priority,
                bool want_gro = false);
    // A send-only socket on main's address and port with its own class (see above). unsupported
    // when the kernel refuses to share the port or to steer (the caller then sends from main).
    Status open_sibling(UdpSocket& main, uint8_t traffic_class, uint8_t priority);
    int fd() const { return fd_; }
    const WireAddr& local() const { return local_; }
    int rcvbuf_bytes() const { return rcvbuf_; }
    bool gso_supported() const { return gso_; }
    bool gro_enabled() const { return gro_; }
    uint8_t traffic_class() const { return tc_; }
    uint8_t class_priority() const { return prio_; }   // as asked for (priority(): as the kernel holds it)
    // SO_PRIORITY as the kernel holds it (getsockopt; -1 on error).
    int priority() const;

    // One sendmmsg, with its return convention (number sent; -1 and errno), but by sendmsg
    // when n is 1: cheaper for a lone message (a ping-pong's reply; see recv_batch).
    int send_mmsg(mmsghdr* msgs, unsigned n);
    // Returns n: a datagram the kernel refuses (EAGAIN, EMSGSIZE...) is skipped, as lost.
    int send_batch(mmsghdr* msgs, unsigned n);
    // Non-blocking; returns the number received (0 when nothing is queued). May return one
    // while more are queued (see the .cpp): a caller that must empty the socket reads until a
    // call returns 0. Keeps state between calls: one thread at a time (the device's lock).
    int recv_batch(mmsghdr* msgs, unsigned n);
    // The last recv_batch left the socket empty (found nothing, or fewer than asked in one
    // recvmmsg): what the next finds arrived after it.
    bool emptied() const { return emptied_; }

private:
    int fd_ = -1;
    WireAddr local_{};
    int rcvbuf_ = 0;
    bool gso_ = false;
    bool gro_ = false;
    bool warned_msgsize_ = false;
    bool single_ = false;       // recv_batch reads with recvmsg (see the .cpp)
    bool found_last_ = false;   // the last recvmsg found a datagram
    bool emptied_ = false;
    bool shares_port_ = false;   // SO_REUSEPORT set (main socket: once a sibling exists)
    uint8_t tc_ = 0;
    uint8_t prio_ = 0;
};

} // namespace roce::sw
