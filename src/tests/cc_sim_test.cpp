// The simulator drives the same QpCc objects; small runs check the qualitative behaviour and that
// the acceptance check can fail.
#include <gtest/gtest.h>

#include "cc/sim/sim.hpp"

using namespace roce::cc;
using namespace roce::cc::sim;

namespace {
SimConfig small(CcMode m, uint32_t n) {
    SimConfig c;
    c.mode = m;
    c.n = n;
    c.duration = 20 * ns_per_ms;
    c.warmup = 10 * ns_per_ms;
    return c;
}
} // namespace

TEST(CcSim, JainIndex) {
    EXPECT_DOUBLE_EQ(jain_index({1, 1, 1, 1}), 1.0);
    EXPECT_DOUBLE_EQ(jain_index({1, 0, 0, 0}), 0.25);
}

TEST(CcSim, DcqcnIncastBoundedAndFair) {
    const SimConfig c = small(CcMode::dcqcn, 16);
    const SimResult r = run(c);
    EXPECT_EQ(check(c, r, Expectation{}), "");
    EXPECT_LT(r.queue_max_window, 400u << 10);   // steady queue around Kmax, far below the 4 MB buffer
    EXPECT_GT(r.cnps, 0u);
}

TEST(CcSim, OffFillsTheBufferAndDrops) {
    const SimConfig c = small(CcMode::off, 64);  // 64 x 128-packet windows > 4 MB buffer
    const SimResult r = run(c);
    EXPECT_GT(r.drops_window, 0u);
    EXPECT_GE(r.queue_max_window + c.pkt_bytes, c.buffer);
    EXPECT_NE(check(c, r, Expectation{}), "");    // the acceptance check fails without CC
}

TEST(CcSim, DcqcnWithoutEcnMarkingFailsTheCheck) {
    SimConfig c = small(CcMode::dcqcn, 64);
    c.ecn = false;                               // a fabric that never marks: only losses remain
    const SimResult r = run(c);
    EXPECT_EQ(r.cnps, 0u);
    EXPECT_NE(check(c, r, Expectation{}), "");
}

TEST(CcSim, DelayKeepsQueueNearTarget) {
    const SimConfig c = small(CcMode::delay, 16);
    const SimResult r = run(c);
    EXPECT_EQ(r.drops_window, 0u);
    EXPECT_GT(r.utilisation, 0.9);
    EXPECT_LT(r.lat_p99_us, 60.0);               // 50 us RTT target
}

TEST(CcSim, Deterministic) {
    const SimConfig c = small(CcMode::dcqcn, 8);
    const SimResult a = run(c), b = run(c);
    EXPECT_EQ(a.events, b.events);
    EXPECT_EQ(a.marks, b.marks);
    EXPECT_DOUBLE_EQ(a.utilisation, b.utilisation);
}
