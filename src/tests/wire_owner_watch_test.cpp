// OwnerWatch (common/owner_watch.hpp): the background thread sleeps through an owner that keeps
// calling, and wakes once the owner has stopped for the idle time.
#include <gtest/gtest.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/owner_watch.hpp"

namespace roce {
namespace {

struct StopFd {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ~StopFd() { ::close(fd); }
    void signal() const {
        uint64_t one = 1;
        (void)!::write(fd, &one, sizeof(one));
    }
};

// The owner calls every 200 us for 300 ms (idle time 20 ms): the waiter must not return while it
// does; once it stops, the waiter returns, and only after the idle time has passed. With the
// timer pushed every 10 ms (default), every 50 ms, and without a timer.
TEST(OwnerWatch, SleepsWhileOwnerCallsWakesAfterIdle) {
    struct Case {
        bool timer;
        uint64_t rearm_ns;
    };
    for (const Case c : {Case{true, 0}, Case{true, 50'000'000}, Case{false, 0}}) {
        const bool timer = c.timer;
        OwnerWatch w;
        const uint64_t idle = 20'000'000;
        w.open(idle, now_ns(), timer, c.rearm_ns);
        StopFd stop;
        std::atomic<uint64_t> woke_at{0};
        std::thread t([&] {
            w.wait_owner_idle(stop.fd);
            woke_at = now_ns();
        });
        const uint64_t end = now_ns() + 300'000'000;
        uint64_t last = 0;   // the last stamp
        for (uint64_t t = now_ns(); t < end; t = now_ns()) {
            w.stamp(t);
            last = t;
            EXPECT_EQ(woke_at.load(), 0u) << "woke while the owner called (timer " << timer << ")";
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        t.join();
        ASSERT_NE(woke_at.load(), 0u);
        EXPECT_GE(woke_at.load() - last, idle) << "timer " << timer;
        EXPECT_TRUE(w.owner_idle(now_ns()));
    }
}

// stop_fd ends the wait at once, whatever the owner does.
TEST(OwnerWatch, StopEndsTheWait) {
    OwnerWatch w;
    w.open(10'000'000'000ull, now_ns(), true);   // 10 s idle: only the stop can end it
    StopFd stop;
    std::atomic<bool> done{false};
    std::thread t([&] {
        w.wait_owner_idle(stop.fd);
        done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(done.load());
    stop.signal();
    t.join();
    EXPECT_TRUE(done.load());
}

// A limit ends the wait while the owner still calls (the device's thread leaves its serving mode
// that way); set_rearm changes the push period under way. The owner calls every 200 us with a
// 20 ms idle time, a 1 s push period, and for at most 5 s: the waiter with a 50 ms limit must be
// back long before, with the owner never idle.
TEST(OwnerWatch, LimitEndsTheWaitWhileOwnerCalls) {
    OwnerWatch w;
    w.open(20'000'000, now_ns(), true);
    w.set_rearm(1'000'000'000);
    StopFd stop;
    std::atomic<uint64_t> back_after{0};
    std::thread t([&] {
        const uint64_t start = now_ns();
        w.wait_owner_idle(stop.fd, 50'000'000);
        back_after = now_ns() - start;
    });
    const uint64_t end = now_ns() + 5'000'000'000ull;
    for (uint64_t n = now_ns(); n < end && back_after.load() == 0; n = now_ns()) {
        w.stamp(n);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    stop.signal();   // without the limit the waiter would still be waiting
    t.join();
    EXPECT_GE(back_after.load(), 50'000'000u);
    EXPECT_LT(back_after.load(), 2'000'000'000u) << "the limit did not end the wait";
    EXPECT_FALSE(w.owner_idle(now_ns()));
}

} // namespace
} // namespace roce
