// now_ns() (common/clock.hpp): both sources stay within CLOCK_MONOTONIC's readings taken around
// them, in several threads at once, across sleeps and re-anchoring, and never go backwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/clock.hpp"

using namespace roce;

namespace {

// Restores automatic choice after each test.
class Clock : public ::testing::TestWithParam<ClockSource> {
protected:
    void SetUp() override {
        if (set_clock_source_for_test(GetParam()) != GetParam())
            GTEST_SKIP() << "no usable time-stamp counter here";
    }
    void TearDown() override { set_clock_source_for_test(ClockSource::undecided); }
};

// Every reading lies between CLOCK_MONOTONIC readings before and after it: never more than
// `ahead_ns` after the later one (a timer must not fire early; the extrapolation's error is
// microseconds), never more than `behind_ns` before the earlier one (a thread re-anchoring the
// shared clock that gets preempted holds the other threads at its interval's end for as long as
// the preemption lasts: CI's loaded 2 cores showed 131 us).
void check_bracketed(uint64_t duration_ns, uint64_t ahead_ns, uint64_t behind_ns, std::string& err) {
    const uint64_t end = system_now_ns() + duration_ns;
    uint64_t prev = 0, n = 0;
    for (uint64_t s0 = system_now_ns(); s0 < end; s0 = system_now_ns()) {
        const uint64_t v = now_ns();
        const uint64_t s1 = system_now_ns();
        if (v + behind_ns < s0 || v > s1 + ahead_ns) {
            err = "reading " + std::to_string(n) + ": " + std::to_string(v) + " outside [" +
                  std::to_string(s0) + " - " + std::to_string(behind_ns) + ", " + std::to_string(s1) +
                  " + " + std::to_string(ahead_ns) + "]";
            return;
        }
        if (v < prev) {
            err = "went backwards at reading " + std::to_string(n);
            return;
        }
        prev = v;
        if (++n % 4096 == 0)   // let time pass between anchors too
            std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
}

TEST_P(Clock, TracksMonotonicAcrossAnchors) {
    std::string err;
    check_bracketed(300'000'000, 100'000, 50'000'000, err);   // 0.3 s: hundreds of re-anchors
    EXPECT_EQ(err, "");
}

TEST_P(Clock, ThreadsAgree) {
    std::vector<std::string> errs(4);
    std::vector<std::thread> ts;
    for (auto& e : errs)
        ts.emplace_back([&e] { check_bracketed(150'000'000, 100'000, 50'000'000, e); });
    for (auto& t : ts)
        t.join();
    for (const auto& e : errs)
        EXPECT_EQ(e, "");
}

// A reading handed to another thread is never ahead of that thread's next reading: progress
// threads compare the owner's timestamps with their own.
TEST_P(Clock, NoThreadSeesAnotherAhead) {
    std::atomic<uint64_t> handed{0};
    std::atomic<bool> stop{false};
    uint64_t worst_behind = 0, checks = 0;
    std::thread reader([&] {
        while (!stop.load()) {
            const uint64_t v = handed.load(std::memory_order_acquire);
            const uint64_t mine = now_ns();
            if (v > mine)
                worst_behind = std::max(worst_behind, v - mine);
            ++checks;
        }
    });
    const uint64_t end = system_now_ns() + 200'000'000;
    while (system_now_ns() < end) {
        for (int i = 0; i < 1000; ++i)
            handed.store(now_ns(), std::memory_order_release);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    stop = true;
    reader.join();
    EXPECT_GT(checks, 0u);
    EXPECT_LE(worst_behind, 1000u) << "a reading of another thread was ahead by " << worst_behind << " ns";
}

TEST_P(Clock, MeasuresASleep) {
    const uint64_t a = now_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const uint64_t b = now_ns();
    EXPECT_GE(b - a, 29'900'000u);    // a sleep never ends early
    EXPECT_LT(b - a, 5'000'000'000u); // not a runaway rate
}

INSTANTIATE_TEST_SUITE_P(Sources, Clock, ::testing::Values(ClockSource::system, ClockSource::tsc),
                         [](const auto& i) { return i.param == ClockSource::tsc ? "tsc" : "system"; });

TEST(ClockChoice, DecidesOnce) {
    set_clock_source_for_test(ClockSource::undecided);
    const ClockSource s = clock_source();
    EXPECT_NE(s, ClockSource::undecided);
    EXPECT_EQ(clock_source(), s);
    std::printf("clock source here: %s\n", s == ClockSource::tsc ? "tsc" : "system");
}

} // namespace
