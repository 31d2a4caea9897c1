// Verbs backend tests that run anywhere (no RDMA needed): opening a device that is absent fails
// with no_device and says why; the GID choice over a fake sysfs tree.
#include <arpa/inet.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "common/log.hpp"
#include "verbs/device.hpp"
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

namespace {
struct FakeSysfs {
    std::filesystem::path root;
    FakeSysfs() {
        char tmpl[] = "/tmp/verbs-sysfs-XXXXXX";
        root = mkdtemp(tmpl);
    }
    ~FakeSysfs() { std::filesystem::remove_all(root); }
    void gid(int i, const std::string& g, const std::string& type) {
        auto p = root / "dev0/ports/1";
        std::filesystem::create_directories(p / "gids");
        std::filesystem::create_directories(p / "gid_attrs/types");
        std::ofstream(p / "gids" / std::to_string(i)) << g << "\n";
        std::ofstream(p / "gid_attrs/types" / std::to_string(i)) << type << "\n";
    }
};
} // namespace

TEST(VerbsGidChoice, FirstRoceV2Ipv4) {
    LogCapture lc;
    FakeSysfs fs;
    fs.gid(0, "fe80:0000:0000:0000:5054:00ff:fe12:3456", "RoCE v2");
    fs.gid(1, "0000:0000:0000:0000:0000:ffff:0a00:020f", "IB/RoCE v1");
    fs.gid(2, "fec0:0000:0000:0000:5054:00ff:fe12:3456", "RoCE v2");
    fs.gid(3, "0000:0000:0000:0000:0000:ffff:0a00:020f", "RoCE v2");
    verbs::GidChoice c;
    ASSERT_EQ(verbs::choose_gid("dev0", 1, -1, c, fs.root.string()), Status::ok);
    EXPECT_EQ(c.index, 3);
    EXPECT_EQ(c.addr.family, AF_INET);
    EXPECT_EQ(c.addr.ip[0], 10);
    EXPECT_EQ(c.addr.ip[3], 15);
    // Override: a global IPv6 RoCE v2 GID is usable, a link-local or v1 one is not.
    ASSERT_EQ(verbs::choose_gid("dev0", 1, 2, c, fs.root.string()), Status::ok);
    EXPECT_EQ(c.addr.family, AF_INET6);
    EXPECT_EQ(verbs::choose_gid("dev0", 1, 0, c, fs.root.string()), Status::no_device);
    EXPECT_EQ(verbs::choose_gid("dev0", 1, 1, c, fs.root.string()), Status::no_device);
    EXPECT_EQ(verbs::choose_gid("dev0", 2, -1, c, fs.root.string()), Status::no_device);
    EXPECT_TRUE(logged("no such port"));
}

TEST(VerbsGidChoice, NoIpv4Gid) {
    LogCapture lc;
    FakeSysfs fs;
    fs.gid(0, "fe80:0000:0000:0000:5054:00ff:fe12:3456", "RoCE v2");
    verbs::GidChoice c;
    EXPECT_EQ(verbs::choose_gid("dev0", 1, -1, c, fs.root.string()), Status::no_device);
    EXPECT_TRUE(logged("no RoCE v2 GID with an IPv4 address"));
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
