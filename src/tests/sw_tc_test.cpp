// Traffic-class negotiation of the userspace device. A fake peer - a plain UDP socket speaking our
// CM over QP1 - advertises a configured class while the device holds only the builtin default;
// the device must then send the connection's packets in the peer's class, as passive side (after
// answering a REQ) and as active side (after the REP). The ToS is read with IP_RECVTOS, i.e. as
// the kernel put it on the wire.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "gid/traffic_class.hpp"
#include "sw/class_sockets.hpp"
#include "sw/cm.hpp"
#include "sw/device_impl.hpp"
#include "sw/test_support.hpp"
#include "sw/udp_socket.hpp"
#include "tos_socket.hpp"
#include "wire/opcode.hpp"
#include "wire/packet.hpp"

using namespace roce;
using namespace roce::sw;

namespace {

constexpr uint8_t peer_tos = 18 << 2 | gid::ecn_ect0;   // 74: DSCP 18, ECT(0)

struct Captured {
    wire::Packet pkt;
    std::vector<uint8_t> bytes;
    int tos = -1;
};

class FakePeer {
public:
    FakePeer() {
        EXPECT_TRUE(sock_.ok());
        int pmtu = IP_PMTUDISC_DO;
        setsockopt(sock_.fd(), IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
    }
    const WireAddr& addr() const { return sock_.addr(); }

    void send_cm(const WireAddr& to, const cm::Msg& m) {
        uint8_t body[cm::msg_size];
        cm::encode(m, body);
        wire::Packet pkt;
        pkt.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
        pkt.bth.dest_qp = 1;
        pkt.deth.qkey = cm::qkey;
        pkt.deth.src_qp = 1;
        wire::IpContext ip;
        fill_ip_context(sock_.addr(), to, ip);
        uint8_t out[512];
        const size_t n = wire::build(pkt, std::span<const uint8_t>(body, sizeof(body)), ip, out);
        ASSERT_GT(n, 0u);
        sockaddr_storage ss;
        const socklen_t sl = to_sockaddr(to, ss);
        ASSERT_EQ(::sendto(sock_.fd(), out, n, 0, reinterpret_cast<sockaddr*>(&ss), sl), ssize_t(n));
    }

    // Drives `host` until a packet with an opcode accepted by `want` arrives (2 s at most).
    bool receive(sw::testing::Host& host, const std::function<bool(uint8_t)>& want, Captured& c) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (std::chrono::steady_clock::now() < end) {
            host.poll();
            auto d = sock_.receive(0);
            if (!d) {
                usleep(200);
                continue;
            }
            c.bytes = std::move(d->bytes);
            c.tos = d->tos;
            wire::IpContext ip{};
            if (wire::parse(c.bytes, ip, false, c.pkt) != wire::ParseError::none)
                continue;
            if (want(c.pkt.bth.opcode))
                return true;
        }
        return false;
    }

private:
    roce::tests::TosSocket sock_;
};

bool is_cm(uint8_t op) { return op == uint8_t(wire::Opcode::ud_send_only); }
bool is_rc_send(uint8_t op) { return op <= uint8_t(wire::Opcode::rc_send_only); }   // first..only

// The device side: the builtin default class (DSCP 26 + ECT(0)), as UCX configures it by default.
DeviceConfig builtin_class() {
    DeviceConfig c;
    c.ip = "127.0.0.1";
    c.traffic_class = 106;
    c.traffic_class_source = uint8_t(gid::TcSource::builtin);
    c.progress_thread = false;
    c.gso = false;
    return c;
}

cm::Msg peer_advert(cm::Msg m) {
    gid::TrafficClass tc;
    tc.tos = peer_tos;
    tc.tos_source = gid::TcSource::config;
    tc.priority = 3;
    tc.priority_source = gid::TcSource::config;
    m.has_tc = true;
    m.tc = gid::encode_tc_advert(tc);
    return m;
}

} // namespace

TEST(SwTrafficClass, CmMessagesCarryTheAdvert) {
    cm::Msg m = peer_advert({});
    m.src_qpn = 0x42;
    uint8_t buf[cm::msg_size];
    cm::encode(m, buf);
    cm::Msg d;
    ASSERT_TRUE(cm::decode(buf, d));
    EXPECT_TRUE(d.has_tc);
    EXPECT_EQ(d.tc, m.tc);
    // A peer of the first version leaves bytes 32.. zero: no advert.
    std::memset(buf + 32, 0, 8);
    ASSERT_TRUE(cm::decode(buf, d));
    EXPECT_FALSE(d.has_tc);
}

TEST(SwTrafficClass, PassiveSideUsesTheClassTheRequesterConfigured) {
    sw::testing::Host dev;
    ASSERT_EQ(dev.open(builtin_class()), Status::ok);
    FakePeer peer;
    cm::Msg req;
    req.type = cm::MsgType::req;
    req.conn_id = 0x1234;
    req.src_qpn = 0x77;
    req.start_psn = 100;
    req.mtu = 1024;
    peer.send_cm(dev.dev->address(), peer_advert(req));

    Captured rep;
    ASSERT_TRUE(peer.receive(dev, is_cm, rep));
    cm::Msg r;
    ASSERT_TRUE(cm::decode(rep.pkt.payload, r));
    ASSERT_EQ(r.type, cm::MsgType::rep);
    ASSERT_TRUE(r.has_tc) << "the REP carries the answering side's class";
    const auto local = gid::decode_tc_advert(r.tc);
    ASSERT_TRUE(local);
    EXPECT_EQ(local->tos, 106);
    EXPECT_EQ(local->tos_source, gid::TcSource::builtin);
    EXPECT_EQ(rep.tos, 106) << "CM messages go out in the socket's class";

    // Data on the passive QP goes back in the requester's configured class.
    const char msg[] = "hello";
    iovec iov{const_cast<char*>(msg), sizeof(msg)};
    ASSERT_EQ(dev.dev->post_send(r.src_qpn, 1, &iov, 1, nullptr), Status::ok);
    Captured data;
    ASSERT_TRUE(peer.receive(dev, is_rc_send, data));
    EXPECT_EQ(data.pkt.bth.dest_qp, 0x77u);
    EXPECT_EQ(data.tos, peer_tos);
}

// With GSO the message's packets leave as one UDP_SEGMENT send: the ToS rides beside it.
class SwTrafficClassActive : public ::testing::TestWithParam<bool> {};

TEST_P(SwTrafficClassActive, AdoptsTheClassFromTheReply) {
    sw::testing::Host dev;
    DeviceConfig c = builtin_class();
    c.gso = GetParam();
    c.mtu = 1024;
    ASSERT_EQ(dev.open(c), Status::ok);
    FakePeer peer;
    uint32_t qpn;
    ASSERT_EQ(dev.dev->create_qp(qpn), Status::ok);
    ASSERT_EQ(dev.dev->connect_qp(qpn, peer.addr()), Status::ok);
    std::vector<uint8_t> msg(3 * 1024, 0x5a);   // three packets
    iovec iov{msg.data(), msg.size()};
    ASSERT_EQ(dev.dev->post_send(qpn, 1, &iov, 1, nullptr), Status::ok);

    Captured req_pkt;
    ASSERT_TRUE(peer.receive(dev, is_cm, req_pkt));
    cm::Msg req;
    ASSERT_TRUE(cm::decode(req_pkt.pkt.payload, req));
    ASSERT_EQ(req.type, cm::MsgType::req);
    ASSERT_TRUE(req.has_tc);
    EXPECT_EQ(req_pkt.tos, 106);

    cm::Msg rep;
    rep.type = cm::MsgType::rep;
    rep.conn_id = req.conn_id;
    rep.src_qpn = 0x99;
    rep.dst_qpn = req.src_qpn;
    rep.start_psn = 7;
    rep.mtu = req.mtu;
    peer.send_cm(dev.dev->address(), peer_advert(rep));

    for (int k = 0; k < 3; ++k) {
        Captured data;
        ASSERT_TRUE(peer.receive(dev, is_rc_send, data)) << "packet " << k;
        EXPECT_EQ(data.pkt.bth.dest_qp, 0x99u);
        EXPECT_EQ(data.tos, peer_tos) << "the reply's configured class wins over our builtin default";
    }
    EXPECT_EQ(dev.dev->qp_state(qpn), QpState::rts);
    if (GetParam()) {
        EXPECT_GT(dev.dev->stats().gso_sends, 0u) << "the three packets went out as one GSO send";
    }
}
INSTANTIATE_TEST_SUITE_P(Gso, SwTrafficClassActive, ::testing::Bool(),
                         [](const auto& i) { return i.param ? "gso" : "plain"; });

TEST(SwTrafficClass, PeerWithoutAdvertKeepsOurClass) {
    sw::testing::Host dev;
    DeviceConfig c = builtin_class();
    c.traffic_class = 0xb8;   // DSCP 46, configured
    c.traffic_class_source = uint8_t(gid::TcSource::config);
    ASSERT_EQ(dev.open(c), Status::ok);
    FakePeer peer;
    cm::Msg req;
    req.type = cm::MsgType::req;
    req.conn_id = 0x55;
    req.src_qpn = 0x78;
    req.mtu = 1024;
    peer.send_cm(dev.dev->address(), req);   // has_tc = false: a first-version peer
    Captured rep;
    ASSERT_TRUE(peer.receive(dev, is_cm, rep));
    cm::Msg r;
    ASSERT_TRUE(cm::decode(rep.pkt.payload, r));
    const char msg[] = "x";
    iovec iov{const_cast<char*>(msg), sizeof(msg)};
    ASSERT_EQ(dev.dev->post_send(r.src_qpn, 1, &iov, 1, nullptr), Status::ok);
    Captured data;
    ASSERT_TRUE(peer.receive(dev, is_rc_send, data));
    EXPECT_EQ(data.tos, 0xb8);
}

namespace {

int so_priority(int fd) {
    int p = -1;
    socklen_t l = sizeof(p);
    return getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &p, &l) == 0 ? p : -1;
}

int queued_bytes(int fd) {
    int n = -1;
    return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
}

} // namespace

// The priority (PCP behind a VLAN's egress-qos-map) configured on one side only holds in both
// directions: the other side sends the connection from a class socket whose SO_PRIORITY is the
// peer's, on the same address and port (the peer accepts its packets as from us), and receives
// everything on its own socket. The kernel's SO_PRIORITY is read back, not our bookkeeping.
TEST(SwTrafficClass, PriorityConfiguredOnOneSideHoldsBothWays) {
    DeviceConfig ca = builtin_class(), cb = builtin_class();
    cb.priority = 5;
    cb.priority_source = uint8_t(gid::TcSource::config);
    sw::testing::Pair p;
    ASSERT_TRUE(p.open(ca, cb));

    const std::vector<int> a_fds = socket_fds_for_test(*p.a.dev), b_fds = socket_fds_for_test(*p.b.dev);
    // IP_TOS 106 alone would leave sk_priority at rt_tos2priority(106) = 2: SO_PRIORITY follows it.
    EXPECT_EQ(so_priority(a_fds[0]), 0) << "a's own socket: its builtin priority";
    EXPECT_EQ(so_priority(b_fds[0]), 5) << "b's own socket: the configured priority";
    ASSERT_EQ(a_fds.size(), 2u) << "a opened one class socket for the connection";
    EXPECT_EQ(b_fds.size(), 1u) << "b's connection is in b's own class";
    const TxClass ta = qp_tx_class_for_test(*p.a.dev, p.qa), tb = qp_tx_class_for_test(*p.b.dev, p.qb);
    EXPECT_EQ(ta.priority, 5) << "a -> b at the priority b configured";
    EXPECT_EQ(tb.priority, 5);
    EXPECT_EQ(ta.tos, 106);
    EXPECT_EQ(ta.fd, a_fds[1]);
    EXPECT_EQ(tb.fd, b_fds[0]);

    // Traffic both ways, verified: a's packets from its class socket must be taken as a's.
    constexpr int n = 64;
    for (int i = 0; i < n; ++i) {
        std::vector<uint8_t> x = sw::testing::random_bytes(3000, uint32_t(i)), y = sw::testing::random_bytes(2000, uint32_t(1000 + i));
        iovec ix{x.data(), x.size()}, iy{y.data(), y.size()};
        const uint64_t id = uint64_t(i) + 1;   // 0 would ask for no completion
        ASSERT_EQ(p.a.dev->post_send(p.qa, id, &ix, 1, nullptr), Status::ok);
        ASSERT_EQ(p.b.dev->post_send(p.qb, id, &iy, 1, nullptr), Status::ok);
        ASSERT_TRUE(sw::testing::run_until({&p.a, &p.b}, [&] { return p.a.find(id) && p.b.find(id); })) << "message " << i;
    }
    ASSERT_TRUE(sw::testing::run_until({&p.a, &p.b}, [&] { return p.a.msgs.size() == n && p.b.msgs.size() == n; }));
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(p.b.msgs[size_t(i)].data, sw::testing::random_bytes(3000, uint32_t(i)));
        EXPECT_EQ(p.a.msgs[size_t(i)].data, sw::testing::random_bytes(2000, uint32_t(1000 + i)));
    }
    EXPECT_EQ(p.a.dev->stats().timeouts, 0u);
    EXPECT_EQ(p.b.dev->stats().timeouts, 0u);
    EXPECT_EQ(p.b.dev->stats().dropped_unknown_qp, 0u) << "b took a's class-socket packets as a's";

    // Steering: datagrams to a's port from 32 source ports (32 different reuseport hashes) all
    // reach a's own socket; its class socket receives nothing.
    const uint64_t rx_before = p.a.dev->stats().rx_packets;
    sockaddr_storage to;
    const socklen_t tl = to_sockaddr(p.a.dev->address(), to);
    for (int k = 0; k < 32; ++k) {
        const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        const uint8_t junk[16] = {};
        EXPECT_EQ(::sendto(fd, junk, sizeof(junk), 0, reinterpret_cast<sockaddr*>(&to), tl), ssize_t(sizeof(junk)));
        ::close(fd);
    }
    EXPECT_TRUE(sw::testing::run_until({&p.a}, [&] { return p.a.dev->stats().rx_packets >= rx_before + 32; }, 2));
    EXPECT_EQ(p.a.dev->stats().rx_packets - rx_before, 32u);
    EXPECT_EQ(queued_bytes(a_fds[1]), 0);
}

namespace {

// The inode of the network namespace socket fd lives in (0 when it cannot be read).
ino_t netns_of(int fd) {
    const int ns = ::ioctl(fd, SIOCGSKNS);
    if (ns < 0)
        return 0;
    struct stat st {};
    ::fstat(ns, &st);
    ::close(ns);
    return st.st_ino;
}

} // namespace

// A device opened in another network namespace (UCX_ROCE_NETNS) opens class sockets later, on
// whichever thread runs its connection manager: they must live beside the device's socket, not in
// the calling thread's namespace (seen in the rxe guest: bind failed with EADDRNOTAVAIL there and
// the connection's priority, so its VLAN PCP, was lost in one direction).
TEST(SwTrafficClass, ClassSocketJoinsTheDevicesNamespace) {
    UdpSocket main;
    Status st = Status::io_error;
    bool skipped = false;
    std::thread t([&] {   // a fresh namespace with its loopback up, for this thread only
        if (::unshare(CLONE_NEWNET) != 0) {
            skipped = true;
            return;
        }
        const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ifreq ifr{};
        std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
        ::ioctl(fd, SIOCGIFFLAGS, &ifr);
        ifr.ifr_flags = short(ifr.ifr_flags | IFF_UP);
        ::ioctl(fd, SIOCSIFFLAGS, &ifr);
        ::close(fd);
        st = main.open("127.0.0.1", 0, 106, 0, false);
    });
    t.join();
    if (skipped)
        GTEST_SKIP() << "unshare(CLONE_NEWNET) refused (needs root)";
    ASSERT_EQ(st, Status::ok);
    const ino_t ns = netns_of(main.fd());
    if (ns == 0)
        GTEST_SKIP() << "SIOCGSKNS refused";
    const int here = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const ino_t ours = netns_of(here);
    ::close(here);
    ASSERT_NE(ns, ours) << "the test thread is elsewhere";

    UdpSocket sibling;   // from this thread, outside the device's namespace
    ASSERT_EQ(sibling.open_sibling(main, 106, 5), Status::ok);
    EXPECT_EQ(netns_of(sibling.fd()), ns);
    EXPECT_EQ(so_priority(sibling.fd()), 5);
}

// Siblings are bounded (ClassSockets::max) but reused: once no connection sends from one, a new
// class takes it over (peers that advertised 16 classes and went away, forged REQs reaped, kept
// every later class on the main socket, at the wrong priority, for the device's life).
TEST(SwTrafficClass, AClassSocketNobodyUsesServesTheNextClass) {
    UdpSocket main;
    ASSERT_EQ(main.open("127.0.0.1", 0, 0, 0, false), Status::ok);
    ClassSockets cs(main);
    std::vector<uint8_t> ids;
    for (uint8_t i = 0; i < ClassSockets::max; ++i) {
        ids.push_back(cs.get(uint8_t(4 * (i + 1)), 1));
        ASSERT_EQ(ids.back(), i + 1);
    }
    EXPECT_EQ(cs.get(8, 1), ids[1]);       // a second user of class 2
    EXPECT_EQ(cs.get(200, 2), 0);          // all taken: the main socket
    cs.release(ids[1]);
    EXPECT_EQ(cs.get(200, 2), 0);          // class 2 still has a user
    cs.release(ids[1]);
    const uint8_t id = cs.get(200, 2);     // now its sibling serves the new class
    EXPECT_EQ(id, ids[1]);
    EXPECT_EQ(cs.at(id).traffic_class(), 200);
    EXPECT_EQ(cs.at(id).class_priority(), 2);
    EXPECT_EQ(cs.at(id).local().port, main.local().port);
    EXPECT_EQ(cs.at(ids[0]).traffic_class(), 4);   // the others untouched
    EXPECT_EQ(cs.get(8, 1), 0);            // class 2 lost its socket
}
