// Traffic class: local resolution (configuration, device default, builtin), the symmetric
// negotiation both sides apply, the connection-setup encoding, and the CNP class.
#include <gtest/gtest.h>

#include <vector>

#include "gid/gid_table.hpp"
#include "gid/traffic_class.hpp"

using namespace roce::gid;
using roce::Status;

namespace {

GidConfig config(std::vector<std::pair<std::string, std::string>> settings) {
    GidConfig cfg;
    std::string err;
    EXPECT_EQ(parse_gid_config(settings, cfg, err), Status::ok) << err;
    return cfg;
}

TrafficClass tc(uint8_t tos, TcSource ts, uint8_t prio, TcSource ps) {
    TrafficClass t;
    t.tos = tos;
    t.tos_source = ts;
    t.priority = prio;
    t.priority_source = ps;
    return t;
}

} // namespace

TEST(GidTrafficClass, BuiltinDefaultIsDscp26WithEct0) {
    const TrafficClass t = resolve_traffic_class({}, std::nullopt);
    EXPECT_EQ(t.tos, 106);
    EXPECT_EQ(t.dscp(), 26);
    EXPECT_EQ(t.ecn(), ecn_ect0);
    EXPECT_EQ(t.priority, 0);
    EXPECT_EQ(t.tos_source, TcSource::builtin);
}

TEST(GidTrafficClass, ConfigurationAndDeviceDefault) {
    EXPECT_EQ(resolve_traffic_class(config({{"DSCP", "46"}}), std::nullopt).tos, 46 << 2 | 2);
    EXPECT_EQ(resolve_traffic_class(config({{"DSCP", "46"}, {"ECN", "off"}}), std::nullopt).tos, 46 << 2);
    EXPECT_EQ(resolve_traffic_class(config({{"TRAFFIC_CLASS", "96"}}), 160).tos, 96);
    // The device's class wins over the builtin default, keeps its own ECN bits...
    TrafficClass d = resolve_traffic_class({}, 160);
    EXPECT_EQ(d.tos, 160);
    EXPECT_EQ(d.tos_source, TcSource::device);
    // ... unless ECN is configured.
    EXPECT_EQ(resolve_traffic_class(config({{"ECN", "ect0"}}), 160).tos, 162);
    // DSCP configuration beats the device.
    EXPECT_EQ(resolve_traffic_class(config({{"DSCP", "10"}}), 160).tos, 42);
    EXPECT_EQ(resolve_traffic_class(config({{"PRIORITY", "5"}}), 160).priority, 5);
}

TEST(GidTrafficClass, DeviceTclassText) {
    EXPECT_EQ(parse_tclass_text("Global tclass=106"), 106);
    EXPECT_EQ(parse_tclass_text("Global tclass=160\nsrc_ip 10.0.0.1 tclass=96"), 160);
    EXPECT_EQ(parse_tclass_text("96"), 96);
    EXPECT_EQ(parse_tclass_text(""), std::nullopt);   // mlx5 prints nothing when unset
    EXPECT_EQ(parse_tclass_text("Global tclass=300"), std::nullopt);
    EXPECT_EQ(parse_tclass_text("garbage"), std::nullopt);
    PortInfo port;
    std::string err;
    ASSERT_EQ(read_port(SysRoot(std::string(ROCE_GID_FIXTURE_DIR) + "/mlx5_v1v2"), "mlx5_0", 1, port, err), Status::ok);
    EXPECT_EQ(port.default_tclass, 106);
}

TEST(GidTrafficClass, NegotiationIsSymmetricAndDeterministic) {
    std::vector<TrafficClass> all;
    for (auto ts : {TcSource::builtin, TcSource::device, TcSource::config})
        for (uint8_t tos : {0, 106, 160, 186})
            for (auto ps : {TcSource::builtin, TcSource::config})
                for (uint8_t prio : {0, 3, 5}) all.push_back(tc(tos, ts, prio, ps));
    for (const auto& a : all)
        for (const auto& b : all) {
            const TrafficClass ab = negotiate_traffic_class(a, b), ba = negotiate_traffic_class(b, a);
            ASSERT_EQ(ab, ba) << a.str() << " vs " << b.str();
            EXPECT_EQ(negotiate_traffic_class(a, a), a);
            // The result is one side's value, from the stronger source.
            EXPECT_TRUE(ab.tos == a.tos || ab.tos == b.tos);
            EXPECT_EQ(ab.tos_source, std::max(a.tos_source, b.tos_source));
        }
}

TEST(GidTrafficClass, NegotiationRules) {
    const TrafficClass dflt = resolve_traffic_class({}, std::nullopt);
    const TrafficClass dev = resolve_traffic_class({}, 160);
    const TrafficClass cfg = resolve_traffic_class(config({{"DSCP", "46"}, {"PRIORITY", "3"}}), std::nullopt);
    // The responder with nothing configured follows the requester's configuration (both directions).
    EXPECT_EQ(negotiate_traffic_class(dflt, cfg).tos, cfg.tos);
    EXPECT_EQ(negotiate_traffic_class(dflt, cfg).priority, 3);
    EXPECT_EQ(negotiate_traffic_class(dev, dflt).tos, 160);
    EXPECT_EQ(negotiate_traffic_class(dev, cfg).tos, cfg.tos);
    bool conflict = false;
    const TrafficClass other = resolve_traffic_class(config({{"DSCP", "10"}}), std::nullopt);
    EXPECT_EQ(negotiate_traffic_class(cfg, other, &conflict).tos, cfg.tos);   // the larger of two configured
    EXPECT_TRUE(conflict);
    negotiate_traffic_class(cfg, dflt, &conflict);
    EXPECT_FALSE(conflict);
}

TEST(GidTrafficClass, AdvertRoundTrip) {
    const TrafficClass t = tc(186, TcSource::config, 3, TcSource::device);
    const TcAdvert a = encode_tc_advert(t);
    EXPECT_EQ(a, (TcAdvert{186, 3, 2, 1}));
    EXPECT_EQ(decode_tc_advert(a), t);
    EXPECT_EQ(decode_tc_advert(TcAdvert{106, 8, 0, 0}), std::nullopt);
    EXPECT_EQ(decode_tc_advert(TcAdvert{106, 0, 3, 0}), std::nullopt);
}

TEST(GidTrafficClass, CnpClass) {
    const TrafficClass data = resolve_traffic_class(config({{"PRIORITY", "3"}}), std::nullopt);
    CnpClass c = cnp_class({}, data);
    EXPECT_EQ(c.tos, 48 << 2);   // DSCP 48, Not-ECT
    EXPECT_EQ(c.priority, 3);
    c = cnp_class(config({{"CNP_DSCP", "40"}}), data);
    EXPECT_EQ(c.tos, 160);
}
