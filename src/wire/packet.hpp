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
size_t build(const Packet& pkt, std::span<const uint8_t> payload, const IpContext& ip,
             std::span<uint8_t> out);

// Parses a UDP payload. When `verify_icrc` is set the ICRC is checked against `ip`; for IPv4
// packets whose identification is unknown (a UDP socket does not show it) see
// icrc.hpp: icrc_verify_any_ipv4_id.
ParseError parse(std::span<const uint8_t> udp_payload, const IpContext& ip, bool verify_icrc,
                 Packet& out);

} // namespace roce::wire
