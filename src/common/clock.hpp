// The core's one clock: CLOCK_MONOTONIC in nanoseconds (a vDSO call, no system call). Timers,
// round-trip samples, deadlines and counters all read this, in every backend and tool.
#pragma once
#include <cstdint>
#include <ctime>

namespace roce {

inline uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

} // namespace roce
