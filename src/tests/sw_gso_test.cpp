// UDP GSO / GRO: the kernel numbers GSO segments' IPv4 IDs 0, 1, 2, ... and the ICRC of each
// segment must be computed for its ID. Checked three ways: the ICRC patch arithmetic against a
// full recomputation, a plain socket receiving a device's GSO burst (each segment verifies with
// exactly the ID of its position), and device-to-device transfers with GRO on and off.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

#include "sw/cm.hpp"
#include "sw/device_impl.hpp"
#include "sw/gso_icrc.hpp"
#include "sw/test_support.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

TEST(SwGso, IcrcIdDeltaMatchesRecomputation) {
    wire::IpContext ip;
    ip.src_ip[0] = 127; ip.src_ip[3] = 1;
    ip.dst_ip[0] = 127; ip.dst_ip[3] = 1;
    ip.src_port = 40000;
    ip.dst_port = 40001;
    for (size_t payload : {size_t(0), size_t(8), size_t(1024), size_t(4096)}) {
        wire::Packet pkt;
        pkt.bth.opcode = uint8_t(wire::Opcode::rc_send_middle);
        pkt.bth.dest_qp = 0x1234;
        std::vector<uint8_t> data(payload, 0x5a), out(payload + 64);
        if (payload == 0)
            pkt.bth.opcode = uint8_t(wire::Opcode::rc_ack);
        const size_t n = wire::build(pkt, data, ip, out);
        ASSERT_GT(n, 0u);
        out.resize(n);
        for (uint16_t id : {uint16_t(1), uint16_t(2), uint16_t(7), uint16_t(63), uint16_t(0xffff)}) {
            wire::IpContext ipk = ip;
            ipk.ipv4_id = id;
            const uint32_t want = wire::icrc_compute(ipk, out);
            const uint32_t got = wire::icrc_stored(out) ^ icrc_gso_delta(n, id);
            EXPECT_EQ(got, want) << "len " << n << " id " << id;
        }
        // The cache's bit-wise composition, for every segment number, first and cached.
        GsoIcrcPatches patches;
        for (int pass = 0; pass < 2; ++pass) {
            for (unsigned k = 0; k < GsoIcrcPatches::max_segments; ++k)
                ASSERT_EQ(patches.patch(n, k), k ? icrc_gso_delta(n, uint16_t(k)) : 0u) << "len " << n << " k " << k;
        }
    }
}

TEST(SwGso, PatchCacheEvictsAndRecomputes) {
    GsoIcrcPatches patches;
    // More lengths than the cache holds, revisited: an evicted length computed again, a kept one
    // not confused with another.
    for (int pass = 0; pass < 3; ++pass) {
        for (size_t len = 20; len < 20 + 4 * 13; len += 4)
            ASSERT_EQ(patches.patch(len, 37), icrc_gso_delta(len, 37)) << "len " << len;
    }
    // Beyond a GSO run's 64 segments: computed directly, still right.
    EXPECT_EQ(patches.patch(4136, 1000), icrc_gso_delta(4136, 1000));
}

TEST(SwGso, SegmentsCarryIdsZeroOneTwo) {
    Host b;
    ASSERT_EQ(b.open(DeviceConfig{}), Status::ok);
    // a plain socket plays the peer: CM REQ, then b sends a multi-packet SEND to it
    sockaddr_in sa;
    const int fd = loopback_udp_socket(sa);
    ASSERT_GE(fd, 0);
    const WireAddr dev = b.dev->address();
    wire::IpContext to_dev;   // attacker -> device
    std::memcpy(to_dev.src_ip, &sa.sin_addr, 4);
    std::memcpy(to_dev.dst_ip, dev.ip, 4);
    to_dev.src_port = ntohs(sa.sin_port);
    to_dev.dst_port = dev.port;
    wire::IpContext from_dev;  // device -> attacker
    std::memcpy(from_dev.src_ip, dev.ip, 4);
    std::memcpy(from_dev.dst_ip, &sa.sin_addr, 4);
    from_dev.src_port = dev.port;
    from_dev.dst_port = ntohs(sa.sin_port);
    wire::Packet ud;
    ud.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
    ud.bth.dest_qp = 1;
    ud.deth = {cm::qkey, 1};
    cm::Msg req;
    req.type = cm::MsgType::req;
    req.conn_id = 5;
    req.src_qpn = 0x4242;
    req.start_psn = 7;
    req.mtu = 1024;
    uint8_t body[cm::msg_size];
    cm::encode(req, body);
    std::vector<uint8_t> out(256);
    const size_t n = wire::build(ud, body, to_dev, out);
    sockaddr_in dsa{};
    dsa.sin_family = AF_INET;
    std::memcpy(&dsa.sin_addr, dev.ip, 4);
    dsa.sin_port = htons(dev.port);
    ASSERT_EQ(sendto(fd, out.data(), n, 0, reinterpret_cast<sockaddr*>(&dsa), sizeof(dsa)), ssize_t(n));
    std::vector<uint8_t> buf(70000);
    ssize_t r = -1;
    for (int i = 0; i < 1000 && r <= 0; ++i) {
        b.poll();
        r = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (r <= 0)
            usleep(1000);
    }
    ASSERT_GT(r, 0);
    wire::Packet rp;
    ASSERT_EQ(wire::parse(std::span<const uint8_t>(buf.data(), size_t(r)), from_dev, true, rp), wire::ParseError::none);
    cm::Msg rep;
    ASSERT_TRUE(cm::decode(rp.payload, rep));
    // 40 KiB SEND at MTU 1024: 40 equal segments, sent as GSO bursts
    std::vector<uint8_t> msg(40 * 1024, 0x77);
    iovec iov{msg.data(), msg.size()};
    ASSERT_EQ(b.dev->post_send(rep.src_qpn, 1, &iov, 1), Status::ok);
    b.poll();
    int seen = 0, nonzero = 0;
    int expect_id = 0;
    for (; seen < 40; ++seen) {
        r = recv(fd, buf.data(), buf.size(), 0);
        ASSERT_GT(r, 0) << "segment " << seen;
        const std::span<const uint8_t> pkt(buf.data(), size_t(r));
        uint16_t id = 0xffff;
        wire::IpContext any = from_dev;
        any.ipv4_id_known = false;
        ASSERT_TRUE(wire::icrc_verify_any_ipv4_id(any, pkt, &id)) << "segment " << seen;
        if (id != expect_id) {
            EXPECT_EQ(id, 0) << "segment " << seen << ": IDs must count 0,1,2,... within a burst";
        }
        wire::IpContext exact = from_dev;
        exact.ipv4_id = id;
        EXPECT_TRUE(wire::icrc_verify(exact, pkt));
        nonzero += id != 0;
        expect_id = id + 1;
    }
    EXPECT_GT(nonzero, 0);
    EXPECT_GT(b.dev->stats().gso_sends, 0u);
    close(fd);
}

TEST(SwGso, DeviceToDeviceWithAndWithoutGro) {
    for (int gro = 0; gro < 2; ++gro) {
        DeviceConfig cb;
        cb.gro = gro;
        std::vector<uint8_t> target(4 << 20), src(4 << 20);
        for (size_t i = 0; i < src.size(); ++i)
            src[i] = uint8_t(i * 7 + i / 4096);
        Pair p;
        ASSERT_TRUE(p.open(DeviceConfig{}, cb));
        MrKeys k;
        ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
        ASSERT_EQ(p.a.dev->post_write(p.qa, 1, src.data(), src.size(), uint64_t(uintptr_t(target.data())), k.rkey, false),
                  Status::ok);
        ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(1) != nullptr; }));
        EXPECT_EQ(p.a.find(1)->status, Status::ok);
        EXPECT_EQ(target, src);
        const auto sa = p.a.dev->stats(), sb = p.b.dev->stats();
        EXPECT_GT(sa.gso_sends, 0u);
        EXPECT_EQ(sb.icrc_errors, 0u);
        if (gro)
            EXPECT_GT(sb.gro_datagrams, 0u);
        else
            EXPECT_GT(sb.rx_nonzero_ipv4_id, 0u);   // kernel-segmented: IDs 1, 2, ... verified
    }
}
