// Fuzz target: ud_roce's reliability (ud::Transport: header decoding, each peer's Receiver with
// its window, out-of-order holds and reassembly, each Sender's ACK/SACK handling, restarted
// peers, the bounds on strangers) fed datagrams from four sources, interleaved with a real peer
// B's stream, over an in-memory datagram QP on which B's packets may also be duplicated and
// reordered. Datagrams are unauthenticated, so a forged one may break the stream of the peer
// whose address it carries, and nothing else.
//
// Input: one byte of settings (bit 0: a hold budget of 4 KiB instead of 1 MiB; bit 1: A's QP
// takes datagrams of 256 bytes, not 512, which B learns from A's address as ud_roce's endpoints
// do, and larger ones to A are lost on the way, as on a link with a smaller MTU), then records
// [control][length, 2 bytes big-endian][length bytes of UD payload]:
//   control bits 0-1  the source: 0 = B (a forgery), 1..3 = strangers (A has an endpoint for
//                     stranger 1 and messages in flight to it: its forged ACKs and SACKs reach a
//                     live sender)
//   bit 2  the header is made valid (version, a type from its first byte)
//   bit 3  psn and ack := their low 6 bits (near where the sequences start: in window, holes,
//          duplicates)
//   bit 4  B sends one more message first
//   bits 5, 6, 7  then B's newest packet on the link is duplicated / swapped with the one before
//          it / moved ahead of everything queued for A
// Oracle: no crash or sanitizer report; every AM delivered is at most max_msg bytes; and unless a
// record forged B (a datagram from B's address that decodes), B's messages arrive at A exact, at
// most once and in order, and all of them unless A dropped one of B's packets over the small
// budget (that one waits for a retransmission timeout, longer than a run).
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "common/log.hpp"
#include "ud/header.hpp"
#include "ud/transport.hpp"

using namespace roce;
using namespace roce::ud;

namespace {

constexpr size_t max_msg = 8192, mtu = 512;

UdAddr addr_of(uint16_t port) {
    UdAddr a;
    a.net.family = 2;
    a.net.ip[0] = 127;
    a.net.ip[3] = 1;
    a.net.port = port;
    a.qpn = 0x100u + port;
    return a;
}

// Datagrams in flight to each address; what goes to an address without a transport is dropped.
struct Wire {
    struct Pkt {
        UdAddr src, dst;
        std::vector<uint8_t> data;
    };
    std::deque<Pkt> q;
    const UdAddr a = addr_of(1000), b = addr_of(2000);   // the two transports' addresses
    size_t a_takes = mtu;                                // the largest datagram that reaches A

    // The newest packet from src on the link, or end().
    std::deque<Pkt>::iterator newest_from(const UdAddr& src) {
        for (auto it = q.end(); it != q.begin();) {
            --it;
            if (it->src == src)
                return it;
        }
        return q.end();
    }
};

class WireQp final : public DatagramQp {
public:
    WireQp(Wire& w, UdAddr self, size_t takes) : w_(w), self_(self), takes_(takes) {}
    ~WireQp() override { ::close(fd_); }
    UdAddr address() const override { return self_; }
    size_t max_payload() const override { return takes_; }
    Status send(const UdAddr& dst, ClassId, const iovec* iov, size_t n) override {
        if (!(dst == w_.a || dst == w_.b))
            return Status::ok;   // to a stranger: nobody there
        Wire::Pkt p{self_, dst, {}};
        for (size_t i = 0; i < n; ++i) {
            const auto* b = static_cast<const uint8_t*>(iov[i].iov_base);
            p.data.insert(p.data.end(), b, b + iov[i].iov_len);
        }
        if (p.data.size() > mtu)
            return Status::invalid_param;
        if (dst == w_.a && p.data.size() > w_.a_takes)
            return Status::ok;    // lost on the way
        if (w_.q.size() < 4096)   // a full link drops, as a socket would
            w_.q.push_back(std::move(p));
        return Status::ok;
    }
    size_t poll(FunctionRef<void(const Datagram&)> fn, size_t max) override {
        // Taken off the link first: handling a datagram sends (onto the same queue).
        std::vector<Wire::Pkt> got;
        for (auto it = w_.q.begin(); it != w_.q.end() && got.size() < max;) {
            if (it->dst == self_) {
                got.push_back(std::move(*it));
                it = w_.q.erase(it);
            } else {
                ++it;
            }
        }
        for (const Wire::Pkt& p : got)
            fn(Datagram{p.src, p.data.data(), p.data.size()});
        return got.size();
    }
    int event_fd() const override { return fd_; }
    DatagramStats stats() const override { return {}; }

private:
    Wire& w_;
    UdAddr self_;
    size_t takes_;
    int fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
};

std::vector<uint8_t> message(size_t i) {
    std::vector<uint8_t> v((i * 1237) % 3000 + 1);   // 1..3000 bytes: up to 7 fragments (13 to 256)
    for (size_t k = 0; k < v.size(); ++k)
        v[k] = uint8_t(i * 31 + k * 7);
    return v;
}

[[noreturn]] void die(const char* what, size_t i) {
    std::fprintf(stderr, "fuzz_ud: %s (message %zu)\n", what, i);
    std::abort();
}

struct Harness {
    Wire wire;
    const UdAddr &a_addr = wire.a, &b_addr = wire.b;
    std::unique_ptr<Transport> a, b;
    Transport::PeerId a_to_b = 0, a_to_s1 = 0, b_to_a = 0;
    std::vector<std::vector<uint8_t>> got;   // B's messages as A delivered them
    size_t sent = 0;

    Harness(size_t hold_budget, size_t a_takes) {
        wire.a_takes = a_takes;
        TransportConfig cfg;
        cfg.rx.max_msg = max_msg;
        cfg.rx.window = 64;
        cfg.tx.max_window = 64;         // B never sends beyond A's receive window
        cfg.ack_delay_ns = 0;           // ACKs at once: a run does not depend on the clock
        cfg.max_passive_peers = 1;      // strangers 2 and 3 compete for the one place
        cfg.hold_budget = hold_budget;
        cfg.tx.queue_len = 256;
        cfg.tx.min_rto_ns = 1'000'000'000;   // timers stay out of a run: it is deterministic
        cfg.tx.peer_timeout_ns = 60'000'000'000ull;
        cfg.sender_id = 0xa;
        Transport::Callbacks ca;
        ca.deliver = [this](Transport::PeerId from, uint8_t, const uint8_t* d, size_t n) {
            if (n > max_msg)
                die("an AM larger than max_msg was delivered", n);
            if (from == a_to_b)
                got.emplace_back(d, d + n);
        };
        ca.failed = [](Transport::PeerId, Status) {};
        a = std::make_unique<Transport>(cfg, std::make_unique<WireQp>(wire, a_addr, a_takes), ca);
        cfg.sender_id = 0xb;
        Transport::Callbacks cb;
        cb.deliver = [](Transport::PeerId, uint8_t, const uint8_t*, size_t) {};
        cb.failed = [](Transport::PeerId, Status) {};
        b = std::make_unique<Transport>(cfg, std::make_unique<WireQp>(wire, b_addr, mtu), cb);
        a_to_b = a->peer(b_addr, b->max_datagram_payload());
        a_to_s1 = a->peer(addr_of(1));
        b_to_a = b->peer(a_addr, a->max_datagram_payload());
        for (size_t i = 0; i < 3; ++i) {   // A's messages in flight: to B and to stranger 1
            const std::vector<uint8_t> m = message(100 + i);
            iovec iov{const_cast<uint8_t*>(m.data()), m.size()};
            a->send_am(a_to_b, 1, &iov, 1);
            a->send_am(a_to_s1, 1, &iov, 1);
        }
    }

    void b_sends() {
        const std::vector<uint8_t> m = message(sent);
        iovec iov{const_cast<uint8_t*>(m.data()), m.size()};
        if (b->send_am(b_to_a, 2, &iov, 1) == Status::ok)
            ++sent;
    }
    void pump() {
        b->progress();
        a->progress();
    }
    uint64_t a_over_budget_from_b() const {
        for (const auto& pc : a->peer_counters())
            if (pc.id == a_to_b)
                for (const auto& [name, v] : pc.counters)
                    if (name == "over_budget")
                        return v;
        die("no over_budget counter for the real peer", 0);
    }
    void duplicate_newest_from_b() {
        auto it = wire.newest_from(b_addr);
        if (it != wire.q.end())
            wire.q.push_back(Wire::Pkt(*it));
    }
    void swap_newest_from_b() {
        auto it = wire.newest_from(b_addr);
        if (it == wire.q.end())
            return;
        for (auto prev = it; prev != wire.q.begin();) {
            --prev;
            if (prev->src == b_addr) {
                std::swap(*prev, *it);
                return;
            }
        }
    }
    void hurry_newest_from_b() {
        auto it = wire.newest_from(b_addr);
        if (it == wire.q.end() || it == wire.q.begin())
            return;
        Wire::Pkt p = std::move(*it);
        wire.q.erase(it);
        wire.q.push_front(std::move(p));
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool quiet = [] { set_log_level(LogLevel::error); return true; }();
    (void)quiet;
    if (size < 1 || size > 64 * 1024)
        return 0;
    Harness h(data[0] & 1 ? 4 << 10 : 1 << 20, data[0] & 2 ? 256 : mtu);
    bool forged = false;
    size_t pos = 1;
    while (pos + 3 <= size) {
        const uint8_t control = data[pos];
        const size_t len = std::min<size_t>(size_t(data[pos + 1]) << 8 | data[pos + 2], size - pos - 3);
        std::vector<uint8_t> d(data + pos + 3, data + pos + 3 + len);
        pos += 3 + len;
        const unsigned src = control & 3;
        if (control & 4 && d.size() >= header_size) {
            d[3] = header_version;
            d[0] = uint8_t(1 + d[0] % 3);
        }
        if (control & 8 && d.size() >= header_size) {
            d[8] = d[9] = d[10] = 0;
            d[11] &= 63;
            d[12] = d[13] = d[14] = 0;
            d[15] &= 63;
        }
        Header hd;
        forged |= src == 0 && decode(d.data(), d.size(), hd);
        if (control & 16)
            h.b_sends();
        h.b->progress();   // B's packets onto the link, where the next bits may disturb them
        if (control & 32)
            h.duplicate_newest_from_b();
        if (control & 64)
            h.swap_newest_from_b();
        if (control & 128)
            h.hurry_newest_from_b();
        h.wire.q.push_back({src == 0 ? h.b_addr : addr_of(uint16_t(src)), h.a_addr, std::move(d)});
        h.a->progress();
    }
    h.b_sends();
    for (int i = 0; i < 200 && h.got.size() < h.sent; ++i)
        h.pump();
    for (int i = 0; i < 50 && !h.wire.q.empty(); ++i)
        h.pump();   // what is still on the link: a late duplicate must not be delivered again
    // A packet of B's that A dropped over the budget waits for a retransmission timeout (1 s):
    // then only what arrived is checked, not that everything did.
    if (!forged) {
        const bool all_due = h.a_over_budget_from_b() == 0;
        if (h.got.size() > h.sent || (all_due && h.got.size() != h.sent))
            die("the real peer's messages did not all arrive once", h.got.size());
        for (size_t i = 0; i < h.got.size(); ++i)
            if (h.got[i] != message(i))
                die("a message of the real peer arrived altered or out of order", i);
    }
    return 0;
}
