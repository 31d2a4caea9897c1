// ud_roce's sender with the delay window (UCX_UD_ROCE_CC=delay): a hand-computed trace of which
// packets the byte window lets out, how round trips below and above the target move it, and that
// the AIMD packet window still applies on top.
#include <gtest/gtest.h>

#include <vector>

#include "ud/sender.hpp"

namespace roce::ud {
namespace {

constexpr uint64_t us = 1000;

struct Trace {
    std::vector<uint32_t> sent;   // psns in emission order
    bool operator()(const Sender::Packet& p, bool) { sent.push_back(p.psn); return true; }
    Sender::Emit emit() { return *this; }   // refers to this Trace
};

SenderConfig delay_config() {
    SenderConfig c;
    c.delay = true;
    c.delay_params.init_cwnd = 4000;
    c.delay_params.target = 100 * us;
    c.delay_params.ai_bytes = 4096;
    c.delay_params.beta = 0.8;
    c.delay_params.max_mdf = 0.5;
    c.delay_params.min_cwnd = 256;
    return c;
}

void queue(Sender& s, int n, size_t len) {
    std::vector<uint8_t> b(len, 0x11);
    iovec iov{b.data(), b.size()};
    for (int i = 0; i < n; ++i) s.enqueue(PktType::data, 0, 1, &iov, 1, 0, len, 0);
}

} // namespace

TEST(UdSenderCc, DelayWindowTrace) {
    Sender s(delay_config());
    Trace t;
    queue(s, 10, 1000);
    // t=0: 0, 1000, 2000, 3000 bytes in flight are below 4000; the fifth waits.
    s.transmit(0, t.emit());
    EXPECT_EQ(t.sent, (std::vector<uint32_t>{0, 1, 2, 3}));
    EXPECT_EQ(s.inflight_bytes(), 4000u);
    EXPECT_EQ(s.stats().delay_blocked, 1u);
    // t=50us: psn 0 and 1 acknowledged, rtt 50 us < 100 us. Below one MTU (4096) the increase is
    // per MTU: 4000 + 4096*1000/4096 = 5000, then + 4096*1000/5000 = 5819.2; 2000 in flight ->
    // psn 4, 5, 6, 7 (3000, 4000, 5000 are below 5819; 6000 is not).
    s.on_ack(2, 0, 50 * us, t.emit());
    EXPECT_NEAR(s.delay()->cwnd_bytes(), 5819.2, 0.1);
    EXPECT_EQ(t.sent, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    // t=1000us: psn 2..4 acknowledged; the first sample (rtt 1000 us) is above the target:
    // cwnd *= max(1 - 0.8*(900/1000), 1 - 0.5) = 0.5 -> 2909.6, once per smoothed RTT (the two
    // later samples come within it). 3000 in flight (psn 5..7) >= 2909.6: nothing more goes.
    s.on_ack(5, 0, 1000 * us, t.emit());
    EXPECT_NEAR(s.delay()->cwnd_bytes(), 2909.6, 0.1);
    EXPECT_EQ(s.delay()->counters().decreases, 1u);
    EXPECT_EQ(t.sent, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(s.inflight_bytes(), 3000u);
}

TEST(UdSenderCc, OneAlwaysGoesWhenNothingIsInFlightAndAimdStillCaps) {
    SenderConfig c = delay_config();
    c.delay_params.init_cwnd = 256;    // below one packet
    c.init_window = 2;                 // AIMD: two packets
    Sender s(c);
    Trace t;
    queue(s, 4, 1000);
    s.transmit(0, t.emit());
    EXPECT_EQ(t.sent, (std::vector<uint32_t>{0})) << "one packet even though it exceeds the byte window";
    SenderConfig big = delay_config();
    big.delay_params.init_cwnd = 1e6;
    big.init_window = 2;
    Sender s2(big);
    Trace t2;
    queue(s2, 4, 1000);
    s2.transmit(0, t2.emit());
    EXPECT_EQ(t2.sent.size(), 2u) << "the AIMD packet window still applies";
}

TEST(UdSenderCc, OffIsAimdOnly) {
    SenderConfig c;
    c.init_window = 64;
    Sender s(c);
    Trace t;
    queue(s, 10, 1000);
    s.transmit(0, t.emit());
    EXPECT_EQ(t.sent.size(), 10u);
    EXPECT_EQ(s.delay(), nullptr);
}

} // namespace roce::ud
