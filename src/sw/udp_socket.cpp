// UDP socket setup. DF is set (IP_PMTUDISC_DO), so Linux writes IPv4 ID 0 on this unconnected
// socket and the sender computes its ICRC with ID 0; receivers never see the ID and verify
// ID-agnostically.
#include "sw/udp_socket.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.hpp"
#include "common/netns.hpp"

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

namespace {

// IPv4/IPv6 socket options common to a device's sockets: DF (the device sizes packets to the
// path MTU itself), the ToS, then the priority. The order matters: on IPv4, IP_TOS also sets
// sk_priority to rt_tos2priority(ToS) (2 for the default ToS 106), so SO_PRIORITY must follow.
void set_class(int fd, int family, uint8_t traffic_class, uint8_t priority) {
    int tc = traffic_class;
    if (family == AF_INET) {
        int pmtu = IP_PMTUDISC_DO;
        setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
        setsockopt(fd, IPPROTO_IP, IP_TOS, &tc, sizeof(tc));
    } else {
        int pmtu = IPV6_PMTUDISC_DO;
        setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu));
        setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tc, sizeof(tc));
        int one = 1;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    const int prio = priority;
    if (setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio)) != 0) {
        // 7 needs CAP_NET_ADMIN (0..6 do not): the packets keep the kernel's priority.
        int got = -1;
        socklen_t l = sizeof(got);
        getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &got, &l);
        ROCE_ERROR("priority %d: setsockopt(SO_PRIORITY): %s%s; packets leave at priority %d", prio,
                   strerror(errno), errno == EPERM ? " (priority 7 needs CAP_NET_ADMIN)" : "", got);
    }
}

void set_buffers(int fd, int rcv, int snd) {
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
}

} // namespace

int bind_in_range(int fd, sockaddr_storage& addr, socklen_t len, PortRange ports, bool& in_use) {
    const unsigned n = ports.is_range() ? unsigned(ports.last - ports.first) + 1 : 1;
    unsigned start = 0;
    if (n > 1 && getrandom(&start, sizeof(start), GRND_NONBLOCK) != ssize_t(sizeof(start)))
        start = unsigned(getpid());
    start %= n;
    in_use = false;
    int e = 0;
    for (unsigned i = 0; i < n; ++i) {
        const uint16_t port = htons(uint16_t(ports.first + (start + i) % n));
        if (addr.ss_family == AF_INET6)
            reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = port;
        else
            reinterpret_cast<sockaddr_in*>(&addr)->sin_port = port;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0)
            return 0;
        e = errno;
        if (e == EADDRINUSE)
            in_use = true;
        else if (e != EACCES)
            break;
    }
    return e;
}

Status UdpSocket::open(const std::string& ip, PortRange ports, uint8_t traffic_class, uint8_t priority,
                       bool want_gro) {
    WireAddr a{};
    if (inet_pton(AF_INET, ip.c_str(), a.ip) == 1)
        a.family = AF_INET;
    else if (inet_pton(AF_INET6, ip.c_str(), a.ip) == 1)
        a.family = AF_INET6;
    else
        return Status::no_device;
    const int fam = a.family;
    fd_ = ::socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        ROCE_ERROR("socket(): %s", strerror(errno));
        return Status::io_error;
    }
    set_buffers(fd_, 4 << 20, 4 << 20);
    socklen_t sl = sizeof(rcvbuf_);
    getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf_, &sl);
    set_class(fd_, fam, traffic_class, priority);
    tc_ = traffic_class;
    prio_ = priority;
    int one = 1;   // each datagram's ToS as ancillary data: congestion control reads CE
    if (fam == AF_INET)
        setsockopt(fd_, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
    else
        setsockopt(fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
    sockaddr_storage ss;
    socklen_t len = to_sockaddr(a, ss);
    bool in_use = false;
    const int e = bind_in_range(fd_, ss, len, ports, in_use);
    if (e != 0) {
        ::close(fd_);
        fd_ = -1;
        if (e == EADDRNOTAVAIL || e == EINVAL || e == EAFNOSUPPORT)
            return Status::no_device;
        if (in_use && (e == EADDRINUSE || e == EACCES))
            return Status::busy;   // the caller names the setting
        WireAddr tried;
        from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len, tried);
        ROCE_ERROR("bind(%s%s): %s", tried.to_string().c_str(),
                   ports.is_range() ? ", the last port of the range tried" : "", strerror(e));
        return Status::io_error;
    }
    {   // offloads: UDP_SEGMENT 0 = "no default segmentation", accepted only where GSO exists
        int zero = 0;
        gso_ = setsockopt(fd_, IPPROTO_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0;
        gro_ = want_gro && setsockopt(fd_, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0;
    }
    len = sizeof(ss);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len, local_);
    return Status::ok;
}

// The main socket is bound without SO_REUSEPORT and gets it only here, after its bind: binding
// port 0 (or a configured port) with SO_REUSEPORT could join another process's group of the same
// user instead of failing or picking a free port. Siblings bind the main socket's port with
// SO_REUSEPORT; the group then holds main first, and the classic BPF program "return 0" selects
// socket 0 for every datagram (attached once the group exists, i.e. after the sibling's bind:
// a datagram arriving in between may be hashed to the sibling and is lost, and retransmitted).
Status UdpSocket::open_sibling(UdpSocket& main, uint8_t traffic_class, uint8_t priority) {
    const int fam = main.local_.family;
    int one = 1;
    if (!main.shares_port_) {
        if (setsockopt(main.fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
            ROCE_ERROR("setsockopt(SO_REUSEPORT) on %s: %s", main.local_.to_string().c_str(), strerror(errno));
            return Status::unsupported;
        }
        main.shares_port_ = true;
    }
    // In main's network namespace: this may run on a thread outside it (UCX_ROCE_NETNS).
    fd_ = socket_beside(main.fd_, fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        ROCE_ERROR("socket(): %s", strerror(errno));
        return Status::io_error;
    }
    auto fail = [&](const char* what, Status st) {
        ROCE_ERROR("second socket on %s (class %u/%u): %s: %s", main.local_.to_string().c_str(),
                   unsigned(traffic_class), unsigned(priority), what, strerror(errno));
        ::close(fd_);
        fd_ = -1;
        return st;
    };
    if (setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
        return fail("SO_REUSEPORT", Status::unsupported);
    set_buffers(fd_, 0, 4 << 20);   // receives nothing (the kernel rounds 0 up to its minimum)
    set_class(fd_, fam, traffic_class, priority);
    tc_ = traffic_class;
    prio_ = priority;
    sockaddr_storage ss;
    const socklen_t len = to_sockaddr(main.local_, ss);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0)
        return fail("bind", Status::unsupported);
    sock_filter code[] = {{BPF_RET | BPF_K, 0, 0, 0}};   // every datagram to socket 0: main
    sock_fprog prog{1, code};
    if (setsockopt(fd_, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) != 0)
        return fail("SO_ATTACH_REUSEPORT_CBPF", Status::unsupported);
    int zero = 0;
    gso_ = setsockopt(fd_, IPPROTO_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0;
    local_ = main.local_;
    shares_port_ = true;
    return Status::ok;
}

int UdpSocket::priority() const {
    int p = -1;
    socklen_t l = sizeof(p);
    return getsockopt(fd_, SOL_SOCKET, SO_PRIORITY, &p, &l) == 0 ? p : -1;
}

int UdpSocket::send_mmsg(mmsghdr* msgs, unsigned n) {
    if (n == 1)
        return ::sendmsg(fd_, &msgs[0].msg_hdr, MSG_DONTWAIT) < 0 ? -1 : 1;
    return ::sendmmsg(fd_, msgs, n, MSG_DONTWAIT);
}

int UdpSocket::send_batch(mmsghdr* msgs, unsigned n) {
    unsigned done = 0;
    while (done < n) {
        const int r = send_mmsg(msgs + done, n - done);
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

// A ping-pong finds one small datagram per call, and recvmmsg costs more than recvmsg for that
// one (this development VM: ~0.15 us per call, ~0.3 us of a 7.9 us plain-UDP round trip). So
// after a call that found one small datagram alone, the next calls read with recvmsg (an empty
// poll costs the same either way); they go back to recvmmsg after a large datagram (bulk data,
// a GRO run) or two calls in a row that each found one (a burst is queueing). Calls that find
// nothing keep the mode: a stream's pauses do not turn it into single reads.
int UdpSocket::recv_batch(mmsghdr* msgs, unsigned n) {
    constexpr size_t small = 1024;
    if (n == 0)
        return 0;
    for (;;) {
        if (single_ || n == 1) {
            const ssize_t r = ::recvmsg(fd_, &msgs[0].msg_hdr, MSG_DONTWAIT);
            if (r >= 0) {
                msgs[0].msg_len = unsigned(r);
                single_ = size_t(r) < small && !found_last_;
                found_last_ = true;
                emptied_ = false;
                return 1;
            }
        } else {
            const int r = ::recvmmsg(fd_, msgs, n, MSG_DONTWAIT, nullptr);
            if (r >= 0) {
                single_ = r == 1 && msgs[0].msg_len < small;
                found_last_ = false;
                emptied_ = unsigned(r) < n;
                return r;
            }
        }
        found_last_ = false;
        if (errno == EINTR)
            continue;
        // EAGAIN: nothing queued. ECONNREFUSED: an ICMP error from an earlier send; ignore.
        if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH)
            continue;
        emptied_ = true;
        return 0;
    }
}

} // namespace roce::sw
