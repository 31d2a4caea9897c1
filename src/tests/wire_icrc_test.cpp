// ICRC against the rxe captures: an independent recomputation from the raw captured headers
// (README recipe), mutation of masked and unmasked fields, and recovery of a hidden IPv4 ID.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "wire/icrc.hpp"
#include "wire/packet.hpp"
#include "wire/pcap.hpp"

using namespace roce::wire;

namespace {

std::vector<PcapFrame> load(const std::string& name) {
    std::vector<PcapFrame> frames;
    std::string err;
    EXPECT_EQ(read_pcap(std::string(ROCE_FIXTURE_DIR) + "/" + name + ".pcap", frames, err), roce::Status::ok) << err;
    return frames;
}

// The README recipe applied to the headers exactly as captured (not to an IpContext).
uint32_t reference_icrc(std::vector<uint8_t> ip, std::vector<uint8_t> udp, const std::vector<uint8_t>& payload) {
    ip[1] = 0xff;                 // TOS
    ip[8] = 0xff;                 // TTL
    ip[10] = ip[11] = 0xff;       // header checksum
    udp[6] = udp[7] = 0xff;       // UDP checksum
    std::vector<uint8_t> m(8, 0xff);
    m.insert(m.end(), ip.begin(), ip.end());
    m.insert(m.end(), udp.begin(), udp.end());
    m.insert(m.end(), payload.begin(), payload.end() - 4);
    m[8 + ip.size() + udp.size() + 4] = 0xff;   // BTH byte 4
    return crc32_ieee(0, m.data(), m.size());
}

TEST(Icrc, MatchesReferenceOnRawCapturedHeaders) {
    for (const auto& f : load("rc_write_3000")) {
        ASSERT_EQ(f.ip_header.size(), 20u);
        const uint32_t stored = icrc_stored(f.payload());
        EXPECT_EQ(reference_icrc(f.ip_header, f.udp_header, f.udp_payload), stored);
        EXPECT_EQ(icrc_compute(f.ip, f.payload()), stored);
        // Routers may rewrite TOS/TTL/checksums: the reference must not care.
        auto ip = f.ip_header;
        ip[1] ^= 0xb8;
        ip[8] = 3;
        ip[10] ^= 0x55;
        auto udp = f.udp_header;
        udp[6] = 0x12;
        EXPECT_EQ(reference_icrc(ip, udp, f.udp_payload), stored);
    }
}

// The pieces a gather send hands the kernel (headers in a tx slot, payload elsewhere), split
// anywhere, even inside the BTH (whose byte 4 is masked wherever it lands): the same ICRC as
// rxe's, over every captured packet.
TEST(Icrc, PartsMatchContiguousAndCapturedIcrc) {
    std::mt19937 rng(7);
    for (const char* name : {"rc_write_3000", "rc_send_64", "rc_read_3000"}) {
        for (const auto& f : load(name)) {
            SCOPED_TRACE(std::string(name) + " frame " + std::to_string(f.frame_no));
            const uint32_t stored = icrc_stored(f.payload());
            const size_t covered = f.udp_payload.size() - 4;
            const uint8_t* d = f.udp_payload.data();
            for (int t = 0; t < 50; ++t) {
                size_t a = rng() % (covered + 1), b = rng() % (covered + 1);
                if (t < 13)
                    a = size_t(t);   // every cut point around the BTH
                if (a > b)
                    std::swap(a, b);
                const std::span<const uint8_t> parts[3] = {{d, a}, {d + a, b - a}, {d + b, covered - b}};
                EXPECT_EQ(icrc_compute_parts(f.ip, parts), stored) << a << " " << b;
            }
            const std::span<const uint8_t> one[1] = {{d, covered}};
            EXPECT_EQ(icrc_compute_parts(f.ip, one), icrc_compute(f.ip, f.payload()));
            // A flipped payload bit in any part changes it.
            std::vector<uint8_t> m(d, d + covered);
            m[covered - 1] ^= 0x10;
            const std::span<const uint8_t> bad[2] = {{m.data(), 12}, {m.data() + 12, covered - 12}};
            EXPECT_NE(icrc_compute_parts(f.ip, bad), stored);
        }
    }
}

TEST(Icrc, MaskedBthByteDoesNotMatter) {
    for (const auto& f : load("rc_write_3000")) {
        for (int v : {0x00, 0x80, 0x40, 0xc0, 0x3f, 0xff}) {
            auto pl = f.udp_payload;
            pl[4] = uint8_t(v);   // FECN/BECN/resv, rewritten by ECN-marking switches
            Packet p;
            EXPECT_EQ(parse(pl, f.ip, true, p), ParseError::none);
            EXPECT_EQ(p.bth.fecn, (v & 0x80) != 0);
            EXPECT_EQ(p.bth.becn, (v & 0x40) != 0);
        }
    }
}

TEST(Icrc, EveryUnmaskedPayloadBitIsCovered) {
    const auto frames = load("rc_write_3000");
    for (size_t i : {size_t(0), size_t(1), size_t(2), size_t(3)}) {   // FIRST, MIDDLE, LAST, ACK
        const PcapFrame& f = frames[i];
        for (size_t byte = 0; byte < f.udp_payload.size(); ++byte) {
            if (byte == 4)
                continue;
            for (int bit = 0; bit < 8; ++bit) {
                auto pl = f.udp_payload;
                pl[byte] ^= uint8_t(1u << bit);
                Packet p;
                EXPECT_NE(parse(pl, f.ip, true, p), ParseError::none) << "byte " << byte << " bit " << bit;
                EXPECT_FALSE(icrc_verify(f.ip, pl)) << "byte " << byte << " bit " << bit;
            }
        }
    }
}

TEST(Icrc, EveryIpContextFieldIsCovered) {
    const PcapFrame f = load("rc_send_64").at(0);
    auto check = [&](auto mutate, const char* what) {
        IpContext ip = f.ip;
        mutate(ip);
        EXPECT_FALSE(icrc_verify(ip, f.payload())) << what;
    };
    for (int b = 0; b < 32; ++b) {
        check([&](IpContext& ip) { ip.src_ip[b / 8] ^= uint8_t(1u << (b % 8)); }, "src ip");
        check([&](IpContext& ip) { ip.dst_ip[b / 8] ^= uint8_t(1u << (b % 8)); }, "dst ip");
    }
    for (int b = 0; b < 16; ++b) {
        check([&](IpContext& ip) { ip.src_port ^= uint16_t(1u << b); }, "src port");
        check([&](IpContext& ip) { ip.dst_port ^= uint16_t(1u << b); }, "dst port");
        check([&](IpContext& ip) { ip.ipv4_id ^= uint16_t(1u << b); }, "ipv4 id");
    }
    check([&](IpContext& ip) { ip.ipv4_flags_df = 0; }, "DF");
    check([&](IpContext& ip) { ip.ipv6 = true; }, "family");
}

TEST(Icrc, HiddenIdIsSolvedNotGuessed) {
    std::mt19937 rng(1234);
    std::vector<uint8_t> payload(1024);
    for (auto& b : payload) b = uint8_t(rng());
    for (size_t len : {0u, 1u, 4u, 100u, 1024u}) {
        for (int trial = 0; trial < 50; ++trial) {
            Packet p;
            p.bth.opcode = uint8_t(Opcode::rc_send_only);
            p.bth.dest_qp = rng() & psn_mask;
            p.bth.psn = rng() & psn_mask;
            IpContext ip;
            ip.src_ip[0] = 192; ip.src_ip[1] = 168; ip.src_ip[3] = uint8_t(rng());
            ip.dst_ip[0] = 10; ip.dst_ip[3] = uint8_t(rng());
            ip.src_port = uint16_t(0xc000 | rng());
            ip.dst_port = roce_v2_udp_port;
            ip.ipv4_id = uint16_t(rng());
            std::vector<uint8_t> out(2048);
            const size_t n = build(p, std::span(payload.data(), len), ip, out);
            ASSERT_GT(n, 0u);
            std::span<const uint8_t> pkt(out.data(), n);
            IpContext hidden = ip;
            hidden.ipv4_id = uint16_t(rng());   // any starting guess
            uint16_t id = 0;
            ASSERT_TRUE(icrc_verify_any_ipv4_id(hidden, pkt, &id));
            EXPECT_EQ(id, ip.ipv4_id);
        }
    }
}

TEST(Icrc, SolvedIdIsTheOnlyOneBruteForceFinds) {
    // Test-only cross-check of the closed form against trying all 65536 IDs, on six packet
    // lengths (more than the solver caches), visited twice, interleaved.
    std::vector<PcapFrame> pick;
    for (const char* name : {"rc_send_64", "rc_read_3000", "ud_send_64", "rc_atomic_cmp_swap"}) {
        const auto frames = load(name);
        pick.push_back(frames.at(0));
        if (std::string(name) != "ud_send_64" && std::string(name) != "rc_read_3000")
            pick.push_back(frames.at(1));
    }
    for (int round = 0; round < 2; ++round) {
        for (const PcapFrame& f : pick) {
            ASSERT_LT(f.udp_payload.size(), 100u);
            IpContext ip = f.ip;
            int matches = 0;
            uint32_t found = 0;
            for (uint32_t id = 0; id < 65536; ++id) {
                ip.ipv4_id = uint16_t(id);
                if (icrc_verify(ip, f.payload())) {
                    ++matches;
                    found = id;
                }
            }
            EXPECT_EQ(matches, 1);
            ip.ipv4_id = uint16_t(0x5555 * round);
            uint16_t solved = 0;
            ASSERT_TRUE(icrc_verify_any_ipv4_id(ip, f.payload(), &solved));
            EXPECT_EQ(solved, found);
            EXPECT_EQ(solved, f.ip.ipv4_id);
        }
    }
}

TEST(Icrc, HiddenIdStillDetectsCorruption) {
    // Solving for 16 ID bits leaves 16 bits of check: a corrupted packet passes with probability
    // 2^-16. Over 2000 single-bit errors (fixed seed) expect at most a handful.
    const auto frames = load("rc_write_3000");
    std::mt19937 rng(99);
    int accepted = 0;
    for (int t = 0; t < 2000; ++t) {
        const PcapFrame& f = frames[size_t(rng()) % frames.size()];
        auto pl = f.udp_payload;
        size_t byte;
        do byte = size_t(rng()) % pl.size(); while (byte == 4);
        pl[byte] ^= uint8_t(1u << (rng() % 8));
        IpContext hidden = f.ip;
        hidden.ipv4_id = 0;
        hidden.ipv4_id_known = false;
        accepted += icrc_verify_any_ipv4_id(hidden, pl);
    }
    EXPECT_LE(accepted, 2);
}

TEST(Icrc, Ipv6) {
    Packet p;
    p.bth.opcode = uint8_t(Opcode::rc_write_only);
    p.reth = {0x1000, 0x42, 8};
    IpContext ip;
    ip.ipv6 = true;
    for (int i = 0; i < 16; ++i) {
        ip.src_ip[i] = uint8_t(0x20 + i);
        ip.dst_ip[i] = uint8_t(0x40 + i);
    }
    ip.src_port = 0xc001;
    ip.dst_port = roce_v2_udp_port;
    const uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<uint8_t> out(128);
    const size_t n = build(p, data, ip, out);
    ASSERT_EQ(n, 12u + 16 + 8 + 4);
    out.resize(n);
    // Independent recomputation: version nibble kept, traffic class + flow label + hop limit masked.
    std::vector<uint8_t> m(8, 0xff);
    const uint8_t v6[8] = {0x6f, 0xff, 0xff, 0xff, 0, uint8_t(8 + n), 17, 0xff};
    m.insert(m.end(), v6, v6 + 8);
    m.insert(m.end(), ip.src_ip, ip.src_ip + 16);
    m.insert(m.end(), ip.dst_ip, ip.dst_ip + 16);
    const uint8_t udp[8] = {0xc0, 0x01, 0x12, 0xb7, 0, uint8_t(8 + n), 0xff, 0xff};
    m.insert(m.end(), udp, udp + 8);
    m.insert(m.end(), out.begin(), out.end() - 4);
    m[8 + 40 + 8 + 4] = 0xff;
    EXPECT_EQ(icrc_stored(out), crc32_ieee(0, m.data(), m.size()));
    IpContext hidden = ip;
    hidden.ipv4_id_known = false;
    Packet q;
    EXPECT_EQ(parse(out, hidden, true, q), ParseError::none);
    EXPECT_TRUE(icrc_verify_any_ipv4_id(ip, out));
    ip.dst_ip[15] ^= 1;
    EXPECT_EQ(parse(out, ip, true, q), ParseError::bad_icrc);
}

} // namespace
