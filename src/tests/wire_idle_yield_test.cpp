// IdleYield (common/idle_yield.hpp): a polling owner yields only after `after_ns` without events
// and only while the probe reports more runnable tasks than CPUs; the probe is read at most every
// probe_interval_ns. cpus_oversubscribed() against the real /proc/loadavg with busy threads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/idle_yield.hpp"

using namespace roce;

namespace {

int g_probes = 0, g_clock_reads = 0;
bool g_crowded = true;
uint64_t g_now = 0;
bool probe() {
    ++g_probes;
    return g_crowded;
}
uint64_t fake_clock() {
    ++g_clock_reads;
    return g_now;
}

constexpr uint64_t us = 1000;

class IdleYieldTest : public ::testing::Test {
protected:
    void SetUp() override {
        g_probes = g_clock_reads = 0;
        g_crowded = true;
        g_now = 1'000'000'000;
    }
    // The polls before the idle clock starts: none yields, only the last reads the clock.
    static void quiet(IdleYield& y) {
        const int reads = g_clock_reads;
        for (unsigned i = 1; i <= IdleYield::quiet_polls; ++i)
            EXPECT_FALSE(y.should_yield(0, fake_clock));
        EXPECT_EQ(g_clock_reads, reads + 1);
    }
    // quiet_polls more empty polls at the current time: the clock is read once, on the last.
    // Returns its decision.
    static bool polls(IdleYield& y) {
        const int reads = g_clock_reads;
        for (unsigned i = 1; i < IdleYield::quiet_polls; ++i)
            y.should_yield(0, fake_clock);
        EXPECT_EQ(g_clock_reads, reads);
        const bool r = y.should_yield(0, fake_clock);
        EXPECT_EQ(g_clock_reads, reads + 1);
        return r;
    }
};

TEST_F(IdleYieldTest, ZeroNeverYields) {
    IdleYield y(0, probe);
    for (int i = 0; i < 1000; ++i, g_now += 100 * us)
        EXPECT_FALSE(y.should_yield(0, fake_clock));
    EXPECT_EQ(g_probes, 0);
    EXPECT_EQ(g_clock_reads, 0);
}

TEST_F(IdleYieldTest, ShortWaitsReadNoClock) {
    IdleYield y(5 * us, probe);
    for (int round = 0; round < 100; ++round) {
        for (unsigned i = 1; i < IdleYield::quiet_polls; ++i)
            EXPECT_FALSE(y.should_yield(0, fake_clock));
        EXPECT_FALSE(y.should_yield(1, fake_clock));   // the reply came
    }
    EXPECT_EQ(g_clock_reads, 0);
    EXPECT_EQ(g_probes, 0);
}

TEST_F(IdleYieldTest, YieldsOnlyAfterTheIdleTime) {
    IdleYield y(5 * us, probe);
    quiet(y);
    g_now += 4 * us;
    EXPECT_FALSE(polls(y));
    EXPECT_EQ(g_probes, 0);                         // not asked before the idle time has passed
    g_now += 1 * us;
    for (unsigned i = 1; i < IdleYield::crowded_probes; ++i, g_now += IdleYield::probe_interval_ns)
        EXPECT_FALSE(polls(y)) << "a crowd seen in " << i << " probe(s)";
    EXPECT_TRUE(polls(y));                          // crowded in crowded_probes probes in a row
    g_now += 1 * us;
    EXPECT_TRUE(polls(y));                          // and on from then
    EXPECT_EQ(g_probes, int(IdleYield::crowded_probes));
    const int reads = g_clock_reads;
    EXPECT_TRUE(y.should_yield(0, fake_clock));     // the polls between clock reads repeat it
    EXPECT_EQ(g_clock_reads, reads);
}

TEST_F(IdleYieldTest, AMomentsCrowdIsNotEnough) {
    IdleYield y(5 * us, probe);
    quiet(y);
    g_now += 5 * us;
    for (int i = 0; i < 30; ++i, g_now += IdleYield::probe_interval_ns) {
        g_crowded = i % IdleYield::crowded_probes != 0;   // never crowded_probes in a row
        EXPECT_FALSE(polls(y)) << i;
    }
    EXPECT_EQ(g_probes, 30);
}

TEST_F(IdleYieldTest, AnEventRestartsTheIdleTime) {
    IdleYield y(5 * us, probe);
    quiet(y);
    for (unsigned i = 0; i < IdleYield::crowded_probes; ++i) {
        g_now += IdleYield::probe_interval_ns;
        polls(y);
    }
    EXPECT_TRUE(polls(y));
    EXPECT_FALSE(y.should_yield(3, fake_clock));    // a poll that handled something
    quiet(y);                                       // quiet polls again before the clock restarts
    g_now += 4 * us;
    EXPECT_FALSE(polls(y));
    g_now += 1 * us;
    EXPECT_TRUE(polls(y));                          // still crowded: no new probe due yet
}

TEST_F(IdleYieldTest, NoYieldWhileEveryTaskHasACpu) {
    g_crowded = false;
    IdleYield y(5 * us, probe);
    quiet(y);
    const uint64_t start = g_now;
    for (g_now = start + 5 * us; g_now < start + IdleYield::probe_interval_ns; g_now += 50 * us)
        EXPECT_FALSE(polls(y));
    EXPECT_EQ(g_probes, 1);                         // one probe per interval, not per poll
    g_crowded = true;                               // another job starts: seen from the next probes
    for (unsigned i = 1; i <= IdleYield::crowded_probes; ++i) {
        g_now = start + 5 * us + i * IdleYield::probe_interval_ns;
        EXPECT_EQ(polls(y), i == IdleYield::crowded_probes) << i;
    }
    EXPECT_EQ(g_probes, int(1 + IdleYield::crowded_probes));
}

TEST_F(IdleYieldTest, ClockGoingBackDoesNotYield) {
    IdleYield y(5 * us, probe);
    quiet(y);
    g_now -= 100 * us;
    EXPECT_FALSE(polls(y));
    EXPECT_EQ(g_probes, 0);
}

// The real probe: with 2 x CPUs + 4 threads spinning, /proc/loadavg shows them runnable.
TEST(CpusOversubscribed, SeesBusyThreads) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ASSERT_GT(cpus, 0);
    std::atomic<bool> stop{false};
    std::vector<std::thread> spinners;
    for (long i = 0; i < 2 * cpus + 4; ++i)
        spinners.emplace_back([&stop] {
            while (!stop.load(std::memory_order_relaxed)) {
            }
        });
    bool seen = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!seen && std::chrono::steady_clock::now() < deadline) {
        seen = cpus_oversubscribed();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop = true;
    for (auto& t : spinners)
        t.join();
    EXPECT_TRUE(seen) << "runnable count in /proc/loadavg never reached " << 2 * cpus;
}

} // namespace
