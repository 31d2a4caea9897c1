// The userspace device's UDP port range (DeviceConfig::ports, UCX_*_PORT_RANGE): a free port of
// the range is bound, each port is tried once, and a range whose every port is taken fails with
// busy instead of binding elsewhere or retrying for ever. Real sockets on loopback; the ports
// taken are real binds (no SO_REUSEPORT, as another process's socket would be).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <vector>

#include "sw/device.hpp"
#include "sw/udp_socket.hpp"

using namespace roce;
using namespace roce::sw;

namespace {

// A UDP socket on loopback:port (127.0.0.1 or ::1), closed at scope end (-1 when the port is
// taken). With reuseport it is what another rank's socket looks like once that rank opened a
// sibling for a second traffic class (udp_socket.cpp sets SO_REUSEPORT on its main socket then).
struct Blocker {
    int fd = -1;
    explicit Blocker(uint16_t port, bool v6 = false, bool reuseport = false) {
        fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        sockaddr_storage ss{};
        socklen_t len = 0;
        if (v6) {
            auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
            a->sin6_family = AF_INET6;
            a->sin6_port = htons(port);
            a->sin6_addr = in6addr_loopback;
            len = sizeof(*a);
        } else {
            auto* a = reinterpret_cast<sockaddr_in*>(&ss);
            a->sin_family = AF_INET;
            a->sin_port = htons(port);
            a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            len = sizeof(*a);
        }
        if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
            ::close(fd);
            fd = -1;
        }
    }
    ~Blocker() {
        if (fd >= 0) ::close(fd);
    }
    Blocker(const Blocker&) = delete;
    Blocker& operator=(const Blocker&) = delete;
};

// The first of n (<= 11) consecutive ports that are all free now, below the ephemeral range (so
// that other tests' ephemeral binds do not take them while this one runs). Each process starts
// at its own slot of 11 ports: ctest runs these tests as concurrent processes with consecutive
// pids, and starts one port apart made their runs overlap (a socket of one found its port taken
// by the other: seen once in CI).
uint16_t free_run(unsigned n) {
    constexpr unsigned slot_ports = 11, slots = 1000;
    for (unsigned k = 0, slot = unsigned(getpid()) % slots; k < slots; ++k, slot = (slot + 1) % slots) {
        const unsigned base = 21000 + slot * slot_ports;
        bool all = true;
        for (unsigned p = base; p < base + n && all; ++p) all = Blocker(uint16_t(p)).fd >= 0;
        if (all) return uint16_t(base);
    }
    return 0;
}

} // namespace

TEST(SwPortRange, TakesTheFreePortOfTheRange) {
    const uint16_t base = free_run(3);
    ASSERT_NE(base, 0);
    Blocker b0(base), b1(uint16_t(base + 1));
    ASSERT_GE(b0.fd, 0);
    ASSERT_GE(b1.fd, 0);
    for (int i = 0; i < 8; ++i) {   // whichever port the random start is, the free one is found
        UdpSocket s;
        ASSERT_EQ(s.open("127.0.0.1", PortRange(base, uint16_t(base + 2)), 0, 0), Status::ok);
        EXPECT_EQ(s.local().port, base + 2);
    }
}

TEST(SwPortRange, EveryPortTakenIsBusy) {
    const uint16_t base = free_run(2);
    ASSERT_NE(base, 0);
    Blocker b0(base), b1(uint16_t(base + 1));
    ASSERT_GE(b0.fd, 0);
    ASSERT_GE(b1.fd, 0);
    UdpSocket s;
    EXPECT_EQ(s.open("127.0.0.1", PortRange(base, uint16_t(base + 1)), 0, 0), Status::busy);
    EXPECT_EQ(s.fd(), -1);
    UdpSocket one;   // a single port taken: busy too, not another port
    EXPECT_EQ(one.open("127.0.0.1", PortRange(base), 0, 0), Status::busy);
}

TEST(SwPortRange, APortSharedByReuseportIsNotJoined) {
    // The main socket binds without SO_REUSEPORT: a port another socket holds with it is busy,
    // not a group to join (the kernel would then hand that socket's datagrams to us, or ours to it).
    const uint16_t base = free_run(2);
    ASSERT_NE(base, 0);
    Blocker b0(base, false, true);
    ASSERT_GE(b0.fd, 0);
    UdpSocket one;
    EXPECT_EQ(one.open("127.0.0.1", PortRange(base), 0, 0), Status::busy);
    UdpSocket s;   // the range's other port
    ASSERT_EQ(s.open("127.0.0.1", PortRange(base, uint16_t(base + 1)), 0, 0), Status::ok);
    EXPECT_EQ(s.local().port, base + 1);
}

TEST(SwPortRange, Ipv6RangeSkipsTakenPorts) {
    const uint16_t base = free_run(3);
    ASSERT_NE(base, 0);
    Blocker probe(base, true);
    if (probe.fd < 0) GTEST_SKIP() << "no IPv6 loopback (::1)";
    Blocker b1(uint16_t(base + 1), true);
    ASSERT_GE(b1.fd, 0);
    for (int i = 0; i < 8; ++i) {
        UdpSocket s;
        ASSERT_EQ(s.open("::1", PortRange(base, uint16_t(base + 2)), 0, 0), Status::ok);
        EXPECT_EQ(s.local().port, base + 2);
    }
}

TEST(SwPortRange, ProcessesSpreadOverTheRange) {
    // Sockets opened together on one range each get their own port, from random starts: with
    // 8 ports and 8 sockets every port is used once, and the first socket's port varies.
    const uint16_t base = free_run(8);
    ASSERT_NE(base, 0);
    const PortRange r(base, uint16_t(base + 7));
    std::set<uint16_t> firsts;
    for (int round = 0; round < 6; ++round) {
        std::vector<std::unique_ptr<UdpSocket>> socks;
        std::set<uint16_t> got;
        for (int i = 0; i < 8; ++i) {
            socks.push_back(std::make_unique<UdpSocket>());
            ASSERT_EQ(socks.back()->open("127.0.0.1", r, 0, 0), Status::ok);
            got.insert(socks.back()->local().port);
        }
        EXPECT_EQ(got.size(), 8u);
        EXPECT_EQ(*got.begin(), base);
        EXPECT_EQ(*got.rbegin(), base + 7);
        UdpSocket ninth;
        EXPECT_EQ(ninth.open("127.0.0.1", r, 0, 0), Status::busy);
        firsts.insert(socks.front()->local().port);
    }
    EXPECT_GT(firsts.size(), 1u);   // all six the same: 8^-5
}

TEST(SwPortRange, DeviceOpensOnItsRangeAndReportsBusy) {
    const uint16_t base = free_run(1);
    ASSERT_NE(base, 0);
    DeviceConfig cfg;
    cfg.ports = PortRange(base);
    cfg.progress_thread = false;
    std::unique_ptr<Device> a, b;
    ASSERT_EQ(Device::open(cfg, Pd::create(), a), Status::ok);
    EXPECT_EQ(a->address().port, base);
    EXPECT_EQ(Device::open(cfg, Pd::create(), b), Status::busy);
    EXPECT_EQ(b, nullptr);
}

TEST(SwPortRange, ParsesAsThePortRangeSetting) {
    auto is = [](const char* text, unsigned first, unsigned last) {
        const auto r = parse_port_range(text);
        return r && r->first == first && r->last == last;
    };
    EXPECT_TRUE(is("0", 0, 0));
    EXPECT_TRUE(is("4791", 4791, 4791));
    EXPECT_TRUE(is("47000-47099", 47000, 47099));
    EXPECT_TRUE(is("65535-65535", 65535, 65535));
    for (const char* bad : {"", "-", "5-3", "70000", "0-5", "-5", "5-", "a", " 5", "5 ", "+5", "5-6-7", "123456"})
        EXPECT_FALSE(parse_port_range(bad).has_value()) << "'" << bad << "'";
    EXPECT_EQ(PortRange(47000, 47099).str(), "47000-47099");
    EXPECT_EQ(PortRange(4791).str(), "4791");
}
