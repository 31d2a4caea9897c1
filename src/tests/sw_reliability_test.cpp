// Reliability: timeouts against a silent peer, peer death, RNR, and data integrity with
// injected drops, duplicates, reordering and corruption on both sides.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstring>
#include <random>
#include <sys/socket.h>
#include <unistd.h>

#include "sw/device_impl.hpp"
#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {

DeviceConfig fast_cfg() {
    DeviceConfig c;
    c.retransmit_timeout_us = 1000;
    c.retry_count = 4;
    return c;
}

void fill(uint8_t* p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = uint8_t(x >> 24);
    }
}

} // namespace

TEST(SwReliability, ConnectToNobodyTimesOut) {
    // A bound UDP socket that never answers.
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    socklen_t l = sizeof(sa);
    getsockname(s, reinterpret_cast<sockaddr*>(&sa), &l);
    Host a;
    ASSERT_EQ(a.open(fast_cfg()), Status::ok);
    WireAddr peer{};
    peer.family = AF_INET;
    std::memcpy(peer.ip, &sa.sin_addr, 4);
    peer.port = ntohs(sa.sin_port);
    uint32_t q;
    ASSERT_EQ(a.dev->create_qp(q), Status::ok);
    ASSERT_EQ(a.dev->connect_qp(q, peer), Status::ok);
    uint8_t x = 1;
    iovec iov{&x, 1};
    ASSERT_EQ(a.dev->post_send(q, 5, &iov, 1), Status::ok);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(run_until({&a}, [&] { return a.find(5) != nullptr; }, 10));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_EQ(a.find(5)->status, Status::timeout);
    EXPECT_EQ(a.dev->qp_state(q), QpState::error);
    close(s);
    // and a port with no socket at all
    uint32_t q2;
    ASSERT_EQ(a.dev->create_qp(q2), Status::ok);
    ASSERT_EQ(a.dev->connect_qp(q2, peer), Status::ok);
    ASSERT_EQ(a.dev->post_send(q2, 6, &iov, 1), Status::ok);
    ASSERT_TRUE(run_until({&a}, [&] { return a.find(6) != nullptr; }, 10));
    EXPECT_EQ(a.find(6)->status, Status::timeout);
}

TEST(SwReliability, PeerDestroyedMidTransfer) {
    for (int graceful = 0; graceful < 2; ++graceful) {
        DeviceConfig cb = fast_cfg();
        cb.progress_thread = graceful;   // the silent peer must not answer from a thread either
        std::vector<uint8_t> big(8 << 20), src(8 << 20, 1), dst(8 << 20);   // b's region, a's buffers
        Pair p;
        ASSERT_TRUE(p.open(fast_cfg(), cb));
        MrKeys k;
        ASSERT_EQ(p.b.pd->reg_mr(big.data(), big.size(), access_all, k), Status::ok);
        for (int i = 0; i < 8; ++i) {
            ASSERT_EQ(p.a.dev->post_write(p.qa, uint64_t(10 + i), src.data(), src.size(), uint64_t(uintptr_t(big.data())),
                                          k.rkey, false), Status::ok);
            ASSERT_EQ(p.a.dev->post_read(p.qa, uint64_t(20 + i), dst.data(), dst.size(), uint64_t(uintptr_t(big.data())),
                                         k.rkey), Status::ok);
        }
        for (int i = 0; i < 3; ++i) {
            p.a.poll();
            p.b.poll();
        }
        if (graceful)
            p.b.dev.reset();            // destructor sends DREQ: a's QP flushes (canceled)
        else
            p.b.drive_progress = false; // hung peer: a times out
        ASSERT_TRUE(run_until({&p.a}, [&] { return p.a.comps.size() == 16; }, 20));
        for (auto& c : p.a.comps) {
            if (c.status != Status::ok) {
                EXPECT_EQ(c.status, graceful ? Status::canceled : Status::timeout);
            }
        }
        EXPECT_NE(p.a.comps.back().status, Status::ok);
        EXPECT_EQ(p.a.dev->qp_state(p.qa), QpState::error);
        EXPECT_EQ(p.a.dev->outstanding(0), 0u);
    }
}

TEST(SwReliability, DestroyWithOutstandingCancels) {
    std::vector<uint8_t> buf(1 << 20), local(1 << 20);
    Pair p;
    ASSERT_TRUE(p.open(fast_cfg(), fast_cfg()));
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(buf.data(), buf.size(), access_all, k), Status::ok);
    for (int i = 0; i < 10; ++i)
        ASSERT_EQ(p.a.dev->post_read(p.qa, uint64_t(i + 1), local.data(), local.size(), uint64_t(uintptr_t(buf.data())), k.rkey),
                  Status::ok);
    ASSERT_EQ(p.a.dev->destroy_qp(p.qa), Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.comps.size() == 10; }, 5));
    for (auto& c : p.a.comps)
        EXPECT_EQ(c.status, Status::canceled);
    // b's passive QP is gone after the DREQ
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.b.dev->qp_state(p.qb) == QpState::error; }, 5));
}

namespace {

// b's owner takes nothing while a posts 20 SENDs: b answers RNR NAKs and at most `held`
// complete; once b's owner takes messages again all 20 arrive, in order.
void rnr_until_taken(const DeviceConfig& cb, size_t held) {
    Pair p;
    ASSERT_TRUE(p.open(DeviceConfig{}, cb));
    p.b.take_messages = false;
    for (uint32_t i = 0; i < 20; ++i) {
        iovec iov{&i, sizeof(i)};
        ASSERT_EQ(p.a.dev->post_send(p.qa, i + 1, &iov, 1), Status::ok);
    }
    run_until({&p.a, &p.b}, [&] { return p.a.dev->stats().rnr_naks > 0; }, 5);
    EXPECT_GT(p.a.dev->stats().rnr_naks, 0u);
    EXPECT_LE(p.a.comps.size(), held);
    p.b.take_messages = true;
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.comps.size() == 20 && p.b.msgs.size() == 20; }, 20));
    for (uint32_t i = 0; i < 20; ++i) {
        uint32_t v;
        std::memcpy(&v, p.b.msgs[i].data.data(), 4);
        EXPECT_EQ(v, i);
        EXPECT_EQ(p.a.comps[i].status, Status::ok);
    }
}

} // namespace

TEST(SwReliability, RnrWhenReceiverIsSlow) {
    DeviceConfig cb;
    cb.recv_queue_len = 4;
    rnr_until_taken(cb, 4);
}

// The device-wide bound on what the owner has not taken (recv_budget, all QPs together): with
// room for one message, the second waits behind RNR NAKs although the QP's own queue
// (RX_QUEUE_LEN 1024) is far from full.
TEST(SwReliability, RnrWhenTheDeviceHoldsItsBudget) {
    DeviceConfig cb;
    cb.recv_budget = 1;   // bytes: any message fills it
    rnr_until_taken(cb, 1);
}

namespace {

struct FaultRun {
    uint64_t delivered = 0, icrc = 0, retrans = 0;
};

// n transfers of up to `size` bytes: SENDs (max_recv_msg), WRITEs and READs, plus atomics;
// every byte checked, every message delivered exactly once and in order.
FaultRun fault_mix(const FaultConfig& f, int n, size_t size) {
    DeviceConfig c;
    c.retransmit_timeout_us = 1000;
    c.retry_count = 30;
    c.max_recv_msg = 65536;
    c.faults = f;
    DeviceConfig cb = c;
    cb.faults.seed = f.seed + 100;
    Pair p;
    EXPECT_TRUE(p.open(c, cb, 20));
    std::vector<uint8_t> target(size), src(size), dst(size);
    MrKeys k;
    EXPECT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
    alignas(8) uint64_t counter = 0;
    MrKeys kc;
    EXPECT_EQ(p.b.pd->reg_mr(&counter, 8, access_all, kc), Status::ok);
    const uint64_t tva = uint64_t(uintptr_t(target.data()));
    uint64_t sends = 0, adds = 0;
    std::vector<uint64_t> add_results;
    for (int i = 0; i < n; ++i) {
        const int kind = i % 4;
        const uint64_t id = uint64_t(i) + 1;
        if (kind == 0) {   // SEND, tagged with its index
            std::vector<uint8_t> m(c.max_recv_msg);
            fill(m.data(), m.size(), uint32_t(i));
            std::memcpy(m.data(), &sends, 8);
            iovec iov{m.data(), m.size()};
            EXPECT_EQ(p.a.dev->post_send(p.qa, id, &iov, 1), Status::ok);
            ++sends;
        } else if (kind == 1) {   // WRITE then READ back
            fill(src.data(), src.size(), uint32_t(i));
            EXPECT_EQ(p.a.dev->post_write(p.qa, id, src.data(), size, tva, k.rkey, false), Status::ok);
        } else if (kind == 2) {
            std::memset(dst.data(), 0, dst.size());
            EXPECT_EQ(p.a.dev->post_read(p.qa, id, dst.data(), size, tva, k.rkey), Status::ok);
        } else {
            add_results.push_back(~0ull);
            EXPECT_EQ(p.a.dev->post_fetch_add(p.qa, id, uint64_t(uintptr_t(&counter)), kc.rkey, 1, &add_results.back()),
                      Status::ok);
            ++adds;
        }
        const bool ok = run_until({&p.a, &p.b}, [&] { return p.a.find(id) != nullptr; }, 30);
        EXPECT_TRUE(ok) << "transfer " << i << " stuck";
        if (!ok)
            break;
        EXPECT_EQ(p.a.find(id)->status, Status::ok) << "transfer " << i;
        if (kind == 1) {
            EXPECT_EQ(std::memcmp(target.data(), src.data(), size), 0) << "write " << i;
        } else if (kind == 2) {
            EXPECT_EQ(std::memcmp(dst.data(), target.data(), size), 0) << "read " << i;
        } else if (kind == 3) {
            EXPECT_EQ(add_results.back(), adds - 1) << "atomic executed twice? " << i;
        }
        if (::testing::Test::HasFailure())
            break;
    }
    EXPECT_TRUE(run_until({&p.a, &p.b}, [&] { return p.b.msgs.size() >= sends; }, 10));
    // a little extra time: duplicates must not produce extra deliveries
    run_until({&p.a, &p.b}, [] { return false; }, 0.05);
    EXPECT_EQ(p.b.msgs.size(), sends);
    for (size_t i = 0; i < p.b.msgs.size(); ++i) {
        uint64_t tag;
        std::memcpy(&tag, p.b.msgs[i].data.data(), 8);
        EXPECT_EQ(tag, i);
        std::vector<uint8_t> m(c.max_recv_msg);
        fill(m.data(), m.size(), uint32_t(i * 4));
        std::memcpy(m.data(), &tag, 8);
        EXPECT_TRUE(p.b.msgs[i].data == m) << "message " << i;
    }
    EXPECT_EQ(counter, adds);
    const DeviceStats sa = p.a.dev->stats(), sb = p.b.dev->stats();
    if (f.drop > 0) {
        EXPECT_GT(sa.faults_dropped + sb.faults_dropped, 0u);
    }
    if (f.duplicate > 0) {
        EXPECT_GT(sa.faults_duplicated + sb.faults_duplicated, 0u);
    }
    if (f.reorder > 0) {
        EXPECT_GT(sa.faults_reordered + sb.faults_reordered, 0u);
    }
    if (f.corrupt > 0) {
        EXPECT_GT(sa.faults_corrupted + sb.faults_corrupted, 0u);
    }
    FaultRun r;
    r.delivered = p.b.msgs.size();
    r.icrc = p.a.dev->stats().icrc_errors + p.b.dev->stats().icrc_errors;
    r.retrans = p.a.dev->stats().retransmits + p.b.dev->stats().retransmits;
    return r;
}

} // namespace

TEST(SwFaults, DropDuplicateReorder) {
    FaultConfig f;
    f.drop = 0.01;
    f.duplicate = 0.01;
    f.reorder = 0.01;
    f.seed = 7;
    const FaultRun r = fault_mix(f, 1000, 1 << 20);
    EXPECT_EQ(r.delivered, 250u);
    EXPECT_GT(r.retrans, 0u);
}

TEST(SwFaults, Corruption) {
    FaultConfig f;
    f.corrupt = 0.01;
    f.seed = 11;
    const FaultRun r = fault_mix(f, 200, 1 << 20);
    EXPECT_GT(r.icrc, 0u);
}

// PSNs are 24-bit: start just below the wrap and push traffic (with losses) across it.
TEST(SwReliability, PsnWrapAround) {
    for (int lossy = 0; lossy < 2; ++lossy) {
        DeviceConfig c;
        c.retransmit_timeout_us = 1000;
        c.retry_count = 30;
        if (lossy) {
            c.faults.drop = 0.01;
            c.faults.reorder = 0.01;
        }
        std::vector<uint8_t> target(1 << 20), src(1 << 20), dst(1 << 20);
        Host a, b;
        ASSERT_EQ(a.open(c), Status::ok);
        c.faults.seed = 5;
        ASSERT_EQ(b.open(c), Status::ok);
        uint32_t q;
        ASSERT_EQ(a.dev->create_qp(q), Status::ok);
        {
            auto* impl = dynamic_cast<DeviceImpl*>(a.dev.get());
            ASSERT_NE(impl, nullptr);
            std::lock_guard lk(impl->mu_);
            Qp* qp = impl->find_qp(q);
            qp->sq_start_psn = qp->next_psn = qp->una_psn = qp->sent_hi = 0xffffff - 300;
        }
        ASSERT_EQ(a.dev->connect_qp(q, b.dev->address()), Status::ok);
        MrKeys k;
        ASSERT_EQ(b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
        alignas(8) uint64_t counter = 0;
        MrKeys kc;
        ASSERT_EQ(b.pd->reg_mr(&counter, 8, access_all, kc), Status::ok);
        const uint64_t tva = uint64_t(uintptr_t(target.data()));
        uint64_t r = 0;
        for (int i = 0; i < 12; ++i) {
            fill(src.data(), src.size(), uint32_t(i + 1000 * lossy));
            const uint64_t id = uint64_t(i) * 4;
            ASSERT_EQ(a.dev->post_write(q, id + 1, src.data(), src.size(), tva, k.rkey, false), Status::ok);
            ASSERT_EQ(a.dev->post_read(q, id + 2, dst.data(), dst.size(), tva, k.rkey), Status::ok);
            ASSERT_EQ(a.dev->post_fetch_add(q, id + 3, uint64_t(uintptr_t(&counter)), kc.rkey, 1, &r), Status::ok);
            iovec iov{src.data(), 5000};
            ASSERT_EQ(a.dev->post_send(q, id + 4, &iov, 1), Status::ok);
            ASSERT_TRUE(run_until({&a, &b}, [&] { return a.find(id + 4) != nullptr && b.msgs.size() == size_t(i + 1); }, 20))
                << "round " << i;
            for (uint64_t j = 1; j <= 4; ++j)
                ASSERT_EQ(a.find(id + j)->status, Status::ok);
            ASSERT_EQ(std::memcmp(target.data(), src.data(), src.size()), 0);
            ASSERT_EQ(std::memcmp(dst.data(), src.data(), src.size()), 0);
            ASSERT_EQ(r, uint64_t(i));
            ASSERT_TRUE(std::equal(b.msgs.back().data.begin(), b.msgs.back().data.end(), src.begin()));
        }
        EXPECT_EQ(counter, 12u);
        b.dev.reset();
    }
}
