#include "gid/doctor_pmtu.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "sw/udp_socket.hpp"

namespace roce::doctor {

namespace {

constexpr char probe_magic[8] = {'R', 'D', 'P', 'M', 'T', 'U', '?', 0};
constexpr char ack_magic[8] = {'R', 'D', 'P', 'M', 'T', 'U', '!', 0};
constexpr size_t header_bytes = 20;
constexpr int attempts = 2;            // per size: UDP may drop one
constexpr int ack_wait_ms = 200;       // a LAN answers in well under a millisecond

void put64(uint8_t* p, uint64_t v) { for (int i = 7; i >= 0; --i, v >>= 8) p[i] = uint8_t(v); }
void put32(uint8_t* p, uint32_t v) { for (int i = 3; i >= 0; --i, v >>= 8) p[i] = uint8_t(v); }
uint64_t get64(const uint8_t* p) { uint64_t v = 0; for (int i = 0; i < 8; ++i) v = v << 8 | p[i]; return v; }
uint32_t get32(const uint8_t* p) { uint32_t v = 0; for (int i = 0; i < 4; ++i) v = v << 8 | p[i]; return v; }

enum class Probe { acked, lost, too_big, error };

class Prober {
public:
    Prober(int fd, const SockAddr& server, gid::Family fam, PmtuResult& res)
        : fd_(fd), server_(server), fam_(fam), res_(res), rng_(std::random_device{}()) {}

    // Sends one datagram making an IP packet of ip_bytes, up to `attempts` times, and waits
    // for its acknowledgement.
    Probe try_size(unsigned ip_bytes, std::string& err) {
        const size_t payload = ip_bytes - ip_udp_overhead(fam_);
        buf_.assign(payload, 0);
        for (int a = 0; a < attempts; ++a) {
            const uint64_t token = rng_();
            std::memcpy(buf_.data(), probe_magic, 8);
            put64(buf_.data() + 8, token);
            put32(buf_.data() + 16, uint32_t(payload));
            ++res_.probes;
            if (::sendto(fd_, buf_.data(), payload, 0, server_.sa(), server_.len) < 0) {
                // EMSGSIZE: larger than the local netdev's MTU, known without asking the wire.
                if (errno == EMSGSIZE) return Probe::too_big;
                if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) continue;
                err = std::string("sendto ") + server_.str() + ": " + std::strerror(errno);
                return Probe::error;
            }
            if (wait_ack(token, payload)) return Probe::acked;
        }
        return Probe::lost;
    }

private:
    bool wait_ack(uint64_t token, size_t payload) {
        const uint64_t deadline = now_ns() + uint64_t(ack_wait_ms) * 1'000'000;
        uint8_t ack[64];
        for (uint64_t now = now_ns(); now < deadline; now = now_ns()) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, int((deadline - now) / 1'000'000) + 1) <= 0) continue;
            // Errors queued by ICMP (port unreachable, ...) show up here too: skip them, the
            // deadline decides.
            const ssize_t n = ::recv(fd_, ack, sizeof(ack), MSG_DONTWAIT);
            if (n < ssize_t(header_bytes) || std::memcmp(ack, ack_magic, 8) != 0) continue;
            if (get64(ack + 8) == token && get32(ack + 16) == payload) return true;
        }
        return false;
    }

    int fd_;
    SockAddr server_;
    gid::Family fam_;
    PmtuResult& res_;
    std::mt19937_64 rng_;
    std::vector<uint8_t> buf_;
};

} // namespace

Status probe_path_mtu(const SockAddr& server, const SockAddr* src, sw::PortRange ports, unsigned max_ip_bytes,
                      PmtuResult& out, std::string& err) {
    out = PmtuResult{};
    const gid::Family fam = server.ip().family();
    Fd fd;
    if (Status s = udp_socket(server.family(), nullptr, true, fd, err); s != Status::ok) return s;
    if (src) {
        SockAddr at = *src;
        bool in_use = false;
        if (const int e = sw::bind_in_range(fd.get(), at.ss, at.len, ports, in_use); e != 0) {
            err = "bind UDP to " + at.ip().str() + " port " + ports.str() + ": " + std::strerror(e);
            return Status::io_error;
        }
    }
    Prober prober(fd.get(), server, fam, out);
    const unsigned min_ip = fam == gid::Family::inet ? 576 : 1280;   // every path must carry these
    const unsigned max_ip = std::clamp(max_ip_bytes, min_ip, 65535u);

    Probe r = prober.try_size(min_ip, err);
    if (r == Probe::error) return Status::io_error;
    if (r != Probe::acked) {
        err = "no answer to UDP probes of " + std::to_string(min_ip) + " bytes from " + server.str() +
              " (a firewall dropping UDP to that port?)";
        return Status::timeout;
    }
    // Usually the path carries what the local netdev does: one probe settles it.
    if ((r = prober.try_size(max_ip, err)) == Probe::acked) {
        out.path_mtu = max_ip;
        return Status::ok;
    }
    if (r == Probe::error) return Status::io_error;
    ++out.lost;
    unsigned lo = min_ip, hi = max_ip;   // lo acknowledged, hi not
    while (hi - lo > 1) {
        const unsigned mid = lo + (hi - lo) / 2;
        r = prober.try_size(mid, err);
        if (r == Probe::error) return Status::io_error;
        if (r == Probe::acked) lo = mid;
        else { hi = mid; ++out.lost; }
    }
    out.path_mtu = lo;
    return Status::ok;
}

bool answer_probe(int fd, const uint8_t* buf, size_t len, const SockAddr& from) {
    if (len < header_bytes || std::memcmp(buf, probe_magic, 8) != 0) return false;
    uint8_t ack[header_bytes];
    std::memcpy(ack, ack_magic, 8);
    std::memcpy(ack + 8, buf + 8, 8);
    put32(ack + 16, uint32_t(len));
    // Best effort: a lost ack is a lost probe to the client, which retries.
    (void)::sendto(fd, ack, sizeof(ack), MSG_DONTWAIT, from.sa(), from.len);
    return true;
}

} // namespace roce::doctor
