// How a background thread learns that the owner of a device has stopped calling progress, without
// waking up to check while it still does.
//
// Both progress threads (the userspace device's and ud_roce's) take over once the owner has not
// called progress for an idle time (UCX_RC_ROCE_IDLE_TAKEOVER, UCX_UD_ROCE_IDLE_TAKEOVER): a
// passive RMA target, packets posted and left for the next progress. They used to sleep until the
// owner *might* have gone idle and look: every idle time (500 us on the userspace device) a
// wake-up, and on 2 cores each one preempts a busy-polling rank — UCT am_lat over rc_roce on
// loopback averaged 7.2-7.4 us against 6.4-6.5 with the thread off (2026-12-05, p50 ~6.0 both).
// Here the owner pushes a one-shot timerfd forward instead (one timerfd_settime per half idle
// time by default, from its progress call), and the thread sleeps on it: no wake-up while the
// owner polls (the timer fires at most once per owner pause over half the idle time), and the
// thread returns once the owner's last call is the idle time old, as before.
#pragma once
#include <atomic>
#include <cstdint>

#include "common/clock.hpp"

namespace roce {

// A background thread's sleep: until `ns` pass, `extra` (when >= 0) is readable, or `stop_fd` is.
// True when stop_fd woke it (the thread is to end).
bool sleep_or_stop(int stop_fd, int extra, uint64_t ns);

class OwnerWatch {
public:
    OwnerWatch() = default;
    OwnerWatch(const OwnerWatch&) = delete;
    OwnerWatch& operator=(const OwnerWatch&) = delete;
    ~OwnerWatch();

    // Starts the watch as if the owner had just called. `thread`: a thread will wait on it (no
    // timer otherwise: the owner's calls then cost nothing). Without a timerfd (none left, or an
    // idle time under 10 us) the thread falls back to sleeping until the owner might be idle and
    // looking. `rearm_ns` (0: idle/2) is how often the owner pushes the timer, which then fires
    // rearm_ns + idle/2 after a push: the thread wakes no later than that after the owner's last
    // call. Longer: fewer system calls for the owner (each is expensive in an emulated guest),
    // a later wake-up.
    void open(uint64_t idle_ns, uint64_t now, bool thread, uint64_t rearm_ns = 0);

    // The owner, on every progress call (from one thread at a time), with the time it read.
    void stamp(uint64_t now) {
        last_.store(now, std::memory_order_relaxed);
        if (timer_fd_ >= 0 && now - armed_ns_ >= rearm_ns_.load(std::memory_order_relaxed)) [[unlikely]]
            rearm(now);
    }
    // Changes rearm_ns (0: idle/2) from any thread; the owner's next push uses it.
    void set_rearm(uint64_t rearm_ns) {
        rearm_ns_.store(rearm_ns ? rearm_ns : idle_ns_ / 2, std::memory_order_relaxed);
    }

    uint64_t idle_for(uint64_t now) const { return elapsed_ns(now, last_.load(std::memory_order_relaxed)); }
    bool owner_idle(uint64_t now) const { return idle_for(now) >= idle_ns_; }
    uint64_t idle_ns() const { return idle_ns_; }

    // The thread: returns once the owner has been idle for idle_ns, when stop_fd is readable,
    // or (limit_ns > 0) about limit_ns after the call.
    void wait_owner_idle(int stop_fd, uint64_t limit_ns = 0) const;

private:
    void rearm(uint64_t now);
    std::atomic<uint64_t> last_{0};
    uint64_t armed_ns_ = 0;   // when the owner last pushed the timer (owner only)
    uint64_t idle_ns_ = 0;
    std::atomic<uint64_t> rearm_ns_{0};
    int timer_fd_ = -1;
};

} // namespace roce
