// pcap reader: byte orders, timestamp resolutions, VLAN/IPv6/IHL handling, and clean errors on
// truncated or garbage files.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "wire/icrc.hpp"
#include "wire/pcap.hpp"

using namespace roce::wire;
using roce::Status;

namespace {

std::vector<uint8_t> file_bytes(const std::string& name) {
    std::ifstream in(std::string(ROCE_FIXTURE_DIR) + "/" + name + ".pcap", std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void swap32_at(std::vector<uint8_t>& b, size_t off) { std::swap(b[off], b[off + 3]); std::swap(b[off + 1], b[off + 2]); }
void swap16_at(std::vector<uint8_t>& b, size_t off) { std::swap(b[off], b[off + 1]); }

// Rewrites a little-endian capture as a big-endian one (what a big-endian host writes).
std::vector<uint8_t> to_big_endian(std::vector<uint8_t> b) {
    swap32_at(b, 0);
    swap16_at(b, 4);
    swap16_at(b, 6);
    for (size_t o : {8u, 12u, 16u, 20u})
        swap32_at(b, o);
    size_t off = 24;
    while (off + 16 <= b.size()) {
        uint32_t incl;
        std::memcpy(&incl, &b[off + 8], 4);
        for (size_t k = 0; k < 16; k += 4)
            swap32_at(b, off + k);
        off += 16 + incl;
    }
    return b;
}

TEST(Pcap, ReadsFixture) {
    std::vector<PcapFrame> f;
    std::string err;
    ASSERT_EQ(read_pcap(std::string(ROCE_FIXTURE_DIR) + "/rc_send_64.pcap", f, err), Status::ok) << err;
    ASSERT_EQ(f.size(), 20u);
    EXPECT_EQ(f[0].frame_no, 1u);
    EXPECT_FALSE(f[0].ip.ipv6);
    EXPECT_EQ(f[0].ip.src_ip[0], 10);
    EXPECT_EQ(f[0].ip.src_ip[3], 2);
    EXPECT_EQ(f[0].ip.dst_ip[3], 1);
    EXPECT_EQ(f[0].ip.dst_port, 4791);
    EXPECT_EQ(f[0].ip.src_port, 49458);
    EXPECT_EQ(f[0].ttl, 64);
    EXPECT_EQ(f[0].vlan_id, -1);
    EXPECT_EQ(f[0].udp_payload.size(), 80u);
    EXPECT_EQ(f[0].ip_header.size(), 20u);
    EXPECT_EQ(f[0].udp_header.size(), 8u);
    for (size_t i = 1; i < f.size(); ++i)
        EXPECT_GE(f[i].ts_ns, f[i - 1].ts_ns);
}

TEST(Pcap, BigEndianAndNanosecondMagic) {
    const auto le = file_bytes("rc_write_3000");
    std::vector<PcapFrame> a, b, c;
    std::string err;
    ASSERT_EQ(parse_pcap(le, a, err), Status::ok);
    ASSERT_EQ(parse_pcap(to_big_endian(le), b, err), Status::ok) << err;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].udp_payload, b[i].udp_payload);
        EXPECT_EQ(a[i].ts_ns, b[i].ts_ns);
        EXPECT_EQ(a[i].ip.ipv4_id, b[i].ip.ipv4_id);
    }
    auto ns = le;
    const uint32_t magic_ns = 0xa1b23c4d;
    std::memcpy(ns.data(), &magic_ns, 4);
    ASSERT_EQ(parse_pcap(ns, c, err), Status::ok);
    ASSERT_EQ(c.size(), a.size());
    // Same numbers, read as nanoseconds instead of microseconds.
    EXPECT_EQ((a[1].ts_ns - a[0].ts_ns), (c[1].ts_ns - c[0].ts_ns) * 1000);
}

TEST(Pcap, TruncatedAtEveryLengthIsAnErrorNotACrash) {
    const auto full = file_bytes("rc_read_8");
    std::vector<PcapFrame> all;
    std::string err;
    ASSERT_EQ(parse_pcap(full, all, err), Status::ok);
    for (size_t len = 0; len < full.size(); ++len) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + ptrdiff_t(len));
        std::vector<PcapFrame> f;
        std::string e;
        const Status s = parse_pcap(cut, f, e);
        // Only a cut exactly at a record boundary is a valid (shorter) capture.
        if (s == Status::ok) {
            EXPECT_LT(f.size(), all.size());
        } else {
            EXPECT_FALSE(e.empty());
            EXPECT_LE(f.size(), all.size());
        }
    }
}

TEST(Pcap, GarbageAndMissingFiles) {
    std::vector<PcapFrame> f;
    std::string err;
    EXPECT_EQ(read_pcap("/nonexistent/x.pcap", f, err), Status::io_error);
    EXPECT_NE(err.find("cannot open"), std::string::npos);
    // A directory opens, then read(2) fails (EISDIR): libstdc++ throws from the stream; it was
    // roce_doctor wire's abort.
    EXPECT_EQ(read_pcap("/tmp", f, err), Status::io_error);
    EXPECT_NE(err.find("/tmp"), std::string::npos) << err;
    std::vector<uint8_t> junk(100, 0x42);
    EXPECT_EQ(parse_pcap(junk, f, err), Status::invalid_param);
    EXPECT_NE(err.find("magic"), std::string::npos);
    auto sll = file_bytes("rc_send_64");
    sll[20] = 113;   // LINKTYPE_LINUX_SLL
    EXPECT_EQ(parse_pcap(sll, f, err), Status::unsupported);
    // A record that claims 4 GiB.
    auto big = file_bytes("rc_send_64");
    big[24 + 8] = big[24 + 9] = big[24 + 10] = big[24 + 11] = 0xff;
    EXPECT_EQ(parse_pcap(big, f, err), Status::io_error);
    // Random garbage after a valid header: errors or skipped frames, never a crash.
    std::mt19937 rng(3);
    const auto good = file_bytes("rc_send_64");
    for (int t = 0; t < 3000; ++t) {
        auto b = good;
        for (int k = 0; k < 4; ++k)
            b[24 + rng() % (b.size() - 24)] = uint8_t(rng());
        std::vector<PcapFrame> g;
        (void)parse_pcap(b, g, err);
    }
}

// Builds a one-frame capture around `frame`.
std::vector<uint8_t> capture_of(const std::vector<uint8_t>& frame) {
    std::vector<uint8_t> b(24, 0);
    const uint32_t hdr[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 262144, 1};
    std::memcpy(b.data(), hdr, 24);
    const uint32_t rec[4] = {1, 2, uint32_t(frame.size()), uint32_t(frame.size())};
    b.insert(b.end(), reinterpret_cast<const uint8_t*>(rec), reinterpret_cast<const uint8_t*>(rec) + 16);
    b.insert(b.end(), frame.begin(), frame.end());
    return b;
}

TEST(Pcap, VlanIpv4OptionsAndTrailer) {
    std::vector<PcapFrame> src;
    std::string err;
    ASSERT_EQ(read_pcap(std::string(ROCE_FIXTURE_DIR) + "/rc_send_64.pcap", src, err), Status::ok);
    const PcapFrame& s = src[1];   // an ACK: 20-byte UDP payload
    std::vector<uint8_t> fr = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0xa0, 0x07, 0x08, 0x00};   // PCP 5, VID 7
    auto ip = s.ip_header;
    ip[0] = 0x46;   // one 4-byte option word
    const uint16_t tot = uint16_t(24 + 8 + s.udp_payload.size());
    ip[2] = uint8_t(tot >> 8);
    ip[3] = uint8_t(tot);
    fr.insert(fr.end(), ip.begin(), ip.end());
    fr.insert(fr.end(), {1, 0, 0, 0});   // option: NOP x4
    fr.insert(fr.end(), s.udp_header.begin(), s.udp_header.end());
    fr.insert(fr.end(), s.udp_payload.begin(), s.udp_payload.end());
    fr.insert(fr.end(), 6, 0);   // Ethernet trailer padding
    std::vector<PcapFrame> f;
    ASSERT_EQ(parse_pcap(capture_of(fr), f, err), Status::ok) << err;
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].vlan_id, 7);
    EXPECT_EQ(f[0].vlan_pcp, 5);
    EXPECT_EQ(f[0].ip_header.size(), 24u);
    EXPECT_EQ(f[0].udp_payload, s.udp_payload);
    EXPECT_EQ(f[0].ip.ipv4_id, s.ip.ipv4_id);
    EXPECT_TRUE(icrc_verify(f[0].ip, f[0].payload()));
    EXPECT_EQ(f[0].ts_ns, 1000002000);
}

TEST(Pcap, Ipv6Frame) {
    const std::vector<uint8_t> payload(20, 0x5a);
    std::vector<uint8_t> fr = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x86, 0xdd};
    const uint16_t plen = uint16_t(8 + payload.size());
    const std::vector<uint8_t> v6 = {0x6b, 0x80, 0x00, 0x01, uint8_t(plen >> 8), uint8_t(plen), 17, 33};
    fr.insert(fr.end(), v6.begin(), v6.end());
    for (int i = 0; i < 32; ++i)
        fr.push_back(uint8_t(i));
    fr.insert(fr.end(), {0xc0, 0x00, 0x12, 0xb7, uint8_t(plen >> 8), uint8_t(plen), 0, 0});
    fr.insert(fr.end(), payload.begin(), payload.end());
    std::vector<PcapFrame> f;
    std::string err;
    ASSERT_EQ(parse_pcap(capture_of(fr), f, err), Status::ok) << err;
    ASSERT_EQ(f.size(), 1u);
    EXPECT_TRUE(f[0].ip.ipv6);
    EXPECT_EQ(f[0].tos, 0xb8);   // traffic class spans the first two bytes
    EXPECT_EQ(f[0].ttl, 33);
    EXPECT_EQ(f[0].ip.src_ip[15], 15);
    EXPECT_EQ(f[0].ip.dst_ip[0], 16);
    EXPECT_EQ(f[0].ip.src_port, 0xc000);
    EXPECT_EQ(f[0].udp_payload, payload);
}

TEST(Pcap, NonUdpFramesAreSkippedButNumbered) {
    std::vector<uint8_t> arp = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x06};
    arp.resize(60);
    auto cap = capture_of(arp);
    const auto one = file_bytes("rc_write_bad_rkey");
    cap.insert(cap.end(), one.begin() + 24, one.end());   // append its two records
    std::vector<PcapFrame> f;
    std::string err;
    ASSERT_EQ(parse_pcap(cap, f, err), Status::ok) << err;
    ASSERT_EQ(f.size(), 2u);
    EXPECT_EQ(f[0].frame_no, 2u);
    EXPECT_EQ(f[1].frame_no, 3u);
}

} // namespace
