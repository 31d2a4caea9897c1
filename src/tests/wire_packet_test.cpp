// Header codecs, the opcode table, and build/parse on synthetic and hostile input.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "wire/icrc.hpp"
#include "wire/packet.hpp"
#include "wire/pcap.hpp"

using namespace roce::wire;

namespace {

IpContext some_ip() {
    IpContext ip;
    ip.src_ip[0] = 10; ip.src_ip[3] = 2;
    ip.dst_ip[0] = 10; ip.dst_ip[3] = 1;
    ip.src_port = 0xc123;
    ip.dst_port = roce_v2_udp_port;
    ip.ipv4_id = 0x1234;
    return ip;
}

TEST(Headers, BthBitPositions) {
    Bth h;
    h.opcode = 0x0a;
    h.solicited = true;
    h.mig_req = true;
    h.pad_count = 3;
    h.tver = 0x5;
    h.pkey = 0x8001;
    h.fecn = true;
    h.becn = false;
    h.dest_qp = 0xabcdef;
    h.ack_req = true;
    h.psn = 0x123456;
    uint8_t b[12];
    encode(h, b);
    const uint8_t want[12] = {0x0a, 0xf5, 0x80, 0x01, 0x80, 0xab, 0xcd, 0xef, 0x80, 0x12, 0x34, 0x56};
    EXPECT_EQ(0, std::memcmp(b, want, 12));
    Bth d;
    decode(b, d);
    EXPECT_EQ(d.opcode, h.opcode);
    EXPECT_EQ(d.solicited, h.solicited);
    EXPECT_EQ(d.mig_req, h.mig_req);
    EXPECT_EQ(d.pad_count, h.pad_count);
    EXPECT_EQ(d.tver, h.tver);
    EXPECT_EQ(d.pkey, h.pkey);
    EXPECT_EQ(d.fecn, h.fecn);
    EXPECT_EQ(d.becn, h.becn);
    EXPECT_EQ(d.dest_qp, h.dest_qp);
    EXPECT_EQ(d.ack_req, h.ack_req);
    EXPECT_EQ(d.psn, h.psn);
    b[4] = 0x40;
    decode(b, d);
    EXPECT_FALSE(d.fecn);
    EXPECT_TRUE(d.becn);
}

TEST(Headers, ExtendedHeadersBigEndian) {
    uint8_t b[28];
    encode(Reth{0x0102030405060708ull, 0x090a0b0c, 0x0d0e0f10}, b);
    for (int i = 0; i < 16; ++i)
        EXPECT_EQ(b[i], i + 1);
    Reth r;
    decode(b, r);
    EXPECT_EQ(r.va, 0x0102030405060708ull);
    EXPECT_EQ(r.rkey, 0x090a0b0cu);
    EXPECT_EQ(r.dma_len, 0x0d0e0f10u);

    encode(Aeth{0x62, 0xabcdef}, b);
    EXPECT_EQ(b[0], 0x62);
    EXPECT_EQ(b[1], 0xab);
    EXPECT_EQ(b[3], 0xef);
    Aeth a;
    decode(b, a);
    EXPECT_EQ(a.syndrome, 0x62);
    EXPECT_EQ(a.msn, 0xabcdefu);

    std::memset(b, 0xee, sizeof b);
    encode(Deth{0x80010000, 0x000001}, b);
    const uint8_t dw[8] = {0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
    EXPECT_EQ(0, std::memcmp(b, dw, 8));
    Deth dd;
    b[4] = 0x77;   // reserved: ignored on receive
    decode(b, dd);
    EXPECT_EQ(dd.qkey, 0x80010000u);
    EXPECT_EQ(dd.src_qp, 1u);

    const AtomicEth ae{0x1111222233334444ull, 0x55667788, 0x99aabbccddeeff00ull, 0x0123456789abcdefull};
    encode(ae, b);
    EXPECT_EQ(b[12], 0x99);
    EXPECT_EQ(b[20], 0x01);
    EXPECT_EQ(b[27], 0xef);
    AtomicEth ad;
    decode(b, ad);
    EXPECT_EQ(ad.va, ae.va);
    EXPECT_EQ(ad.rkey, ae.rkey);
    EXPECT_EQ(ad.swap_add, ae.swap_add);
    EXPECT_EQ(ad.compare, ae.compare);

    encode(AtomicAckEth{0xfedcba9876543210ull}, b);
    EXPECT_EQ(b[0], 0xfe);
    AtomicAckEth aa;
    decode(b, aa);
    EXPECT_EQ(aa.orig, 0xfedcba9876543210ull);
}

TEST(Headers, AethAndPsnHelpers) {
    EXPECT_EQ(aeth_kind(0x1f), AethKind::ack);
    EXPECT_EQ(aeth_kind(0x38), AethKind::rnr_nak);
    EXPECT_EQ(aeth_kind(0x60), AethKind::nak);
    EXPECT_EQ(aeth_kind(0x40), AethKind::reserved);
    EXPECT_EQ(psn_diff(0x000001, 0xffffff), 2);
    EXPECT_EQ(psn_diff(0xffffff, 0x000001), -2);
    EXPECT_EQ(psn_add(0xffffff, 2), 1u);
}

TEST(Opcode, Table38) {
    struct Row { Opcode op; uint16_t hdrs; size_t ext; };
    const uint16_t P = hdr_payload;
    const Row rows[] = {
        {Opcode::rc_send_first, P, 0},            {Opcode::rc_send_middle, P, 0},
        {Opcode::rc_send_last, P, 0},             {Opcode::rc_send_last_imm, P | hdr_imm, 4},
        {Opcode::rc_send_only, P, 0},             {Opcode::rc_send_only_imm, P | hdr_imm, 4},
        {Opcode::rc_write_first, P | hdr_reth, 16}, {Opcode::rc_write_middle, P, 0},
        {Opcode::rc_write_last, P, 0},            {Opcode::rc_write_last_imm, P | hdr_imm, 4},
        {Opcode::rc_write_only, P | hdr_reth, 16},
        {Opcode::rc_write_only_imm, P | hdr_reth | hdr_imm, 20},
        {Opcode::rc_read_request, hdr_reth, 16},
        {Opcode::rc_read_response_first, P | hdr_aeth, 4},
        {Opcode::rc_read_response_middle, P, 0},
        {Opcode::rc_read_response_last, P | hdr_aeth, 4},
        {Opcode::rc_read_response_only, P | hdr_aeth, 4},
        {Opcode::rc_ack, hdr_aeth, 4},
        {Opcode::rc_atomic_ack, hdr_aeth | hdr_atomic_ack, 12},
        {Opcode::rc_cmp_swap, hdr_atomic, 28},   {Opcode::rc_fetch_add, hdr_atomic, 28},
        {Opcode::rc_send_last_inv, P | hdr_ieth, 4}, {Opcode::rc_send_only_inv, P | hdr_ieth, 4},
        {Opcode::uc_send_first, P, 0},            {Opcode::uc_send_middle, P, 0},
        {Opcode::uc_send_last, P, 0},             {Opcode::uc_send_last_imm, P | hdr_imm, 4},
        {Opcode::uc_send_only, P, 0},             {Opcode::uc_send_only_imm, P | hdr_imm, 4},
        {Opcode::uc_write_first, P | hdr_reth, 16}, {Opcode::uc_write_middle, P, 0},
        {Opcode::uc_write_last, P, 0},            {Opcode::uc_write_last_imm, P | hdr_imm, 4},
        {Opcode::uc_write_only, P | hdr_reth, 16},
        {Opcode::uc_write_only_imm, P | hdr_reth | hdr_imm, 20},
        {Opcode::ud_send_only, P | hdr_deth, 8}, {Opcode::ud_send_only_imm, P | hdr_deth | hdr_imm, 12},
        {Opcode::cnp, hdr_cnp_pad, 16},
    };
    int valid = 0;
    for (const Row& r : rows) {
        const uint8_t op = uint8_t(r.op);
        EXPECT_EQ(opcode_headers(op), r.hdrs | op_valid) << opcode_name(op);
        EXPECT_EQ(opcode_ext_size(op), r.ext) << opcode_name(op);
        EXPECT_STRNE(opcode_name(op), "RESERVED");
    }
    for (int op = 0; op < 256; ++op)
        valid += (opcode_headers(uint8_t(op)) & op_valid) != 0;
    EXPECT_EQ(valid, int(std::size(rows)));
    EXPECT_STREQ(opcode_name(0x15), "RESERVED");
    EXPECT_EQ(opcode_ext_size(0x15), 0u);
    EXPECT_STREQ(opcode_name(0x11), "RC_ACKNOWLEDGE");
}

// Every implemented opcode: build with all header structs filled, parse back, compare.
TEST(Packet, RoundTripEveryOpcode) {
    std::mt19937 rng(5);
    std::vector<uint8_t> data(300);
    for (auto& b : data) b = uint8_t(rng());
    for (int op = 0; op < 256; ++op) {
        const uint16_t m = opcode_headers(uint8_t(op));
        if (!(m & op_valid))
            continue;
        for (size_t len : {0u, 1u, 2u, 3u, 4u, 5u, 255u}) {
            if (len && !(m & hdr_payload))
                continue;
            SCOPED_TRACE(std::string(opcode_name(uint8_t(op))) + " len " + std::to_string(len));
            Packet p;
            p.bth.opcode = uint8_t(op);
            p.bth.dest_qp = 0x123456;
            p.bth.psn = 0xfffffe;
            p.bth.ack_req = true;
            p.bth.solicited = true;
            p.bth.pad_count = 3;   // ignored by build
            p.reth = {0xdead0000beefull, 0x1234, 300};
            p.aeth = {0x60, 0x42};
            p.deth = {0x11111111, 0x1a};
            p.atomic = {0x1000, 7, 1, 2};
            p.atomic_ack = {0x77};
            p.imm = 0xa0b0c100;
            p.ieth = 0xcafe;
            std::vector<uint8_t> out(512);
            const size_t n = build(p, std::span(data.data(), len), some_ip(), out);
            ASSERT_EQ(n, packet_size(uint8_t(op), len));
            ASSERT_EQ(n % 4, 0u);
            out.resize(n);
            Packet q;
            ASSERT_EQ(parse(out, some_ip(), true, q), ParseError::none);
            EXPECT_EQ(q.bth.opcode, op);
            EXPECT_EQ(q.bth.pad_count, (4 - len % 4) % 4);
            EXPECT_EQ(q.bth.psn, 0xfffffeu);
            EXPECT_EQ(q.bth.dest_qp, 0x123456u);
            EXPECT_TRUE(q.bth.ack_req);
            EXPECT_EQ(q.has_reth, (m & hdr_reth) != 0);
            EXPECT_EQ(q.has_aeth, (m & hdr_aeth) != 0);
            EXPECT_EQ(q.has_deth, (m & hdr_deth) != 0);
            EXPECT_EQ(q.has_atomic, (m & hdr_atomic) != 0);
            EXPECT_EQ(q.has_atomic_ack, (m & hdr_atomic_ack) != 0);
            EXPECT_EQ(q.has_imm, (m & hdr_imm) != 0);
            EXPECT_EQ(q.has_ieth, (m & hdr_ieth) != 0);
            if (q.has_reth) {
                EXPECT_EQ(q.reth.va, p.reth.va);
                EXPECT_EQ(q.reth.rkey, p.reth.rkey);
            }
            if (q.has_aeth) { EXPECT_EQ(q.aeth.msn, 0x42u); }
            if (q.has_deth) { EXPECT_EQ(q.deth.qkey, 0x11111111u); }
            if (q.has_atomic) { EXPECT_EQ(q.atomic.compare, 2u); }
            if (q.has_atomic_ack) { EXPECT_EQ(q.atomic_ack.orig, 0x77u); }
            if (q.has_imm) { EXPECT_EQ(q.imm, 0xa0b0c100u); }
            if (q.has_ieth) { EXPECT_EQ(q.ieth, 0xcafeu); }
            ASSERT_EQ(q.payload.size(), len);
            EXPECT_TRUE(std::equal(q.payload.begin(), q.payload.end(), data.begin()));
            // Pad bytes are zero; the payload span points into the parsed buffer.
            for (size_t i = n - 4 - q.bth.pad_count; i < n - 4; ++i)
                EXPECT_EQ(out[i], 0);
            if (len) { EXPECT_EQ(q.payload.data(), out.data() + (n - 4 - q.bth.pad_count - len)); }
        }
    }
}

TEST(Packet, BuildRejects) {
    Packet p;
    std::vector<uint8_t> out(256);
    const uint8_t data[4] = {};
    p.bth.opcode = 0x15;   // reserved
    EXPECT_EQ(build(p, {}, some_ip(), out), 0u);
    p.bth.opcode = uint8_t(Opcode::rc_ack);
    EXPECT_EQ(build(p, data, some_ip(), out), 0u);   // ACKs carry no payload
    EXPECT_EQ(build(p, {}, some_ip(), std::span(out.data(), 19)), 0u);
    EXPECT_EQ(build(p, {}, some_ip(), std::span(out.data(), 20)), 20u);
    p.bth.opcode = uint8_t(Opcode::cnp);
    EXPECT_EQ(build(p, {}, some_ip(), out), 12u + 16 + 4);
    Packet q;
    EXPECT_EQ(parse(std::span(out.data(), 32), some_ip(), true, q), ParseError::none);
}

std::vector<uint8_t> built(uint8_t op, size_t len) {
    Packet p;
    p.bth.opcode = op;
    std::vector<uint8_t> data(len, 0xab), out(len + 128);
    out.resize(build(p, data, some_ip(), out));
    return out;
}

TEST(Packet, ParseErrors) {
    Packet q;
    auto pkt = built(uint8_t(Opcode::rc_send_only), 8);
    EXPECT_EQ(parse(std::span(pkt.data(), 15), some_ip(), false, q), ParseError::too_short);
    auto v = pkt;
    v[1] |= 0x01;   // TVer 1
    EXPECT_EQ(parse(v, some_ip(), false, q), ParseError::bad_version);
    v = pkt;
    v[0] = 0x15;
    EXPECT_EQ(parse(v, some_ip(), false, q), ParseError::bad_opcode);
    v[0] = 0x80;
    EXPECT_EQ(parse(v, some_ip(), false, q), ParseError::bad_opcode);
    // Too short for the extension headers.
    auto w = built(uint8_t(Opcode::rc_write_only), 0);   // 12 + 16 + 4
    EXPECT_EQ(parse(std::span(w.data(), 24), some_ip(), false, q), ParseError::too_short);
    // Body not a multiple of 4.
    v = pkt;
    v.push_back(0);
    EXPECT_EQ(parse(v, some_ip(), false, q), ParseError::bad_pad);
    // PadCnt larger than the body.
    auto e = built(uint8_t(Opcode::rc_send_only), 0);
    e[1] |= 0x30;
    EXPECT_EQ(parse(e, some_ip(), false, q), ParseError::bad_pad);
    // Payload on an ACK.
    auto a = built(uint8_t(Opcode::rc_ack), 0);
    a.insert(a.end() - 4, {0, 0, 0, 0});
    EXPECT_EQ(parse(a, some_ip(), false, q), ParseError::bad_pad);
    // Bad ICRC only when asked to verify.
    v = pkt;
    v.back() ^= 1;
    EXPECT_EQ(parse(v, some_ip(), false, q), ParseError::none);
    EXPECT_EQ(parse(v, some_ip(), true, q), ParseError::bad_icrc);
}

TEST(Packet, TruncatedCapturesNeverParse) {
    size_t checked = 0;
    for (const char* name : {"rc_write_3000", "rc_read_3000", "rc_atomic_cmp_swap", "ud_send_64",
                             "rc_send_rdmacm_8", "rc_write_imm_8"}) {
        std::vector<PcapFrame> frames;
        std::string err;
        ASSERT_EQ(read_pcap(std::string(ROCE_FIXTURE_DIR) + "/" + name + ".pcap", frames, err), roce::Status::ok);
        for (const auto& f : frames) {
            for (size_t len = 0; len < f.udp_payload.size(); ++len) {
                // A fresh heap copy of exactly `len` bytes so a sanitizer sees any over-read.
                std::vector<uint8_t> cut(f.udp_payload.begin(), f.udp_payload.begin() + ptrdiff_t(len));
                Packet q;
                EXPECT_NE(parse(cut, f.ip, true, q), ParseError::none) << name << " len " << len;
                (void)parse(cut, f.ip, false, q);
                IpContext hidden = f.ip;
                hidden.ipv4_id_known = false;
                EXPECT_NE(parse(cut, hidden, true, q), ParseError::none);
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 10000u);
}

TEST(Packet, RandomBytesNeverCrash) {
    std::mt19937 rng(77);
    int accepted = 0;
    for (int t = 0; t < 200000; ++t) {
        std::vector<uint8_t> b(rng() % 80);
        for (auto& x : b) x = uint8_t(rng());
        if (!b.empty() && (rng() & 1))
            b[0] = uint8_t(rng() % 0x30);   // mostly valid opcodes
        if (b.size() > 1) b[1] &= 0xf0;   // TVer 0
        Packet q;
        IpContext ip = some_ip();
        ip.ipv4_id_known = rng() & 1;
        accepted += parse(b, ip, true, q) == ParseError::none;
        (void)parse(b, ip, false, q);
    }
    EXPECT_LE(accepted, 8);   // needs a valid ICRC, or an ID that fixes it (2^-16)
}

} // namespace
