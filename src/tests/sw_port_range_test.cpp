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

// A plain UDP socket on 127.0.0.1:port, closed at scope end (-1 when the port is taken).
struct Blocker {
    int fd = -1;
    explicit Blocker(uint16_t port) {
        fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
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

// The first of n consecutive ports that are all free now, below the ephemeral range (so that
// other tests' ephemeral binds do not take them while this one runs).
uint16_t free_run(unsigned n) {
    for (unsigned base = 21000 + unsigned(getpid()) % 8000; base < 32000; base += n) {
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
