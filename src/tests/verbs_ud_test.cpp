// UD QPs on rxe0 (loopback through rxe): datagrams with and without immediate data, the source
// GID/QPN recovered from the GRH area, size limit. GRH parsing is also checked on synthetic
// buffers, which runs anywhere.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>
#include <vector>

#include "gid/config.hpp"
#include "gid/sysroot.hpp"
#include "rxe_guard.hpp"
#include "ud/transport.hpp"
#include "verbs/ud.hpp"
#include "verbs/ud_datagram.hpp"
#include "wire/inet_csum.hpp"

using namespace roce;

TEST(VerbsUdGrh, SourceGidFromIpv4AndIpv6Headers) {
    uint8_t area[40] = {};
    // RoCE v2 / IPv4: IPv4 header in bytes 20..39, source 10.0.2.15, the bytes before it zero
    // and no checksum (as kernel rxe's loopback leaves them)
    area[20] = 0x45;
    area[32] = 10; area[33] = 0; area[34] = 2; area[35] = 15;
    uint8_t gid[16];
    verbs::ud_source_gid(area, gid);
    const uint8_t want4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15};
    EXPECT_EQ(std::memcmp(gid, want4, 16), 0);
    // ... and with undefined bytes before it that start like an IPv6 header: its checksum decides
    uint8_t junk6[40];
    std::memcpy(junk6, area, 40);
    junk6[0] = 0x60;
    wire::be::store16(junk6 + 30, wire::csum_fold(wire::csum_add(0, junk6 + 20, 20)));
    verbs::ud_source_gid(junk6, gid);
    EXPECT_EQ(std::memcmp(gid, want4, 16), 0);
    // IPv6 / GRH: version 6, source GID at offset 8
    uint8_t g6[40] = {0x60};
    for (int i = 0; i < 16; ++i)
        g6[8 + i] = uint8_t(0xf0 + i);
    verbs::ud_source_gid(g6, gid);
    EXPECT_EQ(std::memcmp(gid, g6 + 8, 16), 0);
    // An IPv6 source whose byte 12 is 0x45 (fe80::4500:..., or a RoCE v1 GID of 69.x.y.z) puts
    // 0x45 at byte 20 of the area: still a GRH, its source taken whole.
    for (const uint8_t b13 : {uint8_t(0), uint8_t(0x12)}) {
        uint8_t g[40] = {0x60};
        const uint8_t src[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0x45, b13, 0x33, 0x44};
        std::memcpy(g + 8, src, 16);
        verbs::ud_source_gid(g, gid);
        EXPECT_EQ(std::memcmp(gid, src, 16), 0) << "byte 13 " << int(b13);
    }
}

TEST(VerbsUd, DatagramsOnRxe) {
    ROCE_NEED_RXE0();
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

// The UD QP takes its GID entry and class by the whole GID policy (UCX_UD_ROCE_GID_* reach it
// as UdConfig::gid), as rc_roce's device does: before, only GID_INDEX was applied and the rest
// (ADDR_FAMILY, GID_NETDEV, DSCP, ...) silently ignored on RDMA devices.
TEST(VerbsUd, GidPolicyPicksTheEntryAndClass) {
    ROCE_NEED_RXE0();
    std::shared_ptr<verbs::Pd> pd;
    ASSERT_EQ(verbs::Pd::open("rxe0", pd), Status::ok);
    std::unique_ptr<verbs::UdQp> def;
    ASSERT_EQ(verbs::UdQp::open({}, pd, def), Status::ok);
    EXPECT_EQ(def->gid().addr.family, AF_INET) << "the default is the RoCE v2 IPv4 entry";

    verbs::UdConfig c6;
    c6.gid.family = gid::Family::inet6;
    c6.gid.dscp = 46;
    std::unique_ptr<verbs::UdQp> a, b;
    ASSERT_EQ(verbs::UdQp::open(c6, pd, a), Status::ok);
    ASSERT_EQ(verbs::UdQp::open(c6, pd, b), Status::ok);
    EXPECT_EQ(a->gid().addr.family, AF_INET6);
    EXPECT_NE(a->gid().index, def->gid().index);
    EXPECT_EQ(std::memcmp(a->address().gid, a->gid().gid, 16), 0) << "the address is the chosen entry";
    EXPECT_EQ(a->traffic_class().dscp(), 46);
    EXPECT_EQ(def->traffic_class().dscp(), 26) << "the builtin class when nothing is set";
    // A datagram between the IPv6 entries comes from the entry a advertises.
    iovec m{const_cast<char*>("v6"), 2};
    ASSERT_EQ(a->post_send(1, b->address(), &m, 1), Status::ok);
    bool got = false;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!got && std::chrono::steady_clock::now() < end) {
        a->progress();
        b->progress();
        b->poll_recv([&](const verbs::UdMessage& r) { got = r.len == 2 && r.src == a->address(); }, 8);
        usleep(200);
    }
    EXPECT_TRUE(got) << "no datagram from a's IPv6 GID";

    // Impossible settings: an error, no QP.
    for (auto bad : {+[](verbs::UdConfig& c) { c.gid.netdev = "nosuch0"; },
                     +[](verbs::UdConfig& c) { c.gid.gid_index = 250u; }}) {
        verbs::UdConfig cb;
        bad(cb);
        std::unique_ptr<verbs::UdQp> q;
        EXPECT_EQ(verbs::UdQp::open(cb, pd, q), Status::invalid_param);
        EXPECT_FALSE(q);
    }
}

// Address handles (one per destination GID and class) stay under UdConfig::max_ah: the least
// recently used one whose sends completed goes. Before, every destination's handle was kept for
// the QP's life: a job talking to many peers fills the device's table, which all processes on
// the node share (rxe: 16,382), and then no process reaches a new peer. Three classes to b make
// three handles; the cap is 2. Every datagram arrives.
TEST(VerbsUd, AddressHandlesStayUnderTheCap) {
    ROCE_NEED_RXE0();
    std::shared_ptr<verbs::Pd> pd;
    ASSERT_EQ(verbs::Pd::open("rxe0", pd), Status::ok);
    verbs::UdConfig ca;
    ca.max_ah = 2;
    std::unique_ptr<verbs::UdQp> a, b;
    ASSERT_EQ(verbs::UdQp::open(ca, pd, a), Status::ok);
    ASSERT_EQ(verbs::UdQp::open({}, pd, b), Status::ok);
    EXPECT_EQ(a->ah_stats().cap, 2u);
    uint8_t cls[3] = {0, 0, 0};
    for (int i = 1; i < 3; ++i) {
        gid::TrafficClass tc = a->traffic_class();
        tc.tos = uint8_t((10 + i) << 2);
        cls[i] = a->class_id(tc);
        ASSERT_NE(cls[i], 0);
    }
    ASSERT_NE(cls[1], cls[2]);
    constexpr int n = 60;
    int sent = 0, got = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (got < n && std::chrono::steady_clock::now() < end) {
        if (sent < n) {
            uint8_t x = uint8_t(sent);
            iovec m{&x, 1};
            const Status st = a->post_send(0, b->address(), &m, 1, nullptr, cls[sent % 3]);
            ASSERT_TRUE(st == Status::ok || st == Status::no_resource) << int(st);
            sent += st == Status::ok;
        }
        a->progress();
        b->progress();
        b->poll_recv([&](const verbs::UdMessage& r) { got += r.len == 1; }, 16);
        EXPECT_LE(a->ah_stats().cached, 3u);
    }
    EXPECT_EQ(got, n);
    // Unsignaled sends complete with a later signaled one: after it, the next send finds the
    // handles free and trims the cache to the cap.
    uint8_t x = 0;
    iovec m{&x, 1};
    ASSERT_EQ(a->post_send(99, b->address(), &m, 1), Status::ok);
    bool done = false;
    const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done && std::chrono::steady_clock::now() < end2) {
        a->progress();
        verbs::Completion c[8];
        const size_t k = a->poll_completions(c, 8);
        for (size_t i = 0; i < k; ++i)
            done |= c[i].wr_id == 99;
    }
    ASSERT_TRUE(done);
    ASSERT_EQ(a->post_send(0, b->address(), &m, 1), Status::ok);
    const verbs::UdQp::AhStats st = a->ah_stats();
    EXPECT_LE(st.cached, 2u);
    EXPECT_GT(st.evicted, 0u);
    std::printf("[verbs-ud] 3 classes, cap 2: %llu address handles evicted, %zu held\n",
                (unsigned long long)st.evicted, st.cached);
}

namespace {
// A sysfs file's content ("" if absent).
std::string sysfs(const std::string& rel) { return gid::SysRoot().read(rel).value_or(""); }
} // namespace

// The QP's GID entry replaced under it (its address removed, another taking the index, as a
// DHCP renewal does): datagrams to new destinations are refused with one error line, instead of
// leaving with a source no peer knows this QP by. Changes an address of rxe0's netdev (root, the
// guest), and puts it back.
TEST(VerbsUd, ReplacedGidEntryIsRefused) {
    ROCE_NEED_RXE0();
    const std::string ndev = sysfs("sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0");
    ASSERT_FALSE(ndev.empty());
    auto sh = [](const std::string& cmd) { return std::system((cmd + " 2>/dev/null").c_str()) == 0; };
    struct Cleanup {
        std::string ndev;
        ~Cleanup() {
            for (const char* a : {"10.77.0.1/32", "10.77.0.2/32"})
                (void)!std::system(("ip addr del " + std::string(a) + " dev " + ndev + " 2>/dev/null").c_str());
        }
    } cleanup{ndev};
    ASSERT_TRUE(sh("ip addr add 10.77.0.1/32 dev " + ndev));
    std::shared_ptr<verbs::Pd> pd;
    ASSERT_EQ(verbs::Pd::open("rxe0", pd), Status::ok);
    verbs::UdConfig c;
    std::string err;
    ASSERT_EQ(gid::set_gid_config(c.gid, "SUBNETS", "10.77.0.0/24", err), Status::ok) << err;
    std::unique_ptr<verbs::UdQp> a, b, fresh;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (verbs::UdQp::open(c, pd, a) != Status::ok && std::chrono::steady_clock::now() < end)
        usleep(100000);   // the GID table follows the address asynchronously
    ASSERT_TRUE(a) << "no GID entry for 10.77.0.1 appeared";
    const int index = a->gid().index;
    ASSERT_EQ(verbs::UdQp::open({}, pd, b), Status::ok);
    // A destination of another GID (address handles are per GID: b's would serve a QP of its own)
    verbs::UdConfig c6;
    c6.gid.family = gid::Family::inet6;
    ASSERT_EQ(verbs::UdQp::open(c6, pd, fresh), Status::ok);
    ASSERT_NE(std::memcmp(fresh->address().gid, b->address().gid, 16), 0);
    iovec m{const_cast<char*>("x"), 1};
    ASSERT_EQ(a->post_send(1, b->address(), &m, 1), Status::ok);

    const std::string gid_file = "sys/class/infiniband/rxe0/ports/1/gids/" + std::to_string(index);
    const std::string before = sysfs(gid_file);
    ASSERT_TRUE(sh("ip addr del 10.77.0.1/32 dev " + ndev + " && ip addr add 10.77.0.2/32 dev " + ndev));
    const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sysfs(gid_file) == before && std::chrono::steady_clock::now() < end2)
        usleep(100000);
    ASSERT_NE(sysfs(gid_file), before) << "GID index " << index << " did not change";
    EXPECT_EQ(a->post_send(2, fresh->address(), &m, 1), Status::unreachable)
        << "GID index " << index << " now " << sysfs(gid_file);
}

// ud_roce's reliability over two verbs UD QPs of rxe0 (verbs/ud_datagram.hpp): AMs of up to
// 12 MTUs both ways arrive exact, in order and once; the event fd fires after arm().
TEST(VerbsUd, ReliableTransportOnRxe) {
    ROCE_NEED_RXE0();
    std::shared_ptr<verbs::Pd> pd;
    ASSERT_EQ(verbs::Pd::open("rxe0", pd), Status::ok);
    std::vector<std::pair<uint8_t, std::vector<uint8_t>>> got[2];
    std::unique_ptr<ud::Transport> t[2];
    for (int i = 0; i < 2; ++i) {
        std::unique_ptr<ud::DatagramQp> qp;
        ASSERT_EQ(verbs::open_ud_datagram({}, pd, qp), Status::ok);
        ud::Transport::Callbacks cb;
        cb.deliver = [&got, i](ud::Transport::PeerId, uint8_t am, const uint8_t* d, size_t n) {
            got[i].emplace_back(am, std::vector<uint8_t>(d, d + n));
        };
        cb.failed = [](ud::Transport::PeerId, Status s) { ADD_FAILURE() << "peer failed: " << int(s); };
        t[i] = std::make_unique<ud::Transport>(ud::TransportConfig{}, std::move(qp), cb);
    }
    EXPECT_EQ(t[0]->address().net.port, verbs::rocev2_port);
    const size_t mtu = t[0]->packet_payload();
    auto msg = [&](size_t k) {
        std::vector<uint8_t> v((k * 977) % (12 * mtu) + 1);
        for (size_t j = 0; j < v.size(); ++j) v[j] = uint8_t(k + j * 3);
        return v;
    };
    const ud::Transport::PeerId to[2] = {t[0]->peer(t[1]->address()), t[1]->peer(t[0]->address())};
    constexpr size_t count = 300;
    size_t sent[2] = {0, 0};
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((got[0].size() < count || got[1].size() < count) && std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 2; ++i) {
            while (sent[i] < count) {
                std::vector<uint8_t> m = msg(sent[i]);
                iovec iov{m.data(), m.size()};
                if (t[i]->send_am(to[i], uint8_t(i + 1), &iov, 1) != Status::ok) break;
                ++sent[i];
            }
            t[i]->progress();
        }
    }
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(got[i].size(), count) << t[i]->stats_text();
        for (size_t k = 0; k < count; ++k) {
            ASSERT_EQ(got[i][k].first, uint8_t(2 - i));
            ASSERT_EQ(got[i][k].second, msg(k)) << "message " << k;
        }
    }
    // Armed and idle, the event fd wakes up for a new message.
    while (!t[0]->all_flushed() || !t[1]->all_flushed() || t[1]->busy()) {
        t[0]->progress();
        t[1]->progress();
    }
    t[1]->arm();
    uint8_t x = 9;
    iovec iov{&x, 1};
    ASSERT_EQ(t[0]->send_am(to[0], 5, &iov, 1), Status::ok);
    pollfd p{t[1]->event_fd(), POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 5000), 1);
}
