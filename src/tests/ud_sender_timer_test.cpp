// ud_roce's retransmission timer after a gap in the caller's runs (Sender::on_timer's were_away):
// the first expiry then restarts the timer, the next one fires even if the caller is still rare.
#include <gtest/gtest.h>

#include <vector>

#include "ud/sender.hpp"

namespace roce::ud {
namespace {

constexpr uint64_t ms = 1'000'000;

struct Count {
    unsigned sent = 0;
    bool operator()(const Sender::Packet&, bool) { ++sent; return true; }
};

// A sender with a 20 ms minimum RTO and `packets` 100-byte packets sent at time 0.
struct Started {
    explicit Started(unsigned packets) : s(config()) {
        std::vector<uint8_t> b(100, 1);
        iovec iov{b.data(), b.size()};
        for (unsigned i = 0; i < packets; ++i) s.enqueue(PktType::data, 0, 1, &iov, 1, 0, b.size(), 0);
        s.transmit(0, Sender::Emit(n));
    }
    static SenderConfig config() {
        SenderConfig c;
        c.min_rto_ns = 20 * ms;
        return c;
    }
    Sender s;
    Count n;
};

TEST(UdSenderTimer, ExpiryAfterAGapWaitsOneTimeoutThenFires) {
    Started t(3);
    Sender& s = t.s;
    Count& n = t.n;
    ASSERT_EQ(n.sent, 3u);
    // 25 ms later, the caller back from a gap: restarted, nothing resent.
    EXPECT_TRUE(s.on_timer(25 * ms, Sender::Emit(n), true));
    EXPECT_EQ(n.sent, 3u);
    EXPECT_EQ(s.stats().timers_deferred, 1u);
    EXPECT_EQ(s.stats().timeouts, 0u);
    // Before a timeout from the restart: still nothing, gap or not.
    EXPECT_TRUE(s.on_timer(40 * ms, Sender::Emit(n), true));
    EXPECT_EQ(n.sent, 3u);
    // A timeout after the restart, the caller again away: it fires now (once per timeout).
    EXPECT_TRUE(s.on_timer(46 * ms, Sender::Emit(n), true));
    EXPECT_EQ(s.stats().timeouts, 1u);
    EXPECT_GT(n.sent, 3u);
    EXPECT_EQ(s.stats().timers_deferred, 1u);
}

TEST(UdSenderTimer, WithoutAGapTheTimerFiresOnTime) {
    Started t(1);
    Sender& s = t.s;
    Count& n = t.n;
    EXPECT_TRUE(s.on_timer(19 * ms, Sender::Emit(n)));
    EXPECT_EQ(s.stats().timeouts, 0u);
    EXPECT_TRUE(s.on_timer(21 * ms, Sender::Emit(n)));
    EXPECT_EQ(s.stats().timeouts, 1u);
    EXPECT_EQ(n.sent, 2u);
}

// The peer SACKed psn 2, then its cumulative ACK stops at 2: it let the held copy go (a first
// fragment with no room in its reassembly pool waits for this packet again). The packet counts
// as missing again: the timer resends it (before, only packets never SACKed were resent, and
// with psn 3 unreported the whole-window exception did not apply: psn 2 never came again and
// the peer failed a live receiver).
TEST(UdSenderTimer, RenegedPacketIsSentAgain) {
    struct Psns {
        std::vector<uint32_t> sent;
        bool operator()(const Sender::Packet& p, bool) { sent.push_back(p.psn); return true; }
    } psns;
    Sender s(Started::config());
    std::vector<uint8_t> b(100, 1);
    iovec iov{b.data(), b.size()};
    for (int i = 0; i < 4; ++i) s.enqueue(PktType::data, 0, 1, &iov, 1, 0, b.size(), 0);
    s.transmit(0, Sender::Emit(psns));
    ASSERT_EQ(psns.sent, (std::vector<uint32_t>{0, 1, 2, 3}));
    s.on_ack(1, 0b1, 1 * ms, Sender::Emit(psns));    // has 0; 1 missing; 2 held (SACK bit 0: psn 1 + 1)
    s.on_ack(2, 0, 2 * ms, Sender::Emit(psns));      // took 1, stopped at 2: let it go
    psns.sent.clear();
    EXPECT_TRUE(s.on_timer(2 * ms + 200 * ms, Sender::Emit(psns)));
    EXPECT_EQ(s.stats().timeouts, 1u);
    ASSERT_FALSE(psns.sent.empty());
    EXPECT_EQ(psns.sent.front(), 2u) << "the reneged packet first";
}

} // namespace
} // namespace roce::ud
