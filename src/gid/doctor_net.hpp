// Socket plumbing of `roce_doctor serve` / `check`: an owning fd, socket addresses of either
// family, and the few blocking-with-a-deadline operations the control connection needs. Every
// wait is bounded (the caller passes the budget): a dead peer must become an error, never a hang.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.hpp"
#include "common/rc_device.hpp"
#include "common/status.hpp"
#include "gid/ip.hpp"

namespace roce::doctor {

class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) { reset(); fd_ = o.fd_; o.fd_ = -1; }
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    void reset(int fd = -1);

private:
    int fd_ = -1;
};

struct SockAddr {
    sockaddr_storage ss{};
    socklen_t len = 0;

    static SockAddr from(const gid::IpAddr& ip, uint16_t port);
    int family() const { return ss.ss_family; }
    gid::IpAddr ip() const;
    uint16_t port() const;
    void set_port(uint16_t port);
    std::string str() const;   // "10.0.0.1:18515", "[fe80::1]:18515"
    const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&ss); }
    sockaddr* sa() { return reinterpret_cast<sockaddr*>(&ss); }
};

// The IP of a WireAddr / a WireAddr for an IP (the devices' address type).
gid::IpAddr ip_of(const WireAddr& w);
WireAddr wire_addr(const gid::IpAddr& ip, uint16_t port);

// Host name or address literal -> first address (numeric literals need no resolver).
std::optional<gid::IpAddr> resolve_host(const std::string& host, std::string& err);


// Non-blocking connect bounded by timeout_ms; `src` (optional) is bound first. Errors:
// unreachable (refused, no route: err says which), timeout, io_error.
Status tcp_connect(const SockAddr& dst, const SockAddr* src, int timeout_ms, Fd& out, std::string& err);
Status tcp_listen(const SockAddr& bind_to, Fd& out, std::string& err);
// A UDP socket (bound to `bind_to` when given). df: every datagram leaves with DF set and the
// kernel's cached path MTU ignored (IP_PMTUDISC_PROBE / IPV6_DONTFRAG), so a datagram larger
// than a hop is dropped there instead of being fragmented: what path-MTU probing needs.
Status udp_socket(int family, const SockAddr* bind_to, bool df, Fd& out, std::string& err);
// Local address of a connected/bound socket.
SockAddr local_addr(int fd);

// Line-oriented control connection: '\n'-terminated lines of at most max_line bytes.
class LineConn {
public:
    static constexpr size_t max_line = 2048;
    explicit LineConn(Fd fd) : fd_(std::move(fd)) {}
    int fd() const { return fd_.get(); }
    // ok: a line (without '\n'); timeout; io_error (err: "connection closed" on EOF, or the
    // error); invalid_param: a line longer than max_line (the peer is not speaking our protocol).
    Status read_line(std::string& line, int timeout_ms, std::string& err);
    Status write_line(const std::string& line, int timeout_ms, std::string& err);
    // Ends the connection without losing what was just written: closing with unread input
    // would send a reset, which discards our last line (the ERR) at the peer. Bounded.
    void close_gracefully(int timeout_ms);
    // Whether a complete line is already buffered (poll() on the fd would not show it).
    bool has_line() const { return buf_.find('\n') != std::string::npos; }

private:
    Fd fd_;
    std::string buf_;
};

} // namespace roce::doctor
