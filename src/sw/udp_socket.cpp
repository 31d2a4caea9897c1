// UDP socket setup. DF is set (IP_PMTUDISC_DO), so Linux writes IPv4 ID 0 on this unconnected
// socket and the sender computes its ICRC with ID 0; receivers never see the ID and verify
// ID-agnostically.
#include "sw/udp_socket.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <unistd.h>

#include "common/log.hpp"

std::string roce::WireAddr::to_string() const {
    char buf[INET6_ADDRSTRLEN] = "?";
    if (family == AF_INET)
        inet_ntop(AF_INET, ip, buf, sizeof(buf));
    else if (family == AF_INET6)
        inet_ntop(AF_INET6, ip, buf, sizeof(buf));
    std::string s = family == AF_INET6 ? "[" + std::string(buf) + "]" : std::string(buf);
    return s + ":" + std::to_string(port);
}

namespace roce::sw {

socklen_t to_sockaddr(const WireAddr& a, sockaddr_storage& ss) {
    std::memset(&ss, 0, sizeof(ss));
    if (a.family == AF_INET6) {
        auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(a.port);
        std::memcpy(&s6->sin6_addr, a.ip, 16);
        return sizeof(sockaddr_in6);
    }
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(a.port);
    std::memcpy(&s4->sin_addr, a.ip, 4);
    return sizeof(sockaddr_in);
}

bool from_sockaddr(const sockaddr* sa, socklen_t len, WireAddr& out) {
    out = WireAddr{};
    if (sa->sa_family == AF_INET && len >= socklen_t(sizeof(sockaddr_in))) {
        auto* s4 = reinterpret_cast<const sockaddr_in*>(sa);
        out.family = AF_INET;
        std::memcpy(out.ip, &s4->sin_addr, 4);
        out.port = ntohs(s4->sin_port);
        return true;
    }
    if (sa->sa_family == AF_INET6 && len >= socklen_t(sizeof(sockaddr_in6))) {
        auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
        out.family = AF_INET6;
        std::memcpy(out.ip, &s6->sin6_addr, 16);
        out.port = ntohs(s6->sin6_port);
        return true;
    }
    return false;
}

void fill_ip_context(const WireAddr& src, const WireAddr& dst, wire::IpContext& ip) {
    ip = wire::IpContext{};
    ip.ipv6 = src.family == AF_INET6;
    std::memcpy(ip.src_ip, src.ip, 16);
    std::memcpy(ip.dst_ip, dst.ip, 16);
    ip.src_port = src.port;
    ip.dst_port = dst.port;
    ip.ipv4_id = 0;
    ip.ipv4_flags_df = 1;
}

UdpSocket::~UdpSocket() {
    if (fd_ >= 0)
        ::close(fd_);
}

Status UdpSocket::open(const std::string& ip, uint16_t port, uint8_t traffic_class, bool want_gro) {
    WireAddr a{};
    if (inet_pton(AF_INET, ip.c_str(), a.ip) == 1)
        a.family = AF_INET;
    else if (inet_pton(AF_INET6, ip.c_str(), a.ip) == 1)
        a.family = AF_INET6;
    else
        return Status::no_device;
    a.port = port;
    const int fam = a.family;
    fd_ = ::socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        ROCE_ERROR("socket(): %s", strerror(errno));
        return Status::io_error;
    }
    const int bufsz = 4 << 20;
    if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof(bufsz)) != 0)
        setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
    if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof(bufsz)) != 0)
        setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof(bufsz));
    socklen_t sl = sizeof(rcvbuf_);
    getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf_, &sl);
    int tc = traffic_class;
    if (fam == AF_INET) {
        int pmtu = IP_PMTUDISC_DO;
        setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
        setsockopt(fd_, IPPROTO_IP, IP_TOS, &tc, sizeof(tc));
        int one = 1;   // each datagram's ToS as ancillary data: congestion control reads CE
        setsockopt(fd_, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
    } else {
        int pmtu = IPV6_PMTUDISC_DO;
        setsockopt(fd_, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu));
        setsockopt(fd_, IPPROTO_IPV6, IPV6_TCLASS, &tc, sizeof(tc));
        int one = 1;
        setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        setsockopt(fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
    }
    sockaddr_storage ss;
    socklen_t len = to_sockaddr(a, ss);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        const int e = errno;
        ::close(fd_);
        fd_ = -1;
        if (e == EADDRNOTAVAIL || e == EINVAL || e == EAFNOSUPPORT)
            return Status::no_device;
        ROCE_ERROR("bind(%s): %s", a.to_string().c_str(), strerror(e));
        return Status::io_error;
    }
    {   // offloads: UDP_SEGMENT 0 = "no default segmentation", accepted only where GSO exists
        int zero = 0;
        gso_ = setsockopt(fd_, IPPROTO_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0;
        int one = 1;
        gro_ = want_gro && setsockopt(fd_, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0;
    }
    len = sizeof(ss);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len, local_);
    return Status::ok;
}

int UdpSocket::send_batch(mmsghdr* msgs, unsigned n) {
    unsigned done = 0;
    while (done < n) {
        const int r = ::sendmmsg(fd_, msgs + done, n - done, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            // EAGAIN (buffer full), ECONNREFUSED leftovers, EMSGSIZE...: the datagram is lost;
            // retransmission recovers. Skip it so one bad destination does not block the rest.
            if (errno == EMSGSIZE && !warned_msgsize_) {
                warned_msgsize_ = true;
                ROCE_ERROR("datagram of %zu bytes exceeds the path MTU: lower the device mtu",
                           msgs[done].msg_hdr.msg_iovlen == 1 ? msgs[done].msg_hdr.msg_iov[0].iov_len : size_t(0));
            }
            ++done;
            continue;
        }
        done += unsigned(r);
    }
    return int(done);
}

int UdpSocket::recv_batch(mmsghdr* msgs, unsigned n) {
    for (;;) {
        const int r = ::recvmmsg(fd_, msgs, n, MSG_DONTWAIT, nullptr);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        // EAGAIN: nothing queued. ECONNREFUSED: an ICMP error from an earlier send; ignore.
        if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH)
            continue;
        return 0;
    }
}

} // namespace roce::sw
