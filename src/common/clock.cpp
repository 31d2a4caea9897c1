// The TSC-extrapolated clock behind now_ns() where clock_gettime is a system call (clock.hpp).
//
// One anchor for the whole process (two slots and a publication count: readers only load, never
// wait for a writer), so every thread computes the same function of the counter: timestamps
// taken in one thread and compared in another (the progress threads' idle checks, CNP intervals,
// timers) never see a foreign clock behind their own. Each anchor covers one interval of ticks; the next starts exactly where it ends (readers
// past the end wait there until it is published) and its rate absorbs the error against
// CLOCK_MONOTONIC (like NTP's slew), so the clock never steps back, in any thread.
#include "common/clock.hpp"

#include <algorithm>
#include <mutex>

#if defined(__x86_64__)
#include <sys/prctl.h>
#include <x86intrin.h>
#endif

namespace roce {
namespace {

// clock_gettime slower than this per read is a system call (vDSO reads take 20-50 ns).
constexpr uint64_t slow_read_ns = 200;
// Calibration: the counter's rate over this much CLOCK_MONOTONIC time at the first read, then
// refined at re-anchoring over everything since (the longer, the more exact).
constexpr uint64_t calibrate_ns = 500'000;
constexpr uint64_t refine_after_ns = 50'000'000;
// Re-anchor on CLOCK_MONOTONIC after this many nanoseconds' worth of ticks: bounds the error
// from a rate estimate that is off, or a counter whose rate changes (no invariant TSC; the rxe
// guest's CPU model does not claim one).
constexpr uint64_t anchor_ns = 1'000'000;
// An anchor whose system call took longer than this is retried (the HPET read takes ~0.75 us).
constexpr uint64_t good_sample_ns = 20'000;
// Further off than this at re-anchoring (a suspended VM, a counter that jumped): start afresh
// (forward only) instead of slewing.
constexpr uint64_t step_ns = 10'000'000;

struct Calibration {
    uint64_t mult = 0;            // ns per tick, 32.32 fixed point
    uint64_t resync_ticks = 0;    // anchor_ns in ticks
    uint64_t good_ticks = 0;      // good_sample_ns in ticks
    uint64_t tsc0 = 0, ns0 = 0;   // the first anchor: refinement measures from here
};

std::mutex decide_mu;
Calibration cal;   // written under decide_mu before `source` says tsc; re-anchoring refines mult

// The shared anchor: value(t) = ns + ((t - tsc) * mult >> 32), in slot[seq & 1]. A writer fills
// the other slot, then bumps seq; the next rewrite of a slot comes a whole interval later.
struct Slot {
    std::atomic<uint64_t> tsc{0}, ns{0}, mult{0};
};
Slot slot[2];
std::atomic<uint64_t> seq{0};
std::atomic<bool> writing{false};

#if defined(__x86_64__)
// LFENCE first: RDTSC is not ordered after earlier loads, so a reading could be taken before
// the load of another thread's timestamp completed and come out behind it (measured on this
// 2-vCPU VM: up to 4.5 us in 8 of 40 runs of Clock.NoThreadSeesAnotherAhead; none in 100 with
// the fence). The vDSO's clock_gettime orders its RDTSC the same way.
uint64_t ticks() {
    _mm_lfence();
    return __rdtsc();
}

bool counter_usable() {
    int mode = 0;
    // PR_TSC_SIGSEGV: rdtsc would kill the process.
    return prctl(PR_GET_TSC, &mode, 0, 0, 0) != 0 || mode == PR_TSC_ENABLE;
}
#else
uint64_t ticks() { return 0; }
bool counter_usable() { return false; }
#endif

// A counter reading taken at the same moment as a CLOCK_MONOTONIC one: the middle of the system
// call. A thread preempted inside it (a guest's vCPU descheduled by a busy host: milliseconds)
// would skew the pair by half the stall, so the tightest of a few tries counts; `good_ticks`
// (0: none known yet) ends the search early.
void sample(uint64_t& tsc, uint64_t& ns, uint64_t good_ticks) {
    uint64_t best = ~uint64_t(0);
    for (int i = 0; i < 4 && best > good_ticks; ++i) {
        const uint64_t t0 = ticks();
        const uint64_t n = system_now_ns();
        const uint64_t t1 = ticks();
        if (t1 - t0 < best) {
            best = t1 - t0;
            tsc = t0 + (t1 - t0) / 2;
            ns = n;
        }
    }
}

bool calibrate(Calibration& c) {
    if (!counter_usable())
        return false;
    uint64_t t0 = 0, n0 = 0, t1 = 0, n1 = 0;
    sample(t0, n0, 0);
    do {
        sample(t1, n1, 0);
    } while (n1 - n0 < calibrate_ns);
    if (t1 <= t0 + 1000)
        return false;   // a counter that does not run
    c.mult = ((n1 - n0) << 32) / (t1 - t0);
    if (c.mult == 0)
        return false;   // faster than 4 GHz * 2^32: not a time-stamp counter
    c.resync_ticks = (anchor_ns << 32) / c.mult;
    c.good_ticks = (good_sample_ns << 32) / c.mult;
    c.tsc0 = t0;
    c.ns0 = n0;
    return true;
}

bool system_clock_slow() {
    constexpr int reads = 32;
    const uint64_t start = system_now_ns();
    uint64_t end = start;
    for (int i = 0; i < reads; ++i)
        end = system_now_ns();
    return (end - start) / reads > slow_read_ns;
}

void publish(uint64_t tsc, uint64_t ns, uint64_t mult) {
    const uint64_t q = seq.load(std::memory_order_relaxed) + 1;
    Slot& n = slot[q & 1];
    n.tsc.store(tsc, std::memory_order_relaxed);
    n.ns.store(ns, std::memory_order_relaxed);
    n.mult.store(mult, std::memory_order_relaxed);
    seq.store(q, std::memory_order_release);
}

ClockSource decide(ClockSource wanted) {
    std::lock_guard lk(decide_mu);
    ClockSource s = clock_detail::source.load(std::memory_order_acquire);
    if (wanted == ClockSource::undecided && s != ClockSource::undecided)
        return s;
    if (wanted == ClockSource::undecided)
        wanted = system_clock_slow() ? ClockSource::tsc : ClockSource::system;
    s = ClockSource::system;
    if (wanted == ClockSource::tsc && calibrate(cal)) {
        publish(cal.tsc0, cal.ns0, cal.mult);
        s = ClockSource::tsc;
    }
    clock_detail::source.store(s, std::memory_order_release);
    return s;
}

uint64_t extrapolate(uint64_t t, uint64_t tsc, uint64_t ns, uint64_t mult) {
    // A counter read before the anchor was taken (another CPU's, slightly behind): the anchor.
    return t > tsc ? ns + (((t - tsc) * mult) >> 32) : ns;
}

// Starts the next interval where the current one ends (the caller holds `writing`). Readers
// never extrapolate an anchor past its interval's end, so the new function only has to start
// there to keep every thread's readings ordered — whatever the rate it picks and however long
// this thread is preempted before publishing. The rate makes up the error against
// CLOCK_MONOTONIC over the next interval (at most 2x / half speed); far behind, it steps forward.
void reanchor(uint64_t tsc, uint64_t ns, uint64_t mult) {
    const uint64_t end = tsc + cal.resync_ticks;
    const uint64_t end_ns = extrapolate(end, tsc, ns, mult);
    uint64_t st = 0, sn = 0;
    sample(st, sn, cal.good_ticks);
    // Refine the base rate over everything since the first anchor.
    if (sn - cal.ns0 > refine_after_ns && st > cal.tsc0)
        cal.mult = uint64_t(double(sn - cal.ns0) / double(st - cal.tsc0) * 4294967296.0);
    if (st <= end) {   // (a counter of another CPU, behind): keep the rate
        publish(end, end_ns, cal.mult);
        return;
    }
    if (sn > end_ns + step_ns) {
        publish(st, sn, cal.mult);
        return;
    }
    // Reach CLOCK_MONOTONIC one interval after the sample: (sn + anchor_ns - end_ns) ns over
    // (st + resync_ticks - end) ticks.
    const double want = (double(sn) + double(anchor_ns) - double(end_ns)) /
                        double(st + cal.resync_ticks - end) * 4294967296.0;
    const double base = double(cal.mult);
    publish(end, end_ns, uint64_t(std::clamp(want, base * 0.5, base * 2.0)));
}

} // namespace

uint64_t clock_detail::now_slow() {
    ClockSource s = source.load(std::memory_order_acquire);
    if (s == ClockSource::undecided)
        s = decide(ClockSource::undecided);
    if (s == ClockSource::system)
        return system_now_ns();
    for (;;) {
        const uint64_t q = seq.load(std::memory_order_acquire);
        const Slot& a = slot[q & 1];
        const uint64_t tsc = a.tsc.load(std::memory_order_relaxed);
        const uint64_t ns = a.ns.load(std::memory_order_relaxed);
        const uint64_t mult = a.mult.load(std::memory_order_relaxed);
        const uint64_t t = ticks();
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq.load(std::memory_order_relaxed) != q)
            continue;   // re-anchored meanwhile: the newest anchor for this reading
        if (t < tsc || t - tsc <= cal.resync_ticks)
            return extrapolate(t, tsc, ns, mult);
        // Past the interval: one thread starts the next, the others wait at this one's end.
        if (!writing.exchange(true, std::memory_order_acquire)) {
            if (seq.load(std::memory_order_relaxed) == q)
                reanchor(tsc, ns, mult);
            writing.store(false, std::memory_order_release);
            continue;
        }
        return extrapolate(tsc + cal.resync_ticks, tsc, ns, mult);
    }
}

ClockSource clock_source() {
    const ClockSource s = clock_detail::source.load(std::memory_order_acquire);
    return s == ClockSource::undecided ? decide(ClockSource::undecided) : s;
}

ClockSource set_clock_source_for_test(ClockSource s) { return decide(s); }

} // namespace roce
