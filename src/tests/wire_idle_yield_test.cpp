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

int g_probes = 0;
bool g_crowded = true;
bool probe() {
    ++g_probes;
    return g_crowded;
}

class IdleYieldTest : public ::testing::Test {
protected:
    void SetUp() override {
        g_probes = 0;
        g_crowded = true;
    }
};

constexpr uint64_t us = 1000;
constexpr uint64_t t0 = 1'000'000'000;

TEST_F(IdleYieldTest, ZeroNeverYields) {
    IdleYield y(0, probe);
    for (uint64_t t = t0; t < t0 + 100 * IdleYield::probe_interval_ns; t += 100 * us)
        EXPECT_FALSE(y.should_yield(0, t));
    EXPECT_EQ(g_probes, 0);
}

TEST_F(IdleYieldTest, YieldsOnlyAfterTheIdleTime) {
    IdleYield y(5 * us, probe);
    EXPECT_FALSE(y.should_yield(0, t0));            // idle from here
    EXPECT_FALSE(y.should_yield(0, t0 + 4 * us));
    EXPECT_EQ(g_probes, 0);                         // not asked before the idle time has passed
    EXPECT_TRUE(y.should_yield(0, t0 + 5 * us));
    EXPECT_TRUE(y.should_yield(0, t0 + 6 * us));    // every empty poll from then on
    EXPECT_EQ(g_probes, 1);
}

TEST_F(IdleYieldTest, AnEventRestartsTheIdleTime) {
    IdleYield y(5 * us, probe);
    EXPECT_FALSE(y.should_yield(0, t0));
    EXPECT_TRUE(y.should_yield(0, t0 + 10 * us));
    EXPECT_FALSE(y.should_yield(3, t0 + 11 * us));  // a poll that handled something
    EXPECT_FALSE(y.should_yield(0, t0 + 12 * us));  // idle again from here
    EXPECT_FALSE(y.should_yield(0, t0 + 16 * us));
    EXPECT_TRUE(y.should_yield(0, t0 + 17 * us));
}

TEST_F(IdleYieldTest, NoYieldWhileEveryTaskHasACpu) {
    g_crowded = false;
    IdleYield y(5 * us, probe);
    EXPECT_FALSE(y.should_yield(0, t0));
    for (uint64_t t = t0 + 5 * us; t < t0 + IdleYield::probe_interval_ns; t += 50 * us)
        EXPECT_FALSE(y.should_yield(0, t));
    EXPECT_EQ(g_probes, 1);                         // one probe per interval, not per poll
    g_crowded = true;                               // another job starts: seen at the next probe
    EXPECT_FALSE(y.should_yield(0, t0 + IdleYield::probe_interval_ns));
    EXPECT_TRUE(y.should_yield(0, t0 + 5 * us + IdleYield::probe_interval_ns));
    EXPECT_EQ(g_probes, 2);
}

TEST_F(IdleYieldTest, ClockGoingBackDoesNotYield) {
    IdleYield y(5 * us, probe);
    EXPECT_FALSE(y.should_yield(0, t0));
    EXPECT_FALSE(y.should_yield(0, t0 - 100 * us));
    EXPECT_EQ(g_probes, 0);
}

// The real probe: with CPUs + 4 threads spinning, /proc/loadavg shows them runnable.
TEST(CpusOversubscribed, SeesBusyThreads) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ASSERT_GT(cpus, 0);
    std::atomic<bool> stop{false};
    std::vector<std::thread> spinners;
    for (long i = 0; i < cpus + 4; ++i)
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
    EXPECT_TRUE(seen) << "runnable count in /proc/loadavg never reached " << cpus + 2;
}

} // namespace
