// Batched sends of ud_roce on the userspace device: send_held() keeps datagrams until flush(),
// a full batch or the next poll(), and they leave as UDP_SEGMENT runs (one per destination and
// length, the IPv4 ID patched into each segment's ICRC) that the receiver splits (GRO) and
// verifies; the transport holds what the owner posts between progress calls and what a receive
// pass sends, and its background thread sends what waits once the owner stops calling.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "sw/test_support.hpp"
#include "sw/ud_qp.hpp"
#include "ud/transport.hpp"
#include "wire/icrc.hpp"

namespace roce::ud {
namespace {

std::unique_ptr<DatagramQp> open_qp(const char* ip) {
    sw::UdQpConfig c;
    c.ip = ip;
    std::unique_ptr<DatagramQp> q;
    return sw::open_ud_qp(c, q) == Status::ok ? std::move(q) : nullptr;
}

std::vector<uint8_t> payload(size_t i) {
    const size_t len = i % 7 == 3 ? 4096 : i % 5 == 0 ? 100 : 1000;   // runs, and shorter ends
    std::vector<uint8_t> v(len);
    for (size_t k = 0; k < len; ++k) v[k] = uint8_t(i * 17 + k);
    return v;
}

struct Got {
    UdAddr src;
    std::vector<uint8_t> data;
};

std::vector<Got> drain(DatagramQp& q, size_t want) {
    std::vector<Got> got;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got.size() < want && std::chrono::steady_clock::now() < end) {
        q.poll([&](const Datagram& d) { got.push_back({d.src, {d.data, d.data + d.len}}); }, 64);
    }
    return got;
}

// 31 held datagrams to two receivers, interleaved in runs: nothing leaves before flush(), then
// everything arrives once, in order per receiver, with a valid ICRC (a wrong IPv4-ID patch
// would count an ICRC error and drop the segment), in fewer system calls than datagrams.
TEST(UdBatch, HeldDatagramsLeaveAtFlushInOrderWithValidIcrc) {
    for (const char* ip : {"127.0.0.1", "::1"}) {
        auto a = open_qp(ip), b = open_qp(ip), c = open_qp(ip);
        if (!a && std::string(ip) == "::1") GTEST_SKIP() << "no IPv6 loopback";
        ASSERT_TRUE(a && b && c) << ip;
        std::vector<size_t> to_b, to_c;
        for (size_t i = 0; i < 31; ++i) {
            const bool b_side = (i / 4) % 3 != 2;   // runs of 4 to one side
            const std::vector<uint8_t> p = payload(i);
            iovec iov{const_cast<uint8_t*>(p.data()), p.size()};
            ASSERT_EQ(a->send_held(b_side ? b->address() : c->address(), 0, &iov, 1), Status::ok);
            (b_side ? to_b : to_c).push_back(i);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(b->poll([](const Datagram&) {}, 64), 0u) << "a held datagram left before flush";
        EXPECT_EQ(a->stats().tx_packets, 0u);
        a->flush();
        EXPECT_EQ(a->stats().tx_packets, 31u);
        EXPECT_GT(a->stats().tx_batches, 0u);
        EXPECT_LT(a->stats().tx_batches, 31u);
        for (auto [q, idx] : {std::pair{b.get(), &to_b}, std::pair{c.get(), &to_c}}) {
            const std::vector<Got> got = drain(*q, idx->size());
            ASSERT_EQ(got.size(), idx->size()) << ip;
            for (size_t k = 0; k < got.size(); ++k) {
                EXPECT_EQ(got[k].data, payload((*idx)[k])) << ip << " datagram " << (*idx)[k];
                EXPECT_EQ(got[k].src, a->address());
            }
            EXPECT_EQ(q->stats().icrc_errors, 0u) << ip;
            EXPECT_EQ(q->stats().malformed, 0u) << ip;
        }
    }
}

// The kernel gives a run's segments IPv4 IDs 0, 1, 2, ... and the ICRC covers the ID: a plain
// socket receives a held run and solves each datagram's ICRC for its ID, which must count up
// within the run (an unpatched ICRC verifies for ID 0 only, and rxe or a NIC would drop it).
TEST(UdBatch, SegmentIcrcsCarryTheirIpv4Ids) {
    auto a = open_qp("127.0.0.1");
    ASSERT_TRUE(a);
    sockaddr_in sa;
    const int fd = sw::testing::loopback_udp_socket(sa);
    ASSERT_GE(fd, 0);
    UdAddr dst;
    dst.net.family = AF_INET;
    std::memcpy(dst.net.ip, &sa.sin_addr, 4);
    dst.net.port = ntohs(sa.sin_port);
    dst.qpn = 77;
    std::vector<uint8_t> p(1000, 0x5a);
    iovec iov{p.data(), p.size()};
    for (int i = 0; i < 10; ++i) ASSERT_EQ(a->send_held(dst, 0, &iov, 1), Status::ok);
    a->flush();
    wire::IpContext ip;
    std::memcpy(ip.src_ip, a->address().net.ip, 4);
    std::memcpy(ip.dst_ip, &sa.sin_addr, 4);
    ip.src_port = a->address().net.port;
    ip.dst_port = dst.net.port;
    ip.ipv4_id_known = false;
    std::vector<uint8_t> buf(70000);
    int expect = 0, nonzero = 0;
    for (int k = 0; k < 10; ++k) {
        const ssize_t r = recv(fd, buf.data(), buf.size(), 0);
        ASSERT_GT(r, 0) << "datagram " << k;
        uint16_t id = 0xffff;
        ASSERT_TRUE(wire::icrc_verify_any_ipv4_id(ip, {buf.data(), size_t(r)}, &id)) << k;
        if (id != expect) {
            EXPECT_EQ(id, 0) << "datagram " << k << ": IDs count 0, 1, 2, ... in a run";
        }
        nonzero += id != 0;
        expect = id + 1;
    }
    EXPECT_GT(nonzero, 0);
    close(fd);
}

// A send() (not held) takes what waits along, ahead of itself; a full batch leaves by itself.
TEST(UdBatch, PlainSendAndFullBatchFlush) {
    auto a = open_qp("127.0.0.1"), b = open_qp("127.0.0.1");
    ASSERT_TRUE(a && b);
    uint32_t n = 0;
    auto put = [&](bool held) {
        iovec iov{&n, sizeof(n)};
        const Status s = held ? a->send_held(b->address(), 0, &iov, 1) : a->send(b->address(), 0, &iov, 1);
        ++n;
        return s;
    };
    for (int i = 0; i < 5; ++i) ASSERT_EQ(put(true), Status::ok);
    ASSERT_EQ(put(false), Status::ok);
    EXPECT_EQ(a->stats().tx_packets, 6u);
    for (int i = 0; i < 100; ++i) ASSERT_EQ(put(true), Status::ok);
    EXPECT_GE(a->stats().tx_packets, 6u + 96u) << "full batches were not sent";
    a->flush();
    const std::vector<Got> got = drain(*b, 106);
    ASSERT_EQ(got.size(), 106u);
    for (uint32_t k = 0; k < 106; ++k) {
        uint32_t v;
        std::memcpy(&v, got[k].data.data(), sizeof(v));
        EXPECT_EQ(v, k);
    }
}

struct Sink {
    std::vector<std::vector<uint8_t>> msgs;
    std::vector<Status> failures;
    size_t msgs_at_failure = 0;   // messages delivered before the first failure report
};

// busy_outer_lock: handlers are asynchronous but their lock is never free for the thread (UCX's
// async lock as a mutex the owner holds): the thread cannot take over, yet must still send.
std::unique_ptr<Transport> transport(Sink& s, uint64_t idle_takeover_ns, bool busy_outer_lock = false,
                                     TransportConfig cfg = {}) {
    cfg.progress_thread = true;
    cfg.idle_takeover_ns = idle_takeover_ns;
    Transport::Callbacks cb;
    cb.deliver = [&s](Transport::PeerId, uint8_t, const uint8_t* d, size_t n) {
        s.msgs.emplace_back(d, d + n);
    };
    cb.failed = [&s](Transport::PeerId, Status why) {
        if (s.failures.empty()) s.msgs_at_failure = s.msgs.size();
        s.failures.push_back(why);
    };
    if (busy_outer_lock) {
        cb.async_ok = [](uint8_t) { return true; };
        cb.outer_lock = [](bool acquire) { return !acquire; };
    }
    return std::make_unique<Transport>(cfg, open_qp("127.0.0.1"), cb);
}

// The owner of `a` calls progress once, then posts messages 0..n-1 (each its index) to `b`.
void progress_then_burst(Transport& a, Transport& b, uint32_t n) {
    const auto to_b = a.peer(b.address());
    a.progress();
    for (uint32_t i = 0; i < n; ++i) {
        iovec iov{&i, sizeof(i)};
        ASSERT_EQ(a.send_am(to_b, 1, &iov, 1), Status::ok);
    }
}

// The first message after the owner's progress call leaves at once (a ping-pong's reply); the
// rest of a burst waits for the next progress call, then leaves in batches, in order.
TEST(UdBatch, TransportHoldsABurstUntilProgress) {
    Sink sa, sb;
    auto a = transport(sa, 10'000'000'000ull);   // the thread never takes over here
    auto b = transport(sb, 10'000'000'000ull);
    ASSERT_NO_FATAL_FAILURE(progress_then_burst(*a, *b, 20));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (std::chrono::steady_clock::now() < end) b->progress();
    EXPECT_EQ(sb.msgs.size(), 1u) << "only the first message leaves before the owner's progress";
    a->progress();
    const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (sb.msgs.size() < 20 && std::chrono::steady_clock::now() < end2) {
        a->progress();
        b->progress();
    }
    ASSERT_EQ(sb.msgs.size(), 20u);
    for (uint32_t i = 0; i < 20; ++i) {
        uint32_t v;
        std::memcpy(&v, sb.msgs[i].data(), sizeof(v));
        EXPECT_EQ(v, i);
    }
    EXPECT_GT(a->qp_stats().tx_batches, 0u);
    EXPECT_EQ(a->stats().retransmits, 0u);
}

// An owner that posts a burst and then stops calling: its background thread sends what waits
// (OwnerWatch wakes it once the owner has been idle for the takeover time, 5 ms here).
// Also when the thread cannot take the handlers' lock (it sends without it).
TEST(UdBatch, ThreadSendsWhatWaitsWhenOwnerStops) {
    for (const bool busy_outer_lock : {false, true}) {
        Sink sa, sb;
        auto a = transport(sa, 5'000'000, busy_outer_lock);
        auto b = transport(sb, 10'000'000'000ull);
        ASSERT_NO_FATAL_FAILURE(progress_then_burst(*a, *b, 10));
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (sb.msgs.size() < 10 && std::chrono::steady_clock::now() < end) b->progress();
        EXPECT_EQ(sb.msgs.size(), 10u) << "held messages never left while the owner was away"
                                       << (busy_outer_lock ? " (outer lock busy)" : "");
    }
}

// A receiver whose owner is away (computing outside MPI): its thread keeps what arrives for the
// owner, but no more than hold_budget; beyond it datagrams are not taken and the sender
// retransmits them, told that the receiver is busy: an owner away for longer than the sender's
// peer timeout (0.3 s here, away 1 s) is not given up. Once the owner is back, every message
// arrives, in order, exactly once.
TEST(UdBatch, AbsentOwnerKeepsAtMostHoldBudget) {
    constexpr size_t budget = 256 << 10, len = 1000;
    constexpr uint32_t n = 600;   // ~600 KB: more than twice the budget
    Sink sa, sb;
    TransportConfig ca, cb;
    ca.tx.peer_timeout_ns = 300'000'000;
    ca.tx.max_rto_ns = 50'000'000;   // (retransmissions, and so busy ACKs, well within the timeout)
    cb.hold_budget = budget;
    auto a = transport(sa, 10'000'000'000ull, false, ca);
    auto b = transport(sb, 5'000'000, false, cb);
    const auto to_b = a->peer(b->address());
    b->progress();   // the owner's last call for a while
    std::vector<uint8_t> m(len);
    uint32_t next = 0;
    auto send_some = [&] {
        while (next < n) {
            std::memcpy(m.data(), &next, sizeof(next));
            iovec iov{m.data(), m.size()};
            const Status st = a->send_am(to_b, 1, &iov, 1);
            if (st == Status::no_resource) break;
            ASSERT_EQ(st, Status::ok);
            ++next;
        }
        a->progress();
    };
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (b->stats().over_budget == 0 && std::chrono::steady_clock::now() < end) {
        ASSERT_NO_FATAL_FAILURE(send_some());
    }
    const auto away_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (std::chrono::steady_clock::now() < away_until) {
        ASSERT_NO_FATAL_FAILURE(send_some());
    }
    EXPECT_EQ(a->peer_status(to_b), Status::ok) << "the busy receiver was given up";
    // A new peer's first datagram finds the receiver busy too (and gets a busy ACK first thing).
    Sink sc;
    auto c = transport(sc, 10'000'000'000ull, false, ca);
    const auto c_to_b = c->peer(b->address());
    uint32_t mark = 0xc0ffee;
    iovec iov{&mark, sizeof(mark)};
    ASSERT_EQ(c->send_am(c_to_b, 2, &iov, 1), Status::ok);
    const auto c_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (std::chrono::steady_clock::now() < c_until) {
        c->progress();
        ASSERT_NO_FATAL_FAILURE(send_some());
    }
    EXPECT_EQ(c->peer_status(c_to_b), Status::ok);
    const TransportStats away = b->stats();
    EXPECT_GT(away.over_budget, 0u) << "the thread took everything (" << away.deferred_bytes << " bytes kept)";
    EXPECT_LE(away.deferred_bytes, budget + len + 64);
    EXPECT_TRUE(sb.msgs.empty()) << "delivered without the owner";
    end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (sb.msgs.size() < n + 1 && std::chrono::steady_clock::now() < end) {
        ASSERT_NO_FATAL_FAILURE(send_some());
        c->progress();
        b->progress();
    }
    ASSERT_EQ(sb.msgs.size(), size_t(n) + 1);
    uint32_t next_a = 0;   // a's messages in order, c's one somewhere among them
    for (const auto& msg : sb.msgs) {
        uint32_t v;
        std::memcpy(&v, msg.data(), sizeof(v));
        if (msg.size() == sizeof(v)) {
            EXPECT_EQ(v, mark);
            continue;
        }
        ASSERT_EQ(v, next_a++);
    }
    EXPECT_EQ(next_a, n);
    EXPECT_EQ(b->stats().deferred_bytes, 0u);
}

// AMs the background thread acknowledged for an absent owner are the owner's even if their
// sender fails before the owner is back (here a exits; b's thread, retransmitting b's own AM to
// it, gives a up after b's 0.3 s peer timeout): a counted them delivered. They used to be
// dropped on the owner's return, with no error anywhere.
TEST(UdBatch, AcknowledgedAmsOfAPeerThatFailedStillArrive) {
    Sink sa, sb;
    TransportConfig cb;
    cb.tx.peer_timeout_ns = 300'000'000;
    cb.tx.max_rto_ns = 50'000'000;
    auto a = transport(sa, 10'000'000'000ull);
    auto b = transport(sb, 5'000'000, false, cb);
    const auto to_b = a->peer(b->address());
    const auto to_a = b->peer(a->address());
    uint32_t v = 0;
    iovec iov{&v, sizeof(v)};
    ASSERT_EQ(b->send_am(to_a, 1, &iov, 1), Status::ok);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((sa.msgs.empty() || !b->flushed(to_a)) && std::chrono::steady_clock::now() < end) {
        a->progress();
        b->progress();   // the owner's last calls for a while
    }
    ASSERT_EQ(sa.msgs.size(), 1u);
    for (v = 1; v <= 5; ++v) ASSERT_EQ(a->send_am(to_b, 1, &iov, 1), Status::ok);
    end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!a->flushed(to_b) && std::chrono::steady_clock::now() < end) a->progress();
    ASSERT_TRUE(a->flushed(to_b)) << "b's thread acknowledged a's AMs";
    a.reset();
    ASSERT_EQ(b->send_am(to_a, 1, &iov, 1), Status::ok);   // nobody acknowledges this one
    end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (b->peer_status(to_a) == Status::ok && std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_NE(b->peer_status(to_a), Status::ok) << "b's thread gave a up";
    EXPECT_TRUE(sb.msgs.empty()) << "delivered without the owner";
    b->progress();   // the owner is back
    ASSERT_EQ(sb.msgs.size(), 5u);
    for (uint32_t i = 0; i < 5; ++i) {
        std::memcpy(&v, sb.msgs[i].data(), sizeof(v));
        EXPECT_EQ(v, i + 1);
    }
    ASSERT_EQ(sb.failures.size(), 1u);
    EXPECT_EQ(sb.failures[0], Status::timeout);
    EXPECT_EQ(sb.msgs_at_failure, 5u) << "the messages before the failure report";
}

} // namespace
} // namespace roce::ud
