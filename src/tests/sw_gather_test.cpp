// Gather send (DeviceImpl::emit_gather): zero-copy WRITEs and READ responses leave with their
// payload read in place by the kernel, bcopy'd and small payloads are copied; the bytes that
// arrive are the bytes posted, and a READ response whose region is deregistered before its
// send is dropped, not sent from freed memory.
#include <gtest/gtest.h>

#include <mutex>

#include "sw/device_impl.hpp"
#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {

DeviceImpl& impl(Host& h) { return static_cast<DeviceImpl&>(*h.dev); }

} // namespace

TEST(SwGather, ZeroCopyWriteAndReadResponsesGoInPlace) {
    Pair p;
    ASSERT_TRUE(p.open(DeviceConfig{}, DeviceConfig{}));
    if (!impl(p.a).gso_ || !impl(p.b).gso_)
        GTEST_SKIP() << "no UDP GSO here: the gather path is off";
    const auto src = random_bytes(4 << 20, 1), remote = random_bytes(4 << 20, 2);
    std::vector<uint8_t> target(src.size()), back(remote.size());
    MrKeys kt, kr;
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, kt), Status::ok);
    auto rem = remote;
    ASSERT_EQ(p.b.pd->reg_mr(rem.data(), rem.size(), access_all, kr), Status::ok);

    const uint64_t a0 = p.a.dev->stats().tx_gathered;
    ASSERT_EQ(p.a.dev->post_write(p.qa, 1, src.data(), src.size(), uint64_t(uintptr_t(target.data())), kt.rkey, false),
              Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(1) != nullptr; }));
    EXPECT_EQ(p.a.find(1)->status, Status::ok);
    EXPECT_EQ(target, src);
    const uint64_t a1 = p.a.dev->stats().tx_gathered;
    EXPECT_GE(a1 - a0, (src.size() + 4095) / 4096) << "every full packet of the WRITE gathered";

    // bcopy (the device's own copy, pooled) and a small zero-copy WRITE: copied into the slot.
    ASSERT_EQ(p.a.dev->post_write(p.qa, 2, src.data(), 8192, uint64_t(uintptr_t(target.data())), kt.rkey, true),
              Status::ok);
    ASSERT_EQ(p.a.dev->post_write(p.qa, 3, src.data() + 8192, 512, uint64_t(uintptr_t(target.data() + 8192)),
                                  kt.rkey, false),
              Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(2) && p.a.find(3); }));
    EXPECT_EQ(p.a.dev->stats().tx_gathered, a1);

    const uint64_t b0 = p.b.dev->stats().tx_gathered;
    ASSERT_EQ(p.a.dev->post_read(p.qa, 4, back.data(), back.size(), uint64_t(uintptr_t(rem.data())), kr.rkey),
              Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(4) != nullptr; }));
    EXPECT_EQ(p.a.find(4)->status, Status::ok);
    EXPECT_EQ(back, remote);
    EXPECT_GE(p.b.dev->stats().tx_gathered - b0, (back.size() + 4095) / 4096);
    EXPECT_EQ(p.a.dev->stats().icrc_errors, 0u);
    EXPECT_EQ(p.b.dev->stats().icrc_errors, 0u);
}

TEST(SwGather, ResponseIntoDeregisteredRegionIsDropped) {
    DeviceConfig cb;
    cb.progress_thread = false;   // nothing but this test touches b's queue
    Pair p;
    ASSERT_TRUE(p.open(DeviceConfig{}, cb));
    DeviceImpl& b = impl(p.b);
    if (!b.gso_)
        GTEST_SKIP() << "no UDP GSO here: the gather path is off";
    auto region = random_bytes(8192, 3);
    const uint64_t va = uint64_t(uintptr_t(region.data()));
    // Queues one gathered READ response from the region, as read_responses does.
    auto queue_response = [&](uint32_t rkey) {
        std::lock_guard lk(b.mu_);
        Qp* qp = b.find_qp(p.qb);
        ASSERT_NE(qp, nullptr);
        wire::Packet pkt;
        pkt.bth.opcode = uint8_t(wire::Opcode::rc_read_response_only);
        pkt.aeth.syndrome = wire::aeth_ack_syndrome;
        b.emit_gather(*qp, pkt, std::span<const uint8_t>(region.data(), 4096), rkey, va);
        ASSERT_EQ(b.tx_n_, 1u);
        ASSERT_EQ(b.tx_[0].ext, region.data()) << "queued pointing at the region, not copied";
    };
    auto flush = [&] {
        std::lock_guard lk(b.mu_);
        b.tx_flush();
    };
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(region.data(), region.size(), access_all, k), Status::ok);
    const DeviceStats s0 = b.stats();
    queue_response(k.rkey);
    flush();
    DeviceStats s1 = b.stats();
    EXPECT_EQ(s1.tx_gathered, s0.tx_gathered + 1);
    EXPECT_EQ(s1.tx_region_gone, 0u);

    queue_response(k.rkey);
    ASSERT_EQ(p.b.pd->dereg_mr(k.lkey), Status::ok);
    flush();
    const DeviceStats s2 = b.stats();
    EXPECT_EQ(s2.tx_region_gone, 1u);
    EXPECT_EQ(s2.tx_gathered, s1.tx_gathered) << "sent although its region was gone";
    EXPECT_EQ(s2.tx_packets, s1.tx_packets);

    // Another region deregistered (the generation moves) leaves a registered one's responses be.
    MrKeys k2, k3;
    ASSERT_EQ(p.b.pd->reg_mr(region.data(), region.size(), access_all, k2), Status::ok);
    std::vector<uint8_t> other(64);
    ASSERT_EQ(p.b.pd->reg_mr(other.data(), other.size(), access_all, k3), Status::ok);
    queue_response(k2.rkey);
    ASSERT_EQ(p.b.pd->dereg_mr(k3.lkey), Status::ok);
    flush();
    EXPECT_EQ(b.stats().tx_gathered, s2.tx_gathered + 1);
    EXPECT_EQ(b.stats().tx_region_gone, 1u);
}
