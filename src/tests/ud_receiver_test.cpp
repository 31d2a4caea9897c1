// ud::Receiver alone: the out-of-order budget its transport's receivers share.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ud/receiver.hpp"

using namespace roce::ud;

namespace {

Header data(uint32_t psn) { return Header{PktType::data, flag_first | flag_last, 1, 7, psn, 0, 0}; }

struct Delivered {
    std::vector<size_t> lens;
    void operator()(uint8_t, const uint8_t*, size_t len) { lens.push_back(len); }
};

} // namespace

// Two receivers share a budget of three 100-byte packets: what one holds the other cannot, what
// is consumed or dropped comes back, and a receiver that goes away gives back what it held.
TEST(UdReceiver, HoldBudgetIsSharedAndGivenBack) {
    const size_t one = 100 + HoldBudget::per_packet;
    HoldBudget budget;
    budget.limit = 3 * one;
    const std::vector<uint8_t> payload(100, 0x3c);
    Delivered got;
    auto r1 = std::make_unique<Receiver>(ReceiverConfig{}, &budget);
    Receiver r2(ReceiverConfig{}, &budget);

    r1->receive(data(1), payload.data(), payload.size(), 0, got);   // hole at 0: held
    r1->receive(data(2), payload.data(), payload.size(), 0, got);
    r2.receive(data(1), payload.data(), payload.size(), 0, got);
    EXPECT_EQ(budget.used, 3 * one);
    r2.receive(data(2), payload.data(), payload.size(), 0, got);    // over budget: dropped
    EXPECT_EQ(r2.stats().over_budget, 1u);
    EXPECT_EQ(r2.stats().out_of_order, 1u);
    EXPECT_EQ(r2.sack(), 0b1u);                                     // only psn 1 is reported held
    EXPECT_TRUE(got.lens.empty());

    r1->receive(data(0), payload.data(), payload.size(), 0, got);   // fills the hole: 0, 1, 2 delivered
    EXPECT_EQ(got.lens.size(), 3u);
    EXPECT_EQ(r1->ack(), 3u);
    EXPECT_EQ(budget.used, one);
    r2.receive(data(2), payload.data(), payload.size(), 0, got);    // room again (a retransmission)
    EXPECT_EQ(r2.stats().out_of_order, 2u);
    EXPECT_EQ(budget.used, 2 * one);

    r1->receive(data(5), payload.data(), payload.size(), 0, got);
    EXPECT_EQ(budget.used, 3 * one);
    r1.reset();                                                     // destroyed holding psn 5
    EXPECT_EQ(budget.used, 2 * one);
    r2.drop_held();                                                 // a failed peer
    EXPECT_EQ(budget.used, 0u);
    EXPECT_EQ(r2.sack(), 0u);
    r2.receive(data(0), payload.data(), payload.size(), 0, got);    // it goes on from its sequence
    EXPECT_EQ(r2.ack(), 1u);
}

// Without a budget a receiver is bounded by its window alone (the transport always passes one).
TEST(UdReceiver, WithoutBudgetTheWindowBounds) {
    ReceiverConfig cfg;
    cfg.window = 8;
    Receiver r(cfg);
    Delivered got;
    const std::vector<uint8_t> payload(10, 1);
    for (uint32_t psn = 1; psn <= 20; ++psn) r.receive(data(psn), payload.data(), payload.size(), 0, got);
    EXPECT_EQ(r.stats().out_of_order, 8u);
    EXPECT_EQ(r.stats().out_of_window, 12u);
    EXPECT_EQ(r.stats().over_budget, 0u);
}

// An AM is at most max_msg bytes however it arrives: in fragments, or as one datagram larger than
// the limit (a socket hands up whatever was sent, up to 64 KiB). The sequence goes on after it.
TEST(UdReceiver, NothingAboveMaxMsgIsDelivered) {
    ReceiverConfig cfg;
    cfg.max_msg = 1000;
    Receiver r(cfg);
    Delivered got;
    const std::vector<uint8_t> big(1001, 1), ok(1000, 2);
    r.receive(data(0), big.data(), big.size(), 0, got);
    EXPECT_EQ(r.stats().malformed, 1u);
    r.receive(data(1), ok.data(), ok.size(), 0, got);
    Header first{PktType::data, flag_first, 1, 7, 2, 0, 0}, last{PktType::data, flag_last, 1, 7, 3, 0, 0};
    r.receive(first, ok.data(), 600, 0, got);   // 600 + 401 fragments: over the limit
    r.receive(last, big.data(), 401, 0, got);
    EXPECT_EQ(r.stats().malformed, 2u);
    EXPECT_EQ(got.lens, std::vector<size_t>{1000});
    EXPECT_EQ(r.ack(), 4u);
}
