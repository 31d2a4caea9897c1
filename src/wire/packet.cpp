// Packet assembly and parsing. Parsing sees untrusted bytes from any UDP sender: every length is
// checked before the bytes are touched, and a bad packet costs one error code, nothing more.
#include "wire/packet.hpp"

#include <cstring>

#include "wire/byteorder.hpp"
#include "wire/icrc.hpp"

namespace roce::wire {
namespace {

inline size_t pad_for(size_t payload_len) { return (4 - (payload_len & 3)) & 3; }

// Extension headers in the order IBTA fixes for every opcode that has several:
// DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, CNP reserved.
uint8_t* write_ext(uint16_t m, const Packet& pkt, uint8_t* p) {
    if (m & hdr_deth) { encode(pkt.deth, p); p += deth_size; }
    if (m & hdr_reth) { encode(pkt.reth, p); p += reth_size; }
    if (m & hdr_atomic) { encode(pkt.atomic, p); p += atomic_eth_size; }
    if (m & hdr_aeth) { encode(pkt.aeth, p); p += aeth_size; }
    if (m & hdr_atomic_ack) { encode(pkt.atomic_ack, p); p += atomic_ack_eth_size; }
    if (m & hdr_imm) { be::store32(p, pkt.imm); p += imm_size; }
    if (m & hdr_ieth) { be::store32(p, pkt.ieth); p += ieth_size; }
    if (m & hdr_cnp_pad) { std::memset(p, 0, cnp_reserved_size); p += cnp_reserved_size; }
    return p;
}

// Fills every field of `pkt` but bth and payload: the headers `m` says the packet has, decoded;
// the others zero (parse overwrites its output fully).
const uint8_t* read_ext(uint16_t m, const uint8_t* p, Packet& pkt) {
    pkt.has_deth = m & hdr_deth;
    pkt.has_reth = m & hdr_reth;
    pkt.has_atomic = m & hdr_atomic;
    pkt.has_aeth = m & hdr_aeth;
    pkt.has_atomic_ack = m & hdr_atomic_ack;
    pkt.has_imm = m & hdr_imm;
    pkt.has_ieth = m & hdr_ieth;
    pkt.deth = {};
    pkt.reth = {};
    pkt.atomic = {};
    pkt.aeth = {};
    pkt.atomic_ack = {};
    pkt.imm = pkt.ieth = 0;
    if (pkt.has_deth) { decode(p, pkt.deth); p += deth_size; }
    if (pkt.has_reth) { decode(p, pkt.reth); p += reth_size; }
    if (pkt.has_atomic) { decode(p, pkt.atomic); p += atomic_eth_size; }
    if (pkt.has_aeth) { decode(p, pkt.aeth); p += aeth_size; }
    if (pkt.has_atomic_ack) { decode(p, pkt.atomic_ack); p += atomic_ack_eth_size; }
    if (pkt.has_imm) { pkt.imm = be::load32(p); p += imm_size; }
    if (pkt.has_ieth) { pkt.ieth = be::load32(p); p += ieth_size; }
    if (m & hdr_cnp_pad) p += cnp_reserved_size;
    return p;
}

} // namespace

size_t packet_size(uint8_t op, size_t payload_len) {
    const uint16_t m = opcode_headers(op);
    if (!(m & op_valid) || (payload_len && !(m & hdr_payload)))
        return 0;
    return bth_size + opcode_ext_size(op) + payload_len + pad_for(payload_len) + icrc_size;
}

size_t build(const Packet& pkt, std::span<const uint8_t> payload, const IpContext& ip,
             std::span<uint8_t> out) {
    const size_t total = packet_size(pkt.bth.opcode, payload.size());
    if (total == 0 || total > out.size())
        return 0;
    if (!payload.empty())
        std::memcpy(out.data() + header_size(pkt.bth.opcode), payload.data(), payload.size());
    return build_in_place(pkt, payload.size(), ip, out);
}

size_t header_size(uint8_t op) { return bth_size + opcode_ext_size(op); }

size_t build_in_place(const Packet& pkt, size_t payload_len, const IpContext& ip, std::span<uint8_t> out) {
    const uint8_t op = pkt.bth.opcode;
    const size_t total = packet_size(op, payload_len);
    if (total == 0 || total > out.size())
        return 0;
    const size_t pad = pad_for(payload_len);
    Bth bth = pkt.bth;
    bth.pad_count = uint8_t(pad);
    uint8_t* p = out.data();
    encode(bth, p);
    p = write_ext(opcode_headers(op), pkt, p + bth_size) + payload_len;
    std::memset(p, 0, pad);
    p += pad;
    const uint32_t crc = icrc_compute(ip, std::span<const uint8_t>(out.data(), total));
    p[0] = uint8_t(crc);
    p[1] = uint8_t(crc >> 8);
    p[2] = uint8_t(crc >> 16);
    p[3] = uint8_t(crc >> 24);
    return total;
}

size_t build_gather(const Packet& pkt, std::span<const uint8_t> payload, const IpContext& ip,
                    std::span<uint8_t> out, size_t& head) {
    const uint8_t op = pkt.bth.opcode;
    const size_t total = packet_size(op, payload.size());
    const size_t pad = pad_for(payload.size());
    head = total ? total - payload.size() - pad - icrc_size : 0;
    if (total == 0 || head + pad + icrc_size > out.size())
        return 0;
    Bth bth = pkt.bth;
    bth.pad_count = uint8_t(pad);
    uint8_t* p = out.data();
    encode(bth, p);
    p = write_ext(opcode_headers(op), pkt, p + bth_size);
    std::memset(p, 0, pad);
    const std::span<const uint8_t> parts[3] = {{out.data(), head}, payload, {p, pad}};
    const uint32_t crc = icrc_compute_parts(ip, parts);
    p += pad;
    p[0] = uint8_t(crc);
    p[1] = uint8_t(crc >> 8);
    p[2] = uint8_t(crc >> 16);
    p[3] = uint8_t(crc >> 24);
    return head + pad + icrc_size;
}

ParseError parse(std::span<const uint8_t> udp_payload, const IpContext& ip, bool verify_icrc,
                 Packet& out) {
    const size_t n = udp_payload.size();
    const uint8_t* p = udp_payload.data();
    if (n < bth_size + icrc_size)
        return ParseError::too_short;
    // Decoded into `out` directly, no local Packet copied out at the end: zeroing and copying
    // 128 bytes (rep stos, then wide loads of narrow stores) was half of a small packet's parse.
    Bth bth;
    decode(p, bth);
    if (bth.tver != 0)
        return ParseError::bad_version;
    const uint16_t m = opcode_headers(bth.opcode);
    if (!(m & op_valid))
        return ParseError::bad_opcode;
    const size_t hdrs = bth_size + opcode_ext_size(bth.opcode);
    if (n < hdrs + icrc_size)
        return ParseError::too_short;
    const size_t body = n - hdrs - icrc_size;   // payload + pad
    if ((body & 3) != 0 || body < bth.pad_count || (body && !(m & hdr_payload)))
        return ParseError::bad_pad;
    if (verify_icrc) {
        const bool ok = (ip.ipv6 || ip.ipv4_id_known) ? icrc_verify(ip, udp_payload)
                                                      : icrc_verify_any_ipv4_id(ip, udp_payload);
        if (!ok)
            return ParseError::bad_icrc;
    }
    out.bth = bth;
    const uint8_t* q = read_ext(m, p + bth_size, out);
    out.payload = std::span<const uint8_t>(q, body - bth.pad_count);
    return ParseError::none;
}

} // namespace roce::wire
