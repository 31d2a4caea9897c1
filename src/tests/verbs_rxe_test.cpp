// Verbs backend on kernel soft-RoCE: two verbs::Devices on rxe0 in one process (loopback through
// rxe), connected by rdma_cm. Skipped where rxe0 is absent, unless ROCE_REQUIRE_RXE_DEVICE=1 (the guest
// script cmake/rxe-guest/tests/verbs-backend.sh sets it).
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <map>
#include <poll.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "rxe_guard.hpp"
#include "verbs/device.hpp"

using namespace roce;
using verbs::Completion;
using verbs::RecvMessage;
using Clock = std::chrono::steady_clock;

namespace {


class VerbsRxe : public testing::Test {
protected:
    std::shared_ptr<verbs::Pd> pd;
    std::unique_ptr<verbs::Device> a, b;
    std::vector<Completion> comps;             // of a
    struct Msg {
        uint32_t qpn;
        std::vector<uint8_t> data;
        bool has_imm;
        uint32_t imm;
    };
    std::vector<Msg> msgs;                     // received by b

    void SetUp() override {
        ROCE_NEED_RXE0();
        ASSERT_EQ(verbs::Pd::open("rxe0", pd), Status::ok);
        verbs::DeviceConfig cfg;
        ASSERT_EQ(verbs::Device::open(cfg, pd, a), Status::ok);
        ASSERT_EQ(verbs::Device::open(cfg, pd, b), Status::ok);
        ASSERT_NE(a->address().port, b->address().port);
    }

    void pump() {
        a->progress();
        b->progress();
        Completion c[32];
        size_t n;
        while ((n = a->poll_completions(c, 32)) != 0)
            comps.insert(comps.end(), c, c + n);
        b->poll_recv([this](const RecvMessage& m) {
            msgs.push_back({m.qpn, std::vector<uint8_t>(m.data, m.data + m.len), m.has_imm, m.imm});
        }, 64);
    }
    template <typename P>
    bool wait(P pred, double seconds = 20) {
        const auto end = Clock::now() + std::chrono::duration<double>(seconds);
        while (!pred()) {
            if (Clock::now() > end)
                return false;
            pump();
            usleep(200);
        }
        return true;
    }
    uint32_t connect() {
        uint32_t q = 0;
        EXPECT_EQ(a->create_qp(q), Status::ok);
        EXPECT_EQ(a->qp_state(q), verbs::QpState::reset);
        EXPECT_EQ(a->connect_qp(q, b->address()), Status::ok);
        EXPECT_TRUE(wait([&] { return a->qp_state(q) != verbs::QpState::connecting; }))
                << "connection did not complete";
        EXPECT_EQ(a->qp_state(q), verbs::QpState::rts);
        return q;
    }
    const Completion* comp(uint64_t wr_id) {
        for (auto& c : comps)
            if (c.wr_id == wr_id)
                return &c;
        return nullptr;
    }
    bool wait_comp(uint64_t wr_id, double s = 20) { return wait([&] { return comp(wr_id) != nullptr; }, s); }
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = uint8_t((i * 131 + seed * 7 + (i >> 8)) & 0xff);
    return v;
}

} // namespace

TEST_F(VerbsRxe, SendWithImmMultiMtu) {
    const uint32_t q = connect();
    // 0 B, inline, bounce (multi-MTU at rxe's 1024 B), a whole bounce slot, temporary registration.
    const size_t sizes[] = {0, 1, 100, 1000, 5000, 16384, 60000};
    uint64_t id = 1;
    for (size_t s : sizes) {
        auto p = pattern(s, uint32_t(s));
        // two iovecs to check gathering
        iovec iov[2] = {{p.data(), s / 3}, {p.data() + s / 3, s - s / 3}};
        const uint32_t imm = 0xabc00000u + uint32_t(s);
        ASSERT_EQ(a->post_send(q, id, iov, 2, (id & 1) ? &imm : nullptr), Status::ok) << s;
        std::fill(p.begin(), p.end(), 0xee);   // copy semantics: the buffer is ours again
        ++id;
    }
    ASSERT_TRUE(wait([&] { return msgs.size() == std::size(sizes) && comps.size() == std::size(sizes); }))
            << msgs.size() << " messages, " << comps.size() << " completions";
    for (size_t i = 0; i < std::size(sizes); ++i) {
        const size_t s = sizes[i];
        EXPECT_EQ(msgs[i].data, pattern(s, uint32_t(s))) << "message " << i << " size " << s;
        EXPECT_EQ(msgs[i].has_imm, bool((i + 1) & 1));
        if (msgs[i].has_imm) {
            EXPECT_EQ(msgs[i].imm, 0xabc00000u + uint32_t(s));
        }
        EXPECT_EQ(comps[i].wr_id, i + 1);
        EXPECT_EQ(comps[i].status, Status::ok);
        EXPECT_EQ(comps[i].op, verbs::OpKind::send);
        EXPECT_EQ(comps[i].qpn, q);
    }
    const auto st = a->stats();
    EXPECT_GT(st.inline_sends, 0u);
    EXPECT_GT(st.bounce_copies, 0u);
    EXPECT_GT(st.temp_regs, 0u);
    EXPECT_EQ(a->outstanding(q), 0u);
    // the passive QP on b: messages arrived on one QP, which b created on accept
    EXPECT_EQ(b->qp_state(msgs[0].qpn), verbs::QpState::rts);
}

TEST_F(VerbsRxe, WriteReadAtomics) {
    const uint32_t q = connect();
    const size_t N = 256 * 1024;
    std::vector<uint8_t> remote(N, 0);
    verbs::MrKeys rk;
    ASSERT_EQ(pd->reg_mr(remote.data(), N, verbs::access_all, rk), Status::ok);
    std::vector<uint8_t> local = pattern(N, 5);
    verbs::MrKeys lk;
    ASSERT_EQ(pd->reg_mr(local.data(), N, verbs::access_all, lk), Status::ok);
    const uint64_t rva = reinterpret_cast<uintptr_t>(remote.data());

    // zero-copy from a registered buffer (multi-MTU), inline, copy from the stack
    ASSERT_EQ(a->post_write(q, 1, local.data(), 200000, rva, rk.rkey, false), Status::ok);
    uint8_t small[64];
    std::memset(small, 0x5a, sizeof(small));
    ASSERT_EQ(a->post_write(q, 2, small, sizeof(small), rva + 200000, rk.rkey, true), Status::ok);
    auto mid = pattern(9000, 9);
    ASSERT_EQ(a->post_write(q, 3, mid.data(), mid.size(), rva + 210000, rk.rkey, true), Status::ok);
    std::fill(mid.begin(), mid.end(), 0);
    ASSERT_TRUE(wait_comp(3));
    for (uint64_t i = 1; i <= 3; ++i)
        EXPECT_EQ(comp(i)->status, Status::ok) << i;
    EXPECT_EQ(std::memcmp(remote.data(), local.data(), 200000), 0);
    EXPECT_EQ(remote[200000], 0x5a);
    EXPECT_EQ(remote[200063], 0x5a);
    EXPECT_EQ(std::memcmp(remote.data() + 210000, pattern(9000, 9).data(), 9000), 0);

    // READ into registered memory, into an unregistered small buffer (bounce) and an unregistered
    // large one (temporary registration)
    std::fill(local.begin(), local.end(), 0);
    ASSERT_EQ(a->post_read(q, 4, local.data(), 200000, rva, rk.rkey), Status::ok);
    std::vector<uint8_t> ur_small(5000), ur_big(100000);
    ASSERT_EQ(a->post_read(q, 5, ur_small.data(), ur_small.size(), rva + 210000, rk.rkey), Status::ok);
    ASSERT_EQ(a->post_read(q, 6, ur_big.data(), ur_big.size(), rva + 100000, rk.rkey), Status::ok);
    ASSERT_TRUE(wait_comp(6));
    for (uint64_t i = 4; i <= 6; ++i) {
        EXPECT_EQ(comp(i)->status, Status::ok) << i;
        EXPECT_EQ(comp(i)->op, verbs::OpKind::read);
    }
    EXPECT_EQ(std::memcmp(local.data(), remote.data(), 200000), 0);
    EXPECT_EQ(std::memcmp(ur_small.data(), remote.data() + 210000, 5000), 0);
    EXPECT_EQ(std::memcmp(ur_big.data(), remote.data() + 100000, 100000), 0);

    // atomics on an aligned word
    uint64_t* word = reinterpret_cast<uint64_t*>(remote.data() + 240000);
    *word = 1000;
    const uint64_t wva = reinterpret_cast<uintptr_t>(word);
    uint64_t r1 = 0, r2 = 0, r3 = 0;
    ASSERT_EQ(a->post_fetch_add(q, 7, wva, rk.rkey, 5, &r1), Status::ok);
    ASSERT_EQ(a->post_cmp_swap(q, 8, wva, rk.rkey, 1005, 77, &r2), Status::ok);   // succeeds
    ASSERT_EQ(a->post_cmp_swap(q, 9, wva, rk.rkey, 1005, 99, &r3), Status::ok);   // fails
    ASSERT_EQ(a->post_fetch_add(q, 10, wva + 4, rk.rkey, 1, nullptr), Status::invalid_param);
    ASSERT_TRUE(wait_comp(9));
    EXPECT_EQ(comp(7)->status, Status::ok);
    EXPECT_EQ(comp(7)->op, verbs::OpKind::fetch_add);
    EXPECT_EQ(comp(8)->op, verbs::OpKind::cmp_swap);
    EXPECT_EQ(r1, 1000u);
    EXPECT_EQ(r2, 1005u);
    EXPECT_EQ(r3, 77u);
    EXPECT_EQ(*word, 77u);
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
    EXPECT_EQ(pd->dereg_mr(lk.lkey), Status::ok);
    EXPECT_EQ(pd->dereg_mr(lk.lkey), Status::invalid_param);
}

TEST_F(VerbsRxe, WrongRkeyIsRemoteAccessAndMemoryUnchanged) {
    const uint32_t q = connect();
    std::vector<uint8_t> remote(8192, 0x11);
    verbs::MrKeys rk;
    ASSERT_EQ(pd->reg_mr(remote.data(), remote.size(), verbs::access_all, rk), Status::ok);
    auto data = pattern(4096, 3);
    ASSERT_EQ(a->post_write(q, 1, data.data(), data.size(), reinterpret_cast<uintptr_t>(remote.data()),
                            rk.rkey ^ 0x5a5a00u, true), Status::ok);
    ASSERT_EQ(a->post_write(q, 2, data.data(), 16, reinterpret_cast<uintptr_t>(remote.data()),
                            rk.rkey, true), Status::ok);
    ASSERT_TRUE(wait_comp(2));
    EXPECT_EQ(comp(1)->status, Status::remote_access);
    EXPECT_EQ(comp(2)->status, Status::canceled);   // flushed behind the error
    EXPECT_EQ(a->qp_state(q), verbs::QpState::error);
    for (uint8_t v : remote)
        ASSERT_EQ(v, 0x11);
    EXPECT_EQ(a->post_write(q, 3, data.data(), 16, reinterpret_cast<uintptr_t>(remote.data()), rk.rkey, true),
              Status::canceled);
    EXPECT_EQ(a->destroy_qp(q), Status::ok);
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
}

TEST_F(VerbsRxe, ConnectToPortNobodyListensOn) {
    // A port that was just released: nobody listens there.
    verbs::WireAddr dead;
    {
        std::unique_ptr<verbs::Device> c;
        ASSERT_EQ(verbs::Device::open(verbs::DeviceConfig{}, pd, c), Status::ok);
        dead = c->address();
    }
    uint32_t q;
    ASSERT_EQ(a->create_qp(q), Status::ok);
    const auto t0 = Clock::now();
    ASSERT_EQ(a->connect_qp(q, dead), Status::ok);
    uint8_t x[8] = {};
    iovec iov{x, sizeof(x)};
    // Queued until connected; or refused (canceled) when the CM thread took the peer's REJ in
    // between: rxe can answer that fast (a CI run's guest did).
    const Status posted = a->post_send(q, 42, &iov, 1);
    ASSERT_TRUE(posted == Status::ok || posted == Status::canceled) << to_string(posted);
    if (posted == Status::ok) {
        ASSERT_TRUE(wait_comp(42, 30)) << "no completion: connect hangs";
        EXPECT_TRUE(comp(42)->status == Status::unreachable || comp(42)->status == Status::timeout)
                << to_string(comp(42)->status);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(a->qp_state(q), verbs::QpState::error);
    EXPECT_EQ(a->outstanding(q), 0u);
    std::printf("  connect to a dead port failed after %.2f s (the send %s)\n", secs,
                posted == Status::ok ? "completed with its error" : "refused: already failed");
    EXPECT_EQ(a->destroy_qp(q), Status::ok);
    // bad arguments
    uint32_t q2;
    ASSERT_EQ(a->create_qp(q2), Status::ok);
    verbs::WireAddr p0 = b->address();
    p0.port = 0;
    EXPECT_EQ(a->connect_qp(q2, p0), Status::invalid_param);
    EXPECT_EQ(a->post_send(q2, 1, &iov, 1), Status::invalid_param);   // never connected
    EXPECT_EQ(a->connect_qp(12345678, b->address()), Status::invalid_param);
    // A peer that no entry the settings allow can reach is refused at once (the GID policy): an
    // IPv6 peer when only IPv4 entries may be used. (With ADDR_FAMILY=auto the device would use its
    // IPv6 entry for it: the family of its own address does not limit its peers.)
    verbs::DeviceConfig v4only;
    v4only.gid.family = gid::Family::inet;
    std::unique_ptr<verbs::Device> c;
    ASSERT_EQ(verbs::Device::open(v4only, pd, c), Status::ok);
    uint32_t q3;
    ASSERT_EQ(c->create_qp(q3), Status::ok);
    verbs::WireAddr v6 = b->address();
    v6.family = AF_INET6;
    EXPECT_EQ(c->connect_qp(q3, v6), Status::unreachable);
    EXPECT_EQ(c->post_send(q3, 1, &iov, 1), Status::invalid_param);   // never connected
}

TEST_F(VerbsRxe, DestroyWithOutstandingCancels) {
    const uint32_t q = connect();
    const size_t N = 64 * 1024;
    std::vector<uint8_t> remote(N, 1), local(N * 32);
    verbs::MrKeys rk, lk;
    ASSERT_EQ(pd->reg_mr(remote.data(), N, verbs::access_all, rk), Status::ok);
    ASSERT_EQ(pd->reg_mr(local.data(), local.size(), verbs::access_all, lk), Status::ok);
    for (uint64_t i = 0; i < 32; ++i)
        ASSERT_EQ(a->post_read(q, 100 + i, local.data() + i * N, N, reinterpret_cast<uintptr_t>(remote.data()),
                               rk.rkey), Status::ok);
    EXPECT_GT(a->outstanding(q), 0u);
    ASSERT_EQ(a->destroy_qp(q), Status::ok);
    pump();
    std::map<uint64_t, Status> seen;
    for (auto& c : comps)
        EXPECT_TRUE(seen.emplace(c.wr_id, c.status).second) << "duplicate completion " << c.wr_id;
    ASSERT_EQ(seen.size(), 32u);
    size_t canceled = 0;
    for (auto& [id, s] : seen) {
        EXPECT_TRUE(s == Status::ok || s == Status::canceled) << id << " " << to_string(s);
        canceled += s == Status::canceled;
    }
    EXPECT_GT(canceled, 0u);
    std::printf("  %zu of 32 READs canceled by destroy_qp\n", canceled);
    EXPECT_EQ(a->outstanding(0), 0u);
    EXPECT_EQ(a->qp_state(q), verbs::QpState::error);   // unknown now
    // b frees its passive QP when a's DREQ arrives
    EXPECT_TRUE(wait([&] { return b->stats().passive_freed >= 1; }, 20)) << "passive QP not freed";
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
    EXPECT_EQ(pd->dereg_mr(lk.lkey), Status::ok);
}

TEST_F(VerbsRxe, ModerationDrainsUnsignaledTail) {
    const uint32_t q = connect();
    std::vector<uint8_t> remote(4096, 0);
    verbs::MrKeys rk;
    ASSERT_EQ(pd->reg_mr(remote.data(), remote.size(), verbs::access_all, rk), Status::ok);
    uint64_t v = 0;
    size_t posted = 0;
    for (int i = 0; i < 1000; ++i) {
        v = uint64_t(i);
        Status s;
        while ((s = a->post_write(q, 0, &v, 8, reinterpret_cast<uintptr_t>(remote.data()) + 8 * (i % 512),
                                  rk.rkey, true)) == Status::no_resource)
            pump();
        ASSERT_EQ(s, Status::ok);
        ++posted;
    }
    ASSERT_TRUE(wait([&] { return a->outstanding(q) == 0; })) << a->outstanding(q) << " still outstanding";
    EXPECT_TRUE(comps.empty());   // wr_id 0: no completions
    const auto st = a->stats();
    EXPECT_GT(st.unsignaled, st.signaled);
    std::printf("  %zu writes: %llu signaled, %llu unsignaled\n", posted,
                (unsigned long long)st.signaled, (unsigned long long)st.unsignaled);
    uint64_t last;
    std::memcpy(&last, remote.data() + 8 * (999 % 512), 8);
    EXPECT_EQ(last, 999u);
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
}

TEST_F(VerbsRxe, EventFdWakesUp) {
    const uint32_t q = connect();
    const int afd = a->event_fd(), bfd = b->event_fd();
    a->arm_events();
    b->arm_events();
    pump();
    pump();   // armed now, nothing pending
    pollfd p[2] = {{afd, POLLIN, 0}, {bfd, POLLIN, 0}};
    EXPECT_EQ(poll(p, 2, 0), 0) << "event fds readable with nothing to do";
    uint8_t x[32] = {1};
    iovec iov{x, sizeof(x)};
    ASSERT_EQ(a->post_send(q, 7, &iov, 1), Status::ok);
    pollfd pa{afd, POLLIN, 0}, pb{bfd, POLLIN, 0};
    EXPECT_EQ(poll(&pa, 1, 10000), 1) << "a's event fd (send completion) did not become readable";
    EXPECT_EQ(poll(&pb, 1, 10000), 1) << "b's event fd (message) did not become readable";
    EXPECT_TRUE(wait_comp(7));
    EXPECT_TRUE(wait([&] { return !msgs.empty(); }));
    pump();
    pump();
    EXPECT_EQ(poll(p, 2, 0), 0) << "event fds stay readable after everything was consumed";
}

TEST_F(VerbsRxe, ManyQpsBothWays) {
    // several connections from a to b and from b to a, messages both ways
    std::vector<uint32_t> qs;
    for (int i = 0; i < 4; ++i)
        qs.push_back(connect());
    uint32_t qb;
    ASSERT_EQ(b->create_qp(qb), Status::ok);
    ASSERT_EQ(b->connect_qp(qb, a->address()), Status::ok);
    ASSERT_TRUE(wait([&] { return b->qp_state(qb) == verbs::QpState::rts; }));
    for (size_t i = 0; i < qs.size(); ++i) {
        uint32_t v = uint32_t(i);
        iovec iov{&v, 4};
        ASSERT_EQ(a->post_send(qs[i], 0, &iov, 1), Status::ok);
    }
    ASSERT_TRUE(wait([&] { return msgs.size() == qs.size(); }));
    uint32_t w = 77;
    iovec iov{&w, 4};
    ASSERT_EQ(b->post_send(qb, 5, &iov, 1), Status::ok);
    size_t got_a = 0;
    ASSERT_TRUE(wait([&] {
        a->poll_recv([&](const RecvMessage& m) { got_a += m.len == 4 && *reinterpret_cast<const uint32_t*>(m.data) == 77; }, 8);
        return got_a == 1;
    }));
    for (uint32_t q : qs)
        EXPECT_EQ(a->destroy_qp(q), Status::ok);
    EXPECT_EQ(b->destroy_qp(qb), Status::ok);
}

// Passive target: b never calls progress(), poll_*() or anything else after open. Its CM thread
// accepts; the HCA answers WRITE/READ/atomics.
TEST_F(VerbsRxe, PassiveTargetWithoutProgress) {
    std::vector<uint8_t> remote(65536, 0);
    verbs::MrKeys rk;
    ASSERT_EQ(pd->reg_mr(remote.data(), remote.size(), verbs::access_all, rk), Status::ok);
    uint32_t q;
    ASSERT_EQ(a->create_qp(q), Status::ok);
    ASSERT_EQ(a->connect_qp(q, b->address()), Status::ok);
    auto only_a = [&](auto pred) {
        const auto end = Clock::now() + std::chrono::seconds(20);
        while (!pred() && Clock::now() < end) {
            a->progress();
            Completion c[16];
            size_t n = a->poll_completions(c, 16);
            comps.insert(comps.end(), c, c + n);
            usleep(200);
        }
        return pred();
    };
    auto data = pattern(40000, 11);
    const uint64_t rva = reinterpret_cast<uintptr_t>(remote.data());
    ASSERT_EQ(a->post_write(q, 1, data.data(), data.size(), rva, rk.rkey, true), Status::ok);   // queued
    std::vector<uint8_t> back(40000);
    ASSERT_EQ(a->post_read(q, 2, back.data(), back.size(), rva, rk.rkey), Status::ok);
    uint64_t old = 1;
    ASSERT_EQ(a->post_fetch_add(q, 3, rva + 40960, rk.rkey, 9, &old), Status::ok);
    ASSERT_TRUE(only_a([&] { return comp(3) != nullptr; })) << "one-sided ops need the target's progress";
    for (uint64_t i = 1; i <= 3; ++i)
        EXPECT_EQ(comp(i)->status, Status::ok) << i;
    EXPECT_EQ(back, data);
    EXPECT_EQ(old, 0u);
    uint64_t w;
    std::memcpy(&w, remote.data() + 40960, 8);
    EXPECT_EQ(w, 9u);
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
}

// More messages than the receiver has buffers: the HCA's RNR NAK/retry (rnr_retry 7 = infinite)
// holds the sender until the receiver reposts; nothing is lost or reordered.
TEST_F(VerbsRxe, RnrWhenReceiverIsSlow) {
    verbs::DeviceConfig small;
    small.recv_buffers = 4;
    small.min_rnr_timer = 1;   // 0.01 ms: retry fast
    ASSERT_EQ(verbs::Device::open(small, pd, b), Status::ok);
    const uint32_t q = connect();
    for (uint32_t i = 0; i < 32; ++i) {
        uint32_t v[64];
        std::fill(std::begin(v), std::end(v), i);
        iovec iov{v, sizeof(v)};
        ASSERT_EQ(a->post_send(q, 1000 + i, &iov, 1), Status::ok);
    }
    usleep(100000);   // b does not poll meanwhile: its 4 buffers fill up
    ASSERT_TRUE(wait([&] { return msgs.size() == 32 && comps.size() == 32; }))
            << msgs.size() << " messages, " << comps.size() << " completions";
    for (uint32_t i = 0; i < 32; ++i) {
        ASSERT_EQ(msgs[i].data.size(), 256u);
        uint32_t v;
        std::memcpy(&v, msgs[i].data.data(), 4);
        EXPECT_EQ(v, i);
        EXPECT_EQ(comps[i].status, Status::ok);
    }
}

// The active side gives up in the middle of the handshake: no hang, b's half-open QP goes away
// (DREQ or CONNECT_ERROR) or stays harmless, and new connections work.
TEST_F(VerbsRxe, DestroyWhileConnecting) {
    // Give up after 0..~8 ms: before the REQ, between REQ and REP, after REP, after RTU.
    for (int i = 0; i < 12; ++i) {
        uint32_t q;
        ASSERT_EQ(a->create_qp(q), Status::ok);
        ASSERT_EQ(a->connect_qp(q, b->address()), Status::ok);
        uint8_t x[16] = {};
        iovec iov{x, sizeof(x)};
        ASSERT_EQ(a->post_send(q, 500 + i, &iov, 1), Status::ok);
        usleep(useconds_t(i * i * 60));
        ASSERT_EQ(a->destroy_qp(q), Status::ok);
        pump();
        ASSERT_NE(comp(500 + i), nullptr);
        EXPECT_TRUE(comp(500 + i)->status == Status::canceled || comp(500 + i)->status == Status::ok);
    }
    const uint32_t q = connect();
    uint8_t x[16] = {7};
    iovec iov{x, sizeof(x)};
    ASSERT_EQ(a->post_send(q, 9, &iov, 1), Status::ok);
    ASSERT_TRUE(wait_comp(9));
    EXPECT_EQ(comp(9)->status, Status::ok);
    // every half-open passive QP on b is freed; only the live one remains
    EXPECT_TRUE(wait([&] { return b->stats().passive_freed + 1 == b->stats().cm_accepted; }, 30));
    std::printf("  b: %llu accepted, %llu passive QPs freed\n",
                (unsigned long long)b->stats().cm_accepted, (unsigned long long)b->stats().passive_freed);
}

// Connection requests are unauthenticated: each accepted one creates a QP on the device, up to
// max_passive_qps; later ones are rejected at once (the requester fails as unreachable, without
// waiting out a timeout) and a freed passive QP makes room again.
TEST_F(VerbsRxe, ConnectionRequestFloodIsBounded) {
    verbs::DeviceConfig capped;
    capped.max_passive_qps = 2;
    std::unique_ptr<verbs::Device> c;
    ASSERT_EQ(verbs::Device::open(capped, pd, c), Status::ok);
    auto connect_c = [&](uint32_t& q) {
        EXPECT_EQ(a->create_qp(q), Status::ok);
        EXPECT_EQ(a->connect_qp(q, c->address()), Status::ok);
        EXPECT_TRUE(wait([&] { return a->qp_state(q) != verbs::QpState::connecting; }));
        return a->qp_state(q);
    };
    uint32_t q1, q2, q3, q4;
    ASSERT_EQ(connect_c(q1), verbs::QpState::rts);
    ASSERT_EQ(connect_c(q2), verbs::QpState::rts);
    EXPECT_EQ(c->stats().cm_refused, 0u);
    uint8_t x[8] = {};
    iovec iov{x, sizeof(x)};
    ASSERT_EQ(a->post_send(q2, 1, &iov, 1), Status::ok);   // the accepted ones work
    ASSERT_TRUE(wait_comp(1));
    EXPECT_EQ(comp(1)->status, Status::ok);

    // A send queued while connecting completes with the REJ's status (unreachable), not with a
    // timeout's.
    const auto t0 = Clock::now();
    ASSERT_EQ(a->create_qp(q3), Status::ok);
    ASSERT_EQ(a->connect_qp(q3, c->address()), Status::ok);
    ASSERT_EQ(a->post_send(q3, 2, &iov, 1), Status::ok);
    ASSERT_TRUE(wait_comp(2)) << "the refused connection never failed";
    EXPECT_EQ(comp(2)->status, Status::unreachable) << to_string(comp(2)->status);
    EXPECT_EQ(a->qp_state(q3), verbs::QpState::error);
    EXPECT_EQ(c->stats().cm_refused, 1u);
    EXPECT_EQ(c->stats().cm_accepted, 2u);
    std::printf("  request beyond the cap refused after %.3f s\n",
                std::chrono::duration<double>(Clock::now() - t0).count());

    ASSERT_EQ(a->destroy_qp(q1), Status::ok);   // DREQ: c frees its passive QP
    ASSERT_TRUE(wait([&] { return c->stats().passive_freed == 1; }, 30)) << "passive QP not freed";
    ASSERT_EQ(connect_c(q4), verbs::QpState::rts);
    EXPECT_EQ(c->stats().cm_refused, 1u);
    ASSERT_EQ(a->post_send(q4, 3, &iov, 1), Status::ok);
    ASSERT_TRUE(wait_comp(3));
    EXPECT_EQ(comp(3)->status, Status::ok);
    for (uint32_t q : {q2, q3, q4})
        EXPECT_EQ(a->destroy_qp(q), Status::ok);
}

// The READ/atomic depths a QP gets are the ones its device advertised, bounded by its own
// MAX_RD_ATOMIC, not the peer's: rdma_cm hands the passive side the REQ's initiator depth, and
// taken as it came, a peer allowed more made the QP larger than configured (or, beyond the
// device's limit, ibv_modify_qp fail and the connection be refused).
TEST_F(VerbsRxe, ReadDepthsAreBoundedByOurConfiguration) {
    verbs::DeviceConfig two;
    two.max_rd_atomic = 2;
    std::unique_ptr<verbs::Device> c;
    ASSERT_EQ(verbs::Device::open(two, pd, c), Status::ok);
    uint32_t q = 0;
    ASSERT_EQ(a->create_qp(q), Status::ok);
    ASSERT_EQ(a->connect_qp(q, c->address()), Status::ok);
    ASSERT_TRUE(wait([&] { return a->qp_state(q) != verbs::QpState::connecting; }));
    ASSERT_EQ(a->qp_state(q), verbs::QpState::rts);
    // (a's MAX_RD_ATOMIC is the default, 16: its REQ offers 16 both ways)
    auto gauges = [](const verbs::Device& d, uint32_t qpn) {
        std::map<std::string, uint64_t> g;
        for (const auto& e : d.qp_counters())
            if (!e.closed && (qpn == 0 || e.qpn == qpn))
                for (const auto& [name, v] : e.counters)
                    g[name] = v;
        return g;
    };
    auto passive = gauges(*c, 0);
    EXPECT_EQ(passive["dest_rd_atomic_now"], 2u) << "the passive QP took the REQ's initiator depth";
    EXPECT_EQ(passive["rd_atomic_now"], 2u);
    auto active = gauges(*a, q);
    EXPECT_EQ(active["rd_atomic_now"], 2u) << "the REP's responder resources";
    EXPECT_EQ(active["dest_rd_atomic_now"], 2u);
    // More READs at once than the depth: they queue, and all complete with the data.
    const size_t N = 8 * 4096;
    std::vector<uint8_t> remote = pattern(N, 3), local(N, 0);
    verbs::MrKeys rk, lk;
    ASSERT_EQ(pd->reg_mr(remote.data(), N, verbs::access_all, rk), Status::ok);
    ASSERT_EQ(pd->reg_mr(local.data(), N, verbs::access_all, lk), Status::ok);
    for (uint64_t i = 0; i < 8; ++i)
        ASSERT_EQ(a->post_read(q, 100 + i, local.data() + i * 4096, 4096,
                               reinterpret_cast<uintptr_t>(remote.data()) + i * 4096, rk.rkey), Status::ok);
    ASSERT_TRUE(wait([&] { for (uint64_t i = 0; i < 8; ++i) if (!comp(100 + i)) return false; return true; }));
    for (uint64_t i = 0; i < 8; ++i)
        EXPECT_EQ(comp(100 + i)->status, Status::ok) << i;
    EXPECT_EQ(local, remote);
    EXPECT_EQ(a->destroy_qp(q), Status::ok);
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
    EXPECT_EQ(pd->dereg_mr(lk.lkey), Status::ok);
}

// A requester that gave up (its deadline passed while the peer was busy) answers the late REP
// with REJ, and the peer frees the passive QP it made for it at once. Before, the REP went
// unanswered: the peer's CM reported its retries running out as UNREACHABLE, which freed
// nothing, so any requester that never finishes a handshake pinned a passive QP for good.
TEST_F(VerbsRxe, LateConnectionResponseIsRejected) {
    verbs::DeviceConfig quick;
    quick.connect_timeout_ms = 400;
    std::unique_ptr<verbs::Device> late;
    ASSERT_EQ(verbs::Device::open(quick, pd, late), Status::ok);
    const uint32_t q = connect();
    uint8_t x[8] = {};
    iovec iov{x, sizeof(x)};
    ASSERT_EQ(a->post_send(q, 1, &iov, 1), Status::ok);
    // Only a progresses: the message waits in b for the receive below.
    const auto end = Clock::now() + std::chrono::seconds(20);
    Completion c[4];
    size_t sent = 0;
    while (sent == 0 && Clock::now() < end) {
        a->progress();
        sent = a->poll_completions(c, 4);
    }
    ASSERT_EQ(sent, 1u);
    const verbs::DeviceStats before = b->stats();
    uint32_t ql = 0;
    ASSERT_EQ(late->create_qp(ql), Status::ok);
    Status connected = Status::io_error;
    size_t got = 0;
    while (got == 0 && Clock::now() < end) {
        b->progress();
        got = b->poll_recv([&](const RecvMessage&) {
            // b's lock is held here: its CM thread waits with the request until we return.
            connected = late->connect_qp(ql, b->address());
            const auto t = Clock::now() + std::chrono::seconds(5);
            while (late->qp_state(ql) == verbs::QpState::connecting && Clock::now() < t)
                usleep(1000);
            usleep(200000);
        }, 1);
    }
    ASSERT_EQ(got, 1u);
    ASSERT_EQ(connected, Status::ok);
    ASSERT_EQ(late->qp_state(ql), verbs::QpState::error) << "the requester did not give up";
    ASSERT_TRUE(wait([&] { return b->stats().cm_accepted > before.cm_accepted; }, 10))
            << "the request never reached b";
    const auto t0 = Clock::now();
    EXPECT_TRUE(wait([&] { late->progress(); return b->stats().passive_freed > before.passive_freed; }, 10))
            << "b keeps the passive QP of a requester that gave up";
    std::printf("  passive QP freed %.3f s after its REP\n",
                std::chrono::duration<double>(Clock::now() - t0).count());
    EXPECT_EQ(late->destroy_qp(ql), Status::ok);
    EXPECT_EQ(a->destroy_qp(q), Status::ok);
}

// Figures (printed as rxe-result lines; the guest script records them). Under TCG only the
// comparison with other transports in the same guest run means anything.
TEST_F(VerbsRxe, Figures) {
    const uint32_t q = connect();
    // 8-byte SEND ping-pong: a -> b (passive QP) -> a
    uint32_t qb = 0;
    uint64_t token = 0;
    iovec iov{&token, 8};
    auto rtt_round = [&] {
        ASSERT_EQ(a->post_send(q, 0, &iov, 1), Status::ok);
        bool got_b = false, got_a = false;
        while (!got_b) {
            b->progress();
            b->poll_recv([&](const RecvMessage& m) { qb = m.qpn; got_b = true; }, 1);
        }
        ASSERT_EQ(b->post_send(qb, 0, &iov, 1), Status::ok);
        while (!got_a) {
            a->progress();
            a->poll_recv([&](const RecvMessage&) { got_a = true; }, 1);
        }
    };
    for (int i = 0; i < 20; ++i)
        rtt_round();
    const int iters = 500;
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
        rtt_round();
    const double rtt_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
    // 64 KiB WRITE bandwidth, zero-copy from a registered buffer
    const size_t N = 64 * 1024, count = 400;
    std::vector<uint8_t> src(N, 3), dst(N);
    verbs::MrKeys sk, dk;
    ASSERT_EQ(pd->reg_mr(src.data(), N, verbs::access_all, sk), Status::ok);
    ASSERT_EQ(pd->reg_mr(dst.data(), N, verbs::access_all, dk), Status::ok);
    t0 = Clock::now();
    for (size_t i = 0; i < count; ++i) {
        Status s;
        while ((s = a->post_write(q, i + 1 == count ? 77 : 0, src.data(), N,
                                  reinterpret_cast<uintptr_t>(dst.data()), dk.rkey, false)) == Status::no_resource)
            pump();
        ASSERT_EQ(s, Status::ok);
    }
    ASSERT_TRUE(wait_comp(77, 60));
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("rxe-result name=verbs_backend.send_rtt_8B value=%.1f unit=us\n", rtt_us);
    std::printf("rxe-result name=verbs_backend.write_bw_64KiB value=%.1f unit=MB/s\n", N * count / secs / 1e6);
    EXPECT_EQ(pd->dereg_mr(sk.lkey), Status::ok);
    EXPECT_EQ(pd->dereg_mr(dk.lkey), Status::ok);
}

// The peer device goes away: the active QP learns it through rdma_cm (DISCONNECTED), goes to error
// and stays there until destroyed; posts are canceled.
TEST_F(VerbsRxe, PeerGoneLeavesActiveQpInError) {
    const uint32_t q = connect();
    b.reset();
    ASSERT_TRUE(wait([&] { return a->qp_state(q) == verbs::QpState::error; }, 30)) << "no disconnect seen";
    uint8_t x[8] = {};
    iovec iov{x, sizeof(x)};
    EXPECT_EQ(a->post_send(q, 1, &iov, 1), Status::canceled);
    EXPECT_EQ(a->destroy_qp(q), Status::ok);
    EXPECT_EQ(a->stats().cm_disconnects, 1u);
}

// Every public method is thread-safe: two threads post while the owner thread progresses.
TEST_F(VerbsRxe, PostFromThreads) {
    const uint32_t q = connect();
    std::vector<uint8_t> remote(2 * 8 * 1000, 0);
    verbs::MrKeys rk;
    ASSERT_EQ(pd->reg_mr(remote.data(), remote.size(), verbs::access_all, rk), Status::ok);
    std::atomic<int> done{0};
    auto poster = [&](int t) {
        for (uint64_t i = 0; i < 1000; ++i) {
            const uint64_t v = uint64_t(t) << 32 | i;
            const uint64_t va = reinterpret_cast<uintptr_t>(remote.data()) + 8 * (uint64_t(t) * 1000 + i);
            Status s;
            while ((s = a->post_write(q, (uint64_t(t + 1) << 32) | (i + 1), &v, 8, va, rk.rkey, true)) ==
                   Status::no_resource)
                std::this_thread::yield();
            ASSERT_EQ(s, Status::ok);
        }
        ++done;
    };
    std::thread t0(poster, 0), t1(poster, 1);
    ASSERT_TRUE(wait([&] { return done == 2 && comps.size() == 2000; }, 60)) << comps.size();
    t0.join();
    t1.join();
    for (auto& c : comps)
        ASSERT_EQ(c.status, Status::ok);
    for (uint64_t t = 0; t < 2; ++t) {
        for (uint64_t i = 0; i < 1000; ++i) {
            uint64_t v;
            std::memcpy(&v, remote.data() + 8 * (t * 1000 + i), 8);
            ASSERT_EQ(v, t << 32 | i);
        }
    }
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
}

// A SEND gathered from many iovecs (more than the QP's SGEs): copied into one bounce buffer.
TEST_F(VerbsRxe, SendManyIovecs) {
    const uint32_t q = connect();
    auto p = pattern(3000, 21);
    std::vector<iovec> iov;
    for (size_t off = 0; off < p.size(); off += 30)
        iov.push_back({p.data() + off, 30});
    ASSERT_EQ(a->post_send(q, 1, iov.data(), iov.size()), Status::ok);   // 100 iovecs
    ASSERT_TRUE(wait([&] { return msgs.size() == 1 && comp(1); }));
    EXPECT_EQ(msgs[0].data, p);
    EXPECT_EQ(comp(1)->status, Status::ok);
}

// A SEND larger than the receiver's buffers: the sender's op fails with remote_invalid (the HCA's
// NAK), the receiver reposts its buffer; a READ with a wrong rkey fails with remote_access.
TEST_F(VerbsRxe, OversizeSendAndBadReadKey) {
    verbs::DeviceConfig small;
    small.max_recv_msg = 4096;
    ASSERT_EQ(verbs::Device::open(small, pd, b), Status::ok);
    uint32_t q = connect();
    std::vector<uint8_t> big(8192, 1);
    iovec iov{big.data(), big.size()};
    ASSERT_EQ(a->post_send(q, 1, &iov, 1), Status::ok);
    ASSERT_TRUE(wait_comp(1));
    EXPECT_EQ(comp(1)->status, Status::remote_invalid) << to_string(comp(1)->status);
    EXPECT_TRUE(msgs.empty());
    EXPECT_EQ(a->destroy_qp(q), Status::ok);

    q = connect();
    std::vector<uint8_t> remote(4096, 0x33), local(4096, 0);
    verbs::MrKeys rk;
    ASSERT_EQ(pd->reg_mr(remote.data(), remote.size(), verbs::access_all, rk), Status::ok);
    ASSERT_EQ(a->post_read(q, 2, local.data(), local.size(), reinterpret_cast<uintptr_t>(remote.data()),
                           rk.rkey + 0x100), Status::ok);
    ASSERT_TRUE(wait_comp(2));
    EXPECT_EQ(comp(2)->status, Status::remote_access);
    EXPECT_EQ(local, std::vector<uint8_t>(4096, 0));
    EXPECT_EQ(pd->dereg_mr(rk.lkey), Status::ok);
}

// Lazy inline SENDs go out without a work-request record (post_send_untracked), interleaved with
// tracked SENDs and with lazy ones of another wr_id: every message arrives once and in order,
// the lazy completions add up to exactly what was posted per wr_id, and a tracked completion comes
// only after those of the lazy SENDs posted before it (RC completes in order).
TEST_F(VerbsRxe, UntrackedLazySendsCompleteInOrder) {
    const uint32_t q = connect();
    const uint64_t lazy1 = wr_id_lazy | 1, lazy2 = wr_id_lazy | 2;
    std::map<uint64_t, uint64_t> posted_lazy;        // wr_id -> count
    std::vector<std::pair<uint64_t, uint64_t>> before;   // tracked wr_id -> lazy1 posted before it
    const int n = 3000;
    for (int i = 0; i < n; ++i) {
        uint32_t payload[2] = {uint32_t(i), 0xabcd0000u | uint32_t(i & 0xffff)};
        iovec iov{payload, sizeof(payload)};
        uint64_t id = i % 97 == 0 ? 1000 + uint64_t(i) : (i / 7) % 2 ? lazy1 : lazy2;
        Status s;
        while ((s = a->post_send(q, id, &iov, 1)) == Status::no_resource) {
            a->complete_lazy(q);
            pump();
        }
        ASSERT_EQ(s, Status::ok) << i;
        if (id & wr_id_lazy)
            ++posted_lazy[id];
        else
            before.emplace_back(id, posted_lazy[lazy1]);
        if (i % 50 == 0)
            pump();   // the receiver keeps up (RNR otherwise)
    }
    a->complete_lazy(q);
    ASSERT_TRUE(wait([&] { return a->outstanding(q) == 0 && msgs.size() == size_t(n); }, 60))
            << a->outstanding(q) << " outstanding, " << msgs.size() << " received";
    EXPECT_GT(a->stats().untracked_sends, uint64_t(n) / 2) << "the untracked path was not taken";
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(msgs[size_t(i)].data.size(), 8u);
        uint32_t got[2];
        std::memcpy(got, msgs[size_t(i)].data.data(), 8);
        ASSERT_EQ(got[0], uint32_t(i)) << "message " << i << " out of order";
        ASSERT_EQ(got[1], 0xabcd0000u | uint32_t(i & 0xffff));
    }
    std::map<uint64_t, uint64_t> completed_lazy;
    size_t tracked = 0;
    for (const Completion& c : comps) {
        ASSERT_EQ(c.status, Status::ok);
        if (c.wr_id & wr_id_lazy) {
            completed_lazy[c.wr_id] += c.count;
            continue;
        }
        ASSERT_EQ(c.count, 1u);
        ASSERT_LT(tracked, before.size());
        EXPECT_EQ(c.wr_id, before[tracked].first) << "tracked completions out of order";
        EXPECT_GE(completed_lazy[lazy1], before[tracked].second)
                << "tracked WR " << c.wr_id << " completed before lazy SENDs posted ahead of it";
        ++tracked;
    }
    EXPECT_EQ(tracked, before.size());
    EXPECT_EQ(completed_lazy, posted_lazy);
}

// Untracked lazy SENDs outstanding when the QP is destroyed: each is accounted for exactly once
// (completed or canceled), nothing stays outstanding.
TEST_F(VerbsRxe, DestroyWithUntrackedSendsAccountsForAll) {
    const uint32_t q = connect();
    const uint64_t lazy = wr_id_lazy | 7;
    uint64_t posted = 0;
    for (int i = 0; i < 200; ++i) {
        uint64_t v = uint64_t(i);
        iovec iov{&v, sizeof(v)};
        if (a->post_send(q, lazy, &iov, 1) != Status::ok)
            break;
        ++posted;
    }
    ASSERT_GT(posted, 0u);
    EXPECT_GT(a->stats().untracked_sends, 0u);
    ASSERT_EQ(a->destroy_qp(q), Status::ok);
    pump();
    uint64_t accounted = 0;
    for (const Completion& c : comps) {
        ASSERT_EQ(c.wr_id, lazy);
        EXPECT_TRUE(c.status == Status::ok || c.status == Status::canceled) << to_string(c.status);
        accounted += c.count;
    }
    EXPECT_EQ(accounted, posted);
    EXPECT_EQ(a->outstanding(0), 0u);
}

// The ibv wr_id carries 40 bits of a QP's sequence numbers: a QP whose numbers cross 2^40 still
// retires every work request (tracked, untracked lazy, moderated) and drains.
TEST_F(VerbsRxe, SequenceNumbersCrossThe40BitWrap) {
    verbs::DeviceConfig cfg;
    cfg.first_seq = (uint64_t(1) << 40) - 150;
    ASSERT_EQ(verbs::Device::open(cfg, pd, a), Status::ok);
    const uint32_t q = connect();
    const uint64_t lazy = wr_id_lazy | 3;
    uint64_t lazy_posted = 0;
    size_t tracked_posted = 0;
    for (int i = 0; i < 400; ++i) {
        uint64_t v = uint64_t(i);
        iovec iov{&v, sizeof(v)};
        const uint64_t id = i % 10 == 0 ? 5000 + uint64_t(i) : lazy;
        Status s;
        while ((s = a->post_send(q, id, &iov, 1)) == Status::no_resource) {
            a->complete_lazy(q);
            pump();
        }
        ASSERT_EQ(s, Status::ok) << i;
        (id == lazy ? lazy_posted : tracked_posted) += 1;
        if (i % 25 == 0)
            pump();
    }
    a->complete_lazy(q);
    ASSERT_TRUE(wait([&] { return a->outstanding(q) == 0 && msgs.size() == 400; }, 60))
            << a->outstanding(q) << " outstanding, " << msgs.size() << " received";
    uint64_t lazy_done = 0;
    size_t tracked_done = 0;
    for (const Completion& c : comps) {
        ASSERT_EQ(c.status, Status::ok);
        (c.wr_id == lazy ? lazy_done : tracked_done) += c.wr_id == lazy ? c.count : 1;
    }
    EXPECT_EQ(lazy_done, lazy_posted);
    EXPECT_EQ(tracked_done, tracked_posted);
}

// A request held back (here by the READ byte cap) whose ibv_post_send fails once the cap lets it
// go: the QP goes to error and every request completes, the held READ with an error and the
// unsignaled SENDs posted before it too. Before, nothing retired those SENDs (the failed READ
// was to be their signaled successor): they stayed outstanding until the QP was destroyed.
TEST_F(VerbsRxe, FailedPostOfHeldRequestCompletesEverything) {
    verbs::DeviceConfig cfg;
    cfg.cc.read_cap.max_bytes = 64 * 1024;
    cfg.fail_post_seq = 12;   // READ 1 is 1, SENDs 2..11, READ 2 is 12
    ASSERT_EQ(verbs::Device::open(cfg, pd, a), Status::ok);
    const uint32_t q = connect();
    const size_t N = 64 * 1024;
    std::vector<uint8_t> remote = pattern(N, 3), local(2 * N, 0);
    verbs::MrKeys rk, lk;
    ASSERT_EQ(pd->reg_mr(remote.data(), N, verbs::access_all, rk), Status::ok);
    ASSERT_EQ(pd->reg_mr(local.data(), 2 * N, verbs::access_all, lk), Status::ok);
    const uint64_t rva = reinterpret_cast<uintptr_t>(remote.data());
    ASSERT_EQ(a->post_read(q, 1, local.data(), N, rva, rk.rkey), Status::ok);
    const uint64_t lazy = wr_id_lazy | 9;
    for (uint64_t i = 0; i < 10; ++i) {
        iovec iov{&i, sizeof(i)};
        ASSERT_EQ(a->post_send(q, lazy, &iov, 1), Status::ok) << i;
    }
    ASSERT_EQ(a->post_read(q, 2, local.data() + N, N, rva, rk.rkey), Status::ok);
    EXPECT_EQ(a->outstanding(q), 12u);
    ASSERT_TRUE(wait([&] { return a->outstanding(q) == 0; }, 30))
            << a->outstanding(q) << " still outstanding (the unsignaled SENDs never retired)";
    ASSERT_NE(comp(1), nullptr);
    EXPECT_EQ(comp(1)->status, Status::ok);
    EXPECT_EQ(std::memcmp(local.data(), remote.data(), N), 0);
    ASSERT_NE(comp(2), nullptr) << "the held READ never completed";
    EXPECT_NE(comp(2)->status, Status::ok);
    uint64_t lazy_done = 0;
    for (const Completion& c : comps) {
        if (c.wr_id != lazy)
            continue;
        EXPECT_TRUE(c.status == Status::ok || c.status == Status::canceled) << to_string(c.status);
        lazy_done += c.count;
    }
    EXPECT_EQ(lazy_done, 10u);
    EXPECT_EQ(a->qp_state(q), verbs::QpState::error);
}
