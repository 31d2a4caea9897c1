// RAII UDP socket of one device: bound to the device address, unconnected, non-blocking,
// batched send (sendmmsg) and receive (recvmmsg).
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

class UdpSocket {
public:
    UdpSocket() = default;
    ~UdpSocket();
    UdpSocket(const UdpSocket&) = delete;
    UdpSocket& operator=(const UdpSocket&) = delete;

    // Binds to ip:port. no_device when the address is unparsable or not local.
    Status open(const std::string& ip, uint16_t port, uint8_t traffic_class, bool want_gro = false);
    int fd() const { return fd_; }
    const WireAddr& local() const { return local_; }
    int rcvbuf_bytes() const { return rcvbuf_; }
    bool gso_supported() const { return gso_; }
    bool gro_enabled() const { return gro_; }

    // Returns datagrams sent (>= 0); stops at the first error (EAGAIN etc.).
    int send_batch(mmsghdr* msgs, unsigned n);
    // Non-blocking; returns the number received (0 when nothing is queued).
    int recv_batch(mmsghdr* msgs, unsigned n);

private:
    int fd_ = -1;
    WireAddr local_{};
    int rcvbuf_ = 0;
    bool gso_ = false;
    bool gro_ = false;
    bool warned_msgsize_ = false;
};

} // namespace roce::sw
