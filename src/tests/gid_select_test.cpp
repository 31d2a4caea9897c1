// GID selection over fixture trees that reproduce real layouts (tests/fixtures/gid, see
// make_fixtures.py): each test asserts the chosen index and the reason, and the verdict of the
// entries that must not be used.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gid/select.hpp"

using namespace roce::gid;
using roce::Status;

namespace {

struct Host {
    SysRoot root;
    NetModel net;
    explicit Host(const std::string& name) : root(std::string(ROCE_GID_FIXTURE_DIR) + "/" + name) {
        std::string err;
        EXPECT_EQ(load_net_model(root, net, err), Status::ok) << err;
    }
    PortInfo port(const std::string& dev, unsigned p = 1) const {
        PortInfo info;
        std::string err;
        EXPECT_EQ(read_port(root, dev, p, info, err), Status::ok) << err;
        return info;
    }
};

GidConfig config(std::vector<std::pair<std::string, std::string>> settings = {}) {
    GidConfig cfg;
    std::string err;
    EXPECT_EQ(parse_gid_config(settings, cfg, err), Status::ok) << err;
    return cfg;
}

std::vector<PeerGid> peer(const char* addr) { return {PeerGid{Gid{*IpAddr::parse(addr)}, std::nullopt}}; }

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

} // namespace

// A VRF member has a sysfs master as a bond slave does, but keeps its addresses and GIDs: it was
// rejected as a slave (no usable GID on any port in a VRF).
TEST(GidSelectVrf, MemberIsNoSlave) {
    Host h("vrf");
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config());
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "RoCE v2 IPv4 10.0.0.1 on ens1f0");
}

// ---------------------------------------------------------------- mlx5, RoCE v1 + v2, IPv4 + IPv6

TEST(GidSelectMlx5, InterfaceDefaultIsV2Ipv4) {
    Host h("mlx5_v1v2");
    const PortInfo port = h.port("mlx5_0");
    ASSERT_EQ(port.gids.size(), 16u);
    const Selection s = select_gid(port, h.net, config());
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "RoCE v2 IPv4 10.0.0.1 on ens1f0");
    EXPECT_EQ(s.at(2).verdict, Verdict::outranked);
    EXPECT_HAS(s.at(2).why, "RoCE v1: entry 3 is RoCE v2");
    EXPECT_EQ(s.at(5).verdict, Verdict::outranked);
    EXPECT_HAS(s.at(5).why, "IPv6: entry 3 is IPv4");
    EXPECT_EQ(s.at(1).verdict, Verdict::outranked);
    EXPECT_HAS(s.at(1).why, "link-local");
    EXPECT_EQ(s.at(6).verdict, Verdict::unused);
    EXPECT_EQ(s.at(15).verdict, Verdict::unused);
}

TEST(GidSelectMlx5, PeerInSubnetUsesConnectedRoute) {
    Host h("mlx5_v1v2");
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config(), peer("10.0.0.2"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "connected route 10.0.0.0/24 dev ens1f0");
    // IPv6 entries cannot talk to an IPv4 peer.
    EXPECT_EQ(s.at(5).verdict, Verdict::peer_mismatch);
}

TEST(GidSelectMlx5, RoutedPeerRejectsRoceV1) {
    Host h("mlx5_v1v2");
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config(), peer("10.7.0.5"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "route default via 10.0.0.254 dev ens1f0");
    EXPECT_EQ(s.at(2).verdict, Verdict::unreachable);
    EXPECT_HAS(s.at(2).why, "RoCE v1 is L2 only");

    // Forcing v1 leaves nothing that can cross the router.
    const Selection v1 = select_gid(h.port("mlx5_0"), h.net, config({{"ROCE_VERSION", "1"}}), peer("10.7.0.5"));
    EXPECT_EQ(v1.status, Status::unreachable);
    EXPECT_HAS(v1.error, "no GID of mlx5_0 port 1 reaches peer 10.7.0.5");
}

TEST(GidSelectMlx5, Ipv6PeerAndFamilyConfig) {
    Host h("mlx5_v1v2");
    Selection s = select_gid(h.port("mlx5_0"), h.net, config(), peer("2001:db8:0:1::9"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 5u);
    EXPECT_HAS(s.reason, "connected route 2001:db8:0:1::/64 dev ens1f0");

    s = select_gid(h.port("mlx5_0"), h.net, config({{"ADDR_FAMILY", "inet6"}}));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 5u);
    EXPECT_EQ(s.at(3).verdict, Verdict::excluded);
    EXPECT_HAS(s.at(3).why, "UCX_RC_ROCE_ADDR_FAMILY=inet6");

    s = select_gid(h.port("mlx5_0"), h.net, config({{"ROCE_VERSION", "1"}}), peer("10.0.0.2"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 2u);
}

TEST(GidSelectMlx5, ReachabilityModes) {
    Host h("mlx5_v1v2");
    // local_subnet: a routed peer is out; all: anything of the right family is in.
    Selection s = select_gid(h.port("mlx5_0"), h.net, config({{"REACHABILITY", "local_subnet"}}), peer("10.7.0.5"));
    EXPECT_EQ(s.status, Status::unreachable);
    EXPECT_HAS(s.at(3).why, "outside 10.0.0.0/24 of ens1f0");
    s = select_gid(h.port("mlx5_0"), h.net, config({{"REACHABILITY", "local_subnet"}}), peer("10.0.0.77"));
    ASSERT_EQ(s.status, Status::ok);
    EXPECT_HAS(s.reason, "same subnet 10.0.0.0/24 on ens1f0");
    s = select_gid(h.port("mlx5_0"), h.net, config({{"REACHABILITY", "all"}}), peer("172.16.0.1"));
    ASSERT_EQ(s.status, Status::ok);
    EXPECT_EQ(*s.index, 3u);
}

TEST(GidSelectMlx5, SubnetAllowAndDenyLists) {
    Host h("mlx5_v1v2");
    Selection s = select_gid(h.port("mlx5_0"), h.net, config({{"SUBNETS", "2001:db8::/32"}}));
    ASSERT_EQ(s.status, Status::ok);
    EXPECT_EQ(*s.index, 5u);
    EXPECT_HAS(s.at(3).why, "outside the allowed subnets");
    s = select_gid(h.port("mlx5_0"), h.net, config({{"SUBNETS", "^10.0.0.0/8"}}));
    ASSERT_EQ(s.status, Status::ok);
    EXPECT_EQ(*s.index, 5u);
    EXPECT_HAS(s.at(3).why, "in a denied subnet");
}

TEST(GidSelectMlx5, ValidatorFallsBackToNextCandidate) {
    Host h("mlx5_v1v2");
    std::vector<unsigned> tried;
    // Like ibv_create_ah failing with EINVAL on the IPv4 entry.
    const Validator v = [&](const GidEntry& e, const PeerGid* p, std::string& why) {
        tried.push_back(e.index);
        EXPECT_EQ(p, nullptr);
        if (e.index == 3) {
            why = "ibv_create_ah: Invalid argument";
            return false;
        }
        return true;
    };
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config(), {}, v);
    ASSERT_EQ(s.status, Status::ok);
    EXPECT_EQ(*s.index, 5u);
    EXPECT_EQ(tried, (std::vector<unsigned>{3, 5}));
    EXPECT_EQ(s.at(3).verdict, Verdict::validation_failed);
    EXPECT_HAS(s.at(3).why, "ibv_create_ah: Invalid argument");
}

TEST(GidSelectMlx5, FixedIndex) {
    Host h("mlx5_v1v2");
    Selection s = select_gid(h.port("mlx5_0"), h.net, config({{"GID_INDEX", "4"}}), peer("2001:db8:0:1::9"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 4u);
    EXPECT_HAS(s.at(5).why, "UCX_RC_ROCE_GID_INDEX=4 selects another entry");
    // A fixed IPv6 entry cannot reach an IPv4 peer: say so instead of falling back.
    s = select_gid(h.port("mlx5_0"), h.net, config({{"GID_INDEX", "5"}}), peer("10.0.0.2"));
    EXPECT_EQ(s.status, Status::unreachable);
    EXPECT_HAS(s.error, "UCX_RC_ROCE_GID_INDEX=5");
}

// ---------------------------------------------------------------- rxe (routes from /proc)

TEST(GidSelectRxe, V2OnlyTableAndProcRoutes) {
    Host h("rxe");
    const PortInfo port = h.port("rxe0");
    Selection s = select_gid(port, h.net, config(), peer("192.168.122.20"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 1u);
    EXPECT_HAS(s.reason, "connected route 192.168.122.0/24 dev enp0s3");
    s = select_gid(port, h.net, config(), peer("8.8.8.8"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_HAS(s.reason, "route default via 192.168.122.1 dev enp0s3");
    // rxe has no v1 entries at all.
    s = select_gid(port, h.net, config({{"ROCE_VERSION", "1"}}));
    EXPECT_EQ(s.status, Status::no_device);
    EXPECT_HAS(s.error, "no usable GID on rxe0 port 1");
}

// The rxe guest's own table once its gid group adds VLAN 100 (measured there, see make_fixtures.py):
// the default stays the untagged RoCE v2 IPv4 entry; the VLAN entry is used for peers in the VLAN
// subnet, or everywhere with GID_NETDEV / SUBNETS - what the guest then connects over.
TEST(GidSelectRxeVlan, DefaultUntaggedVlanForItsSubnetOrByConfiguration) {
    Host h("rxe_vlan");
    const PortInfo port = h.port("rxe0");
    Selection s = select_gid(port, h.net, config());
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 1u);
    EXPECT_HAS(s.reason, "RoCE v2 IPv4 10.0.2.15 on eth0: best entry of the interface");
    EXPECT_HAS(s.at(3).why, "equivalent to entry 1, which has the lower index");
    EXPECT_HAS(s.at(2).why, "IPv6: entry 1 is IPv4");

    s = select_gid(port, h.net, config(), peer("192.168.100.20"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "connected route 192.168.100.0/24 dev eth0.100");
    EXPECT_HAS(s.at(1).why, "less specific (route default via 10.0.2.2 dev eth0)");

    for (const auto& setting : std::vector<std::pair<std::string, std::string>>{{"GID_NETDEV", "eth0.100"},
                                                                                {"SUBNETS", "192.168.100.0/24"}}) {
        s = select_gid(port, h.net, config({setting}));
        ASSERT_EQ(s.status, Status::ok) << s.error;
        EXPECT_EQ(*s.index, 3u) << setting.first;
        EXPECT_EQ(s.at(1).verdict, Verdict::excluded) << setting.first;
        EXPECT_HAS(s.at(1).why, "UCX_RC_ROCE_" + setting.first);
    }
    // The loopback peer of the guest (its own VLAN address): reached on eth0.100 itself.
    s = select_gid(port, h.net, config({{"GID_NETDEV", "eth0.100"}}), peer("192.168.100.15"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "peer on this host");
    // IPv6 only: the slirp fec0:: entry, never the link-local ones.
    s = select_gid(port, h.net, config({{"ADDR_FAMILY", "inet6"}}));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 2u);
    EXPECT_HAS(s.at(4).why, "link-local");
}

// ---------------------------------------------------------------- bond

TEST(GidSelectBond, SlaveEntriesAreNeverUsed) {
    Host h("bond");
    const Selection s = select_gid(h.port("mlx5_bond_0"), h.net, config(), peer("10.1.2.3"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 5u);
    EXPECT_HAS(s.reason, "10.1.0.1 on bond0");
    EXPECT_HAS(s.reason, "dev bond0");
    EXPECT_EQ(s.at(3).verdict, Verdict::enslaved);
    EXPECT_HAS(s.at(3).why, "ens1f0 is a slave of bond0");
}

// ---------------------------------------------------------------- VLAN

TEST(GidSelectVlan, PeerInVlanUsesVlanEntry) {
    Host h("vlan");
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config(), peer("10.100.0.7"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 7u);
    EXPECT_HAS(s.reason, "10.100.0.1 on ens1f0.100");
    EXPECT_HAS(s.reason, "connected route 10.100.0.0/24 dev ens1f0.100");
    // The untagged entry reaches 10.100.0.7 only through the default route: less specific.
    EXPECT_EQ(s.at(3).verdict, Verdict::outranked);
    EXPECT_HAS(s.at(3).why, "less specific");
    EXPECT_EQ(s.at(9).verdict, Verdict::netdev_down);
    ASSERT_NE(h.net.find("ens1f0.100"), nullptr);
    EXPECT_EQ(h.net.find("ens1f0.100")->vlan_id, 100);
}

TEST(GidSelectVlan, DownVlanFallsBackToRoute) {
    Host h("vlan");
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config(), peer("10.200.0.7"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "via 10.0.0.254 dev ens1f0");
    EXPECT_EQ(s.at(9).verdict, Verdict::netdev_down);
    EXPECT_HAS(s.at(9).why, "netdev ens1f0.200 is down");
}

TEST(GidSelectVlan, NetdevSetting) {
    Host h("vlan");
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config({{"GID_NETDEV", "ens1f0.100"}}));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 7u);
    EXPECT_HAS(s.at(3).why, "UCX_RC_ROCE_GID_NETDEV=ens1f0.100");
}

// ---------------------------------------------------------------- vxlan and bond sharing an IP

TEST(GidSelectVxlanBond, TunnelEntryWithSameAddressIsRejected) {
    Host h("vxlan_bond");
    const Selection s = select_gid(h.port("mlx5_bond_0"), h.net, config(), peer("192.168.50.20"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 5u);
    // The main table sends 192.168.50.0/24 to vxlan100; the GID's own netdev has its route.
    EXPECT_HAS(s.reason, "dev bond0");
    EXPECT_EQ(s.at(3).verdict, Verdict::tunnel);
    EXPECT_HAS(s.at(3).why, "vxlan100 is a vxlan tunnel");
    EXPECT_EQ(h.net.best_route(*IpAddr::parse("192.168.50.20"))->dev, "vxlan100");
}

// ---------------------------------------------------------------- IPv6 only, link-local first

TEST(GidSelectIpv6Only, GlobalEntryBeatsLinkLocalFirst) {
    Host h("ipv6_only");
    const Selection s = select_gid(h.port("mlx5_2"), h.net, config());
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "RoCE v2 IPv6 2001:db8:10::5 on ens2f0");
    EXPECT_EQ(s.at(1).verdict, Verdict::outranked);
    EXPECT_HAS(s.at(1).why, "link-local: used only when no global entry qualifies");
    // The address that failed duplicate address detection is not usable.
    EXPECT_EQ(s.at(5).verdict, Verdict::stale);
    EXPECT_HAS(s.at(5).why, "dadfailed");
}

TEST(GidSelectIpv6Only, RoutedPeerAndIpv4Impossible) {
    Host h("ipv6_only");
    Selection s = select_gid(h.port("mlx5_2"), h.net, config(), peer("2001:db8:99::1"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 3u);
    EXPECT_HAS(s.reason, "route default via fe80::1 dev ens2f0");
    s = select_gid(h.port("mlx5_2"), h.net, config(), peer("10.0.0.1"));
    EXPECT_EQ(s.status, Status::unreachable);
    EXPECT_EQ(s.at(3).verdict, Verdict::peer_mismatch);
    s = select_gid(h.port("mlx5_2"), h.net, config({{"ADDR_FAMILY", "inet"}}));
    EXPECT_EQ(s.status, Status::no_device);
}

TEST(GidSelectLinkLocalOnly, LinkLocalWhenItIsAllThereIs) {
    Host h("link_local_only");
    Selection s = select_gid(h.port("mlx5_2"), h.net, config());
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 1u);
    EXPECT_HAS(s.reason, "link-local: no global entry qualifies");
    s = select_gid(h.port("mlx5_2"), h.net, config(), peer("fe80::b696:91ff:fe00:7"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 1u);
    EXPECT_HAS(s.reason, "connected route fe80::/64 dev ens2f0");
    // A global peer cannot be reached from link-local entries.
    s = select_gid(h.port("mlx5_2"), h.net, config(), peer("2001:db8::2"));
    EXPECT_EQ(s.status, Status::unreachable);
    EXPECT_HAS(s.at(1).why, "link-local");
}

// ---------------------------------------------------------------- two ports in one subnet

TEST(GidSelectTwoPorts, EachPortUsesItsOwnNetdev) {
    Host h("two_ports_one_subnet");
    // The main table would send every 10.0.0.x through ens1f0 ...
    EXPECT_EQ(h.net.best_route(*IpAddr::parse("10.0.0.9"))->dev, "ens1f0");
    const Selection a = select_gid(h.port("mlx5_0"), h.net, config(), peer("10.0.0.9"));
    const Selection b = select_gid(h.port("mlx5_1"), h.net, config(), peer("10.0.0.9"));
    ASSERT_EQ(a.status, Status::ok) << a.error;
    ASSERT_EQ(b.status, Status::ok) << b.error;
    EXPECT_EQ(*a.index, 3u);
    EXPECT_HAS(a.reason, "10.0.0.1 on ens1f0 -> 10.0.0.9: connected route 10.0.0.0/24 dev ens1f0");
    // ... but mlx5_1 resolves through its own port, as rdma_cm does with the GID's netdev bound.
    EXPECT_EQ(*b.index, 3u);
    EXPECT_HAS(b.reason, "10.0.0.2 on ens1f1 -> 10.0.0.9: connected route 10.0.0.0/24 dev ens1f1");
}

// ---------------------------------------------------------------- zeroed entries, netdev down

TEST(GidSelectZeroedDown, DownNetdevLeavesNothing) {
    Host h("zeroed_down");
    const Selection s = select_gid(h.port("mlx5_0"), h.net, config(), peer("10.0.0.9"));
    EXPECT_EQ(s.status, Status::unreachable);
    EXPECT_HAS(s.error, "netdev down: 0 1 2 3");
    for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(s.at(i).verdict, Verdict::netdev_down) << i;
}

TEST(GidSelectZeroedDown, ZeroedStaleAndUnreadableEntries) {
    Host h("zeroed_down");
    const PortInfo port = h.port("mlx5_1");
    EXPECT_FALSE(port.gids[2].used());
    const Selection s = select_gid(port, h.net, config(), peer("10.0.0.9"));
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 7u);
    EXPECT_EQ(s.at(2).verdict, Verdict::unused);
    EXPECT_HAS(s.at(2).why, "all-zero GID");
    EXPECT_EQ(s.at(5).verdict, Verdict::stale);
    EXPECT_HAS(s.at(5).why, "10.0.0.99 is not configured on ens1f1");
    EXPECT_EQ(s.at(8).verdict, Verdict::unused);
    EXPECT_HAS(s.at(8).why, "type unreadable");
}

// ---------------------------------------------------------------- two hosts, different tables

TEST(GidSelectTwoHosts, PerPeerChoiceAgreesWhereIndependentChoicesDoNot) {
    Host a("two_hosts/hostA"), b("two_hosts/hostB");
    const PortInfo pa = a.port("mlx5_0"), pb = b.port("irdma0");
    const GidConfig cfg = config();

    // Alone, each host picks its IPv4 entry - in subnets with no route between them.
    EXPECT_EQ(*select_gid(pa, a.net, cfg).index, 3u);
    EXPECT_EQ(*select_gid(pb, b.net, cfg).index, 2u);

    // With what the other side advertises, both settle on RoCE v2 IPv6.
    const auto adv_a = advertised_gids(pa, a.net, cfg);
    const auto adv_b = advertised_gids(pb, b.net, cfg);
    ASSERT_FALSE(adv_b.empty());
    EXPECT_EQ(adv_b.front().gid.raw.str(), "192.168.9.2");   // best first

    const Selection sa = select_gid(pa, a.net, cfg, adv_b);
    const Selection sb = select_gid(pb, b.net, cfg, adv_a);
    ASSERT_EQ(sa.status, Status::ok) << sa.error;
    ASSERT_EQ(sb.status, Status::ok) << sb.error;
    EXPECT_EQ(*sa.index, 5u);
    EXPECT_EQ(*sb.index, 1u);
    EXPECT_HAS(sa.reason, "2001:db8::1 on ens1f0 -> 2001:db8::2");
    EXPECT_EQ(sa.peer->gid, pb.gids[*sb.index].gid);   // A talks to the entry B uses
    EXPECT_EQ(sb.peer->gid, pa.gids[*sa.index].gid);   // and B to the one A uses
    EXPECT_EQ(sa.at(3).verdict, Verdict::unreachable);
    EXPECT_HAS(sa.at(3).why, "no route to 192.168.9.2 leaving through ens1f0");
    EXPECT_EQ(sa.at(2).verdict, Verdict::peer_mismatch);   // B has no RoCE v1 at all
    EXPECT_HAS(sa.at(2).why, "peer has no RoCE v1 IPv4 entry");
}

// ---------------------------------------------------------------- built in memory

TEST(GidSelectMemory, InfinibandPortAndMissingNetdev) {
    NetModel net;
    Netdev eth0;
    eth0.name = "eth0";
    eth0.operstate = "up";
    net.netdevs.push_back(eth0);
    IfAddr addr;
    addr.ifname = "eth0";
    addr.prefix = *IpPrefix::parse("10.0.0.1/24");
    net.addrs.push_back(addr);
    PortInfo port;
    port.dev = "mlx5_0";
    auto entry = [](unsigned i, const char* ip, const char* ndev) {
        GidEntry e;
        e.index = i;
        e.gid = Gid{*IpAddr::parse(ip)};
        e.version = RoceVersion::v2;
        e.type_text = "RoCE v2";
        e.ndev = ndev;
        return e;
    };
    port.gids = {entry(0, "10.0.0.1", "eth7"), entry(1, "10.0.0.1", ""), entry(2, "10.0.0.1", "eth0")};
    Selection s = select_gid(port, net, config());
    ASSERT_EQ(s.status, Status::ok) << s.error;
    EXPECT_EQ(*s.index, 2u);
    EXPECT_EQ(s.at(0).verdict, Verdict::no_netdev);
    EXPECT_HAS(s.at(0).why, "netdev eth7 does not exist");
    EXPECT_HAS(s.at(1).why, "no netdev attached");

    port.link_layer = "InfiniBand";
    s = select_gid(port, net, config());
    EXPECT_EQ(s.status, Status::unsupported);
    EXPECT_EQ(s.error, "mlx5_0 port 1 has link layer InfiniBand, not Ethernet: its GIDs are not RoCE");
}
