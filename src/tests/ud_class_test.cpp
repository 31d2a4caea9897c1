// ud_roce's traffic class on the userspace device: a peer whose address carries its class advert
// is sent to in the class both sides negotiate (gid::negotiate_traffic_class), so both
// directions agree, as rc_roce's connection setup makes them; without an advert, in our own.
// The ToS is read on a real socket (IP_RECVTOS) standing in for the peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gid/traffic_class.hpp"
#include "sw/ud_qp.hpp"
#include "ud/header.hpp"
#include "ud/transport.hpp"
#include "tos_socket.hpp"

namespace roce::ud {
namespace {

gid::TrafficClass make_class(uint8_t tos, gid::TcSource src, uint8_t prio = 0) {
    gid::TrafficClass tc;
    tc.tos = tos;
    tc.tos_source = src;
    tc.priority = prio;
    tc.priority_source = src;
    return tc;
}

std::unique_ptr<DatagramQp> qp_in(const gid::TrafficClass& tc) {
    sw::UdQpConfig c;
    c.traffic_class = tc.tos;
    c.traffic_class_source = uint8_t(tc.tos_source);
    c.priority = tc.priority;
    c.priority_source = uint8_t(tc.priority_source);
    std::unique_ptr<DatagramQp> qp;
    EXPECT_EQ(sw::open_ud_qp(c, qp), Status::ok);
    return qp;
}

std::unique_ptr<Transport> transport(std::unique_ptr<DatagramQp> qp, std::vector<std::vector<uint8_t>>* got) {
    Transport::Callbacks cb;
    cb.deliver = [got](Transport::PeerId, uint8_t, const uint8_t* d, size_t n) {
        if (got) got->emplace_back(d, d + n);
    };
    cb.failed = [](Transport::PeerId, Status s) { ADD_FAILURE() << "peer failed: " << int(s); };
    return std::make_unique<Transport>(TransportConfig{}, std::move(qp), cb);
}

// The peer: a plain socket reading each datagram's ToS, known by a made-up QP number.
class TosPeer {
public:
    TosPeer() {
        EXPECT_TRUE(sock_.ok());
        addr_.net = sock_.addr();
        addr_.qpn = 0x123;
    }
    const UdAddr& addr() const { return addr_; }
    // The ToS of the next datagram within 5 s; -1 if none came. `first`: its first payload byte
    // (after BTH and DETH).
    int next_tos(int* first = nullptr) {
        const auto d = sock_.receive(5000);
        if (!d) return -1;
        if (first) *first = d->bytes.size() > 20 ? d->bytes[20] : -1;
        return d->tos;
    }

private:
    roce::tests::TosSocket sock_;
    UdAddr addr_;
};

using gid::TcSource;

// What our packets to a peer carry, for our class and the peer's advert (none: no advert).
int tos_sent(const gid::TrafficClass& ours, const ClassAdvert* peer_advert) {
    TosPeer peer;
    auto t = transport(qp_in(ours), nullptr);
    const Transport::PeerId id = t->peer(peer.addr(), 0, peer_advert);
    uint8_t x = 7;
    iovec iov{&x, 1};
    EXPECT_EQ(t->send_am(id, 1, &iov, 1), Status::ok);
    t->progress();
    return peer.next_tos();
}

TEST(UdClass, PacketsToAPeerCarryTheNegotiatedClass) {
    const gid::TrafficClass builtin = make_class(106, TcSource::builtin);
    const gid::TrafficClass dscp10 = make_class(10 << 2 | 2, TcSource::config);    // ToS 42
    const gid::TrafficClass dscp46 = make_class(46 << 2 | 2, TcSource::config);    // ToS 186
    const ClassAdvert adv_builtin = gid::encode_tc_advert(builtin);
    const ClassAdvert adv46 = gid::encode_tc_advert(dscp46);
    const ClassAdvert adv10 = gid::encode_tc_advert(dscp10);
    // No advert, or one that does not decode: our own class.
    EXPECT_EQ(tos_sent(builtin, nullptr), 106);
    const ClassAdvert bad{186, 9, 2, 2};   // configured ToS 186, but priority 9
    EXPECT_EQ(tos_sent(builtin, &bad), 106);
    // A configured class beats a builtin one, from either side.
    EXPECT_EQ(tos_sent(builtin, &adv46), 186) << "the peer configured DSCP 46, we did not";
    EXPECT_EQ(tos_sent(dscp10, &adv_builtin), 42) << "we configured DSCP 10, the peer did not";
    // Both configured: the larger, on both sides.
    EXPECT_EQ(tos_sent(dscp10, &adv46), 186);
    EXPECT_EQ(tos_sent(dscp46, &adv10), 186);
}

// Two transports in different classes that know each other's adverts: the side in a class other
// than its socket's sends from a second socket on the same address and port, which the peer must
// still recognise as the same peer (one sender, in order, exactly once, both ways).
TEST(UdClass, PeersInDifferentClassesStillTalk) {
    std::vector<std::vector<uint8_t>> got_a, got_b;
    auto a = transport(qp_in(make_class(106, TcSource::builtin)), &got_a);
    auto b = transport(qp_in(make_class(46 << 2 | 2, TcSource::config, 3)), &got_b);
    const ClassAdvert adv_a = a->class_advert(), adv_b = b->class_advert();
    EXPECT_EQ(gid::decode_tc_advert(adv_b)->tos, 186);
    const Transport::PeerId to_b = a->peer(b->address(), 0, &adv_b);
    const Transport::PeerId to_a = b->peer(a->address(), 0, &adv_a);
    constexpr size_t count = 200;
    size_t sent_a = 0, sent_b = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((got_a.size() < count || got_b.size() < count) && std::chrono::steady_clock::now() < end) {
        for (; sent_a < count; ++sent_a) {
            std::vector<uint8_t> m(sent_a * 37 % 6000 + 1, uint8_t(sent_a));
            iovec iov{m.data(), m.size()};
            if (a->send_am(to_b, 2, &iov, 1) != Status::ok) break;
        }
        for (; sent_b < count; ++sent_b) {
            std::vector<uint8_t> m(sent_b * 53 % 6000 + 1, uint8_t(~sent_b));
            iovec iov{m.data(), m.size()};
            if (b->send_am(to_a, 3, &iov, 1) != Status::ok) break;
        }
        a->progress();
        b->progress();
    }
    ASSERT_EQ(got_b.size(), count);
    ASSERT_EQ(got_a.size(), count);
    for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(got_b[i], std::vector<uint8_t>(i * 37 % 6000 + 1, uint8_t(i))) << i;
        EXPECT_EQ(got_a[i], std::vector<uint8_t>(i * 53 % 6000 + 1, uint8_t(~i))) << i;
    }
    EXPECT_EQ(a->stats().peers, 1u);
    EXPECT_EQ(b->stats().peers, 1u) << "a's second socket is the same peer";
    // a (builtin) sends in b's configured class from a second socket on its address: ToS 186.
    std::vector<int> tos_at_a_port;
    for (int fd = 0; fd < 1024; ++fd) {
        sockaddr_storage ss{};
        socklen_t l = sizeof(ss);
        int type = 0;
        socklen_t tl = sizeof(type);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM ||
            getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l) != 0 || ss.ss_family != AF_INET ||
            ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port) != a->address().net.port)
            continue;
        int tos = -1;
        socklen_t ol = sizeof(tos);
        getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &ol);
        tos_at_a_port.push_back(tos);
    }
    std::sort(tos_at_a_port.begin(), tos_at_a_port.end());
    EXPECT_EQ(tos_at_a_port, (std::vector<int>{106, 186})) << "a's own socket and its class socket";
}

// Held sends (one sendmmsg per batch, GSO runs) to peers of different classes: each datagram in
// its class and in the order sent, whatever the batch mixes.
TEST(UdClass, HeldSendsKeepOrderAndClassAcrossClasses) {
    TosPeer peer;
    std::unique_ptr<DatagramQp> qp = qp_in(make_class(106, TcSource::builtin));
    const ClassId c46 = qp->class_for(gid::encode_tc_advert(make_class(46 << 2 | 2, TcSource::config)));
    const ClassId c10 = qp->class_for(gid::encode_tc_advert(make_class(10 << 2 | 2, TcSource::config)));
    ASSERT_NE(c46, 0);
    ASSERT_NE(c10, 0);
    ASSERT_NE(c46, c10);
    const ClassId seq[] = {0, 0, c46, c46, c46, 0, c10, c46, c46, 0};
    const int want[] = {106, 106, 186, 186, 186, 106, 42, 186, 186, 106};
    for (size_t i = 0; i < std::size(seq); ++i) {
        uint8_t b[600];
        std::memset(b, int(i), sizeof(b));
        iovec iov{b, sizeof(b)};
        ASSERT_EQ(qp->send_held(peer.addr(), seq[i], &iov, 1), Status::ok);
    }
    qp->flush();
    for (size_t i = 0; i < std::size(seq); ++i) {
        int first = -1;
        EXPECT_EQ(peer.next_tos(&first), want[i]) << "datagram " << i;
        EXPECT_EQ(first, int(i)) << "order";
    }
}

} // namespace
} // namespace roce::ud
