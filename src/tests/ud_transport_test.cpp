// ud_roce's reliability (ud/transport.hpp). The state machines are driven over an in-memory
// lossy link (loss, duplication, reordering under our control), then over the userspace
// device's real UD QPs on loopback with its fault injection.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include "sw/ud_qp.hpp"
#include "sw/udp_socket.hpp"
#include "common/log.hpp"
#include "ud/transport.hpp"

namespace roce::ud {
namespace {

// Two endpoints of an in-memory link; whatever one sends the other may poll, subject to faults.
struct Link {
    struct Pkt {
        UdAddr src;
        std::vector<uint8_t> data;
    };
    std::deque<Pkt> q[2];
    std::mt19937 rng{7};
    double drop = 0, dup = 0, reorder = 0;
    bool cut = false;   // the peer is gone: nothing arrives
    bool only_to_peer = false;   // datagrams to any other address (strangers) go nowhere
    size_t per_poll = 0;   // at most this many datagrams per poll call (0: no limit)
    uint64_t delivered = 0;
    // Largest datagram that reaches each side (a smaller MTU on its end of the path); larger
    // ones are dropped on the way, as a 1500-byte veth drops a jumbo frame.
    size_t reaches[2] = {SIZE_MAX, SIZE_MAX};
    uint64_t too_big = 0;
};

class LinkQp final : public DatagramQp {
public:
    LinkQp(Link& l, int side, size_t max_payload = 1024) : l_(l), side_(side), max_payload_(max_payload) {}
    UdAddr address() const override {
        UdAddr a;
        a.net.family = 2;
        a.net.port = uint16_t(1000 + side_);
        a.qpn = uint32_t(10 + side_);
        return a;
    }
    size_t max_payload() const override { return max_payload_; }
    Status send(const UdAddr& to, ClassId, const iovec* iov, size_t n) override {
        if (l_.only_to_peer && to.qpn != uint32_t(10 + (1 - side_))) return Status::ok;
        std::vector<uint8_t> d;
        for (size_t i = 0; i < n; ++i) {
            auto* b = static_cast<const uint8_t*>(iov[i].iov_base);
            d.insert(d.end(), b, b + iov[i].iov_len);
        }
        if (d.size() > max_payload()) return Status::invalid_param;
        if (d.size() > l_.reaches[1 - side_]) {
            ++l_.too_big;
            return Status::ok;
        }
        std::uniform_real_distribution<double> u(0, 1);
        if (l_.cut || u(l_.rng) < l_.drop) return Status::ok;
        auto& q = l_.q[1 - side_];
        const int copies = u(l_.rng) < l_.dup ? 2 : 1;
        for (int c = 0; c < copies; ++c) {
            if (!q.empty() && u(l_.rng) < l_.reorder) {
                q.insert(q.end() - 1, {address(), d});
            } else {
                q.push_back({address(), d});
            }
        }
        return Status::ok;
    }
    size_t poll(FunctionRef<void(const Datagram&)> fn, size_t max) override {
        size_t n = 0;
        auto& q = l_.q[side_];
        if (l_.per_poll) max = std::min(max, l_.per_poll);
        while (n < max && !q.empty()) {
            Link::Pkt p = std::move(q.front());
            q.pop_front();
            ++l_.delivered;
            fn(Datagram{p.src, p.data.data(), p.data.size()});
            ++n;
        }
        return n;
    }
    int event_fd() const override { return -1; }
    DatagramStats stats() const override { return {}; }

private:
    Link& l_;
    int side_;
    size_t max_payload_;
};

// What one side received: (am_id, bytes) in order, and failures.
struct Sink {
    std::vector<std::pair<uint8_t, std::vector<uint8_t>>> msgs;
    std::vector<Status> failures;
};

std::unique_ptr<Transport> make(std::unique_ptr<DatagramQp> qp, Sink& sink,
                                uint64_t peer_timeout_ns = 30'000'000'000ull,
                                uint64_t min_rto_ns = 200'000, TransportConfig cfg = {}) {
    cfg.tx.min_rto_ns = min_rto_ns;
    cfg.tx.peer_timeout_ns = peer_timeout_ns;
    cfg.rx.max_msg = 65536;
    Transport::Callbacks cb;
    cb.deliver = [&sink](Transport::PeerId, uint8_t am, const uint8_t* d, size_t n) {
        sink.msgs.emplace_back(am, std::vector<uint8_t>(d, d + n));
    };
    cb.failed = [&sink](Transport::PeerId, Status s) { sink.failures.push_back(s); };
    return std::make_unique<Transport>(cfg, std::move(qp), cb);
}

std::vector<uint8_t> message(size_t i) {
    const size_t len = (i * 7919) % 9000 + (i % 5 == 0 ? 0 : 1);   // 0 .. 9000 bytes: fragments
    std::vector<uint8_t> v(len);
    for (size_t k = 0; k < len; ++k) v[k] = uint8_t(i * 31 + k * 13);
    return v;
}

// Sends `count` messages a->b while both progress; returns when b has them all (or time ran out).
void stream(Transport& a, Transport& b, Sink& sb, size_t count, double seconds = 20) {
    const Transport::PeerId to_b = a.peer(b.address());
    size_t next = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (sb.msgs.size() < count && std::chrono::steady_clock::now() < end) {
        while (next < count) {
            std::vector<uint8_t> m = message(next);
            iovec iov{m.data(), m.size()};
            const Status s = a.send_am(to_b, uint8_t(next % 32), &iov, 1);
            if (s == Status::no_resource) break;
            ASSERT_EQ(s, Status::ok);
            ++next;
        }
        a.progress();
        b.progress();
    }
}

// Progresses both until a has every message to b acknowledged (at most 5 s).
void wait_flushed(Transport& a, Transport& b, Transport::PeerId to_b) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!a.flushed(to_b) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
        a.progress();
        b.progress();
    }
}

// Sends one one-byte AM from -> to and progresses both until `to_sink` holds one more message
// (at most 20 rounds: a clean link needs one or two).
void deliver_one(Transport& from, Transport::PeerId to, Transport& other, Sink& to_sink, uint8_t am,
                 uint8_t byte) {
    const size_t before = to_sink.msgs.size();
    iovec iov{&byte, 1};
    ASSERT_EQ(from.send_am(to, am, &iov, 1), Status::ok);
    for (int i = 0; i < 20 && to_sink.msgs.size() == before; ++i) {
        from.progress();
        other.progress();
    }
    ASSERT_EQ(to_sink.msgs.size(), before + 1);
    EXPECT_EQ(to_sink.msgs.back().first, am);
}

void expect_all(const Sink& s, size_t count) {
    ASSERT_EQ(s.msgs.size(), count);
    for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(s.msgs[i].first, uint8_t(i % 32)) << i;
        ASSERT_EQ(s.msgs[i].second, message(i)) << "message " << i;
    }
}

TEST(UdTransport, HeaderRoundTripAndRejects) {
    Header h{PktType::probe, flag_first | flag_ack_req, 7, 0xdeadbeef, 0xfffffffe, 5, 0x80000001};
    uint8_t b[header_size];
    encode(h, b);
    Header d;
    ASSERT_TRUE(decode(b, sizeof(b), d));
    EXPECT_EQ(d.type, h.type);
    EXPECT_EQ(d.flags, h.flags);
    EXPECT_EQ(d.am_id, 7);
    EXPECT_EQ(d.sender_id, h.sender_id);
    EXPECT_EQ(d.psn, h.psn);
    EXPECT_EQ(d.ack, 5u);
    EXPECT_EQ(d.sack, h.sack);
    EXPECT_FALSE(decode(b, header_size - 1, d));
    b[0] = 9;
    EXPECT_FALSE(decode(b, sizeof(b), d));
    h.sender_id = 0;   // never sent; in a peer's state it means "not heard yet"
    encode(h, b);
    EXPECT_FALSE(decode(b, sizeof(b), d));
    EXPECT_TRUE(seq_lt(0xffffffffu, 0u));   // wrap-around
}

// After an absence (no receive for over 1 ms) a progress call reads the QP empty before the
// timers run, also from a QP that hands out one datagram per poll (the userspace device's single
// reads): the timers must see the ACKs that arrived meanwhile, not declare them missing.
TEST(UdTransport, AfterAnAbsenceReadsEverythingQueued) {
    Link l;
    l.per_poll = 1;
    Sink sa, sb;
    // (an RTO far above the test's time: a slow build must not retransmit the burst)
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 30'000'000'000ull, 500'000'000);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    const Transport::PeerId to_b = a->peer(b->address());
    b->progress();
    constexpr size_t count = 10;
    std::vector<uint8_t> m(16, 0x5a);
    iovec iov{m.data(), m.size()};
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(a->send_am(to_b, 1, &iov, 1), Status::ok);
    a->progress();
    ASSERT_EQ(l.q[1].size(), count);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    b->progress();
    EXPECT_EQ(sb.msgs.size(), count);
    EXPECT_TRUE(l.q[1].empty());
}

TEST(UdTransport, CleanLinkInOrderExactlyOnce) {
    Link l;
    Sink sa, sb;
    // (an RTO far above the time the test takes to build its messages between progress calls)
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 30'000'000'000ull, 500'000'000);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    stream(*a, *b, sb, 500);
    expect_all(sb, 500);
    EXPECT_EQ(a->stats().retransmits, 0u) << a->stats_text() << "\n" << b->stats_text();
    // Everything acknowledged (the delayed ACK goes out once its time has come).
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!a->all_flushed() && std::chrono::steady_clock::now() < end) {
        a->progress();
        b->progress();
    }
    EXPECT_TRUE(a->all_flushed());
}

TEST(UdTransport, LossDuplicationReorderingStillExact) {
    Link l;
    l.drop = 0.05;
    l.dup = 0.03;
    l.reorder = 0.1;
    Sink sa, sb;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    stream(*a, *b, sb, 2000);
    expect_all(sb, 2000);
    const TransportStats st = a->stats();
    EXPECT_GT(st.retransmits, 0u);
    EXPECT_GT(b->stats().duplicates + b->stats().out_of_order, 0u);
    EXPECT_TRUE(sa.failures.empty());
}

TEST(UdTransport, BothDirectionsPiggybackAcks) {
    Link l;
    Sink sa, sb;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    const auto to_b = a->peer(b->address());
    const auto to_a = b->peer(a->address());
    // Ping-pong: every reply acknowledges the request, so no ACK-only packets are needed.
    for (int i = 0; i < 200; ++i) {
        uint8_t x = uint8_t(i);
        iovec iov{&x, 1};
        ASSERT_EQ(a->send_am(to_b, 1, &iov, 1), Status::ok);
        while (sb.msgs.size() < size_t(i + 1)) { a->progress(); b->progress(); }
        ASSERT_EQ(b->send_am(to_a, 2, &iov, 1), Status::ok);
        while (sa.msgs.size() < size_t(i + 1)) { a->progress(); b->progress(); }
        EXPECT_EQ(sa.msgs.back().second[0], x);
    }
    EXPECT_LT(a->stats().acks_sent + b->stats().acks_sent, 20u);
}

// A jumbo-frame host (4096-byte datagrams) and a standard-frame one (1024): packets to the
// smaller end carry what it takes, so nothing is lost on the way and the stream is exact. With
// no MTU known for the peer (an address that did not carry one) the larger end would send 4096-
// byte datagrams, dropped on the way, until the peer timed out.
TEST(UdTransport, PacketsFitTheSmallerEndsMtu) {
    Link l;
    l.reaches[1] = 1024;
    Sink sa, sb;
    auto a = make(std::make_unique<LinkQp>(l, 0, 4096), sa, 30'000'000'000ull, 500'000'000);
    auto b = make(std::make_unique<LinkQp>(l, 1, 1024), sb);
    const Transport::PeerId to_b = a->peer(b->address(), b->max_datagram_payload());
    EXPECT_EQ(a->packet_payload(), 4096 - header_size);
    EXPECT_EQ(a->packet_payload(to_b), 1024 - header_size);
    // A later endpoint to the same peer that knows no MTU leaves it as it was.
    EXPECT_EQ(a->peer(b->address()), to_b);
    EXPECT_EQ(a->packet_payload(to_b), 1024 - header_size);
    stream(*a, *b, sb, 300);
    expect_all(sb, 300);
    EXPECT_EQ(l.too_big, 0u);
    EXPECT_EQ(a->stats().retransmits, 0u) << a->stats_text();
    // The other way the larger end's datagrams are taken whole: 4096 would reach it.
    const Transport::PeerId to_a = b->peer(a->address(), a->max_datagram_payload());
    EXPECT_EQ(b->packet_payload(to_a), 1024 - header_size);
}

// A peer whose MTU is so small that a message needs more packets than the queue holds: that
// send fails at once (it would otherwise wait for room forever); smaller ones go. The glue asks
// can_send() for room for its largest message (SEG_SIZE) before it packs one: for a length that
// can never fit that is an empty queue, so it neither refuses forever nor packs into no room.
TEST(UdTransport, MessageTooManyPacketsForTheQueueFails) {
    Link l;
    Sink sa, sb;
    TransportConfig cfg;
    cfg.tx.queue_len = 8;
    cfg.tx.max_window = 8;
    auto a = make(std::make_unique<LinkQp>(l, 0, 4096), sa, 30'000'000'000ull, 200'000, cfg);
    auto b = make(std::make_unique<LinkQp>(l, 1, 256), sb);
    const Transport::PeerId to_b = a->peer(b->address(), 256);
    std::vector<uint8_t> big(8 * (256 - header_size) + 1, 1), fits(8 * (256 - header_size), 2);
    iovec iov{big.data(), big.size()};
    EXPECT_EQ(a->send_am(to_b, 1, &iov, 1), Status::invalid_param);
    EXPECT_TRUE(a->can_send(to_b, 65536));
    iov = {fits.data(), fits.size()};
    EXPECT_EQ(a->send_am(to_b, 2, &iov, 1), Status::ok);
    EXPECT_FALSE(a->can_send(to_b, 65536));   // 8 packets queued: not empty
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((sb.msgs.empty() || !a->flushed(to_b)) && std::chrono::steady_clock::now() < end) {
        a->progress();
        b->progress();
    }
    ASSERT_EQ(sb.msgs.size(), 1u);
    EXPECT_EQ(sb.msgs[0].second, fits);
    EXPECT_TRUE(a->flushed(to_b));
    EXPECT_TRUE(a->can_send(to_b, 65536));   // drained: room again
    iov = {fits.data(), 100};
    EXPECT_EQ(a->send_am(to_b, 3, &iov, 1), Status::ok);
}

TEST(UdTransport, FullQueueSaysNoResourceThenDrains) {
    Link l;
    Sink sa, sb;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    const auto to_b = a->peer(b->address());
    std::vector<uint8_t> m(1000, 3);
    iovec iov{m.data(), m.size()};
    size_t sent = 0;
    while (a->send_am(to_b, 0, &iov, 1) == Status::ok) ++sent;   // b never progresses
    EXPECT_GE(sent, 64u);
    EXPECT_FALSE(a->can_send(to_b, m.size()));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sb.msgs.size() < sent && std::chrono::steady_clock::now() < end) {
        a->progress();
        b->progress();
    }
    EXPECT_EQ(sb.msgs.size(), sent);
    EXPECT_TRUE(a->can_send(to_b, m.size()));
}

TEST(UdTransport, SilentPeerFailsWithinTimeout) {
    Link l;
    Sink sa, sb;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 300'000'000);   // 0.3 s
    const auto to_b = a->peer(UdAddr{{2, {}, 1001}, 11});
    l.cut = true;
    uint8_t x = 1;
    iovec iov{&x, 1};
    ASSERT_EQ(a->send_am(to_b, 0, &iov, 1), Status::ok);
    const auto t0 = std::chrono::steady_clock::now();
    while (sa.failures.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
        a->progress();
    }
    ASSERT_EQ(sa.failures.size(), 1u);
    EXPECT_EQ(sa.failures[0], Status::timeout);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    EXPECT_EQ(a->send_am(to_b, 0, &iov, 1), Status::timeout);
    EXPECT_TRUE(a->flushed(to_b));
    // A probe to a failed peer reports the failure; the callback does not run again.
    EXPECT_EQ(a->probe(to_b), Status::timeout);
    a->progress();
    EXPECT_EQ(sa.failures.size(), 1u);
}

// Another process at a peer's address (a new sender id: a rank restarted on the same port, which
// a narrow UCX_*_PORT_RANGE makes likely) ends the old peer: `reset` when the old one had
// acknowledged everything we sent (nothing lost: the glue does not abort UCP for it), `timeout`
// when some of it was not (fatal without UCP error handling). The new process is a new peer at
// the same address: its first message is delivered, and answers reach it.
TEST(UdTransport, RestartedPeerIsResetUnlessDataWasLost) {
    for (const bool lost : {false, true}) {
        SCOPED_TRACE(lost ? "a message unacknowledged" : "everything acknowledged");
        Link l;
        Sink sa, sb, sb2;
        auto a = make(std::make_unique<LinkQp>(l, 0), sa);
        auto b = make(std::make_unique<LinkQp>(l, 1), sb);
        stream(*a, *b, sb, 5);
        expect_all(sb, 5);
        const auto to_b = a->peer(b->address());
        wait_flushed(*a, *b, to_b);
        ASSERT_TRUE(a->flushed(to_b));
        if (lost) {   // one more message that the old process never sees
            l.cut = true;
            uint8_t x = 7;
            iovec iov{&x, 1};
            ASSERT_EQ(a->send_am(to_b, 1, &iov, 1), Status::ok);
            a->progress();
            l.cut = false;
        }
        const uint32_t old_id = b->sender_id();
        b.reset();
        l.q[0].clear();
        l.q[1].clear();
        auto b2 = make(std::make_unique<LinkQp>(l, 1), sb2);
        ASSERT_NE(b2->sender_id(), old_id);
        const auto to_a = b2->peer(a->address());
        uint8_t y = 9;
        iovec iov{&y, 1};
        ASSERT_EQ(b2->send_am(to_a, 2, &iov, 1), Status::ok);
        for (int i = 0; i < 20 && sa.failures.empty(); ++i) {
            b2->progress();
            a->progress();
        }
        ASSERT_EQ(sa.failures.size(), 1u);
        EXPECT_EQ(sa.failures[0], lost ? Status::timeout : Status::reset);
        EXPECT_EQ(a->send_am(to_b, 0, &iov, 1), sa.failures[0]);   // the old peer stays ended
        ASSERT_EQ(sa.msgs.size(), 1u);                               // the new one's first message
        EXPECT_EQ(sa.msgs[0].first, 2);
        const auto to_b2 = a->peer(b2->address());
        EXPECT_NE(to_b2, to_b);
        deliver_one(*a, to_b2, *b2, sb2, 3, 5);
        EXPECT_EQ(sa.failures.size(), 1u);
    }
}

// A peer given up (timed out: the process died) and later another process at its address (a
// client restarted on the same port, or a verbs QPN reused on the same host): the new process's
// datagrams make a new peer, its messages are delivered and answers reach it. Before, a failed
// peer's address dropped everything for good.
TEST(UdTransport, NewProcessAtAFailedPeersAddressIsANewPeer) {
    Link l;
    Sink sa, sb, sb2;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 300'000'000);   // 0.3 s
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    stream(*a, *b, sb, 5);
    expect_all(sb, 5);
    const auto to_b = a->peer(b->address());
    wait_flushed(*a, *b, to_b);
    ASSERT_TRUE(a->flushed(to_b)) << "b answered: a knows its sender id";
    const uint32_t old_id = b->sender_id();
    b.reset();   // dies
    l.q[0].clear();
    l.q[1].clear();
    l.cut = true;
    uint8_t x = 1;
    iovec iov{&x, 1};
    ASSERT_EQ(a->send_am(to_b, 0, &iov, 1), Status::ok);
    const auto t0 = std::chrono::steady_clock::now();
    while (sa.failures.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
        a->progress();
    }
    ASSERT_EQ(sa.failures.size(), 1u);
    EXPECT_EQ(sa.failures[0], Status::timeout);
    l.cut = false;
    l.q[1].clear();
    auto b2 = make(std::make_unique<LinkQp>(l, 1), sb2);
    ASSERT_NE(b2->sender_id(), old_id);
    deliver_one(*b2, b2->peer(a->address()), *a, sa, 2, 9);   // the new process's message
    EXPECT_EQ(a->send_am(to_b, 0, &iov, 1), Status::timeout);   // the old peer stays ended
    const auto to_b2 = a->peer(b2->address());
    EXPECT_NE(to_b2, to_b);
    deliver_one(*a, to_b2, *b2, sb2, 3, 5);
    EXPECT_EQ(sa.failures.size(), 1u) << "no second failure report";
    EXPECT_TRUE(sb2.failures.empty());
    // A late datagram of the dead process (its id, a first message) arrives after all: dropped.
    // Taken for yet another restart it ended the new process's peer and made a third, which
    // the new process's next packets ended in turn.
    Header late;
    late.type = PktType::data;
    late.flags = flag_first | flag_last;
    late.am_id = 8;
    late.sender_id = old_id;
    std::vector<uint8_t> bytes(header_size + 1, 0x42);
    encode(late, bytes.data());
    l.q[0].push_back({b2->address(), bytes});
    a->progress();
    EXPECT_EQ(sa.msgs.size(), 1u) << "nothing from the dead process";
    EXPECT_EQ(sa.failures.size(), 1u) << "the new process's peer is not ended";
    deliver_one(*a, to_b2, *b2, sb2, 4, 6);
    EXPECT_EQ(sa.failures.size(), 1u);
}

// Anyone may send datagrams from an address with ever new sender ids: each is a restart (the
// peer before it ends), but only the first few are logged - a flood of them is counted.
TEST(UdTransport, RestartFloodIsCountedNotLogged) {
    static std::vector<std::string> lines;
    lines.clear();
    set_log_sink([](LogLevel, const char* msg) { lines.emplace_back(msg); });
    Link l;
    Sink sa;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa);
    const UdAddr from{{2, {}, 1001}, 11};
    constexpr unsigned n = 100;
    for (unsigned i = 1; i <= n; ++i) {
        Header h;
        h.type = PktType::ack;
        h.sender_id = 0x1000 + i;
        std::vector<uint8_t> bytes(header_size);
        encode(h, bytes.data());
        l.q[0].push_back({from, bytes});
        a->progress();
    }
    set_log_sink(nullptr);
    uint64_t restarted = 0;
    for (const auto& [name, v] : a->counters())
        if (name == "restarted_peers")
            restarted = v;
    EXPECT_EQ(restarted, n - 1);   // the first made the peer
    EXPECT_LE(lines.size(), 2u * 8) << "a line or two per restart for the first 8 only";
    EXPECT_GE(lines.size(), 8u);
    bool said = false;
    for (const auto& m : lines)
        said |= m.find("counted only") != std::string::npos;
    EXPECT_TRUE(said) << "the last line logged says the rest are counted";
}

// The delay window (UCX_UD_ROCE_CC=delay) when the owner computes for 30 ms between progress
// calls: the ACK waits unread all that time, so the round trip was anything up to 30 ms and the
// window is not cut (before: cut by max_mdf on every such absence).
TEST(UdTransport, AnOwnerAwayIsNoCongestion) {
    Link l;
    Sink sa, sb;
    TransportConfig cfg;
    cfg.tx.delay = true;
    cfg.tx.delay_params.target = 5'000'000;   // 5 ms: above the link's round trip, below the absence
    // (A retransmission timeout is a loss, which cuts the window too: none here, also under a
    // sanitizer's slowness, with a 1 s floor.)
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 30'000'000'000ull, 1'000'000'000, cfg);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    const auto to_b = a->peer(b->address());
    deliver_one(*a, to_b, *b, sb, 1, 1);
    wait_flushed(*a, *b, to_b);
    a->progress();   // finds nothing: what comes next is the ACK
    uint8_t x = 2;
    iovec iov{&x, 1};
    ASSERT_EQ(a->send_am(to_b, 2, &iov, 1), Status::ok);
    const auto t0 = std::chrono::steady_clock::now();
    while (l.q[0].empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
        b->progress();
    ASSERT_FALSE(l.q[0].empty()) << "b's ACK";
    usleep(30'000);   // computing
    a->progress();
    ASSERT_TRUE(a->flushed(to_b));
    std::map<std::string, uint64_t> c;
    for (const auto& pc : a->peer_counters())
        if (pc.id == to_b)
            c.insert(pc.counters.begin(), pc.counters.end());
    EXPECT_GE(c["rtt_ambiguous"], 1u);
    EXPECT_LT(c["srtt_us_now"], 5000u) << "the absence is not a round trip";
    EXPECT_GE(c["cc_window_bytes_now"], uint64_t(cfg.tx.delay_params.init_cwnd));
}

TEST(UdTransport, ProbeOfLivePeerIsAcknowledged) {
    Link l;
    Sink sa, sb;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 300'000'000);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    const auto to_b = a->peer(b->address());
    ASSERT_EQ(a->probe(to_b), Status::ok);
    EXPECT_FALSE(a->flushed(to_b));
    wait_flushed(*a, *b, to_b);
    EXPECT_TRUE(a->flushed(to_b));
    EXPECT_TRUE(sb.msgs.empty());   // probes are not delivered
    EXPECT_TRUE(sa.failures.empty());
}

TEST(UdTransport, HostileDatagramsAreCountedNotDelivered) {
    Link l;
    Sink sa, sb;
    auto b = make(std::make_unique<LinkQp>(l, 1), sb);
    std::mt19937 rng(3);
    for (int i = 0; i < 2000; ++i) {
        std::vector<uint8_t> junk(rng() % 64);
        for (auto& c : junk) c = uint8_t(rng());
        if (i % 2 && junk.size() >= header_size) {   // well-formed headers with wild fields
            Header h{PktType(1 + rng() % 3), uint8_t(rng()), uint8_t(rng()), 77, uint32_t(rng()),
                     uint32_t(rng()), uint32_t(rng())};
            encode(h, junk.data());
        }
        l.q[1].push_back({UdAddr{{2, {}, 1000}, 10}, junk});
    }
    b->progress();
    for (int i = 0; i < 50; ++i) b->progress();
    // Nothing out of sequence 0.. was delivered as a whole message except what happened to be
    // sequenced right; above all: no crash, and counters account for the junk.
    EXPECT_GT(b->stats().malformed + b->stats().out_of_window + b->stats().duplicates, 0u);
}

// Datagrams are unauthenticated: strangers spraying data after a hole from many sources must not
// make a receiver keep memory without bound (peers first heard from, out-of-order payload), and
// the peer it has an endpoint for still gets every message, in order, over a lossy link, with
// the strangers' holes holding the whole budget. Its losses are resent on b's NAKs (flag_nak),
// not on the timer: before, each of them cost a timeout (470 for these 300 messages; 14 now),
// and under a loaded CI run the stream took longer than its 20 s.
TEST(UdTransport, StrangersCannotPinMemory) {
    Link l;
    l.drop = 0.05;
    Sink sa, sb;
    TransportConfig small;
    small.max_passive_peers = 100;
    small.hold_budget = 256 << 10;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 30'000'000'000ull, 200'000);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb, 30'000'000'000ull, 200'000, small);
    b->peer(a->address());   // b's endpoint for a: not a stranger
    std::vector<uint8_t> pkt(header_size + 1000, 0xab);
    for (uint32_t s = 0; s < 500; ++s) {
        const UdAddr src{{2, {}, 2000}, 100 + s};
        for (uint32_t psn = 1; psn <= 4; ++psn) {
            encode(Header{PktType::data, flag_first | flag_last, 1, 0x1000 + s, psn, 0, 0}, pkt.data());
            l.q[1].push_back({src, pkt});
        }
    }
    while (!l.q[1].empty()) b->progress();
    l.q[0].clear();   // b's ACKs to the strangers (this link hands everything to a)
    const TransportStats st = b->stats();
    EXPECT_EQ(st.peers, 101u);
    EXPECT_EQ(st.peers_refused, 400u * 4);
    const size_t fit = small.hold_budget / (1000 + HoldBudget::per_packet);
    EXPECT_EQ(st.out_of_order, fit);
    EXPECT_EQ(st.over_budget, 100u * 4 - fit);
    EXPECT_TRUE(sb.msgs.empty());
    stream(*a, *b, sb, 300);
    expect_all(sb, 300);
    EXPECT_GT(b->stats().over_budget, st.over_budget);   // a's packets after its losses: not held
    EXPECT_LT(a->stats().timeouts, a->stats().fast_retransmits);   // (measured: 14 and 81)
    EXPECT_TRUE(sa.failures.empty());
}

TEST(UdTransport, SilentSendersGiveTheirReassemblyBack) {
    // 16 sources (the reassembly pool's share: 16 x max_msg here) each send the first fragment of
    // an AM and fall silent (died mid-message, or a stranger's trick). Once they have been silent
    // for a quarter of the peer timeout their reservations go back, and a live peer's
    // multi-packet AMs - refused until then - arrive, all of them, in order, before that peer
    // (same timeout) gives up. Timeouts scaled down: 2 s, retransmissions at most every 50 ms.
    Link l;
    Sink sa, sb;
    TransportConfig small;
    small.tx.max_rto_ns = 50'000'000;
    TransportConfig ca = small;
    small.hold_budget = 256 << 10;   // the pool: max(this, 16 x 64 KiB)
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 2'000'000'000ull, 200'000, ca);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb, 2'000'000'000ull, 200'000, small);
    std::vector<uint8_t> pkt(header_size + 1000, 0xcd);
    for (uint32_t s = 0; s < 16; ++s) {
        const UdAddr src{{2, {}, 3000}, 200 + s};
        encode(Header{PktType::data, flag_first, 1, 0x2000 + s, 0, 0, 0}, pkt.data());
        l.q[1].push_back({src, pkt});
    }
    while (!l.q[1].empty()) b->progress();
    l.q[0].clear();   // b's ACKs to those sources
    ASSERT_EQ(b->stats().reasm_expired, 0u);
    stream(*a, *b, sb, 50, 15);
    expect_all(sb, 50);
    EXPECT_EQ(b->stats().reasm_expired, 16u);
    EXPECT_TRUE(sa.failures.empty());
}

TEST(UdTransport, StrangersRepeatingAFirstFragmentStillGiveItBack) {
    // As above, but the 16 strangers send their first fragment again every 100 ms (well within
    // the 0.5 s they may be silent here): a reservation goes back once its AM stopped advancing,
    // not once its sender stopped sending. Duplicates used to count as a sign of life: the pool
    // stayed full for as long as they came, and the live peer's multi-packet AMs were refused
    // until it timed out (found by review).
    Link l;
    l.only_to_peer = true;   // b's answers to the strangers go nowhere
    Sink sa, sb;
    TransportConfig small;
    small.tx.max_rto_ns = 50'000'000;
    TransportConfig ca = small;
    small.hold_budget = 256 << 10;
    auto a = make(std::make_unique<LinkQp>(l, 0), sa, 2'000'000'000ull, 200'000, ca);
    auto b = make(std::make_unique<LinkQp>(l, 1), sb, 2'000'000'000ull, 200'000, small);
    std::vector<uint8_t> pkt(header_size + 1000, 0xcd);
    auto strangers = [&] {
        for (uint32_t s = 0; s < 16; ++s) {
            encode(Header{PktType::data, flag_first, 1, 0x2000 + s, 0, 0, 0}, pkt.data());
            l.q[1].push_back({UdAddr{{2, {}, 3000}, 200 + s}, pkt});
        }
    };
    strangers();
    while (!l.q[1].empty()) b->progress();
    const Transport::PeerId to_b = a->peer(b->address());
    size_t next = 0;
    auto last = std::chrono::steady_clock::now();
    const auto end = last + std::chrono::seconds(15);
    while (sb.msgs.size() < 50 && sa.failures.empty() && std::chrono::steady_clock::now() < end) {
        for (; next < 50; ++next) {
            std::vector<uint8_t> m = message(next);
            iovec iov{m.data(), m.size()};
            const Status st = a->send_am(to_b, uint8_t(next % 32), &iov, 1);
            if (st == Status::no_resource) break;
            ASSERT_EQ(st, Status::ok);
        }
        if (std::chrono::steady_clock::now() - last > std::chrono::milliseconds(100)) {
            last = std::chrono::steady_clock::now();
            strangers();
        }
        a->progress();
        b->progress();
    }
    expect_all(sb, 50);
    EXPECT_EQ(b->stats().reasm_expired, 16u);
    EXPECT_TRUE(sa.failures.empty());
}

// The userspace device's UD QPs on loopback: real sockets, real RoCEv2 packets, faults injected.
std::unique_ptr<DatagramQp> sw_qp(double faults) {
    sw::UdQpConfig c;
    c.faults.drop = faults;
    c.faults.duplicate = faults / 2;
    c.faults.reorder = faults;
    c.faults.corrupt = faults / 5;
    c.faults.seed = 11;
    std::unique_ptr<DatagramQp> qp;
    EXPECT_EQ(sw::open_ud_qp(c, qp), Status::ok);
    return qp;
}

TEST(UdTransportSw, LoopbackExactUnderInjectedFaults) {
    Sink sa, sb;
    auto a = make(sw_qp(0.05), sa);
    auto b = make(sw_qp(0.05), sb);
    stream(*a, *b, sb, 3000, 60);
    expect_all(sb, 3000);
    const DatagramStats d = a->qp_stats();
    EXPECT_GT(d.faults_dropped, 0u);
    EXPECT_GT(b->qp_stats().icrc_errors, 0u);   // corrupted packets are caught by the ICRC
    EXPECT_GT(a->stats().retransmits, 0u);
}

TEST(UdTransportSw, BadMtuAndAddressRejected) {
    sw::UdQpConfig c;
    c.mtu = 1000;
    std::unique_ptr<DatagramQp> qp;
    EXPECT_EQ(sw::open_ud_qp(c, qp), Status::invalid_param);
    c.mtu = 4096;
    c.ip = "192.0.2.55";   // TEST-NET: not a local address
    EXPECT_EQ(sw::open_ud_qp(c, qp), Status::no_device);
    c.ip = "not-an-ip";
    EXPECT_EQ(sw::open_ud_qp(c, qp), Status::no_device);
}

// What a UD QP takes does not depend on its own MTU setting but on what RoCE allows: a peer set
// to a larger MTU is understood (as on a NIC, whose receive buffers are sized for the port), and a
// packet above the largest IB MTU (4096 bytes of payload; a socket takes up to 64 KiB) is dropped.
// It used to be handed up whole, and an AM over the transport's limit delivered (found by fuzz_ud).
TEST(UdTransportSw, PayloadAboveTheLargestMtuIsDropped) {
    sw::UdQpConfig big, small;
    big.mtu = 4096;
    small.mtu = 1024;
    std::unique_ptr<DatagramQp> a, b;
    ASSERT_EQ(sw::open_ud_qp(big, a), Status::ok);
    ASSERT_EQ(sw::open_ud_qp(small, b), Status::ok);
    std::vector<uint8_t> payload(4097, 1);
    iovec io{payload.data(), 4096};
    ASSERT_EQ(a->send(b->address(), 0, &io, 1), Status::ok);
    // The same packet with one byte more, ICRC and all, from a plain socket.
    sw::UdpSocket raw;
    ASSERT_EQ(raw.open("127.0.0.1", 0, 0, 0), Status::ok);
    wire::Packet pkt;
    pkt.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
    pkt.bth.dest_qp = b->address().qpn;
    pkt.deth.qkey = small.qkey;
    pkt.deth.src_qp = 77;
    wire::IpContext ip;
    sw::fill_ip_context(raw.local(), b->address().net, ip);
    std::vector<uint8_t> buf(8192);
    const size_t n = wire::build(pkt, payload, ip, buf);
    ASSERT_GT(n, 4097u);
    sockaddr_storage ss;
    const socklen_t sl = sw::to_sockaddr(b->address().net, ss);
    ASSERT_EQ(::sendto(raw.fd(), buf.data(), n, 0, reinterpret_cast<sockaddr*>(&ss), sl), ssize_t(n));
    std::vector<size_t> got;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (b->stats().malformed + got.size() < 2 && std::chrono::steady_clock::now() < end)
        b->poll([&](const Datagram& d) { got.push_back(d.len); }, 8);
    EXPECT_EQ(got, std::vector<size_t>{4096});
    EXPECT_EQ(b->stats().malformed, 1u);
    EXPECT_EQ(b->stats().icrc_errors, 0u);
}

// A poll reads at most `max` datagrams, junk or not: it counted only those it handed up, so a
// flood of anyone's datagrams to the port kept one call (and the transport's lock) for as long as
// it came. 500 junk datagrams queued, then a real one: polls of 16 read 16 each, and the real one
// comes once the junk before it is read.
TEST(UdTransportSw, APollReadsAtMostMaxDatagramsOfJunk) {
    sw::UdQpConfig c;
    std::unique_ptr<DatagramQp> a, b;
    ASSERT_EQ(sw::open_ud_qp(c, a), Status::ok);
    ASSERT_EQ(sw::open_ud_qp(c, b), Status::ok);
    sw::UdpSocket raw;
    ASSERT_EQ(raw.open("127.0.0.1", 0, 0, 0), Status::ok);
    sockaddr_storage ss;
    const socklen_t sl = sw::to_sockaddr(b->address().net, ss);
    const uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    size_t queued = 0;
    for (int i = 0; i < 500; ++i) {
        const ssize_t n = ::sendto(raw.fd(), junk, sizeof(junk), 0, reinterpret_cast<sockaddr*>(&ss), sl);
        queued += n == ssize_t(sizeof(junk));
    }
    uint8_t byte = 9;
    iovec io{&byte, 1};
    ASSERT_EQ(a->send(b->address(), 0, &io, 1), Status::ok);
    size_t got = 0, polls = 0;
    uint64_t read_before = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got == 0 && std::chrono::steady_clock::now() < end) {
        got += b->poll([&](const Datagram& d) { EXPECT_EQ(d.len, 1u); }, 16);
        const uint64_t read = b->stats().rx_packets;
        EXPECT_LE(read - read_before, 16u) << "poll " << polls;
        read_before = read;
        ++polls;
    }
    EXPECT_EQ(got, 1u);
    const uint64_t dropped = b->stats().malformed;
    EXPECT_GT(dropped, 64u);   // (the socket kept that many of the 500 at least)
    EXPECT_LE(dropped, queued);
    EXPECT_GE(polls, dropped / 16);
}

// ud_roce's socket sends at the configured priority (the PCP behind a VLAN's egress-qos-map), read
// back from the kernel: and at 0 by default, not at rt_tos2priority(ToS) = 2 that IP_TOS 106 alone
// would leave.
TEST(UdTransportSw, SocketPriorityIsTheConfiguredOne) {
    for (const uint8_t prio : {uint8_t(0), uint8_t(4)}) {
        sw::UdQpConfig c;
        c.traffic_class = 106;
        c.priority = prio;
        std::unique_ptr<DatagramQp> qp;
        ASSERT_EQ(sw::open_ud_qp(c, qp), Status::ok);
        int got = -1;
        socklen_t l = sizeof(got);
        ASSERT_EQ(getsockopt(qp->event_fd(), SOL_SOCKET, SO_PRIORITY, &got, &l), 0);
        EXPECT_EQ(got, int(prio));
    }
}

} // namespace
} // namespace roce::ud

namespace roce::ud {
namespace {

// Ping-pong and a one-way stream on a clean loopback: no loss, so no retransmission may happen
// (a spurious one means the ACK path is broken).
TEST(UdTransportSw, CleanLoopbackNeedsNoRetransmission) {
    Sink sa, sb;
    auto a = make(sw_qp(0), sa, 30'000'000'000ull, 20'000'000);
    auto b = make(sw_qp(0), sb, 30'000'000'000ull, 20'000'000);
    const auto to_b = a->peer(b->address());
    const auto to_a = b->peer(a->address());
    for (int i = 0; i < 5000; ++i) {
        uint64_t x = uint64_t(i);
        iovec iov{&x, sizeof(x)};
        ASSERT_EQ(a->send_am(to_b, 1, &iov, 1), Status::ok);
        while (sb.msgs.size() < size_t(i + 1)) { a->progress(); b->progress(); }
        ASSERT_EQ(b->send_am(to_a, 2, &iov, 1), Status::ok);
        while (sa.msgs.size() < size_t(i + 1)) { a->progress(); b->progress(); }
    }
    EXPECT_EQ(a->stats().retransmits + b->stats().retransmits, 0u)
            << a->stats_text() << "\n" << b->stats_text();
    sb.msgs.clear();
    std::vector<uint8_t> m(4096, 7);
    iovec iov{m.data(), m.size()};
    size_t sent = 0;
    while (sb.msgs.size() < 20000) {
        while (sent < 20000 && a->send_am(to_b, 3, &iov, 1) == Status::ok) ++sent;
        a->progress();
        b->progress();
    }
    EXPECT_EQ(a->stats().retransmits + b->stats().retransmits, 0u)
            << a->stats_text() << "\n" << b->stats_text();
}

} // namespace
} // namespace roce::ud

namespace roce::ud {
namespace {

// Bulk under 5% loss and 5% reordering on real sockets: 64 KiB messages (17 packets each) keep
// the window full, so losses hit every position in it (the tail too, where only the timer helps).
TEST(UdTransportSw, BulkUnderLossKeepsMoving) {
    Sink sa, sb;
    auto qp = [](uint64_t seed) {
        sw::UdQpConfig c;
        c.faults.drop = 0.05;
        c.faults.reorder = 0.05;
        c.faults.seed = seed;
        std::unique_ptr<DatagramQp> q;
        EXPECT_EQ(sw::open_ud_qp(c, q), Status::ok);
        return q;
    };
    auto a = make(qp(1), sa, 5'000'000'000ull, 2'000'000);
    auto b = make(qp(2), sb, 5'000'000'000ull, 2'000'000);
    const auto to_b = a->peer(b->address());
    std::vector<uint8_t> m(65536);
    for (size_t k = 0; k < m.size(); ++k) m[k] = uint8_t(k * 7);
    iovec iov{m.data(), m.size()};
    size_t sent = 0;
    const size_t total = 600;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (sb.msgs.size() < total && sa.failures.empty() && std::chrono::steady_clock::now() < end) {
        while (sent < total && a->send_am(to_b, 3, &iov, 1) == Status::ok) ++sent;
        a->progress();
        b->progress();
    }
    EXPECT_TRUE(sa.failures.empty()) << a->stats_text();
    ASSERT_EQ(sb.msgs.size(), total) << a->stats_text() << "\n" << b->stats_text();
    for (auto& msg : sb.msgs) ASSERT_EQ(msg.second, m);
}

} // namespace
} // namespace roce::ud
