// One-sided operations over loopback: RDMA WRITE / READ of 1 B .. 8 MiB with data checks,
// fetch-add and compare-swap, and every remote access violation (wrong / deregistered rkey,
// out of bounds, missing right, misaligned atomic) NAKed with the target memory untouched.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {

DeviceConfig cfg(uint32_t mtu = 4096) {
    DeviceConfig c;
    c.mtu = mtu;
    return c;
}

constexpr size_t guard = 4096;

// Target buffer with guard zones on both sides, registered on b.
struct Target {
    std::vector<uint8_t> mem;
    MrKeys keys{};
    size_t len;
    Target(Host& h, size_t n, unsigned access = access_all, uint8_t fill = 0xee) : mem(n + 2 * guard, fill), len(n) {
        EXPECT_EQ(h.pd->reg_mr(mem.data() + guard, n, access, keys), Status::ok);
    }
    uint8_t* data() { return mem.data() + guard; }
    uint64_t va() { return uint64_t(uintptr_t(data())); }
    bool guards_intact(uint8_t fill = 0xee) const {
        for (size_t i = 0; i < guard; ++i)
            if (mem[i] != fill || mem[mem.size() - 1 - i] != fill)
                return false;
        return true;
    }
};

Status wait_status(Pair& p, uint64_t id, double t = 10) {
    if (!run_until({&p.a, &p.b}, [&] { return p.a.find(id) != nullptr; }, t))
        return Status::in_progress;
    return p.a.find(id)->status;
}

} // namespace

class SwRdma : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SwRdma, WriteReadSizes) {
    const uint32_t mtu = GetParam();
    Pair p;
    ASSERT_TRUE(p.open(cfg(mtu), cfg(mtu)));
    const size_t max = mtu == 4096 ? (8u << 20) : (1u << 20);
    Target t(p.b, max);
    uint64_t id = 1;
    std::vector<size_t> sizes = {1, 7, size_t(mtu) - 1, mtu, size_t(mtu) + 1, 2 * size_t(mtu), 65536 + 5, max / 2 + 3, max};
    for (size_t sz : sizes) {
        auto src = random_bytes(sz, uint32_t(sz));
        const size_t off = sz < max ? (max - sz) / 2 : 0;
        // WRITE (zero-copy and copied alternately)
        ASSERT_EQ(p.a.dev->post_write(p.qa, id, src.data(), sz, t.va() + off, t.keys.rkey, id & 1), Status::ok);
        ASSERT_EQ(wait_status(p, id), Status::ok) << "write " << sz;
        EXPECT_EQ(p.a.find(id)->op, OpKind::write);
        ASSERT_EQ(std::memcmp(t.data() + off, src.data(), sz), 0) << "write size " << sz << " mtu " << mtu;
        ++id;
        // modify the target locally, READ it back
        for (size_t i = 0; i < sz; i += 97)
            t.data()[off + i] ^= 0x5a;
        std::vector<uint8_t> dst(sz + 2, 0x11);
        ASSERT_EQ(p.a.dev->post_read(p.qa, id, dst.data() + 1, sz, t.va() + off, t.keys.rkey), Status::ok);
        ASSERT_EQ(wait_status(p, id), Status::ok) << "read " << sz;
        EXPECT_EQ(p.a.find(id)->op, OpKind::read);
        ASSERT_EQ(std::memcmp(dst.data() + 1, t.data() + off, sz), 0) << "read size " << sz << " mtu " << mtu;
        EXPECT_EQ(dst[0], 0x11);
        EXPECT_EQ(dst[sz + 1], 0x11);
        ++id;
    }
    EXPECT_TRUE(t.guards_intact());
    EXPECT_EQ(p.a.dev->stats().icrc_errors + p.b.dev->stats().icrc_errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Mtus, SwRdma, ::testing::Values(256u, 1024u, 4096u));

TEST(SwRdma, ZeroLengthAndPipelined) {
    Pair p;
    ASSERT_TRUE(p.open(cfg(), cfg()));
    Target t(p.b, 1 << 20);
    ASSERT_EQ(p.a.dev->post_write(p.qa, 1, nullptr, 0, t.va(), t.keys.rkey, false), Status::ok);
    ASSERT_EQ(p.a.dev->post_read(p.qa, 2, nullptr, 0, t.va(), t.keys.rkey), Status::ok);
    ASSERT_EQ(wait_status(p, 2), Status::ok);
    EXPECT_EQ(wait_status(p, 1), Status::ok);
    // many outstanding reads and writes mixed; completions in order
    auto src = random_bytes(1 << 20, 3);
    std::vector<std::vector<uint8_t>> dsts(32, std::vector<uint8_t>(32768));
    uint64_t id = 100;
    for (int i = 0; i < 32; ++i) {
        ASSERT_EQ(p.a.dev->post_write(p.qa, id++, src.data() + i * 32768, 32768, t.va() + uint64_t(i) * 32768,
                                      t.keys.rkey, false), Status::ok);
        ASSERT_EQ(p.a.dev->post_read(p.qa, id++, dsts[size_t(i)].data(), 32768, t.va() + uint64_t(i) * 32768,
                                     t.keys.rkey), Status::ok);
    }
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.comps.size() >= 66; }));
    for (int i = 0; i < 32; ++i) {
        ASSERT_EQ(std::memcmp(dsts[size_t(i)].data(), src.data() + i * 32768, 32768), 0) << i;
    }
    for (size_t i = 2; i < p.a.comps.size(); ++i) {
        EXPECT_EQ(p.a.comps[i].wr_id, 100 + (i - 2));
    }
}

TEST(SwAtomic, FetchAddCmpSwap) {
    Pair p;
    ASSERT_TRUE(p.open(cfg(), cfg()));
    Target t(p.b, 64);
    uint64_t* v = reinterpret_cast<uint64_t*>(t.data() + 8);
    *v = 1000;
    uint64_t r = 0;
    ASSERT_EQ(p.a.dev->post_fetch_add(p.qa, 1, t.va() + 8, t.keys.rkey, 5, &r), Status::ok);
    ASSERT_EQ(wait_status(p, 1), Status::ok);
    EXPECT_EQ(p.a.find(1)->op, OpKind::fetch_add);
    EXPECT_EQ(r, 1000u);
    EXPECT_EQ(*v, 1005u);
    // cmp-swap success
    ASSERT_EQ(p.a.dev->post_cmp_swap(p.qa, 2, t.va() + 8, t.keys.rkey, 1005, 77, &r), Status::ok);
    ASSERT_EQ(wait_status(p, 2), Status::ok);
    EXPECT_EQ(p.a.find(2)->op, OpKind::cmp_swap);
    EXPECT_EQ(r, 1005u);
    EXPECT_EQ(*v, 77u);
    // cmp-swap failure: value unchanged, original returned
    ASSERT_EQ(p.a.dev->post_cmp_swap(p.qa, 3, t.va() + 8, t.keys.rkey, 1, 99, &r), Status::ok);
    ASSERT_EQ(wait_status(p, 3), Status::ok);
    EXPECT_EQ(r, 77u);
    EXPECT_EQ(*v, 77u);
    // 200 pipelined fetch-adds: every result distinct, total exact
    std::vector<uint64_t> res(200);
    for (int i = 0; i < 200; ++i) {
        Status s;
        while ((s = p.a.dev->post_fetch_add(p.qa, 10 + uint64_t(i), t.va() + 8, t.keys.rkey, 1, &res[size_t(i)])) ==
               Status::no_resource)
            p.a.poll();
        ASSERT_EQ(s, Status::ok);
    }
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(209) != nullptr; }));
    EXPECT_EQ(*v, 277u);
    for (int i = 0; i < 200; ++i) {
        EXPECT_EQ(res[size_t(i)], 77u + uint64_t(i));
    }
    EXPECT_EQ(p.a.dev->post_fetch_add(p.qa, 5, t.va() + 4, t.keys.rkey, 1, &r), Status::invalid_param);
    EXPECT_TRUE(t.guards_intact());
}

namespace {

// Posts one bad operation on a fresh pair, expects `want` and an untouched target.
void expect_bad(const std::function<Status(Pair&, Target&)>& post, Status want, unsigned access = access_all,
                bool dereg = false) {
    Pair p;
    ASSERT_TRUE(p.open(cfg(), cfg()));
    Target t(p.b, 8192, access);
    if (dereg) {
        ASSERT_EQ(p.b.pd->dereg_mr(t.keys.lkey), Status::ok);
    }
    ASSERT_EQ(post(p, t), Status::ok);
    EXPECT_EQ(wait_status(p, 1), want);
    EXPECT_EQ(p.a.dev->qp_state(p.qa), QpState::error);
    for (size_t i = 0; i < t.mem.size(); ++i) {
        ASSERT_EQ(t.mem[i], 0xee) << "byte " << i << " of the target changed";
    }
    EXPECT_GE(p.b.dev->stats().naks_sent, 1u);
    // the QP is in error: later posts are refused, nothing hangs
    uint8_t x = 0;
    EXPECT_NE(p.a.dev->post_write(p.qa, 2, &x, 1, t.va(), t.keys.rkey, true), Status::ok);
}

} // namespace

TEST(SwAccess, RemoteAccessErrors) {
    std::vector<uint8_t> src(20000, 0x42);
    uint64_t r = 0;
    // wrong rkey
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_write(p.qa, 1, src.data(), 100, t.va(), t.keys.rkey ^ 0x100, false); },
               Status::remote_access);
    // out of bounds: past the end, before the start, multi-packet crossing the end
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_write(p.qa, 1, src.data(), 100, t.va() + 8150, t.keys.rkey, false); },
               Status::remote_access);
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_write(p.qa, 1, src.data(), 16, t.va() - 8, t.keys.rkey, false); },
               Status::remote_access);
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_write(p.qa, 1, src.data(), 10000, t.va(), t.keys.rkey, false); },
               Status::remote_access);
    // missing rights
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_write(p.qa, 1, src.data(), 10, t.va(), t.keys.rkey, false); },
               Status::remote_access, access_remote_read | access_remote_atomic);
    std::vector<uint8_t> dst(100);
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_read(p.qa, 1, dst.data(), 10, t.va(), t.keys.rkey); },
               Status::remote_access, access_remote_write);
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_fetch_add(p.qa, 1, t.va(), t.keys.rkey, 1, &r); },
               Status::remote_access, access_remote_read | access_remote_write);
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_cmp_swap(p.qa, 1, t.va(), t.keys.rkey, 0xeeeeeeeeeeeeeeeeull, 1, &r); },
               Status::remote_access, access_remote_read | access_remote_write);
    // deregistered region
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_write(p.qa, 1, src.data(), 10, t.va(), t.keys.rkey, false); },
               Status::remote_access, access_all, true);
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_read(p.qa, 1, dst.data(), 10, t.va(), t.keys.rkey); },
               Status::remote_access, access_all, true);
    expect_bad([&](Pair& p, Target& t) { return p.a.dev->post_fetch_add(p.qa, 1, t.va(), t.keys.rkey, 1, &r); },
               Status::remote_access, access_all, true);
}

TEST(SwAccess, ErrorFlushesLaterWrs) {
    Pair p;
    ASSERT_TRUE(p.open(cfg(), cfg()));
    Target t(p.b, 4096);
    std::vector<uint8_t> src(100, 1);
    ASSERT_EQ(p.a.dev->post_write(p.qa, 1, src.data(), 10, t.va(), t.keys.rkey ^ 1, false), Status::ok);
    ASSERT_EQ(p.a.dev->post_write(p.qa, 2, src.data(), 10, t.va(), t.keys.rkey, false), Status::ok);
    ASSERT_EQ(p.a.dev->post_write(p.qa, 3, src.data(), 10, t.va(), t.keys.rkey, false), Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.comps.size() == 3; }));
    EXPECT_EQ(p.a.comps[0].status, Status::remote_access);
    EXPECT_EQ(p.a.comps[0].wr_id, 1u);
    EXPECT_EQ(p.a.comps[1].wr_id, 2u);
    EXPECT_EQ(p.a.comps[2].wr_id, 3u);
    EXPECT_NE(p.a.comps[2].status, Status::ok);
    EXPECT_EQ(p.a.dev->outstanding(p.qa), 0u);
}
