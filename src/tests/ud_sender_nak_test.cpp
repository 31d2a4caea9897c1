// ud_roce's NAK (header flag_nak): a receiver whose hold budget is spent drops what comes beyond
// a hole and says so; the sender goes back to the hole at once instead of waiting for its timer
// (before: one timeout per loss for as long as strangers filled the budget).
#include <gtest/gtest.h>

#include <vector>

#include "ud/receiver.hpp"
#include "ud/sender.hpp"

namespace roce::ud {
namespace {

constexpr uint64_t ms = 1'000'000;

struct Psns {
    std::vector<uint32_t> sent;
    bool operator()(const Sender::Packet& p, bool) { sent.push_back(p.psn); return true; }
};

// Queues and sends `n` 100-byte packets at time 0; `psns` is left empty.
void send_packets(Sender& s, Psns& psns, int n) {
    std::vector<uint8_t> b(100, 1);
    iovec iov{b.data(), b.size()};
    for (int i = 0; i < n; ++i) s.enqueue(PktType::data, 0, 1, &iov, 1, 0, b.size(), 0);
    s.transmit(0, Sender::Emit(psns));
    ASSERT_EQ(psns.sent.size(), size_t(n));
    psns.sent.clear();
}

// A receiver whose budget holds one 100-byte packet out of order.
struct OneHeld {
    OneHeld() { budget.limit = 100 + HoldBudget::per_packet; }
    void give(uint32_t psn) {
        const Header h{PktType::data, flag_first | flag_last, 1, 7, psn, 0, 0};
        r.receive(h, payload.data(), payload.size(), 0, [](uint8_t, const uint8_t*, size_t) {});
    }
    HoldBudget budget;
    Receiver r{ReceiverConfig{}, &budget};
    std::vector<uint8_t> payload = std::vector<uint8_t>(100, 0x5a);
};

TEST(UdNak, ReceiverSaysSoWhenItDropsBeyondAHole) {
    OneHeld t;
    Receiver& r = t.r;
    t.give(1);   // hole at 0: held
    EXPECT_FALSE(r.nak()) << "a held packet is reported by SACK";
    t.give(2);   // over budget: dropped
    EXPECT_EQ(r.stats().over_budget, 1u);
    EXPECT_TRUE(r.nak());
    EXPECT_TRUE(r.ack_now());
    r.ack_sent();
    EXPECT_FALSE(r.nak()) << "said once per ACK";
    t.give(0);   // in order: 0 and 1 delivered
    EXPECT_EQ(r.ack(), 2u);
    EXPECT_FALSE(r.nak());
}

TEST(UdNak, SenderGoesBackToTheHoleOncePerHole) {
    SenderConfig c;
    c.min_rto_ns = 20 * ms;
    Sender s(c);
    Psns psns;
    send_packets(s, psns, 8);
    // 0 and 1 arrived, 2 was lost, 3.. were dropped beyond the hole: well before any timeout.
    s.on_ack(2, 0, 1 * ms, Sender::Emit(psns), 0, true);
    EXPECT_EQ(s.stats().timeouts, 0u);
    EXPECT_EQ(s.stats().fast_retransmits, 1u);
    EXPECT_EQ(psns.sent, (std::vector<uint32_t>{2, 3, 4, 5, 6, 7})) << "go-back-N: all it did not report";
    EXPECT_EQ(s.stats().window_cuts, 1u);
    // The other dropped packets' NAKs, for the same hole: nothing more.
    psns.sent.clear();
    s.on_ack(2, 0, 1 * ms, Sender::Emit(psns), 0, true);
    s.on_ack(2, 0, 2 * ms, Sender::Emit(psns), 0, true);
    EXPECT_TRUE(psns.sent.empty());
    EXPECT_EQ(s.stats().fast_retransmits, 1u);
    // 2..4 arrived, 5 was lost again: a new hole, answered at once (one window cut per episode).
    s.on_ack(5, 0, 3 * ms, Sender::Emit(psns), 0, true);
    ASSERT_FALSE(psns.sent.empty());
    EXPECT_EQ(psns.sent.front(), 5u);
    EXPECT_EQ(s.stats().fast_retransmits, 2u);
    EXPECT_EQ(s.stats().window_cuts, 1u);
    // Without the flag an ACK at a new hole is no news (no SACK: the timer's).
    psns.sent.clear();
    s.on_ack(6, 0, 4 * ms, Sender::Emit(psns));
    EXPECT_TRUE(psns.sent.empty());
    EXPECT_EQ(s.stats().fast_retransmits, 2u);
}

// More was in flight than the cut window: the go-back resends what fits, and each ACK that
// moves makes room for the next of the dropped ones (without it they waited for the timer: the
// peer drops nothing more, so no further NAK comes).
TEST(UdNak, TheGoBackGoesOnAsAcksComeIn) {
    SenderConfig c;
    c.init_window = 8;
    Sender s(c);
    Psns psns;
    send_packets(s, psns, 8);
    s.on_ack(2, 0, 1 * ms, Sender::Emit(psns), 0, true);   // 2 lost, 3..7 dropped
    EXPECT_EQ(psns.sent, (std::vector<uint32_t>{2, 3, 4, 5})) << "the cut window (4)";
    psns.sent.clear();
    s.on_ack(4, 0, 2 * ms, Sender::Emit(psns));   // 2 and 3 came: room for two more
    EXPECT_EQ(psns.sent, (std::vector<uint32_t>{6, 7}));
    psns.sent.clear();
    s.on_ack(6, 0, 3 * ms, Sender::Emit(psns));   // nothing dropped is left to resend
    EXPECT_TRUE(psns.sent.empty());
    s.on_ack(8, 0, 4 * ms, Sender::Emit(psns));
    EXPECT_TRUE(s.idle());
    EXPECT_EQ(s.stats().timeouts, 0u);
    EXPECT_EQ(s.stats().retransmits, 6u);
}

// A resend of the go-back is lost too: the timer resends the cut window's worth from the hole,
// and the go-back goes on with the ACKs from there — one timeout, not one per window.
TEST(UdNak, AGoBackResumesAfterATimeout) {
    SenderConfig c;
    c.init_window = 8;
    c.min_rto_ns = 20 * ms;
    Sender s(c);
    Psns psns;
    send_packets(s, psns, 8);
    s.on_ack(2, 0, 1 * ms, Sender::Emit(psns), 0, true);
    ASSERT_EQ(psns.sent, (std::vector<uint32_t>{2, 3, 4, 5}));
    psns.sent.clear();
    EXPECT_TRUE(s.on_timer(1 * ms + 200 * ms, Sender::Emit(psns)));   // 2's resend lost
    EXPECT_EQ(s.stats().timeouts, 1u);
    EXPECT_EQ(psns.sent, (std::vector<uint32_t>{2, 3})) << "the window cut again (2)";
    psns.sent.clear();
    s.on_ack(4, 0, 202 * ms, Sender::Emit(psns));
    EXPECT_EQ(psns.sent, (std::vector<uint32_t>{4, 5}));
    psns.sent.clear();
    s.on_ack(6, 0, 203 * ms, Sender::Emit(psns));
    EXPECT_EQ(psns.sent, (std::vector<uint32_t>{6, 7}));
    s.on_ack(8, 0, 204 * ms, Sender::Emit(psns));
    EXPECT_TRUE(s.idle());
    EXPECT_EQ(s.stats().timeouts, 1u);
}

TEST(UdNak, AHoleTheSackPathResentIsNotResentAgain) {
    Sender s(SenderConfig{});
    Psns psns;
    send_packets(s, psns, 10);
    // 0 arrived; 1 lost; 2..5 held (SACK), 6.. dropped beyond them (the budget ran out).
    s.on_ack(1, 0b1111, 1 * ms, Sender::Emit(psns), 0, true);
    EXPECT_EQ(psns.sent, (std::vector<uint32_t>{1, 6, 7, 8, 9}));
}

TEST(UdNak, ReceiverWithdrawsItOnceTheDroppedPacketCame) {
    OneHeld t;
    Receiver& r = t.r;
    t.give(1);   // held
    t.give(3);   // dropped
    t.give(2);   // dropped: the NAK covers up to 3
    ASSERT_TRUE(r.nak());
    // The sender's go-back arrives before our ACK went out: 0..2 taken, 3 still missing.
    t.give(0);
    t.give(2);
    EXPECT_EQ(r.ack(), 3u);
    EXPECT_TRUE(r.nak());
    t.give(3);
    EXPECT_EQ(r.ack(), 4u);
    EXPECT_FALSE(r.nak()) << "nothing dropped is missing: a NAK now would resend what is in flight";
}

TEST(UdNak, ANakForWhatIsAcknowledgedOrNeverSentIsIgnored) {
    Sender s(SenderConfig{});
    Psns psns;
    send_packets(s, psns, 4);
    s.on_ack(9, 0, 1 * ms, Sender::Emit(psns), 0, true);   // beyond what was sent: a confused peer
    s.on_ack(4, 0, 1 * ms, Sender::Emit(psns), 0, true);   // everything acknowledged: no hole
    EXPECT_TRUE(psns.sent.empty());
    EXPECT_EQ(s.stats().fast_retransmits, 0u);
    EXPECT_TRUE(s.idle());
}

} // namespace
} // namespace roce::ud
