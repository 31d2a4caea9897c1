#include "gid/doctor_net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace roce::doctor {

void Fd::reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

SockAddr SockAddr::from(const gid::IpAddr& ip, uint16_t port) {
    SockAddr a;
    if (ip.family() == gid::Family::inet) {
        auto* s = reinterpret_cast<sockaddr_in*>(&a.ss);
        s->sin_family = AF_INET;
        std::memcpy(&s->sin_addr, &ip.b[12], 4);
        s->sin_port = htons(port);
        a.len = sizeof(sockaddr_in);
    } else {
        auto* s = reinterpret_cast<sockaddr_in6*>(&a.ss);
        s->sin6_family = AF_INET6;
        std::memcpy(&s->sin6_addr, ip.b.data(), 16);
        s->sin6_port = htons(port);
        a.len = sizeof(sockaddr_in6);
    }
    return a;
}

gid::IpAddr SockAddr::ip() const {
    if (family() == AF_INET) {
        const auto* s = reinterpret_cast<const sockaddr_in*>(&ss);
        return gid::IpAddr::v4(ntohl(s->sin_addr.s_addr));
    }
    return gid::IpAddr::from_bytes(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr.s6_addr);
}

uint16_t SockAddr::port() const {
    return ntohs(family() == AF_INET ? reinterpret_cast<const sockaddr_in*>(&ss)->sin_port
                                     : reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
}

void SockAddr::set_port(uint16_t port) {
    if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
    else reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
}

std::string SockAddr::str() const {
    const gid::IpAddr a = ip();   // an IPv4-mapped address (dual-stack socket) prints as IPv4
    return (a.family() == gid::Family::inet6 ? "[" + a.str() + "]" : a.str()) + ":" + std::to_string(port());
}

gid::IpAddr ip_of(const WireAddr& w) {
    if (w.family == AF_INET)
        return gid::IpAddr::v4(uint32_t(w.ip[0]) << 24 | uint32_t(w.ip[1]) << 16 | uint32_t(w.ip[2]) << 8 | w.ip[3]);
    return gid::IpAddr::from_bytes(w.ip);
}

WireAddr wire_addr(const gid::IpAddr& ip, uint16_t port) {
    WireAddr w;
    w.port = port;
    if (ip.family() == gid::Family::inet) {
        w.family = AF_INET;
        std::memcpy(w.ip, &ip.b[12], 4);
    } else {
        w.family = AF_INET6;
        std::memcpy(w.ip, ip.b.data(), 16);
    }
    return w;
}

std::optional<gid::IpAddr> resolve_host(const std::string& host, std::string& err) {
    if (auto ip = gid::IpAddr::parse(host)) return ip;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
        err = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
        return std::nullopt;
    }
    SockAddr a;
    std::memcpy(&a.ss, res->ai_addr, res->ai_addrlen);
    a.len = res->ai_addrlen;
    ::freeaddrinfo(res);
    return a.ip();
}

namespace {

Status sys_error(const std::string& what, std::string& err) {
    err = what + ": " + std::strerror(errno);
    return Status::io_error;
}

// Waits until fd has `events` or the deadline passes; false on timeout.
bool wait_fd(int fd, short events, uint64_t deadline_ns) {
    for (;;) {
        const uint64_t now = now_ns();
        if (now >= deadline_ns) return false;
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, int((deadline_ns - now + 999'999) / 1'000'000));
        if (rc > 0) return true;
        if (rc < 0 && errno != EINTR) return true;   // let the following call report the error
    }
}

} // namespace

Status tcp_connect(const SockAddr& dst, const SockAddr* src, int timeout_ms, Fd& out, std::string& err) {
    Fd fd(::socket(dst.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket", err);
    if (src && ::bind(fd.get(), src->sa(), src->len) != 0) return sys_error("bind to " + src->str(), err);
    if (::connect(fd.get(), dst.sa(), dst.len) != 0 && errno != EINPROGRESS) {
        const int e = errno;
        err = std::string("connect to ") + dst.str() + ": " + std::strerror(e);
        return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH ? Status::unreachable : Status::io_error;
    }
    if (!wait_fd(fd.get(), POLLOUT, now_ns() + uint64_t(timeout_ms) * 1'000'000)) {
        err = "connect to " + dst.str() + ": no answer within " + std::to_string(timeout_ms) + " ms";
        return Status::timeout;
    }
    int soerr = 0;
    socklen_t l = sizeof(soerr);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &l);
    if (soerr != 0) {
        err = "connect to " + dst.str() + ": " + std::strerror(soerr);
        if (soerr == ECONNREFUSED) err += " (is `roce_doctor serve` running there, on this port?)";
        return soerr == ECONNREFUSED || soerr == ENETUNREACH || soerr == EHOSTUNREACH ? Status::unreachable
                                                                                     : Status::io_error;
    }
    out = std::move(fd);
    return Status::ok;
}

Status tcp_listen(const SockAddr& bind_to, Fd& out, std::string& err) {
    Fd fd(::socket(bind_to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket", err);
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), bind_to.sa(), bind_to.len) != 0) return sys_error("bind to " + bind_to.str(), err);
    if (::listen(fd.get(), 8) != 0) return sys_error("listen", err);
    out = std::move(fd);
    return Status::ok;
}

Status udp_socket(int family, const SockAddr* bind_to, bool df, Fd& out, std::string& err) {
    Fd fd(::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket", err);
    if (df) {
        // PROBE rather than DO: DO would cap every send at the path MTU the kernel cached from an
        // earlier ICMP "fragmentation needed", and probing must measure, not repeat the cache.
        if (family == AF_INET) {
            int v = IP_PMTUDISC_PROBE;
            if (::setsockopt(fd.get(), IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v)) != 0)
                return sys_error("IP_MTU_DISCOVER", err);
        } else {
            int v = IPV6_PMTUDISC_PROBE, one = 1;
            if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_MTU_DISCOVER, &v, sizeof(v)) != 0 ||
                ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_DONTFRAG, &one, sizeof(one)) != 0)
                return sys_error("IPV6_DONTFRAG", err);
        }
    }
    if (bind_to && ::bind(fd.get(), bind_to->sa(), bind_to->len) != 0)
        return sys_error("bind UDP to " + bind_to->str(), err);
    out = std::move(fd);
    return Status::ok;
}

SockAddr local_addr(int fd) {
    SockAddr a;
    a.len = sizeof(a.ss);
    ::getsockname(fd, a.sa(), &a.len);
    return a;
}

Status LineConn::read_line(std::string& line, int timeout_ms, std::string& err) {
    const uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1'000'000;
    for (;;) {
        if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
            line = buf_.substr(0, nl);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            buf_.erase(0, nl + 1);
            return Status::ok;
        }
        if (buf_.size() > max_line) {
            err = "line longer than " + std::to_string(max_line) + " bytes";
            return Status::invalid_param;
        }
        if (!wait_fd(fd_.get(), POLLIN, deadline)) {
            err = "no message within " + std::to_string(timeout_ms) + " ms";
            return Status::timeout;
        }
        char b[1024];
        const ssize_t n = ::recv(fd_.get(), b, sizeof(b), MSG_DONTWAIT);
        if (n == 0) {
            err = "connection closed";
            return Status::io_error;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return sys_error("recv", err);
        }
        buf_.append(b, size_t(n));
    }
}

void LineConn::close_gracefully(int timeout_ms) {
    ::shutdown(fd_.get(), SHUT_WR);
    const uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1'000'000;
    char b[4096];
    while (wait_fd(fd_.get(), POLLIN, deadline)) {
        const ssize_t n = ::recv(fd_.get(), b, sizeof(b), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    fd_.reset();
}

Status LineConn::write_line(const std::string& line, int timeout_ms, std::string& err) {
    const std::string data = line + "\n";
    const uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1'000'000;
    size_t off = 0;
    while (off < data.size()) {
        const ssize_t n = ::send(fd_.get(), data.data() + off, data.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) { off += size_t(n); continue; }
        if (n < 0 && errno != EAGAIN && errno != EINTR) return sys_error("send", err);
        if (!wait_fd(fd_.get(), POLLOUT, deadline)) {
            err = "send: peer not reading for " + std::to_string(timeout_ms) + " ms";
            return Status::timeout;
        }
    }
    return Status::ok;
}

} // namespace roce::doctor
