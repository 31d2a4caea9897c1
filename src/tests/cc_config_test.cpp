// The declarative congestion-control table: defaults, units, one-line errors, Markdown, env.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cc/config.hpp"

using namespace roce::cc;

TEST(CcConfig, TableDefaultsEqualStructDefaults) {
    const CcConfig a = default_cc_config(), b{};
    EXPECT_EQ(a.mode, b.mode);
    EXPECT_DOUBLE_EQ(a.dcqcn.g, b.dcqcn.g);
    EXPECT_DOUBLE_EQ(a.dcqcn.alpha_init, b.dcqcn.alpha_init);
    EXPECT_EQ(a.dcqcn.alpha_period, b.dcqcn.alpha_period);
    EXPECT_EQ(a.dcqcn.timer, b.dcqcn.timer);
    EXPECT_EQ(a.dcqcn.byte_counter, b.dcqcn.byte_counter);
    EXPECT_EQ(a.dcqcn.f, b.dcqcn.f);
    EXPECT_DOUBLE_EQ(a.dcqcn.rai_bps, b.dcqcn.rai_bps);
    EXPECT_DOUBLE_EQ(a.dcqcn.rhai_bps, b.dcqcn.rhai_bps);
    EXPECT_DOUBLE_EQ(a.dcqcn.min_rate_bps, b.dcqcn.min_rate_bps);
    EXPECT_EQ(a.dcqcn.cnp_interval, b.dcqcn.cnp_interval);
    EXPECT_EQ(a.dcqcn.loss_as_cnp, b.dcqcn.loss_as_cnp);
    EXPECT_EQ(a.delay.target, b.delay.target);
    EXPECT_DOUBLE_EQ(a.delay.ai_bytes, b.delay.ai_bytes);
    EXPECT_DOUBLE_EQ(a.delay.beta, b.delay.beta);
    EXPECT_DOUBLE_EQ(a.delay.max_mdf, b.delay.max_mdf);
    EXPECT_DOUBLE_EQ(a.delay.min_cwnd, b.delay.min_cwnd);
    EXPECT_DOUBLE_EQ(a.delay.max_cwnd, b.delay.max_cwnd);
    EXPECT_DOUBLE_EQ(a.delay.init_cwnd, b.delay.init_cwnd);
    EXPECT_EQ(a.read_cap.max_bytes, b.read_cap.max_bytes);
    EXPECT_EQ(a.pacer_burst, b.pacer_burst);
}

TEST(CcConfig, PaperDefaults) {
    const DcqcnParams d = default_cc_config().dcqcn;
    EXPECT_DOUBLE_EQ(d.g, 1.0 / 256);
    EXPECT_EQ(d.timer, 55 * ns_per_us);
    EXPECT_EQ(d.alpha_period, 55 * ns_per_us);
    EXPECT_EQ(d.byte_counter, 10u << 20);
    EXPECT_EQ(d.f, 5u);
    EXPECT_DOUBLE_EQ(d.rai_bps, 40e6);
    EXPECT_EQ(d.cnp_interval, 50 * ns_per_us);
}

TEST(CcConfig, Units) {
    Nanos t;
    EXPECT_TRUE(parse_time("55us", t) && t == 55000);
    EXPECT_TRUE(parse_time("1.5ms", t) && t == 1500000);
    EXPECT_TRUE(parse_time("200ns", t) && t == 200);
    EXPECT_FALSE(parse_time("55", t));
    EXPECT_FALSE(parse_time("us", t));
    double r;
    EXPECT_TRUE(parse_rate("40Mbps", r) && r == 40e6);
    EXPECT_TRUE(parse_rate("100Gbps", r) && r == 100e9);
    EXPECT_TRUE(parse_rate("12.5GBs", r) && r == 100e9);
    EXPECT_TRUE(parse_rate("40Mb/s", r) && r == 40e6);
    EXPECT_TRUE(parse_rate("5MB/s", r) && r == 40e6);
    EXPECT_FALSE(parse_rate("40", r));
    EXPECT_FALSE(parse_rate("40MHz", r));
    uint64_t b;
    EXPECT_TRUE(parse_size("10MB", b) && b == 10u << 20);
    EXPECT_TRUE(parse_size("4096", b) && b == 4096);
    EXPECT_TRUE(parse_size("16k", b) && b == 16384);
    EXPECT_FALSE(parse_size("1.5", b));
    double f;
    EXPECT_TRUE(parse_fraction("1/256", f) && f == 1.0 / 256);
    EXPECT_TRUE(parse_fraction("0.5", f) && f == 0.5);
    EXPECT_FALSE(parse_fraction("1/0", f));
}

TEST(CcConfig, SettingsAndOneLineErrors) {
    CcConfig c;
    std::string err;
    EXPECT_EQ(set_cc_config(c, "UCX_RC_ROCE_CC", "delay", err), roce::Status::ok);
    EXPECT_EQ(c.mode, CcMode::delay);
    EXPECT_EQ(set_cc_config(c, "DCQCN_RAI", "80Mbps", err), roce::Status::ok);
    EXPECT_DOUBLE_EQ(c.dcqcn.rai_bps, 80e6);
    EXPECT_EQ(set_cc_config(c, "DCQCN_G", "1/16", err), roce::Status::ok);
    EXPECT_DOUBLE_EQ(c.dcqcn.g, 1.0 / 16);
    EXPECT_EQ(set_cc_config(c, "CC_LOSS_REACT", "n", err), roce::Status::ok);
    EXPECT_FALSE(c.dcqcn.loss_as_cnp);
    EXPECT_FALSE(c.delay.loss_decrease);

    EXPECT_EQ(set_cc_config(c, "CC", "hpcc", err), roce::Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_CC=hpcc: unknown mode; valid: auto, off, dcqcn, delay");
    EXPECT_EQ(set_cc_config(c, "DCQCN_TIMER", "55", err), roce::Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_DCQCN_TIMER=55: not a time of 1us or more; valid: time");
    EXPECT_EQ(set_cc_config(c, "DCQCN_TIMER", "1ns", err), roce::Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_DCQCN_TIMER=1ns: not a time of 1us or more; valid: time");
    EXPECT_EQ(set_cc_config(c, "DCQCN_ALPHA_TIMER", "500ns", err), roce::Status::invalid_param);
    EXPECT_EQ(set_cc_config(c, "DCQCN_TIMER", "1us", err), roce::Status::ok);
    EXPECT_EQ(set_cc_config(c, "PACER_BURST", "2GB", err), roce::Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_PACER_BURST=2GB: above 1GB; valid: size up to 1GB");
    EXPECT_EQ(set_cc_config(c, "PACER_BURST", "1GB", err), roce::Status::ok);
    EXPECT_EQ(set_cc_config(c, "DCQCN_G", "2", err), roce::Status::invalid_param);
    EXPECT_EQ(set_cc_config(c, "DCQCN_F", "0", err), roce::Status::invalid_param);
    EXPECT_EQ(set_cc_config(c, "NO_SUCH", "1", err), roce::Status::invalid_param);
    EXPECT_EQ(err.find('\n'), std::string::npos);
    EXPECT_NE(err.find("unknown setting; valid: CC, DCQCN_G"), std::string::npos);
}

TEST(CcConfig, CrossChecks) {
    CcConfig c;
    std::string err;
    std::vector<std::pair<std::string, std::string>> s = {{"DELAY_MIN_CWND", "1MB"}, {"DELAY_MAX_CWND", "64KB"}};
    EXPECT_EQ(parse_cc_config(s, c, err), roce::Status::invalid_param);
    EXPECT_NE(err.find("DELAY_MIN_CWND"), std::string::npos);
    s = {{"CC", "dcqcn"}, {"DCQCN_TIMER", "300us"}};
    ASSERT_EQ(parse_cc_config(s, c, err), roce::Status::ok) << err;
    EXPECT_EQ(c.mode, CcMode::dcqcn);
    EXPECT_EQ(c.dcqcn.timer, 300 * ns_per_us);
}

TEST(CcConfig, EveryDefaultParsesAndMarkdownListsAll) {
    const std::string md = cc_config_markdown();
    for (const auto& v : cc_vars()) {
        CcConfig c;
        std::string problem;
        EXPECT_EQ(v.set(c, v.dfl, problem), roce::Status::ok) << v.name << ": " << problem;
        EXPECT_NE(md.find("`UCX_RC_ROCE_" + std::string(v.name) + "`"), std::string::npos);
        EXPECT_FALSE(v.doc.empty());
    }
    EXPECT_EQ(md.rfind("| Variable | Default | Values | Description |", 0), 0u);
}

TEST(CcConfig, FromEnvironment) {
    setenv("UCX_RC_ROCE_CC", "dcqcn", 1);
    setenv("UCX_RC_ROCE_CNP_INTERVAL", "4us", 1);
    CcConfig c;
    std::string err;
    EXPECT_EQ(cc_config_from_env(c, err), roce::Status::ok) << err;
    EXPECT_EQ(c.mode, CcMode::dcqcn);
    EXPECT_EQ(c.dcqcn.cnp_interval, 4 * ns_per_us);
    setenv("UCX_RC_ROCE_CNP_INTERVAL", "soon", 1);
    EXPECT_EQ(cc_config_from_env(c, err), roce::Status::invalid_param);
    EXPECT_EQ(err, "UCX_RC_ROCE_CNP_INTERVAL=soon: not a positive time; valid: time");
    unsetenv("UCX_RC_ROCE_CC");
    unsetenv("UCX_RC_ROCE_CNP_INTERVAL");
}
