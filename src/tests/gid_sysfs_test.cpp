// The readers: sysfs GID tables, /sys/class/net, /proc/net/vlan/config, `ip -o addr` /
// `ip -o route` text, /proc/net/route and /proc/net/ipv6_route.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "gid/gid_table.hpp"
#include "gid/netdev.hpp"
#include "gid/sysroot.hpp"

using namespace roce::gid;
using roce::Status;

namespace {

SysRoot fixture(const std::string& name) { return SysRoot(std::string(ROCE_GID_FIXTURE_DIR) + "/" + name); }

NetModel model(const std::string& name) {
    NetModel net;
    std::string err;
    EXPECT_EQ(load_net_model(fixture(name), net, err), Status::ok) << err;
    return net;
}

} // namespace

TEST(GidAddr, ParseAndFormat) {
    const auto v4 = IpAddr::parse("10.0.0.1");
    ASSERT_TRUE(v4);
    EXPECT_EQ(v4->family(), Family::inet);
    EXPECT_EQ(v4->str(), "10.0.0.1");
    EXPECT_EQ(IpAddr::parse("fe80::1%eth0")->str(), "fe80::1");
    EXPECT_TRUE(IpAddr::parse("fe80::1")->is_link_local());
    EXPECT_TRUE(IpAddr::parse("169.254.3.4")->is_link_local());
    EXPECT_FALSE(IpAddr::parse("2001:db8::1")->is_link_local());
    EXPECT_FALSE(IpAddr::parse("10.0.0.256"));
    EXPECT_FALSE(IpPrefix::parse("10.0.0.0/33"));
    EXPECT_FALSE(IpPrefix::parse("10.0.0.0/"));
    const auto p = IpPrefix::parse("10.1.2.3/16");
    EXPECT_TRUE(p->contains(*IpAddr::parse("10.1.99.1")));
    EXPECT_FALSE(p->contains(*IpAddr::parse("10.2.0.1")));
    EXPECT_TRUE(p->contains(*IpAddr::parse("::ffff:10.1.0.1")));   // the IPv4-mapped spelling is IPv4
    EXPECT_EQ(p->network().str(), "10.1.0.0/16");
    EXPECT_TRUE(IpPrefix::parse("::/0")->contains(*IpAddr::parse("2001:db8::1")));
    EXPECT_FALSE(IpPrefix::parse("::/0")->contains(*IpAddr::parse("10.0.0.1")));   // families never mix
}

TEST(GidAddr, SysfsGidText) {
    const auto g = Gid::parse("0000:0000:0000:0000:0000:ffff:0a00:0001");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->raw.str(), "10.0.0.1");
    EXPECT_EQ(g->sysfs_str(), "0000:0000:0000:0000:0000:ffff:0a00:0001");
    EXPECT_TRUE(Gid::parse("0000:0000:0000:0000:0000:0000:0000:0000")->is_zero());
    EXPECT_FALSE(Gid::parse("not a gid"));
}

TEST(GidSysfs, ReadsMlx5Table) {
    PortInfo port;
    std::string err;
    ASSERT_EQ(read_port(fixture("mlx5_v1v2"), "mlx5_0", 1, port, err), Status::ok) << err;
    ASSERT_EQ(port.gids.size(), 16u);
    EXPECT_EQ(port.link_layer, "Ethernet");
    EXPECT_EQ(port.gids[0].version, RoceVersion::v1);
    EXPECT_EQ(port.gids[0].type_text, "IB/RoCE v1");
    EXPECT_EQ(port.gids[3].version, RoceVersion::v2);
    EXPECT_EQ(port.gids[3].ip().str(), "10.0.0.1");
    EXPECT_EQ(port.gids[3].ndev, "ens1f0");
    EXPECT_EQ(port.gids[5].ip().str(), "2001:db8:0:1::1");
    for (unsigned i = 6; i < 16; ++i) EXPECT_FALSE(port.gids[i].used()) << i;
    EXPECT_EQ(port.gids[15].index, 15u);
}

TEST(GidSysfs, UnknownDeviceOrPortNamesValidOnes) {
    PortInfo port;
    std::string err;
    EXPECT_EQ(read_port(fixture("two_ports_one_subnet"), "mlx5_9", 1, port, err), Status::no_device);
    EXPECT_NE(err.find("valid: mlx5_0, mlx5_1"), std::string::npos) << err;
    EXPECT_EQ(read_port(fixture("mlx5_v1v2"), "mlx5_0", 2, port, err), Status::no_device);
    EXPECT_EQ(err, "mlx5_0 has no port 2; valid: 1");
    EXPECT_EQ(list_rdma_devices(fixture("two_ports_one_subnet")), (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
}

TEST(GidNet, IpAddrLines) {
    auto a = parse_ip_addr_line("5: ens1f0.100@ens1f0    inet 10.100.0.1/24 brd 10.100.0.255 scope global ens1f0.100\\"
                                "       valid_lft forever preferred_lft forever");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->ifname, "ens1f0.100");
    EXPECT_EQ(a->prefix.str(), "10.100.0.1/24");
    EXPECT_TRUE(a->usable);
    a = parse_ip_addr_line("3: ens2f0    inet6 2001:db8:10::6/64 scope global dadfailed tentative \\       valid_lft forever");
    ASSERT_TRUE(a);
    EXPECT_FALSE(a->usable);
    EXPECT_EQ(a->flags, "dadfailed tentative");
    EXPECT_FALSE(parse_ip_addr_line("2: eth0    link/ether 0c:42:a1:00:00:01 brd ff:ff:ff:ff:ff:ff"));
}

TEST(GidNet, ProcIfInet6Lines) {
    // The live system's IPv6 flags (getifaddrs has none): 0x80 permanent, 0x40 tentative,
    // 0x08 dadfailed.
    auto a = parse_proc_if_inet6_line("fd770000000000000000000000000001 0b 40 00 c8     vT0");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->ifname, "vT0");
    EXPECT_EQ(a->prefix.str(), "fd77::1/64");
    EXPECT_FALSE(a->usable);
    EXPECT_EQ(a->flags, "dadfailed tentative");
    a = parse_proc_if_inet6_line("fe80000000000000a8c1abfffe2b3c4d 02 40 20 80     eth0");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->prefix.str(), "fe80::a8c1:abff:fe2b:3c4d/64");
    EXPECT_TRUE(a->usable);
    EXPECT_TRUE(a->flags.empty());
    EXPECT_FALSE(parse_proc_if_inet6_line("fd77 0b 40 00 c8 vT0"));
    EXPECT_FALSE(parse_proc_if_inet6_line("fd770000000000000000000000000001 0b zz 00 c8 vT0"));
    EXPECT_FALSE(parse_proc_if_inet6_line("fd770000000000000000000000000001 0b 81 00 c8 vT0"));
}

TEST(GidNet, IpRouteLines) {
    auto r = parse_ip_route_line("default via fe80::1 dev ens2f0 proto ra metric 1024 expires 1790sec pref medium");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->dst.str(), "::/0");
    EXPECT_EQ(r->via->str(), "fe80::1");
    EXPECT_EQ(r->metric, 1024u);
    r = parse_ip_route_line("10.0.0.0/24 dev ens1f0 proto kernel scope link src 10.0.0.1 metric 100");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->connected());
    EXPECT_EQ(r->src->str(), "10.0.0.1");
    EXPECT_EQ(r->str(), "10.0.0.0/24 dev ens1f0 src 10.0.0.1 metric 100");
    r = parse_ip_route_line("unreachable 10.9.0.0/16 proto static");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->reject);
    r = parse_ip_route_line("10.5.0.0/16 via inet6 fe80::1 dev eth0");   // IPv4 via IPv6 next hop
    ASSERT_TRUE(r);
    EXPECT_EQ(r->via->str(), "fe80::1");
    EXPECT_FALSE(parse_ip_route_line("local 10.0.0.1 dev ens1f0 table local proto kernel scope host src 10.0.0.1"));
    EXPECT_FALSE(parse_ip_route_line("broadcast 10.0.0.255 dev ens1f0 table local proto kernel scope link"));
}

TEST(GidNet, ProcRoutesOfRxeFixture) {
    const NetModel net = model("rxe");
    const auto has = [&](const std::string& text) {
        return std::any_of(net.routes.begin(), net.routes.end(), [&](const Route& r) { return r.str() == text; });
    };
    EXPECT_TRUE(has("default via 192.168.122.1 dev enp0s3 metric 100"));
    EXPECT_TRUE(has("192.168.122.0/24 dev enp0s3 metric 100"));
    EXPECT_TRUE(has("fe80::/64 dev enp0s3 metric 256"));
    const Route* r = net.route_via(*IpAddr::parse("1.1.1.1"), "enp0s3");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->via->str(), "192.168.122.1");
}

TEST(GidNet, UnreachableRouteWins) {
    NetModel net;
    net.routes.push_back(*parse_ip_route_line("default via 10.0.0.254 dev eth0"));
    net.routes.push_back(*parse_ip_route_line("unreachable 10.9.0.0/16"));
    EXPECT_EQ(net.route_via(*IpAddr::parse("10.9.1.1"), "eth0"), nullptr);
    EXPECT_NE(net.route_via(*IpAddr::parse("10.8.1.1"), "eth0"), nullptr);
}

TEST(GidNet, NetdevKinds) {
    const NetModel bond = model("bond");
    ASSERT_NE(bond.find("bond0"), nullptr);
    EXPECT_EQ(bond.find("bond0")->slaves, (std::vector<std::string>{"ens1f0", "ens1f1"}));
    EXPECT_EQ(bond.find("bond0")->kind, "bond");
    EXPECT_EQ(bond.find("ens1f1")->master, "bond0");

    const NetModel vx = model("vxlan_bond");
    EXPECT_TRUE(vx.find("vxlan100")->is_tunnel());
    EXPECT_FALSE(vx.find("bond0")->is_tunnel());
    EXPECT_EQ(vx.holders_of(*IpAddr::parse("192.168.50.10")), (std::vector<std::string>{"bond0", "vxlan100"}));

    const NetModel vl = model("vlan");
    EXPECT_EQ(vl.find("ens1f0.200")->vlan_id, 200);
    EXPECT_EQ(vl.find("ens1f0.200")->vlan_lower, "ens1f0");
    EXPECT_FALSE(vl.find("ens1f0.200")->up());

    // lo reports "unknown" and is up by its flags.
    EXPECT_TRUE(model("mlx5_v1v2").find("lo")->up());
}

TEST(GidNet, OwnAddressesAreLocalRoutes) {
    const NetModel net = model("mlx5_v1v2");
    const Route* r = net.route_via(*IpAddr::parse("10.0.0.1"), "ens1f0");
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(r->local);
    EXPECT_NE(net.route_via(*IpAddr::parse("127.0.0.5"), "lo"), nullptr);
}

// A file whose read fails (sysfs: a show() returning EINVAL; here a directory, EISDIR) is no
// value, not an empty one: an empty link_layer refused the port as "not Ethernet".
TEST(GidSysfs, UnreadableFileIsNoValue) {
    const auto dir = std::filesystem::temp_directory_path() / ("roce-sysroot-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir / "sub");
    std::ofstream(dir / "empty").close();
    std::ofstream(dir / "value") << "Ethernet\n";
    const SysRoot root(dir.string());
    EXPECT_EQ(root.read("sub"), std::nullopt);
    EXPECT_EQ(root.read("missing"), std::nullopt);
    EXPECT_EQ(root.read("empty"), std::optional<std::string>(""));
    EXPECT_EQ(root.read("value"), std::optional<std::string>("Ethernet"));
    // A system root other than / without its address list (`roce_doctor gid --sysfs DIR`): an
    // error naming the file, not every GID reported stale.
    std::filesystem::create_directories(dir / "sys/class/net/eth0");
    NetModel net;
    std::string err;
    EXPECT_EQ(load_net_model(root, net, err), Status::no_device);
    EXPECT_NE(err.find(dir.string() + "/addrs"), std::string::npos) << err;
    std::filesystem::remove_all(dir);
}
