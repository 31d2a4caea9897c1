// ud_roce's sender queue (ud/packet_queue.hpp) and when the sender asks for an immediate ACK.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "ud/packet_queue.hpp"
#include "ud/sender.hpp"

namespace roce::ud {
namespace {

struct P {
    uint32_t psn = 0;
    std::vector<uint8_t> payload;
};

TEST(UdPacketQueue, GrowsAcrossTheWrapAndKeepsOrder) {
    PacketQueue<P> q;
    uint32_t next = 0, expect = 0;
    // Keep the ring partly full while it grows, so that growth happens with head_ != 0.
    for (int round = 0; round < 50; ++round) {
        for (int i = 0; i < 7; ++i) {
            P& p = q.push_back();
            EXPECT_TRUE(p.payload.empty());
            p.psn = next++;
            p.payload.assign(size_t(p.psn % 13 + 1), uint8_t(p.psn));
        }
        for (int i = 0; i < 4; ++i) {
            ASSERT_EQ(q.front().psn, expect);
            EXPECT_EQ(q.front().payload.size(), size_t(expect % 13 + 1));
            EXPECT_EQ(q.front().payload[0], uint8_t(expect));
            q.pop_front();
            ++expect;
        }
        for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i].psn, expect + i);
    }
    EXPECT_EQ(q.size(), size_t(next - expect));
    q.clear();
    EXPECT_TRUE(q.empty());
}

TEST(UdPacketQueue, KeepsAtMostKeepBuffersIdleBuffers) {
    PacketQueue<P> q;
    const size_t n = 3 * PacketQueue<P>::keep_buffers;
    for (size_t i = 0; i < n; ++i) q.push_back().payload.assign(1000, 1);
    q.clear();
    size_t with_memory = 0;
    // Every slot comes back with the capacity its last occupant left.
    for (size_t i = 0; i < n; ++i) with_memory += q.push_back().payload.capacity() != 0;
    EXPECT_EQ(with_memory, PacketQueue<P>::keep_buffers);
}

// Beyond the kept ones, retired buffers go to the shared pool (up to its limit), and another
// queue's new packets take them from there: a window of 256 packets in flight to one peer
// allocated and freed a buffer per packet beyond 64 before (glibc trimmed and regrew its heap).
TEST(UdPacketQueue, BuffersBeyondTheKeptGoToTheSharedPool) {
    const size_t k = PacketQueue<P>::keep_buffers;
    BufferPool pool(k + 10);
    PacketQueue<P> a(&pool), b(&pool);
    std::vector<const uint8_t*> retired;
    for (size_t i = 0; i < 3 * k; ++i) a.push_back().payload.assign(1000, 1);
    for (size_t i = 0; i < 3 * k; ++i) {
        if (i >= k) retired.push_back(a.front().payload.data());   // the ones a keeps are first
        a.pop_front();
    }
    EXPECT_EQ(pool.idle(), k + 10);   // 2k retired beyond the kept, the limit keeps k + 10
    size_t reused = 0;
    for (size_t i = 0; i < k + 20; ++i) {
        P& p = b.push_back();
        EXPECT_TRUE(p.payload.empty());
        if (p.payload.capacity() >= 1000 &&
            std::find(retired.begin(), retired.end(), p.payload.data()) != retired.end())
            ++reused;
    }
    EXPECT_EQ(reused, k + 10);
    EXPECT_EQ(pool.idle(), 0u);
}

// The rc device's message pool caps what it keeps by size too: a one-off huge message must not
// pin its buffer, and neither may buffers beyond the count.
TEST(BufferPool, KeepsAtMostMaxIdleBuffersOfAtMostMaxCapacity) {
    BufferPool pool(2, 4096);
    std::vector<uint8_t> big(8192), none;
    pool.give(std::move(big));
    pool.give(std::move(none));
    EXPECT_EQ(pool.idle(), 0u);
    for (int i = 0; i < 3; ++i) pool.give(std::vector<uint8_t>(100 + i, 7));
    EXPECT_EQ(pool.idle(), 2u);
    std::vector<uint8_t> b = pool.take();
    EXPECT_TRUE(b.empty());
    EXPECT_GE(b.capacity(), 100u);
    pool.take();
    EXPECT_EQ(pool.take().capacity(), 0u);   // empty pool: a buffer without memory
}

struct Sent {
    std::vector<bool> ack_req;
    bool operator()(const Sender::Packet&, bool req) { ack_req.push_back(req); return true; }
};

// A ping-pong: every reply acknowledges the one message in flight, so the sender never needs to
// ask for an ACK (it did on every 32nd message: an extra ACK packet ahead of the reply).
TEST(UdSenderAckReq, PingPongNeverAsks) {
    SenderConfig c;
    Sender s(c);
    uint8_t b[8] = {};
    iovec iov{b, sizeof(b)};
    Sent out;
    for (uint32_t i = 0; i < 200; ++i) {
        s.enqueue(PktType::data, flag_first | flag_last, 1, &iov, 1, 0, sizeof(b), i);
        s.transmit(i, Sender::Emit(out));
        s.on_ack(i + 1, 0, i, Sender::Emit(out));
    }
    ASSERT_EQ(out.ack_req.size(), 200u);
    for (size_t i = 0; i < out.ack_req.size(); ++i) EXPECT_FALSE(out.ack_req[i]) << "message " << i;
}

// A one-way stream whose ACKs do not come: asks after ack_req_every packets, and again after as
// many more.
TEST(UdSenderAckReq, StreamWithoutAcksAsksEveryN) {
    SenderConfig c;
    c.init_window = c.max_window = 256;
    Sender s(c);
    uint8_t b[8] = {};
    iovec iov{b, sizeof(b)};
    Sent out;
    for (int i = 0; i < 100; ++i) s.enqueue(PktType::data, flag_first | flag_last, 1, &iov, 1, 0, sizeof(b), 0);
    s.transmit(0, Sender::Emit(out));
    ASSERT_EQ(out.ack_req.size(), 100u);
    for (size_t i = 0; i < out.ack_req.size(); ++i)
        EXPECT_EQ(out.ack_req[i], (i + 1) % c.ack_req_every == 0) << "packet " << i;
}


// With the delay window on, a byte-limited sender asks on the packet that fills the byte window
// (the packet window is far from full, so the rule for it never fires).
TEST(UdSenderAckReq, DelayWindowFullAsks) {
    SenderConfig c;
    c.delay = true;
    c.delay_params.init_cwnd = 4000;   // bytes: a window of 4 x 1000-byte packets
    c.delay_params.min_cwnd = 1000;
    Sender s(c);
    std::vector<uint8_t> b(1000, 7);
    iovec iov{b.data(), b.size()};
    Sent out;
    for (int i = 0; i < 10; ++i) s.enqueue(PktType::data, flag_first | flag_last, 1, &iov, 1, 0, b.size(), 0);
    s.transmit(0, Sender::Emit(out));
    ASSERT_EQ(out.ack_req.size(), 4u);   // the byte window holds 4
    EXPECT_FALSE(out.ack_req[0]);
    EXPECT_FALSE(out.ack_req[1]);
    EXPECT_FALSE(out.ack_req[2]);
    EXPECT_TRUE(out.ack_req[3]);
}

} // namespace
} // namespace roce::ud
