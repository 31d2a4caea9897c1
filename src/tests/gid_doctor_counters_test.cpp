// `roce_doctor counters` over counter files (common/counters_file.hpp) written the way an rc_roce
// interface writes them (UCX_RC_ROCE_STATS_DIR): live processes shown as running, others marked
// exited (or left out with --live), JSON, and files that are not counter files skipped. The
// end-to-end check with ucx_perftest is the ctest diag.counters.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "common/counters_file.hpp"
#include "common/rc_device.hpp"
#include "doctor_run.hpp"

namespace fs = std::filesystem;

namespace {

struct Dir {
    fs::path p = fs::temp_directory_path() / ("roce_counters_test." + std::to_string(getpid()));
    Dir() { fs::create_directories(p); }
    ~Dir() { fs::remove_all(p); }
};

constexpr long dead_pid = 99999999;   // above any pid_max (2^22)

} // namespace

TEST(Counters, FileRoundTrips) {
    const roce::RcDevice::Counters c{{"tx_packets", 5}, {"rx_packets", 7}, {"retransmits", 0}};
    Dir d;
    roce::CounterSnapshot s{1234, "lo", "127.0.0.1:4000", 1.5e9, c, {}};
    std::string err;
    const std::string name = roce::counter_file_name(1234, "lo", 4000);
    EXPECT_EQ(name, "rc_roce.1234.lo.4000");
    ASSERT_EQ(roce::write_counter_file(d.p.string(), name, s, err), roce::Status::ok) << err;
    EXPECT_FALSE(fs::exists(d.p / ("." + name + ".tmp")));
    roce::CounterSnapshot back;
    ASSERT_EQ(roce::read_counter_file((d.p / name).string(), back, err), roce::Status::ok) << err;
    EXPECT_EQ(back.pid, 1234);
    EXPECT_EQ(back.device, "lo");
    EXPECT_EQ(back.address, "127.0.0.1:4000");
    EXPECT_DOUBLE_EQ(back.time, 1.5e9);
    EXPECT_EQ(back.counters, c);
    EXPECT_EQ(roce::write_counter_file("/nonexistent-dir", name, s, err), roce::Status::io_error);
}

TEST(Counters, DoctorShowsLiveAndExitedProcesses) {
    Dir d;
    std::string err;
    const long me = getpid();
    roce::CounterSnapshot live{me, "lo", "127.0.0.1:4000", 0, {{"tx_packets", 11}, {"rx_packets", 12}}, {}};
    roce::CounterSnapshot dead{dead_pid, "eth0", "10.0.0.1:5000", 0, {{"tx_packets", 21}, {"retransmits", 3}}, {}};
    ASSERT_EQ(roce::write_counter_file(d.p.string(), roce::counter_file_name(me, "lo", 4000), live, err),
              roce::Status::ok);
    ASSERT_EQ(roce::write_counter_file(d.p.string(), roce::counter_file_name(dead_pid, "eth0", 5000), dead, err),
              roce::Status::ok);
    std::ofstream(d.p / "rc_roce.77.lo.99") << "not a counter file\n";
    std::ofstream(d.p / "unrelated") << "ignored\n";
    std::ofstream(d.p / "rc_roce.77.4000.pcap") << "a packet trace next to the counters: ignored\n";

    DoctorRun r = doctor("counters " + d.p.string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "pid " + std::to_string(me) + " (running)  device lo  address 127.0.0.1:4000");
    EXPECT_HAS(r.out, "pid 99999999 (exited)  device eth0  address 10.0.0.1:5000");
    EXPECT_HAS(r.out, "  tx_packets 11\n");
    EXPECT_HAS(r.out, "  retransmits 3\n");
    EXPECT_HAS(r.out, "warning: " + (d.p / "rc_roce.77.lo.99").string() + ": not a counter file");
    EXPECT_LACKS(r.out, "unrelated");
    EXPECT_LACKS(r.out, ".pcap");

    r = doctor("counters " + d.p.string() + " --live");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "(running)");
    EXPECT_LACKS(r.out, "99999999");

    r = doctor("counters --json " + d.p.string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "\"pid\": 99999999, \"alive\": false, \"device\": \"eth0\"");
    EXPECT_HAS(r.out, "\"counters\": {\"tx_packets\": 11, \"rx_packets\": 12}");

    // What scripts check after a run: device counters summed over every interface, exited ones too.
    r = doctor("counters " + d.p.string() + " --sum 'tx_packets,retransmits|rx_packets,nope'");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "tx_packets 32\nretransmits|rx_packets 15\nnope 0\n");
    EXPECT_EQ(doctor("counters " + d.p.string() + " --sum").code, 2);
    EXPECT_EQ(doctor("counters " + d.p.string() + " --sum ''").code, 2);
    EXPECT_EQ(doctor("counters " + d.p.string() + " --sum --json").code, 2);
    EXPECT_EQ(doctor("counters " + d.p.string() + " --sum tx_packets --live").code, 2);

    r = doctor("counters " + (d.p / "missing").string());
    EXPECT_EQ(r.code, 1) << r.out;
    r = doctor("counters a b");
    EXPECT_EQ(r.code, 2) << r.out;
}

TEST(Counters, DoctorNeedsADirectory) {
    if (std::getenv("UCX_RC_ROCE_STATS_DIR") != nullptr || std::getenv("UCX_UD_ROCE_STATS_DIR") != nullptr)
        GTEST_SKIP() << "a STATS_DIR variable is set";
    DoctorRun r = doctor("counters");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_HAS(r.out, "neither UCX_RC_ROCE_STATS_DIR nor UCX_UD_ROCE_STATS_DIR is set");
}

// Sections per QP (rc_roce) and per peer (ud_roce) survive the file, and the doctor sums an
// rc_roce interface's QPs per peer, closed ones (destroyed QPs' totals) included.
TEST(Counters, QpAndPeerSectionsAddUpPerPeer) {
    Dir d;
    std::string err;
    const long me = getpid();
    roce::CounterSnapshot rc{me, "lo", "127.0.0.1:4000", 0, {{"retransmits", 9}}, {}};
    rc.qps = {{0x11, 0x21, "127.0.0.1:5000", "rts", {{"retransmits", 4}, {"cc_rate_mbps_now", 100}, {"outstanding_now", 2}}},
              {0x12, 0x22, "127.0.0.1:5000", "rts", {{"retransmits", 2}, {"cc_rate_mbps_now", 50}, {"outstanding_now", 1}}},
              {0, 0, "127.0.0.1:5000", "closed", {{"retransmits", 3}}},
              {0x13, 0x23, "127.0.0.1:6000", "error", {{"retransmits", 0}}}};
    roce::CounterSnapshot ud{me, "lo", "127.0.0.1:4100/qp7", 0, {{"retransmits", 1}}, {}, "ud_roce"};
    ud.qps = {{0, 5, "127.0.0.1:5100/qp9", "ok", {{"retransmits", 1}, {"window_now", 64}}, "peer"}};
    ASSERT_EQ(roce::write_counter_file(d.p.string(), roce::counter_file_name(me, "lo", 4000), rc, err), roce::Status::ok);
    const std::string ud_name = roce::counter_file_name(me, "lo", 4100, "ud_roce");
    EXPECT_EQ(ud_name, "ud_roce." + std::to_string(me) + ".lo.4100");
    ASSERT_EQ(roce::write_counter_file(d.p.string(), ud_name, ud, err), roce::Status::ok);

    roce::CounterSnapshot back;
    ASSERT_EQ(roce::read_counter_file((d.p / ud_name).string(), back, err), roce::Status::ok) << err;
    EXPECT_EQ(back.transport, "ud_roce");
    ASSERT_EQ(back.qps.size(), 1u);
    EXPECT_EQ(back.qps[0].kind, "peer");
    EXPECT_EQ(back.qps[0].dest_qpn, 5u);
    EXPECT_EQ(back.qps[0].peer, "127.0.0.1:5100/qp9");
    EXPECT_EQ(back.qps[0].counters, ud.qps[0].counters);

    DoctorRun r = doctor("counters " + d.p.string());
    EXPECT_EQ(r.code, 0) << r.out;
    // 4 + 2 + 3 closed; the CC rate gauge is not summed, outstanding work is.
    EXPECT_HAS(r.out, "  peer 127.0.0.1:5000  qps=2 (rts 2) retransmits=9 outstanding_now=3\n");
    EXPECT_HAS(r.out, "  peer 127.0.0.1:6000  qps=1 (rts 0) (all zero)\n");
    EXPECT_HAS(r.out, "  qp 0x11 -> 127.0.0.1:5000 qp 0x21  rts retransmits=4 cc_rate_mbps_now=100 outstanding_now=2\n");
    EXPECT_HAS(r.out, "  closed qps -> 127.0.0.1:5000 retransmits=3\n");
    EXPECT_HAS(r.out, "ud_roce  pid " + std::to_string(me));
    EXPECT_HAS(r.out, "  peer 127.0.0.1:5100/qp9  qps=1 (rts 1) retransmits=1 window_now=64\n");

    r = doctor("counters --json " + d.p.string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "{\"peer\": \"127.0.0.1:5000\", \"qps\": 2, \"qps_rts\": 2, \"counters\": {\"retransmits\": 9, \"outstanding_now\": 3}}");
    EXPECT_HAS(r.out, "\"kind\": \"peer\", \"qpn\": 0, \"dest_qpn\": 5");
}
