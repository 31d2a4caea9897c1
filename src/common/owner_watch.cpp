#include "common/owner_watch.hpp"

#include <algorithm>
#include <poll.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace roce {

bool sleep_or_stop(int stop_fd, int extra, uint64_t ns) {
    pollfd p[2] = {{stop_fd, POLLIN, 0}, {extra, POLLIN, 0}};
    const timespec ts{time_t(ns / 1'000'000'000ull), long(ns % 1'000'000'000ull)};
    ppoll(p, extra >= 0 ? 2 : 1, &ts, nullptr);
    return p[0].revents != 0;
}

namespace {

// A net under the timer: were an arming ever missed, the thread would still look this often.
constexpr uint64_t safety_ns = 100'000'000;

} // namespace

OwnerWatch::~OwnerWatch() {
    if (timer_fd_ >= 0)
        ::close(timer_fd_);
}

void OwnerWatch::open(uint64_t idle_ns, uint64_t now, bool thread, uint64_t rearm_ns) {
    idle_ns_ = idle_ns;
    set_rearm(rearm_ns);
    if (thread && idle_ns >= 10'000)
        timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    last_.store(now, std::memory_order_relaxed);
    rearm(now);
}

void OwnerWatch::rearm(uint64_t now) {
    armed_ns_ = now;
    if (timer_fd_ < 0)
        return;
    // Relative: the owner's clock may be extrapolated from the TSC (clock.hpp), the timer's is
    // CLOCK_MONOTONIC; they agree to microseconds, and a late wake-up only sleeps the rest.
    const uint64_t fire_ns = rearm_ns_.load(std::memory_order_relaxed) + idle_ns_ / 2;
    itimerspec its{};
    its.it_value.tv_sec = time_t(fire_ns / 1'000'000'000ull);
    its.it_value.tv_nsec = long(fire_ns % 1'000'000'000ull);
    timerfd_settime(timer_fd_, 0, &its, nullptr);
}

void OwnerWatch::wait_owner_idle(int stop_fd, uint64_t limit_ns) const {
    const uint64_t start = now_ns();
    for (;;) {
        const uint64_t now = now_ns(), waited = elapsed_ns(now, start);
        uint64_t since = idle_for(now);
        if (since >= idle_ns_ || (limit_ns && waited >= limit_ns))
            return;
        const uint64_t nap = limit_ns ? std::min(limit_ns - waited, safety_ns) : safety_ns;
        if (timer_fd_ < 0) {
            if (sleep_or_stop(stop_fd, -1, limit_ns ? std::min(idle_ns_ - since, nap) : idle_ns_ - since))
                return;
            continue;
        }
        // The timer fires rearm + idle/2 after the owner's last arming; the owner arms again on
        // its first call after rearm, so a firing timer means no call for at least idle/2 (and
        // a re-arming resets the expiry count: a read finds nothing then).
        if (sleep_or_stop(stop_fd, timer_fd_, nap))
            return;
        uint64_t expirations;
        if (::read(timer_fd_, &expirations, sizeof(expirations)) != sizeof(expirations))
            continue;
        since = idle_for(now_ns());
        if (since < idle_ns_ && sleep_or_stop(stop_fd, -1, idle_ns_ - since))
            return;
    }
}

} // namespace roce
