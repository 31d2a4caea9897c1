// Per-QP counters of the userspace device (what `roce_doctor counters` shows per QP and per
// peer) against faults whose number is known: every dropped packet of a stop-and-wait sender is
// one timeout and one retransmission on its QP, a refused WRITE is one remote-access NAK each way.
#include <gtest/gtest.h>

#include <string>

#include "sw/device_impl.hpp"
#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {

// The named counter of QP `qpn` on `dev` (fails the test when the QP or the counter is missing).
uint64_t qp_counter(const Device& dev, uint32_t qpn, const std::string& name) {
    for (const auto& q : dev.qp_counters()) {
        if (q.qpn != qpn)
            continue;
        for (const auto& [k, v] : q.counters)
            if (k == name)
                return v;
        ADD_FAILURE() << "QP 0x" << std::hex << qpn << " has no counter " << name;
        return 0;
    }
    ADD_FAILURE() << "no counters for QP 0x" << std::hex << qpn;
    return 0;
}

} // namespace

TEST(SwCounters, EachDroppedPacketIsOneTimeoutAndOneRetransmissionOfItsQp) {
    DeviceConfig ca, cb;
    // A retransmission timeout far above loopback's round trip: no spurious retransmissions, so
    // the counts must match exactly.
    ca.retransmit_timeout_us = cb.retransmit_timeout_us = 100000;
    ca.faults.drop = 0.05;
    ca.faults.seed = 11;
    Pair p;
    ASSERT_TRUE(p.open(ca, cb));
    const DeviceStats a0 = p.a.dev->stats();
    const uint64_t retx0 = qp_counter(*p.a.dev, p.qa, "retransmits");
    const uint64_t tout0 = qp_counter(*p.a.dev, p.qa, "timeouts");
    const uint64_t tx0 = qp_counter(*p.a.dev, p.qa, "tx_packets");
    const uint64_t rx0 = qp_counter(*p.b.dev, p.qb, "rx_packets");
    constexpr int n = 300;
    for (int i = 0; i < n; ++i) {   // stop and wait: one packet in flight, nothing to NAK a gap
        auto payload = random_bytes(64, uint32_t(i));
        iovec iov{payload.data(), payload.size()};
        ASSERT_EQ(p.a.dev->post_send(p.qa, uint64_t(i) + 1, &iov, 1), Status::ok);
        ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(uint64_t(i) + 1) != nullptr; }, 10)) << i;
        ASSERT_EQ(p.a.find(uint64_t(i) + 1)->status, Status::ok);
        ASSERT_EQ(p.b.msgs.back().data, payload);
    }
    const uint64_t drops = p.a.dev->stats().faults_dropped - a0.faults_dropped;
    EXPECT_GE(drops, 5u);   // 5% of >= 300 packets (seeded)
    EXPECT_EQ(qp_counter(*p.a.dev, p.qa, "retransmits") - retx0, drops);
    EXPECT_EQ(qp_counter(*p.a.dev, p.qa, "timeouts") - tout0, drops);
    EXPECT_EQ(p.a.dev->stats().retransmits - a0.retransmits, drops);
    // Every packet the QP sent arrived at the peer's QP except the dropped ones, none twice.
    const uint64_t sent = qp_counter(*p.a.dev, p.qa, "tx_packets") - tx0;
    EXPECT_EQ(sent, uint64_t(n) + drops);
    EXPECT_EQ(qp_counter(*p.b.dev, p.qb, "rx_packets") - rx0, sent - drops);
    EXPECT_EQ(qp_counter(*p.b.dev, p.qb, "duplicates"), 0u);
    // The QP's peer is named as the peer device's address (what roce_doctor sums per peer).
    bool found = false;
    for (const auto& q : p.a.dev->qp_counters())
        if (q.qpn == p.qa) {
            found = true;
            EXPECT_EQ(q.peer, p.b.dev->address().to_string());
            EXPECT_EQ(q.dest_qpn, p.qb);
            EXPECT_EQ(q.state, QpState::rts);
        }
    EXPECT_TRUE(found);
}

TEST(SwCounters, RefusedWriteIsOneRemoteAccessNakEachWay) {
    Pair p;
    ASSERT_TRUE(p.open(DeviceConfig{}, DeviceConfig{}));
    std::vector<uint8_t> target(4096, 0xee);
    MrKeys keys;
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_local_write | access_remote_read, keys), Status::ok);
    uint8_t x[16] = {1};
    ASSERT_EQ(p.a.dev->post_write(p.qa, 9, x, sizeof(x), reinterpret_cast<uintptr_t>(target.data()), keys.rkey, true),
              Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(9) != nullptr; }, 10));
    EXPECT_EQ(p.a.find(9)->status, Status::remote_access);
    EXPECT_EQ(target[0], 0xee);
    EXPECT_EQ(qp_counter(*p.b.dev, p.qb, "naks_sent_access"), 1u);
    EXPECT_EQ(qp_counter(*p.a.dev, p.qa, "naks_received_access"), 1u);
    EXPECT_EQ(qp_counter(*p.a.dev, p.qa, "naks_received_seq"), 0u);
    EXPECT_EQ(p.b.dev->stats().naks_sent_access, 1u);
    EXPECT_EQ(p.b.dev->stats().naks_sent, 1u);
    EXPECT_EQ(p.a.dev->stats().naks_received_access, 1u);
    EXPECT_EQ(qp_counter(*p.a.dev, p.qa, "outstanding_now"), 0u);
}

TEST(SwCounters, ClosedQpsOfManyPeersAreBounded) {
    // Each destroyed QP's counters stay with its peer, but peers (address and port) are chosen
    // remotely: beyond RcDevice::max_closed_peers the rest are summed under one entry.
    DeviceConfig c;
    c.progress_thread = false;
    Host a;
    ASSERT_EQ(a.open(c), Status::ok);
    const size_t n = RcDevice::max_closed_peers + 100;
    for (size_t i = 0; i < n; ++i) {
        uint32_t q = 0;
        ASSERT_EQ(a.dev->create_qp(q), Status::ok);
        ManualPeer peer;
        peer.addr = a.dev->address();
        peer.addr.port = uint16_t(20000 + i);
        peer.qpn = 0x100 + uint32_t(i);
        ASSERT_EQ(a.dev->connect_qp_manual(q, peer), Status::ok);
        ASSERT_EQ(a.dev->destroy_qp(q), Status::ok);
    }
    size_t closed = 0, other = 0;
    for (const auto& q : a.dev->qp_counters()) {
        closed += q.closed;
        other += q.closed && q.peer == RcDevice::closed_other_peer;
    }
    EXPECT_EQ(closed, RcDevice::max_closed_peers + 1);
    EXPECT_EQ(other, 1u);
}
