// Verbs backend tests that run anywhere (no RDMA needed): opening a device that is absent fails
// with no_device and says why; the GID choice over a fake sysfs tree.
#include <arpa/inet.h>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "common/log.hpp"
#include "verbs/device.hpp"
#include "gid/config.hpp"
#include "verbs/gid_choice.hpp"
#include "verbs/ports.hpp"

using namespace roce;

namespace {
std::vector<std::string> g_logs;
void capture(LogLevel, const char* msg) { g_logs.emplace_back(msg); }
bool logged(const std::string& needle) {
    for (const auto& l : g_logs)
        if (l.find(needle) != std::string::npos)
            return true;
    return false;
}
struct LogCapture {
    LogCapture() { g_logs.clear(); set_log_sink(capture); }
    ~LogCapture() { set_log_sink(nullptr); }
};
} // namespace

TEST(VerbsHost, UnknownDeviceIsNoDevice) {
    LogCapture lc;
    std::shared_ptr<verbs::Pd> pd;
    EXPECT_EQ(verbs::Pd::open("roce-nosuch0", pd), Status::no_device);
    EXPECT_EQ(pd, nullptr);
    EXPECT_TRUE(logged("roce-nosuch0")) << "the error names the device";
    verbs::DeviceConfig cfg;
    cfg.dev_name = "roce-nosuch0";
    std::unique_ptr<verbs::Device> dev;
    EXPECT_EQ(verbs::Device::open(cfg, nullptr, dev), Status::no_device);
    EXPECT_EQ(dev, nullptr);
}

// On a host without RDMA (no rxe0), opening rxe0 fails cleanly; where rxe0 exists it opens.
TEST(VerbsHost, OpenRxe0MatchesTheHost) {
    LogCapture lc;
    const bool have = access("/sys/class/infiniband/rxe0", F_OK) == 0;
    verbs::DeviceConfig cfg;   // dev_name rxe0, port 1
    std::unique_ptr<verbs::Device> dev;
    const Status s = verbs::Device::open(cfg, nullptr, dev);
    if (!have) {
        EXPECT_EQ(s, Status::no_device);
        EXPECT_EQ(dev, nullptr);
        EXPECT_TRUE(logged("rxe0")) << "the error names the device";
        EXPECT_TRUE(logged("no RDMA devices") || logged("no RDMA device named"));
        for (const auto& l : g_logs)
            std::printf("  logged: %s\n", l.c_str());
    } else {
        ASSERT_EQ(s, Status::ok);
        EXPECT_NE(dev->address().port, 0);
        EXPECT_EQ(dev->address().family, AF_INET);
    }
}

TEST(VerbsHost, InvalidConfig) {
    verbs::DeviceConfig cfg;
    cfg.mtu = 1000;
    std::unique_ptr<verbs::Device> dev;
    EXPECT_EQ(verbs::Device::open(cfg, nullptr, dev), Status::invalid_param);
    cfg = {};
    cfg.sq_depth = 0;
    EXPECT_EQ(verbs::Device::open(cfg, nullptr, dev), Status::invalid_param);
}

// The GID choice is the policy of src/gid (tested in depth in gid_*_test.cpp over the same
// fixtures); these check that the verbs backend delegates to it and what it keeps of the answer.
namespace {
const std::string gid_fixtures = ROCE_GID_FIXTURE_DIR;
}

TEST(VerbsGidChoice, RxeDefaultIsTheRoceV2Ipv4Entry) {
    LogCapture lc;
    verbs::GidChoice c;
    ASSERT_EQ(verbs::choose_gid("rxe0", 1, -1, c, gid_fixtures + "/rxe"), Status::ok);
    EXPECT_EQ(c.index, 1);
    EXPECT_EQ(c.addr.family, AF_INET);
    EXPECT_EQ(c.addr.to_string().substr(0, 14), "192.168.122.10");
    EXPECT_EQ(c.ndev, "enp0s3");
    EXPECT_NE(c.reason.find("RoCE v2 IPv4"), std::string::npos) << c.reason;
    // A fixed index is the user's choice (link-local included: its netdev gives the scope) ...
    ASSERT_EQ(verbs::choose_gid("rxe0", 1, 0, c, gid_fixtures + "/rxe"), Status::ok);
    EXPECT_EQ(c.addr.family, AF_INET6);
    // ... but an unused one, or a missing port, is a one-line error naming the valid choices.
    EXPECT_EQ(verbs::choose_gid("rxe0", 1, 7, c, gid_fixtures + "/rxe"), Status::invalid_param);
    EXPECT_TRUE(logged("UCX_RC_ROCE_GID_INDEX=7: entry 7 of rxe0 port 1 is unused; valid: auto or one of the used entries 0, 1"));
    EXPECT_EQ(verbs::choose_gid("rxe0", 2, -1, c, gid_fixtures + "/rxe"), Status::no_device);
    EXPECT_TRUE(logged("rxe0 has no port 2; valid: 1"));
}

TEST(VerbsGidChoice, PerPeerChoiceAndValidation) {
    verbs::GidContext ctx;
    std::string err;
    ASSERT_EQ(verbs::load_gid_context("mlx5_bond_0", 1, gid::GidConfig{}, ctx, err, gid_fixtures + "/vxlan_bond"),
              Status::ok) << err;
    WireAddr peer{};
    peer.family = AF_INET;
    const uint8_t ip[4] = {192, 168, 50, 20};
    std::memcpy(peer.ip, ip, 4);
    verbs::GidChoice c;
    // vxlan100 and bond0 hold the same address: the bond's RoCE v2 entry, not the tunnel's.
    ASSERT_EQ(verbs::choose_gid(ctx, &peer, {}, c, err), Status::ok) << err;
    EXPECT_EQ(c.index, 5);
    EXPECT_EQ(c.ndev, "bond0");
    // The validator (an address handle in the device) refuses entry 5: no other v2 IPv4 entry
    // survives the checks, so the connection is refused with the reasons.
    int calls = 0;
    const gid::Validator refuse5 = [&](const gid::GidEntry& e, const gid::PeerGid*, std::string& why) {
        ++calls;
        why = "ibv_create_ah: Invalid argument";
        return e.index != 5;
    };
    EXPECT_NE(verbs::choose_gid(ctx, &peer, refuse5, c, err), Status::ok);
    EXPECT_GE(calls, 1);
    EXPECT_NE(err.find("validation failed: 5"), std::string::npos) << err;
    // A peer no entry can reach (no route, different family) is unreachable, with the reasons.
    const uint8_t far[4] = {172, 31, 0, 1};
    std::memcpy(peer.ip, far, 4);
    EXPECT_EQ(verbs::choose_gid(ctx, &peer, {}, c, err), Status::unreachable);
    EXPECT_NE(err.find("no GID of mlx5_bond_0 port 1 reaches peer 172.31.0.1"), std::string::npos) << err;
}

TEST(VerbsGidChoice, SettingsCheckedAgainstThePort) {
    verbs::GidContext ctx;
    std::string err;
    gid::GidConfig cfg;
    ASSERT_EQ(gid::set_gid_config(cfg, "GID_NETDEV", "eth9", err), Status::ok);
    EXPECT_EQ(verbs::load_gid_context("rxe0", 1, cfg, ctx, err, gid_fixtures + "/rxe"), Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_GID_NETDEV=eth9: no entry of rxe0 port 1 uses this netdev; valid: auto, enp0s3");
}

TEST(VerbsPorts, ParsesPortNames) {
    verbs::RocePort p;
    ASSERT_TRUE(verbs::parse_port_name("rxe0:1", p));
    EXPECT_EQ(p.dev_name, "rxe0");
    EXPECT_EQ(p.port, 1);
    EXPECT_EQ(p.name(), "rxe0:1");
    ASSERT_TRUE(verbs::parse_port_name("mlx5_bond_0:2", p));
    EXPECT_EQ(p.dev_name, "mlx5_bond_0");
    EXPECT_EQ(p.port, 2);
    for (const char* bad : {"rxe0", "rxe0:", ":1", "rxe0:0", "rxe0:256", "rxe0:1x", "eth0"})
        EXPECT_FALSE(verbs::parse_port_name(bad, p)) << bad;
}

TEST(VerbsPorts, ListMatchesSysfs) {
    // Every listed port belongs to a device the kernel shows; without RDMA the list is empty.
    const std::vector<verbs::RocePort> ports = verbs::list_roce_ports();
    if (!std::filesystem::exists("/sys/class/infiniband")) {
        EXPECT_TRUE(ports.empty());
        return;
    }
    for (const verbs::RocePort& p : ports) {
        EXPECT_TRUE(std::filesystem::exists("/sys/class/infiniband/" + p.dev_name + "/ports/" +
                                            std::to_string(p.port)))
                << p.name();
    }
}
