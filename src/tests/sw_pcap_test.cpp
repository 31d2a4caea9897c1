// Packet traces (DeviceConfig::pcap_path): two devices on 127.0.0.1 trace SEND (multi-packet,
// GSO), WRITE, READ and atomics; the captures are read back with the project's pcap reader:
// one frame per packet each way, every frame a RoCEv2 packet whose ICRC verifies over the
// rebuilt IP/UDP headers (GSO segments with their IPv4 ID), the UDP checksum valid.
// Over IPv4 and IPv6 loopback. With ROCE_PCAP_KEEP_DIR set, the traces are left there (the tshark ctest decodes them).
#include <gtest/gtest.h>

#include <cstdlib>
#include <sys/socket.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "sw/pcap_writer.hpp"
#include "sw/test_support.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"
#include "wire/pcap.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;
namespace fs = std::filesystem;

namespace {

struct TraceDir {
    fs::path dir;
    bool keep = false;
    TraceDir() {
        if (const char* k = std::getenv("ROCE_PCAP_KEEP_DIR"); k && *k) {
            dir = k;
            keep = true;
        } else {
            dir = fs::temp_directory_path() / ("roce_pcap_test." + std::to_string(getpid()));
        }
        fs::create_directories(dir);
    }
    ~TraceDir() {
        if (!keep)
            fs::remove_all(dir);
    }
};

uint16_t ones_sum_fold(uint32_t s) {
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return uint16_t(s);
}

// The UDP checksum over the pseudo-header, header and payload sums to 0xffff when valid.
bool udp_checksum_ok(const wire::PcapFrame& f) {
    uint32_t s = 0;
    auto add = [&](const uint8_t* p, size_t n) {
        for (size_t i = 0; i + 1 < n; i += 2)
            s += uint32_t(p[i]) << 8 | p[i + 1];
        if (n & 1)
            s += uint32_t(p[n - 1]) << 8;
    };
    const size_t alen = f.ip.ipv6 ? 16 : 4;
    add(f.ip.src_ip, alen);
    add(f.ip.dst_ip, alen);
    s += 17 + uint32_t(8 + f.udp_payload.size());
    add(f.udp_header.data(), 8);
    add(f.udp_payload.data(), f.udp_payload.size());
    return ones_sum_fold(s) == 0xffff;
}

struct Checked {
    size_t frames = 0, tx = 0, rx = 0, nonzero_id = 0;
};

Checked check_trace(const fs::path& path, const WireAddr& self) {
    std::vector<wire::PcapFrame> frames;
    std::string err;
    Checked c;
    EXPECT_EQ(wire::read_pcap(path.string(), frames, err), Status::ok) << err;
    for (const auto& f : frames) {
        ++c.frames;
        wire::Packet pkt;
        EXPECT_EQ(wire::parse(f.payload(), f.ip, true, pkt), wire::ParseError::none)
                << path << " frame " << f.frame_no << " opcode 0x" << std::hex << int(f.udp_payload[0]);
        EXPECT_TRUE(udp_checksum_ok(f)) << path << " frame " << f.frame_no;
        EXPECT_EQ(f.ttl, 64);
        EXPECT_EQ(f.ip.ipv6, self.family == AF_INET6);
        if (!f.ip.ipv6) {
            EXPECT_EQ(f.ip.ipv4_flags_df, 1);
        }
        if (f.ip.src_port == self.port && std::memcmp(f.ip.src_ip, self.ip, f.ip.ipv6 ? 16 : 4) == 0)
            ++c.tx;
        else
            ++c.rx;
        if (f.ip.ipv4_id)
            ++c.nonzero_id;
    }
    return c;
}

} // namespace

TEST(SwPcap, ExpandPath) {
    const std::string pid = std::to_string(getpid());
    EXPECT_EQ(expand_trace_path("/tmp/t.%p.%d.pcap", 4791), "/tmp/t." + pid + ".4791.pcap");
    EXPECT_EQ(expand_trace_path("a%%p%x%", 1), "a%p%x%");
}

class SwPcapTraffic : public ::testing::TestWithParam<const char*> {};

TEST_P(SwPcapTraffic, TracedWithValidIcrc) {
    TraceDir td;
    DeviceConfig c;
    c.ip = GetParam();
    c.pcap_path = (td.dir / (std::string(c.ip[0] == ':' ? "sw_pcap6" : "sw_pcap4") + ".%d.pcap")).string();
    c.traffic_class = 106;
    Pair p;
    ASSERT_TRUE(p.open(c, c));
    const WireAddr aa = p.a.dev->address(), ba = p.b.dev->address();

    // SEND: single packet and 60 KiB (15 packets, one GSO send when the kernel has GSO)
    std::vector<uint8_t> big(60 << 10, 0x5a), small(100, 0x11);
    iovec iov{big.data(), big.size()};
    ASSERT_EQ(p.a.dev->post_send(p.qa, 1, &iov, 1, nullptr), Status::ok);
    iovec iov2{small.data(), small.size()};
    const uint32_t imm = 0x1234;
    ASSERT_EQ(p.a.dev->post_send(p.qa, 2, &iov2, 1, &imm), Status::ok);
    // WRITE, READ (multi-packet both), fetch-add, compare-swap
    std::vector<uint8_t> target(64 << 10, 0), readback(64 << 10, 0);
    alignas(8) uint64_t word = 5;
    MrKeys tk{}, wk{};
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, tk), Status::ok);
    ASSERT_EQ(p.b.pd->reg_mr(&word, sizeof(word), access_all, wk), Status::ok);
    ASSERT_EQ(p.a.dev->post_write(p.qa, 3, big.data(), 32 << 10, uint64_t(uintptr_t(target.data())), tk.rkey, false),
              Status::ok);
    ASSERT_EQ(p.a.dev->post_read(p.qa, 4, readback.data(), 32 << 10, uint64_t(uintptr_t(target.data())), tk.rkey),
              Status::ok);
    uint64_t r1 = 0, r2 = 0;
    ASSERT_EQ(p.a.dev->post_fetch_add(p.qa, 5, uint64_t(uintptr_t(&word)), wk.rkey, 3, &r1), Status::ok);
    ASSERT_EQ(p.a.dev->post_cmp_swap(p.qa, 6, uint64_t(uintptr_t(&word)), wk.rkey, 8, 42, &r2), Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(6) && p.b.msgs.size() >= 2; }));
    for (uint64_t id = 1; id <= 6; ++id) {
        ASSERT_NE(p.a.find(id), nullptr) << id;
        EXPECT_EQ(p.a.find(id)->status, Status::ok) << id;
    }
    EXPECT_EQ(r1, 5u);
    EXPECT_EQ(r2, 8u);
    EXPECT_EQ(word, 42u);
    EXPECT_EQ(std::memcmp(readback.data(), big.data(), 32 << 10), 0);
    // Let the last ACKs go out and arrive, then close (the traces are complete once closed).
    run_until({&p.a, &p.b}, [] { return false; }, 0.05);
    const DeviceStats sa = p.a.dev->stats(), sb = p.b.dev->stats();
    p.a.dev.reset();
    p.b.dev.reset();

    const std::string stem = c.ip[0] == ':' ? "sw_pcap6." : "sw_pcap4.";
    const fs::path fa = td.dir / (stem + std::to_string(aa.port) + ".pcap");
    const fs::path fb = td.dir / (stem + std::to_string(ba.port) + ".pcap");
    const Checked ca = check_trace(fa, aa), cb = check_trace(fb, ba);
    // Every packet counted is traced; after the counters were read only the teardown (CM DREQs,
    // packets the peer's progress thread still took in) adds frames.
    for (auto [traced, counted] : {std::pair{ca.tx, sa.tx_packets}, std::pair{ca.rx, sa.rx_packets},
                                   std::pair{cb.tx, sb.tx_packets}, std::pair{cb.rx, sb.rx_packets}}) {
        EXPECT_GE(traced, counted);
        EXPECT_LE(traced, counted + 4);
    }
    EXPECT_GE(ca.tx, 29u);   // 15 + 1 SEND, 8 WRITE, 1 READ request, 2 atomics, CM REQ and DREQ
    EXPECT_GT(cb.tx, 8u);    // READ responses, atomic ACKs, ACKs, CM
    if (sa.gso_sends && aa.family == AF_INET) {
        EXPECT_GT(ca.nonzero_id, 0u) << "GSO segments carry IPv4 IDs 1, 2, ...";
    }
    // What a sent before the counters were read, b received (frame by frame, also when GRO
    // coalesced them).
    EXPECT_GE(cb.rx, sa.tx_packets);
    EXPECT_GE(ca.rx, sb.tx_packets);
}

INSTANTIATE_TEST_SUITE_P(Loopback, SwPcapTraffic, ::testing::Values("127.0.0.1", "::1"),
                         [](const auto& info) { return std::string(info.param[0] == ':' ? "ipv6" : "ipv4"); });

TEST(SwPcap, SizeLimitStopsWriting) {
    TraceDir td;
    DeviceConfig c;
    c.pcap_path = (td.dir / "limited.%d.pcap").string();
    c.pcap_limit = 2000;
    Pair p;
    ASSERT_TRUE(p.open(c, DeviceConfig{}));
    std::vector<uint8_t> big(40 << 10, 0x77);
    iovec iov{big.data(), big.size()};
    ASSERT_EQ(p.a.dev->post_send(p.qa, 1, &iov, 1, nullptr), Status::ok);
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(1) != nullptr; }));
    const uint16_t port = p.a.dev->address().port;
    p.a.dev.reset();
    const fs::path f = td.dir / ("limited." + std::to_string(port) + ".pcap");
    EXPECT_LE(fs::file_size(f), 2000u);
    std::vector<wire::PcapFrame> frames;
    std::string err;
    EXPECT_EQ(wire::read_pcap(f.string(), frames, err), Status::ok) << err;
    EXPECT_GT(frames.size(), 0u);
}

TEST(SwPcap, UnwritablePathRefusesOpen) {
    DeviceConfig c;
    c.pcap_path = "/nonexistent-dir/x.pcap";
    Host h;
    EXPECT_EQ(h.open(c), Status::io_error);
}
