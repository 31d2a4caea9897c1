// Configuration parsing: every setting of the table, and every bad value giving a one-line
// error that names the setting and its valid choices.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gid/config.hpp"
#include "gid/select.hpp"

using namespace roce::gid;
using roce::Status;

namespace {

using Settings = std::vector<std::pair<std::string, std::string>>;

std::string parse_error(const Settings& s) {
    GidConfig cfg;
    std::string err;
    EXPECT_EQ(parse_gid_config(s, cfg, err), Status::invalid_param) << "accepted: " << s.front().first;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    return err;
}

GidConfig parsed(const Settings& s) {
    GidConfig cfg;
    std::string err;
    EXPECT_EQ(parse_gid_config(s, cfg, err), Status::ok) << err;
    return cfg;
}

PortInfo mlx5_port() {
    PortInfo port;
    std::string err;
    EXPECT_EQ(read_port(SysRoot(std::string(ROCE_GID_FIXTURE_DIR) + "/mlx5_v1v2"), "mlx5_0", 1, port, err), Status::ok);
    return port;
}

std::string port_error(const Settings& s) {
    std::string err;
    EXPECT_EQ(check_gid_config(parsed(s), mlx5_port(), err), Status::invalid_param);
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    return err;
}

} // namespace

TEST(GidConfig, DefaultsAreAuto) {
    const GidConfig c = parsed({});
    EXPECT_FALSE(c.gid_index);
    EXPECT_FALSE(c.family);
    EXPECT_FALSE(c.version);
    EXPECT_TRUE(c.subnets.is_all());
    EXPECT_EQ(c.reachability, Reachability::route);
    EXPECT_FALSE(c.traffic_class || c.dscp || c.ecn || c.priority || c.netdev);
    EXPECT_EQ(c.cnp_dscp, 48);
    // Every table default parses.
    Settings dfl;
    for (const auto& v : gid_config_vars) dfl.emplace_back(std::string(v.name), std::string(v.dfl));
    parsed(dfl);
}

TEST(GidConfig, ValidValues) {
    const GidConfig c = parsed({{"UCX_RC_ROCE_GID_INDEX", "3"}, {"ADDR_FAMILY", "inet6"}, {"ROCE_VERSION", "1"},
                                {"REACHABILITY", "local_subnet"}, {"DSCP", "46"}, {"ECN", "off"},
                                {"PRIORITY", "3"}, {"CNP_DSCP", "40"}});
    EXPECT_EQ(c.gid_index, 3u);
    EXPECT_EQ(c.family, Family::inet6);
    EXPECT_EQ(c.version, RoceVersion::v1);
    EXPECT_EQ(c.reachability, Reachability::local_subnet);
    EXPECT_EQ(c.dscp, 46);
    EXPECT_EQ(c.ecn, 0);
    EXPECT_EQ(c.priority, 3);
    EXPECT_EQ(c.cnp_dscp, 40);

    const GidConfig d = parsed({{"SUBNETS", "^10.1.0.0/16,fd00::/8"}, {"TRAFFIC_CLASS", "96"}, {"GID_NETDEV", "bond0"}});
    EXPECT_TRUE(d.subnets.deny);
    ASSERT_EQ(d.subnets.prefixes.size(), 2u);
    EXPECT_FALSE(d.subnets.allows(*IpAddr::parse("10.1.2.3")));
    EXPECT_TRUE(d.subnets.allows(*IpAddr::parse("10.2.2.3")));
    EXPECT_EQ(d.traffic_class, 96);
    EXPECT_EQ(d.netdev, "bond0");
}

// Every setting with a nonsense value: "UCX_RC_ROCE_<NAME>=<value>: ...; valid: <choices>".
TEST(GidConfig, EveryBadValueNamesSettingAndChoices) {
    for (const auto& v : gid_config_vars) {
        if (v.name == "GID_NETDEV") continue;   // any name parses; checked against the port below
        const std::string err = parse_error({{std::string(v.name), "bogus"}});
        EXPECT_EQ(err.rfind("UCX_RC_ROCE_" + std::string(v.name) + "=bogus: ", 0), 0u) << err;
        EXPECT_NE(err.find("; valid: " + std::string(v.choices)), std::string::npos) << err;
    }
}

TEST(GidConfig, OutOfRange) {
    EXPECT_EQ(parse_error({{"DSCP", "64"}}), "UCX_RC_ROCE_DSCP=64: out of range; valid: auto or 0..63");
    EXPECT_EQ(parse_error({{"PRIORITY", "8"}}), "UCX_RC_ROCE_PRIORITY=8: out of range; valid: auto or 0..7");
    EXPECT_EQ(parse_error({{"TRAFFIC_CLASS", "256"}}),
              "UCX_RC_ROCE_TRAFFIC_CLASS=256: out of range; valid: auto or 0..255 (the whole ToS byte, DSCP<<2|ECN)");
    EXPECT_EQ(parse_error({{"CNP_DSCP", "99"}}), "UCX_RC_ROCE_CNP_DSCP=99: out of range; valid: 0..63");
    EXPECT_EQ(parse_error({{"ROCE_VERSION", "3"}}), "UCX_RC_ROCE_ROCE_VERSION=3: unknown RoCE version; valid: auto, 1, 2");
    EXPECT_NE(parse_error({{"SUBNETS", "10.0.0.0/33"}}).find("'10.0.0.0/33' is not a CIDR prefix"), std::string::npos);
}

TEST(GidConfig, UnknownSettingListsValidNames) {
    const std::string err = parse_error({{"UCX_RC_ROCE_GID_IDX", "1"}});
    EXPECT_EQ(err.rfind("UCX_RC_ROCE_GID_IDX: unknown setting; valid: GID_INDEX, ADDR_FAMILY", 0), 0u) << err;
}

TEST(GidConfig, ConflictingSettings) {
    EXPECT_EQ(parse_error({{"TRAFFIC_CLASS", "106"}, {"DSCP", "26"}}),
              "UCX_RC_ROCE_DSCP=26: conflicts with UCX_RC_ROCE_TRAFFIC_CLASS=106 (the whole ToS byte); "
              "valid: auto when TRAFFIC_CLASS is set");
    EXPECT_NE(parse_error({{"TRAFFIC_CLASS", "106"}, {"ECN", "ect1"}}).find("UCX_RC_ROCE_ECN=ect1: conflicts"),
              std::string::npos);
    EXPECT_NE(parse_error({{"GID_INDEX", "3"}, {"SUBNETS", "10.0.0.0/8"}}).find("cannot be combined with UCX_RC_ROCE_GID_INDEX=3"),
              std::string::npos);
    EXPECT_NE(parse_error({{"GID_INDEX", "3"}, {"GID_NETDEV", "eth0"}}).find("UCX_RC_ROCE_GID_NETDEV=eth0: cannot be combined"),
              std::string::npos);
}

TEST(GidConfig, FromEnvironment) {
    ::setenv("UCX_RC_ROCE_DSCP", "46", 1);
    ::setenv("UCX_RC_ROCE_ROCE_VERSION", "2", 1);
    GidConfig c;
    std::string err;
    EXPECT_EQ(gid_config_from_env(c, err), Status::ok) << err;
    EXPECT_EQ(c.dscp, 46);
    EXPECT_EQ(c.version, RoceVersion::v2);
    ::setenv("UCX_RC_ROCE_DSCP", "x", 1);
    EXPECT_EQ(gid_config_from_env(c, err), Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_DSCP=x: not a number; valid: auto or 0..63");
    ::unsetenv("UCX_RC_ROCE_DSCP");
    ::unsetenv("UCX_RC_ROCE_ROCE_VERSION");
}

// ud_roce has its own copy of the table (UCX_UD_ROCE_*): its settings are read from its own
// variables, not rc_roce's, and its errors name them (a ud_roce user never set UCX_RC_ROCE_X).
TEST(GidConfig, UdRoceReadsAndNamesItsOwnVariables) {
    ::setenv("UCX_RC_ROCE_GID_NETDEV", "eth1", 1);
    ::setenv("UCX_UD_ROCE_GID_NETDEV", "eth0.100", 1);
    GidConfig c;
    std::string err;
    EXPECT_EQ(gid_config_from_env(c, err, "UCX_UD_ROCE_"), Status::ok) << err;
    EXPECT_EQ(c.netdev, "eth0.100");
    EXPECT_EQ(c.var_prefix, "UCX_UD_ROCE_");
    EXPECT_EQ(check_gid_config(c, mlx5_port(), err), Status::invalid_param);
    EXPECT_EQ(err.rfind("UCX_UD_ROCE_GID_NETDEV=eth0.100: no entry of mlx5_0 port 1 uses this netdev", 0), 0u) << err;
    ::setenv("UCX_UD_ROCE_GID_INDEX", "3", 1);
    EXPECT_EQ(gid_config_from_env(c, err, "UCX_UD_ROCE_"), Status::invalid_param);
    EXPECT_EQ(err, "UCX_UD_ROCE_GID_NETDEV=eth0.100: cannot be combined with UCX_UD_ROCE_GID_INDEX=3; "
                   "valid: auto when GID_INDEX is set");
    EXPECT_EQ(gid_config_from_env(c, err), Status::ok) << "rc_roce's settings are separate: " << err;
    EXPECT_EQ(c.netdev, "eth1");
    ::unsetenv("UCX_RC_ROCE_GID_NETDEV");
    ::unsetenv("UCX_UD_ROCE_GID_NETDEV");
    ::unsetenv("UCX_UD_ROCE_GID_INDEX");
}

// ---------------------------------------------------------------- against a real table

TEST(GidConfigPort, IndexOutOfRange) {
    EXPECT_EQ(port_error({{"GID_INDEX", "99"}}),
              "UCX_RC_ROCE_GID_INDEX=99: out of range for mlx5_0 port 1 (16 entries); "
              "valid: auto or one of the used entries 0, 1, 2, 3, 4, 5");
}

TEST(GidConfigPort, IndexOfUnusedEntry) {
    EXPECT_EQ(port_error({{"GID_INDEX", "7"}}),
              "UCX_RC_ROCE_GID_INDEX=7: entry 7 of mlx5_0 port 1 is unused; valid: auto or one of the used entries 0, 1, 2, 3, 4, 5");
}

TEST(GidConfigPort, IndexOfWrongType) {
    EXPECT_EQ(port_error({{"GID_INDEX", "2"}, {"ROCE_VERSION", "2"}}),
              "UCX_RC_ROCE_GID_INDEX=2: entry 2 is RoCE v1 but UCX_RC_ROCE_ROCE_VERSION=2; valid: auto or 1, 3, 5");
    EXPECT_EQ(port_error({{"GID_INDEX", "3"}, {"ADDR_FAMILY", "inet6"}}),
              "UCX_RC_ROCE_GID_INDEX=3: entry 3 is IPv4 but UCX_RC_ROCE_ADDR_FAMILY=inet6; valid: auto or 0, 1, 4, 5");
}

TEST(GidConfigPort, UnknownNetdev) {
    EXPECT_EQ(port_error({{"GID_NETDEV", "eth9"}}),
              "UCX_RC_ROCE_GID_NETDEV=eth9: no entry of mlx5_0 port 1 uses this netdev; valid: auto, ens1f0");
}

TEST(GidConfigPort, IndexOfDownEntryIsAnErrorNotAFallback) {
    const SysRoot root(std::string(ROCE_GID_FIXTURE_DIR) + "/vlan");
    NetModel net;
    PortInfo port;
    std::string err;
    ASSERT_EQ(load_net_model(root, net, err), Status::ok);
    ASSERT_EQ(read_port(root, "mlx5_0", 1, port, err), Status::ok);
    const Selection s = select_gid(port, net, parsed({{"GID_INDEX", "9"}}));
    EXPECT_EQ(s.status, Status::invalid_param);
    EXPECT_EQ(s.error, "UCX_RC_ROCE_GID_INDEX=9: entry 9 of mlx5_0 port 1: netdev ens1f0.200 is down (operstate down); "
                       "valid: auto or a used entry whose netdev is up");
}
