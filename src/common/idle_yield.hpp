// When a busy-polling owner should give its CPU away (UCX_RC_ROCE_IDLE_YIELD, UCX_UD_ROCE_...).
//
// MPI ranks poll. With more ranks than cores (mpirun --oversubscribe; 8 ranks on this 2-core
// machine) a rank that waits for a peer spins through its whole time slice while the peer it waits
// for is not even running. Open MPI yields on oversubscribed nodes only from opal_progress, which
// pml ucx calls once per 100 worker polls, so nearly every poll spins. Measured on 2 cores, MPI
// 8 B message rate of 4 pairs (8 ranks): 1.0-1.2 M msg/s spinning, 2.1 yielding after 5 us of
// nothing.
//
// A yield is a system call (~0.3 us here, several in a TCG guest) that gains nothing while every
// runnable task has a CPU, and a rank that yields between a ping-pong's messages notices the reply
// later. So the owner yields only when both hold: its polls have found nothing for `after_ns`,
// and the machine has clearly more runnable tasks than CPUs (sampled from /proc/loadavg at most
// every `probe_interval_ns`, and only while idle: one read per 10 ms of waiting).
#pragma once
#include <cstdint>

namespace roce {

// Whether more tasks want to run than there are CPUs, now: runnable tasks (the 4th field of
// /proc/loadavg, this process's busy threads included) >= online CPUs + 2. False if unreadable.
bool cpus_oversubscribed();

class IdleYield {
public:
    using Probe = bool (*)();
    static constexpr uint64_t probe_interval_ns = 10'000'000;

    // after_ns: how long polls must have found nothing before yielding; 0 never yields.
    explicit IdleYield(uint64_t after_ns = 0, Probe crowded = cpus_oversubscribed)
        : after_ns_(after_ns), probe_(crowded) {}

    // After a progress call that handled `events` at time `now` (ns; any value when events != 0):
    // whether the owner should yield its CPU now.
    bool should_yield(unsigned events, uint64_t now);

private:
    uint64_t after_ns_;
    Probe probe_;
    uint64_t idle_since_ = 0;   // 0: the last poll handled something
    uint64_t next_probe_ = 0;
    bool crowded_ = false;
};

} // namespace roce
