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
// and the machine has clearly more runnable tasks than CPUs in `crowded_probes` samples in a row
// (from /proc/loadavg, at most every `probe_interval_ns` and only while idle: one read per 10 ms
// of waiting). The clock is
// read once per `quiet_polls` empty polls in a row, never before the first `quiet_polls`: most
// waits (a ping-pong's) end sooner, and in the TCG guest each read is an emulated TSC access
// (reading it on every empty poll made UCP tag_lat ~4% slower there, 7 interleaved rounds).
#pragma once
#include <cstdint>

namespace roce {

// Whether clearly more tasks want to run than there are CPUs, now: runnable tasks (the 4th field
// of /proc/loadavg, this process's busy threads included) >= 2 x online CPUs. False if
// unreadable. Not "> CPUs": in the TCG guest two ranks on two CPUs plus UCP's and rxe's own
// threads often showed 3-4 runnable, and yielding there made UCP tag_lat ~10% slower (verbs
// devices do not yield at all now; on the host two ranks show 2-3).
// Not "> 2 x CPUs" either: 2 pairs (4 ranks) on 2 cores show exactly 4 and never yielded, at
// 0.27-0.42 M msg/s against 0.62-0.93 yielding (MPI 8 B message rate, 2026-12-05; 1 pair
// unchanged at 0.87-0.93 either way).
bool cpus_oversubscribed();

class IdleYield {
public:
    using Probe = bool (*)();
    using Clock = uint64_t (*)();
    static constexpr uint64_t probe_interval_ns = 10'000'000;
    static constexpr unsigned quiet_polls = 8;
    static constexpr unsigned crowded_probes = 3;   // in a row: a moment's crowd is no reason

    // after_ns: how long polls must have found nothing before yielding; 0 never yields.
    explicit IdleYield(uint64_t after_ns = 0, Probe crowded = cpus_oversubscribed)
        : after_ns_(after_ns), probe_(crowded) {}

    // After a progress call that handled `events`: whether the owner should yield its CPU now.
    // `now` gives the time in ns; it is called on every quiet_polls-th empty poll in a row.
    bool should_yield(unsigned events, Clock now);

private:
    uint64_t after_ns_;
    Probe probe_;
    uint64_t empty_ = 0;        // polls in a row that found nothing
    bool yield_ = false;        // the decision of the last poll that read the clock
    uint64_t idle_since_ = 0;   // time of the quiet_polls-th of them
    uint64_t next_probe_ = 0;
    unsigned streak_ = 0;       // probes in a row that found the CPUs oversubscribed
};

} // namespace roce
