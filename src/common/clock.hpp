// The core's one clock: CLOCK_MONOTONIC in nanoseconds. Timers, round-trip samples, deadlines
// and counters all read it, in every backend and tool, on every busy-poll iteration.
//
// Where clock_gettime is a vDSO call (TSC or kvm-clock clocksource: ~20-30 ns) that is all it
// is. Where it is a system call — a VM whose clocksource is HPET or the ACPI PM timer, as in the
// rxe guest under TCG: 0.75 us per read, measured, a quarter of ud_roce's busy-poll loop — the
// clock extrapolates from the CPU's time-stamp counter (~20 ns there) from one anchor shared by
// all threads, re-taken on CLOCK_MONOTONIC every ~1 ms of counter ticks: one system call per
// millisecond instead of one per read, within microseconds of CLOCK_MONOTONIC (behind it while a
// re-anchoring thread is preempted), never backwards, and no thread ever ahead of another. Which
// one is chosen once per process, by timing clock_gettime (clock.cpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <ctime>

namespace roce {

inline uint64_t system_now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

enum class ClockSource : uint8_t { undecided, system, tsc };

namespace clock_detail {
inline std::atomic<ClockSource> source{ClockSource::undecided};
uint64_t now_slow();   // decides on the first call; the TSC path
} // namespace clock_detail

inline uint64_t now_ns() {
    if (clock_detail::source.load(std::memory_order_relaxed) == ClockSource::system) [[likely]]
        return system_now_ns();
    return clock_detail::now_slow();
}

// Time from `since` to `now`, 0 if `since` is later: timestamps cross threads (an owner's last
// progress read by its progress thread: a store racing the reader's own clock read makes the
// other side's stamp the newer one), and a send inside a callback stamps packets after the time
// the surrounding progress call started with.
inline uint64_t elapsed_ns(uint64_t now, uint64_t since) { return now > since ? now - since : 0; }

// The source in use (deciding it if no read happened yet).
ClockSource clock_source();
// Tests: switch sources (tsc falls back to system where there is no usable counter).
// Returns the source now in use.
ClockSource set_clock_source_for_test(ClockSource s);

} // namespace roce
