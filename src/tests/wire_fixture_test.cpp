// Replays every packet the kernel's rxe driver put on the wire (fixtures/rxe-pcap, see its
// README) through our parser, ICRC and builder, and checks the facts the README states.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "wire/icrc.hpp"
#include "wire/packet.hpp"
#include "wire/pcap.hpp"

using namespace roce::wire;

namespace {

const std::string fixture_dir = ROCE_FIXTURE_DIR;

std::vector<PcapFrame> load(const std::string& name) {
    std::vector<PcapFrame> frames;
    std::string err;
    const roce::Status s = read_pcap(fixture_dir + "/" + name + ".pcap", frames, err);
    EXPECT_EQ(s, roce::Status::ok) << err;
    return frames;
}

Packet parsed(const PcapFrame& f) {
    Packet p;
    EXPECT_EQ(parse(f.payload(), f.ip, true, p), ParseError::none) << "frame " << f.frame_no;
    return p;
}

// hostb (10.0.0.2) is the capture point and the client; hosta is 10.0.0.1.
bool from_b(const PcapFrame& f) { return f.ip.src_ip[3] == 2; }

bool is_response(uint8_t op) { return op >= 0x0d && op <= 0x12; }

// README: AckReq on the ONLY/LAST packet of RC SEND/WRITE, on READ and atomic requests; never
// on FIRST/MIDDLE, responses or UC; on UD only for the CM MADs (QP1).
bool expect_ack_req(const Packet& p) {
    switch (p.bth.opcode) {
    case 0x02: case 0x03: case 0x04: case 0x05: case 0x08: case 0x09: case 0x0a: case 0x0b:
    case 0x0c: case 0x13: case 0x14:
        return true;
    case 0x64:
        return p.bth.dest_qp == 1;
    default:
        return false;
    }
}

struct FileFacts {
    const char* name;
    size_t bytes;
    size_t packets;
    std::map<uint8_t, int> opcodes;
    uint32_t qpn_a, qpn_b;
};

const std::vector<FileFacts> files = {
    {"rc_send_64", 2184, 20, {{0x04, 10}, {0x11, 10}}, 0x11, 0x12},
    {"rc_send_5000_mtu1024", 60264, 70, {{0x00, 11}, {0x01, 33}, {0x02, 11}, {0x11, 15}}, 0x12, 0x13},
    {"rc_write_8", 1784, 20, {{0x0a, 10}, {0x11, 10}}, 0x13, 0x14},
    {"rc_write_3000", 33184, 40, {{0x06, 10}, {0x07, 10}, {0x08, 10}, {0x11, 10}}, 0x14, 0x15},
    {"rc_read_8", 904, 10, {{0x0c, 5}, {0x10, 5}}, 0x15, 0x16},
    {"rc_read_3000", 16624, 20, {{0x0c, 5}, {0x0d, 5}, {0x0e, 5}, {0x0f, 5}}, 0x16, 0x17},
    {"rc_atomic_fetch_add", 964, 10, {{0x14, 5}, {0x12, 5}}, 0x17, 0x18},
    {"rc_atomic_cmp_swap", 964, 10, {{0x13, 5}, {0x12, 5}}, 0x18, 0x19},
    {"ud_send_64", 1484, 10, {{0x64, 10}}, 0x19, 0x1a},
    {"uc_send_64", 1404, 10, {{0x24, 10}}, 0x1a, 0x1b},
    {"uc_write_3000", 32404, 30, {{0x26, 10}, {0x27, 10}, {0x28, 10}}, 0x1b, 0x1c},
    {"rc_write_imm_8", 1824, 20, {{0x0b, 10}, {0x11, 10}}, 0x11, 0x11},
    {"rc_write_imm_3000", 33224, 40, {{0x06, 10}, {0x07, 10}, {0x09, 10}, {0x11, 10}}, 0x12, 0x12},
    {"rc_send_imm_64", 2444, 22, {{0x05, 11}, {0x11, 11}}, 0x11, 0x11},
    {"rc_send_imm_3000", 33064, 40, {{0x00, 10}, {0x01, 10}, {0x03, 10}, {0x11, 10}}, 0x14, 0x14},
    {"rc_send_rnr_nak", 1564, 14, {{0x05, 7}, {0x11, 7}}, 0x14, 0x14},
    {"rc_write_bad_rkey", 200, 2, {{0x0a, 1}, {0x11, 1}}, 0x15, 0x15},
    {"rc_send_5000_loss", 76446, 89, {{0x00, 11}, {0x01, 43}, {0x02, 16}, {0x11, 19}}, 0x16, 0x16},
    {"rc_read_3000_loss", 16714, 21, {{0x0c, 6}, {0x0d, 5}, {0x0e, 5}, {0x0f, 5}}, 0x17, 0x17},
    {"rc_send_rdmacm_8", 9188, 74, {{0x64, 10}, {0x04, 32}, {0x11, 32}}, 0, 0},   // QPNs checked below
};

class FixtureFile : public ::testing::TestWithParam<FileFacts> {};

// The core round trip, for every packet: verify with the exact IP header, rebuild byte for byte,
// and recover the IPv4 ID a UDP socket would not show us.
TEST_P(FixtureFile, ParseRebuildAndRecoverId) {
    const FileFacts& ff = GetParam();
    EXPECT_EQ(std::filesystem::file_size(fixture_dir + "/" + ff.name + ".pcap"), ff.bytes);
    const auto frames = load(ff.name);
    ASSERT_EQ(frames.size(), ff.packets);
    std::map<uint8_t, int> ops;
    for (const PcapFrame& f : frames) {
        SCOPED_TRACE("frame " + std::to_string(f.frame_no));
        EXPECT_EQ(f.ip.dst_port, roce_v2_udp_port);
        EXPECT_EQ(f.ttl, 64);
        EXPECT_EQ(f.tos, 0);
        EXPECT_EQ(f.ip.ipv4_flags_df, 1);
        EXPECT_EQ(f.udp_checksum, 0);
        Packet p;
        ASSERT_EQ(parse(f.payload(), f.ip, true, p), ParseError::none);
        ++ops[p.bth.opcode];
        EXPECT_EQ(p.bth.pkey, 0xffff);
        EXPECT_EQ(p.bth.tver, 0);
        EXPECT_FALSE(p.bth.solicited);
        EXPECT_FALSE(p.bth.mig_req);
        EXPECT_EQ(p.bth.ack_req, expect_ack_req(p)) << opcode_name(p.bth.opcode);
        if (p.bth.opcode == 0x11 || p.bth.opcode == 0x12) {
            EXPECT_EQ(aeth_kind(p.aeth.syndrome) == AethKind::ack, p.aeth.syndrome == 0x1f);
        }
        if (ff.qpn_a || ff.qpn_b) {
            EXPECT_EQ(p.bth.dest_qp, from_b(f) ? ff.qpn_a : ff.qpn_b);
        }

        std::vector<uint8_t> out(f.udp_payload.size() + 64);
        const size_t n = build(p, p.payload, f.ip, out);
        ASSERT_EQ(n, f.udp_payload.size());
        out.resize(n);
        EXPECT_EQ(out, f.udp_payload);
        // The gather form: headers, the payload in place, pad + ICRC: the same bytes.
        size_t head = 0;
        std::vector<uint8_t> hdr(128);
        const size_t hn = build_gather(p, p.payload, f.ip, hdr, head);
        ASSERT_EQ(hn + p.payload.size(), f.udp_payload.size());
        std::vector<uint8_t> g(hdr.begin(), hdr.begin() + ptrdiff_t(head));
        g.insert(g.end(), p.payload.begin(), p.payload.end());
        g.insert(g.end(), hdr.begin() + ptrdiff_t(head), hdr.begin() + ptrdiff_t(hn));
        EXPECT_EQ(g, f.udp_payload);

        IpContext hidden = f.ip;
        hidden.ipv4_id = 0;
        hidden.ipv4_id_known = false;
        uint16_t id = 0;
        EXPECT_TRUE(icrc_verify_any_ipv4_id(hidden, f.payload(), &id));
        EXPECT_EQ(id, f.ip.ipv4_id);
        Packet q;
        EXPECT_EQ(parse(f.payload(), hidden, true, q), ParseError::none);
        // With the ID "known" but wrong, the strict check must fail.
        hidden.ipv4_id_known = true;
        hidden.ipv4_id = uint16_t(f.ip.ipv4_id ^ 1);
        EXPECT_EQ(parse(f.payload(), hidden, true, q), ParseError::bad_icrc);
    }
    EXPECT_EQ(ops, ff.opcodes);
}

INSTANTIATE_TEST_SUITE_P(RxePcap, FixtureFile, ::testing::ValuesIn(files),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Fixture, EveryPcapIsCovered) {
    size_t n = 0, packets = 0;
    for (const auto& e : std::filesystem::directory_iterator(fixture_dir)) {
        if (e.path().extension() != ".pcap")
            continue;
        ++n;
        const std::string stem = e.path().stem().string();
        const auto it = std::find_if(files.begin(), files.end(),
                                     [&](const FileFacts& f) { return stem == f.name; });
        EXPECT_NE(it, files.end()) << stem << " has no facts in this test";
        if (it != files.end())
            packets += it->packets;
    }
    EXPECT_EQ(n, files.size());
    EXPECT_EQ(packets, 572u);
}

TEST(Fixture, FirstRcSend64Crc) {
    const auto f = load("rc_send_64");
    ASSERT_FALSE(f.empty());
    EXPECT_EQ(icrc_compute(f[0].ip, f[0].payload()), 0xd7b91c25u);
    const auto& b = f[0].udp_payload;
    EXPECT_EQ(std::vector<uint8_t>(b.end() - 4, b.end()), (std::vector<uint8_t>{0x25, 0x1c, 0xb9, 0xd7}));
    EXPECT_EQ(f[0].ip.src_port, 49458);
}

// first..last PSN of the requests each host sent (per destination QP), in capture order.
struct PsnRange {
    const char* file;
    bool from_b;
    uint32_t qp;   // 0: any
    uint32_t first, last;
};

TEST(Fixture, RequestPsnRanges) {
    const PsnRange ranges[] = {
        {"rc_send_64", true, 0, 0x4d99ae, 0x4d99b2},
        {"rc_send_64", false, 0, 0x8dc61e, 0x8dc622},
        {"rc_send_5000_mtu1024", true, 0, 0x927378, 0x927390},
        {"rc_send_5000_mtu1024", false, 0, 0x0ba21d, 0x0ba235},
        {"rc_write_8", false, 0, 0x31b1c6, 0x31b1ca},
        {"rc_write_8", true, 0, 0x376a2f, 0x376a33},
        {"rc_write_3000", false, 0, 0xfff519, 0xfff527},
        {"rc_write_3000", true, 0, 0x1d12a1, 0x1d12af},
        {"rc_read_8", true, 0, 0x313ed0, 0x313ed4},
        {"rc_read_3000", true, 0, 0xb09f6f, 0xb09f7b},
        {"rc_atomic_fetch_add", true, 0, 0x9b347e, 0x9b3482},
        {"rc_atomic_cmp_swap", true, 0, 0x29ada8, 0x29adac},
        {"ud_send_64", true, 0, 0x83782f, 0x837833},
        {"ud_send_64", false, 0, 0x5f120e, 0x5f1212},
        {"uc_send_64", true, 0, 0xb2c001, 0xb2c005},
        {"uc_send_64", false, 0, 0x2d5561, 0x2d5565},
        {"uc_write_3000", false, 0, 0xde04ac, 0xde04ba},
        {"uc_write_3000", true, 0, 0x7ed573, 0x7ed581},
        {"rc_write_imm_8", true, 0, 0x123456, 0x12345a},
        {"rc_write_imm_8", false, 0, 0x654321, 0x654325},
        {"rc_write_imm_3000", true, 0, 0x123456, 0x123464},
        {"rc_write_imm_3000", false, 0, 0x654321, 0x65432f},
        {"rc_send_imm_64", true, 0, 0x123456, 0x12345a},
        {"rc_send_imm_64", false, 0, 0x654321, 0x654325},
        {"rc_send_imm_3000", true, 0, 0x123456, 0x123464},
        {"rc_send_imm_3000", false, 0, 0x654321, 0x65432f},
        {"rc_send_rnr_nak", true, 0, 0x123456, 0x123457},
        {"rc_send_rnr_nak", false, 0, 0x654321, 0x654322},
        {"rc_write_bad_rkey", true, 0, 0x123456, 0x123456},
        {"rc_send_5000_loss", true, 0, 0x1a9c26, 0x1a9c3e},
        {"rc_send_5000_loss", false, 0, 0x0ee688, 0x0ee69f},
        {"rc_read_3000_loss", true, 0, 0x67091d, 0x670929},
        {"rc_send_rdmacm_8", true, 1, 0, 5},
        {"rc_send_rdmacm_8", false, 1, 0, 3},
        {"rc_send_rdmacm_8", true, 0x12, 0xbd7acb, 0xbd7ad5},
        {"rc_send_rdmacm_8", false, 0x12, 0x2d7a76, 0x2d7a80},
        {"rc_send_rdmacm_8", true, 0x13, 0x593c25, 0x593c29},
        {"rc_send_rdmacm_8", false, 0x13, 0x26e6ef, 0x26e6f3},
    };
    for (const PsnRange& r : ranges) {
        SCOPED_TRACE(std::string(r.file) + (r.from_b ? " b->a" : " a->b") + " qp " + std::to_string(r.qp));
        std::vector<uint32_t> psns;
        for (const PcapFrame& f : load(r.file)) {
            const Packet p = parsed(f);
            if (from_b(f) == r.from_b && !is_response(p.bth.opcode) && (!r.qp || p.bth.dest_qp == r.qp))
                psns.push_back(p.bth.psn);
        }
        ASSERT_FALSE(psns.empty());
        EXPECT_EQ(psns.front(), r.first);
        EXPECT_EQ(psns.back(), r.last);
    }
}

TEST(Fixture, ReadResponsesCarryAethExceptMiddle) {
    for (const char* name : {"rc_read_3000", "rc_read_3000_loss", "rc_read_8"}) {
        std::vector<uint32_t> resp_psn;
        for (const PcapFrame& f : load(name)) {
            const Packet p = parsed(f);
            if (!is_response(p.bth.opcode))
                continue;
            resp_psn.push_back(p.bth.psn);
            EXPECT_EQ(p.has_aeth, p.bth.opcode != 0x0e);
            EXPECT_EQ(p.payload.size(), p.bth.opcode == 0x0f ? 952u : p.bth.opcode == 0x10 ? 8u : 1024u);
        }
        if (std::string(name) == "rc_read_3000") {
            EXPECT_EQ(resp_psn.front(), 0xb09f6fu);
            EXPECT_EQ(resp_psn.back(), 0xb09f7du);
        } else if (std::string(name) == "rc_read_3000_loss") {
            EXPECT_EQ(resp_psn.front(), 0x67091du);
            EXPECT_EQ(resp_psn.back(), 0x67092bu);
        }
    }
    // The re-issued read after the lost RESP_LAST: remaining 952 B at VA + 0x800, answered by a
    // lone RESPONSE_LAST.
    const auto f = load("rc_read_3000_loss");
    std::vector<Packet> reqs;
    for (const auto& fr : f) {
        const Packet p = parsed(fr);
        if (p.bth.opcode == 0x0c)
            reqs.push_back(p);
    }
    ASSERT_EQ(reqs.size(), 6u);
    EXPECT_EQ(reqs[2].bth.psn, 0x670922u);
    EXPECT_EQ(reqs[2].reth.dma_len, 952u);
    EXPECT_EQ(reqs[2].reth.va, reqs[0].reth.va + 0x800);
    EXPECT_EQ(reqs[2].reth.rkey, reqs[0].reth.rkey);
}

TEST(Fixture, WriteReth) {
    for (const auto& f : load("rc_write_3000")) {
        const Packet p = parsed(f);
        EXPECT_EQ(p.has_reth, p.bth.opcode == 0x06);
        if (p.has_reth) {
            EXPECT_EQ(p.reth.dma_len, 3000u);
        }
    }
    const auto bad = load("rc_write_bad_rkey");
    ASSERT_EQ(bad.size(), 2u);
    const Packet w = parsed(bad[0]), nak = parsed(bad[1]);
    EXPECT_EQ(w.reth.rkey, 0x77cu);
    EXPECT_EQ(nak.aeth.syndrome, 0x62);
    EXPECT_EQ(nak.aeth.syndrome, aeth_nak_syndrome(nak_remote_access));
    EXPECT_EQ(nak.aeth.msn, 0u);
    EXPECT_EQ(nak.bth.psn, 0x123456u);
}

TEST(Fixture, RnrNak) {
    int rnr = 0, acks = 0;
    for (const auto& f : load("rc_send_rnr_nak")) {
        const Packet p = parsed(f);
        if (p.bth.opcode != 0x11)
            continue;
        if (p.aeth.syndrome == 0x38) {
            ++rnr;
            EXPECT_EQ(aeth_kind(p.aeth.syndrome), AethKind::rnr_nak);
            EXPECT_EQ(p.aeth.syndrome, aeth_rnr_syndrome(0x18));
            EXPECT_EQ(p.aeth.msn, 0u);
            EXPECT_EQ(p.bth.psn, 0x123456u);
        } else {
            ++acks;
            EXPECT_EQ(p.aeth.syndrome, 0x1f);
        }
    }
    EXPECT_EQ(rnr, 3);
    EXPECT_EQ(acks, 4);
}

TEST(Fixture, SendLossNaks) {
    int seq_naks = 0, b_acks = 0;
    std::map<uint32_t, int> a_req_psns;
    int a_reqs = 0;
    for (const auto& f : load("rc_send_5000_loss")) {
        const Packet p = parsed(f);
        if (p.bth.opcode == 0x11 && from_b(f)) {
            if (p.aeth.syndrome == 0x60)
                ++seq_naks;
            else if (p.aeth.syndrome == 0x1f)
                ++b_acks;
        }
        if (p.bth.opcode != 0x11 && !from_b(f)) {
            ++a_reqs;
            ++a_req_psns[p.bth.psn];
        }
    }
    EXPECT_EQ(seq_naks, 5);
    EXPECT_EQ(b_acks, 9);
    EXPECT_EQ(a_reqs, 45);
    EXPECT_EQ(a_req_psns.size(), 25u);
}

TEST(Fixture, NaturalRetransmissions) {
    // rc_send_5000_mtu1024: hosta resent its last message (PSN 0x0ba231..0x0ba235) ~6 ms later;
    // hostb ACKed each duplicate (PSN 0x0ba235, MSN 5): 1 original + 5 duplicate ACKs.
    std::map<uint32_t, std::vector<int64_t>> a_req;
    int last_acks = 0;
    for (const auto& f : load("rc_send_5000_mtu1024")) {
        const Packet p = parsed(f);
        if (!from_b(f) && p.bth.opcode != 0x11)
            a_req[p.bth.psn].push_back(f.ts_ns);
        if (from_b(f) && p.bth.opcode == 0x11 && p.bth.psn == 0x0ba235) {
            ++last_acks;
            EXPECT_EQ(p.aeth.msn, 5u);
        }
    }
    EXPECT_EQ(last_acks, 6);
    for (const auto& [psn, ts] : a_req) {
        const bool resent = psn >= 0x0ba231 && psn <= 0x0ba235;
        ASSERT_EQ(ts.size(), resent ? 2u : 1u) << std::hex << psn;
        if (resent) {
            EXPECT_GT(ts[1] - ts[0], 5'000'000);
            EXPECT_LT(ts[1] - ts[0], 8'000'000);
        }
    }
    // rc_send_imm_64: hostb sent PSN 0x123459 twice, hosta ACKed it twice.
    int sends = 0, acks = 0;
    for (const auto& f : load("rc_send_imm_64")) {
        const Packet p = parsed(f);
        if (p.bth.psn == 0x123459) {
            sends += p.bth.opcode == 0x05 && from_b(f);
            acks += p.bth.opcode == 0x11 && !from_b(f);
        }
    }
    EXPECT_EQ(sends, 2);
    EXPECT_EQ(acks, 2);
}

TEST(Fixture, RnrRetryTiming) {
    // hostb resends ~48 ms after each RNR NAK (timer 0x18 = 40.96 ms plus rxe's slack), 56-63 ms
    // between tries.
    int64_t last_nak = 0, last_try = 0;
    int tries = 0;
    for (const auto& f : load("rc_send_rnr_nak")) {
        const Packet p = parsed(f);
        if (p.bth.opcode == 0x11 && p.aeth.syndrome == 0x38)
            last_nak = f.ts_ns;
        if (p.bth.opcode == 0x05 && p.bth.psn == 0x123456) {
            if (tries++ > 0) {
                EXPECT_GT(f.ts_ns - last_nak, 40'960'000);
                EXPECT_LT(f.ts_ns - last_nak, 50'000'000);
                EXPECT_GE(f.ts_ns - last_try, 55'000'000);
                EXPECT_LE(f.ts_ns - last_try, 64'000'000);
            }
            last_try = f.ts_ns;
        }
    }
    EXPECT_EQ(tries, 4);
}

TEST(Fixture, UdDeth) {
    for (const auto& f : load("ud_send_64")) {
        const Packet p = parsed(f);
        ASSERT_TRUE(p.has_deth);
        EXPECT_EQ(p.deth.qkey, 0x11111111u);
        EXPECT_EQ(p.deth.src_qp, from_b(f) ? 0x1au : 0x19u);
        EXPECT_FALSE(p.bth.ack_req);
        EXPECT_EQ(p.payload.size(), 64u);
        EXPECT_EQ(f.ip.src_port, from_b(f) ? 64407 : 58149);
        EXPECT_EQ(f.udp_payload.size() + 8 + 20 + 14, 130u);   // Ethernet + IPv4 + UDP
    }
}

TEST(Fixture, RdmaCm) {
    int mads = 0;
    for (const auto& f : load("rc_send_rdmacm_8")) {
        const Packet p = parsed(f);
        EXPECT_EQ(p.bth.pad_count, (f.frame_no == 16 || f.frame_no == 18) ? 2 : 0);
        if (f.frame_no == 16 || f.frame_no == 18) {
            EXPECT_EQ(p.payload.size(), 2u);
        }
        if (p.bth.opcode == 0x64) {
            ++mads;
            EXPECT_EQ(p.bth.dest_qp, 1u);
            EXPECT_EQ(p.deth.qkey, 0x80010000u);
            EXPECT_EQ(p.deth.src_qp, 1u);
            EXPECT_EQ(p.payload.size(), 256u);
            EXPECT_TRUE(p.bth.ack_req);
        }
    }
    EXPECT_EQ(mads, 10);
}

TEST(Fixture, ImmediateData) {
    for (const char* name : {"rc_write_imm_8", "rc_write_imm_3000", "rc_send_imm_3000"}) {
        std::vector<uint32_t> from_b_imm, from_a_imm;
        for (const auto& f : load(name)) {
            const Packet p = parsed(f);
            if (!p.has_imm)
                continue;
            (from_b(f) ? from_b_imm : from_a_imm).push_back(p.imm);
            // Payload pattern: byte i = i + 0x00 (client) / i + 0x80 (server), per message.
            if (p.bth.opcode == 0x0b) {
                for (size_t i = 0; i < p.payload.size(); ++i)
                    EXPECT_EQ(p.payload[i], uint8_t(i + (from_b(f) ? 0 : 0x80)));
            }
        }
        ASSERT_EQ(from_b_imm.size(), 5u) << name;
        ASSERT_EQ(from_a_imm.size(), 5u) << name;
        for (uint32_t i = 0; i < 5; ++i) {
            EXPECT_EQ(from_b_imm[i], 0xa0b0c100u + i);
            EXPECT_EQ(from_a_imm[i], 0xa0b0c200u + i);
        }
    }
}

TEST(Fixture, AtomicFrameSizes) {
    for (const char* name : {"rc_atomic_fetch_add", "rc_atomic_cmp_swap"}) {
        for (const auto& f : load(name)) {
            const Packet p = parsed(f);
            const size_t frame = f.udp_payload.size() + 8 + 20 + 14;
            EXPECT_EQ(frame, p.has_atomic ? 86u : 70u);
            EXPECT_EQ(p.has_atomic_ack, !p.has_atomic);
        }
    }
}

TEST(Fixture, PlainAcksAre62ByteFrames) {
    for (const auto& ff : files) {
        for (const auto& f : load(ff.name)) {
            const Packet p = parsed(f);
            if (p.bth.opcode == 0x11) {
                EXPECT_EQ(f.udp_payload.size() + 8 + 20 + 14, 62u);
            }
        }
    }
}

} // namespace
