// Time and rate units shared by the congestion-control state machines. Every state machine is
// pure and deterministic: the caller passes the current time (ns, any monotonic origin) into each
// call, nothing here reads a clock, allocates on the fast path or keeps global state, so the
// userspace device, a verbs device's software window and the simulator drive the *same* objects.
#pragma once
#include <cstdint>

namespace roce::cc {

using Nanos = int64_t;                     // time in ns on the caller's monotonic clock
inline constexpr Nanos ns_per_us = 1000;
inline constexpr Nanos ns_per_ms = 1000 * ns_per_us;
inline constexpr Nanos ns_per_s = 1000 * ns_per_ms;
inline constexpr Nanos never = INT64_MAX;  // "no deadline"

// Bytes that `bps` bits/s moves in `dt` ns, and the ns that `bytes` take at `bps`.
constexpr double bytes_in(double bps, Nanos dt) { return bps * static_cast<double>(dt) / 8e9; }
constexpr double ns_for(double bps, double bytes) { return bytes * 8e9 / bps; }

} // namespace roce::cc
