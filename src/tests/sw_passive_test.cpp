// Passive target: the target's owner never calls progress() (it "computes"); the device's
// background thread must serve RDMA READ/WRITE/atomics and queue SENDs for the owner.
#include <gtest/gtest.h>

#include <cstring>
#include <poll.h>

#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

TEST(SwPassive, TargetNeverProgresses) {
    Pair p;
    ASSERT_TRUE(p.open(DeviceConfig{}, DeviceConfig{}));
    std::vector<uint8_t> target(1 << 20);
    alignas(8) uint64_t counter = 0;
    MrKeys k, kc;
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
    ASSERT_EQ(p.b.pd->reg_mr(&counter, 8, access_all, kc), Status::ok);
    p.b.drive_progress = false;   // from now on b's owner is busy elsewhere
    const uint64_t tva = uint64_t(uintptr_t(target.data()));
    std::vector<uint8_t> src(4096), dst(4096);
    uint64_t adds = 0;
    uint64_t r = 0;
    for (int i = 0; i < 1000; ++i) {
        const uint64_t id = uint64_t(i) + 1;
        const size_t off = size_t(i % 256) * 4096;
        const int kind = i % 3;
        if (kind == 0) {
            std::memset(src.data(), i & 0xff, src.size());
            ASSERT_EQ(p.a.dev->post_write(p.qa, id, src.data(), src.size(), tva + off, k.rkey, true), Status::ok);
        } else if (kind == 1) {
            ASSERT_EQ(p.a.dev->post_read(p.qa, id, dst.data(), dst.size(), tva + off, k.rkey), Status::ok);
        } else {
            ASSERT_EQ(p.a.dev->post_fetch_add(p.qa, id, uint64_t(uintptr_t(&counter)), kc.rkey, 1, &r), Status::ok);
            ++adds;
        }
        ASSERT_TRUE(run_until({&p.a}, [&] { return p.a.find(id) != nullptr; }, 10)) << "op " << i;
        ASSERT_EQ(p.a.find(id)->status, Status::ok);
        if (kind == 1) {
            ASSERT_EQ(std::memcmp(dst.data(), target.data() + off, dst.size()), 0);
        }
        if (kind == 2) {
            ASSERT_EQ(r, adds - 1);
        }
    }
    EXPECT_EQ(__atomic_load_n(&counter, __ATOMIC_SEQ_CST), adds);
    // SENDs received while the owner computes are queued, and the event fd says so.
    for (uint32_t i = 0; i < 5; ++i) {
        iovec iov{&i, 4};
        ASSERT_EQ(p.a.dev->post_send(p.qa, 5000 + i, &iov, 1), Status::ok);
    }
    ASSERT_TRUE(run_until({&p.a}, [&] { return p.a.find(5004) != nullptr; }, 10));
    pollfd pf{p.b.dev->event_fd(), POLLIN, 0};
    EXPECT_EQ(poll(&pf, 1, 1000), 1);
    p.b.drive_progress = true;
    ASSERT_TRUE(run_until({&p.b}, [&] { return p.b.msgs.size() == 5; }, 5));
    for (uint32_t i = 0; i < 5; ++i) {
        uint32_t v;
        std::memcpy(&v, p.b.msgs[i].data.data(), 4);
        EXPECT_EQ(v, i);
    }
}

TEST(SwPassive, DestructorStopsThreadPromptly) {
    for (int i = 0; i < 20; ++i) {
        std::vector<uint8_t> buf(1 << 20), local(1 << 20);   // memory must outlive the devices
        Pair p;
        ASSERT_TRUE(p.open(DeviceConfig{}, DeviceConfig{}));
        p.b.drive_progress = false;
        MrKeys k;
        ASSERT_EQ(p.b.pd->reg_mr(buf.data(), buf.size(), access_all, k), Status::ok);
        ASSERT_EQ(p.a.dev->post_read(p.qa, 1, local.data(), local.size(), uint64_t(uintptr_t(buf.data())), k.rkey),
                  Status::ok);
        p.a.poll();
        // both destroyed with traffic in flight (b first, while its thread may be working)
    }
}

TEST(SwPassive, LossyLinkTargetNeverProgresses) {
    DeviceConfig c;
    c.faults.drop = 0.02;
    c.faults.reorder = 0.01;
    c.retransmit_timeout_us = 1000;
    c.retry_count = 30;
    DeviceConfig cb = c;
    cb.faults.seed = 99;
    std::vector<uint8_t> target(1 << 20);
    alignas(8) uint64_t counter = 0;
    Pair p;
    ASSERT_TRUE(p.open(c, cb, 20));
    MrKeys k, kc;
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
    ASSERT_EQ(p.b.pd->reg_mr(&counter, 8, access_all, kc), Status::ok);
    p.b.drive_progress = false;
    const uint64_t tva = uint64_t(uintptr_t(target.data()));
    std::vector<uint8_t> src(65536), dst(65536);
    uint64_t r = 0, adds = 0;
    for (int i = 0; i < 300; ++i) {
        const uint64_t id = uint64_t(i) + 1;
        const size_t off = size_t(i % 16) * 65536;
        if (i % 3 == 0) {
            std::memset(src.data(), i & 0xff, src.size());
            ASSERT_EQ(p.a.dev->post_write(p.qa, id, src.data(), src.size(), tva + off, k.rkey, false), Status::ok);
        } else if (i % 3 == 1) {
            ASSERT_EQ(p.a.dev->post_read(p.qa, id, dst.data(), dst.size(), tva + off, k.rkey), Status::ok);
        } else {
            ASSERT_EQ(p.a.dev->post_fetch_add(p.qa, id, uint64_t(uintptr_t(&counter)), kc.rkey, 1, &r), Status::ok);
            ++adds;
        }
        ASSERT_TRUE(run_until({&p.a}, [&] { return p.a.find(id) != nullptr; }, 20)) << "op " << i;
        ASSERT_EQ(p.a.find(id)->status, Status::ok);
        if (i % 3 == 1) {
            ASSERT_EQ(std::memcmp(dst.data(), target.data() + off, dst.size()), 0);
        }
        if (i % 3 == 2) {
            ASSERT_EQ(r, adds - 1);
        }
    }
    EXPECT_GT(p.b.dev->stats().faults_dropped, 0u);
    p.b.dev.reset();
}
