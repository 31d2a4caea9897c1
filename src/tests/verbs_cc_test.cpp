// Congestion control of the verbs backend on kernel soft-RoCE (verbs/congestion.cpp): work requests
// held in software by the delay window, the READ byte cap, data intact. rxe has no congestion
// control of its own, so what these tests see is ours. Skipped where rxe0 is absent, unless
// ROCE_REQUIRE_RXE_DEVICE=1 (the guest sets it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/uio.h>

#include "rxe_guard.hpp"
#include "verbs/device.hpp"

using namespace roce;
using Clock = std::chrono::steady_clock;

namespace {


uint64_t counter(const verbs::Device& d, uint32_t qpn, const std::string& name) {
    for (const auto& q : d.qp_counters())
        if (q.qpn == qpn && !q.closed)
            for (const auto& [n, v] : q.counters)
                if (n == name)
                    return v;
    return UINT64_MAX;   // absent
}

class VerbsCc : public testing::Test {
protected:
    std::shared_ptr<verbs::Pd> pd;
    std::unique_ptr<verbs::Device> a, b;
    std::vector<Completion> comps;
    uint32_t q = 0;
    uint32_t sq_depth = verbs::DeviceConfig{}.sq_depth;
    uint64_t peak_posted = 0;   // run(): most WRs in the hardware send queue at once

    void open(const cc::CcConfig& cc) {
        ROCE_NEED_RXE0();
        ASSERT_EQ(verbs::Pd::open("rxe0", pd), Status::ok);
        verbs::DeviceConfig cfg;
        cfg.cc = cc;
        cfg.sq_depth = sq_depth;
        ASSERT_EQ(verbs::Device::open(cfg, pd, a), Status::ok);
        ASSERT_EQ(verbs::Device::open(verbs::DeviceConfig{}, pd, b), Status::ok);
        ASSERT_EQ(a->create_qp(q), Status::ok);
        ASSERT_EQ(a->connect_qp(q, b->address()), Status::ok);
        ASSERT_TRUE(wait([&] { return a->qp_state(q) != QpState::connecting; }));
        ASSERT_EQ(a->qp_state(q), QpState::rts);
    }
    void pump() {
        a->progress();
        b->progress();
        Completion c[32];
        size_t n;
        while ((n = a->poll_completions(c, 32)) != 0)
            comps.insert(comps.end(), c, c + n);
    }
    template <typename P>
    bool wait(P pred, double seconds = 60) {
        const auto end = Clock::now() + std::chrono::duration<double>(seconds);
        while (!pred()) {
            if (Clock::now() > end)
                return false;
            pump();
        }
        return true;
    }
    // Posts n WRITEs (or READs) of len bytes each between registered buffers, waits for all, and
    // returns the largest outstanding byte count the QP showed while they ran.
    uint64_t run(bool read, size_t n, size_t len, std::vector<uint8_t>& local, std::vector<uint8_t>& remote) {
        MrKeys lk, rk;
        EXPECT_EQ(pd->reg_mr(local.data(), local.size(), access_all, lk), Status::ok);
        EXPECT_EQ(pd->reg_mr(remote.data(), remote.size(), access_all, rk), Status::ok);
        const uint64_t rva = reinterpret_cast<uintptr_t>(remote.data());
        for (size_t i = 0; i < n; ++i) {
            const Status s = read ? a->post_read(q, i + 1, local.data() + i * len, len, rva + i * len, rk.rkey)
                                  : a->post_write(q, i + 1, local.data() + i * len, len, rva + i * len, rk.rkey, false);
            EXPECT_EQ(s, Status::ok) << i;
        }
        uint64_t peak = 0;
        EXPECT_TRUE(wait([&] {
            peak = std::max(peak, counter(*a, q, "cc_outstanding_bytes_now"));
            peak_posted = std::max(peak_posted, counter(*a, q, "posted_now"));
            return comps.size() == n;
        })) << comps.size() << " of " << n << " completed";
        for (const Completion& c : comps)
            EXPECT_EQ(c.status, Status::ok) << c.wr_id;
        EXPECT_EQ(pd->dereg_mr(lk.lkey), Status::ok);
        EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
        return peak;
    }
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = uint8_t((i * 131 + seed * 7 + (i >> 8)) & 0xff);
    return v;
}

} // namespace

// A target far below rxe's round trip: no sample is below it, the window never grows and
// requests wait in software, yet every byte arrives. (It does not shrink here: rxe completes a
// WRITE on loopback before the next poll, so each sample is one whose round trip may have been
// anything from 0 to the poll interval - ambiguous, cc::DelayCc. Behind a real queue it does:
// rxe guest group ccverbs.)
TEST_F(VerbsCc, DelayWindowHoldsRequestsAndDataArrives) {
    cc::CcConfig cc;
    cc.mode = cc::CcMode::delay;
    cc.delay.target = 1000;   // 1 us
    cc.delay.init_cwnd = 64 * 1024;
    open(cc);
    if (HasFatalFailure() || IsSkipped()) return;
    const size_t n = 64, len = 16384;
    std::vector<uint8_t> local = pattern(n * len, 3), remote(n * len, 0);
    const uint64_t peak = run(false, n, len, local, remote);
    EXPECT_EQ(remote, local);
    const uint64_t held = counter(*a, q, "cc_held"), samples = counter(*a, q, "rtt_samples");
    const uint64_t cwnd = counter(*a, q, "cc_window_bytes_now");
    EXPECT_GT(held, 0u);
    EXPECT_GT(samples, 0u);
    EXPECT_LE(cwnd, 64u * 1024) << "no RTT is below a 1 us target: the window must not have grown";
    // The window admits one request beyond it at most (a request goes whenever the window has room).
    EXPECT_LE(peak, 64u * 1024 + len);
    std::printf("[verbs-cc] delay: %llu WRs held, %llu RTT samples, window now %llu B, peak outstanding %llu B\n",
                (unsigned long long)held, (unsigned long long)samples, (unsigned long long)cwnd,
                (unsigned long long)peak);
}

// The owner computes for 300 ms between progress calls while a WRITE's completion waits in the
// CQ: the round trip was anything up to 300 ms, so the window is not cut (before: by max_mdf on
// every such absence, and the smoothed RTT took it in).
TEST_F(VerbsCc, AnOwnerAwayIsNoCongestion) {
    cc::CcConfig cc;
    cc.mode = cc::CcMode::delay;
    cc.delay.target = 100'000'000;   // 100 ms: above rxe's round trip under TCG, below the absence
    open(cc);
    if (HasFatalFailure() || IsSkipped()) return;
    std::vector<uint8_t> local = pattern(4096, 7), remote(4096, 0);
    MrKeys lk, rk;
    ASSERT_EQ(pd->reg_mr(local.data(), local.size(), access_all, lk), Status::ok);
    ASSERT_EQ(pd->reg_mr(remote.data(), remote.size(), access_all, rk), Status::ok);
    const uint64_t rva = reinterpret_cast<uintptr_t>(remote.data());
    ASSERT_EQ(a->post_write(q, 1, local.data(), local.size(), rva, rk.rkey, false, lk.lkey), Status::ok);
    ASSERT_TRUE(wait([&] { return comps.size() == 1; }));
    const uint64_t w = counter(*a, q, "cc_window_bytes_now");
    pump();   // polls the CQ empty: what comes next is the WRITE's completion
    ASSERT_EQ(a->post_write(q, 2, local.data(), local.size(), rva, rk.rkey, false, lk.lkey), Status::ok);
    usleep(300'000);   // computing (rxe completes the WRITE meanwhile)
    ASSERT_TRUE(wait([&] { return comps.size() == 2; }));
    for (const Completion& c : comps)
        EXPECT_EQ(c.status, Status::ok) << c.wr_id;
    EXPECT_EQ(remote, local);
    const uint64_t ambiguous = counter(*a, q, "rtt_ambiguous");
    EXPECT_NE(ambiguous, UINT64_MAX);
    EXPECT_GE(ambiguous, 1u);
    EXPECT_GE(counter(*a, q, "cc_window_bytes_now"), w) << "not cut";
    EXPECT_LT(counter(*a, q, "srtt_us_now"), 100'000u) << "the absence is not a round trip";
    EXPECT_EQ(pd->dereg_mr(lk.lkey), Status::ok);
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
}

// Off: nothing is held, the same transfer posts everything at once.
TEST_F(VerbsCc, OffHoldsNothing) {
    cc::CcConfig cc;
    cc.mode = cc::CcMode::off;
    open(cc);
    if (HasFatalFailure() || IsSkipped()) return;
    const size_t n = 64, len = 16384;
    std::vector<uint8_t> local = pattern(n * len, 4), remote(n * len, 0);
    const uint64_t peak = run(false, n, len, local, remote);
    EXPECT_EQ(remote, local);
    EXPECT_EQ(counter(*a, q, "cc_held"), 0u);
    EXPECT_EQ(counter(*a, q, "cc_window_bytes_now"), UINT64_MAX) << "no window in mode off";
    std::printf("[verbs-cc] off: peak outstanding %llu B\n", (unsigned long long)peak);
}

// MAX_RD_BYTES: READ bytes in flight stay under the cap in every mode (here off).
TEST_F(VerbsCc, ReadBytesInFlightStayUnderMaxRdBytes) {
    cc::CcConfig cc;
    cc.mode = cc::CcMode::off;
    cc.read_cap.max_bytes = 32 * 1024;
    open(cc);
    if (HasFatalFailure() || IsSkipped()) return;
    const size_t n = 32, len = 16384;
    std::vector<uint8_t> local(n * len, 0), remote = pattern(n * len, 5);
    const uint64_t peak = run(true, n, len, local, remote);
    EXPECT_EQ(local, remote);
    EXPECT_GT(counter(*a, q, "reads_capped"), 0u);
    EXPECT_LE(peak, 32u * 1024);
    std::printf("[verbs-cc] read cap 32 KiB: peak READ bytes in flight %llu, held %llu times\n",
                (unsigned long long)peak, (unsigned long long)counter(*a, q, "reads_capped"));
}

// A large WRITE and READ in delay mode go out in pieces no larger than a quarter window, so the
// window bounds what is in flight even for 1 MiB requests; one completion each, data intact.
TEST_F(VerbsCc, LargeRequestsAreSplitForTheWindow) {
    cc::CcConfig cc;
    cc.mode = cc::CcMode::delay;
    cc.delay.target = 1000;   // 1 us: the window never grows
    cc.delay.init_cwnd = 64 * 1024;
    open(cc);
    if (HasFatalFailure() || IsSkipped()) return;
    const size_t n = 4, len = 1 << 20;
    std::vector<uint8_t> local = pattern(n * len, 6), remote(n * len, 0);
    const uint64_t peak = run(false, n, len, local, remote);
    EXPECT_EQ(remote, local);
    EXPECT_LE(peak, 64u * 1024 + 16384) << "pieces of at most a quarter window";
    std::vector<uint8_t> back(n * len, 0);
    comps.clear();
    const uint64_t peak_read = run(true, n, len, back, remote);
    EXPECT_EQ(back, remote);
    EXPECT_LE(peak_read, 64u * 1024 + 16384);
    EXPECT_GT(counter(*a, q, "cc_held"), 0u);
    std::printf("[verbs-cc] 1 MiB requests in delay mode: peak outstanding %llu B (WRITE), %llu B (READ)\n",
                (unsigned long long)peak, (unsigned long long)peak_read);
}

// Pieces are cut at post time from the window then (16 KiB here) and do not count against the
// QP's depth; a window that grows meanwhile (target far above the round trip, large increase)
// admits more of them than a 16-deep QP's hardware send queue holds. They must wait for room:
// verbs allows no more WRs outstanding (posted, completion not polled) than max_send_wr. rxe
// frees a slot once its kernel side completed the WR, and took 172 here before the fix; mlx5
// frees it only when the CQE is polled, and answers ENOMEM, which fails the QP.
TEST_F(VerbsCc, PiecesNeverOverfillTheSendQueue) {
    cc::CcConfig cc;
    cc.mode = cc::CcMode::delay;
    cc.delay.target = 10e9;          // 10 s: every sample is below, the window only grows
    cc.delay.init_cwnd = 64 * 1024;  // -> 16 KiB pieces
    cc.delay.ai_bytes = 1 << 20;     // 1 MiB more per round trip, up to max_cwnd (4 MiB)
    sq_depth = 16;
    open(cc);
    if (HasFatalFailure() || IsSkipped()) return;
    const size_t n = 2, len = 4 << 20;   // 512 pieces
    std::vector<uint8_t> local = pattern(n * len, 9), remote(n * len, 0);
    const uint64_t peak = run(false, n, len, local, remote);
    EXPECT_EQ(remote, local);
    const uint64_t hw = counter(*a, q, "hw_send_queue_now");   // 2 x 16 asked, rxe gives 63
    EXPECT_LE(peak_posted, hw) << "more WRs posted than the send queue holds";
    const uint64_t window = counter(*a, q, "cc_window_bytes_now");
    EXPECT_GT(window, 64u * 16384) << "the window never outgrew the hardware queue: proves nothing";
    std::printf("[verbs-cc] 2 x 4 MiB WRITE, 16 KiB pieces, TX queue 16: window %llu B, peak outstanding %llu B, "
                "peak posted %llu WRs (hardware queue %llu)\n", (unsigned long long)window, (unsigned long long)peak,
                (unsigned long long)peak_posted, (unsigned long long)hw);
}

// Small SENDs go inline (the HCA copies the caller's buffer during ibv_post_send). Held behind a
// window they must be copied at post time: the caller reuses its buffer at once.
TEST_F(VerbsCc, HeldInlineSendsKeepTheirData) {
    cc::CcConfig cc;
    cc.mode = cc::CcMode::delay;
    cc.delay.target = 1000;
    cc.delay.init_cwnd = 16 * 1024;
    open(cc);
    if (HasFatalFailure() || IsSkipped()) return;
    const size_t len = 1 << 20;
    std::vector<uint8_t> local = pattern(len, 7), remote(len, 0);
    MrKeys lk, rk;
    ASSERT_EQ(pd->reg_mr(local.data(), len, access_all, lk), Status::ok);
    ASSERT_EQ(pd->reg_mr(remote.data(), len, access_all, rk), Status::ok);
    ASSERT_EQ(a->post_write(q, 1, local.data(), len, reinterpret_cast<uintptr_t>(remote.data()), rk.rkey, false),
              Status::ok);
    const int n = 100;
    int posted = 0;
    for (int i = 0; i < n; ++i) {
        uint32_t msg[8];
        for (uint32_t& w : msg) w = 0x5e000000u + uint32_t(i);
        iovec iov{msg, sizeof(msg)};
        const Status s = a->post_send(q, 0, &iov, 1, nullptr);
        if (s == Status::no_resource) { pump(); --i; continue; }
        ASSERT_EQ(s, Status::ok) << i;
        ++posted;
        std::memset(msg, 0xee, sizeof(msg));   // the caller's buffer is reused at once
    }
    std::vector<std::vector<uint8_t>> got;
    ASSERT_TRUE(wait([&] {
        b->poll_recv([&](const RecvMessage& m) { got.emplace_back(m.data, m.data + m.len); }, 64);
        return int(got.size()) == posted;
    })) << got.size() << " of " << posted << " messages";
    for (int i = 0; i < posted; ++i) {
        ASSERT_EQ(got[size_t(i)].size(), 32u);
        uint32_t w[8];
        std::memcpy(w, got[size_t(i)].data(), 32);
        for (uint32_t x : w) ASSERT_EQ(x, 0x5e000000u + uint32_t(i)) << "message " << i;
    }
    ASSERT_TRUE(wait([&] { return comps.size() == 1; }));
    EXPECT_EQ(remote, local);
    EXPECT_GT(counter(*a, q, "cc_held"), 0u);
    EXPECT_EQ(pd->dereg_mr(lk.lkey), Status::ok);
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
}
