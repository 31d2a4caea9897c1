// UD QPs on rxe0 (loopback through rxe): datagrams with and without immediate data, the source
// GID/QPN recovered from the GRH area, size limit. GRH parsing is also checked on synthetic
// buffers, which runs anywhere.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <unistd.h>
#include <vector>

#include "verbs/ud.hpp"

using namespace roce;

TEST(VerbsUdGrh, SourceGidFromIpv4AndIpv6Headers) {
    uint8_t area[40] = {};
    // RoCE v2 / IPv4: IPv4 header in bytes 20..39, source 10.0.2.15
    area[20] = 0x45;
    area[32] = 10; area[33] = 0; area[34] = 2; area[35] = 15;
    uint8_t gid[16];
    verbs::ud_source_gid(area, gid);
    const uint8_t want4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15};
    EXPECT_EQ(std::memcmp(gid, want4, 16), 0);
    // IPv6 / GRH: version 6, source GID at offset 8
    uint8_t g6[40] = {0x60};
    for (int i = 0; i < 16; ++i)
        g6[8 + i] = uint8_t(0xf0 + i);
    verbs::ud_source_gid(g6, gid);
    EXPECT_EQ(std::memcmp(gid, g6 + 8, 16), 0);
}

TEST(VerbsUd, DatagramsOnRxe) {
    if (access("/sys/class/infiniband/rxe0", F_OK) != 0) {
        const char* e = std::getenv("ROCE_REQUIRE_RXE_DEVICE");
        if (e && std::strcmp(e, "1") == 0)
            FAIL() << "rxe0 absent but ROCE_REQUIRE_RXE_DEVICE=1";
        GTEST_SKIP() << "no rxe0";
    }
    std::shared_ptr<verbs::Pd> pd;
    ASSERT_EQ(verbs::Pd::open("rxe0", pd), Status::ok);
    std::unique_ptr<verbs::UdQp> a, b;
    ASSERT_EQ(verbs::UdQp::open({}, pd, a), Status::ok);
    ASSERT_EQ(verbs::UdQp::open({}, pd, b), Status::ok);
    const uint32_t mtu = a->max_msg();
    ASSERT_GE(mtu, 256u);
    std::vector<uint8_t> big(mtu);
    for (size_t i = 0; i < big.size(); ++i)
        big[i] = uint8_t(i * 7);
    const uint32_t imm = 0xfeed;
    iovec i1{big.data(), 100}, i2{big.data(), mtu}, i3{big.data(), size_t(mtu) + 1};
    ASSERT_EQ(a->post_send(1, b->address(), &i1, 1, &imm), Status::ok);
    ASSERT_EQ(a->post_send(2, b->address(), &i2, 1), Status::ok);
    ASSERT_EQ(a->post_send(3, b->address(), nullptr, 0), Status::ok);
    EXPECT_EQ(a->post_send(4, b->address(), &i3, 1), Status::invalid_param);
    struct M {
        verbs::UdDest src;
        std::vector<uint8_t> data;
        bool has_imm;
        uint32_t imm;
    };
    std::vector<M> got;
    std::vector<verbs::Completion> comps;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((got.size() < 3 || comps.size() < 3) && std::chrono::steady_clock::now() < end) {
        a->progress();
        b->progress();
        verbs::Completion c[8];
        const size_t n = a->poll_completions(c, 8);
        comps.insert(comps.end(), c, c + n);
        b->poll_recv([&](const verbs::UdMessage& m) {
            got.push_back({m.src, std::vector<uint8_t>(m.data, m.data + m.len), m.has_imm, m.imm});
        }, 8);
        usleep(200);
    }
    ASSERT_EQ(got.size(), 3u);
    ASSERT_EQ(comps.size(), 3u);
    for (auto& c : comps)
        EXPECT_EQ(c.status, Status::ok);
    EXPECT_EQ(got[0].data, std::vector<uint8_t>(big.begin(), big.begin() + 100));
    EXPECT_TRUE(got[0].has_imm);
    EXPECT_EQ(got[0].imm, imm);
    EXPECT_EQ(got[1].data, big);
    EXPECT_FALSE(got[1].has_imm);
    EXPECT_TRUE(got[2].data.empty());
    for (auto& m : got)
        EXPECT_EQ(m.src, a->address()) << "source GID/QPN from the GRH area";
    // and back, to the source the message names
    iovec r{big.data(), 8};
    ASSERT_EQ(b->post_send(9, got[0].src, &r, 1), Status::ok);
    bool back = false;
    const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!back && std::chrono::steady_clock::now() < end2) {
        a->progress();
        b->progress();
        a->poll_recv([&](const verbs::UdMessage& m) { back = m.len == 8 && m.src == b->address(); }, 8);
        usleep(200);
    }
    EXPECT_TRUE(back);
}
