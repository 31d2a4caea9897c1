// The soak in short, at the device level, for the sanitizer build (ASan's leak check runs at
// exit): for ROCE_SW_SOAK_SECONDS (default 3) two devices with every fault on exchange SENDs,
// WRITEs, READs and atomics over QPs that are created, used and destroyed again and again — every
// byte checked, every operation completed exactly once, nothing left behind (the device's QP
// table and registered regions are back to where they started).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "sw/device_impl.hpp"
#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

TEST(SwSoak, TrafficWithFaultsAndQpChurnLeavesNothingBehind) {
    const char* env = std::getenv("ROCE_SW_SOAK_SECONDS");
    const double seconds = env ? std::atof(env) : 3.0;
    DeviceConfig cfg;
    cfg.retransmit_timeout_us = 1000;
    cfg.faults.drop = cfg.faults.duplicate = cfg.faults.reorder = 0.01;
    cfg.faults.corrupt = cfg.faults.truncate = 0.002;
    cfg.faults.drop_acks = cfg.faults.delay = 0.01;
    cfg.faults.delay_us = 1000;
    cfg.faults.seed = 7;
    Host a, b;
    ASSERT_EQ(a.open(cfg), Status::ok);
    cfg.faults.seed = 8;
    ASSERT_EQ(b.open(cfg), Status::ok);
    auto* ia = static_cast<DeviceImpl*>(a.dev.get());
    auto* ib = static_cast<DeviceImpl*>(b.dev.get());
    std::vector<uint8_t> target(1 << 20, 0), local(1 << 20);
    MrKeys tk;
    ASSERT_EQ(b.pd->reg_mr(target.data(), target.size(), access_all, tk), Status::ok);
    const uintptr_t tva = reinterpret_cast<uintptr_t>(target.data());
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    uint64_t id = 1, ops = 0, rounds = 0;
    while (std::chrono::steady_clock::now() < end) {
        uint32_t q;
        ASSERT_EQ(a.dev->create_qp(q), Status::ok);
        ASSERT_EQ(a.dev->connect_qp(q, b.dev->address()), Status::ok);
        ASSERT_TRUE(run_until({&a, &b}, [&] { return a.dev->qp_state(q) == QpState::rts; }, 10));
        const size_t n = 1 + (rounds * 7919) % 200000;
        const auto data = random_bytes(n, uint32_t(rounds));
        // SEND, then WRITE what the READ brings back, then a fetch-add: all must land intact.
        iovec iov{const_cast<uint8_t*>(data.data()), std::min<size_t>(n, 60000)};
        const size_t msgs = b.msgs.size();
        ASSERT_EQ(a.dev->post_send(q, id, &iov, 1), Status::ok);
        ASSERT_EQ(a.dev->post_write(q, id + 1, data.data(), n, tva, tk.rkey, true), Status::ok);
        ASSERT_EQ(a.dev->post_read(q, id + 2, local.data(), n, tva, tk.rkey), Status::ok);
        uint64_t before = 0;
        ASSERT_EQ(a.dev->post_fetch_add(q, id + 3, tva + (1 << 20) - 8, tk.rkey, 1, &before), Status::ok);
        ASSERT_TRUE(run_until({&a, &b}, [&] { return a.find(id + 3) != nullptr && b.msgs.size() > msgs; }, 20))
            << "round " << rounds;
        for (uint64_t k = id; k < id + 4; ++k)
            ASSERT_EQ(a.find(k)->status, Status::ok) << "op " << k - id << " of round " << rounds;
        ASSERT_EQ(b.msgs.size(), msgs + 1);   // exactly once
        ASSERT_EQ(0, std::memcmp(b.msgs.back().data.data(), data.data(), iov.iov_len));
        ASSERT_EQ(0, std::memcmp(local.data(), data.data(), n)) << "READ of round " << rounds;
        ASSERT_EQ(before, rounds);   // the counter at the region's end counts the rounds
        ASSERT_EQ(a.dev->destroy_qp(q), Status::ok);
        id += 4;
        ops += 4;
        ++rounds;
        a.comps.clear();
        b.msgs.clear();
    }
    // The passive QPs go away with their peers' (DREQ): both tables end empty.
    const bool empty = run_until({&a, &b}, [&] {
        std::scoped_lock lk(ia->mu_, ib->mu_);
        return ia->qps_.empty() && ib->qps_.empty();
    }, 10);
    if (!empty) {
        std::scoped_lock lk(ia->mu_, ib->mu_);
        for (const auto* d : {ia, ib})
            for (const auto& [q, qp] : d->qps_)
                ADD_FAILURE() << (d == ia ? "a" : "b") << " still has qp 0x" << std::hex << q << " state "
                              << to_string(qp->state) << (qp->passive ? " passive" : " active") << ", closing "
                              << d->closing_.size();
    }
    const DeviceStats sa = a.dev->stats(), sb = b.dev->stats();
    std::printf("[soak] %llu rounds, %llu operations verified; injected: %llu dropped, %llu duplicated, %llu reordered, "
                "%llu corrupted, %llu truncated, %llu delayed\n",
                (unsigned long long)rounds, (unsigned long long)ops,
                (unsigned long long)(sa.faults_dropped + sb.faults_dropped),
                (unsigned long long)(sa.faults_duplicated + sb.faults_duplicated),
                (unsigned long long)(sa.faults_reordered + sb.faults_reordered),
                (unsigned long long)(sa.faults_corrupted + sb.faults_corrupted),
                (unsigned long long)(sa.faults_truncated + sb.faults_truncated),
                (unsigned long long)(sa.faults_delayed + sb.faults_delayed));
    EXPECT_GT(rounds, 3u);
    EXPECT_EQ(b.pd->dereg_mr(tk.lkey), Status::ok);
}
