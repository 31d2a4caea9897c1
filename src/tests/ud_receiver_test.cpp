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

namespace {
Header frag(uint32_t psn, uint8_t flags) { return Header{PktType::data, flags, 1, 7, psn, 0, 0}; }
} // namespace

// Fragmented AMs reserve SEG_SIZE (max_msg) of the reassembly pool when they start: with room for
// two, a third peer's first fragment is dropped (not acknowledged) until one of the two completes;
// fragments of an AM under way are always taken, so the AMs under way always complete. Before,
// unfinished AMs were not counted at all: every peer - and a source QP number is only a header
// field - could keep up to SEG_SIZE.
// Receivers sharing one reassembly pool, AMs of up to 1000 bytes.
struct UdReceiverPool : ::testing::Test {
    ReceiverConfig cfg = [] {
        ReceiverConfig c;
        c.max_msg = 1000;
        return c;
    }();
    HoldBudget budget;
    Delivered got;
    void room_for(size_t ams) { budget.reasm_limit = ams * cfg.max_msg; }
};

TEST_F(UdReceiverPool, ReassemblyReservesItsShareOfThePool) {
    room_for(2);
    const std::vector<uint8_t> part(400, 9);
    Receiver r1(cfg, &budget), r2(cfg, &budget), r3(cfg, &budget);
    r1.receive(frag(0, flag_first), part.data(), part.size(), 0, got);
    r2.receive(frag(0, flag_first), part.data(), part.size(), 0, got);
    EXPECT_EQ(budget.reasm_used, 2000u);
    r3.receive(frag(0, flag_first), part.data(), part.size(), 0, got);
    EXPECT_EQ(r3.ack(), 0u) << "the third AM may not start";
    EXPECT_EQ(r3.stats().over_budget, 1u);
    r1.receive(frag(1, 0), part.data(), part.size(), 0, got);           // under way: taken
    r1.receive(frag(2, flag_last), part.data(), 100, 0, got);
    ASSERT_EQ(got.lens, std::vector<size_t>{900});
    EXPECT_EQ(budget.reasm_used, 1000u);
    r3.receive(frag(0, flag_first), part.data(), part.size(), 0, got);  // the retransmission
    EXPECT_EQ(r3.ack(), 1u);
    EXPECT_EQ(budget.reasm_used, 2000u);
    // A whole AM needs no reservation, even with the pool spent.
    Receiver r4(cfg, &budget);
    r4.receive(frag(0, flag_first | flag_last), part.data(), part.size(), 0, got);
    EXPECT_EQ(r4.ack(), 1u);
    // A failed peer gives its reservation back; an AM cut short by a whole one too.
    r2.drop_held();
    EXPECT_EQ(budget.reasm_used, 1000u);
    r3.receive(frag(1, flag_first | flag_last), part.data(), 10, 0, got);
    EXPECT_EQ(r3.stats().malformed, 1u);
    EXPECT_EQ(budget.reasm_used, 0u);
    EXPECT_EQ(budget.used, 0u);
}

// A held first fragment the pool has no room for stops the drain of held packets; it is taken
// when it comes again, replacing the held copy (whose charge goes back), and the rest drains.
TEST_F(UdReceiverPool, HeldFirstFragmentWaitsForARoom) {
    room_for(1);
    const std::vector<uint8_t> part(300, 5);
    Receiver busy(cfg, &budget), r(cfg, &budget);
    busy.receive(frag(0, flag_first), part.data(), part.size(), 0, got);   // takes the pool
    r.receive(frag(2, flag_first), part.data(), part.size(), 0, got);      // held (hole at 1)
    r.receive(frag(3, flag_last), part.data(), part.size(), 0, got);       // held
    r.receive(frag(0, flag_first | flag_last), part.data(), 10, 0, got);   // whole AM
    r.receive(frag(1, flag_first | flag_last), part.data(), 20, 0, got);   // fills the hole
    EXPECT_EQ(r.ack(), 2u) << "the drain stops at the held first fragment";
    EXPECT_EQ(got.lens, (std::vector<size_t>{10, 20}));
    busy.receive(frag(1, flag_last), part.data(), part.size(), 0, got);    // the pool is free
    r.receive(frag(2, flag_first), part.data(), part.size(), 0, got);      // the retransmission
    EXPECT_EQ(r.ack(), 4u);
    EXPECT_EQ(got.lens, (std::vector<size_t>{10, 20, 600, 600}));
    EXPECT_EQ(budget.used, 0u) << "the held copies' charge went back";
    EXPECT_EQ(budget.reasm_used, 0u);
    EXPECT_GT(budget.spare.capacity(), 0u) << "a finished AM's buffer serves the next";
}

// An AM whose sender fell silent gives its share of the pool back (release_stale); should the
// sender come back after all, the rest of that AM is not taken nor acknowledged - it times out
// and says so - instead of being consumed without the first part (an AM lost in silence).
TEST_F(UdReceiverPool, SilentSendersShareGoesBackAndTheRestIsRefused) {
    room_for(1);
    const std::vector<uint8_t> part(300, 5);
    Receiver r(cfg, &budget);
    const uint64_t s = 1'000'000'000;
    r.receive(frag(0, flag_first), part.data(), part.size(), 0, got);
    r.receive(frag(2, 0), part.data(), part.size(), 0, got);   // held (hole at 1)
    EXPECT_GT(budget.used, 0u);
    EXPECT_FALSE(r.release_stale(s / 2, s)) << "not silent for long enough";
    r.heard(s);   // a packet not taken (Transport: the owner away) is news from the sender too
    EXPECT_FALSE(r.release_stale(3 * s / 2, s));
    EXPECT_EQ(budget.reasm_used, 1000u);
    EXPECT_TRUE(r.release_stale(3 * s, s));
    EXPECT_EQ(budget.reasm_used, 0u);
    EXPECT_EQ(budget.used, 0u) << "what was held behind it would never drain";
    EXPECT_EQ(r.stats().reasm_expired, 1u);
    r.receive(frag(3, flag_last), part.data(), part.size(), 3 * s, got);   // the sender, back
    r.receive(frag(1, 0), part.data(), part.size(), 3 * s, got);
    EXPECT_EQ(r.ack(), 1u) << "the rest of the given-up AM was taken";
    EXPECT_EQ(r.stats().reasm_refused, 2u);
    EXPECT_EQ(budget.used, 0u);
    EXPECT_TRUE(got.lens.empty());
    // A peer that fails and starts over is a new sequence: nothing refused any more.
    r.drop_held();
    r.receive(frag(1, flag_first | flag_last), part.data(), 10, 3 * s, got);
    EXPECT_EQ(r.ack(), 2u);
    EXPECT_EQ(got.lens, std::vector<size_t>{10});
}
