// A plain UDP socket on the loopback address standing in for a peer, reporting each datagram's
// traffic class as the kernel put it on the wire (IP_RECVTOS / IPV6_RECVTCLASS): the tests' one
// way to see which class our packets carry.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "common/rc_device.hpp"

namespace roce::tests {

class TosSocket {
public:
    struct Datagram {
        std::vector<uint8_t> bytes;
        int tos = -1;   // -1: the kernel attached no class
    };

    explicit TosSocket(int family = AF_INET) {
        fd_ = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        int one = 1;
        sockaddr_storage ss{};
        socklen_t sl;
        if (family == AF_INET6) {
            auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
            s6->sin6_family = AF_INET6;
            s6->sin6_addr = in6addr_loopback;
            sl = sizeof(*s6);
            ::setsockopt(fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
        } else {
            auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
            s4->sin_family = AF_INET;
            s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            sl = sizeof(*s4);
            ::setsockopt(fd_, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
        }
        bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&ss), sl) == 0 &&
                 ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &sl) == 0;
        addr_.family = uint8_t(family);
        if (family == AF_INET6) {
            const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss);
            std::memcpy(addr_.ip, &s6->sin6_addr, 16);
            addr_.port = ntohs(s6->sin6_port);
        } else {
            const auto* s4 = reinterpret_cast<const sockaddr_in*>(&ss);
            std::memcpy(addr_.ip, &s4->sin_addr, 4);
            addr_.port = ntohs(s4->sin_port);
        }
    }
    ~TosSocket() {
        if (fd_ >= 0) ::close(fd_);
    }
    TosSocket(const TosSocket&) = delete;
    TosSocket& operator=(const TosSocket&) = delete;

    // False when the socket could not be opened or bound: tests assert it before use.
    bool ok() const { return fd_ >= 0 && bound_; }
    int fd() const { return fd_; }
    const WireAddr& addr() const { return addr_; }

    // The next datagram within `timeout_ms` (0: only one already queued); none if none came.
    std::optional<Datagram> receive(int timeout_ms) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, timeout_ms) != 1) return std::nullopt;
        Datagram d;
        d.bytes.resize(65536);
        alignas(cmsghdr) uint8_t ctl[128];
        iovec iov{d.bytes.data(), d.bytes.size()};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl;
        mh.msg_controllen = sizeof(ctl);
        const ssize_t n = ::recvmsg(fd_, &mh, MSG_DONTWAIT);
        if (n < 0) return std::nullopt;
        d.bytes.resize(size_t(n));
        for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            // IPv4 delivers the ToS as one byte, IPv6 the traffic class as an int.
            if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS) d.tos = *CMSG_DATA(cm);
            if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_TCLASS) {
                int tc;
                std::memcpy(&tc, CMSG_DATA(cm), sizeof(tc));
                d.tos = tc;
            }
        }
        return d;
    }

private:
    int fd_ = -1;
    bool bound_ = false;
    WireAddr addr_{};
};

}  // namespace roce::tests
