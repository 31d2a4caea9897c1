// Pacer, delay-target window, READ cap and the per-QP composition, against hand-computed traces.
#include <gtest/gtest.h>

#include "cc/delay.hpp"
#include "cc/pacer.hpp"
#include "cc/qp_cc.hpp"

using namespace roce::cc;

namespace {
constexpr double G = 1e9;
constexpr Nanos us = ns_per_us;
} // namespace

TEST(Pacer, TokenBucketTrace) {
    Pacer p(8 * G, 1000);                   // 8 Gb/s = 1 byte/ns, bucket 1000 bytes, starts full
    EXPECT_EQ(p.next_send_time(0, 1000), 0);
    p.consume(1000, 0);                     // tokens 0
    EXPECT_EQ(p.next_send_time(0, 500), 0); // not in debt: may send
    p.consume(500, 0);                      // tokens -500
    EXPECT_EQ(p.next_send_time(0, 500), 501);
    EXPECT_EQ(p.next_send_time(200, 500), 501);
    EXPECT_EQ(p.next_send_time(501, 500), 501);
    p.consume(500, 501);                    // tokens ~ -499
    EXPECT_EQ(p.next_send_time(501, 500), 1001);
    // Idle for long: the bucket refills to 1000 only.
    EXPECT_DOUBLE_EQ(p.tokens(1'000'000), 1000);
}

TEST(Pacer, LongRunRateEqualsConfiguredRate) {
    Pacer p(25 * G, 16384);
    Nanos t = 0;
    uint64_t bytes = 0;
    while (t < 10 * ns_per_ms) {
        t = p.next_send_time(t, 4096);
        p.consume(4096, t);
        bytes += 4096;
    }
    const double rate = double(bytes) * 8 / (double(t) / 1e9);
    EXPECT_NEAR(rate / (25 * G), 1.0, 0.01);
}

TEST(Pacer, RateChangeAppliesFromNow) {
    Pacer p(8 * G, 0);
    p.consume(1000, 0);                     // -1000 at 1 B/ns
    p.set_rate(4 * G, 500);                 // -500 at t=500, then 0.5 B/ns
    EXPECT_EQ(p.next_send_time(500, 1), 500 + 1000 + 1);
}

TEST(DelayCc, IncreaseBelowTargetDecreaseAboveOncePerRtt) {
    DelayParams d = default_cc_config().delay;   // target 50 us, ai 4096, beta 0.8, mdf 0.5, init 256 KB
    DelayCc cc(d, 1024);
    ASSERT_DOUBLE_EQ(cc.cwnd_bytes(), 262144);
    cc.on_rtt_sample(10 * us, 1024, 0);                       // += 4096 * 1024 / 262144 = 16
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 262160);
    EXPECT_EQ(cc.srtt(), 10 * us);
    cc.on_rtt_sample(100 * us, 1024, 1 * us);                 // x = 0.5: *= 1 - 0.8*0.5 = 0.6
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 262160 * 0.6);
    EXPECT_EQ(cc.srtt(), 10 * us + 90 * us / 8);              // 21.25 us
    cc.on_rtt_sample(100 * us, 1024, 2 * us);                 // within one srtt: no second cut
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 262160 * 0.6);
    cc.on_rtt_sample(1000 * us, 1024, 2 * ns_per_ms);         // x = 0.95: capped at 1 - max_mdf
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 262160 * 0.6 * 0.5);
    EXPECT_EQ(cc.counters().decreases, 2u);
}

TEST(DelayCc, APollersAbsenceIsNoCongestion) {
    // A completion found 5.01 ms after its post, the poller having been away 5 ms (an MPI rank
    // computing): the round trip was anywhere between 10 us and 5.01 ms. Nothing changes
    // (before: cut by max_mdf, and the smoothed RTT took 5 ms in). What the network surely took
    // above the target still counts.
    DelayParams d = default_cc_config().delay;   // target 50 us
    DelayCc cc(d, 1024);
    cc.on_rtt_sample(10 * us, 1024, 0);
    const double w = cc.cwnd_bytes();
    EXPECT_FALSE(cc.on_rtt_sample(5010 * us, 1024, 10 * ns_per_ms, 5000 * us));
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), w);
    EXPECT_EQ(cc.srtt(), 10 * us);
    EXPECT_EQ(cc.counters().ambiguous, 1u);
    EXPECT_EQ(cc.counters().decreases, 0u);
    EXPECT_EQ(cc.counters().acked_bytes, 2048u) << "the bytes are acknowledged all the same";
    // Found 10 us after the previous poll, 100 us after its post: at least 90 us, above the
    // target: x = (90 - 50) / 90, cwnd *= 1 - 0.8 x.
    EXPECT_TRUE(cc.on_rtt_sample(100 * us, 1024, 11 * ns_per_ms, 10 * us));
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), w * (1 - 0.8 * (40.0 / 90.0)));
    EXPECT_EQ(cc.srtt(), 10 * us + 80 * us / 8);
    // Below the target is below it however long the poller was away.
    const double w2 = cc.cwnd_bytes();
    cc.on_rtt_sample(40 * us, 1024, 12 * ns_per_ms, 1000 * us);
    EXPECT_GT(cc.cwnd_bytes(), w2);
}

TEST(DelayCc, SubMtuWindowIsPacedAndClamped) {
    DelayParams d = default_cc_config().delay;
    d.init_cwnd = 2048;
    DelayCc cc(d, 1024);
    EXPECT_EQ(cc.pacing_rate_bps(), 0);
    Nanos t = 0;
    for (int i = 0; i < 20; ++i) {
        t += 1000 * us;
        cc.on_rtt_sample(100 * us, 1024, t);
    }
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), d.min_cwnd);            // 256
    EXPECT_NEAR(cc.pacing_rate_bps(), 256 * 8e9 / double(cc.srtt()), 1);
    EXPECT_TRUE(cc.can_send(0));                               // one request always
    EXPECT_FALSE(cc.can_send(1024));
    // Below one MTU the increase is ai * acked / mtu per sample.
    cc.on_rtt_sample(10 * us, 1024, t + 1);
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 256 + 4096);
}

TEST(DelayCc, LossCutsByMaxMdf) {
    DelayCc cc(default_cc_config().delay, 1024);
    cc.on_loss(0);
    EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 131072);
}

TEST(ReadCap, BoundsReadsAndBytes) {
    ReadCapParams p{2, 1u << 20};
    ReadCap rc(p);
    EXPECT_TRUE(rc.can_post(2u << 20));      // one oversized READ is allowed when none is outstanding
    rc.on_post(512 << 10);
    EXPECT_TRUE(rc.can_post(512 << 10));
    EXPECT_FALSE(rc.can_post((512 << 10) + 1));
    rc.on_post(256 << 10);
    EXPECT_FALSE(rc.can_post(1));            // two outstanding
    rc.on_complete(512 << 10);
    EXPECT_TRUE(rc.can_post(768 << 10));
    EXPECT_EQ(rc.reads(), 1u);
    EXPECT_EQ(rc.bytes(), 256u << 10);
}

TEST(QpCc, OffNeverDelays) {
    QpCc q = make_qp_cc(default_cc_config(), DeviceKind::verbs_hw, 100 * G, 4096);
    EXPECT_EQ(q.mode(), CcMode::off);
    EXPECT_EQ(q.next_send_time(5, 4096, 1u << 30), 5);
    EXPECT_FALSE(q.on_ce_packet(5));
    q.on_cnp(6);
    EXPECT_EQ(q.counters().cnps_ignored, 1u);
}

TEST(QpCc, DcqcnCnpSlowsThePacer) {
    CcConfig c = default_cc_config();
    c.pacer_burst = 4096;
    QpCc q = make_qp_cc(c, DeviceKind::userspace, 100 * G, 4096);
    ASSERT_EQ(q.mode(), CcMode::dcqcn);
    q.on_cnp(0);
    EXPECT_DOUBLE_EQ(q.rate_bps(), 50 * G);
    Nanos t = 0;
    for (int i = 0; i < 50; ++i) {          // 50 packets take ~31 us: before the first increase (55 us)
        t = q.next_send_time(t, 4096, 0);
        q.on_sent(4096, t);
    }
    // The first two ride the bucket, the other 48 leave every 655.36 ns (+1 ns rounding each).
    EXPECT_NEAR(double(t), 48 * 4096 * 8 / 50.0, 60);
    EXPECT_TRUE(q.on_ce_packet(t));
    EXPECT_FALSE(q.on_ce_packet(t + 1));
    EXPECT_NE(q.next_timer(), never);
}

TEST(QpCc, DelayWindowBlocks) {
    CcConfig c = default_cc_config();
    c.delay.init_cwnd = 8192;
    c.mode = CcMode::delay;
    QpCc q = make_qp_cc(c, DeviceKind::verbs_soft, 100 * G, 4096);
    ASSERT_EQ(q.mode(), CcMode::delay);
    EXPECT_EQ(q.next_send_time(0, 4096, 4096), 0);
    EXPECT_EQ(q.next_send_time(0, 4096, 8192), never);
    EXPECT_EQ(q.counters().window_blocked, 1u);
    q.on_cnp(1);                              // CNPs do not drive the delay controller
    EXPECT_EQ(q.counters().cnps_ignored, 1u);
}

TEST(QpCc, ResolveAuto) {
    EXPECT_EQ(resolve_mode(CcMode::auto_, DeviceKind::userspace), CcMode::dcqcn);
    EXPECT_EQ(resolve_mode(CcMode::auto_, DeviceKind::verbs_soft), CcMode::off);
    EXPECT_EQ(resolve_mode(CcMode::delay, DeviceKind::verbs_soft), CcMode::delay);
    EXPECT_EQ(resolve_mode(CcMode::auto_, DeviceKind::verbs_hw), CcMode::off);
    EXPECT_EQ(resolve_mode(CcMode::delay, DeviceKind::verbs_hw), CcMode::delay);
}
