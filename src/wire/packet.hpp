// RoCEv2 packet assembly and parsing above UDP: BTH, extension headers, payload, pad, ICRC.
// The IP and UDP headers are the kernel's (we send over a UDP socket); the ICRC covers them, so
// both build and parse take the addressing context (IpContext) the ICRC needs.
//
// Packet layout after the UDP header:
//   +-----+---------------------------+----------------+-----+-------+
//   | BTH | RETH/AETH/DETH/AtomicETH/ | payload        | pad | ICRC  |
//   | 12B | AtomicAckETH/ImmDt/IETH   | 0..MTU bytes   | 0-3 | 4B LE |
//   +-----+---------------------------+----------------+-----+-------+
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/headers.hpp"
#include "wire/opcode.hpp"

namespace roce::wire {

// What the ICRC needs of the IP/UDP headers that the kernel writes.
struct IpContext {
    bool ipv6 = false;
    uint8_t src_ip[16] = {};   // IPv4: first 4 bytes, network order
    uint8_t dst_ip[16] = {};
    uint16_t src_port = 0;     // host order
    uint16_t dst_port = 0;     // host order
    uint16_t ipv4_id = 0;      // IPv4 identification (0 for DF packets from unconnected sockets)
    uint8_t ipv4_flags_df = 1; // DF bit set
    // A UDP socket does not show the received IPv4 ID: parse() then accepts any ID that makes
    // the ICRC valid (icrc_verify_any_ipv4_id).
    bool ipv4_id_known = true;
};

// Decoded view of one packet. Pointers/spans point into the parsed buffer.
struct Packet {
    Bth bth{};
    bool has_reth = false, has_aeth = false, has_deth = false, has_atomic = false,
         has_atomic_ack = false, has_imm = false, has_ieth = false;
    Reth reth{};
    Aeth aeth{};
    Deth deth{};
    AtomicEth atomic{};
    AtomicAckEth atomic_ack{};
    uint32_t imm = 0;     // host order
    uint32_t ieth = 0;    // host order
    std::span<const uint8_t> payload;   // without pad
};

enum class ParseError : uint8_t {
    none,
    too_short,      // shorter than its headers + ICRC
    bad_version,    // BTH TVer != 0
    bad_opcode,     // opcode we do not implement / reserved
    bad_pad,        // pad count inconsistent with length
    bad_icrc,
};

// Writes BTH + the extension headers `pkt` says it has + payload + pad + ICRC into `out`.
// Pad count is computed from the payload length (pkt.bth.pad_count is ignored). Returns the
// number of bytes written (the UDP payload length), or 0 if `out` is too small.
// The opcode alone decides which extension headers are written (IBTA table 38); the has_*
// flags are not consulted, so a caller only fills the header structs its opcode needs. Also
// returns 0 for an opcode we do not implement, or a payload on an opcode that carries none.
// Pad bytes are zero; CNP's 16 reserved bytes are zero.
size_t build(const Packet& pkt, std::span<const uint8_t> payload, const IpContext& ip,
             std::span<uint8_t> out);

// Gather form of build(), for sending without copying the payload: writes BTH + extension
// headers into `out`, then pad + ICRC right behind them; the ICRC covers headers, `payload`
// (read where it is, not copied) and pad. The packet on the wire is out[0, head) + payload +
// out[head, returned). Returns 0 like build(); `head` is the header length.
size_t build_gather(const Packet& pkt, std::span<const uint8_t> payload, const IpContext& ip,
                    std::span<uint8_t> out, size_t& head);

// build() around a payload already in place: the caller wrote its `payload_len` bytes at
// out[header_size(opcode), ...) (gathering pieces there itself, instead of into a buffer that
// build() then copies again); writes the headers before and pad + ICRC after. Returns like build().
size_t build_in_place(const Packet& pkt, size_t payload_len, const IpContext& ip, std::span<uint8_t> out);

// BTH + extension headers of `op`: where build_in_place() expects the payload.
size_t header_size(uint8_t op);

// Bytes build() writes for `op` with `payload_len` bytes of payload (0 for invalid opcodes).
size_t packet_size(uint8_t op, size_t payload_len);

// Parses a UDP payload. When `verify_icrc` is set the ICRC is checked against `ip`; for IPv4
// packets whose identification is unknown (a UDP socket does not show it) see
// icrc.hpp: icrc_verify_any_ipv4_id (used when !ip.ipv4_id_known).
// Checks, in this order: too_short (BTH + ICRC), bad_version, bad_opcode, too_short (extension
// headers), bad_pad (the bytes between the extension headers and the ICRC are not a multiple of
// 4, are fewer than PadCnt, or are present on an opcode without payload), bad_icrc.
// `out` is fully overwritten only when the result is ParseError::none.
ParseError parse(std::span<const uint8_t> udp_payload, const IpContext& ip, bool verify_icrc,
                 Packet& out);

} // namespace roce::wire
