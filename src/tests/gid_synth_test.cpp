// The userspace device's synthesised GID table, the live system, and the roce_doctor command.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "doctor_run.hpp"
#include "gid/select.hpp"
#include "gid/synth.hpp"

using namespace roce::gid;
using roce::Status;

namespace {

const std::string fixtures = ROCE_GID_FIXTURE_DIR;

} // namespace

TEST(GidSynth, VlanHostTableMirrorsKernelOrder) {
    const SysRoot root(fixtures + "/vlan");
    NetModel net;
    std::string err;
    ASSERT_EQ(load_net_model(root, net, err), Status::ok);
    const PortInfo port = synthesize_port(net, "ens1f0");
    EXPECT_TRUE(port.synthesised);
    ASSERT_EQ(port.gids.size(), 5u);
    // ens1f0: link-local first, then its address; then each VLAN device the same way.
    EXPECT_TRUE(port.gids[0].ip().is_link_local());
    EXPECT_EQ(port.gids[1].ip().str(), "10.0.0.1");
    EXPECT_EQ(port.gids[2].ndev, "ens1f0.100");
    EXPECT_EQ(port.gids[3].ip().str(), "10.100.0.1");
    EXPECT_EQ(port.gids[4].ndev, "ens1f0.200");
    for (const auto& e : port.gids) EXPECT_EQ(e.version, RoceVersion::v2);   // UDP only

    const PeerGid peer{Gid{*IpAddr::parse("10.100.0.7")}, RoceVersion::v2};
    const Selection s = select_gid(port, net, GidConfig{}, std::span(&peer, 1));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_EQ(s.at(4).verdict, Verdict::netdev_down);
}

TEST(GidSynth, LeavesOutDadFailedAddresses) {
    NetModel net;
    std::string err;
    ASSERT_EQ(load_net_model(SysRoot(fixtures + "/ipv6_only"), net, err), Status::ok);
    const PortInfo port = synthesize_port(net, "ens2f0");
    ASSERT_EQ(port.gids.size(), 2u);
    EXPECT_EQ(port.gids[1].ip().str(), "2001:db8:10::5");
}

// The address the userspace device binds: the same policy over the synthesised table.
TEST(GidSynth, UserspaceDeviceAddress) {
    NetModel net;
    std::string err;
    ASSERT_EQ(load_net_model(SysRoot(fixtures + "/rxe_vlan"), net, err), Status::ok) << err;
    auto cfg = [](std::vector<std::pair<std::string, std::string>> s) {
        GidConfig c;
        std::string e;
        EXPECT_EQ(parse_gid_config(s, c, e), Status::ok) << e;
        return c;
    };
    IpAddr ip;
    Selection sel;
    ASSERT_EQ(choose_netdev_address(net, "eth0", GidConfig{}, ip, err, &sel), Status::ok) << err;
    EXPECT_EQ(ip.str(), "10.0.2.15");
    EXPECT_HAS(sel.reason, "RoCE v2 IPv4 10.0.2.15 on eth0");
    ASSERT_EQ(choose_netdev_address(net, "eth0", cfg({{"GID_NETDEV", "eth0.100"}}), ip, err), Status::ok) << err;
    EXPECT_EQ(ip.str(), "192.168.100.15");
    ASSERT_EQ(choose_netdev_address(net, "eth0", cfg({{"ADDR_FAMILY", "inet6"}}), ip, err), Status::ok) << err;
    EXPECT_EQ(ip.str(), "fec0::5054:ff:fe12:3456");
    EXPECT_EQ(choose_netdev_address(net, "eth0", cfg({{"ROCE_VERSION", "1"}}), ip, err), Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_ROCE_VERSION=1: the userspace device sends RoCE v2 (UDP) only; valid: auto, 2");
    EXPECT_EQ(choose_netdev_address(net, "eth0", cfg({{"GID_INDEX", "9"}}), ip, err), Status::invalid_param);
    EXPECT_HAS(err, "UCX_RC_ROCE_GID_INDEX=9: out of range for eth0 port 1 (5 entries); valid: auto or one of the used entries 0, 1, 2, 3, 4");
    EXPECT_EQ(choose_netdev_address(net, "eth0", cfg({{"SUBNETS", "172.16.0.0/12"}}), ip, err), Status::no_device);
    EXPECT_HAS(err, "no usable GID on eth0 port 1: excluded by configuration: 0 1 2 3 4");

    // Link-local only: the policy would pick it, but a device address has no scope.
    ASSERT_EQ(load_net_model(SysRoot(fixtures + "/link_local_only"), net, err), Status::ok) << err;
    EXPECT_EQ(choose_netdev_address(net, "ens2f0", GidConfig{}, ip, err), Status::no_device);
    EXPECT_HAS(err, "only link-local addresses on ens2f0 qualify");

    // IPv4 link-local beside a global IPv6 address: the policy's IPv4 choice is bindable (it was
    // refused as link-local, with an error that named no usable address).
    ASSERT_EQ(load_net_model(SysRoot(fixtures + "/ipv4_link_local"), net, err), Status::ok) << err;
    ASSERT_EQ(choose_netdev_address(net, "ens2f0", GidConfig{}, ip, err), Status::ok) << err;
    EXPECT_EQ(ip.str(), "169.254.3.3");
    ASSERT_EQ(choose_netdev_address(net, "ens2f0", cfg({{"ADDR_FAMILY", "inet6"}}), ip, err), Status::ok) << err;
    EXPECT_EQ(ip.str(), "2001:db8::5");
}

// The loopback demo: the userspace device on lo, peer on the same host.
TEST(GidSynth, LiveLoopback) {
    NetModel net;
    std::string err;
    ASSERT_EQ(load_net_model(SysRoot("/"), net, err), Status::ok) << err;
    if (net.find_address("lo", *IpAddr::parse("127.0.0.1")) == nullptr) GTEST_SKIP() << "no 127.0.0.1 on lo here";
    const PortInfo port = synthesize_port(net, "lo");
    const PeerGid peer{Gid{*IpAddr::parse("127.0.0.1")}, RoceVersion::v2};
    const Selection s = select_gid(port, net, GidConfig{}, std::span(&peer, 1));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(port.gids[*s.index].ip().str(), "127.0.0.1");
    EXPECT_HAS(s.reason, "local 127.0.0.0/8 dev lo");
}

TEST(GidDoctor, ExplainsChoicePerPeer) {
    const DoctorRun r = doctor("gid --sysfs " + fixtures + "/mlx5_v1v2 --peer 10.0.0.2 --peer 2001:db8:0:1::9");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "mlx5_0 port 1: Ethernet, 16 GID entries, device traffic class 106");
    EXPECT_HAS(r.out, "3    0000:0000:0000:0000:0000:ffff:0a00:0001  RoCE v2     up      10.0.0.1/24");
    EXPECT_HAS(r.out, "peer 10.0.0.2: index 3 (RoCE v2 IPv4 10.0.0.1 on ens1f0 -> 10.0.0.2: connected route");
    EXPECT_HAS(r.out, "peer 2001:db8:0:1::9: index 5");
    EXPECT_HAS(r.out, "traffic class: tos 106 (DSCP 26, ECT(0)) priority 0 [tos: device default");
    EXPECT_HAS(r.out, "CNP: tos 192 (DSCP 48)");
}

TEST(GidDoctor, ExplainsChoicePerPeerAsJson) {
    DoctorRun r = doctor("gid --json --sysfs " + fixtures + "/mlx5_v1v2 --peer 10.0.0.2");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "{\"ports\": [\n  {\"dev\": \"mlx5_0\", \"port\": 1, \"synthesised\": false");
    EXPECT_HAS(r.out, "{\"label\": \"peer 10.0.0.2\", \"ok\": true, \"index\": 3, \"gid\": \"10.0.0.1\"");
    EXPECT_HAS(r.out, "\"traffic_class\": {\"tos\": 106, \"dscp\": 26, \"ecn\": 2, \"priority\": 0}");
    EXPECT_HAS(r.out, "], \"ok\": true}\n");
    EXPECT_LACKS(r.out, "GID entries");   // no text mixed in
    r = doctor("gid --json --sysfs " + fixtures + "/mlx5_v1v2 --set GID_INDEX=40");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_HAS(r.out, "\"error\": \"UCX_RC_ROCE_GID_INDEX=40");
    EXPECT_HAS(r.out, "\"ok\": false}");
}

TEST(GidDoctor, PerSubnetWithoutPeer) {
    const DoctorRun r = doctor("gid --sysfs " + fixtures + "/vlan");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "subnet 10.0.0.0/24: index 3");
    EXPECT_HAS(r.out, "subnet 10.100.0.0/24: index 7");
    EXPECT_HAS(r.out, "netdev ens1f0.200 is down");
}

TEST(GidDoctor, BadSettingsAreOneLineErrors) {
    DoctorRun r = doctor("gid --sysfs " + fixtures + "/mlx5_v1v2 --set DSCP=99");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "error: UCX_RC_ROCE_DSCP=99: out of range; valid: auto or 0..63\n");
    r = doctor("gid --sysfs " + fixtures + "/mlx5_v1v2 --set GID_INDEX=40");
    EXPECT_EQ(r.code, 1);
    EXPECT_HAS(r.out, "error: UCX_RC_ROCE_GID_INDEX=40: out of range for mlx5_0 port 1 (16 entries)");
    r = doctor("gid --sysfs " + fixtures + "/mlx5_v1v2 --dev mlx5_7");
    EXPECT_EQ(r.code, 1);
    EXPECT_HAS(r.out, "RDMA device 'mlx5_7' not found");
    for (const char* bad : {"mlx5_0:abc", "mlx5_0:", "mlx5_0:0", "mlx5_0:1x"}) {   // (read as "every port")
        r = doctor("gid --sysfs " + fixtures + "/mlx5_v1v2 --dev " + bad);
        EXPECT_EQ(r.code, 2) << bad;
        EXPECT_HAS(r.out, "the port is a number 1..255");
    }
    r = doctor("gid --sysfs " + fixtures + "/mlx5_v1v2 --dev mlx5_0:1");
    EXPECT_EQ(r.code, 0) << r.out;
    r = doctor("frobnicate");
    EXPECT_EQ(r.code, 2);
    EXPECT_HAS(r.out, "unknown subcommand 'frobnicate'; valid: gid");
}

TEST(GidDoctor, SynthesisedTableForNetdev) {
    const DoctorRun r = doctor("gid --sysfs " + fixtures + "/vlan --dev none --netdev ens1f0.100 2>/dev/null; " +
                         std::string(ROCE_DOCTOR_PATH) + " gid --sysfs " + fixtures + "/bond --netdev bond0 --peer 10.1.0.7");
    EXPECT_HAS(r.out, "bond0 port 1: Ethernet, 2 GID entries (synthesised from netdev addresses)");
    EXPECT_HAS(r.out, "peer 10.1.0.7: index 1");
}

// What the switches see: the traffic class per RoCEv2 flow of a capture (the guest's gid group
// checks both directions of a connection with it).
TEST(GidDoctor, WireShowsTheClassPerFlow) {
    const std::string pcap = std::string(ROCE_FIXTURE_DIR) + "/rc_send_5000_loss.pcap";
    if (::access(pcap.c_str(), R_OK) != 0) GTEST_SKIP() << "no rxe capture fixture " << pcap;
    DoctorRun r = doctor("wire " + pcap);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "flow 10.0.0.1 -> 10.0.0.2 rc packets=50 tos=0 dscp=0 ecn=not-ect\n");
    EXPECT_HAS(r.out, "flow 10.0.0.2 -> 10.0.0.1 rc packets=39 tos=0 dscp=0 ecn=not-ect\n");
    r = doctor("wire --json " + pcap);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "{\"src\": \"10.0.0.1\", \"dst\": \"10.0.0.2\", \"kind\": \"rc\", \"packets\": 50, \"tos\": 0, "
                      "\"dscp\": 0, \"ecn\": \"not-ect\"}");
    r = doctor("wire /nonexistent.pcap");
    EXPECT_EQ(r.code, 1);
    EXPECT_HAS(r.out, "error: /nonexistent.pcap: ");
    r = doctor("wire");
    EXPECT_EQ(r.code, 2);
    EXPECT_HAS(r.out, "usage: roce_doctor wire FILE.pcap");
}
