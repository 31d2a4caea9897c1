// DCQCN reaction and notification points against hand-computed traces (rates in Gb/s, 100G line,
// paper defaults unless stated: g = 1/256, T = K = 55 us, F = 5, R_AI = 40 Mb/s).
#include <gtest/gtest.h>

#include <cmath>

#include "cc/dcqcn.hpp"

using namespace roce::cc;

namespace {
constexpr double G = 1e9;
constexpr Nanos us = ns_per_us;
DcqcnParams paper() { return default_cc_config().dcqcn; }
} // namespace

TEST(DcqcnRp, StartsIdleAtLineRate) {
    DcqcnRp rp(paper(), 100 * G);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 100 * G);
    EXPECT_EQ(rp.next_timer(), never);
    EXPECT_EQ(rp.stage(), DcqcnStage::idle);
    rp.on_bytes_sent(100u << 20, 1 * ns_per_ms);   // no byte counter while idle
    rp.on_timer(10 * ns_per_ms);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 100 * G);
    EXPECT_EQ(rp.counters().byte_events, 0u);
}

TEST(DcqcnRp, CnpCutsByHalfAlphaAndUpdatesAlpha) {
    DcqcnParams p = paper();
    p.alpha_init = 0.5;
    DcqcnRp rp(p, 100 * G);
    rp.on_cnp(1000);
    // R_T = 100; R_C = 100 * (1 - 0.5/2) = 75; alpha = (1 - 1/256) * 0.5 + 1/256
    EXPECT_DOUBLE_EQ(rp.target_bps(), 100 * G);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 75 * G);
    const double a1 = (255.0 / 256) * 0.5 + 1.0 / 256;
    EXPECT_DOUBLE_EQ(rp.alpha(1000), a1);
    EXPECT_EQ(rp.next_timer(), 1000 + 55 * us);
    EXPECT_EQ(rp.stage(), DcqcnStage::fast_recovery);
    // A second CNP 10 us later (no alpha decay yet): R_T = 75, R_C = 75 * (1 - a1/2).
    rp.on_cnp(1000 + 10 * us);
    EXPECT_DOUBLE_EQ(rp.target_bps(), 75 * G);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 75 * G * (1 - a1 / 2));
    EXPECT_DOUBLE_EQ(rp.alpha(1000 + 10 * us), (255.0 / 256) * a1 + 1.0 / 256);
    EXPECT_EQ(rp.counters().cnps, 2u);
}

TEST(DcqcnRp, FirstCnpWithAlphaOneHalvesTheRate) {
    DcqcnRp rp(paper(), 100 * G);
    rp.on_cnp(0);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 50 * G);
    EXPECT_DOUBLE_EQ(rp.alpha(0), 1.0);   // (1-g)*1 + g
}

TEST(DcqcnRp, FloorAboveTheLineRateIsTheLineRate) {
    // MIN_RATE is set before the line rate is known: 200 Gb/s on a 100 Gb/s line made a CNP
    // "cut" the rate to 200 - DCQCN off in effect.
    DcqcnParams p = paper();
    p.min_rate_bps = 200 * G;
    DcqcnRp rp(p, 100 * G);
    rp.on_cnp(0);
    EXPECT_LE(rp.rate_bps(), 100 * G);
}

TEST(DcqcnRp, AlphaDecaysOncePerWholePeriodWithoutCnp) {
    DcqcnRp rp(paper(), 100 * G);
    rp.on_cnp(0);                                          // alpha = 1
    EXPECT_DOUBLE_EQ(rp.alpha(55 * us - 1), 1.0);
    EXPECT_DOUBLE_EQ(rp.alpha(55 * us), 255.0 / 256);
    EXPECT_DOUBLE_EQ(rp.alpha(110 * us), std::pow(255.0 / 256, 2));
    EXPECT_NEAR(rp.alpha(55 * 256 * us), std::pow(255.0 / 256, 256), 1e-12);   // ~ 1/e
    // Timer steps at 55 and 110 us (fast recovery): R_C = 75, then 87.5. A CNP at 120 us sets
    // R_T = 87.5 and cuts with the decayed alpha (2 periods), then restarts the alpha period.
    const double a = std::pow(255.0 / 256, 2);
    rp.on_cnp(120 * us);
    EXPECT_DOUBLE_EQ(rp.target_bps(), 87.5 * G);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 87.5 * G * (1 - a / 2));
    const double a2 = (255.0 / 256) * a + 1.0 / 256;
    EXPECT_DOUBLE_EQ(rp.alpha(120 * us + 54 * us), a2);
    EXPECT_DOUBLE_EQ(rp.alpha(120 * us + 55 * us), a2 * 255.0 / 256);
}

// CNP at 0 and 10 us: R_T = 50, R_C = 25. Timer from 10 us: five fast-recovery steps halve the
// distance to R_T, then additive increase adds R_AI to R_T each period.
TEST(DcqcnRp, FastRecoveryThenAdditiveIncreaseByTimer) {
    DcqcnRp rp(paper(), 100 * G);
    rp.on_cnp(0);
    rp.on_cnp(10 * us);
    ASSERT_DOUBLE_EQ(rp.target_bps(), 50 * G);
    ASSERT_DOUBLE_EQ(rp.rate_bps(), 25 * G);
    const double fr[] = {37.5, 43.75, 46.875, 48.4375, 49.21875};
    Nanos t = 10 * us;
    for (double want : fr) {
        t += 55 * us;
        rp.on_timer(t - 1);
        EXPECT_NE(rp.rate_bps(), want * G);   // not before the period ends
        rp.on_timer(t);
        EXPECT_DOUBLE_EQ(rp.rate_bps(), want * G) << "t=" << t;
        EXPECT_DOUBLE_EQ(rp.target_bps(), 50 * G);
    }
    EXPECT_EQ(rp.stage(), DcqcnStage::fast_recovery);
    t += 55 * us;                               // T = 6 > F: additive
    rp.on_timer(t);
    EXPECT_EQ(rp.stage(), DcqcnStage::additive);
    EXPECT_DOUBLE_EQ(rp.target_bps(), 50.04 * G);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), (50.04 * G + 49.21875 * G) / 2);
    t += 55 * us;
    const double rc = rp.rate_bps();
    rp.on_timer(t);
    EXPECT_DOUBLE_EQ(rp.target_bps(), 50.08 * G);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), (50.08 * G + rc) / 2);
    EXPECT_EQ(rp.counters().fast_recovery, 5u);
    EXPECT_EQ(rp.counters().additive, 2u);
    EXPECT_EQ(rp.counters().hyper, 0u);
}

TEST(DcqcnRp, SeveralTimerPeriodsInOneCallRunInOrder) {
    DcqcnRp a(paper(), 100 * G), b(paper(), 100 * G);
    a.on_cnp(0);
    b.on_cnp(0);
    for (int k = 1; k <= 8; ++k) a.on_timer(k * 55 * us);
    b.on_timer(8 * 55 * us + 7);
    EXPECT_DOUBLE_EQ(a.rate_bps(), b.rate_bps());
    EXPECT_DOUBLE_EQ(a.target_bps(), b.target_bps());
}

// Byte counter B = 1 MB: 6 MB sent -> BC = 1..5 fast recovery, BC = 6 additive (T = 0). Then timer
// periods T = 1..5 are additive (BC > F, T <= F) and T = 6 is hyper increase with i = 1.
TEST(DcqcnRp, ByteCounterAndHyperIncrease) {
    DcqcnParams p = paper();
    p.byte_counter = 1u << 20;
    DcqcnRp rp(p, 100 * G);
    rp.on_cnp(0);
    rp.on_cnp(1 * us);                            // R_T = 50, R_C = 25, timer due at 56 us
    double rt = 50 * G, rc = 25 * G;
    rp.on_bytes_sent(6u << 20, 2 * us);
    for (int i = 0; i < 5; ++i) rc = (rt + rc) / 2;
    rt += 0.04 * G;
    rc = (rt + rc) / 2;
    EXPECT_DOUBLE_EQ(rp.target_bps(), rt);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
    EXPECT_EQ(rp.counters().byte_events, 6u);
    for (int k = 1; k <= 5; ++k) {
        rp.on_timer(1 * us + k * 55 * us);
        rt += 0.04 * G;
        rc = (rt + rc) / 2;
        EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
    }
    EXPECT_EQ(rp.stage(), DcqcnStage::additive);
    rp.on_timer(1 * us + 6 * 55 * us);
    EXPECT_EQ(rp.stage(), DcqcnStage::hyper);
    rt += 1 * 0.4 * G;                              // i = min(T, BC) - F = 1
    rc = (rt + rc) / 2;
    EXPECT_DOUBLE_EQ(rp.target_bps(), rt);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
    EXPECT_EQ(rp.counters().fast_recovery, 5u);
    EXPECT_EQ(rp.counters().additive, 6u);
    EXPECT_EQ(rp.counters().hyper, 1u);
}

TEST(DcqcnRp, CnpResetsStageCounters) {
    DcqcnRp rp(paper(), 100 * G);
    rp.on_cnp(0);
    rp.on_cnp(1);
    rp.on_timer(7 * 55 * us);                      // past fast recovery
    EXPECT_EQ(rp.stage(), DcqcnStage::additive);
    rp.on_cnp(7 * 55 * us + 5);
    EXPECT_EQ(rp.stage(), DcqcnStage::fast_recovery);
    EXPECT_EQ(rp.next_timer(), 7 * 55 * us + 5 + 55 * us);
}

TEST(DcqcnRp, RateNeverBelowMinAndRecoversToLineThenIdles) {
    DcqcnRp rp(paper(), 100 * G);
    for (int i = 0; i < 100; ++i) rp.on_cnp(i * us);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 1e6);          // DCQCN_MIN_RATE
    // R_T = 1 Mb/s too; recovery is additive 40 Mb/s per 55 us (and hyper once B bytes went out).
    Nanos t = 100 * us;
    for (int i = 0; i < 100000 && rp.next_timer() != never; ++i) {
        t = rp.next_timer();
        rp.on_bytes_sent(uint64_t(rp.rate_bps() * 55e-6 / 8), t);
        rp.on_timer(t);
    }
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 100 * G);
    EXPECT_EQ(rp.stage(), DcqcnStage::idle);
    EXPECT_GT(rp.counters().hyper, 0u);
}

TEST(DcqcnRp, LossActsAsCnpUnlessDisabled) {
    DcqcnRp rp(paper(), 100 * G);
    rp.on_loss(0);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), 50 * G);
    EXPECT_EQ(rp.counters().cnps, 0u);
    EXPECT_EQ(rp.counters().losses, 1u);
    DcqcnParams p = paper();
    p.loss_as_cnp = false;
    DcqcnRp rp2(p, 100 * G);
    rp2.on_loss(0);
    EXPECT_DOUBLE_EQ(rp2.rate_bps(), 100 * G);
}

TEST(DcqcnNp, AtMostOneCnpPerFlowPerInterval) {
    DcqcnNp np(paper());                           // 50 us
    EXPECT_TRUE(np.on_ce_packet(7, 1000));
    EXPECT_FALSE(np.on_ce_packet(7, 1000 + 10 * us));
    EXPECT_FALSE(np.on_ce_packet(7, 1000 + 50 * us - 1));
    EXPECT_TRUE(np.on_ce_packet(8, 1000 + 20 * us));   // another flow is independent
    EXPECT_TRUE(np.on_ce_packet(7, 1000 + 50 * us));
    EXPECT_FALSE(np.on_ce_packet(7, 1000 + 99 * us));
    EXPECT_EQ(np.ce_packets(), 6u);
    EXPECT_EQ(np.cnps_sent(), 3u);
}

TEST(DcqcnNp, FirstCeAtTimeZeroSends) {
    CnpLimiter l(50 * us);
    EXPECT_TRUE(l.on_ce_packet(0));
    EXPECT_FALSE(l.on_ce_packet(49 * us));
    EXPECT_TRUE(l.on_ce_packet(50 * us));
}
